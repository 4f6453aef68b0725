package worqr_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// A QueueConfig.Backoff that panics (a type assertion on the error that
// did not hold, a nil map) was called on the handler goroutine outside the
// handler's recover: the whole worker process crashed at each failed
// attempt, every other running handler with it, and the task ran again
// elsewhere until MaxCrashes buried it as crashed. A panic in the handler
// is a failed attempt; one in its Backoff now is too, retried after the
// default backoff. The worker runs in a child process (a crash would end
// the test binary).
func TestBackoffThatPanicsIsNoCrash(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	ch := startChild(t, "backoffpanic", ns)
	id, err := c.Enqueue(ctx, "bp", []byte("p"), nil)
	if err != nil {
		t.Fatal(err)
	}
	// The default backoff after a first failure is 0.5 to 1 s.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := c.Wait(wctx, "bp", id)
	if err != nil || info.State != worqr.StateDone || info.Failures != 1 {
		t.Fatalf("Wait = %+v, %v; want done after one failed attempt (worker exited: %v)", info, err, ch.cmd.ProcessState)
	}
	if ch.cmd.ProcessState != nil {
		t.Fatalf("the worker process exited: %v", ch.cmd.ProcessState)
	}
}

// A failed attempt whose retry would be due after the task's Deadline is
// due at the deadline, so that the task ends (expired: the take finds it
// past its deadline) without waiting out the whole backoff (here 3 s; up to
// an hour by default). It waited it out (found by an audit).
func TestRetryPastDeadlineIsDueAtIt(t *testing.T) {
	ctx := context.Background()
	bundle := setup(t)
	pool, ns, c := bundle.pool, bundle.ns, bundle.client
	wc := fastTimings(ns)
	wc.Queues = map[string]worqr.QueueConfig{"q": {Concurrency: 1, Retention: time.Minute,
		Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
			return worqr.RetryAfter(3*time.Second, errors.New("again"))
		})}}
	bundle.startWorker(wc)
	deadline := time.Now().Add(time.Second)
	id, err := c.Enqueue(ctx, "q", []byte("p"), &worqr.EnqueueOpts{Deadline: deadline})
	if err != nil {
		t.Fatal(err)
	}
	conn := pool.Get()
	defer conn.Close()
	sched := rdb.NewKeys(ns).Queue(rdb.Standalone("q")).Scheduled
	var due int64
	wait(t, 10*time.Second, "the retry to be scheduled", func() bool {
		due, err = redis.Int64(conn.Do("ZSCORE", sched, id))
		return err == nil
	})
	if due > deadline.UnixMilli() {
		t.Fatalf("the retry is due %d ms past the task's deadline", due-deadline.UnixMilli())
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := c.Wait(wctx, "q", id)
	if err != nil || info.State != worqr.StateExpired || !strings.Contains(info.LastError, "again") {
		t.Fatalf("Wait = %+v, %v; want expired, with the last error kept", info, err)
	}
	bundle.events.waitFor(t, 10*time.Second, "the worker's expired event", func(e worqr.Event) bool {
		return e.TaskID == id && e.Kind == worqr.EventExpired
	})
}

// TestRateLimitedKeepsAttempt: a handler that says "rate limited" runs
// again later without spending an attempt (MaxAttempts 1 would bury a
// failure at once).
func TestRateLimitedKeepsAttempt(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	c := newClient(t, pool, &worqr.Config{Namespace: ns})
	in := newInspector(t, pool, &worqr.Config{Namespace: ns})
	var calls atomic.Int32
	var attempts sync.Map
	done := make(chan struct{})
	startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: worqr.Config{Namespace: ns}, ReaperInterval: 10 * time.Millisecond,
		Queues: map[string]worqr.QueueConfig{"rl": {Concurrency: 1, MaxAttempts: 1, Retention: time.Minute,
			Handler: worqr.HandlerFunc(func(_ context.Context, tk *worqr.Task) error {
				n := calls.Add(1)
				attempts.Store(n, tk.Attempt)
				if n < 4 {
					return worqr.RateLimited(5*time.Millisecond, fmt.Errorf("quota %d", n))
				}
				close(done)
				return nil
			})}}})
	id, err := c.Enqueue(ctx, "rl", []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the rate-limited task did not run four times")
	}
	for i := int32(1); i <= 4; i++ {
		if a, _ := attempts.Load(i); a != 1 {
			t.Errorf("run %d had Attempt %v, want 1 (no attempt spent)", i, a)
		}
	}
	wait(t, 5*time.Second, "the task to end as done", func() bool {
		info, err := in.Task(ctx, "rl", id)
		return err == nil && info.State == worqr.StateDone && info.Failures == 0
	})
}
