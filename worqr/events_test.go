package worqr_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/internal/seam"
	"github.com/worqr/worqr-go/redisconn"
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
	id, err := c.StartRun(ctx, flow, map[string]string{"in": "x"}, nil)
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
	if _, err := c.StartRun(ctx, flow, nil, nil); err != nil {
		t.Fatal(err)
	}
	id, err := c.StartRun(ctx, flow, nil, nil)
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
	id, err := c.StartRun(ctx, flow, nil, nil)
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

// Wait is woken by its task's end itself: the end script publishes the end
// of a task a Wait marked on the queue's ended channel, in the same call.
// Here the worker publishes no events and Wait's clock never moves, so
// nothing else could wake it.
func TestWaitIsWokenByItsTasksEnd(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want worqr.TaskState
	}{
		{"done, not retained", nil, worqr.StateDone},
		{"dead", errors.New("boom"), worqr.StateDead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			pool := srv.Pool()
			t.Cleanup(func() { pool.Close() })
			counted := newCmdPool()
			cfg := worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true}
			release := make(chan struct{})
			startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: cfg, Queues: map[string]worqr.QueueConfig{"q": {
				Concurrency: 1, MaxAttempts: 1,
				Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error { <-release; return tc.err })}}})
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
				if w.err != nil || w.v.State != tc.want || w.v.ID != id {
					t.Fatalf("Wait = %+v, %v; want %s %s", w.v, w.err, id, tc.want)
				}
			case <-waitCtx.Done():
				t.Fatal("Wait was not woken by the end of its task")
			}
		})
	}
}

// A handler's result reaches Wait on a queue without retention: a done task
// with a result is kept for a day.
func TestWaitGetsTheResultWithoutRetention(t *testing.T) {
	ctx := context.Background()
	b := setup(t)
	b.startWorker(worqr.WorkerConfig{Queues: map[string]worqr.QueueConfig{"q": {Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
		t.SetResult([]byte("r:" + string(t.Payload)))
		return nil
	})}}})
	id, err := b.client.Enqueue(ctx, "q", []byte("p"), nil)
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	info, err := b.client.Wait(waitCtx, "q", id)
	if err != nil || info.State != worqr.StateDone || string(info.Result) != "r:p" {
		t.Fatalf("Wait = %+v, %v; want done with result r:p", info, err)
	}
	if q, err := b.in.Queue(ctx, "q"); err != nil || q.Retained != 1 {
		t.Fatalf("Queue = %+v, %v; want the task retained", q, err)
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

// waitResult is what one of several background Waits returned.
type waitResult struct {
	id   string
	info *worqr.TaskInfo
	err  error
}

// startWaits runs a Wait for each of ids (queue q) on c in the background,
// each under a manual clock that never moves (no recheck: only the
// subscription and the events can wake it), and returns once each has read
// its task a first time (the HLENs of Store.Tasks through pool), none
// having returned.
func startWaits(ctx context.Context, t *testing.T, c *worqr.Client, pool *cmdPool, q string, ids []string) <-chan waitResult {
	t.Helper()
	frozen := seam.WithHeartbeatClock(ctx, seam.NewManualClock(time.Now()))
	out := make(chan waitResult, len(ids))
	reads := pool.count("HLEN")
	for _, id := range ids {
		go func() {
			info, err := c.Wait(frozen, q, id)
			out <- waitResult{id, info, err}
		}()
	}
	for pool.count("HLEN") < reads+len(ids) {
		select {
		case r := <-out:
			t.Fatalf("Wait(%s) returned (%+v, %v) before its task ended", r.id, r.info, r.err)
		case <-ctx.Done():
			t.Fatalf("only %d of %d Waits read their task", pool.count("HLEN")-reads, len(ids))
		case <-time.After(time.Millisecond):
		}
	}
	return out
}

// numSub is PUBSUB NUMSUB of namespace ns's events channel on pool's server.
func numSub(t *testing.T, pool *redis.Pool, ns string) int {
	t.Helper()
	conn := pool.Get()
	defer conn.Close()
	v, err := redis.Values(conn.Do("PUBSUB", "NUMSUB", ns+":{reg}:events"))
	if err != nil || len(v) != 2 {
		t.Fatalf("PUBSUB NUMSUB: %v, %v", v, err)
	}
	n, _ := redis.Int(v[1], nil)
	return n
}

// pubsubClients is CLIENT LIST TYPE pubsub on pool's server: one line
// per connection subscribed to something.
func pubsubClients(t *testing.T, pool *redis.Pool) []string {
	t.Helper()
	conn := pool.Get()
	defer conn.Close()
	s, err := redis.String(conn.Do("CLIENT", "LIST", "TYPE", "pubsub"))
	if err != nil {
		t.Fatal(err)
	}
	if s = strings.TrimSpace(s); s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// collect receives n results from out, or fails the test when ctx ends.
func collect(ctx context.Context, t *testing.T, out <-chan waitResult, n int) map[string]waitResult {
	t.Helper()
	got := map[string]waitResult{}
	for len(got) < n {
		select {
		case r := <-out:
			got[r.id] = r
		case <-ctx.Done():
			t.Fatalf("%d of %d Waits returned", len(got), n)
		}
	}
	return got
}

// taskReads is how many HLENs pool's server ran so far (INFO
// commandstats): a Wait's read of its task (Store.Tasks) sends one, and
// no script this test runs while its Waits start sends any (a hand-off's,
// at an enqueue, comes before).
func taskReads(t *testing.T, pool *redis.Pool) int {
	t.Helper()
	conn := pool.Get()
	defer conn.Close()
	info, err := redis.String(conn.Do("INFO", "commandstats"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_hlen:calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

// Many Waits on a Client whose pool (NewPool's) is capped far below twice
// their number (here 50 Waits, MaxActive 4) share one subscription and a
// bounded number of connections for their reads: each returns its task's
// end (done with its result, dead, cancelled) as its event comes, with no
// recheck to help (their clocks never move), and the Client's other calls
// (the cancels, its events' publication) still find a connection. Before,
// each Wait held a connection of its own for its subscription: the pool ran
// dry, and the Waits hung until their context ended.
func TestManyWaitsOnASmallPool(t *testing.T) {
	ctx := context.Background()
	own, err := redistest.Start("--save", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(own.Stop) // after the worker's Stop (cleanups run last first)
	small, err := redisconn.NewPool(own.URL, &redisconn.Options{MaxActive: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { small.Close() })
	big := own.Pool()
	t.Cleanup(func() { big.Close() })
	ns := redistest.Namespace()
	cfg := worqr.Config{Namespace: ns, EventInterval: 20 * time.Millisecond, Logger: quietLogger()}
	release := make(chan struct{})
	wc := worqr.WorkerConfig{Config: cfg, Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 64, Retention: time.Minute,
		MaxAttempts: 1, Handler: worqr.HandlerFunc(func(ctx context.Context, task *worqr.Task) error {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			if string(task.Payload) == "fail" {
				return worqr.SkipRetry(errors.New("no luck"))
			}
			task.SetResult(task.Payload)
			return nil
		})}}}
	startWorker(t, ctx, big, &wc)
	c, err := worqr.NewClient(small, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	want := map[string]worqr.TaskState{}
	var all, idle []string
	queueOf := map[string]string{}
	for i := 0; i < n; i++ {
		q, payload, state, opts := "q", fmt.Sprintf("r%d", i), worqr.StateDone, (*worqr.EnqueueOpts)(nil)
		switch i % 3 {
		case 0:
			payload, state = "fail", worqr.StateDead
		case 2: // no worker serves "idle": cancelled below
			q, state, opts = "idle", worqr.StateCancelled, &worqr.EnqueueOpts{Retention: time.Minute}
		}
		id, err := c.Enqueue(ctx, q, []byte(payload), opts)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, id)
		queueOf[id], want[id] = q, state
		if q == "idle" {
			idle = append(idle, id)
		}
	}
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	frozen := seam.WithHeartbeatClock(waitCtx, seam.NewManualClock(time.Now()))
	reads := taskReads(t, big)
	out := make(chan waitResult, n)
	for _, id := range all {
		go func() {
			info, err := c.Wait(frozen, queueOf[id], id)
			out <- waitResult{id, info, err}
		}()
	}
	wait(t, 60*time.Second, "every Wait reads its task", func() bool { return taskReads(t, big) >= reads+n })
	select {
	case r := <-out:
		t.Fatalf("Wait(%s) returned (%+v, %v) before its task ended", r.id, r.info, r.err)
	default:
	}
	if got := numSub(t, big, ns); got != 1 {
		t.Fatalf("PUBSUB NUMSUB of the events channel with %d Waits running: %d, want 1 (one shared subscription)", n, got)
	}
	close(release)
	for _, id := range idle {
		if st, err := c.Cancel(ctx, "idle", id); err != nil || st != worqr.CancelRemoved {
			t.Fatalf("Cancel(%s) while %d Waits run on the small pool = %v, %v", id, n, st, err)
		}
	}
	for id, r := range collect(waitCtx, t, out, n) {
		if r.err != nil || r.info.ID != id || r.info.State != want[id] {
			t.Fatalf("Wait(%s) = %+v, %v; want %s", id, r.info, r.err, want[id])
		}
		switch want[id] {
		case worqr.StateDone:
			if !strings.HasPrefix(string(r.info.Result), "r") {
				t.Fatalf("Wait(%s) done with result %q", id, r.info.Result)
			}
		case worqr.StateDead:
			if !strings.Contains(r.info.LastError, "no luck") {
				t.Fatalf("Wait(%s) dead with error %q", id, r.info.LastError)
			}
		}
	}
}

// Waits across a dropped subscription: the connection is killed (CLIENT
// KILL TYPE pubsub) and the Client cannot subscribe again for a while (its
// pool refuses); the tasks end meanwhile, their events published to no one.
// Once the pool answers again the Client subscribes again, once for all its
// Waits, and every Wait reads its task again: each returns its task
// cancelled, with no recheck to help (their clocks never move).
func TestWaitAcrossADroppedSubscription(t *testing.T) {
	ctx := context.Background()
	own, err := redistest.Start("--save", "")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Stop()
	direct := own.Pool()
	defer direct.Close()
	counted := &cmdPool{pool: own.Pool(), n: map[string]int{}}
	defer counted.pool.Close()
	ns := redistest.Namespace()
	cfg := worqr.Config{Namespace: ns, EventInterval: 20 * time.Millisecond, Logger: quietLogger()}
	c, err := worqr.NewClient(counted, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	other, err := worqr.NewClient(direct, &cfg) // publishes its cancels' events, heard by no one during the gap
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 4; i++ {
		id, err := other.Enqueue(ctx, "idle", []byte("x"), &worqr.EnqueueOpts{Retention: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out := startWaits(waitCtx, t, c, counted, "idle", ids)
	if got := numSub(t, direct, ns); got != 1 {
		t.Fatalf("PUBSUB NUMSUB with %d Waits running: %d, want 1", len(ids), got)
	}

	counted.broken.Store(true)
	conn := direct.Get()
	killed, err := redis.Int(conn.Do("CLIENT", "KILL", "TYPE", "pubsub"))
	conn.Close()
	if err != nil || killed != 1 {
		t.Fatalf("CLIENT KILL TYPE pubsub = %d, %v; want 1 (the shared subscription)", killed, err)
	}
	// The gap is open once the Client tried to subscribe again and was
	// refused.
	wait(t, 60*time.Second, "the Client tries to subscribe again", func() bool { return counted.refuse.Load() > 0 })
	for _, id := range ids[:3] {
		if st, err := other.Cancel(ctx, "idle", id); err != nil || st != worqr.CancelRemoved {
			t.Fatalf("Cancel(%s) = %v, %v", id, st, err)
		}
	}
	other.Flush() // the cancels' events go out now, while nobody listens
	if got := numSub(t, direct, ns); got != 0 {
		t.Fatalf("PUBSUB NUMSUB during the gap: %d, want 0", got)
	}
	counted.broken.Store(false)

	for id, r := range collect(waitCtx, t, out, 3) {
		if r.err != nil || r.info.State != worqr.StateCancelled {
			t.Fatalf("Wait(%s) across the drop = %+v, %v; want it cancelled", id, r.info, r.err)
		}
		if id == ids[3] {
			t.Fatalf("Wait(%s) returned; its task still waits", id)
		}
	}
	if got := numSub(t, direct, ns); got != 1 {
		t.Fatalf("PUBSUB NUMSUB after the resubscribe, one Wait left: %d, want 1", got)
	}
	// The one left is woken by its event, on the new subscription.
	if st, err := other.Cancel(ctx, "idle", ids[3]); err != nil || st != worqr.CancelRemoved {
		t.Fatalf("Cancel = %v, %v", st, err)
	}
	if r := collect(waitCtx, t, out, 1)[ids[3]]; r.err != nil || r.info.State != worqr.StateCancelled {
		t.Fatalf("Wait(%s) = %+v, %v; want it cancelled", ids[3], r.info, r.err)
	}
}

// The shared subscription lives while a Wait runs: one subscriber for ten
// Waits, still one when nine have returned, none (PUBSUB NUMSUB, CLIENT
// LIST) once the last has returned, and one again for the next Wait.
func TestWaitSubscriptionLeavesWithTheLastWaiter(t *testing.T) {
	ctx := context.Background()
	own, err := redistest.Start("--save", "")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Stop()
	direct := own.Pool()
	defer direct.Close()
	counted := &cmdPool{pool: own.Pool(), n: map[string]int{}}
	defer counted.pool.Close()
	ns := redistest.Namespace()
	cfg := worqr.Config{Namespace: ns, EventInterval: 20 * time.Millisecond, Logger: quietLogger()}
	c, err := worqr.NewClient(counted, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	enqueue := func(n int) []string {
		var ids []string
		for i := 0; i < n; i++ {
			id, err := c.Enqueue(ctx, "idle", []byte("x"), &worqr.EnqueueOpts{Retention: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		return ids
	}
	cancelAll := func(ids []string) {
		for _, id := range ids {
			if st, err := c.Cancel(ctx, "idle", id); err != nil || st != worqr.CancelRemoved {
				t.Fatalf("Cancel(%s) = %v, %v", id, st, err)
			}
		}
	}
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if got := pubsubClients(t, direct); len(got) != 0 {
		t.Fatalf("subscribed before any Wait: %q", got)
	}

	ids := enqueue(10)
	out := startWaits(waitCtx, t, c, counted, "idle", ids)
	if got := numSub(t, direct, ns); got != 1 {
		t.Fatalf("PUBSUB NUMSUB with 10 Waits running: %d, want 1", got)
	}
	if got := pubsubClients(t, direct); len(got) != 1 {
		t.Fatalf("CLIENT LIST TYPE pubsub with 10 Waits running: %q, want one connection", got)
	}
	cancelAll(ids[:9])
	collect(waitCtx, t, out, 9)
	if got := numSub(t, direct, ns); got != 1 {
		t.Fatalf("PUBSUB NUMSUB with 1 Wait left: %d, want 1", got)
	}
	cancelAll(ids[9:])
	collect(waitCtx, t, out, 1)
	wait(t, 60*time.Second, "the subscription is released after the last Wait", func() bool {
		return numSub(t, direct, ns) == 0 && len(pubsubClients(t, direct)) == 0
	})

	// The next Wait subscribes again.
	ids = enqueue(1)
	out = startWaits(waitCtx, t, c, counted, "idle", ids)
	if got := numSub(t, direct, ns); got != 1 {
		t.Fatalf("PUBSUB NUMSUB for a new Wait: %d, want 1", got)
	}
	cancelAll(ids)
	if r := collect(waitCtx, t, out, 1)[ids[0]]; r.err != nil || r.info.State != worqr.StateCancelled {
		t.Fatalf("Wait = %+v, %v", r.info, r.err)
	}
	wait(t, 60*time.Second, "the subscription is released again", func() bool { return numSub(t, direct, ns) == 0 })
}

// A Wait reads its task only once the shared subscription is confirmed, so
// an end that comes before (its event published to no one) is read, not
// missed: here the SUBSCRIBE is held while the task is cancelled and the
// cancel's event published; Wait has read nothing meanwhile, and returns
// the task cancelled once subscribed, with no recheck to help.
func TestWaitReadsOnceSubscribed(t *testing.T) {
	ctx := context.Background()
	counted := newCmdPool()
	defer counted.pool.Close()
	held, gate := make(chan struct{}), make(chan struct{})
	var once sync.Once
	counted.onSend = func(cmd string) {
		if strings.EqualFold(cmd, "SUBSCRIBE") {
			once.Do(func() { close(held) })
			<-gate
		}
	}
	direct := srv.Pool()
	defer direct.Close()
	ns := redistest.Namespace()
	cfg := worqr.Config{Namespace: ns, EventInterval: 20 * time.Millisecond, Logger: quietLogger()}
	c, err := worqr.NewClient(counted, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	other, err := worqr.NewClient(direct, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	id, err := other.Enqueue(ctx, "idle", []byte("x"), &worqr.EnqueueOpts{Retention: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out := make(chan waitResult, 1)
	go func() {
		info, err := c.Wait(seam.WithHeartbeatClock(waitCtx, seam.NewManualClock(time.Now())), "idle", id)
		out <- waitResult{id, info, err}
	}()
	select {
	case <-held:
	case <-waitCtx.Done():
		t.Fatal("Wait never subscribed")
	}
	if st, err := other.Cancel(ctx, "idle", id); err != nil || st != worqr.CancelRemoved {
		t.Fatalf("Cancel = %v, %v", st, err)
	}
	other.Flush()
	if n := counted.count("HLEN"); n != 0 {
		t.Fatalf("Wait read its task %d times before its subscription was confirmed", n)
	}
	close(gate)
	if r := collect(waitCtx, t, out, 1)[id]; r.err != nil || r.info.State != worqr.StateCancelled {
		t.Fatalf("Wait = %+v, %v; want the task cancelled", r.info, r.err)
	}
}

// Waits across a restart of the server (it keeps its data: appendonly):
// the subscription fails, the Client cannot subscribe again for a while (its
// pool refuses), the tasks end meanwhile and their events go to no one.
// Once subscribed again, every Wait reads its task again, on a pool whose
// idle connections died with the old server: a read that fails on one is
// tried again shortly, and each Wait returns its task cancelled, with no
// recheck to help (their clocks never move).
func TestWaitAcrossARestart(t *testing.T) {
	ctx := context.Background()
	own, err := redistest.Start("--appendonly", "yes", "--appendfsync", "always", "--save", "")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Stop()
	counted := &cmdPool{pool: own.Pool(), n: map[string]int{}}
	defer counted.pool.Close()
	ns := redistest.Namespace()
	cfg := worqr.Config{Namespace: ns, EventInterval: 20 * time.Millisecond, Logger: quietLogger()}
	c, err := worqr.NewClient(counted, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 3; i++ {
		id, err := c.Enqueue(ctx, "idle", []byte("x"), &worqr.EnqueueOpts{Retention: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out := startWaits(waitCtx, t, c, counted, "idle", ids)

	counted.broken.Store(true)
	if err := own.Restart(); err != nil {
		t.Fatal(err)
	}
	wait(t, 60*time.Second, "the Client tries to subscribe again", func() bool { return counted.refuse.Load() > 0 })
	fresh := own.Pool()
	defer fresh.Close()
	other, err := worqr.NewClient(fresh, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if st, err := other.Cancel(ctx, "idle", id); err != nil || st != worqr.CancelRemoved {
			t.Fatalf("Cancel(%s) after the restart = %v, %v", id, st, err)
		}
	}
	other.Flush() // published while nobody listens
	counted.broken.Store(false)
	for id, r := range collect(waitCtx, t, out, len(ids)) {
		if r.err != nil || r.info.State != worqr.StateCancelled {
			t.Fatalf("Wait(%s) across the restart = %+v, %v; want it cancelled", id, r.info, r.err)
		}
	}
}
