package worqr

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/worqr/worqr-go/internal/rdb"
)

// ErrQueueNotFound is returned by Inspector.RemoveQueue for a queue that
// is not known and has nothing in Redis: never named, or removed already.
var ErrQueueNotFound = errors.New("worqr: queue not found")

// ErrQueueNotEmpty matches a *QueueNotEmptyError with errors.Is.
var ErrQueueNotEmpty = errors.New("worqr: queue not empty")

// ErrQueueServed matches a *QueueServedError with errors.Is.
var ErrQueueServed = errors.New("worqr: queue served")

// QueueNotEmptyError is returned by Inspector.RemoveQueue when the queue
// holds tasks and the call was not forced (RemoveQueueOpts.Force), or when
// tasks arrived while it was removed (a producer still enqueues to it):
// the queue stays, and stays known.
type QueueNotEmptyError struct {
	// Held counts what the queue held (its Name, Waiting, Scheduled,
	// Active, Dead, Retained and Keys; the other fields are not read).
	Held QueueInfo
	// Progress is true when the queue holds an indexed consumer's progress.
	Progress bool
	// Arrived is true when the queue was emptied, or found empty, and
	// tasks (or the consumer's progress) came in before it was forgotten.
	Arrived bool
}

func (e *QueueNotEmptyError) Error() string {
	var parts []string
	for _, c := range []struct {
		n    int64
		what string
	}{{e.Held.Waiting, "waiting"}, {e.Held.Scheduled, "scheduled"}, {e.Held.Active, "running"}, {e.Held.Dead, "dead"},
		{e.Held.Retained, "retained"}, {e.Held.Keys, "keys with tasks"}} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	if e.Progress {
		parts = append(parts, "an indexed consumer's progress")
	}
	if e.Arrived {
		return fmt.Sprintf("worqr: remove queue %s: %s arrived while it was removed (a producer still uses it): it stays",
			e.Held.Name, strings.Join(parts, ", "))
	}
	return fmt.Sprintf("worqr: remove queue %s: it holds %s: a queue that holds tasks is removed only when forced (RemoveQueueOpts.Force, --force)",
		e.Held.Name, strings.Join(parts, ", "))
}

// Is makes errors.Is(err, ErrQueueNotEmpty) true.
func (e *QueueNotEmptyError) Is(target error) bool { return target == ErrQueueNotEmpty }

// QueueServedError is returned by Inspector.RemoveQueue while live
// workers (or remote sessions) serve the queue: they registered it, or
// hold takings of it. Force does not pass it: stop them first (a dead
// worker, its keepalive expired, does not count).
type QueueServedError struct {
	Queue   string
	Workers []string
}

func (e *QueueServedError) Error() string {
	return fmt.Sprintf("worqr: remove queue %s: served by %d live worker(s) (%s): a queue a live worker serves is not removed; stop them first",
		e.Queue, len(e.Workers), strings.Join(e.Workers, ", "))
}

// Is makes errors.Is(err, ErrQueueServed) true.
func (e *QueueServedError) Is(target error) bool { return target == ErrQueueServed }

// RemoveQueueOpts tune Inspector.RemoveQueue. A nil *RemoveQueueOpts is
// the zero value: not forced, no progress report.
type RemoveQueueOpts struct {
	// Force deletes the queue's tasks first: its dead workers' takings
	// (requeued, as the reaper would), its waiting and scheduled tasks
	// (those behind an ordered queue's keys and in a fair queue's too),
	// its dead tasks, its
	// retained ended tasks, and an indexed consumer's progress. Without it
	// a queue that holds any of them is refused (*QueueNotEmptyError).
	Force bool
	// Progress is called after each chunk of tasks deleted with how many
	// so far (forced only).
	Progress Progress
}

// removeRounds bounds the rounds of a forced RemoveQueue: each deletes
// what the queue holds; a queue that still holds tasks after them is fed
// faster than it is emptied.
const removeRounds = 3

// RemoveQueue removes stand-alone queue from the namespace: it deletes its
// keys (waiting lists of every level, scheduled, dead and retained sets,
// config and limits, rate log, key heads of an ordered queue, a fair
// queue's keys in turn and their states and policies, parked workers,
// holder index, an indexed consumer's progress), its counters in
// the throughput history, and forgets it from the known queues, so that
// Queues, the dashboard and the metrics no longer list it. It returns how
// many tasks it deleted (forced).
//
// It is refused, with nothing changed:
//   - for a flow's stage or child queue ("<flow>/<queue>"): a flow's
//     queues are named by its definition and share its runs;
//   - while a live worker or remote session serves the queue
//     (*QueueServedError; stop them first, Force does not pass it);
//   - while the queue holds tasks, unless opts.Force
//     (*QueueNotEmptyError).
//
// Forced, it deletes the tasks in chunks of at most 250 (a few ms of Redis
// each, as DeleteAllWaiting and DeleteAllDead), calling opts.Progress.
//
// Every step is idempotent and checks what it finds, so a call cut short
// (a crash, a lost connection) leaves a queue that is still known, maybe
// emptied, and the same call again finishes the removal. The last step
// forgets the queue; a worker that registered it, or tasks enqueued to it,
// found just after that step put it back among the known queues
// (*QueueServedError, *QueueNotEmptyError with Arrived). A Client that
// keeps enqueueing to a removed queue records it known again within a
// minute; a worker that serves it records it when it registers. The
// tag's taking counter stays (pids are never reused), and so does the
// highest priority level the queue's config recorded (never lowered: a
// Client enqueues at a level it saw recorded); unique-key, id,
// batch and bulk-load locks expire on their own. A queue unknown with nothing in
// Redis is ErrQueueNotFound.
func (in *Inspector) RemoveQueue(ctx context.Context, queue string, opts *RemoveQueueOpts) (int, error) {
	ref, err := parseQueue(queue)
	if err != nil {
		return 0, err
	}
	if ref.Flow() {
		return 0, invalid("queue", "%s is a flow queue: a flow's stage and child queues are not removed one by one", queue)
	}
	var o RemoveQueueOpts
	if opts != nil {
		o = *opts
	}
	qk := in.st.Queue(ref)
	known, err := in.st.IsKnownQueue(ctx, ref)
	if err != nil {
		return 0, fmt.Errorf("worqr: remove queue %s: %w", queue, err)
	}
	if err := in.checkServed(ctx, queue, qk, nil); err != nil {
		return 0, err
	}
	deleted := 0
	for round := 0; ; round++ {
		dropped, ok, left, err := in.st.DropQueue(ctx, qk, o.Force)
		if err != nil {
			return deleted, fmt.Errorf("worqr: remove queue %s: %w", queue, err)
		}
		if ok {
			if !known && dropped == 0 && deleted == 0 {
				return 0, ErrQueueNotFound
			}
			break
		}
		if !o.Force || round == removeRounds {
			return deleted, &QueueNotEmptyError{Held: QueueInfo{Name: queue, Waiting: left.Waiting, Scheduled: left.Scheduled,
				Active: left.Held, Dead: left.Dead, Retained: left.Retained, Keys: left.Keys}, Progress: left.Progress,
				Arrived: round > 0}
		}
		n, err := in.purge(ctx, queue, qk, deleted, o.Progress)
		deleted += n
		if err != nil {
			return deleted, err
		}
	}
	last := time.Now().Unix() / 60
	if err := in.st.ForgetQueue(ctx, ref, last-rdb.HistoryMaxMinutes-5, last+5, histOutcomes); err != nil {
		return deleted, fmt.Errorf("worqr: remove queue %s: %w", queue, err)
	}
	// A worker that registered the queue, or a producer that enqueued to
	// it, between the checks and the forgetting: the queue stays known.
	if err := in.recheck(ctx, queue, qk); err != nil {
		if aerr := in.st.AddKnownQueues(ctx, []rdb.QueueRef{ref}); aerr != nil {
			return deleted, errors.Join(err, fmt.Errorf("worqr: remove queue %s: record it known again: %w", queue, aerr))
		}
		return deleted, err
	}
	return deleted, nil
}

// recheck fails when queue, just forgotten, is served or holds tasks.
func (in *Inspector) recheck(ctx context.Context, queue string, qk rdb.QueueKeys) error {
	if f, ok := in.hooks.removeForgotten.get(); ok {
		f()
	}
	st, err := in.st.Stats(ctx, []rdb.QueueKeys{qk})
	if err != nil {
		return fmt.Errorf("worqr: remove queue %s: check it again: %w", queue, err)
	}
	s := st[0]
	if s.Waiting+s.Scheduled+s.Active+s.Dead+s.Retained+s.Keys > 0 {
		return &QueueNotEmptyError{Held: QueueInfo{Name: queue, Waiting: s.Waiting, Scheduled: s.Scheduled, Active: s.Active,
			Dead: s.Dead, Retained: s.Retained, Keys: s.Keys}, Arrived: true}
	}
	return in.checkServed(ctx, queue, qk, nil)
}

// checkServed fails with a *QueueServedError when a live worker
// registered queue or holds takings of it; it returns the dead workers
// holding takings in dead.
func (in *Inspector) checkServed(ctx context.Context, queue string, qk rdb.QueueKeys, dead *[]string) error {
	ids, err := in.reg.Workers(ctx)
	if err != nil {
		return fmt.Errorf("worqr: remove queue %s: workers: %w", queue, err)
	}
	infos, err := in.reg.Describe(ctx, ids)
	if err != nil {
		return fmt.Errorf("worqr: remove queue %s: workers: %w", queue, err)
	}
	alive := map[string]bool{}
	var serving []string
	for _, w := range infos {
		alive[w.ID] = w.Alive
		if w.Alive && slices.Contains(w.Queues, qk.Ref) {
			serving = append(serving, w.ID)
		}
	}
	hs, err := in.st.Holders(ctx, []rdb.QueueKeys{qk})
	if err != nil {
		return fmt.Errorf("worqr: remove queue %s: holders: %w", queue, err)
	}
	if len(hs[0]) > 0 {
		// A holder not in the registry (forgotten by a reaper that had not
		// requeued it yet) has no keepalive either.
		live, err := in.st.Alive(ctx, hs[0])
		if err != nil {
			return fmt.Errorf("worqr: remove queue %s: holders: %w", queue, err)
		}
		for i, w := range hs[0] {
			switch {
			case live[i] && !slices.Contains(serving, w):
				serving = append(serving, w)
			case !live[i] && dead != nil:
				*dead = append(*dead, w)
			}
		}
	}
	if len(serving) > 0 {
		slices.Sort(serving)
		return &QueueServedError{Queue: queue, Workers: serving}
	}
	return nil
}

// purge is one round of a forced RemoveQueue: it requeues the takings of
// dead workers (as the reaper would), then deletes the dead tasks, the
// waiting and scheduled ones and the retained ones, in bulk chunks. before
// is the count of an earlier round, for progress.
func (in *Inspector) purge(ctx context.Context, queue string, qk rdb.QueueKeys, before int, progress Progress) (int, error) {
	var dead []string
	if err := in.checkServed(ctx, queue, qk, &dead); err != nil {
		return 0, err
	}
	if len(dead) > 0 {
		if _, _, err := in.st.Requeue(ctx, qk, dead, false); err != nil {
			return 0, fmt.Errorf("worqr: remove queue %s: requeue the takings of dead workers: %w", queue, err)
		}
	}
	total := 0
	var pg Progress
	if progress != nil {
		pg = func(done int) { progress(before + total + done) }
	}
	// The dead first: a dead head of an ordered queue's key moves its key
	// on when deleted, and the waiting tasks go next.
	n, err := in.deadAll(ctx, queue, rdb.DeadDelete, pg)
	total += n
	if err != nil {
		return total, fmt.Errorf("worqr: remove queue %s: %w", queue, err)
	}
	n, err = in.bulk(ctx, queue, rdb.BulkDelete, pg)
	total += n
	if err != nil {
		return total, fmt.Errorf("worqr: remove queue %s: %w", queue, err)
	}
	for {
		n, err := in.st.DeleteRetained(ctx, qk)
		total += n
		if err != nil {
			return total, fmt.Errorf("worqr: remove queue %s: delete retained tasks: %w", queue, err)
		}
		if progress != nil && n > 0 {
			progress(before + total)
		}
		if n < rdb.BulkStep {
			return total, nil
		}
	}
}
