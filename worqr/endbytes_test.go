package worqr_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// Ends that arrive together share one script call (group commit): the
// call is bounded by the bytes the ends write (results, errors, a stage's
// fields and children), about MaxEnqueueChunkBytes (4 MiB), not only by
// their count: 64 ends of 1 MiB results each were one call of 64 MiB,
// which held Redis for 106 ms.
func TestGroupedEndsAreBoundedByBytes(t *testing.T) {
	ctx := context.Background()
	base := srv.Pool()
	t.Cleanup(func() { base.Close() })
	ns := redistest.Namespace()
	const n, size = 16, 1 << 20
	var returned atomic.Int32
	pool := newBigCalls(base, size)
	ccfg := worqr.Config{Namespace: ns, DisableEvents: true}
	c, err := worqr.NewClient(base, &ccfg)
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, base, &ccfg)
	ps := make([][]byte, n)
	for i := range ps {
		ps[i] = []byte("x")
	}
	ids, err := c.EnqueueBatch(ctx, "res", ps, nil)
	if err != nil {
		t.Fatal(err)
	}
	var started sync.WaitGroup
	started.Add(n)
	gate := make(chan struct{})
	res := make([]byte, size)
	cfg := fastTimings(ns)
	cfg.HeartbeatTTL = 5 * time.Second // the held calls must not cost the keepalive
	cfg.DisableEvents = true
	cfg.Queues = map[string]worqr.QueueConfig{"res": {Concurrency: n, Retention: time.Minute,
		Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			started.Done()
			<-gate
			t.SetResult(res)
			returned.Add(1)
			return nil
		})}}
	w := startWorker(t, ctx, pool, &cfg)
	started.Wait()
	close(gate)
	// Every end is in a held call or waits behind them in the group.
	wait(t, 10*time.Second, "every end held or waiting", func() bool {
		return returned.Load() == n && pool.held.Load()+int64(w.EndsWaiting("res")) == n
	})
	close(pool.hold)
	wait(t, 10*time.Second, "every task done", func() bool {
		for _, id := range ids {
			if info, err := in.Task(ctx, "res", id); err != nil || info.State != worqr.StateDone {
				return false
			}
		}
		return true
	})
	if max := pool.biggest.Load(); max > 5<<20 {
		t.Fatalf("one end call carried %d bytes (%d calls for %d results of 1 MiB); want about MaxEnqueueChunkBytes (4 MiB) at most",
			max, pool.calls.Load(), n)
	}
	t.Logf("%d calls, the biggest %d bytes", pool.calls.Load(), pool.biggest.Load())
}
