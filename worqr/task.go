package worqr

import (
	"context"
	"strings"
	"time"

	"github.com/worqr/worqr-go/defaults"

	"github.com/worqr/worqr-go/internal/rdb"
)

// Task is one taking of a task, as a handler sees it.
type Task struct {
	// ID is the task's id (an xid), stable across retries and requeues.
	ID string
	// Queue is the queue it was taken from.
	Queue string
	// Payload is the bytes given to Enqueue, unchanged. For a task that
	// was merged into (KeyPolicy.Merge), the payload with the highest score
	// (the latest, by default); all of them are in Payloads.
	Payload []byte
	// Key is the task's EnqueueOpts.Key ("" for a task enqueued without).
	Key string
	// Payloads holds every payload of a task enqueued with a Key, in score
	// order: one, or several once merged into (KeyPolicy.Merge).
	Payloads []Payload
	// Attempt is 1 on the first run and grows by one with each failed
	// attempt. A run lost to a crash or given back does not count: the
	// next run has the same number (see Crashes).
	Attempt int
	// Crashes counts runs of this task lost because their worker died.
	Crashes int
	// Type is the task's type when a Mux routed it ("" otherwise).
	Type string
	// Meta is the metadata the task was created with: its
	// EnqueueOpts.Meta, or for a flow child its ChildSpec.Meta (nil when
	// none). A handler may read it; changes are not stored.
	Meta map[string]string

	pid    string
	worker string
	result []byte
	report func(ctx context.Context, text string) error
}

// Progress records text (say "40%" or "page 3 of 7") as the task's progress,
// readable with Inspector.Task (TaskInfo.Progress) and Inspector.Tasks while the
// task runs and, with Retention, after. It is one round trip; the report is
// refused with ErrTaskLost, changing nothing, once this run no longer owns
// the task (its worker's keepalive was lost and another run may have it).
// A new run does not clear the last run's report. text is at most 1,024
// bytes.
func (t *Task) Progress(ctx context.Context, text string) error {
	if len(text) > defaults.MaxProgressLen {
		return invalid("text", "is %d bytes long (at most %d)", len(text), defaults.MaxProgressLen)
	}
	if t.report == nil {
		return invalid("Task", "is not a running task (Progress works on the tasks a Worker hands its handlers)")
	}
	return t.report(ctx, text)
}

// SetResult sets the bytes recorded as the task's result when the handler
// returns nil. They are readable with Inspector.Task and Client.Wait while
// the task's retention (EnqueueOpts.Retention, else its queue's Retention)
// keeps it; with neither, a done task with a result is kept 24 h. At most Config.MaxPayloadBytes (the results of
// a batch's tasks together at most 4 MiB, or MaxPayloadBytes when larger):
// a larger result is not written, and the task goes to the dead set with
// an *InvalidError naming Task.SetResult as its reason.
func (t *Task) SetResult(b []byte) { t.result = b }

// PID is the id of this taking, unique within the queue's tag.
func (t *Task) PID() string { return t.pid }

// WorkerID is the id the worker held when it took the task.
func (t *Task) WorkerID() string { return t.worker }

// Handler runs tasks. The context ends when the task is cancelled, when the
// worker loses its keepalive, when a failover lost its taking
// (ErrLostInFailover: the new primary does not hold it) and when Worker.Stop
// runs out of time; context.Cause tells which. Return nil when the work is done; return
// ErrGiveBack to put the task back at the front of its queue.
//
// Execution is at-least-once: after a crash or a lost keepalive the task runs
// again elsewhere, so handlers must be idempotent.
//
// A handler returns. A panic is recovered and counts as a failed attempt
// (PanicError), and so does a handler that ends its goroutine with
// runtime.Goexit, as testing's FailNow does (ErrHandlerExited).
type Handler interface {
	HandleTask(ctx context.Context, t *Task) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, t *Task) error

// HandleTask calls f(ctx, t).
func (f HandlerFunc) HandleTask(ctx context.Context, t *Task) error { return f(ctx, t) }

// TaskState is where a task stands.
type TaskState string

// The states Inspector.Task reports.
const (
	StateQueued    TaskState = "queued"    // waiting in the queue
	StateActive    TaskState = "active"    // taken by a worker
	StateScheduled TaskState = "scheduled" // delayed, or waiting for a retry
	StateDead      TaskState = "dead"      // in the dead set
	StateDone      TaskState = "done"      // ended well (kept for Retention)
	StateCancelled TaskState = "cancelled" // ended by Cancel (kept for Retention)
	// StateExpired: taken after its EnqueueOpts.Deadline, so not run
	// (again: a failed attempt whose retry would be due past the deadline
	// is due at it, and keeps its LastError) (kept for Retention).
	StateExpired TaskState = "expired"
)

// TaskInfo is what Redis holds about a task.
type TaskInfo struct {
	ID    string
	Queue string
	// Payload is the payload as stored: a typed task's (Type) starts with
	// its type's envelope; HandlerPayload is without it.
	Payload []byte
	// Type is the task's type when it was enqueued with one
	// (EnqueueOpts.Type); "" otherwise.
	Type string
	// Key and Payloads are as in Task (tasks enqueued with a Key).
	Key      string
	Payloads []Payload
	// Meta is the task's metadata (EnqueueOpts.Meta, or a flow child's
	// ChildSpec.Meta), as its handler gets it in Task.Meta; nil when none.
	Meta  map[string]string
	State TaskState
	// Failures counts failed attempts so far.
	Failures int
	// Crashes counts runs lost to a dead worker.
	Crashes int
	// LastError is the error of the last failed attempt.
	LastError string
	// DeadReason says why a dead task died: "failed" (attempts used up or
	// SkipRetry), "crashed: ...", "corrupt: ..." or "missing: ...".
	DeadReason string
	// DiedAt and DiedOn say when, and on which worker, it died.
	DiedAt time.Time
	DiedOn string
	// DueAt is when a scheduled task becomes available.
	DueAt time.Time
	// Result is what the handler set with Task.SetResult (done tasks).
	Result []byte
	// Progress is the last report of Task.Progress.
	Progress string
	// FinishedAt is when a done, cancelled or expired task ended.
	FinishedAt time.Time
	// Deadline is the task's EnqueueOpts.Deadline (zero: none).
	Deadline time.Time
	// Retention is the task's own EnqueueOpts.Retention (0: the queue's).
	Retention time.Duration
	// WorkerID and PID name the current taking while State is active.
	WorkerID string
	PID      string
	// CancelRequested is true when Cancel was called while it ran.
	CancelRequested bool
	// EnqueuedAt is when it was enqueued, read from the task id (second
	// precision; a periodic tick's id, "<schedule>.<tick unix ms>",
	// carries its tick's time); for an id of the caller's choosing
	// (EnqueueOpts.ID) that has no tick's shape, Redis's time of the
	// enqueue (zero for a task enqueued by a version that did not keep
	// it).
	EnqueuedAt time.Time
	// Priority is its EnqueueOpts.Priority (0: none).
	Priority int
	// UniqueKey is its EnqueueOpts.UniqueKey (or its entry of UniqueKeys)
	// while its lock holds ("" when none).
	UniqueKey string
	// MaxAttempts and Timeout are its own EnqueueOpts.MaxAttempts and
	// Timeout (0: the queue's; a negative Timeout: no limit).
	MaxAttempts int
	Timeout     time.Duration
	// StartedAt is when its latest attempt started (Redis time; zero when
	// it never ran). RanFor is how long that attempt ran: until it ended
	// (it failed, or the task is done, cancelled, expired or dead), or,
	// while the task is active, until this read, by this process's clock;
	// zero when unknown (a run lost to a crash or given back).
	StartedAt time.Time
	RanFor    time.Duration
	// Attempts are its last failed attempts, oldest first: at most
	// 10, kept with the task (its retention or deletion
	// removes them). Inspector.Task reads them; listings leave them nil.
	Attempts []AttemptInfo
}

// AttemptInfo is one failed attempt of a task.
type AttemptInfo struct {
	// Number is its attempt number (Task.Attempt). A task requeued from
	// the dead set counts again from 1.
	Number int
	// StartedAt is when it started (zero when unknown), EndedAt when it
	// ended (Redis time).
	StartedAt, EndedAt time.Time
	// Outcome is what its failure led to: "retry" (the task ran again
	// later) or "dead".
	Outcome string
	// WorkerID is the worker that ran it (for a remote worker, its
	// gateway session's).
	WorkerID string
	// Error is its error, cut as LastError is.
	Error string
}

// RanFor is how long the attempt ran (0 when its start is unknown).
func (a AttemptInfo) RanFor() time.Duration {
	if a.StartedAt.IsZero() || a.EndedAt.Before(a.StartedAt) {
		return 0
	}
	return a.EndedAt.Sub(a.StartedAt)
}

// HandlerPayload returns the payload as a Mux hands it to its handler:
// Payload without a typed task's envelope (Payload itself for a task with
// no Type).
func (t *TaskInfo) HandlerPayload() []byte {
	if _, p, ok := splitTyped(t.Payload); ok {
		return p
	}
	return t.Payload
}

// fillRecord sets what t reads from r beyond the basics: its type, its own
// options, its timing and its history.
func (t *TaskInfo) fillRecord(r *rdb.TaskRecord, now time.Time) {
	if typ, _, ok := splitTyped(t.Payload); ok {
		t.Type = typ
	}
	t.Priority, t.MaxAttempts = r.Priority, r.MaxAttempts
	// The lock's key is "<ns>:{<tag>}:u:<queue>:<unique key>"; neither a
	// namespace nor a queue name holds '}' or ':'.
	if i := strings.Index(r.Unique, "}:u:"); i >= 0 {
		if _, key, ok := strings.Cut(r.Unique[i+4:], ":"); ok {
			t.UniqueKey = key
		}
	}
	t.Timeout = time.Duration(r.TimeoutMs) * time.Millisecond // -1 ms: no limit
	if t.EnqueuedAt.IsZero() && r.EnqueuedAt > 0 {
		t.EnqueuedAt = time.UnixMilli(r.EnqueuedAt) // the id said nothing
	}
	t.StartedAt = msTime(r.StartedAt)
	for _, a := range r.Attempts {
		t.Attempts = append(t.Attempts, AttemptInfo{Number: a.Number, StartedAt: msTime(a.StartedAt),
			EndedAt: msTime(a.EndedAt), Outcome: a.Outcome, WorkerID: a.Worker, Error: a.Error})
	}
	t.RanFor = t.ranFor(now)
}

// ranFor is how long the task's latest attempt ran (see RanFor).
func (t *TaskInfo) ranFor(now time.Time) time.Duration {
	start := t.StartedAt
	since := func(end time.Time) time.Duration {
		if end.IsZero() || end.Before(start) {
			return 0
		}
		return end.Sub(start)
	}
	switch n := len(t.Attempts); {
	case start.IsZero():
		return 0
	case t.State == StateActive:
		return since(now)
	case n > 0 && t.Attempts[n-1].StartedAt.Equal(start):
		return since(t.Attempts[n-1].EndedAt) // the latest attempt failed
	}
	switch t.State {
	case StateDone, StateCancelled, StateExpired:
		return since(t.FinishedAt)
	case StateDead:
		if t.DeadReason == "failed" {
			return since(t.DiedAt)
		}
	}
	return 0
}

// EventKind names what happened.
type EventKind string

// The events a Worker reports through WorkerConfig.OnEvent, and that
// Inspector.Follow delivers from every process of the namespace (the Client
// and Inspector kinds below come only through Follow).
const (
	// EventDone: a taking was finished and Redis accepted it (for a flow's
	// last stage: the run is done).
	EventDone EventKind = "done"
	// EventCancelled: a taking ended as cancelled (Cancel was called).
	EventCancelled EventKind = "cancelled"
	// EventGivenBack: a taking was put back at the front of its queue.
	EventGivenBack EventKind = "given_back"
	// EventLost: a finish or give-back was refused (ErrTaskLost) or dropped
	// because the keepalive of the taking's worker id was lost.
	EventLost EventKind = "lost"
	// EventRetry: a failed attempt; the task is scheduled to run again.
	EventRetry EventKind = "retry"
	// EventDead: the task went to the dead set (Err says why).
	EventDead EventKind = "dead"
	// EventExpired: a taking ended as expired: the task was taken after
	// its EnqueueOpts.Deadline and was not run.
	EventExpired EventKind = "expired"
	// EventForwarded: a flow stage ended and its run moved to the next stage.
	EventForwarded EventKind = "forwarded"
	// EventFannedOut: a flow stage ended by fanning out children.
	EventFannedOut EventKind = "fanned_out"
	// EventKeepaliveLost: the worker id died; handlers were cancelled.
	EventKeepaliveLost EventKind = "keepalive_lost"
	// EventRegistered: the worker registered (at start or after a loss).
	EventRegistered EventKind = "registered"
	// EventRecovered: this worker's reaper requeued a dead worker's tasks
	// (or a reaper reported with Client.ReportRecovered: WorkerID names it).
	EventRecovered EventKind = "recovered"
	// EventStopRequeued: Stop ran out of time and requeued running tasks.
	EventStopRequeued EventKind = "stop_requeued"
	// EventError: a background step failed and will be retried; or (with
	// Config.Replicas) the end of taking PID of TaskID was recorded on the
	// primary but too few replicas acknowledged it (Err matches
	// ErrNotReplicated; the event of its outcome follows).
	EventError EventKind = "error"
	// EventStarted: a handler started running a taking.
	EventStarted EventKind = "started"
	// EventStuck: a taking has run for its queue's StuckAfter (Running
	// says how long) and still runs; reported once per taking, by the
	// worker that runs it (for a remote worker, the process that serves
	// its session).
	EventStuck EventKind = "stuck"
	// EventEnqueued (a Client): tasks were enqueued (Count of them; TaskID
	// is set for a single one).
	EventEnqueued EventKind = "enqueued"
	// EventPaused and EventResumed (an Inspector): a queue was paused or
	// resumed.
	EventPaused  EventKind = "paused"
	EventResumed EventKind = "resumed"
	// EventSignalled (a Client): a signal reached run TaskID
	// (Client.Signal): Count is 1 when the run waited for it and moves on,
	// 0 when it was kept for the stage end that awaits it.
	EventSignalled EventKind = "signalled"
	// EventDropped: Count events were not published because a process
	// observed more than it could buffer in one Config.EventInterval
	// (10,000 events, or about 4 MiB of them).
	EventDropped EventKind = "dropped"
)

// EventKinds returns every kind of event, in the order they are listed
// above (for tools that filter by kind: a kind not among them never
// comes).
func EventKinds() []EventKind {
	return []EventKind{EventDone, EventCancelled, EventGivenBack, EventLost, EventRetry, EventDead,
		EventExpired, EventForwarded, EventFannedOut, EventKeepaliveLost, EventRegistered, EventRecovered,
		EventStopRequeued, EventError, EventStarted, EventStuck, EventEnqueued, EventPaused, EventResumed, EventSignalled,
		EventDropped}
}

// Event is one thing that happened in a Worker (or, followed through
// Inspector.Follow, in a Client or Inspector of the namespace).
type Event struct {
	Kind EventKind
	// At is when the process that observed it did (its own clock).
	At       time.Time
	WorkerID string
	// Queue is the queue as the Inspector names it: "<flow>/<queue>" for
	// a flow's stage or child queue ("" for a run's own cancel).
	Queue  string
	TaskID string
	PID    string
	// Err is the handler's error (EventDone), or what failed.
	// OnEvent gets it whole; an event published to other processes
	// (Follow) carries its text cut to its first 8 KiB, as the task's
	// stored error (TaskInfo.LastError) is.
	Err error
	// Count is the number of tasks an EventRecovered or EventStopRequeued
	// concerned; DeadWorkers names the workers recovered.
	Count       int
	DeadWorkers []string
	// Running is how long the taking had run (EventStuck).
	Running time.Duration
}
