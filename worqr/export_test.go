package worqr

import (
	"context"
	"time"
)

// Test seams: the scheduler's decisions at a Redis time the test chooses,
// so that schedule tests need not wait for real ticks.

// PassAt runs one scheduler pass as if Redis's clock read now.
func (s *Scheduler) PassAt(ctx context.Context, now time.Time) (int, error) {
	return s.pass(ctx, now.UnixMilli())
}

// RegisterAt registers sc as if Redis's clock read now.
func (s *Scheduler) RegisterAt(ctx context.Context, sc Schedule, now time.Time) error {
	return s.register(ctx, sc, now.UnixMilli())
}

// ResumeScheduleAt resumes schedule name as if Redis's clock read now.
func (in *Inspector) ResumeScheduleAt(ctx context.Context, name string, now time.Time) error {
	return in.resumeSchedule(ctx, name, now.UnixMilli())
}

// Zero reports whether o takes the plain enqueue path.
func (o *EnqueueOpts) Zero() bool { return o.zero() }

// Hand-off test helpers shared with the package's external tests.
var (
	StrandTaking = strandTaking
	WaitRan      = waitRan
)

// PassSplitAt runs one scheduler pass as if Redis's clock read now, with
// between called after the pass has read the due schedules and before it
// fires them (a peer's change while the pass runs).
func (s *Scheduler) PassSplitAt(ctx context.Context, now time.Time, between func()) (int, error) {
	at, due, err := s.st.DueSchedules(ctx, now.UnixMilli(), dueBatch)
	if err != nil {
		return 0, err
	}
	read := time.Now()
	between()
	total := 0
	for _, d := range due {
		n, _, err := s.fire(ctx, d, at, read)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// OnResumeRead makes a resume call f once it has read the schedule and
// worked out its next tick, before it writes; undo removes it.
func (in *Inspector) OnResumeRead(f func(name string)) (undo func()) {
	return in.hooks.resumeRead.set(f)
}

// OnRunsForget makes Inspector.Runs call f with the ids it found gone,
// before it drops them from the flow's list; undo removes it.
func (in *Inspector) OnRunsForget(f func(gone []string)) (undo func()) {
	return in.hooks.runsForget.set(f)
}

// OnRunsPage makes Inspector.Runs call f before each page of the run list
// after the first.
func (in *Inspector) OnRunsPage(f func()) (undo func()) { return in.hooks.runsPage.set(f) }

// EnqueuesWaiting returns how many plain Enqueue calls of c to queue wait
// for a group commit call (see Client.clientQueue).
func (c *Client) EnqueuesWaiting(queue string) int {
	q, err := c.clientQueue(queue)
	if err != nil {
		return 0
	}
	return q.enqueue.Waiting()
}

// EndsWaiting returns how many ends of takings of queue wait for a group
// commit call (see Worker.endGroup).
func (w *Worker) EndsWaiting(queue string) int {
	for _, q := range w.queues {
		if q.Member == queue {
			return q.ends.Waiting()
		}
	}
	return 0
}

// OnRemoveForgotten makes Inspector.RemoveQueue call f just after it
// forgot the queue, before it checks it again; undo removes it.
func (in *Inspector) OnRemoveForgotten(f func()) (undo func()) {
	return in.hooks.removeForgotten.set(f)
}

// SetKnownEvery sets how often c records a queue again among the known
// queues (knownTTL by default).
func (c *Client) SetKnownEvery(d time.Duration) { c.knownEvery = d }

// Bounds and periods the tests reach past.
const (
	WaitRecheck            = waitRecheck
	DefaultMaxPayloadBytes = defaultMaxPayloadBytes
	MaxUniqueKeyLen        = maxUniqueKeyLen
)
