package worqr_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// A worker that finds its keepalive lost puts back what it held under the
// dead id itself (requeueLost), before any reaper does: after a failover of
// a Redis Cluster's registry master no reaper pass finds that id, and its
// takings would wait for a sweep minutes later. With no reaper running
// anywhere, the task cancelled by the loss runs again under the worker's
// new id.
func TestLostKeepaliveRequeuesItsOwnTakings(t *testing.T) {
	l := lostMidTask(t, worqr.WorkerConfig{DisableReaper: true, PollInterval: 100 * time.Millisecond},
		func(ctx context.Context) error { return ctx.Err() })
	select {
	case got := <-l.started:
		if got != l.id || l.w.ID() == l.dead {
			t.Fatalf("ran %s under %s, want %s under a new id", got, l.w.ID(), l.id)
		}
	case <-time.After(3 * time.Second):
		held, _ := l.c.Do("HGETALL", rdb.NewKeys(l.ns).Queue(rdb.Standalone("q")).WorkerQueue(l.dead))
		t.Fatalf("the task held by the lost id was not put back (no reaper runs): the dead id still holds %s", held)
	}
}

// lostMid is a worker whose keepalive was deleted while it ran its first
// task (see lostMidTask).
type lostMid struct {
	w        *worqr.Worker
	in       *worqr.Inspector
	c        redis.Conn
	ns       string
	id, dead string      // the task, and the worker id that lost it
	started  chan string // the task ids of the runs after the first
}

// lostMidTask starts a worker of wc (its Namespace, heartbeat timings and
// queue "q" at concurrency 1 are set here) whose handler blocks its first
// run until cancelled and then returns first(ctx), and later runs return
// nil; it enqueues one task, waits for it to start, and deletes the
// worker's keepalive.
func lostMidTask(t *testing.T, wc worqr.WorkerConfig, first func(ctx context.Context) error) *lostMid {
	t.Helper()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	c := pool.Get()
	t.Cleanup(func() { c.Close() })
	wc.Config.Namespace = redistest.Namespace()
	wc.HeartbeatInterval, wc.HeartbeatTTL = 100*time.Millisecond, 3*time.Second
	started := make(chan string, 2)
	var runs atomic.Int32
	wc.Queues = map[string]worqr.QueueConfig{"q": {Concurrency: 1, Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
		started <- t.ID
		if runs.Add(1) == 1 {
			<-ctx.Done()
			return first(ctx)
		}
		return nil
	})}}
	w := startWorker(t, context.Background(), pool, &wc)
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})
	client, err := worqr.NewClient(pool, &wc.Config)
	if err != nil {
		t.Fatal(err)
	}
	id, err := client.Enqueue(context.Background(), "q", []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-started:
		if got != id {
			t.Fatalf("ran %s, want %s", got, id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the task never started")
	}
	dead := w.ID()
	if _, err := c.Do("DEL", rdb.NewKeys(wc.Config.Namespace).Keepalive(dead)); err != nil {
		t.Fatal(err)
	}
	return &lostMid{w: w, in: newInspector(t, pool, &wc.Config), c: c, ns: wc.Config.Namespace, id: id, dead: dead, started: started}
}

// A worker whose keepalive is lost never ends anything under that id again
// (DESIGN, Liveness): the handler it cancelled may still return nil, but
// its taking is put back (the worker's own requeue, or a reaper's), not
// recorded as done by a worker the cluster counts as dead. The OnEvent of
// EventKeepaliveLost holds the worker's own requeue back until the
// handler's taking has been dealt with, so that an end sent anyway would
// land first and be applied.
func TestNoEndUnderALostKeepalive(t *testing.T) {
	outcome := make(chan worqr.Event, 8)
	dealt := make(chan struct{}) // closed at the first outcome of a taking
	var once sync.Once
	onEvent := func(e worqr.Event) {
		switch e.Kind {
		case worqr.EventKeepaliveLost:
			select {
			case <-dealt:
			case <-time.After(3 * time.Second):
			}
		case worqr.EventLost, worqr.EventDone, worqr.EventRetry, worqr.EventDead, worqr.EventCancelled:
			select {
			case outcome <- e:
			default:
			}
			once.Do(func() { close(dealt) })
		}
	}
	// The handler says done, though cancelled.
	l := lostMidTask(t, worqr.WorkerConfig{OnEvent: onEvent, PollInterval: time.Second},
		func(context.Context) error { return nil })
	select {
	case ev := <-outcome:
		if ev.Kind != worqr.EventLost || ev.TaskID != l.id || ev.WorkerID != l.dead {
			t.Fatalf("the cancelled taking of the lost id ended as %+v, want EventLost: nothing sent under a dead id", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no outcome for the taking of the lost id")
	}
	// Put back by the worker, run again under its new id.
	select {
	case got := <-l.started:
		if got != l.id {
			t.Fatalf("ran %s, want %s again", got, l.id)
		}
	case <-time.After(5 * time.Second):
		info, _ := l.in.Task(context.Background(), "q", l.id)
		t.Fatalf("the task was not run again under the new id: %+v", info)
	}
}

// A Stop that comes before Start (a signal that arrives while the program
// is still setting up, or a Start that failed) returns nil at once: the
// worker is stopped. Stopped must then be closed, as its doc says ("Stop
// returned"), and a later Start must be refused: before, Stopped stayed
// open forever and the late Start ran a worker whose Stop had already
// returned, with nobody left to stop it.
func TestStopBeforeStartIsFinal(t *testing.T) {
	bundle := setup(t)
	pool, ns := bundle.pool, bundle.ns
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: worqr.Config{Namespace: ns},
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 1,
			Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil })}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatalf("Stop before Start = %v, want nil", err)
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop before Start = %v, want nil", err)
	}
	select {
	case <-w.Stopped():
	case <-time.After(time.Second):
		t.Error("Stopped is not closed after Stop returned")
	}
	if err := w.Start(context.Background()); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
		t.Fatal("Start after Stop = nil: a worker runs after its Stop returned")
	}
	if id := w.ID(); id != "" {
		t.Errorf("ID after a refused Start = %q, want \"\" (never registered)", id)
	}
}

// A handler that runs past its queue's StuckAfter is reported by an
// EventStuck naming its taking and how long it had run; one that returns
// before is not (once per taking: TestNewlyStuck).
func TestStuckTakingsAreReported(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	release := make(chan struct{})
	b.startWorker(worqr.WorkerConfig{Queues: map[string]worqr.QueueConfig{
		"slow": {Concurrency: 1, StuckAfter: 100 * time.Millisecond, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
			<-release
			return nil
		})},
		"fast": {Concurrency: 1, StuckAfter: 100 * time.Millisecond, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
			return nil
		})},
	}})
	fast, err := b.client.Enqueue(ctx, "fast", []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	slow, err := b.client.Enqueue(ctx, "slow", []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("a handler past StuckAfter is reported with how long it ran", func(t *testing.T) {
		e := b.events.waitFor(t, 10*time.Second, "the slow task reported stuck", func(e worqr.Event) bool { return e.Kind == worqr.EventStuck })
		if e.TaskID != slow || e.Queue != "slow" || e.PID == "" || e.WorkerID == "" || e.Running < 100*time.Millisecond {
			t.Fatalf("EventStuck %+v, want task %s of slow, its pid and worker, running at least 100ms", e, slow)
		}
	})
	close(release)
	b.events.waitFor(t, 10*time.Second, "the slow task's end", func(e worqr.Event) bool { return e.Kind == worqr.EventDone && e.TaskID == slow })
	t.Run("not a handler that returned in time", func(t *testing.T) {
		for _, e := range b.events.all() {
			if e.Kind == worqr.EventStuck && e.TaskID == fast {
				t.Errorf("the fast task was reported stuck: %+v", e)
			}
		}
	})
}
