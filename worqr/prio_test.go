package worqr_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// startWorker starts a worker for the test and stops it at the end.
func startWorker(t *testing.T, ctx context.Context, pool worqr.ConnGetter, cfg *worqr.WorkerConfig) *worqr.Worker {
	t.Helper()
	w, err := worqr.NewWorker(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})
	return w
}

// wait polls cond every 10ms until it holds or d passes.
func wait(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPriorityOrder10k drains 10,000 tasks of mixed priority levels with
// one worker taking one at a time: they run highest level first, in
// enqueue order within a level, and a task given back runs again at once
// (the front of its level) before anything else.
func TestPriorityOrder10k(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	const n = 10000
	r := rand.New(rand.NewPCG(1, 2))
	level := map[string]int{}
	seq := map[string]int{}
	// Runs of 1 to 50 tasks at a random level, levels interleaved.
	for i := 0; i < n; {
		k := min(1+r.IntN(50), n-i)
		l := r.IntN(worqr.MaxPriority + 1)
		ps := make([][]byte, k)
		for j := range ps {
			ps[j] = []byte(strconv.Itoa(i + j))
		}
		got, err := c.EnqueueBatch(ctx, "prio", ps, &worqr.EnqueueOpts{Priority: l})
		if err != nil {
			t.Fatal(err)
		}
		for j, id := range got {
			level[id], seq[id] = l, i+j
		}
		i += k
	}
	want := make([]string, 0, n)
	for id := range level {
		want = append(want, id)
	}
	sort.Slice(want, func(a, b int) bool {
		x, y := want[a], want[b]
		if level[x] != level[y] {
			return level[x] > level[y]
		}
		return seq[x] < seq[y]
	})
	var mu sync.Mutex
	var ran []string
	gaveBack := map[string]bool{}
	done := make(chan struct{})
	startWorker(t, ctx, pool, &worqr.WorkerConfig{
		Config: worqr.Config{Namespace: ns},
		Queues: map[string]worqr.QueueConfig{"prio": {Concurrency: 1, Handler: worqr.HandlerFunc(func(_ context.Context, tk *worqr.Task) error {
			mu.Lock()
			defer mu.Unlock()
			ran = append(ran, tk.ID)
			if seq[tk.ID]%97 == 0 && !gaveBack[tk.ID] {
				gaveBack[tk.ID] = true
				return worqr.ErrGiveBack
			}
			if len(ran) == n+len(gaveBack) {
				close(done)
			}
			return nil
		})}},
	})
	select {
	case <-done:
	case <-time.After(120 * time.Second):
		t.Fatal("10,000 tasks not drained in 2 minutes")
	}
	mu.Lock()
	defer mu.Unlock()
	var firsts []string
	for i, id := range ran {
		if gaveBack[id] && (i+1 >= len(ran) || ran[i+1] != id) && slices.Index(ran, id) == i {
			t.Fatalf("task %s (level %d) given back at %d did not run again next: the front of its level", id, level[id], i)
		}
		if slices.Index(ran, id) == i {
			firsts = append(firsts, id)
		}
	}
	if len(firsts) != n {
		t.Fatalf("%d distinct tasks ran, want %d", len(firsts), n)
	}
	bad := 0
	for i := range firsts {
		if firsts[i] != want[i] {
			bad++
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d tasks out of priority order", bad, n)
	}
	t.Logf("%d tasks ran in priority order (%d given back, each taken again next)", n, len(gaveBack))
}

// TestWeightedShares: a worker serving three queues of weights 6, 3 and 1,
// all with work, gives them about 60%, 30% and 10% of its takes.
func TestWeightedShares(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	c, _ := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	weights := map[string]int{"w6": 6, "w3": 3, "w1": 1}
	const each, sample = 4000, 4000
	for q := range weights {
		ps := make([][]byte, each)
		for i := range ps {
			ps[i] = []byte("x")
		}
		if _, err := c.EnqueueBatch(ctx, q, ps, nil); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	counts := map[string]int{}
	total := 0
	done := make(chan struct{})
	queues := map[string]worqr.QueueConfig{}
	for q, wt := range weights {
		q := q
		queues[q] = worqr.QueueConfig{Weight: wt, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
			mu.Lock()
			defer mu.Unlock()
			if total < sample {
				counts[q]++
				if total++; total == sample {
					close(done)
				}
			}
			return nil
		})}
	}
	startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: worqr.Config{Namespace: ns},
		Priority: worqr.PriorityWeighted, Concurrency: 8, Queues: queues})
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("not drained")
	}
	mu.Lock()
	defer mu.Unlock()
	for q, wt := range weights {
		share := float64(counts[q]) / sample
		if want := float64(wt) / 10; share < want-0.04 || share > want+0.04 {
			t.Errorf("queue %s (weight %d) got %.3f of %d takes, want %.2f ± 0.04 (counts %v)", q, wt, share, sample, want, counts)
		}
	}
	t.Logf("shares over %d takes: %v", sample, counts)
}

// TestStrictPriority: with strict priority, a lower queue runs only once
// every higher one is empty.
func TestStrictPriority(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	c, _ := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	weights := map[string]int{"hi": 3, "mid": 2, "lo": 1}
	for q := range weights {
		ps := make([][]byte, 300)
		for i := range ps {
			ps[i] = []byte("x")
		}
		if _, err := c.EnqueueBatch(ctx, q, ps, nil); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var order []int
	done := make(chan struct{})
	queues := map[string]worqr.QueueConfig{}
	for q, wt := range weights {
		wt := wt
		queues[q] = worqr.QueueConfig{Weight: wt, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
			mu.Lock()
			defer mu.Unlock()
			if order = append(order, wt); len(order) == 900 {
				close(done)
			}
			return nil
		})}
	}
	startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: worqr.Config{Namespace: ns},
		Priority: worqr.PriorityStrict, Concurrency: 1, Queues: queues})
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("not drained")
	}
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(order); i++ {
		if order[i] > order[i-1] {
			t.Fatalf("task %d of weight %d ran after one of weight %d: a lower queue ran while a higher one had work", i, order[i], order[i-1])
		}
	}
}

// TestRateLimitedKeepsAttempt: a handler that says "rate limited" runs
// again later without spending an attempt (MaxAttempts 1 would bury a
// failure at once).
func TestRateLimitedKeepsAttempt(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	c, _ := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	in := newInspector(t, pool, &worqr.Config{Namespace: ns})
	var calls atomic.Int32
	var attempts sync.Map
	done := make(chan struct{})
	startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: worqr.Config{Namespace: ns}, ReaperInterval: 10 * time.Millisecond,
		Queues: map[string]worqr.QueueConfig{"rl": {Concurrency: 1, MaxAttempts: 1, Retention: time.Minute,
			Handler: worqr.HandlerFunc(func(_ context.Context, tk *worqr.Task) error {
				n := calls.Add(1)
				attempts.Store(n, tk.Attempt)
				if n < 4 {
					return worqr.RateLimited(5*time.Millisecond, fmt.Errorf("quota %d", n))
				}
				close(done)
				return nil
			})}}})
	id, err := c.Enqueue(ctx, "rl", []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the rate-limited task did not run four times")
	}
	for i := int32(1); i <= 4; i++ {
		if a, _ := attempts.Load(i); a != 1 {
			t.Errorf("run %d had Attempt %v, want 1 (no attempt spent)", i, a)
		}
	}
	wait(t, 5*time.Second, "the task to end as done", func() bool {
		info, err := in.Task(ctx, "rl", id)
		return err == nil && info.State == worqr.StateDone && info.Failures == 0
	})
}

// runCounter counts, in Redis, the handlers running per worker instance,
// and records the highest sum over the instances not marked as gone (a
// process killed, or frozen and no longer owning its takings).
type runCounter struct {
	pool                  *redis.Pool
	running, gone, maxKey string
}

var countStart = redis.NewScript(3, `
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
local all = redis.call('HGETALL', KEYS[1])
local s = 0
for i = 1, #all, 2 do
  if redis.call('SISMEMBER', KEYS[2], all[i]) == 0 then s = s + tonumber(all[i + 1]) end
end
if s > (tonumber(redis.call('GET', KEYS[3])) or 0) then redis.call('SET', KEYS[3], s) end
return s`)

func newRunCounter(pool *redis.Pool, ns string) *runCounter {
	return &runCounter{pool: pool, running: ns + ":test:running", gone: ns + ":test:gone", maxKey: ns + ":test:max"}
}

func (r *runCounter) start(inst string) {
	c := r.pool.Get()
	defer c.Close()
	_, _ = countStart.Do(c, r.running, r.gone, r.maxKey, inst)
}

func (r *runCounter) end(inst string) {
	c := r.pool.Get()
	defer c.Close()
	_, _ = c.Do("HINCRBY", r.running, inst, -1)
}

func (r *runCounter) int(t *testing.T, cmd string, args ...any) int {
	t.Helper()
	c := r.pool.Get()
	defer c.Close()
	n, err := redis.Int(c.Do(cmd, args...))
	if err != nil && err != redis.ErrNil {
		t.Fatal(err)
	}
	return n
}

func (r *runCounter) of(t *testing.T, inst string) int { return r.int(t, "HGET", r.running, inst) }
func (r *runCounter) max(t *testing.T) int             { return r.int(t, "GET", r.maxKey) }
func (r *runCounter) markGone(t *testing.T, inst string) {
	r.int(t, "SADD", r.gone, inst)
}
func (r *runCounter) resetMax(t *testing.T) { r.int(t, "DEL", r.maxKey) }

// limitHandler counts its runs and holds each for hold, or until release
// is closed when hold is 0.
func limitHandler(rc *runCounter, inst string, hold time.Duration, release <-chan struct{}, done *atomic.Int32) worqr.Handler {
	return worqr.HandlerFunc(func(ctx context.Context, _ *worqr.Task) error {
		rc.start(inst)
		defer rc.end(inst)
		if hold > 0 {
			time.Sleep(hold)
		} else {
			<-release
		}
		if done != nil {
			done.Add(1)
		}
		return nil
	})
}

// Fast timings for the limit tests: a dead worker's takings are requeued
// within about 700ms.
func fastTimings(ns string) worqr.WorkerConfig {
	return worqr.WorkerConfig{Config: worqr.Config{Namespace: ns}, HeartbeatInterval: 100 * time.Millisecond,
		HeartbeatTTL: 500 * time.Millisecond, ReaperInterval: 100 * time.Millisecond, PollInterval: 200 * time.Millisecond}
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
	c, _ := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
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
	c, _ := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
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
	c, _ := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	in, _ := worqr.NewInspector(pool, &worqr.Config{Namespace: ns})
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

func TestPriorityOutOfRange(t *testing.T) {
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	c, _ := worqr.NewClient(pool, &worqr.Config{Namespace: redistest.Namespace()})
	for _, p := range []int{-1, worqr.MaxPriority + 1} {
		_, err := c.Enqueue(context.Background(), "q", []byte("x"), &worqr.EnqueueOpts{Priority: p})
		want := fmt.Sprintf("worqr: EnqueueOpts.Priority (%d) must be between 0 and 9", p)
		if err == nil || err.Error() != want {
			t.Errorf("Priority %d: err = %v, want %q", p, err, want)
		}
	}
}

// takeCounter is a pool that counts the take script calls sent through it.
type takeCounter struct {
	pool  *redis.Pool
	takes atomic.Int64
}

func (p *takeCounter) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := p.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, p: p}, nil
}

type countingConn struct {
	redis.Conn
	p *takeCounter
}

func (c *countingConn) count(cmd string, args []any) {
	if cmd == "FCALL" && len(args) > 0 {
		if s, ok := args[0].(string); ok && len(s) > 5 && s[len(s)-5:] == "_take" {
			c.p.takes.Add(1)
		}
	}
}

func (c *countingConn) Do(cmd string, args ...any) (any, error) {
	c.count(cmd, args)
	return c.Conn.Do(cmd, args...)
}

func (c *countingConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	c.count(cmd, args)
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

func (c *countingConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

func (c *countingConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

func (c *countingConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	c.count(cmd, args)
	return redis.DoWithTimeout(c.Conn, d, cmd, args...)
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
	c, _ := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	in, _ := worqr.NewInspector(pool, &worqr.Config{Namespace: ns})
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

// A weighted group whose queue has a Concurrency cap below its share: the
// group may plan that queue past its cap, and an end that takes again for
// it launched into a full channel under launchMu, waiting on handlers that
// waited on it: both queues stopped for good, and Stop never returned
// (found by a helper's audit). A launch never blocks now; what has no room
// is put back. Every task runs.
func TestPriorityGroupCapNeverDeadlocks(t *testing.T) {
	ctx := context.Background()
	pool, ns, c, _ := freshNamespace(t)
	const n = 3000
	for _, q := range []string{"high", "low"} {
		ps := make([][]byte, n)
		for i := range ps {
			ps[i] = []byte("x")
		}
		if _, err := c.EnqueueBatch(ctx, q, ps, nil); err != nil {
			t.Fatal(err)
		}
	}
	var done atomic.Int64
	hold := func(d time.Duration) worqr.Handler {
		return worqr.HandlerFunc(func(context.Context, *worqr.Task) error { time.Sleep(d); done.Add(1); return nil })
	}
	cfg := fastTimings(ns)
	cfg.Priority, cfg.Concurrency = worqr.PriorityWeighted, 8
	cfg.Queues = map[string]worqr.QueueConfig{
		"high": {Weight: 1, Concurrency: 2, Handler: hold(3 * time.Millisecond)},
		"low":  {Weight: 1, Handler: hold(time.Millisecond)},
	}
	w := startWorker(t, ctx, pool, &cfg)
	for last := int64(-1); done.Load() < 2*n; {
		time.Sleep(2 * time.Second)
		if d := done.Load(); d == last {
			stopped := make(chan error, 1)
			go func() {
				sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				stopped <- w.Stop(sctx)
			}()
			select {
			case <-stopped:
				t.Fatalf("the worker stalled at %d of %d tasks done", d, 2*n)
			case <-time.After(15 * time.Second):
				t.Fatalf("the worker stalled at %d of %d tasks done, and Stop(2s) did not return in 15 s: a deadlock", d, 2*n)
			}
		} else {
			last = d
		}
	}
}

// A rate limit raised while a worker waits out the old one's period is
// honoured at once: the worker waited the rest of the old minute (found by
// a helper's audit).
func TestRaisedRateLimitTakesEffect(t *testing.T) {
	ctx := context.Background()
	pool, ns, c, in := freshNamespace(t)
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
