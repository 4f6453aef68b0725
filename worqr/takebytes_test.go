package worqr_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// bigTasks enqueues n tasks of 600 KiB on queue "big" of a new namespace
// (a take hands out one of them: a second would pass 1 MiB) and returns
// the pool, the namespace, an inspector of it and the tasks' ids.
func bigTasks(t *testing.T, n int) (*redis.Pool, string, *worqr.Inspector, []string) {
	t.Helper()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	cfg := worqr.Config{Namespace: ns, DisableEvents: true}
	c, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	ps := make([][]byte, n)
	for i := range ps {
		ps[i] = bytes.Repeat([]byte{byte('a' + i)}, 600<<10)
	}
	ids, err := c.EnqueueBatch(context.Background(), "big", ps, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pool, ns, newInspector(t, pool, &cfg), ids
}

// gatedStarts is a handler that counts the tasks it starts and holds each
// until the gate closes.
type gatedStarts struct {
	mu      sync.Mutex
	started map[string]int
	gate    chan struct{}
}

func newGatedStarts() *gatedStarts {
	return &gatedStarts{started: map[string]int{}, gate: make(chan struct{})}
}

func (g *gatedStarts) HandleTask(ctx context.Context, task *worqr.Task) error {
	g.mu.Lock()
	g.started[task.ID]++
	g.mu.Unlock()
	<-g.gate
	return nil
}

// distinct returns how many tasks started, and whether one started twice.
func (g *gatedStarts) distinct() (int, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, k := range g.started {
		if k != 1 {
			return len(g.started), true
		}
	}
	return len(g.started), false
}

// A take hands out about 1 MiB of payloads at most (a take of 50 tasks of
// 1 MiB held Redis for 90 ms): the tasks it gives back wake the worker,
// which takes again at once. Its poll is an hour away: a worker that waited
// for it would start one task of twelve.
func TestBigTasksAreTakenInSteps(t *testing.T) {
	ctx := context.Background()
	const n = 12
	pool, ns, in, ids := bigTasks(t, n)
	g := newGatedStarts()
	cfg := fastTimings(ns)
	cfg.PollInterval = time.Hour
	cfg.DisableEvents = true
	cfg.Queues = map[string]worqr.QueueConfig{"big": {Concurrency: n, Retention: time.Minute, Handler: g}}
	startWorker(t, ctx, pool, &cfg)
	wait(t, 10*time.Second, "every task started at once", func() bool {
		k, _ := g.distinct()
		return k == n
	})
	close(g.gate)
	wait(t, 10*time.Second, "every task done", func() bool {
		for _, id := range ids {
			if info, err := in.Task(ctx, "big", id); err != nil || info.State != worqr.StateDone {
				return false
			}
		}
		return true
	})
	if _, twice := g.distinct(); twice {
		t.Errorf("a task started twice: %v", g.started)
	}
}

// A take of a queue served in a priority group gives back the tasks past
// its byte bound with a wake-up, as any take: the group must take again on
// that wake-up. It did not: the wake-up (a few bytes) came before the
// take's reply (about 1 MiB) was read, its hint was overwritten by the
// take's "came back short" (more = false), and the queue left the draw
// until the next poll: one task of twelve started per poll interval.
func TestBigTasksInAPriorityGroupAreTakenInSteps(t *testing.T) {
	ctx := context.Background()
	const n = 12
	pool, ns, _, _ := bigTasks(t, n)
	g := newGatedStarts()
	defer close(g.gate)
	cfg := fastTimings(ns)
	cfg.PollInterval = time.Hour
	cfg.DisableEvents = true
	cfg.Priority = worqr.PriorityWeighted
	cfg.Concurrency = n
	cfg.Queues = map[string]worqr.QueueConfig{
		"big":   {Concurrency: n, Weight: 1, Handler: g},
		"other": {Concurrency: n, Weight: 1, Handler: g},
	}
	startWorker(t, ctx, pool, &cfg)
	wait(t, 10*time.Second, "every task started at once (the poll is an hour away)", func() bool {
		k, _ := g.distinct()
		return k == n
	})
}
