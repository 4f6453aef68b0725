package worqr_test

import (
	"context"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/internal/seam"
	"github.com/worqr/worqr-go/worqr"
)

// TestHandoffReceivedWhileFrozenIsNotRun with a long PollInterval: the
// hand-off the frozen worker did not run is held by it in Redis, out of
// every other worker's reach, until its release. Once a beat says the
// worker's id lives, that release must come then, not at the next poll
// (an hour here) or the next wake-up of the queue.
func TestNotRunWhileFrozenIsReleasedOnceFresh(t *testing.T) {
	pool := srv.Pool()
	defer pool.Close()
	c := pool.Get()
	defer c.Close()
	clock := seam.NewManualClock(time.Now())
	ctx := seam.WithHeartbeatClock(context.Background(), clock)
	cfg := worqr.Config{Namespace: redistest.Namespace()}
	q := rdb.NewKeys(cfg.Namespace).Queue(rdb.Standalone("q"))
	ran := make(chan string, 4)
	w := startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: cfg,
		// Fresh for TTL - Interval = 500 ms of its clock after a beat.
		HeartbeatInterval: time.Second, HeartbeatTTL: 1500 * time.Millisecond, PollInterval: time.Hour,
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 1, Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
			ran <- t.PID()
			return nil
		})}}})
	defer w.Stop(context.Background())
	h := watchHandoffs(t, q)
	waitParked(t, c, q, w.ID())
	clock.Advance(700 * time.Millisecond) // no beat for 700 ms: not fresh
	client, _ := worqr.NewClient(pool, &cfg)
	if _, err := client.Enqueue(context.Background(), "q", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	handedPID := h.lastPID(w.ID(), time.Second)
	if handedPID == "" {
		t.Fatal("the task was not handed to the parked worker")
	}
	select {
	case pid := <-ran:
		t.Fatalf("a hand-off received while frozen ran (pid %s)", pid)
	case <-time.After(200 * time.Millisecond):
	}
	// The worker's clock runs again: a beat, then the release and a take.
	defer clock.Run(time.Second, 300*time.Millisecond)()
	select {
	case pid := <-ran:
		if pid == handedPID {
			t.Fatalf("ran under the handed pid %s, want a taking of its own after the release", pid)
		}
	case <-time.After(5 * time.Second):
		held, _ := c.Do("HGETALL", q.WorkerQueue(w.ID()))
		t.Fatalf("the task never ran: the worker, fresh again, still holds it (%s)", held)
	}
}
