package worqr

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/engine"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/internal/seam"
)

// Which queues read ahead, how far, and when: only while their handlers'
// average run time is under a millisecond, never with global limits or
// priority levels, and not again soon after a slowdown.
func TestReadAheadRule(t *testing.T) {
	for _, c := range []struct {
		name string
		q    *queueRunner
		want int
	}{
		{"default: Concurrency", &queueRunner{Queue: engine.Queue{Kind: rdb.KindTask}, concurrency: 4}, 4},
		{"ReadAhead set", &queueRunner{Queue: engine.Queue{Kind: rdb.KindTask}, cfg: QueueConfig{ReadAhead: 7}, concurrency: 4}, 7},
		{"ReadAhead negative", &queueRunner{Queue: engine.Queue{Kind: rdb.KindTask}, cfg: QueueConfig{ReadAhead: -1}, concurrency: 4}, 0},
		{"a flow stage", &queueRunner{Queue: engine.Queue{Kind: rdb.KindStage}, concurrency: 4}, 0},
		{"a flow's child queue", &queueRunner{Queue: engine.Queue{Kind: rdb.KindChild}, concurrency: 4}, 0},
		{"served by priority", &queueRunner{Queue: engine.Queue{Kind: rdb.KindTask}, concurrency: 4, weight: 1}, 0},
		{"concurrency 1", &queueRunner{Queue: engine.Queue{Kind: rdb.KindTask}, concurrency: 1}, 0},
		{"concurrency 1, ReadAhead set", &queueRunner{Queue: engine.Queue{Kind: rdb.KindTask}, cfg: QueueConfig{ReadAhead: 3}, concurrency: 1}, 0},
		{"a BatchHandler", &queueRunner{Queue: engine.Queue{Kind: rdb.KindTask},
			cfg: QueueConfig{BatchHandler: BatchHandlerFunc(func(context.Context, *Batch) error { return nil })}, concurrency: 4}, 0},
	} {
		if got := aheadMax(c.q); got != c.want {
			t.Errorf("%s: aheadMax %d, want %d", c.name, got, c.want)
		}
	}

	q := &queueRunner{Queue: engine.Queue{Kind: rdb.KindTask}, concurrency: 4, wake: make(chan struct{}, 1)}
	q.aheadMax = aheadMax(q)
	q.runAvg.Store(int64(readAheadFast)) // as NewWorker starts it
	if got := q.ahead(); got != 0 {
		t.Fatalf("reads %d ahead before any handler returned", got)
	}
	q.ran(10 * time.Microsecond)
	if got := q.ahead(); got != 4 {
		t.Fatalf("after a fast run: ahead %d, want 4", got)
	}
	select {
	case <-q.wake:
	default:
		t.Fatal("turning fast did not wake the fetch loop (its next take fills the room ahead)")
	}
	q.Limited.Store(true)
	if got := q.ahead(); got != 0 {
		t.Errorf("with global limits: ahead %d, want 0", got)
	}
	q.Limited.Store(false)
	q.Fair.Store(true)
	if got := q.ahead(); got != 4 {
		t.Errorf("a fair queue whose keys have no limits: ahead %d, want 4", got)
	}
	q.KeyLimited.Store(true)
	if got := q.ahead(); got != 0 {
		t.Errorf("a fair queue whose keys may be limited: ahead %d, want 0", got)
	}
	q.Fair.Store(false)
	q.KeyLimited.Store(false)
	q.Levels.Store(3)
	if got := q.ahead(); got != 0 {
		t.Errorf("with priority levels: ahead %d, want 0", got)
	}
	q.Levels.Store(0)
	q.ran(20 * time.Millisecond)
	if got := q.ahead(); got != 0 {
		t.Errorf("after a 20 ms run: ahead %d, want 0", got)
	}
	q.slowed()
	for i := 0; i < 3; i++ {
		q.ran(10 * time.Microsecond)
	}
	if got := q.ahead(); got != 0 {
		t.Errorf("three fast runs after a slowdown: ahead %d, want 0", got)
	}
	for i := 0; i < 30; i++ {
		q.ran(10 * time.Microsecond)
	}
	if got := q.ahead(); got != 4 {
		t.Errorf("thirty more fast runs: ahead %d, want 4", got)
	}
}

// drainPeak drains n tasks of a queue with a no-op handler at concurrency
// 2 and returns the most handlers seen running at once and the most
// takings the worker held in Redis at once (read by a poller). With fair
// set, the queue is fair, its tasks of one key, and fair runs first (it
// sets the key's limits).
func drainPeak(t *testing.T, readAhead int, fair func(context.Context, *Client) error) (running, held int) {
	ctx := context.Background()
	pool, ns, c := internalClient(t)
	const n = 2000
	ps := make([][]byte, n)
	for i := range ps {
		ps[i] = []byte(strconv.Itoa(i))
	}
	var keys KeyPolicy
	var opts *EnqueueOpts
	if fair != nil {
		keys, opts = KeyPolicy{Fair: true}, &EnqueueOpts{Key: "k"}
		if err := c.SetKeyPolicy(ctx, "q", keys); err != nil {
			t.Fatal(err)
		}
		if err := fair(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.EnqueueBatch(ctx, "q", ps, opts); err != nil {
		t.Fatal(err)
	}
	var now, peak, count atomic.Int32
	seen := sync.Map{}
	done := make(chan struct{})
	w := startInternal(t, pool, &WorkerConfig{Config: Config{Namespace: ns},
		Queues: map[string]QueueConfig{"q": {Concurrency: 2, ReadAhead: readAhead, Keys: keys,
			Handler: HandlerFunc(func(_ context.Context, tk *Task) error {
				r := now.Add(1)
				defer now.Add(-1)
				for p := peak.Load(); r > p && !peak.CompareAndSwap(p, r); p = peak.Load() {
				}
				for i := 0; i < 20; i++ {
					runtime.Gosched() // handlers overlap
				}
				if _, dup := seen.LoadOrStore(tk.ID, true); dup {
					t.Errorf("task %s ran twice", tk.ID)
				}
				if count.Add(1) == n {
					close(done)
				}
				return nil
			})}}})
	defer w.Stop(ctx)
	key := w.queues[0].QK.WorkerQueue(w.ID())
	conn := pool.Get()
	defer conn.Close()
	for {
		select {
		case <-done:
			return int(peak.Load()), held
		case <-time.After(0):
		}
		h, err := redis.Int(conn.Do("HLEN", key))
		if err != nil {
			t.Fatal(err)
		}
		held = max(held, h)
	}
}

// A queue of fast handlers holds more takings than Concurrency while no
// more than Concurrency handlers run; with ReadAhead negative, or a fair
// queue whose keys may be limited, it holds no more than Concurrency.
func TestReadAheadHoldsMoreRunsNoMore(t *testing.T) {
	noKeyLimits := func(ctx context.Context, c *Client) error {
		return c.SetKeyLimits(ctx, "q", "k", KeyLimits{Weight: 3}) // a weight limits nothing
	}
	keyLimit := func(ctx context.Context, c *Client) error {
		return c.SetKeyLimits(ctx, "q", "k", KeyLimits{Limits: Limits{Concurrency: 100}}) // never reached here
	}
	for _, c := range []struct {
		name      string
		readAhead int
		fair      func(context.Context, *Client) error
		ahead     bool
	}{
		{"a plain queue reads ahead", 0, nil, true},
		{"ReadAhead -1 does not", -1, nil, false},
		{"a fair queue without limits per key reads ahead", 0, noKeyLimits, true},
		{"a fair queue whose key has a limit does not", 0, keyLimit, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			running, held := drainPeak(t, c.readAhead, c.fair)
			t.Logf("at most %d handlers at once, %d takings held", running, held)
			if running > 2 {
				t.Errorf("%d handlers ran at once, concurrency 2", running)
			}
			if c.ahead && held <= 2 {
				t.Errorf("at most %d takings held at once: never read ahead of 2 handlers", held)
			}
			if !c.ahead && held > 2 {
				t.Errorf("%d takings held at once, want at most 2", held)
			}
		})
	}
}

// slowAndNext starts a worker at concurrency 2 whose handlers look fast,
// and enqueues "slow1" and "slow2" (their handlers wait for the gate) then
// "next", which the worker takes ahead. ctx (what Start gets) and cfg
// (durations) are the test's. It returns the worker (stopped at cleanup), a channel of what ran
// (id, attempt and crashes), and what opens the gate.
func slowAndNext(t *testing.T, ctx context.Context, cfg WorkerConfig, hooks ...func(*Worker)) (*Worker, chan string, func()) {
	t.Helper()
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	pool, ns, c := internalClient(t)
	ran := make(chan string, 8)
	cfg.Namespace = ns
	keys := cfg.Queues["q"].Keys // a fair queue: its tasks of key "k"
	var opts EnqueueOpts
	if keys.Fair {
		opts.Key = "k"
	}
	cfg.Queues = map[string]QueueConfig{"q": {Concurrency: 2, Keys: keys, Handler: HandlerFunc(func(_ context.Context, tk *Task) error {
		ran <- string(tk.Payload) + " " + strconv.Itoa(tk.Attempt) + " " + strconv.Itoa(tk.Crashes)
		if strings.HasPrefix(string(tk.Payload), "slow") {
			<-gate
		}
		return nil
	})}}
	w, err := NewWorker(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hooks {
		h(w)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		open()
		w.Stop(context.Background())
	})
	q := w.queues[0]
	q.ran(10 * time.Microsecond) // handlers seen fast: it reads ahead
	// (A keyed task's id is worqr's own: taskIDs names it.)
	for _, id := range []string{"slow1", "slow2", "next"} {
		if !keys.Fair {
			opts.ID = id
		}
		got, err := c.Enqueue(ctx, "q", []byte(id), &opts)
		if err != nil {
			t.Fatal(err)
		}
		taskIDs.Store(w.ID()+" "+id, got)
		if id != "next" {
			waitRan(t, ran, id+" 1 0", id+" never ran")
		}
	}
	return w, ran, open
}

// taskIDs maps "<worker id> <payload>" to the id of the task of that
// payload slowAndNext enqueued for the worker.
var taskIDs sync.Map

// waitPutBack waits until the task slowAndNext enqueued with payload id
// waits at the front of w's queue again (of key "k"'s list, on a fair
// queue).
func waitPutBack(t *testing.T, w *Worker, id string) {
	t.Helper()
	if v, ok := taskIDs.Load(w.ID() + " " + id); ok {
		id = v.(string)
	}
	c := internalPool(t).Get()
	defer c.Close()
	list := w.queues[0].QK.Waiting
	if w.queues[0].cfg.Keys.Fair {
		list = w.queues[0].QK.FairListPrefix + "k"
	}
	waitFor(t, func() (bool, string) {
		head, err := redis.Strings(c.Do("LRANGE", list, 0, 0))
		return err == nil && len(head) == 1 && head[0] == id, fmt.Sprintf("front of the queue %v (%v), want %s put back", head, err, id)
	})
}

// A task taken ahead that finds every handler busy for readAheadWait goes
// back to the front of its queue (of its key's list, on a fair queue),
// nothing counted (the release puts it back; its key's running count
// gives its slot back), and the queue stops reading ahead: it runs once,
// at its first attempt, after the slow ones.
func TestReadAheadGivesBackWhenHandlersSlowDown(t *testing.T) {
	old := readAheadWait
	readAheadWait = time.Second // long enough to see it held first
	defer func() { readAheadWait = old }()
	for _, c := range []struct {
		name string
		keys KeyPolicy
	}{{"a plain queue", KeyPolicy{}}, {"a fair queue", KeyPolicy{Fair: true}}} {
		t.Run(c.name, func(t *testing.T) {
			w, ran, open := slowAndNext(t, context.Background(), WorkerConfig{Queues: map[string]QueueConfig{"q": {Keys: c.keys}}})
			waitHeldAhead(t, w)
			waitPutBack(t, w, "next")
			if got := w.queues[0].ahead(); got != 0 {
				t.Errorf("still reads %d ahead after a give back", got)
			}
			if c.keys.Fair {
				k, err := w.st.ReadFairKey(context.Background(), w.queues[0].QK, "k")
				if err != nil || k.Running != 2 || k.Waiting != 1 {
					t.Errorf("key k after the give back: %+v, %v; want 2 running (the slow ones) and next waiting", k, err)
				}
			}
			select {
			case got := <-ran:
				t.Fatalf("%s ran while the slow handlers held both slots", got)
			default:
			}
			open()
			waitRan(t, ran, "next 1 0", "next never ran after the slow ones (or not at its first attempt, or a crash counted)")
		})
	}
}

// waitHeldAhead waits until w holds three takings of its queue in Redis:
// "next" waits for a slot.
func waitHeldAhead(t *testing.T, w *Worker) {
	t.Helper()
	c := internalPool(t).Get()
	defer c.Close()
	key := w.queues[0].QK.WorkerQueue(w.ID())
	waitFor(t, func() (bool, string) {
		n, err := redis.Int(c.Do("HLEN", key))
		return err == nil && n == 3, fmt.Sprintf("the worker holds %d takings (%v), never took next ahead", n, err)
	})
}

// A task taken ahead is given back as soon as the worker stops, not run
// in its grace period, even while its wait is not over.
func TestReadAheadGivesBackOnStop(t *testing.T) {
	old := readAheadWait
	readAheadWait = time.Hour
	defer func() { readAheadWait = old }()
	w, ran, open := slowAndNext(t, context.Background(), WorkerConfig{})
	waitHeldAhead(t, w)
	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop(context.Background()) }()
	waitPutBack(t, w, "next") // while the slow ones still run
	open()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-ran:
		t.Fatalf("%s ran during the stop", got)
	default:
	}
}

// A task taken ahead whose wait for a slot spans most of a TTL with no
// beat (a frozen process) is not run when the slot frees: the reaper may
// have given it to another worker. Once a beat confirms the session, the
// release puts it back (no crash counted) and it runs.
func TestReadAheadFrozenWhileWaitingIsNotRun(t *testing.T) {
	old := readAheadWait
	readAheadWait = time.Hour
	defer func() { readAheadWait = old }()
	waiting := make(chan string, 4)
	clock := seam.NewManualClock(time.Now())
	ctx := seam.WithHeartbeatClock(context.Background(), clock)
	// Fresh for TTL - Interval = 500 ms of its clock after a beat.
	w, ran, open := slowAndNext(t, ctx, WorkerConfig{HeartbeatInterval: time.Second,
		HeartbeatTTL: 1500 * time.Millisecond, PollInterval: 200 * time.Millisecond},
		func(w *Worker) { w.hooks.slotWait.set(func(id string) { waiting <- id }) })
	select {
	case id := <-waiting:
		if id != "next" {
			t.Fatalf("%s waits for a slot, want next", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("next never waited for a slot")
	}
	clock.Advance(700 * time.Millisecond) // no beat for 700 ms: not fresh
	open()
	q := w.queues[0]
	waitFor(t, func() (bool, string) {
		held := q.heldPIDs()
		return len(held) == 0, fmt.Sprintf("still held: %v", held)
	})
	select { // a handler reports before its taking ends
	case got := <-ran:
		t.Fatalf("%s ran after a freeze", got)
	default:
	}
	// The slow ones ended and next was let go unrun. The clock runs
	// again: a beat, then the release (at the next poll: a frozen worker
	// releases nothing), then next runs, nothing counted.
	defer clock.Run(time.Second, 50*time.Millisecond)()
	waitRan(t, ran, "next 1 0", "next never ran after the freeze (or ran with a crash counted: the reaper's, not the release's)")
}

// A queue that may read ahead (Concurrency 2 or more: its takings go
// through the turnstile) must not start a taking that waited for a
// handler goroutine across a freeze of most of a TTL, even when a slot is
// free the moment a goroutine takes it: the reaper may have given the task
// to another worker meanwhile. Here every
// handler goroutine is ending its task (the ends held back by pausing
// Redis's writes) when a hand-off comes; the worker's clock then runs past
// the point where it is fresh, and the ends come back: the hand-off finds
// a free slot at once, and its handler must not run.
func TestTakingThatWaitedAcrossAFreezeIsNotRunWithAFreeSlot(t *testing.T) {
	pool := internalPool(t)
	c := pool.Get()
	defer c.Close()
	clock := seam.NewManualClock(time.Now())
	ctx := seam.WithHeartbeatClock(context.Background(), clock)
	ran := make(chan string, 10)
	gate := make(chan struct{})
	w, err := NewWorker(pool, &WorkerConfig{Config: Config{Namespace: redistest.Namespace(), DisableEvents: true},
		// Fresh for TTL - Interval = 500 ms of its clock after a beat.
		HeartbeatInterval: time.Second, HeartbeatTTL: 1500 * time.Millisecond, PollInterval: time.Hour,
		Queues: map[string]QueueConfig{"q": {Concurrency: 2, Handler: HandlerFunc(func(_ context.Context, t *Task) error {
			ran <- t.ID
			if t.ID == "a" || t.ID == "b" {
				<-gate
			}
			return nil
		})}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background())
	q := w.queues[0]
	if q.turn == nil {
		t.Fatal("the queue does not read ahead: the test needs the turnstile")
	}
	s, _ := w.keeper.Current()
	waitIdle(t, q)
	msgs := map[string][]byte{}
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		msgs[id], _ = heldFor(t, c, q, s, id)
	}
	wantRan := func(id string) {
		t.Helper()
		waitRan(t, ran, id, id+" did not run")
	}
	endings := func(n int) {
		t.Helper()
		if !redistest.Within(5*time.Second, func() bool { return handlersEnding(q) >= n }) {
			c.Do("CLIENT", "UNPAUSE")
			t.Fatalf("%d handlers ending, want %d", handlersEnding(q), n)
		}
	}
	w.handed(q, msgs["a"])
	wantRan("a")
	w.handed(q, msgs["b"])
	wantRan("b")
	// Every end from now on waits in Redis.
	if _, err := c.Do("CLIENT", "PAUSE", 20000, "WRITE"); err != nil {
		t.Fatal(err)
	}
	defer c.Do("CLIENT", "UNPAUSE")
	close(gate)
	endings(2)
	w.handed(q, msgs["c"])
	wantRan("c")
	w.handed(q, msgs["d"])
	wantRan("d")
	endings(4) // all four handler goroutines are ending their tasks
	w.handed(q, msgs["e"])
	select {
	case id := <-ran:
		t.Fatalf("%s started while every handler goroutine was ending its task", id)
	case <-time.After(100 * time.Millisecond):
	}
	// e waits for a goroutine. The process is frozen meanwhile: no beat
	// for 700 ms of its clock (it is not fresh), and then the ends return.
	clock.Advance(700 * time.Millisecond)
	if w.keeper.Fresh() {
		t.Fatal("the worker is still fresh")
	}
	if _, err := c.Do("CLIENT", "UNPAUSE"); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-ran:
		t.Fatalf("%s started after a freeze of most of a TTL (a slot was free when its goroutine took it)", id)
	case <-time.After(500 * time.Millisecond):
	}
	// The worker's clock runs again: a beat, then (at the next wake-up or
	// poll) the release puts e back and a take runs it, once.
	defer clock.Run(time.Second, 300*time.Millisecond)()
	waitFor(t, func() (bool, string) { return w.keeper.Fresh(), "no beat" })
	q.hint()
	wantRan("e")
	select {
	case id := <-ran:
		t.Fatalf("%s ran again", id)
	case <-time.After(300 * time.Millisecond):
	}
}

// handlersEnding counts q's takings whose handler returned (their ends on
// their way).
func handlersEnding(q *queueRunner) int {
	q.heldMu.Lock()
	defer q.heldMu.Unlock()
	n := 0
	for _, h := range q.held {
		if h.ending {
			n++
		}
	}
	return n
}
