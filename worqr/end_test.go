package worqr_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/worqr/worqr-go/defaults"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/recovery"
	"github.com/worqr/worqr-go/worqr"
)

var errRefused = errors.New("injected: the connection broke before the call was sent")

// An end that failed with a connection error is sent again; if the taking
// is then gone, the worker must tell whether its first attempt was applied
// (its reply lost) or a reaper requeued the taking meanwhile: only while
// the worker's keepalive lives can nobody else have moved it (appliedBefore).
// Here the first attempt was never sent, and the keepalive expired and a
// reaper pass requeued the taking before the retry: the outcome is a lost
// taking, not a done one (the task was not done: it runs again).
func TestEndRetriedAfterAReaperRequeuedIsLost(t *testing.T) {
	base := srv.Pool()
	defer base.Close()
	cfg := worqr.Config{Namespace: redistest.Namespace()}
	keys := rdb.NewKeys(cfg.Namespace)
	reaper, err := recovery.New(base, &recovery.Config{Namespace: cfg.Namespace, Interval: recovery.MinInterval})
	if err != nil {
		t.Fatal(err)
	}
	var worker atomic.Value // the worker's id
	var refused atomic.Bool
	var hookErr error
	pool := &redistest.HookPool{Pool: base, Refuse: func(cmd string, args []any) error {
		if (cmd != "EVALSHA" && cmd != "FCALL") || len(args) < 3 || !strings.HasSuffix(fmt.Sprint(args[2]), ":s:q") {
			return nil
		}
		done := false
		for _, a := range args[3:] {
			if s, ok := a.(string); ok && s == string(rdb.AskDone) {
				done = true
			}
		}
		if !done || !refused.CompareAndSwap(false, true) {
			return nil
		}
		// Before the retry: the keepalive expires and a reaper pass
		// requeues what the worker held.
		c := base.Get()
		defer c.Close()
		id, _ := worker.Load().(string)
		if _, err := c.Do("DEL", keys.Keepalive(id)); err != nil {
			hookErr = err
		} else if _, err := reaper.Pass(context.Background()); err != nil {
			hookErr = err
		}
		return errRefused
	}}
	var mu sync.Mutex
	var outcomes []worqr.Event
	ran := make(chan string, 4)
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg,
		OnEvent: func(e worqr.Event) {
			switch e.Kind {
			case worqr.EventDone, worqr.EventLost:
				mu.Lock()
				outcomes = append(outcomes, e)
				mu.Unlock()
			}
		},
		// A beat that finds the keepalive gone comes well after the retry.
		HeartbeatInterval: 2 * time.Second, HeartbeatTTL: 6 * time.Second, PollInterval: time.Second,
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 1, Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
			ran <- t.PID()
			return nil
		})}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	}()
	worker.Store(w.ID())
	client, err := worqr.NewClient(base, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, base, &cfg)
	id, err := client.Enqueue(context.Background(), "q", []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var first string
	select {
	case first = <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("the task never ran")
	}
	var got *worqr.Event
	if !redistest.Within(5*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := range outcomes {
			if outcomes[i].TaskID == id && outcomes[i].PID == first {
				got = &outcomes[i]
			}
		}
		return got != nil
	}) {
		t.Fatalf("no outcome for the first taking (pid %s); events %+v", first, outcomes)
	}
	if got.Kind != worqr.EventLost {
		info, _ := in.Task(context.Background(), "q", id)
		t.Fatalf("the end of pid %s, retried after a reaper requeued the taking, reported %s (task now %+v); want lost",
			first, got.Kind, info)
	}
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	if !refused.Load() {
		t.Fatal("no end was refused: the test tested nothing")
	}
}

// Ends that arrive together share one script call (group commit): the
// call is bounded by the bytes the ends write (results, errors, a stage's
// fields and children), about MaxEnqueueChunkBytes (4 MiB), not only by
// their count: 64 ends of 1 MiB results each were one call of 64 MiB,
// which held Redis for 106 ms.
func TestGroupedEndsAreBoundedByBytes(t *testing.T) {
	ctx := context.Background()
	base := srv.Pool()
	t.Cleanup(func() { base.Close() })
	ns := redistest.Namespace()
	const n, size = 16, 1 << 20
	var returned atomic.Int32
	pool := newBigCalls(base, size)
	ccfg := worqr.Config{Namespace: ns, DisableEvents: true}
	c, err := worqr.NewClient(base, &ccfg)
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, base, &ccfg)
	ps := make([][]byte, n)
	for i := range ps {
		ps[i] = []byte("x")
	}
	ids, err := c.EnqueueBatch(ctx, "res", ps, nil)
	if err != nil {
		t.Fatal(err)
	}
	var started sync.WaitGroup
	started.Add(n)
	gate := make(chan struct{})
	res := make([]byte, size)
	cfg := fastTimings(ns)
	cfg.HeartbeatTTL = 5 * time.Second // the held calls must not cost the keepalive
	cfg.DisableEvents = true
	cfg.Queues = map[string]worqr.QueueConfig{"res": {Concurrency: n, Retention: time.Minute,
		Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			started.Done()
			<-gate
			t.SetResult(res)
			returned.Add(1)
			return nil
		})}}
	w := startWorker(t, ctx, pool, &cfg)
	started.Wait()
	close(gate)
	// Every end is in a held call or waits behind them in the group.
	wait(t, 10*time.Second, "every end held or waiting", func() bool {
		return returned.Load() == n && pool.held.Load()+int64(w.EndsWaiting("res")) == n
	})
	close(pool.hold)
	wait(t, 10*time.Second, "every task done", func() bool {
		for _, id := range ids {
			if info, err := in.Task(ctx, "res", id); err != nil || info.State != worqr.StateDone {
				return false
			}
		}
		return true
	})
	if max := pool.biggest.Load(); max > 5<<20 {
		t.Fatalf("one end call carried %d bytes (%d calls for %d results of 1 MiB); want about MaxEnqueueChunkBytes (4 MiB) at most",
			max, pool.calls.Load(), n)
	}
	t.Logf("%d calls, the biggest %d bytes", pool.calls.Load(), pool.biggest.Load())
}

// Children that fail their runs (fail-fast) at the same time are not all
// ended in one script call: each such ending stops every pending child of
// its run's fan-out (about 4 ms per 1,000), so it weighs the most a
// fan-out has in its group's call, and has a call of its own. One call
// failing children of 100 runs of 1,000 held Redis for 0.6 to 0.9 s
// (found by an audit).
func TestChildFailuresOfManyRunsAreSplit(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var perCall []int // fail-fast child endings (ask dead) of each end call
	record := func(args []any) bool {
		n := 0
		for i := 0; i+4 < len(args); i++ {
			if k, _ := args[i].(string); k == "child" {
				if ask, _ := args[i+4].(string); ask == "dead" {
					n++
				}
			}
		}
		if n > 0 {
			mu.Lock()
			perCall = append(perCall, n)
			mu.Unlock()
		}
		return false
	}
	var never atomic.Int32
	pool := &redis.Pool{MaxIdle: 8, DialContext: func(ctx context.Context) (redis.Conn, error) {
		c, err := redis.DialURLContext(ctx, srv.URL)
		if err != nil {
			return nil, err
		}
		return &redistest.LossyConn{Conn: c, Armed: &never, Match: record}, nil
	}}
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	cfg := fastTimings(ns)
	const n = 16
	gate := make(chan struct{})
	var ready sync.WaitGroup
	ready.Add(n)
	flow := &worqr.Flow{Name: "ff", Retention: time.Minute, Stages: []worqr.Stage{
		{Name: "s1", Queue: worqr.QueueConfig{Concurrency: n},
			Children: map[string]worqr.QueueConfig{"kids": {Concurrency: 2 * n, MaxAttempts: 1, Handler: worqr.HandlerFunc(
				func(ctx context.Context, t *worqr.Task) error {
					if string(t.Payload) == "good" {
						<-ctx.Done() // stopped by its sibling's failure
						return ctx.Err()
					}
					ready.Done()
					<-gate
					return worqr.SkipRetry(errors.New("boom"))
				})}},
			Handler: worqr.StageHandlerFunc(
				func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
					return &worqr.StageResult{Children: []worqr.ChildSpec{
						{Queue: "kids", Payload: []byte("bad")}, {Queue: "kids", Payload: []byte("good")}}}, nil
				})},
		{Name: "s2", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) { return nil, nil })},
	}}
	cfg.Flows = []*worqr.Flow{flow}
	startWorker(t, ctx, pool, &cfg)
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i := range ids {
		if ids[i], err = c.StartRun(ctx, flow, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	ready.Wait()
	close(gate)
	for _, id := range ids {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		r, err := c.WaitRun(wctx, flow, id)
		cancel()
		if err != nil || r.Status != worqr.RunFailed {
			t.Fatalf("run %s: %v, %v; want failed", id, r, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	total, most := 0, 0
	for _, k := range perCall {
		total += k
		most = max(most, k)
	}
	t.Logf("%d end calls ended %d failing children", len(perCall), total)
	// (The stopped siblings end as dead too, their runs already failed:
	// the worker cannot tell, so they weigh as much.)
	if total < n || most != 1 {
		t.Errorf("%d failing children ended, up to %d in one call: want at least %d, one per call", total, most, n)
	}
}

// Fan-outs that end together are not all written in one script call: an
// ending weighs its children (and fields) in its group's call, which holds
// about rdb.MaxTake of weight. 64 fan-outs of 1,000 children in one call
// held Redis for hundreds of milliseconds (found by an audit). A call that
// creates children carries about 5 arguments per child: with the weights
// each fan-out of defaults.MaxChildren (which weighs more than rdb.MaxTake) has a
// call of its own.
func TestGroupedFanOutsAreSplit(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var fanOuts []int // arguments of each script call that created children
	record := func(args []any) bool {
		if len(args) > 4*defaults.MaxChildren {
			mu.Lock()
			fanOuts = append(fanOuts, len(args))
			mu.Unlock()
		}
		return false
	}
	var never atomic.Int32
	pool := &redis.Pool{MaxIdle: 8, DialContext: func(ctx context.Context) (redis.Conn, error) {
		c, err := redis.DialURLContext(ctx, srv.URL)
		if err != nil {
			return nil, err
		}
		return &redistest.LossyConn{Conn: c, Armed: &never, Match: record}, nil
	}}
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	cfg := fastTimings(ns)
	const n = 64
	gate := make(chan struct{})
	started := make(chan struct{}, n)
	flow := &worqr.Flow{Name: "fan", Retention: time.Minute, Stages: []worqr.Stage{
		{Name: "s1", Queue: worqr.QueueConfig{Concurrency: n},
			Children: map[string]worqr.QueueConfig{"kids": {Concurrency: 1, Handler: worqr.HandlerFunc(
				func(ctx context.Context, t *worqr.Task) error { <-ctx.Done(); return ctx.Err() })}},
			Handler: worqr.StageHandlerFunc(
				func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
					ks := make([]worqr.ChildSpec, defaults.MaxChildren)
					for i := range ks {
						ks[i] = worqr.ChildSpec{Queue: "kids", Payload: []byte("0123456789abcdef")}
					}
					started <- struct{}{}
					<-gate
					return &worqr.StageResult{Children: ks}, nil
				})},
	}}
	cfg.Flows = []*worqr.Flow{flow}
	startWorker(t, ctx, pool, &cfg)
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := c.StartRun(ctx, flow, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		<-started
	}
	close(gate)
	wait(t, 60*time.Second, "every fan-out", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return sum(fanOuts) >= n*5*defaults.MaxChildren
	})
	mu.Lock()
	defer mu.Unlock()
	sort.Ints(fanOuts)
	t.Logf("%d calls created children; arguments: fewest %d, most %d", len(fanOuts), fanOuts[0], fanOuts[len(fanOuts)-1])
	if len(fanOuts) != n || fanOuts[len(fanOuts)-1] >= 2*fanOuts[0] {
		t.Errorf("one call carried %d arguments, another %d: %d calls for %d fan-outs: fan-outs were grouped", fanOuts[len(fanOuts)-1], fanOuts[0], len(fanOuts), n)
	}
}

// A Worker's end whose reply is lost after Redis applied it, for a task
// whose cancel was asked while it ran: the end recorded it cancelled, and
// so says the worker's event, not the done its handler asked for.
func TestWorkerLostEndReplyOfACancelledTask(t *testing.T) {
	ctx := context.Background()
	var armed atomic.Int32
	pool := &redis.Pool{MaxIdle: 8, DialContext: func(ctx context.Context) (redis.Conn, error) {
		c, err := redis.DialURLContext(ctx, srv.URL)
		if err != nil {
			return nil, err
		}
		return &redistest.LossyConn{Conn: c, Armed: &armed, Match: redistest.HasArg("done")}, nil
	}}
	defer pool.Close()
	events := make(chan worqr.Event, 100)
	cfg := worqr.Config{Namespace: redistest.Namespace()}
	started := make(chan struct{}, 1)
	startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: cfg, OnEvent: func(e worqr.Event) {
		if e.Kind == worqr.EventDone || e.Kind == worqr.EventCancelled || e.Kind == worqr.EventLost {
			events <- e
		}
	},
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 1, Retention: time.Minute,
			Handler: worqr.HandlerFunc(func(hctx context.Context, _ *worqr.Task) error {
				started <- struct{}{}
				<-hctx.Done()  // the cancel
				armed.Store(1) // the end's reply is lost
				return nil
			})}}})
	c, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, pool, &cfg)
	id, err := c.Enqueue(ctx, "q", []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	if st, err := c.Cancel(ctx, "q", id); err != nil || st != worqr.CancelRequested {
		t.Fatalf("Cancel = %v, %v; want requested", st, err)
	}
	select {
	case e := <-events:
		if e.Kind != worqr.EventCancelled || e.TaskID != id {
			t.Fatalf("event %s of %s, want cancelled of %s", e.Kind, e.TaskID, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no end event")
	}
	if armed.Load() >= 0 {
		t.Fatal("no reply was lost: the test did not test anything")
	}
	if info, err := in.Task(ctx, "q", id); err != nil || info.State != worqr.StateCancelled {
		t.Fatalf("task = %+v, %v; want cancelled", info, err)
	}
}
