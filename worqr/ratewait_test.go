package worqr_test

import (
	"context"
	"testing"
	"time"

	"github.com/worqr/worqr-go/worqr"
)

// A worker whose free slots cover its queue's whole rate (here 2 starts a
// minute, 2 slots) took an empty queue, and the take said "the rate is
// used up, wait a minute": it counted on starts it did not make. A task
// enqueued then waited for that minute (or the next polls), with no
// start in the window. It starts at once now.
func TestIdleRateLimitedQueueStartsAtOnce(t *testing.T) {
	ctx := context.Background()
	pool, ns, c, _ := freshNamespace(t)
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
