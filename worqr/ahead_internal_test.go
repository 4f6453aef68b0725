package worqr

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
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
		{"default: Concurrency", &queueRunner{kind: rdb.KindTask, concurrency: 4}, 4},
		{"ReadAhead set", &queueRunner{kind: rdb.KindTask, concurrency: 4, cfg: QueueConfig{ReadAhead: 7}}, 7},
		{"ReadAhead negative", &queueRunner{kind: rdb.KindTask, concurrency: 4, cfg: QueueConfig{ReadAhead: -1}}, 0},
		{"a flow stage", &queueRunner{kind: rdb.KindStage, concurrency: 4}, 0},
		{"a flow's child queue", &queueRunner{kind: rdb.KindChild, concurrency: 4}, 0},
		{"served by priority", &queueRunner{kind: rdb.KindTask, concurrency: 4, weight: 1}, 0},
		{"a BatchHandler", &queueRunner{kind: rdb.KindTask, concurrency: 4,
			cfg: QueueConfig{BatchHandler: BatchHandlerFunc(func(context.Context, *Batch) error { return nil })}}, 0},
	} {
		if got := aheadMax(c.q); got != c.want {
			t.Errorf("%s: aheadMax %d, want %d", c.name, got, c.want)
		}
	}

	q := &queueRunner{kind: rdb.KindTask, concurrency: 4, wake: make(chan struct{}, 1)}
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
	q.limited.Store(true)
	if got := q.ahead(); got != 0 {
		t.Errorf("with global limits: ahead %d, want 0", got)
	}
	q.limited.Store(false)
	q.levels.Store(3)
	if got := q.ahead(); got != 0 {
		t.Errorf("with priority levels: ahead %d, want 0", got)
	}
	q.levels.Store(0)
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
// takings the worker held in Redis at once (read by a poller).
func drainPeak(t *testing.T, readAhead int) (running, held int) {
	ctx := context.Background()
	pool := internalPool(t)
	ns := redistest.Namespace()
	c, err := NewClient(pool, &Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	ps := make([][]byte, n)
	for i := range ps {
		ps[i] = []byte(strconv.Itoa(i))
	}
	if _, err := c.EnqueueBatch(ctx, "q", ps, nil); err != nil {
		t.Fatal(err)
	}
	var now, peak, count atomic.Int32
	seen := sync.Map{}
	done := make(chan struct{})
	w := startInternal(t, pool, &WorkerConfig{Config: Config{Namespace: ns},
		Queues: map[string]QueueConfig{"q": {Concurrency: 2, ReadAhead: readAhead,
			Handler: HandlerFunc(func(_ context.Context, tk *Task) error {
				r := now.Add(1)
				defer now.Add(-1)
				for p := peak.Load(); r > p && !peak.CompareAndSwap(p, r); p = peak.Load() {
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
	key := w.queues[0].qk.WorkerQueue(w.ID())
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
// more than Concurrency handlers run; with ReadAhead negative it holds
// no more than Concurrency.
func TestReadAheadHoldsMoreRunsNoMore(t *testing.T) {
	running, held := drainPeak(t, 0)
	t.Logf("reading ahead: at most %d handlers at once, %d takings held", running, held)
	if running > 2 {
		t.Errorf("%d handlers ran at once, concurrency 2", running)
	}
	if held <= 2 {
		t.Errorf("at most %d takings held at once: never read ahead of 2 handlers", held)
	}
	running, held = drainPeak(t, -1)
	if running > 2 || held > 2 {
		t.Errorf("ReadAhead -1: %d handlers at once, %d takings held, want at most 2 of each", running, held)
	}
}

// slowAndNext starts a worker at concurrency 1 whose handlers look fast,
// and enqueues "slow" (its handler waits for gate) then "next", which the
// worker takes ahead. It returns the worker, the queue's keys, a channel
// of what ran (id and attempt) and the events.
func slowAndNext(t *testing.T, gate chan struct{}) (*Worker, *Client, chan string, chan Event) {
	t.Helper()
	ctx := context.Background()
	pool := internalPool(t)
	ns := redistest.Namespace()
	c, err := NewClient(pool, &Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan string, 8)
	events := make(chan Event, 64)
	w := startInternal(t, pool, &WorkerConfig{Config: Config{Namespace: ns}, OnEvent: func(e Event) {
		if e.Kind == EventGivenBack {
			events <- e
		}
	}, Queues: map[string]QueueConfig{"q": {Concurrency: 1, Handler: HandlerFunc(func(_ context.Context, tk *Task) error {
		ran <- string(tk.Payload) + " " + strconv.Itoa(tk.Attempt)
		if string(tk.Payload) == "slow" {
			<-gate
		}
		return nil
	})}}})
	q := w.queues[0]
	q.ran(10 * time.Microsecond) // handlers seen fast: it reads ahead
	if _, err := c.Enqueue(ctx, "q", []byte("slow"), &EnqueueOpts{ID: "slow"}); err != nil {
		t.Fatal(err)
	}
	waitRan(t, ran, "slow 1", "slow never ran")
	if _, err := c.Enqueue(ctx, "q", []byte("next"), &EnqueueOpts{ID: "next"}); err != nil {
		t.Fatal(err)
	}
	return w, c, ran, events
}

// waitGivenBack waits for the event of id given back and checks that id
// waits at the front of its queue again.
func waitGivenBack(t *testing.T, w *Worker, events chan Event, id string) {
	t.Helper()
	select {
	case e := <-events:
		if e.TaskID != id {
			t.Fatalf("%s given back, want %s", e.TaskID, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never given back", id)
	}
	conn := w.queues[0].qk
	c := internalPool(t).Get()
	defer c.Close()
	head, err := redis.Strings(c.Do("LRANGE", conn.Waiting, 0, 0))
	if err != nil || len(head) != 1 || head[0] != id {
		t.Fatalf("front of the queue %v (%v), want %s", head, err, id)
	}
}

// A task taken ahead that finds every handler busy for readAheadWait goes
// back to the front of its queue, nothing counted, and the queue stops
// reading ahead: it runs once, at its first attempt, after the slow one.
func TestReadAheadGivesBackWhenHandlersSlowDown(t *testing.T) {
	gate := make(chan struct{})
	w, _, ran, events := slowAndNext(t, gate)
	defer w.Stop(context.Background())
	waitGivenBack(t, w, events, "next")
	if got := w.queues[0].ahead(); got != 0 {
		t.Errorf("still reads %d ahead after a give back", got)
	}
	select {
	case got := <-ran:
		t.Fatalf("%s ran while the slow handler held the only slot", got)
	default:
	}
	close(gate)
	waitRan(t, ran, "next 1", "next never ran after the slow one (or not at its first attempt)")
}

// A task taken ahead is given back as soon as the worker stops, not run
// in its grace period, even while its wait is not over.
func TestReadAheadGivesBackOnStop(t *testing.T) {
	old := readAheadWait
	readAheadWait = time.Hour
	defer func() { readAheadWait = old }()
	gate := make(chan struct{})
	w, _, ran, events := slowAndNext(t, gate)
	c := internalPool(t).Get()
	defer c.Close()
	key := w.queues[0].qk.WorkerQueue(w.ID())
	for deadline := time.Now().Add(10 * time.Second); ; {
		n, err := redis.Int(c.Do("HLEN", key))
		if err != nil {
			t.Fatal(err)
		}
		if n == 2 {
			break // next is held, waiting for the slot
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker holds %d takings, never took next ahead", n)
		}
		time.Sleep(time.Millisecond)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop(context.Background()) }()
	waitGivenBack(t, w, events, "next") // while slow still runs
	close(gate)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-ran:
		t.Fatalf("%s ran during the stop", got)
	default:
	}
}
