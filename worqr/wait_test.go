package worqr_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/internal/seam"
	"github.com/worqr/worqr-go/worqr"
)

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
	clock := seam.NewManualClock(time.Now())
	waitCtx, cancel := context.WithTimeout(seam.WithHeartbeatClock(ctx, clock), 30*time.Second)
	defer cancel()
	reads := pool.count("HGETALL")
	waited := make(chan *worqr.TaskInfo, 1)
	go func() {
		info, err := c.Wait(waitCtx, "q", id)
		if err != nil {
			t.Error(err)
		}
		waited <- info
	}()
	// Its first read (once subscribed) finds the task waiting.
	for pool.count("HGETALL") == reads {
		select {
		case <-waited:
			t.Fatal("Wait returned before the task ended")
		case <-waitCtx.Done():
			t.Fatal("Wait never read the task")
		case <-time.After(time.Millisecond):
		}
	}
	if st, err := c.Cancel(ctx, "q", id); err != nil || st != worqr.CancelRemoved {
		t.Fatalf("Cancel = %v, %v", st, err)
	}
	stop := clock.Run(worqr.WaitRecheck, 10*time.Millisecond)
	defer stop()
	select {
	case info := <-waited:
		if info == nil || info.State != worqr.StateCancelled {
			t.Fatalf("Wait returned %+v, want the cancelled task", info)
		}
	case <-waitCtx.Done():
		t.Fatal("Wait did not see the task end: no event came, and it did not read it again")
	}
}

// waitRunEnv is a two-stage flow whose first stage waits for release (or
// for its context's end), served by a worker publishing events often.
func waitRunEnv(t *testing.T) (context.Context, *cmdPool, *worqr.Client, *worqr.Flow, func()) {
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
	return ctx, counted, c, flow, free
}

// waitRun runs WaitRun in the background under a clock that never moves,
// and returns once it read the run (still running) a first time: from
// then on, only an event can wake it.
func waitRun(ctx context.Context, t *testing.T, pool *cmdPool, c *worqr.Client, flow *worqr.Flow, id string) <-chan *worqr.RunInfo {
	out := make(chan *worqr.RunInfo, 1)
	wctx := seam.WithHeartbeatClock(ctx, seam.NewManualClock(time.Now()))
	reads := pool.count("HGETALL")
	go func() {
		info, err := c.WaitRun(wctx, flow, id)
		if err != nil {
			t.Error(err)
		}
		out <- info
	}()
	for pool.count("HGETALL") == reads {
		select {
		case info := <-out:
			t.Fatalf("WaitRun returned %+v before the run ended", info)
		case <-ctx.Done():
			t.Fatal("WaitRun never read the run")
		case <-time.After(time.Millisecond):
		}
	}
	return out
}

func TestWaitRunReturnsTheEndedRun(t *testing.T) {
	ctx, pool, c, flow, release := waitRunEnv(t)
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
	ctx, pool, c, flow, _ := waitRunEnv(t)
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
	clock := seam.NewManualClock(time.Now())
	waitCtx, cancel := context.WithTimeout(seam.WithHeartbeatClock(ctx, clock), 30*time.Second)
	defer cancel()
	reads := pool.count("HGETALL")
	waited := make(chan error, 1)
	go func() {
		info, err := c.Wait(waitCtx, "q", id)
		if err == nil && info.State != worqr.StateCancelled {
			err = fmt.Errorf("state %s, want cancelled", info.State)
		}
		waited <- err
	}()
	for pool.count("HGETALL") == reads {
		select {
		case err := <-waited:
			t.Fatalf("Wait returned (%v) before the task ended", err)
		case <-waitCtx.Done():
			t.Fatal("Wait never read the task")
		case <-time.After(time.Millisecond):
		}
	}
	pool.broken.Store(true)
	for pool.refuse.Load() == 0 {
		clock.Advance(worqr.WaitRecheck)
		select {
		case err := <-waited:
			t.Fatalf("Wait returned on a failed read: %v", err)
		case <-waitCtx.Done():
			t.Fatal("Wait never read again")
		case <-time.After(time.Millisecond):
		}
	}
	pool.broken.Store(false)
	if st, err := other.Cancel(ctx, "q", id); err != nil || st != worqr.CancelRemoved {
		t.Fatalf("Cancel = %v, %v", st, err)
	}
	stop := clock.Run(worqr.WaitRecheck, 10*time.Millisecond)
	defer stop()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatal(err)
		}
	case <-waitCtx.Done():
		t.Fatal("Wait did not see the task end after the failed read")
	}
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
