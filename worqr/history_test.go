package worqr_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/rdb"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// TestHistoryAddsUpAcrossProcesses: two clients and two workers, each with
// its own event publisher, count into the same per-minute history, which a
// third party (an Inspector that saw none of it) reads back: the sums are
// exact, per queue and in total. Without the counters written with each
// publication the history stays empty.
func TestHistoryAddsUpAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Namespace()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	cfg := worqr.Config{Namespace: ns, EventInterval: 20 * time.Millisecond}
	c1 := newClient(t, pool, &cfg)
	c2 := newClient(t, pool, &cfg)
	for i := 0; i < 5; i++ {
		if _, err := c1.Enqueue(ctx, "hq", []byte("ok"), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c2.EnqueueBatch(ctx, "hq", [][]byte{[]byte("ok"), []byte("ok"), []byte("fail")}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Enqueue(ctx, "other", []byte("ok"), nil); err != nil {
		t.Fatal(err)
	}
	h := worqr.HandlerFunc(func(_ context.Context, task *worqr.Task) error {
		if string(task.Payload) == "fail" {
			return errors.New("boom")
		}
		return nil
	})
	qc := worqr.QueueConfig{Handler: h, MaxAttempts: 2, Concurrency: 2,
		Backoff: func(int, error) time.Duration { return time.Millisecond }}
	var ws []*worqr.Worker
	for i := 0; i < 2; i++ {
		wc := fastTimings(ns)
		wc.EventInterval = 20 * time.Millisecond
		wc.Queues = map[string]worqr.QueueConfig{"hq": qc, "other": qc}
		w, err := worqr.NewWorker(pool, &wc)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	t.Cleanup(func() {
		for _, w := range ws {
			_ = w.Stop(ctx)
		}
	})
	in := newInspector(t, pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	waitHistory(t, in, "hq", func(s worqr.Throughput) bool { return s.Done >= 7 && s.Dead >= 1 })
	// Let any late publication land, then read again: nothing doubles.
	for _, w := range ws {
		if err := w.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got := waitHistory(t, in, "hq", func(worqr.Throughput) bool { return true })
	want := worqr.Throughput{Enqueued: 8, Done: 7, Retried: 1, Dead: 1}
	if got != want {
		t.Errorf("history of hq = %+v, want %+v", got, want)
	}
	all := waitHistory(t, in, "", func(worqr.Throughput) bool { return true })
	want = worqr.Throughput{Enqueued: 9, Done: 8, Retried: 1, Dead: 1}
	if all != want {
		t.Errorf("history of every queue = %+v, want %+v", all, want)
	}
	hs, err := in.History(ctx, "", 60)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 60 || time.Since(hs[59].Minute) >= time.Minute || hs[59].Minute.Sub(hs[0].Minute) != 59*time.Minute {
		t.Fatalf("60 minutes should end with the current one: %d, %v .. %v", len(hs), hs[0].Minute, hs[len(hs)-1].Minute)
	}
	var other int64
	for _, m := range hs {
		other += m.Queues["other"].Done
	}
	if other != 1 {
		t.Errorf("done in queue other = %d, want 1", other)
	}
}

// TestHistoryKeptWhenNothingWasSent: counts whose publication could not
// reach Redis at all (no connection) are sent with a later publication,
// once; the events of that batch are dropped, the counts are not.
func TestHistoryKeptWhenNothingWasSent(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Namespace()
	p := newCmdPool()
	t.Cleanup(func() { p.pool.Close() })
	c := newClient(t, p, &worqr.Config{Namespace: ns, EventInterval: 50 * time.Millisecond,
		Logger: quietLogger()})
	if _, err := c.EnqueueBatch(ctx, "kq", [][]byte{[]byte("a"), []byte("b"), []byte("c")}, nil); err != nil {
		t.Fatal(err)
	}
	p.broken.Store(true)
	// A publication was tried and failed.
	wait(t, 10*time.Second, "a publication to be tried", func() bool { return p.refuse.Load() >= 1 })
	p.broken.Store(false)
	in := newInspector(t, srv.Pool(), &worqr.Config{Namespace: ns, DisableEvents: true})
	waitHistory(t, in, "kq", func(s worqr.Throughput) bool { return s.Enqueued > 0 })
	time.Sleep(200 * time.Millisecond) // a few more intervals: nothing more is sent
	if got := waitHistory(t, in, "kq", func(worqr.Throughput) bool { return true }); got.Enqueued != 3 {
		t.Errorf("enqueued = %d, want 3", got.Enqueued)
	}
}

// TestHistoryCostIsPerPublication: the history adds no command per task:
// over a run of 300 tasks through a worker, the history commands (HINCRBY,
// EXPIRE) are bounded by the publications (PUBLISH) times the counters and
// minutes one publication can touch, not by the tasks.
func TestHistoryCostIsPerPublication(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Namespace()
	p := newCmdPool()
	t.Cleanup(func() { p.pool.Close() })
	const n = 300
	ps := make([][]byte, n)
	for i := range ps {
		ps[i] = []byte("x")
	}
	done := make(chan struct{}, n)
	wc := fastTimings(ns)
	wc.Queues = map[string]worqr.QueueConfig{"cq": {Concurrency: 8, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
		done <- struct{}{}
		return nil
	})}}
	w, err := worqr.NewWorker(p, &wc)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, p, &worqr.Config{Namespace: ns})
	if _, err := c.EnqueueBatch(ctx, "cq", ps, nil); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		<-done
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, p, &worqr.Config{Namespace: ns, DisableEvents: true})
	got := waitHistory(t, in, "cq", func(s worqr.Throughput) bool { return s.Done == n && s.Enqueued == n })
	pub, incr, exp := p.count("PUBLISH"), p.count("HINCRBY"), p.count("EXPIRE")
	t.Logf("%d tasks: %d event publications, %d HINCRBY, %d EXPIRE (history %+v)", n, pub, incr, exp, got)
	// A publication touches at most 2 minutes (a minute boundary) and, here,
	// 2 counters per minute (enqueued from the client, done from the worker).
	if pub == 0 || incr > 2*2*pub || exp > 2*pub || incr+exp >= n {
		t.Errorf("%d publications sent %d HINCRBY and %d EXPIRE for %d tasks: want at most 4 and 2 per publication", pub, incr, exp, n)
	}
}

// A flow's queue is "<flow>/<queue>" in the events and the history, as in
// every Inspector method: a stand-alone queue of the same name keeps its
// own counts (the two were added up under the bare name).
func TestHistoryNamesAFlowQueueWithItsFlow(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Namespace()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	done := worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil })
	flow := &worqr.Flow{Name: "fl", Stages: []worqr.Stage{{Name: "notify", Queue: worqr.QueueConfig{Concurrency: 1},
		Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return &worqr.StageResult{}, nil })}}}
	var mu sync.Mutex
	stageEvents := map[string]int{}
	wc := fastTimings(ns)
	wc.EventInterval = 20 * time.Millisecond
	wc.Flows = []*worqr.Flow{flow}
	wc.Queues = map[string]worqr.QueueConfig{"notify": {Handler: done, Concurrency: 1}}
	wc.OnEvent = func(e worqr.Event) {
		if e.Kind == worqr.EventDone {
			mu.Lock()
			stageEvents[e.Queue]++
			mu.Unlock()
		}
	}
	startWorker(t, ctx, pool, &wc)
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := c.StartRun(ctx, flow, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		if _, err := c.Enqueue(ctx, "notify", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	done2 := func(queue string) int64 {
		ms, err := in.History(ctx, queue, 2)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, m := range ms {
			n += m.Done
		}
		return n
	}
	wait(t, 10*time.Second, "both queues' history", func() bool { return done2("fl/notify") >= 2 && done2("notify") >= 3 })
	if f, s := done2("fl/notify"), done2("notify"); f != 2 || s != 3 {
		t.Fatalf("history: fl/notify %d done, notify %d; want 2 and 3", f, s)
	}
	mu.Lock()
	defer mu.Unlock()
	if stageEvents["fl/notify"] != 2 || stageEvents["notify"] != 3 {
		t.Fatalf("done events by queue %v; want fl/notify 2, notify 3", stageEvents)
	}
}

// A queue's latency and a task's enqueue time are read from the task's id:
// a periodic tick's id carries its tick's time; an id of the caller's
// choosing carries none (zero, not a made-up time).
func TestLatencyOfATickAndOfACallersID(t *testing.T) {
	ctx := context.Background()
	bundle := setup(t)
	c, in := bundle.client, bundle.in
	tick := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	tid, err := c.Enqueue(ctx, "ticks", []byte("x"), &worqr.EnqueueOpts{ID: rdb.TickTaskID("every-minute", tick)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, "mine", []byte("x"), &worqr.EnqueueOpts{ID: "order-1700000000000"}); err != nil {
		t.Fatal(err)
	}
	qi, err := in.Queue(ctx, "ticks")
	if err != nil {
		t.Fatal(err)
	}
	if qi.Latency < time.Minute {
		t.Errorf("latency of a queue whose head ticked a minute ago: %s", qi.Latency)
	}
	info, err := in.Task(ctx, "ticks", tid)
	if err != nil || !info.EnqueuedAt.Equal(tick) {
		t.Errorf("tick's EnqueuedAt = %v (%v), want %v", info.EnqueuedAt, err, tick)
	}
	if qi, err := in.Queue(ctx, "mine"); err != nil || qi.Latency != 0 || qi.Waiting != 1 {
		t.Errorf("queue whose head has the caller's id: %+v, %v; want latency 0 (unknown)", qi, err)
	}
}

// A run cancelled while its stage task waits, and the waiting children of
// a run cancelled after its fan-out, are taken out of their queues by the
// cancel itself: no end of a taking reports them, so the cancel must, or
// the history (and every follower of the events: the dashboard, the
// Prometheus collector) never counts them. Before, CancelRun's only event
// carried no queue: the waiting run counted nothing, and of three children
// (one running, two waiting) only the running one counted.
func TestHistoryCountsWhatARunCancelTookOut(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Namespace()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	var running atomic.Int32
	kid := worqr.HandlerFunc(func(ctx context.Context, _ *worqr.Task) error {
		running.Add(1)
		<-ctx.Done() // until the run's cancel reaches it
		return ctx.Err()
	})
	fan := worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
		return &worqr.StageResult{Children: []worqr.ChildSpec{{Queue: "kids"}, {Queue: "kids"}, {Queue: "kids"}}}, nil
	})
	served := &worqr.Flow{Name: "served", Stages: []worqr.Stage{{Name: "fan", Queue: worqr.QueueConfig{Concurrency: 1},
		Children: map[string]worqr.QueueConfig{"kids": {Concurrency: 1, Handler: kid}}, Handler: fan}}}
	idle := &worqr.Flow{Name: "idle", Stages: []worqr.Stage{{Name: "first", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: fan}}}
	c := flowWorker(t, ctx, pool, ns, served)
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	cancelled := func(queue string) int64 {
		ms, err := in.History(ctx, queue, 2)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, m := range ms {
			n += m.Cancelled
		}
		return n
	}

	// A run no worker serves waits in its first stage.
	id, err := c.StartRun(ctx, idle, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := c.CancelRun(ctx, idle, id); err != nil || !ok {
		t.Fatalf("CancelRun: %v %v", ok, err)
	}
	c.Flush()
	if n := cancelled("idle/first"); n != 1 {
		t.Errorf("history of idle/first: %d cancelled, want 1 (the run taken out of the stage's queue)", n)
	}

	// A run fanned out to three children of concurrency 1: one runs, two
	// wait.
	id, err = c.StartRun(ctx, served, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wait(t, 10*time.Second, "a child to run", func() bool { return running.Load() == 1 })
	if ok, err := c.CancelRun(ctx, served, id); err != nil || !ok {
		t.Fatalf("CancelRun: %v %v", ok, err)
	}
	c.Flush()
	wait(t, 10*time.Second, "3 cancels of served/kids in its history", func() bool { return cancelled("served/kids") >= 3 })
	if n := cancelled("served/kids"); n != 3 {
		t.Errorf("history of served/kids: %d cancelled, want 3 (one running, told; two waiting, taken out)", n)
	}
	if n := cancelled("served/fan"); n != 0 {
		t.Errorf("history of served/fan: %d cancelled, want 0 (the stage had fanned out: it ran and ended)", n)
	}
	if r := running.Load(); r != 1 {
		t.Errorf("%d children ran, want 1", r)
	}
}

// A child that ends dead fails its run (fail-fast, the default) and takes
// its waiting siblings out of their queue in the same end: those cancels
// are reported by that end (no end of their own will), and counted.
func TestHistoryCountsTheSiblingsAFailedChildTookOut(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Namespace()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	var ran atomic.Int32
	flow := fanOfThree("ff", worqr.QueueConfig{Concurrency: 1, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
		ran.Add(1)
		return worqr.SkipRetry(errors.New("no")) // dead at once: the run fails
	})})
	c := flowWorker(t, ctx, pool, ns, flow)
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.StartRun(ctx, flow, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFailed(t, ctx, c, flow, id)
	if d, k := deadAndCancelled(t, ctx, in, "ff/kids"); d != 1 || k != 2 || ran.Load() != 1 {
		t.Errorf("history of ff/kids: %d dead, %d cancelled, %d ran; want 1 dead (the child that failed), 2 cancelled (its waiting siblings), 1 ran", d, k, ran.Load())
	}
}

// A child that crashed MaxCrashes workers is buried by the take that
// reaches it, and fails its run (fail-fast) as a child that ends dead
// does: the take takes its waiting siblings out of their queue, and no
// end of a taking reports those cancels; the take's worker must. Before,
// the buried child counted dead and its two siblings nowhere.
func TestHistoryCountsTheSiblingsABuriedChildTookOut(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Namespace()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	var ran atomic.Int32
	flow := fanOfThree("pc", worqr.QueueConfig{Concurrency: 1, MaxCrashes: 2, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
		ran.Add(1)
		return nil
	})})
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	// The children wait, untaken, until the first is made a poison one.
	if err := in.Pause(ctx, "pc/kids"); err != nil {
		t.Fatal(err)
	}
	c := flowWorker(t, ctx, pool, ns, flow)
	id, err := c.StartRun(ctx, flow, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := pool.Get()
	defer conn.Close()
	waiting := ns + ":{pc}:q:kids"
	var kids []string
	wait(t, 10*time.Second, "the fan-out", func() bool {
		kids, err = redis.Strings(conn.Do("LRANGE", waiting, 0, -1))
		return err == nil && len(kids) == 3
	})
	// Its holders died twice (as the reaper counts them).
	if _, err := conn.Do("HSET", ns+":{pc}:t:"+kids[0], "c", 2); err != nil {
		t.Fatal(err)
	}
	if err := in.Resume(ctx, "pc/kids"); err != nil {
		t.Fatal(err)
	}
	waitFailed(t, ctx, c, flow, id)
	if d, k := deadAndCancelled(t, ctx, in, "pc/kids"); d != 1 || k != 2 || ran.Load() != 0 {
		t.Errorf("history of pc/kids: %d dead, %d cancelled, %d ran; want 1 dead (the buried child), 2 cancelled (its waiting siblings), 0 ran", d, k, ran.Load())
	}
}

// fanOfThree is a flow of one stage that fans out three children to its
// child queue "kids", served as kids.
func fanOfThree(name string, kids worqr.QueueConfig) *worqr.Flow {
	fan := worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
		return &worqr.StageResult{Children: []worqr.ChildSpec{{Queue: "kids"}, {Queue: "kids"}, {Queue: "kids"}}}, nil
	})
	return &worqr.Flow{Name: name, Stages: []worqr.Stage{{Name: "fan", Queue: worqr.QueueConfig{Concurrency: 1},
		Children: map[string]worqr.QueueConfig{"kids": kids}, Handler: fan}}}
}

// waitFailed waits until run id of flow has failed.
func waitFailed(t *testing.T, ctx context.Context, c *worqr.Client, flow *worqr.Flow, id string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if r, err := c.WaitRun(wctx, flow, id); err != nil || r.Status != worqr.RunFailed {
		t.Fatalf("WaitRun: %+v %v; want failed", r, err)
	}
}

// deadAndCancelled adds up queue's history of the last two minutes, once
// its dead count is at least one.
func deadAndCancelled(t *testing.T, ctx context.Context, in *worqr.Inspector, queue string) (dead, cancelled int64) {
	t.Helper()
	count := func() (dead, cancelled int64) {
		ms, err := in.History(ctx, queue, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			dead, cancelled = dead+m.Dead, cancelled+m.Cancelled
		}
		return dead, cancelled
	}
	wait(t, 10*time.Second, "the history of "+queue, func() bool { d, _ := count(); return d >= 1 })
	return count() // (the worker's events of one end or take are published together)
}

// flowWorker starts a worker of flow on pool (fast timings, events
// published every 20 ms) and returns a client of namespace ns.
func flowWorker(t *testing.T, ctx context.Context, pool *redis.Pool, ns string, flow *worqr.Flow) *worqr.Client {
	t.Helper()
	wc := fastTimings(ns)
	wc.EventInterval = 20 * time.Millisecond
	wc.Flows = []*worqr.Flow{flow}
	startWorker(t, ctx, pool, &wc)
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Inspector.CancelAll (worqr queue cancel) publishes what it cancelled:
// the history's Cancelled counted only the task cancelled by Client.Cancel
// (found by an audit).
func TestCancelAllCountedInHistory(t *testing.T) {
	ctx := context.Background()
	bundle := setup(t)
	c, in := bundle.client, bundle.in
	var ids []string
	for i := 0; i < 4; i++ {
		id, err := c.Enqueue(ctx, "hc", []byte("x"), nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if _, err := c.Cancel(ctx, "hc", ids[0]); err != nil {
		t.Fatal(err)
	}
	n, err := in.CancelAll(ctx, "hc", nil)
	if err != nil || n != 3 {
		t.Fatalf("CancelAll = %d, %v", n, err)
	}
	c.Flush() // each waits for its publication
	in.Flush()
	got := waitHistory(t, in, "hc", func(s worqr.Throughput) bool { return s.Enqueued >= 4 && s.Cancelled >= 4 })
	if got.Enqueued != 4 || got.Cancelled != 4 {
		t.Errorf("history of hc: %+v, want 4 enqueued and 4 cancelled", got)
	}
}
