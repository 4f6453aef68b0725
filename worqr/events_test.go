package worqr_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/internal/seam"
	"github.com/worqr/worqr-go/worqr"
)

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
// reads the task again every waitRecheck.
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

// Enqueue, then Wait at once, on a queue without retention whose handler is
// quick: the task ends after Wait was called, and Wait must say done.
func TestWaitRightAfterEnqueue(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	cfg := worqr.Config{Namespace: ns} // default EventInterval (250ms)
	wc := worqr.WorkerConfig{Config: cfg, Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 4,
		Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error { return nil })}}}
	startWorker(t, ctx, pool, &wc)
	c, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	notFound := 0
	for i := 0; i < 20; i++ {
		id, err := c.Enqueue(ctx, "q", []byte("p"), nil)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		info, err := c.Wait(wctx, "q", id)
		cancel()
		switch {
		case errors.Is(err, worqr.ErrTaskNotFound):
			notFound++
		case err != nil:
			t.Fatal(err)
		case info.State != worqr.StateDone:
			t.Fatalf("state %s", info.State)
		}
	}
	if notFound > 0 {
		t.Fatalf("Wait called right after Enqueue returned ErrTaskNotFound %d times of 20 for tasks that ended done after Wait was called", notFound)
	}
}

// Events carry their handler's error: a published event's is cut as the
// task's stored error is (8 KiB), and a publication is bounded in bytes.
// 64 handlers failing at once with errors of 1 MiB were one PUBLISH of
// 64 MiB (177 ms of Redis, a worker's keepalive beats timing out): past
// the 32 MiB a subscriber may fall behind by, Redis disconnected every
// follower, which missed every one of those events.
func TestFollowersGetTheEventsOfLongErrors(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var dead []worqr.Event
	paused := false
	fctx, stop := context.WithCancel(ctx)
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		_ = in.Follow(fctx, func(e worqr.Event) {
			mu.Lock()
			defer mu.Unlock()
			switch e.Kind {
			case worqr.EventPaused:
				paused = true
			case worqr.EventDead:
				dead = append(dead, e)
			}
		})
	}()
	t.Cleanup(func() { stop(); <-followed })
	wait(t, 10*time.Second, "the follower subscribed", func() bool {
		if err := in.Pause(ctx, "probe"); err != nil {
			t.Fatal(err)
		}
		in.Flush()
		mu.Lock()
		defer mu.Unlock()
		return paused
	})

	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	const n = 64
	long := strings.Repeat("e", 1<<20)
	gate := make(chan struct{})
	var local sync.Map // what OnEvent got: the error whole
	cfg := fastTimings(ns)
	cfg.OnEvent = func(e worqr.Event) {
		if e.Kind == worqr.EventDead {
			local.Store(e.TaskID, len(e.Err.Error()))
		}
	}
	cfg.Queues = map[string]worqr.QueueConfig{"errs": {Concurrency: n, MaxAttempts: 1,
		Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			<-gate
			return errors.New(long)
		})}}
	startWorker(t, ctx, pool, &cfg)
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = []byte("x")
	}
	if _, err := c.EnqueueBatch(ctx, "errs", payloads, nil); err != nil {
		t.Fatal(err)
	}
	wait(t, 10*time.Second, "every handler running", func() bool {
		q, err := in.Queue(ctx, "errs")
		return err == nil && q.Active == n
	})
	close(gate)
	wait(t, 10*time.Second, "the dead event of every task followed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(dead) == n
	})
	mu.Lock()
	defer mu.Unlock()
	for _, e := range dead {
		if got := len(e.Err.Error()); got != 8<<10 {
			t.Fatalf("a followed event's error has %d bytes, want its first 8 KiB", got)
		}
		if got, _ := local.Load(e.TaskID); got != len(long) {
			t.Fatalf("OnEvent got an error of %v bytes, want %d (whole)", got, len(long))
		}
	}
}
