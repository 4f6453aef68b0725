package worqr_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// A take hands out about 1 MiB of payloads at most (a take of 50 tasks of
// 1 MiB held Redis for 90 ms): the tasks it gives back wake the worker,
// which takes again at once. Its poll is an hour away: a worker that waited
// for it would start one task of twelve.
func TestBigTasksAreTakenInSteps(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	const n = 12
	ps := make([][]byte, n)
	for i := range ps {
		ps[i] = bytes.Repeat([]byte{byte('a' + i)}, 600<<10)
	}
	ids, err := c.EnqueueBatch(ctx, "big", ps, nil)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		started = map[string]int{}
		gate    = make(chan struct{})
	)
	cfg := fastTimings(ns)
	cfg.PollInterval = time.Hour
	cfg.DisableEvents = true
	cfg.Queues = map[string]worqr.QueueConfig{"big": {Concurrency: n, Retention: time.Minute,
		Handler: worqr.HandlerFunc(func(ctx context.Context, task *worqr.Task) error {
			mu.Lock()
			started[task.ID]++
			mu.Unlock()
			if len(task.Payload) != 600<<10 {
				t.Errorf("%s: payload of %d bytes", task.ID, len(task.Payload))
			}
			<-gate
			return nil
		})}}
	startWorker(t, ctx, pool, &cfg)
	wait(t, 10*time.Second, "every task started at once", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(started) == n
	})
	close(gate)
	wait(t, 10*time.Second, "every task done", func() bool {
		for _, id := range ids {
			if info, err := c.Task(ctx, "big", id); err != nil || info.State != worqr.StateDone {
				return false
			}
		}
		return true
	})
	for id, k := range started {
		if k != 1 {
			t.Errorf("%s started %d times", id, k)
		}
	}
}
