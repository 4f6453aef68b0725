package worqr

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// TestTakePastAHandoffPutsBack with the two replies the other way round:
// the hand-off is recorded in Redis before the fetch loop's take runs
// (so the take gets a task past the worker's concurrency), but its message
// comes after the take's reply, which launched the task it got in the
// slot the hand-off had taken in Redis. The late hand-off is then past the
// concurrency: it must be put back (released) at once, not wait, held by
// the worker and out of every other worker's reach, for the taken task's
// handler to finish (here: until the test ends).
func TestLateHandoffPastATakeIsPutBack(t *testing.T) {
	ctx := context.Background()
	p := startParked(t)
	w, q, s, c, client, started := p.w, p.q, p.s, p.c, p.client, p.started
	var armed atomic.Bool
	armed.Store(true)
	var msg atomic.Value // []byte: the hand-off's message, held back
	testHookBeforeTake = func(hq *queueRunner) {
		if hq != q || !armed.CompareAndSwap(true, false) {
			return
		}
		// The take is about to ask for the one free slot: a hand-off is
		// recorded first (its message on its way), then a task waits in
		// the list (the worker, at its concurrency in Redis, is unparked).
		m, _ := heldFor(t, c, q, s, "handed")
		msg.Store(m)
		if _, err := client.Enqueue(ctx, "q", []byte("taken"), nil); err != nil {
			t.Error(err)
		}
	}
	defer func() { testHookBeforeTake = nil }()
	q.hint()
	select {
	case got := <-started:
		if got != "taken" {
			t.Fatalf("started %q, want the task taken", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the take's task never started")
	}
	// The hand-off's message comes now, after the take's reply.
	w.handed(q, msg.Load().([]byte))
	deadline := time.Now().Add(5 * time.Second)
	for {
		held, _ := redis.StringMap(c.Do("HGETALL", q.qk.WorkerQueue(s.ID())))
		waiting, _ := redis.Strings(c.Do("LRANGE", q.qk.Waiting, 0, -1))
		heldHanded := false
		for _, id := range held {
			heldHanded = heldHanded || id == "handed"
		}
		if !heldHanded && len(waiting) == 1 && waiting[0] == "handed" && len(held) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hand-off past the concurrency is held (%v), not waiting (%v), while the other task runs", held, waiting)
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case got := <-started:
		t.Fatalf("%q started while the taken task's handler runs (concurrency 1)", got)
	default:
	}
}
