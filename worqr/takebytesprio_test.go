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

// A take of a queue served in a priority group gives back the tasks past
// its byte bound with a wake-up, as any take: the group must take again on
// that wake-up. It did not: the wake-up (a few bytes) came before the
// take's reply (about 1 MiB) was read, its hint was overwritten by the
// take's "came back short" (more = false), and the queue left the draw
// until the next poll: one task of twelve started per poll interval.
func TestBigTasksInAPriorityGroupAreTakenInSteps(t *testing.T) {
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
	if _, err := c.EnqueueBatch(ctx, "big", ps, nil); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		started = map[string]int{}
		gate    = make(chan struct{})
	)
	h := worqr.HandlerFunc(func(ctx context.Context, task *worqr.Task) error {
		mu.Lock()
		started[task.ID]++
		mu.Unlock()
		<-gate
		return nil
	})
	cfg := fastTimings(ns)
	cfg.PollInterval = time.Hour
	cfg.DisableEvents = true
	cfg.Priority = worqr.PriorityWeighted
	cfg.Concurrency = n
	cfg.Queues = map[string]worqr.QueueConfig{
		"big":   {Concurrency: n, Weight: 1, Handler: h},
		"other": {Concurrency: n, Weight: 1, Handler: h},
	}
	startWorker(t, ctx, pool, &cfg)
	defer close(gate)
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		k := len(started)
		mu.Unlock()
		if k == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d tasks started in 10 s (the poll is an hour away)", k, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
