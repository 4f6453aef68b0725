package worqrtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/worqr/worqr-go/worqr"
)

// WorkOpts are Work's options. A nil pointer means the defaults.
type WorkOpts struct {
	// Queue is the queue the task is enqueued on and taken from, as the
	// handler sees it in Task.Queue. It must have no task waiting or
	// running. Default: a queue of the call's own, "work-<n>".
	Queue string
	// Enqueue are the task's own options (MaxAttempts, Timeout, Deadline,
	// Key, Meta...). Not Delay nor At: Work runs the task now.
	Enqueue *worqr.EnqueueOpts
	// QueueConfig is how the queue is served (MaxAttempts, Backoff,
	// Timeout...), as a Worker's WorkerConfig.Queues says. Its Handler
	// and BatchHandler must be nil; Concurrency defaults to 1; Retention
	// defaults to a day, so that Result.Task still shows a done task and
	// its result.
	QueueConfig worqr.QueueConfig
	// Attempt is the attempt number the handler runs as (Task.Attempt),
	// default 1. The attempts before it are failed for real, each with an
	// error of its own and the queue's Backoff, and their retries run at
	// once, so that the task reaches the handler as it would after them:
	// it must be at most the task's MaxAttempts.
	Attempt int
}

// Result is how the engine ended a task that Work ran.
type Result struct {
	// Kind is the end recorded in Redis: worqr.EventDone,
	// worqr.EventRetry (a failed attempt, or a worqr.RateLimited one),
	// worqr.EventDead, worqr.EventGivenBack, worqr.EventCancelled, or
	// worqr.EventExpired (taken past its Deadline: the handler did not
	// run).
	Kind worqr.EventKind
	// Err is the handler's error as the end recorded it (a timeout wraps
	// it in a *worqr.TimeoutError, a panic is a *worqr.PanicError); nil
	// when done.
	Err error
	// Attempt is the Task.Attempt the handler saw; 0 when it did not run.
	Attempt int
	// Deadline is the deadline of the handler's context (zero: none):
	// its Timeout from when it started, on the wall clock.
	Deadline time.Time
	// RetryAt is, for EventRetry, when the next attempt is due on Redis's
	// clock (see Env.Now).
	RetryAt time.Time
	// Task is what Redis holds about the task after the end (its State,
	// Result, LastError, Failures...); nil when it holds nothing more.
	Task *worqr.TaskInfo
}

// errEarlier fails the attempts before WorkOpts.Attempt.
var errEarlier = errors.New("worqrtest: failed attempt before WorkOpts.Attempt")

// Work runs one task with payload through handler synchronously, as a
// Worker would: it enqueues the task, starts a Worker of the Env that
// serves its queue with handler, waits for the end of the task's taking,
// and stops the Worker. The outcome is decided by the Worker's own end path
// (retries, backoff, timeouts, panics, SkipRetry, RetryAfter, give-backs,
// dead set), so it is what a Worker in production records.
//
// The handler runs on a goroutine of the Worker: it must report failures
// with t.Error, not t.Fatal. Work fails the test when ctx ends first (10
// seconds when ctx has no deadline), or on bad options.
func (e *Env) Work(ctx context.Context, t testing.TB, handler worqr.Handler, payload []byte, opts *WorkOpts) *Result {
	t.Helper()
	var o WorkOpts
	if opts != nil {
		o = *opts
	}
	ctx, cancel := bound(ctx)
	defer cancel()
	eo, err := workEnqueueOpts(o)
	if err != nil {
		t.Fatalf("worqrtest: Work: %v", err)
	}
	qc := o.QueueConfig
	if qc.Handler != nil || qc.BatchHandler != nil {
		t.Fatalf("worqrtest: Work: WorkOpts.QueueConfig.Handler and BatchHandler must be nil (handler is the one argument)")
	}
	if handler == nil {
		t.Fatalf("worqrtest: Work: handler is nil")
	}
	want := max(o.Attempt, 1)
	queue := o.Queue
	if queue == "" {
		queue = fmt.Sprintf("work-%d", e.queues.Add(1))
	} else if info, err := e.inspector.Queue(ctx, queue); err != nil {
		t.Fatalf("worqrtest: Work: %v", err)
	} else if info.Waiting+info.Active > 0 {
		t.Fatalf("worqrtest: Work: queue %q holds %d waiting and %d running tasks; Work needs it to itself", queue, info.Waiting, info.Active)
	}
	id, err := e.client.Enqueue(ctx, queue, payload, eo)
	if err != nil {
		t.Fatalf("worqrtest: Work: enqueue: %v", err)
	}

	var (
		mu      sync.Mutex
		ran     bool
		res     = &Result{}
		events  []worqr.Event
		changed = make(chan struct{}, 1)
		stop    = make(chan struct{})
	)
	qc.Handler = worqr.HandlerFunc(func(hctx context.Context, task *worqr.Task) error {
		mu.Lock()
		mine := task.ID == id && !ran
		early := mine && task.Attempt < want
		if mine && !early {
			ran = true
			res.Attempt = task.Attempt
			res.Deadline, _ = hctx.Deadline()
		}
		mu.Unlock()
		switch {
		case early:
			return errEarlier
		case !mine:
			// Another task of the queue (one the handler enqueued there),
			// or this one given back and taken again: it is not run, and
			// goes back where it was when the worker stops.
			select {
			case <-stop:
			case <-hctx.Done():
			}
			return worqr.ErrGiveBack
		}
		return handler.HandleTask(hctx, task)
	})
	if qc.Concurrency == 0 {
		qc.Concurrency = 1
	}
	if qc.Retention == 0 {
		qc.Retention = 24 * time.Hour
	}
	w, err := worqr.NewWorker(e.pool, &worqr.WorkerConfig{
		Config:        e.Config(),
		Queues:        map[string]worqr.QueueConfig{queue: qc},
		DisableReaper: true, // the Env moves due tasks; nobody dies here
		OnEvent: func(ev worqr.Event) {
			if ev.TaskID != id || !isEnd(ev.Kind) {
				return
			}
			mu.Lock()
			events = append(events, ev)
			mu.Unlock()
			select {
			case changed <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		t.Fatalf("worqrtest: Work: %v", err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatalf("worqrtest: Work: starting the worker: %v", err)
	}
	stopWorker := func() {
		close(stop)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	}

	var end *worqr.Event
	seen, failed := 0, 0 // ends seen; attempts failed before the wanted one
	for end == nil {
		select {
		case <-ctx.Done():
			stopWorker()
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("worqrtest: Work: task %s of queue %q did not end before %v; its ends so far: %s",
				id, queue, context.Cause(ctx), describeEvents(events))
			return nil
		case <-changed:
		}
		mu.Lock()
		fresh := append([]worqr.Event(nil), events[seen:]...)
		seen = len(events)
		mu.Unlock()
		for i := range fresh {
			ev := fresh[i]
			if failed == want-1 {
				end = &ev
				break
			}
			// An attempt before WorkOpts.Attempt ended: run the next now.
			failed++
			if ev.Kind != worqr.EventRetry {
				stopWorker()
				t.Fatalf("worqrtest: Work: attempt %d of task %s ended %s (%v) before WorkOpts.Attempt %d: is that over the task's MaxAttempts?",
					failed, id, ev.Kind, ev.Err, want)
				return nil
			}
			if _, err := e.inspector.RunNow(ctx, queue, id); err != nil {
				stopWorker()
				t.Fatalf("worqrtest: Work: running attempt %d now: %v", failed+1, err)
				return nil
			}
		}
	}
	stopWorker()
	res.Kind, res.Err = end.Kind, end.Err
	info, err := e.inspector.Task(context.WithoutCancel(ctx), queue, id)
	switch {
	case errors.Is(err, worqr.ErrTaskNotFound):
	case err != nil:
		t.Fatalf("worqrtest: Work: reading task %s: %v", id, err)
	default:
		res.Task = info
		if res.Kind == worqr.EventRetry {
			res.RetryAt = info.DueAt
		}
	}
	return res
}

// workEnqueueOpts checks the task's options of Work.
func workEnqueueOpts(o WorkOpts) (*worqr.EnqueueOpts, error) {
	if o.Attempt < 0 {
		return nil, fmt.Errorf("WorkOpts.Attempt (%d) must not be negative", o.Attempt)
	}
	if o.Enqueue == nil {
		return nil, nil
	}
	if o.Enqueue.Delay != 0 || !o.Enqueue.At.IsZero() {
		return nil, errors.New("WorkOpts.Enqueue.Delay and At must be zero: Work runs the task now")
	}
	eo := *o.Enqueue
	return &eo, nil
}

// isEnd reports whether k ends a taking.
func isEnd(k worqr.EventKind) bool {
	switch k {
	case worqr.EventDone, worqr.EventRetry, worqr.EventDead, worqr.EventGivenBack, worqr.EventCancelled,
		worqr.EventExpired, worqr.EventLost, worqr.EventForwarded, worqr.EventFannedOut:
		return true
	}
	return false
}

// bound gives ctx the kit's default bound when it has no deadline.
func bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeoutCause(ctx, defaultBound, fmt.Errorf("the %s bound of worqrtest (give ctx a deadline for another)", defaultBound))
}

// defaultBound bounds Work and Drain when their ctx has no deadline.
const defaultBound = 10 * time.Second

// describeEvents lists events for a failure message.
func describeEvents(evs []worqr.Event) string {
	if len(evs) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, ev := range evs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(string(ev.Kind))
		if ev.Err != nil {
			fmt.Fprintf(&b, " (%v)", ev.Err)
		}
	}
	return b.String()
}
