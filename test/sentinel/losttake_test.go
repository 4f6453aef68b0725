package sentinel_test

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/worqr"
)

// aRun is one run of the task by a handler.
type aRun struct {
	worker     string
	start, end time.Time
	cause      error // context.Cause of the handler's context when it returned
}

// runLog records the runs of the task.
type runLog struct {
	mu      sync.Mutex
	runs    []*aRun
	lost    []worqr.Event // EventLost of the task
	changed chan struct{} // closed (and replaced) when a run starts or ends
}

func newRunLog() *runLog { return &runLog{changed: make(chan struct{})} }

// changedLocked wakes the waits. Called with l.mu held.
func (l *runLog) changedLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *runLog) handler(worker string) worqr.Handler {
	return worqr.HandlerFunc(func(ctx context.Context, _ *worqr.Task) error {
		r := &aRun{worker: worker, start: time.Now()}
		l.mu.Lock()
		l.runs = append(l.runs, r)
		l.changedLocked()
		l.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(40 * time.Second): // far longer than the test looks
		}
		l.mu.Lock()
		r.end, r.cause = time.Now(), context.Cause(ctx)
		l.changedLocked()
		l.mu.Unlock()
		return ctx.Err()
	})
}

// wait waits until cond holds for the runs, looking again when a run
// starts or ends, and fails the test after d.
func (l *runLog) wait(t *testing.T, what string, d time.Duration, cond func(runs []aRun) bool) {
	t.Helper()
	timeout := time.After(d)
	for {
		l.mu.Lock()
		changed := l.changed
		l.mu.Unlock()
		if cond(l.snapshot()) {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
	}
}

// replicated returns once every write the primary at addr applied so far
// is on a replica: WAIT, on a connection of its own, for a write made
// after them (the replication stream keeps their order).
func replicated(ctx context.Context, addr string) error {
	c, err := redis.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := redis.DoContext(c, ctx, "SET", "sentinel-test:replicated", "1"); err != nil {
		return err
	}
	n, err := redis.Int(redis.DoContext(c, ctx, "WAIT", 1, 10000))
	if err == nil && n < 1 {
		err = errors.New("no replica acknowledged the writes within 10 s")
	}
	return err
}

func (l *runLog) snapshot() []aRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]aRun, len(l.runs))
	for i, r := range l.runs {
		out[i] = *r
	}
	return out
}

// A take that the primary acknowledged and never passed on to its
// replica is lost when the replica is promoted: there the task is
// scheduled again, and another worker takes it while the first handler
// still runs it. After the switch, the first worker finds that the new
// primary does not hold its taking (one read per queue, after a beat that
// confirms its keepalive there) and cancels the handler with
// ErrLostInFailover. The test measures how long the two runs overlapped
// and how long after the promotion the first run was cancelled; without
// the check the first run goes on for as long as its handler likes.
func TestLostTakeCancelledAfterFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, pool := startSentinel(ctx, t)
	// A keepalive that outlives the failover on the replica: the loss of
	// the keepalive (which cancels every handler) is not what is tested.
	cfg := worqr.Config{Namespace: "lostake"}
	l := newRunLog()
	wp := served(t, st, pool) // what the workers and the client run on
	for _, name := range []string{"A", "B"} {
		w, err := worqr.NewWorker(wp, &worqr.WorkerConfig{Config: cfg,
			HeartbeatTTL: 20 * time.Second, HeartbeatInterval: time.Second,
			Queues: map[string]worqr.QueueConfig{"x": {Concurrency: 1, Handler: l.handler(name)}},
			OnEvent: func(e worqr.Event) {
				if e.Kind == worqr.EventLost {
					l.mu.Lock()
					l.lost = append(l.lost, e)
					l.mu.Unlock()
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer func() {
			sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer scancel()
			_ = w.Stop(sctx)
		}()
	}
	// The task is due in 2 s: its enqueue reaches the replica (Replicas
	// 1), its move to the queue and its take do not.
	rcfg := cfg
	rcfg.Replicas, rcfg.ReplicaTimeout = 1, 3*time.Second
	client, err := worqr.NewClient(wp, &rcfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, "x", []byte("x"), &worqr.EnqueueOpts{ID: "x1", Delay: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	// Let the workers' registrations (their keepalives) reach the
	// replica, then cut it off: WAIT on a write after them returns once
	// the replica acknowledged the stream up to it.
	old, replica := st.Nodes[0], st.Nodes[1]
	if err := replicated(ctx, old.Addr); err != nil {
		t.Fatal(err)
	}
	if err := replica.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := cutReplicas(ctx, old.Addr); err != nil {
		t.Fatal(err)
	}
	l.wait(t, "the task to be taken on the cut-off primary", 10*time.Second, func(runs []aRun) bool { return len(runs) == 1 })
	first := l.snapshot()[0]
	// The pool under test counts its switch before any call of it reaches
	// the new primary: the second run starts after it.
	sw, ok := wp.(interface{ Switched() <-chan struct{} })
	if !ok {
		t.Fatalf("the pool under test (%T) does not say when it switches servers", wp)
	}
	switchedAt := make(chan time.Time, 1)
	go func(ch <-chan struct{}) {
		select {
		case <-ch:
			switchedAt <- time.Now()
		case <-ctx.Done():
		}
	}(sw.Switched())
	old.Kill()
	if err := replica.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	next, err := st.WaitNewPrimary(ctx, old.Addr)
	if err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	waitPrimary(t, pool, next, 20*time.Second)
	waitServed(ctx, t, wp, next, 20*time.Second)
	var switched time.Time
	select {
	case switched = <-switchedAt:
	case <-ctx.Done():
		t.Fatal("the pool under test reaches the new primary and counted no switch")
	}

	l.wait(t, "the first run to end", 15*time.Second, func(runs []aRun) bool { return !runs[0].end.IsZero() })
	first = l.snapshot()[0]
	if !errors.Is(first.cause, worqr.ErrLostInFailover) || !errors.Is(first.cause, worqr.ErrTaskLost) {
		t.Fatalf("first run (worker %s) ended with cause %v, want ErrLostInFailover", first.worker, first.cause)
	}
	l.wait(t, "the task to run again from the new primary", 15*time.Second, func(runs []aRun) bool { return len(runs) >= 2 })
	runs := l.snapshot()
	second := runs[1]
	if len(runs) > 2 {
		t.Errorf("the task ran %d times, want 2", len(runs))
	}
	l.mu.Lock()
	lost := append([]worqr.Event(nil), l.lost...)
	l.mu.Unlock()
	if len(lost) != 1 || lost[0].TaskID != "x1" || !errors.Is(lost[0].Err, worqr.ErrLostInFailover) {
		t.Errorf("lost events %+v, want one of x1 with ErrLostInFailover", lost)
	}
	overlap := time.Duration(0)
	if first.end.After(second.start) {
		overlap = first.end.Sub(second.start)
	}
	t.Logf("first run by %s, second by %s; kill->promoted %v, promoted->pool switched %v, "+
		"pool switched->first run cancelled %v, promoted->cancelled %v; the two runs overlapped %v",
		first.worker, second.worker, promoted.Sub(killed), switched.Sub(promoted),
		first.end.Sub(switched), first.end.Sub(promoted), overlap)
	// The overlap is bounded by the detection: the second run started on
	// the new primary, after the pool switched to it, and the first ended
	// when its worker saw the switch. (The test sees the promotion late,
	// and the pool under test may switch before it does: the promotion as
	// the test sees it bounds nothing.)
	if overlap > 0 && overlap > first.end.Sub(switched) {
		t.Errorf("overlap %v longer than pool switched->cancel %v", overlap, first.end.Sub(switched))
	}
}
