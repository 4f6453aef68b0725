package worqr_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/worqr/worqr-go/worqr"
)

// A task cancelled while it waits deep in a long queue is marked where it
// waits (the cancel does not search the whole list): the worker that
// reaches it never runs it, and it ends as cancelled.
func TestCancelDeepInALongQueueIsNeverRun(t *testing.T) {
	ctx := context.Background()
	pool, _, cfg, _ := handEnv(t)
	client, _ := worqr.NewClient(pool, &cfg)
	const n = 25_000
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = []byte(strconv.Itoa(i))
	}
	ids, err := client.EnqueueBatch(ctx, "q", payloads, nil)
	if err != nil {
		t.Fatal(err)
	}
	deep := ids[n/2]
	if st, err := client.Cancel(ctx, "q", deep); err != nil || st != worqr.CancelRemoved {
		t.Fatalf("cancel: %v %v, want removed", st, err)
	}
	var ran atomic.Int64
	var ranDeep atomic.Bool
	done := make(chan struct{})
	w := startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: cfg,
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 20, Retention: time.Minute,
			Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
				if t.ID == deep {
					ranDeep.Store(true)
				}
				if ran.Add(1) == n-1 {
					close(done)
				}
				return nil
			})}}})
	defer w.Stop(ctx)
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("ran %d of %d tasks", ran.Load(), n-1)
	}
	if ranDeep.Load() {
		t.Fatal("the cancelled task ran")
	}
	in, _ := worqr.NewInspector(pool, &cfg)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		info, err := in.Task(ctx, "", deep)
		if err == nil && info.State == worqr.StateCancelled && !info.FinishedAt.IsZero() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled task: %+v %v, want cancelled and finished", info, err)
		}
	}
}
