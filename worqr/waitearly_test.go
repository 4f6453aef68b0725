package worqr_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// Enqueue, then Wait at once, on a queue without retention whose handler is
// quick: the task ends after Wait was called, and Wait must say done.
func TestWaitRightAfterEnqueue(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	cfg := worqr.Config{Namespace: ns} // default EventInterval (250ms)
	wc := worqr.WorkerConfig{Config: cfg, Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 4,
		Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error { return nil })}}}
	startWorker(t, ctx, pool, &wc)
	c, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	notFound := 0
	for i := 0; i < 20; i++ {
		id, err := c.Enqueue(ctx, "q", []byte("p"), nil)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		info, err := c.Wait(wctx, "q", id)
		cancel()
		switch {
		case errors.Is(err, worqr.ErrTaskNotFound):
			notFound++
		case err != nil:
			t.Fatal(err)
		case info.State != worqr.StateDone:
			t.Fatalf("state %s", info.State)
		}
	}
	if notFound > 0 {
		t.Fatalf("Wait called right after Enqueue returned ErrTaskNotFound %d times of 20 for tasks that ended done after Wait was called", notFound)
	}
}
