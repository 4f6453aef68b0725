package worqr

import (
	"context"
	"time"
)

// Task is one taking of a task, as a handler sees it.
type Task struct {
	// ID is the task's id (an xid), stable across retries and requeues.
	ID string
	// Queue is the queue it was taken from.
	Queue string
	// Payload is the bytes given to Enqueue, unchanged.
	Payload []byte
	// Attempt counts takings of this task, starting at 1. A task requeued
	// after a crash or given back is taken again with the next number.
	Attempt int

	pid    string
	worker string
}

// PID is the id of this taking, unique within the queue's tag.
func (t *Task) PID() string { return t.pid }

// WorkerID is the id the worker held when it took the task.
func (t *Task) WorkerID() string { return t.worker }

// Handler runs tasks. The context ends when the task is cancelled, when the
// worker loses its keepalive and when Worker.Stop runs out of time;
// context.Cause tells which. Return nil when the work is done; return
// ErrGiveBack to put the task back at the front of its queue.
//
// Execution is at-least-once: after a crash or a lost keepalive the task runs
// again elsewhere, so handlers must be idempotent.
type Handler interface {
	HandleTask(ctx context.Context, t *Task) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, t *Task) error

// HandleTask calls f(ctx, t).
func (f HandlerFunc) HandleTask(ctx context.Context, t *Task) error { return f(ctx, t) }

// TaskState is where a task stands.
type TaskState string

// The states Client.Task reports.
const (
	StateQueued TaskState = "queued"
	StateActive TaskState = "active"
)

// TaskInfo is what Redis holds about a task.
type TaskInfo struct {
	ID      string
	Queue   string
	Payload []byte
	State   TaskState
	// Attempt is the number of takings so far.
	Attempt int
	// Crashes counts takings lost to a dead worker.
	Crashes int
	// WorkerID and PID name the current taking while State is active.
	WorkerID string
	PID      string
	// CancelRequested is true when Cancel was called while it ran.
	CancelRequested bool
	// EnqueuedAt is read from the task id (second precision).
	EnqueuedAt time.Time
}

// EventKind names what happened.
type EventKind string

// The events a Worker reports through WorkerConfig.OnEvent.
const (
	// EventDone: a taking was finished and Redis accepted it.
	EventDone EventKind = "done"
	// EventCancelled: a taking ended as cancelled (Cancel was called).
	EventCancelled EventKind = "cancelled"
	// EventGivenBack: a taking was put back at the front of its queue.
	EventGivenBack EventKind = "given_back"
	// EventLost: a finish or give-back was refused (ErrTaskLost) or dropped
	// because the keepalive of the taking's worker id was lost.
	EventLost EventKind = "lost"
	// EventDropped: a task id without task data was taken and dropped.
	EventDropped EventKind = "dropped"
	// EventKeepaliveLost: the worker id died; handlers were cancelled.
	EventKeepaliveLost EventKind = "keepalive_lost"
	// EventRegistered: the worker registered (at start or after a loss).
	EventRegistered EventKind = "registered"
	// EventRecovered: this worker's reaper requeued a dead worker's tasks.
	EventRecovered EventKind = "recovered"
	// EventStopRequeued: Stop ran out of time and requeued running tasks.
	EventStopRequeued EventKind = "stop_requeued"
	// EventError: a background step failed and will be retried.
	EventError EventKind = "error"
)

// Event is one thing that happened in a Worker.
type Event struct {
	Kind     EventKind
	WorkerID string
	Queue    string
	TaskID   string
	PID      string
	// Err is the handler's error (EventDone), or what failed.
	Err error
	// Count is the number of tasks an EventRecovered or EventStopRequeued
	// concerned; DeadWorkers names the workers recovered.
	Count       int
	DeadWorkers []string
}
