package worqr_test

import (
	"bytes"
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// A task taken after its deadline is never run: it ends as expired, seen
// in the events, Inspector.Tasks and Inspector.Task (kept for its own retention
// though its queue keeps nothing), and Wait returns it.
func TestDeadlinePassedTaskEndsExpiredWithoutRunning(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	defer pool.Close()
	cfg := worqr.Config{Namespace: redistest.Namespace(), EventInterval: 20 * time.Millisecond}
	c := newClient(t, pool, &cfg)
	in := newInspector(t, pool, &cfg)
	late, err := c.Enqueue(ctx, "q", []byte("late"), &worqr.EnqueueOpts{Deadline: time.Now().Add(-time.Minute), Retention: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ontime, err := c.Enqueue(ctx, "q", []byte("ontime"), &worqr.EnqueueOpts{Deadline: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ran := map[string]bool{}
	events := map[string][]worqr.EventKind{}
	done := make(chan struct{}, 2)
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{
		Config: cfg,
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 2, Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
			mu.Lock()
			ran[string(t.Payload)] = true
			mu.Unlock()
			return nil
		})}},
		OnEvent: func(e worqr.Event) {
			mu.Lock()
			events[e.TaskID] = append(events[e.TaskID], e.Kind)
			mu.Unlock()
			if e.Kind == worqr.EventExpired || e.Kind == worqr.EventDone {
				done <- struct{}{}
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	waited := make(chan *worqr.TaskInfo, 1)
	go func() {
		info, err := c.Wait(waitCtx, "q", late)
		if err != nil {
			t.Error(err)
		}
		waited <- info
	}()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(ctx)
	for i := 0; i < 2; i++ {
		select {
		case <-done:
		case <-waitCtx.Done():
			t.Fatal("the tasks did not end")
		}
	}
	mu.Lock()
	if ran["late"] || !ran["ontime"] {
		t.Errorf("ran %v: want only the task within its deadline", ran)
	}
	if got := events[late]; len(got) != 1 || got[0] != worqr.EventExpired {
		t.Errorf("events of the late task %v, want [expired] (never started)", got)
	}
	if got := events[ontime]; len(got) != 2 || got[1] != worqr.EventDone {
		t.Errorf("events of the task on time %v", got)
	}
	mu.Unlock()
	info, err := in.Task(ctx, "q", late)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != worqr.StateExpired || info.FinishedAt.IsZero() || info.Deadline.IsZero() || info.Retention != time.Minute {
		t.Errorf("expired task: %+v", info)
	}
	list, total, err := in.Tasks(ctx, "q", worqr.StateExpired, 0, 10)
	if err != nil || total != 1 || len(list) != 1 || list[0].ID != late {
		t.Errorf("Inspector.Tasks(expired) = %v, %d, %v", list, total, err)
	}
	if _, err := in.Task(ctx, "q", ontime); !errors.Is(err, worqr.ErrTaskNotFound) {
		t.Errorf("the done task without retention: %v, want ErrTaskNotFound", err)
	}
	select {
	case info := <-waited:
		if info == nil || info.State != worqr.StateExpired {
			t.Errorf("Wait returned %+v", info)
		}
	case <-waitCtx.Done():
		t.Fatal("Wait did not return")
	}
}

// bigTasks enqueues n tasks of 600 KiB on queue "big" of a new namespace
// (a take hands out one of them: a second would pass 1 MiB) and returns
// the pool, the namespace, an inspector of it and the tasks' ids.
func bigTasks(t *testing.T, n int) (*redis.Pool, string, *worqr.Inspector, []string) {
	t.Helper()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	cfg := worqr.Config{Namespace: ns, DisableEvents: true}
	c, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	ps := make([][]byte, n)
	for i := range ps {
		ps[i] = bytes.Repeat([]byte{byte('a' + i)}, 600<<10)
	}
	ids, err := c.EnqueueBatch(context.Background(), "big", ps, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pool, ns, newInspector(t, pool, &cfg), ids
}

// gatedStarts is a handler that counts the tasks it starts and holds each
// until the gate closes.
type gatedStarts struct {
	mu      sync.Mutex
	started map[string]int
	gate    chan struct{}
}

func newGatedStarts() *gatedStarts {
	return &gatedStarts{started: map[string]int{}, gate: make(chan struct{})}
}

func (g *gatedStarts) HandleTask(ctx context.Context, task *worqr.Task) error {
	g.mu.Lock()
	g.started[task.ID]++
	g.mu.Unlock()
	<-g.gate
	return nil
}

// distinct returns how many tasks started, and whether one started twice.
func (g *gatedStarts) distinct() (int, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, k := range g.started {
		if k != 1 {
			return len(g.started), true
		}
	}
	return len(g.started), false
}

// A take hands out about 1 MiB of payloads at most (a take of 50 tasks of
// 1 MiB held Redis for 90 ms): the tasks it gives back wake the worker,
// which takes again at once. Its poll is an hour away: a worker that waited
// for it would start one task of twelve.
func TestBigTasksAreTakenInSteps(t *testing.T) {
	ctx := context.Background()
	const n = 12
	pool, ns, in, ids := bigTasks(t, n)
	g := newGatedStarts()
	cfg := fastTimings(ns)
	cfg.PollInterval = time.Hour
	cfg.DisableEvents = true
	cfg.Queues = map[string]worqr.QueueConfig{"big": {Concurrency: n, Retention: time.Minute, Handler: g}}
	startWorker(t, ctx, pool, &cfg)
	wait(t, 10*time.Second, "every task started at once", func() bool {
		k, _ := g.distinct()
		return k == n
	})
	close(g.gate)
	wait(t, 10*time.Second, "every task done", func() bool {
		for _, id := range ids {
			if info, err := in.Task(ctx, "big", id); err != nil || info.State != worqr.StateDone {
				return false
			}
		}
		return true
	})
	if _, twice := g.distinct(); twice {
		t.Errorf("a task started twice: %v", g.started)
	}
}

// A take of a queue served in a priority group gives back the tasks past
// its byte bound with a wake-up, as any take: the group must take again on
// that wake-up. It did not: the wake-up (a few bytes) came before the
// take's reply (about 1 MiB) was read, its hint was overwritten by the
// take's "came back short" (more = false), and the queue left the draw
// until the next poll: one task of twelve started per poll interval.
func TestBigTasksInAPriorityGroupAreTakenInSteps(t *testing.T) {
	ctx := context.Background()
	const n = 12
	pool, ns, _, _ := bigTasks(t, n)
	g := newGatedStarts()
	defer close(g.gate)
	cfg := fastTimings(ns)
	cfg.PollInterval = time.Hour
	cfg.DisableEvents = true
	cfg.Priority = worqr.PriorityWeighted
	cfg.Concurrency = n
	cfg.Queues = map[string]worqr.QueueConfig{
		"big":   {Concurrency: n, Weight: 1, Handler: g},
		"other": {Concurrency: n, Weight: 1, Handler: g},
	}
	startWorker(t, ctx, pool, &cfg)
	wait(t, 10*time.Second, "every task started at once (the poll is an hour away)", func() bool {
		k, _ := g.distinct()
		return k == n
	})
}

// A worker whose free slots cover its queue's whole rate (here 2 starts a
// minute, 2 slots) took an empty queue, and the take said "the rate is
// used up, wait a minute": it counted on starts it did not make. A task
// enqueued then waited for that minute (or the next polls), with no
// start in the window. It starts at once now.
func TestIdleRateLimitedQueueStartsAtOnce(t *testing.T) {
	ctx := context.Background()
	bundle := setup(t)
	pool, ns, c := bundle.pool, bundle.ns, bundle.client
	counter := &takeCounter{pool: pool}
	ran := make(chan struct{}, 1)
	cfg := fastTimings(ns)
	cfg.PollInterval = time.Hour
	cfg.DisableHandoff = true
	cfg.Queues = map[string]worqr.QueueConfig{"r": {Concurrency: 2, Limits: &worqr.Limits{Rate: 2, Period: time.Minute},
		Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error { ran <- struct{}{}; return nil })}}
	startWorker(t, ctx, counter, &cfg)
	wait(t, 10*time.Second, "the worker's first take (of the empty queue)", func() bool { return counter.takes.Load() > 0 })
	if _, err := c.Enqueue(ctx, "r", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("a task enqueued to an idle rate-limited queue did not start: the worker waits out a period no start used")
	}
}

// TestGlobalConcurrencyAcrossProcesses: a child process (re-executed test
// binary) and two in-process workers serve a queue limited to 4 running
// tasks, with room for 14 between them. The child takes the 4 slots and is
// killed with SIGKILL: its slots come back once the reaper requeues its
// takings, and at no time do more than 4 handlers of live workers run.
func TestGlobalConcurrencyAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	c := newClient(t, pool, &worqr.Config{Namespace: ns})
	ps := make([][]byte, 400)
	for i := range ps {
		ps[i] = []byte("x")
	}
	if _, err := c.EnqueueBatch(ctx, "lim", ps, nil); err != nil {
		t.Fatal(err)
	}
	rc := newRunCounter(pool, ns)
	child := startChild(t, "limits", ns)
	wait(t, 20*time.Second, "the child to run 4 tasks", func() bool { return rc.of(t, "child") == 4 })

	var done atomic.Int32
	for _, name := range []string{"A", "B"} {
		cfg := fastTimings(ns)
		cfg.Queues = map[string]worqr.QueueConfig{"lim": {Concurrency: 5, Limits: &worqr.Limits{Concurrency: 4},
			Handler: limitHandler(rc, name, 5*time.Millisecond, nil, &done)}}
		startWorker(t, ctx, pool, &cfg)
	}
	time.Sleep(300 * time.Millisecond) // the in-process workers try, and must find no slot
	if a, b := rc.of(t, "A"), rc.of(t, "B"); a+b != 0 {
		t.Fatalf("A and B run %d and %d tasks while the child holds the 4 slots", a, b)
	}
	killed := time.Now()
	child.kill(t)
	rc.markGone(t, "child")
	wait(t, 10*time.Second, "A and B to run tasks after the kill", func() bool { return done.Load() > 0 })
	t.Logf("first task done on a live worker %s after the SIGKILL", time.Since(killed).Round(time.Millisecond))
	rc.resetMax(t)
	wait(t, 60*time.Second, "the queue to drain", func() bool { return done.Load() == 400 })
	if m := rc.max(t); m != 4 {
		t.Errorf("at most %d handlers ran at once after the recovery, want exactly the limit 4 (slots given back)", m)
	}
}

// TestGlobalConcurrencyZombie: a worker frozen while it holds every slot of
// a limited queue (its keepalive clock stops) loses its takings to the
// reaper; the slots come back to a live worker, and the zombie's late ends
// are refused (lost), changing nothing.
func TestGlobalConcurrencyZombie(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	c := newClient(t, pool, &worqr.Config{Namespace: ns})
	ps := make([][]byte, 100)
	for i := range ps {
		ps[i] = []byte("x")
	}
	if _, err := c.EnqueueBatch(ctx, "lim", ps, nil); err != nil {
		t.Fatal(err)
	}
	rc := newRunCounter(pool, ns)
	release := make(chan struct{})
	var lost atomic.Int32
	zcfg := fastTimings(ns)
	zcfg.DisableReaper = true
	zcfg.Queues = map[string]worqr.QueueConfig{"lim": {Concurrency: 6, Limits: &worqr.Limits{Concurrency: 3},
		Handler: limitHandler(rc, "Z", 0, release, nil)}}
	zcfg.OnEvent = func(e worqr.Event) {
		if e.Kind == worqr.EventLost {
			lost.Add(1)
		}
	}
	clock := newBeatClock()
	zctx := withClock(ctx, clock)
	startWorker(t, zctx, pool, &zcfg)
	wait(t, 10*time.Second, "the zombie-to-be to hold 3 slots", func() bool { return rc.of(t, "Z") == 3 })
	clock.freeze() // no more beats: its keepalive expires
	rc.markGone(t, "Z")

	var done atomic.Int32
	cfg := fastTimings(ns)
	cfg.Queues = map[string]worqr.QueueConfig{"lim": {Concurrency: 6,
		Handler: limitHandler(rc, "B", 5*time.Millisecond, nil, &done)}}
	startWorker(t, ctx, pool, &cfg)
	wait(t, 60*time.Second, "B to drain the queue", func() bool { return done.Load() == 100 })
	if m := rc.max(t); m != 3 {
		t.Errorf("at most %d handlers of live workers ran at once, want the limit 3", m)
	}
	close(release) // the zombie's handlers return: their ends are refused
	wait(t, 10*time.Second, "the zombie's 3 ends to be refused", func() bool { return lost.Load() >= 3 })
}

// TestRateLimitAcrossWorkers: two workers share a queue limited to 20
// starts per second; every window of the period, on Redis's clock, holds at
// most 20 starts (less the slack between a take and its handler's start).
func TestRateLimitAcrossWorkers(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	c := newClient(t, pool, &worqr.Config{Namespace: ns})
	in := newInspector(t, pool, &worqr.Config{Namespace: ns})
	if err := in.SetLimits(ctx, "rate", worqr.Limits{Rate: 20, Period: time.Second}); err != nil {
		t.Fatal(err)
	}
	if l, err := in.Limits(ctx, "rate"); err != nil || l != (worqr.Limits{Rate: 20, Period: time.Second}) {
		t.Fatalf("Limits = %+v, %v", l, err)
	}
	ps := make([][]byte, 70)
	for i := range ps {
		ps[i] = []byte("x")
	}
	if _, err := c.EnqueueBatch(ctx, "rate", ps, nil); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var starts []int64 // Redis time, µs
	h := worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
		conn := pool.Get()
		v, err := redis.Int64s(conn.Do("TIME"))
		conn.Close()
		if err != nil {
			return err
		}
		mu.Lock()
		starts = append(starts, v[0]*1_000_000+v[1])
		mu.Unlock()
		return nil
	})
	for i := 0; i < 2; i++ {
		cfg := fastTimings(ns)
		cfg.Queues = map[string]worqr.QueueConfig{"rate": {Concurrency: 10, Handler: h}}
		startWorker(t, ctx, pool, &cfg)
	}
	wait(t, 30*time.Second, "70 starts", func() bool { mu.Lock(); defer mu.Unlock(); return len(starts) == 70 })
	mu.Lock()
	defer mu.Unlock()
	sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
	// The log counts takes; a handler starts after its take, up to a slack
	// (400ms allowed: a loaded machine under -race), so a window of the
	// period less the slack holds at most 20 handler starts.
	const slack = 400_000
	const window = 1_000_000 - slack
	for i := range starts {
		j := sort.Search(len(starts), func(k int) bool { return starts[k] >= starts[i]+window })
		if j-i > 20 {
			t.Fatalf("%d starts within %dms from start %d: over the limit of 20 per second", j-i, window/1000, i)
		}
	}
	if span := starts[len(starts)-1] - starts[0]; span < 3*1_000_000-slack {
		t.Errorf("70 starts within %dms: 20 per second needs at least 3s", span/1000)
	}
}

// TestLimitedWorkerDoesNotSpin: a worker whose queue is at its global
// limit (concurrency held by another worker, or the rate used up) waits for
// a wake-up, a poll or the time the take script named: over a second it
// sends a handful of takes, not thousands.
func TestLimitedWorkerDoesNotSpin(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	c := newClient(t, pool, &worqr.Config{Namespace: ns})
	in := newInspector(t, pool, &worqr.Config{Namespace: ns})
	for q, l := range map[string]worqr.Limits{"conc": {Concurrency: 1}, "rate": {Rate: 1, Period: time.Minute}} {
		if err := in.SetLimits(ctx, q, l); err != nil {
			t.Fatal(err)
		}
		if _, err := c.EnqueueBatch(ctx, q, [][]byte{[]byte("1"), []byte("2"), []byte("3")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	release := make(chan struct{})
	var held atomic.Int32
	block := worqr.HandlerFunc(func(context.Context, *worqr.Task) error { held.Add(1); <-release; return nil })
	hcfg := fastTimings(ns)
	hcfg.Queues = map[string]worqr.QueueConfig{"conc": {Concurrency: 1, Handler: block}, "rate": {Concurrency: 1, Handler: block}}
	startWorker(t, ctx, pool, &hcfg)
	wait(t, 10*time.Second, "the first worker to hold the conc slot and the rate's one start", func() bool { return held.Load() == 2 })

	counter := &takeCounter{pool: pool}
	var ran atomic.Int32
	acfg := fastTimings(ns)
	acfg.PollInterval = 100 * time.Millisecond
	acfg.DisableReaper = true
	acfg.Queues = map[string]worqr.QueueConfig{
		"conc": {Concurrency: 5, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error { ran.Add(1); return nil })},
		"rate": {Concurrency: 5, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error { ran.Add(1); return nil })},
	}
	startWorker(t, ctx, counter, &acfg)
	// 100 enqueues, 100 wake-ups: a rate that allows no start for a minute
	// must not cost a take each.
	for i := 0; i < 100; i++ {
		if _, err := c.Enqueue(ctx, "rate", []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := counter.takes.Load(); n > 60 {
		t.Errorf("a worker held by its queues' limits sent %d takes in a second (polls every 100ms): it spins", n)
	}
	if ran.Load() != 0 {
		t.Errorf("%d tasks ran past the limits", ran.Load())
	}
	t.Logf("%d takes in a second while held by the limits", counter.takes.Load())
	close(release)
	wait(t, 10*time.Second, "the conc queue's tasks to run once the slot is free", func() bool {
		qi, err := in.Queue(ctx, "conc")
		return err == nil && qi.Waiting == 0
	})
}

// A rate limit raised while a worker waits out the old one's period is
// honoured at once: the worker waited the rest of the old minute (found by
// a helper's audit).
func TestRaisedRateLimitTakesEffect(t *testing.T) {
	ctx := context.Background()
	bundle := setup(t)
	pool, ns, c, in := bundle.pool, bundle.ns, bundle.client, bundle.in
	var ran atomic.Int32
	cfg := fastTimings(ns)
	cfg.Queues = map[string]worqr.QueueConfig{"r": {Concurrency: 4, Limits: &worqr.Limits{Rate: 1, Period: time.Minute},
		Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error { ran.Add(1); return nil })}}
	startWorker(t, ctx, pool, &cfg)
	for i := 0; i < 3; i++ {
		if _, err := c.Enqueue(ctx, "r", []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
	}
	wait(t, 10*time.Second, "the first start", func() bool { return ran.Load() == 1 })
	if err := in.SetLimits(ctx, "r", worqr.Limits{Rate: 100, Period: time.Second}); err != nil {
		t.Fatal(err)
	}
	wait(t, 10*time.Second, "the other two under the raised rate", func() bool { return ran.Load() == 3 })
}
