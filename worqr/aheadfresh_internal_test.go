package worqr

import (
	"context"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/internal/seam"
)

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
		for deadline := time.Now().Add(5 * time.Second); handlersEnding(q) < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				c.Do("CLIENT", "UNPAUSE")
				t.Fatalf("%d handlers ending, want %d", handlersEnding(q), n)
			}
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
	for deadline := time.Now().Add(5 * time.Second); !w.keeper.Fresh(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no beat")
		}
	}
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
