package worqr

import (
	"errors"
	"fmt"
	"time"

	"github.com/worqr/worqr-go/heartbeat"
	"github.com/worqr/worqr-go/internal/rdb"
)

// ErrTaskLost is returned (and reported in events) when a worker tries to
// finish or give back a taking it no longer owns: its keepalive expired and a
// peer requeued the task. Nothing was recorded.
var ErrTaskLost = rdb.ErrLost

// ErrLostInFailover is the cause of a handler context cancelled because,
// after the pool moved to a new primary (a Sentinel or Cluster failover),
// the new primary does not hold the taking: the old primary acknowledged
// the take and failed before a replica got it, so on the new primary the
// task is waiting again (or already taken by another worker). The worker
// sends no end for it and reports an EventLost. It matches ErrTaskLost.
var ErrLostInFailover = fmt.Errorf("worqr: taking lost in a failover (the new primary does not hold it): %w", ErrTaskLost)

// ErrTaskNotFound is returned by Inspector.Task when no task has that id in
// that queue (or, without a queue, in any known queue), by Inspector.Run
// and Client.WaitRun when no run of that flow has that id, and by
// Client.Wait: it never existed, or it ended and its record is gone.
var ErrTaskNotFound = errors.New("worqr: task not found")

// ErrKeepaliveLost is the cause of a handler context cancelled because the
// worker's keepalive was lost (context.Cause(ctx) returns it).
var ErrKeepaliveLost = heartbeat.ErrLost

// ErrTaskCancelled is the cause of a handler context cancelled because
// Client.Cancel was called for the task.
var ErrTaskCancelled = errors.New("worqr: task cancelled")

// ErrWorkerStopped is the cause of a handler context cancelled because
// Worker.Stop ran out of time; the task was put back at the front of its queue.
var ErrWorkerStopped = errors.New("worqr: worker stopped")

// ErrGiveBack, returned by a handler (possibly wrapped), puts the task back at
// the front of its queue without counting a failure.
var ErrGiveBack = errors.New("worqr: give back")

// ErrHandlerExited is the error a task's attempt ends with when its handler
// ended its goroutine with runtime.Goexit (as testing's FailNow does)
// instead of returning: the attempt counts as failed, like a panic, and the
// worker goes on with a new handler goroutine.
var ErrHandlerExited = errors.New("worqr: handler called runtime.Goexit instead of returning")

// ErrDuplicate is returned by Enqueue when EnqueueOpts.UniqueKey is held by
// another task that has not ended. Nothing was enqueued.
var ErrDuplicate = rdb.ErrDuplicate

// ErrNotReplicated matches, with errors.Is, the error of an enqueue or an
// end that was applied on the primary but not acknowledged by
// Config.Replicas replicas within Config.ReplicaTimeout (a *ReplicaError).
// The write is not undone: it is lost only if the primary fails before a
// replica gets it.
var ErrNotReplicated = rdb.ErrNotReplicated

// ReplicaError says how many replicas acknowledged a write (Got) of those
// Config.Replicas asked for (Want) within Config.ReplicaTimeout (Timeout).
// It matches ErrNotReplicated.
type ReplicaError = rdb.ReplicaError

// ErrSkipRetry, wrapped into a handler's error (see SkipRetry), sends the task
// to the dead set at once instead of retrying it.
var ErrSkipRetry = errors.New("worqr: skip retry")

// SkipRetry returns an error that sends the task to the dead set at once, with
// err as its last error (its text as is: the dead set groups tasks by it).
// Use it for work that can never succeed, such as a payload that cannot be
// decoded. It matches ErrSkipRetry and err.
func SkipRetry(err error) error {
	if err == nil {
		return ErrSkipRetry
	}
	return &skipRetryError{err}
}

// skipRetryError is err, marked to skip the retries.
type skipRetryError struct{ err error }

func (e *skipRetryError) Error() string   { return e.err.Error() }
func (e *skipRetryError) Unwrap() []error { return []error{ErrSkipRetry, e.err} }

type retryAfterError struct {
	Delay time.Duration
	Err   error
}

func (e *retryAfterError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("worqr: retry after %s", e.Delay)
	}
	return fmt.Sprintf("worqr: retry after %s: %v", e.Delay, e.Err)
}

func (e *retryAfterError) Unwrap() error { return e.Err }

// RetryAfter returns an error that, returned by a handler, schedules the
// next attempt after d instead of the queue's backoff. The attempt still
// counts against MaxAttempts. The error wraps err (nil is allowed).
func RetryAfter(d time.Duration, err error) error { return &retryAfterError{Delay: d, Err: err} }

type rateLimitedError struct {
	Delay time.Duration
	Err   error
}

func (e *rateLimitedError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("worqr: rate limited, retry in %s", e.Delay)
	}
	return fmt.Sprintf("worqr: rate limited, retry in %s: %v", e.Delay, e.Err)
}

func (e *rateLimitedError) Unwrap() error { return e.Err }

// RateLimited returns an error that, returned by a handler, runs the task
// again after d (at least 1ms) without counting a failed attempt, unlike
// RetryAfter: the work did not fail, something it depends on (an API's
// quota, say) asked it to wait. Its Attempt stays the same, so MaxAttempts
// never sends it to the dead set; err (nil is allowed) is recorded as the
// task's last error, and the returned error wraps it.
func RateLimited(d time.Duration, err error) error { return &rateLimitedError{Delay: d, Err: err} }

// ErrInvalid matches every InvalidError with errors.Is.
var ErrInvalid = errors.New("worqr: invalid input")

// InvalidError is returned for input that cannot work. Field names what was
// wrong, Rule the rule it broke. Nothing was written to Redis.
type InvalidError struct {
	Field string
	Rule  string
}

func (e *InvalidError) Error() string { return "worqr: " + e.Field + " " + e.Rule }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Rule: fmt.Sprintf(format, args...)}
}
