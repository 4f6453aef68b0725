package worqr_test

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/worqr/worqr-go/worqr"
)

// The tests of batch.go: a BatchHandler's queue runs a key's head with the
// tasks behind it as one batch, and ends them together.
func TestBatchHandler(t *testing.T) {
	// A key's tasks enqueued before the worker starts come as one batch, in
	// enqueue order, the head first; nil ends each of them as done, with
	// its own result; the middleware sees the batch through BatchOf.
	t.Run("runs a key's tasks together in order", func(t *testing.T) {
		b := setup(t)
		ctx := context.Background()
		ids, err := b.client.EnqueueBatch(ctx, "kb", [][]byte{[]byte("1"), []byte("2"), []byte("3")}, &worqr.EnqueueOpts{Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *worqr.Batch, 4)
		seen := make(chan *worqr.Batch, 4)
		b.startWorker(worqr.WorkerConfig{
			Middleware: []worqr.Middleware{func(next worqr.Handler) worqr.Handler {
				return worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
					seen <- worqr.BatchOf(ctx)
					return next.HandleTask(ctx, t)
				})
			}},
			Queues: map[string]worqr.QueueConfig{"kb": {KeyBatch: 5, Concurrency: 1, Retention: time.Minute,
				BatchHandler: worqr.BatchHandlerFunc(func(_ context.Context, bt *worqr.Batch) error {
					for _, t := range bt.Tasks {
						t.SetResult(append([]byte("r"), t.Payload...))
					}
					got <- bt
					return nil
				})}}})
		var bt *worqr.Batch
		select {
		case bt = <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("no batch ran")
		}
		var gotIDs []string
		for _, t := range bt.Tasks {
			gotIDs = append(gotIDs, t.ID)
		}
		if bt.Key != "k" || bt.Attempt != 1 || !reflect.DeepEqual(gotIDs, ids) {
			t.Fatalf("batch key %q attempt %d tasks %v; want key k, attempt 1, tasks %v in enqueue order", bt.Key, bt.Attempt, gotIDs, ids)
		}
		if m := <-seen; m != bt {
			t.Errorf("BatchOf in the middleware = %p, want the batch run (%p)", m, bt)
		}
		for i, id := range ids {
			b.events.waitFor(t, 10*time.Second, "task "+id+" done", func(e worqr.Event) bool {
				return e.Kind == worqr.EventDone && e.TaskID == id
			})
			info, err := b.in.Task(ctx, "kb", id)
			if err != nil {
				t.Fatal(err)
			}
			if want := "r" + string(rune('1'+i)); info.State != worqr.StateDone || string(info.Result) != want {
				t.Errorf("task %d: state %s result %q; want done with %q", i, info.State, info.Result, want)
			}
		}
	})

	// An error retries the batch as a unit: the head waits out the
	// backoff, the tasks behind it wait behind it, each counts a failed
	// attempt, and the next run has Attempt 2 and the same tasks in order.
	t.Run("an error retries the batch as a unit", func(t *testing.T) {
		b := setup(t)
		ctx := context.Background()
		ids, err := b.client.EnqueueBatch(ctx, "kb", [][]byte{[]byte("1"), []byte("2")}, &worqr.EnqueueOpts{Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var runs [][]string
		var attempts []int
		b.startWorker(worqr.WorkerConfig{PollInterval: 20 * time.Millisecond,
			Queues: map[string]worqr.QueueConfig{"kb": {KeyBatch: 5, Concurrency: 1, MaxAttempts: 3,
				Backoff: func(int, error) time.Duration { return time.Millisecond }, Retention: time.Minute,
				BatchHandler: worqr.BatchHandlerFunc(func(_ context.Context, bt *worqr.Batch) error {
					mu.Lock()
					defer mu.Unlock()
					var r []string
					for _, t := range bt.Tasks {
						r = append(r, t.ID)
					}
					runs = append(runs, r)
					attempts = append(attempts, bt.Attempt)
					if len(runs) == 1 {
						return errors.New("first try fails")
					}
					return nil
				})}}})
		for _, id := range ids {
			b.events.waitFor(t, 10*time.Second, "task "+id+" done", func(e worqr.Event) bool {
				return e.Kind == worqr.EventDone && e.TaskID == id
			})
		}
		mu.Lock()
		defer mu.Unlock()
		if !reflect.DeepEqual(runs, [][]string{ids, ids}) || !reflect.DeepEqual(attempts, []int{1, 2}) {
			t.Fatalf("runs %v with attempts %v; want the batch %v twice, attempts [1 2]", runs, attempts, ids)
		}
		for _, id := range ids {
			info, err := b.in.Task(ctx, "kb", id)
			if err != nil {
				t.Fatal(err)
			}
			if info.Failures != 1 {
				t.Errorf("task %s: %d failures, want 1 (each task of the batch counts the failed attempt)", id, info.Failures)
			}
		}
	})
}
