package worqr_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/internal/seam"
	"github.com/worqr/worqr-go/worqr"
)

// waited is what a wait started by waiting returned.
type waited[T any] struct {
	v   T
	err error
}

// waiting runs wait in the background under a manual clock (returned: only
// the test moves it) and returns once wait read what it waits for a first
// time (the HLEN of Store.Tasks through pool, or the HSCAN that reads a run) without
// returning: from then on, only an event or the clock can wake it.
func waiting[T any](ctx context.Context, t *testing.T, pool *cmdPool, wait func(context.Context) (T, error)) (*seam.ManualClock, <-chan waited[T]) {
	t.Helper()
	clock := seam.NewManualClock(time.Now())
	out := make(chan waited[T], 1)
	read := func() int { return pool.count("HLEN") + pool.count("HSCAN") }
	reads := read()
	go func() {
		v, err := wait(seam.WithHeartbeatClock(ctx, clock))
		out <- waited[T]{v, err}
	}()
	for read() == reads {
		select {
		case w := <-out:
			t.Fatalf("the wait returned (%v, %v) before what it waits for ended", w.v, w.err)
		case <-ctx.Done():
			t.Fatal("the wait never read what it waits for")
		case <-time.After(time.Millisecond):
		}
	}
	return clock, out
}

// cancelUnseen cancels waiting task id of queue q through c (a client that
// publishes no event), runs clock, and expects the Wait behind done to
// return the task cancelled before waitCtx ends: it has only its rechecks
// to see it.
func cancelUnseen(ctx, waitCtx context.Context, t *testing.T, c *worqr.Client, id string, clock *seam.ManualClock, done <-chan waited[*worqr.TaskInfo]) {
	t.Helper()
	if st, err := c.Cancel(ctx, "q", id); err != nil || st != worqr.CancelRemoved {
		t.Fatalf("Cancel = %v, %v", st, err)
	}
	stop := clock.Run(worqr.WaitRecheck, 10*time.Millisecond)
	defer stop()
	select {
	case w := <-done:
		if w.err != nil || w.v.State != worqr.StateCancelled {
			t.Fatalf("Wait returned %+v, %v; want the cancelled task", w.v, w.err)
		}
	case <-waitCtx.Done():
		t.Fatal("Wait did not see the task end: no event came, and no recheck read it")
	}
}

// Events are best effort: a task that ends with no event published (here
// its cancel comes from a client that publishes none; in production, the
// process that ended it was killed first) is still seen by Wait, which
// reads the task again every WaitRecheck.
func TestWaitRereadsWithoutEvents(t *testing.T) {
	ctx := context.Background()
	pool := newCmdPool()
	cfg := worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true}
	c, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.Enqueue(ctx, "q", []byte("p"), &worqr.EnqueueOpts{Retention: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	clock, done := waiting(waitCtx, t, pool, func(ctx context.Context) (*worqr.TaskInfo, error) { return c.Wait(ctx, "q", id) })
	cancelUnseen(ctx, waitCtx, t, c, id, clock, done)
}

// waitRunEnv is a two-stage flow whose first stage waits for release (or
// for its context's end), served by a worker publishing events often, and
// a Client and an Inspector of its namespace.
func waitRunEnv(t *testing.T) (context.Context, *cmdPool, *worqr.Client, *worqr.Inspector, *worqr.Flow, func()) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	counted := newCmdPool()
	cfg := worqr.Config{Namespace: redistest.Namespace(), EventInterval: 20 * time.Millisecond}
	release := make(chan struct{})
	flow := &worqr.Flow{Name: "f", Retention: time.Minute, Stages: []worqr.Stage{
		{Name: "first", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				select {
				case <-release:
					return &worqr.StageResult{Fields: map[string]string{"first": "ok"}}, nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			})},
		{Name: "second", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				return &worqr.StageResult{Fields: map[string]string{"second": r.State["first"]}}, nil
			})},
	}}
	c, err := worqr.NewClient(counted, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: cfg, Flows: []*worqr.Flow{flow}})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the worker's Stop, which would wait for the handler
	return ctx, counted, c, newInspector(t, counted, &cfg), flow, free
}

// waitRun runs WaitRun in the background and returns once it read the run
// (still running) a first time; its clock never moves: only an event can
// wake it.
func waitRun(ctx context.Context, t *testing.T, pool *cmdPool, c *worqr.Client, flow *worqr.Flow, id string) <-chan *worqr.RunInfo {
	t.Helper()
	_, done := waiting(ctx, t, pool, func(ctx context.Context) (*worqr.RunInfo, error) { return c.WaitRun(ctx, flow, id) })
	out := make(chan *worqr.RunInfo, 1)
	go func() {
		w := <-done
		if w.err != nil {
			t.Error(w.err)
		}
		out <- w.v
	}()
	return out
}

func TestWaitRunReturnsTheEndedRun(t *testing.T) {
	ctx, pool, c, _, flow, release := waitRunEnv(t)
	id, err := c.StartRun(ctx, flow, map[string]string{"in": "x"})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	waited := waitRun(wctx, t, pool, c, flow, id)
	release()
	select {
	case info := <-waited:
		if info == nil || info.Status != worqr.RunDone || info.State["second"] != "ok" || info.State["in"] != "x" {
			t.Fatalf("WaitRun = %+v, want the run done with both stages' fields", info)
		}
	case <-wctx.Done():
		t.Fatal("WaitRun did not return once the run was done")
	}
}

// A run cancelled while its stage waits (its one handler is busy with
// another run): no taking ends, so the cancel's own event wakes WaitRun.
func TestWaitRunReturnsTheCancelledRun(t *testing.T) {
	ctx, pool, c, _, flow, _ := waitRunEnv(t)
	if _, err := c.StartRun(ctx, flow, nil); err != nil {
		t.Fatal(err)
	}
	id, err := c.StartRun(ctx, flow, nil)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	waited := waitRun(wctx, t, pool, c, flow, id)
	if ok, err := c.CancelRun(ctx, flow, id); err != nil || !ok {
		t.Fatalf("CancelRun = %v, %v", ok, err)
	}
	select {
	case info := <-waited:
		if info == nil || info.Status != worqr.RunCancelled {
			t.Fatalf("WaitRun = %+v, want the run cancelled", info)
		}
	case <-wctx.Done():
		t.Fatal("WaitRun did not return once the run was cancelled")
	}
	if _, err := c.WaitRun(ctx, flow, "nosuchrun"); err != worqr.ErrTaskNotFound {
		t.Fatalf("WaitRun of an unknown run: %v, want ErrTaskNotFound", err)
	}
	if _, err := c.WaitRun(ctx, nil, id); err == nil {
		t.Fatal("WaitRun with no flow: no error")
	}
}

// A read of Wait's that fails (Redis unreachable for a while) does not end
// the wait: the next one reads again.
func TestWaitOutlastsAFailedRead(t *testing.T) {
	ctx := context.Background()
	pool := newCmdPool()
	ns := redistest.Namespace()
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	other, err := worqr.NewClient(srv.Pool(), &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	id, err := other.Enqueue(ctx, "q", []byte("p"), &worqr.EnqueueOpts{Retention: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	clock, done := waiting(waitCtx, t, pool, func(ctx context.Context) (*worqr.TaskInfo, error) { return c.Wait(ctx, "q", id) })
	pool.broken.Store(true)
	for pool.refuse.Load() == 0 {
		clock.Advance(worqr.WaitRecheck)
		select {
		case w := <-done:
			t.Fatalf("Wait returned on a failed read: %v", w.err)
		case <-waitCtx.Done():
			t.Fatal("Wait never read again")
		case <-time.After(time.Millisecond):
		}
	}
	pool.broken.Store(false)
	cancelUnseen(ctx, waitCtx, t, other, id, clock, done)
}

// A run that a child ends (here a dead child fails it, fail-fast) wakes
// WaitRun by that child's event (its id is "<run id>.<xid>").
func TestWaitRunWokenByAChild(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	defer pool.Close()
	counted := newCmdPool()
	cfg := worqr.Config{Namespace: redistest.Namespace(), EventInterval: 20 * time.Millisecond}
	release := make(chan struct{})
	flow := &worqr.Flow{Name: "f", Retention: time.Minute, Stages: []worqr.Stage{
		{Name: "fan", Queue: worqr.QueueConfig{Concurrency: 1},
			Children: map[string]worqr.QueueConfig{"kids": {Concurrency: 1, Handler: worqr.HandlerFunc(
				func(context.Context, *worqr.Task) error {
					<-release
					return worqr.SkipRetry(errors.New("no such user"))
				})}},
			Handler: worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				return &worqr.StageResult{Children: []worqr.ChildSpec{{Queue: "kids", Payload: []byte("1")}}}, nil
			})},
		{Name: "after", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) { return &worqr.StageResult{}, nil })},
	}}
	c, err := worqr.NewClient(counted, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: cfg, Flows: []*worqr.Flow{flow}})
	defer close(release)
	id, err := c.StartRun(ctx, flow, nil)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	waited := waitRun(wctx, t, counted, c, flow, id)
	release <- struct{}{}
	select {
	case info := <-waited:
		if info == nil || info.Status != worqr.RunFailed {
			t.Fatalf("WaitRun = %+v, want the run failed by its child", info)
		}
	case <-wctx.Done():
		t.Fatal("WaitRun was not woken by the child that ended the run")
	}
}

// A task that ends with no retention to keep it leaves nothing to read:
// Wait, which saw the event of its end, returns what that event said
// (done), not ErrTaskNotFound.
func TestWaitForATaskWithoutRetention(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	counted := newCmdPool()
	cfg := worqr.Config{Namespace: redistest.Namespace(), EventInterval: 20 * time.Millisecond}
	release := make(chan struct{})
	wc := worqr.WorkerConfig{Config: cfg, Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 1,
		Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error { <-release; return nil })}}}
	startWorker(t, ctx, pool, &wc)
	c, err := worqr.NewClient(counted, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.Enqueue(ctx, "q", []byte("p"), nil)
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, done := waiting(waitCtx, t, counted, func(ctx context.Context) (*worqr.TaskInfo, error) { return c.Wait(ctx, "q", id) })
	close(release)
	select {
	case w := <-done:
		if w.err != nil || w.v.State != worqr.StateDone || w.v.ID != id {
			t.Fatalf("Wait = %+v, %v; want %s done", w.v, w.err, id)
		}
	case <-waitCtx.Done():
		t.Fatal("Wait did not return")
	}
}

// Inspector.CancelRun cancels a run knowing only its flow's name: a
// running one (its stage told to stop) and a waiting one, each kept for
// the retention it was started with; a second cancel says it was not
// running.
func TestInspectorCancelRun(t *testing.T) {
	ctx, pool, c, in, flow, _ := waitRunEnv(t)
	running, err := c.StartRun(ctx, flow, nil)
	if err != nil {
		t.Fatal(err)
	}
	waiting, err := c.StartRun(ctx, flow, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{running, waiting} {
		if ok, err := in.CancelRun(ctx, flow.Name, id); err != nil || !ok {
			t.Fatalf("CancelRun(%s) = %v, %v", id, ok, err)
		}
		info, err := in.Run(ctx, flow.Name, id)
		if err != nil || info.Status != worqr.RunCancelled {
			t.Fatalf("run %s after the cancel: %+v, %v", id, info, err)
		}
		if ok, err := in.CancelRun(ctx, flow.Name, id); err != nil || ok {
			t.Fatalf("second CancelRun(%s) = %v, %v; want false", id, ok, err)
		}
	}
	// Kept for the flow's retention: readable now, and with an expiry.
	conn, err := pool.GetContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if n, err := redis.Int(conn.Do("EVAL", "local n = 0 for _, k in ipairs(redis.call('KEYS', ARGV[1])) do if redis.call('PTTL', k) > 0 then n = n + 1 end end return n", 0, "*:t:"+running)); err != nil || n != 1 {
		t.Fatalf("the cancelled run's hash with an expiry: %d (%v), want 1", n, err)
	}
	if _, err := in.CancelRun(ctx, "no/such", running); !errors.Is(err, worqr.ErrInvalid) {
		t.Fatalf("a bad flow name: %v, want ErrInvalid", err)
	}
}
