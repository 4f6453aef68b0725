package worqr

import (
	"context"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
)

// afterTakePool is a pool whose connections run hook once, right after
// the first take script call sent while armed has been applied by Redis,
// before its reply reaches the caller (a reply slow on its way).
type afterTakePool struct {
	*redis.Pool
	armed atomic.Bool
	hook  func()
}

func (p *afterTakePool) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := p.Pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return &afterTakeConn{Conn: c, p: p}, nil
}

type afterTakeConn struct {
	redis.Conn
	p *afterTakePool
}

func (c *afterTakeConn) after(cmd string, args []any) {
	if cmd != "FCALL" || len(args) == 0 {
		return
	}
	if name, _ := args[0].(string); strings.HasSuffix(name, "_take") && c.p.armed.CompareAndSwap(true, false) {
		c.p.hook()
	}
}

func (c *afterTakeConn) Do(cmd string, args ...any) (any, error) {
	defer c.after(cmd, args)
	return c.Conn.Do(cmd, args...)
}

func (c *afterTakeConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	defer c.after(cmd, args)
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

func (c *afterTakeConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	defer c.after(cmd, args)
	return redis.DoWithTimeout(c.Conn, d, cmd, args...)
}

func (c *afterTakeConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

func (c *afterTakeConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

// A take cut by the global concurrency limit (another worker holds the one
// slot) makes the fetch loop wait for a wake-up. The wake-up of the end
// that frees the slot can reach the worker while that take's reply is
// still on its way: it cleared the wait before the reply set it, and the
// queue then waited for the next poll (PollInterval) with its slot free
// and a task waiting. Here the other worker's end, and its wake-up, come
// right after Redis applied the take, before its reply is read.
func TestConcurrencyWaitSeesAWakeUpDuringItsTake(t *testing.T) {
	ctx := context.Background()
	base := internalPool(t)
	pool := &afterTakePool{Pool: base}
	cfg := Config{Namespace: redistest.Namespace(), DisableEvents: true}
	st := rdb.NewStore(base, cfg.Namespace)
	client, err := NewClient(base, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	in, err := NewInspector(base, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.SetLimits(ctx, "lim", Limits{Concurrency: 1}); err != nil {
		t.Fatal(err)
	}
	// Another worker ("other", a fake one: no reaper runs here) holds the
	// queue's one slot; a second task waits.
	if _, err := client.Enqueue(ctx, "lim", []byte("first"), nil); err != nil {
		t.Fatal(err)
	}
	qk := st.Queue(rdb.QueueRef{Tag: "lim", Name: "lim"})
	held, _, err := st.TakeWait(ctx, qk, rdb.TakeArgs{Worker: "other", Until: math.MaxInt64, Max: 1, Limited: true})
	if err != nil || len(held) != 1 {
		t.Fatalf("the other worker's take: %v, %v", held, err)
	}
	if _, err := client.Enqueue(ctx, "lim", []byte("second"), nil); err != nil {
		t.Fatal(err)
	}

	started := make(chan string, 4)
	var w *Worker
	pool.hook = func() {
		// The take (on the fetch loop's goroutine) found the slot held:
		// its reply says "wait for a wake-up". Before the loop reads it,
		// the other worker ends its taking, and the end's wake-up reaches
		// this worker (its subscriber pokes the queue).
		q := w.queues[0]
		if !redistest.Within(10*time.Second, w.listening.Load) {
			t.Error("the worker never subscribed")
			return
		}
		select {
		case <-q.wake: // (what came before the end)
		default:
		}
		_, _, _, err := st.EndTakeWait(ctx, qk, 0, []rdb.Ending{rdb.Done(rdb.KindTask, "other", held[0].PID, held[0].ID, nil)},
			&rdb.TakeArgs{Limited: true})
		if err != nil {
			t.Error(err)
			return
		}
		if !redistest.Within(10*time.Second, func() bool { return len(q.wake) > 0 }) {
			t.Error("the end's wake-up never reached the worker")
		}
	}
	pool.armed.Store(true)
	w, err = NewWorker(pool, &WorkerConfig{Config: cfg, PollInterval: time.Hour, DisableReaper: true, DisableHandoff: true,
		Queues: map[string]QueueConfig{"lim": {Concurrency: 2, Handler: HandlerFunc(func(ctx context.Context, t *Task) error {
			started <- string(t.Payload)
			return nil
		})}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(ctx)
	select {
	case got := <-started:
		if got != "second" {
			t.Fatalf("started %q, want second", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the slot freed while the take's reply was on its way was not used: the queue waits for its next poll (PollInterval, 1h here)")
	}
	if pool.armed.Load() {
		t.Fatal("the hook never ran")
	}
}

// A take of the fetch loop asks for the slots free when it is sent; a
// hand-off recorded in Redis before the take runs (the worker was parked)
// takes one of them, and the take, which did not count it, gets a task
// past the worker's concurrency. That task is put back (a release) at
// once, not held until a handler is free: here the queue runs one task at
// a time and the hand-off's handler runs until the test ends, so the task
// the take got waited, held by the worker, out of every other worker's
// reach, for all that time.
func TestTakePastAHandoffPutsBack(t *testing.T) {
	ctx := context.Background()
	p := startParked(t)
	q, c, client, started := p.q, p.c, p.client, p.started
	s := p.s
	var armed atomic.Bool
	armed.Store(true)
	var secondID atomic.Value // string
	defer p.w.hooks.beforeTake.set(func(hq *queueRunner) {
		if hq != q || !armed.CompareAndSwap(true, false) {
			return
		}
		// The take is about to ask for the one free slot: a hand-off
		// comes first, and its handler starts; then a task waits in the
		// list (the worker, at its concurrency in Redis, is handed none).
		if _, err := client.Enqueue(ctx, "q", []byte("handed"), nil); err != nil {
			t.Error(err)
		}
		if got := <-started; got != "handed" {
			t.Errorf("started %q, want the hand-off", got)
		}
		id, err := client.Enqueue(ctx, "q", []byte("taken"), nil)
		if err != nil {
			t.Error(err)
		}
		secondID.Store(id)
	})()
	q.hint()
	// The take got "taken" past the free slots: it goes back to the list.
	var held map[string]string
	var waiting []string
	var second string
	if !redistest.Within(10*time.Second, func() bool {
		if second, _ = secondID.Load().(string); second == "" {
			return false
		}
		held, _ = redis.StringMap(c.Do("HGETALL", q.QK.WorkerQueue(s.ID())))
		waiting, _ = redis.Strings(c.Do("LRANGE", q.QK.Waiting, 0, -1))
		heldSecond := false
		for _, id := range held {
			heldSecond = heldSecond || id == second
		}
		return !heldSecond && len(waiting) == 1 && waiting[0] == second && len(held) == 1
	}) {
		if second == "" {
			t.Fatal("the fetch loop never took")
		}
		t.Fatalf("the task taken past the free slot is held (%v), not waiting (%v)", held, waiting)
	}
	select {
	case got := <-started:
		t.Fatalf("%q started while the hand-off's handler runs (concurrency 1)", got)
	default:
	}
}

// A second server switch seen while the beat that confirms the first is on
// its way (an end that takes again sees it) gets a beat of its own: the
// queue is not cleared of its need for one by the first beat.
func TestConfirmSwitchBeatsAgainAfterALaterSwitch(t *testing.T) {
	ctx := context.Background()
	w := startInternal(t, internalPool(t), &WorkerConfig{Config: Config{Namespace: redistest.Namespace()},
		PollInterval: time.Hour,
		Queues:       map[string]QueueConfig{"q": {Concurrency: 1, Handler: HandlerFunc(func(context.Context, *Task) error { return nil })}}})
	defer w.Stop(ctx)
	// A queue of its own, which no fetch loop of the worker serves: only
	// this test's calls look at it.
	var switches atomic.Uint64
	q := &queueRunner{name: "x", switchesOf: switches.Load, currentID: w.ID}
	s, _ := w.keeper.Current()
	switches.Store(1)
	q.unsureFor(s.ID()) // sees the first switch
	var beats atomic.Int32
	defer w.hooks.confirmed.set(func(hq *queueRunner) {
		if hq != q {
			return
		}
		if beats.Add(1) == 1 {
			switches.Store(2)
			q.unsureFor(s.ID()) // the second, seen while the first beat was on its way
		}
	})()
	if err := w.confirmSwitch(s, q); err != nil {
		t.Fatal(err)
	}
	if n := beats.Load(); n != 2 {
		t.Fatalf("%d confirmed beats, want 2 (one per switch)", n)
	}
	if need, _ := q.unsure.NeedsConfirm(); need {
		t.Fatal("still waiting for a beat after confirming both switches")
	}
}
