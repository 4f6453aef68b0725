package worqr_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// RunNow moves a scheduled task to its queue at once: one enqueued an hour
// ahead (of a priority level too), and a retry an hour away. Its attempts
// are kept; a task that is not scheduled is left alone.
func TestRunNow(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	var mu sync.Mutex
	ran := map[string][]int{} // payload -> attempts
	cfg := fastTimings(ns)
	cfg.Queues = map[string]worqr.QueueConfig{"later": {Concurrency: 2, MaxAttempts: 3,
		Backoff: func(int, error) time.Duration { return time.Hour },
		Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			mu.Lock()
			ran[string(t.Payload)] = append(ran[string(t.Payload)], t.Attempt)
			mu.Unlock()
			if string(t.Payload) == "flaky" && t.Attempt == 1 {
				return errors.New("down")
			}
			return nil
		})}}
	startWorker(t, ctx, pool, &cfg)
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	attempts := func(p string) []int {
		mu.Lock()
		defer mu.Unlock()
		return append([]int(nil), ran[p]...)
	}
	state := func(id string) worqr.TaskState {
		ti, err := in.Task(ctx, "later", id)
		if err != nil {
			return ""
		}
		return ti.State
	}

	delayed, err := c.Enqueue(ctx, "later", []byte("delayed"), &worqr.EnqueueOpts{Delay: time.Hour, Retention: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	leveled, err := c.Enqueue(ctx, "later", []byte("leveled"), &worqr.EnqueueOpts{Delay: time.Hour, Priority: 2, Retention: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	flaky, err := c.Enqueue(ctx, "later", []byte("flaky"), &worqr.EnqueueOpts{Retention: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, 10*time.Second, "the flaky task's retry to be scheduled", func() bool {
		return len(attempts("flaky")) == 1 && state(flaky) == worqr.StateScheduled
	})
	if s := state(delayed); s != worqr.StateScheduled {
		t.Fatalf("the delayed task is %s, want scheduled", s)
	}
	for _, id := range []string{delayed, leveled, flaky} {
		if ok, err := in.RunNow(ctx, "later", id); err != nil || !ok {
			t.Fatalf("RunNow(%s) = %v, %v; want true", id, ok, err)
		}
	}
	wait(t, 10*time.Second, "the three to run", func() bool {
		return state(delayed) == worqr.StateDone && state(leveled) == worqr.StateDone && state(flaky) == worqr.StateDone
	})
	if a := attempts("flaky"); len(a) != 2 || a[1] != 2 {
		t.Errorf("the retried task ran attempts %v, want [1 2]", a)
	}
	if ok, err := in.RunNow(ctx, "later", delayed); err != nil || ok {
		t.Errorf("RunNow of a done task = %v, %v; want false", ok, err)
	}
	if ok, err := in.RunNow(ctx, "later", "nosuchtask"); err != nil || ok {
		t.Errorf("RunNow of an unknown task = %v, %v; want false", ok, err)
	}
	if _, err := in.RunNow(ctx, "later", ""); !errors.Is(err, worqr.ErrInvalid) {
		t.Errorf("RunNow with no id: %v, want ErrInvalid", err)
	}
}
