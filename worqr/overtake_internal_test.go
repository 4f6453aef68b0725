package worqr

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/heartbeat"
	"github.com/worqr/worqr-go/internal/redistest"
)

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
	testHookBeforeTake = func(hq *queueRunner) {
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
	}
	defer func() { testHookBeforeTake = nil }()
	q.hint()
	// The take got "taken" past the free slots: it goes back to the list.
	deadline := time.Now().Add(10 * time.Second)
	for {
		second, _ := secondID.Load().(string)
		if second != "" {
			held, _ := redis.StringMap(c.Do("HGETALL", q.qk.WorkerQueue(s.ID())))
			waiting, _ := redis.Strings(c.Do("LRANGE", q.qk.Waiting, 0, -1))
			heldSecond := false
			for _, id := range held {
				heldSecond = heldSecond || id == second
			}
			if !heldSecond && len(waiting) == 1 && waiting[0] == second && len(held) == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the task taken past the free slot is held (%v), not waiting (%v)", held, waiting)
			}
		} else if time.Now().After(deadline) {
			t.Fatal("the fetch loop never took")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case got := <-started:
		t.Fatalf("%q started while the hand-off's handler runs (concurrency 1)", got)
	default:
	}
}

// parkedOne is a worker serving queue "q" at concurrency 1 whose handler
// sends the payload on started and runs until the test ends, parked (idle,
// its release made), with a connection and a Client on the same server.
type parkedOne struct {
	w       *Worker
	q       *queueRunner
	s       *heartbeat.Session
	c       redis.Conn
	client  *Client
	started chan string
}

func startParked(t *testing.T) *parkedOne {
	t.Helper()
	ctx := context.Background()
	pool := internalPool(t)
	c := pool.Get()
	t.Cleanup(func() { c.Close() })
	release := make(chan struct{})
	started := make(chan string, 4)
	cfg := Config{Namespace: redistest.Namespace(), DisableEvents: true}
	w := startInternal(t, pool, &WorkerConfig{Config: cfg, PollInterval: time.Hour,
		Queues: map[string]QueueConfig{"q": {Concurrency: 1, Handler: HandlerFunc(func(ctx context.Context, t *Task) error {
			started <- string(t.Payload)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		})}}})
	t.Cleanup(func() { w.Stop(ctx) })
	t.Cleanup(func() { close(release) }) // (before Stop, which waits for the handler)
	q := w.queues[0]
	s, _ := w.keeper.Current()
	waitIdle(t, q)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if ok, err := redis.Bool(c.Do("HEXISTS", q.qk.Park, s.ID())); err != nil {
			t.Fatal(err)
		} else if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the worker never parked")
		}
	}
	client, err := NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &parkedOne{w: w, q: q, s: s, c: c, client: client, started: started}
}
