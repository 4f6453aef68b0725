package worqr_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// cmdPool is a pool that counts the commands sent through it by name and
// can be broken: while broken it hands out no connection (nothing is sent).
type cmdPool struct {
	pool   *redis.Pool
	broken atomic.Bool
	refuse atomic.Int64 // GetContext calls refused while broken
	mu     sync.Mutex
	n      map[string]int
	// onSend, when set (before the pool is used), runs before every
	// command sent with Send, and may hold it.
	onSend func(cmd string)
}

func newCmdPool() *cmdPool { return &cmdPool{pool: srv.Pool(), n: map[string]int{}} }

func (p *cmdPool) GetContext(ctx context.Context) (redis.Conn, error) {
	if p.broken.Load() {
		p.refuse.Add(1)
		return nil, errors.New("test: connection refused")
	}
	c, err := p.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return &cmdConn{Conn: c, p: p}, nil
}

func (p *cmdPool) count(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[name]
}

type cmdConn struct {
	redis.Conn
	p *cmdPool
}

func (c *cmdConn) add(cmd string) {
	c.p.mu.Lock()
	c.p.n[strings.ToUpper(cmd)]++
	c.p.mu.Unlock()
}

func (c *cmdConn) Do(cmd string, args ...any) (any, error) {
	if cmd != "" {
		c.add(cmd)
	}
	return c.Conn.Do(cmd, args...)
}

func (c *cmdConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	if cmd != "" {
		c.add(cmd)
	}
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

func (c *cmdConn) Send(cmd string, args ...any) error {
	if c.p.onSend != nil {
		c.p.onSend(cmd)
	}
	c.add(cmd)
	return c.Conn.Send(cmd, args...)
}

func (c *cmdConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

func (c *cmdConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

func (c *cmdConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	c.add(cmd)
	return redis.DoWithTimeout(c.Conn, d, cmd, args...)
}

// waitHistory polls queue's history (the last 3 minutes, summed) until
// ok accepts it, or fails the test after 20 s.
func waitHistory(t *testing.T, in *worqr.Inspector, queue string, ok func(worqr.Throughput) bool) worqr.Throughput {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var sum worqr.Throughput
	for {
		h, err := in.History(context.Background(), queue, 3)
		if err != nil {
			t.Fatal(err)
		}
		sum = worqr.Throughput{}
		for _, m := range h {
			sum.Enqueued += m.Enqueued
			sum.Done += m.Done
			sum.Retried += m.Retried
			sum.Dead += m.Dead
			sum.Cancelled += m.Cancelled
			sum.Expired += m.Expired
			sum.Recovered += m.Recovered
		}
		if ok(sum) {
			return sum
		}
		if time.Now().After(deadline) {
			t.Fatalf("history of %q never matched: %+v", queue, sum)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

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
	c1, _ := worqr.NewClient(pool, &cfg)
	c2, _ := worqr.NewClient(pool, &cfg)
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
	in, _ := worqr.NewInspector(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
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
	c, _ := worqr.NewClient(p, &worqr.Config{Namespace: ns, EventInterval: 50 * time.Millisecond,
		Logger: quietLogger()})
	if _, err := c.EnqueueBatch(ctx, "kq", [][]byte{[]byte("a"), []byte("b"), []byte("c")}, nil); err != nil {
		t.Fatal(err)
	}
	p.broken.Store(true)
	deadline := time.Now().Add(10 * time.Second)
	for p.refuse.Load() < 1 { // a publication was tried and failed
		if time.Now().After(deadline) {
			t.Fatal("no publication was tried")
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.broken.Store(false)
	in, _ := worqr.NewInspector(srv.Pool(), &worqr.Config{Namespace: ns, DisableEvents: true})
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
	c, _ := worqr.NewClient(p, &worqr.Config{Namespace: ns})
	if _, err := c.EnqueueBatch(ctx, "cq", ps, nil); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		<-done
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	in, _ := worqr.NewInspector(p, &worqr.Config{Namespace: ns, DisableEvents: true})
	got := waitHistory(t, in, "cq", func(s worqr.Throughput) bool { return s.Done == n && s.Enqueued == n })
	pub, incr, exp := p.count("PUBLISH"), p.count("HINCRBY"), p.count("EXPIRE")
	t.Logf("%d tasks: %d event publications, %d HINCRBY, %d EXPIRE (history %+v)", n, pub, incr, exp, got)
	// A publication touches at most 2 minutes (a minute boundary) and, here,
	// 2 counters per minute (enqueued from the client, done from the worker).
	if pub == 0 || incr > 2*2*pub || exp > 2*pub || incr+exp >= n {
		t.Errorf("%d publications sent %d HINCRBY and %d EXPIRE for %d tasks: want at most 4 and 2 per publication", pub, incr, exp, n)
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

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
		if _, err := c.StartRun(ctx, flow, nil); err != nil {
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
	_, _, c, in := freshNamespace(t)
	tick := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	tid, err := c.Enqueue(ctx, "ticks", []byte("x"), &worqr.EnqueueOpts{ID: worqr.TickTaskID("every-minute", tick)})
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

// freshNamespace returns a pool (closed when the test ends), a fresh
// namespace, and a Client and an Inspector of it.
func freshNamespace(t *testing.T) (*redis.Pool, string, *worqr.Client, *worqr.Inspector) {
	t.Helper()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	return pool, ns, c, in
}
