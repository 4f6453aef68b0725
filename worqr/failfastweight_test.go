package worqr_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// Children that fail their runs (fail-fast) at the same time are not all
// ended in one script call: each such ending stops every pending child of
// its run's fan-out (about 4 ms per 1,000), so it weighs the most a
// fan-out has in its group's call, and has a call of its own. One call
// failing children of 100 runs of 1,000 held Redis for 0.6 to 0.9 s
// (found by an audit).
func TestChildFailuresOfManyRunsAreSplit(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var perCall []int // fail-fast child endings (ask dead) of each end call
	record := func(args []any) bool {
		n := 0
		for i := 0; i+4 < len(args); i++ {
			if k, _ := args[i].(string); k == "child" {
				if ask, _ := args[i+4].(string); ask == "dead" {
					n++
				}
			}
		}
		if n > 0 {
			mu.Lock()
			perCall = append(perCall, n)
			mu.Unlock()
		}
		return false
	}
	var never atomic.Int32
	pool := &redis.Pool{MaxIdle: 8, DialContext: func(ctx context.Context) (redis.Conn, error) {
		c, err := redis.DialURLContext(ctx, srv.URL)
		if err != nil {
			return nil, err
		}
		return &lossyConn{Conn: c, armed: &never, match: record}, nil
	}}
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	cfg := fastTimings(ns)
	const n = 16
	gate := make(chan struct{})
	var ready sync.WaitGroup
	ready.Add(n)
	flow := &worqr.Flow{Name: "ff", Retention: time.Minute, Stages: []worqr.Stage{
		{Name: "s1", Queue: worqr.QueueConfig{Concurrency: n},
			Children: map[string]worqr.QueueConfig{"kids": {Concurrency: 2 * n, MaxAttempts: 1, Handler: worqr.HandlerFunc(
				func(ctx context.Context, t *worqr.Task) error {
					if string(t.Payload) == "good" {
						<-ctx.Done() // stopped by its sibling's failure
						return ctx.Err()
					}
					ready.Done()
					<-gate
					return worqr.SkipRetry(errors.New("boom"))
				})}},
			Handler: worqr.StageHandlerFunc(
				func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
					return &worqr.StageResult{Children: []worqr.ChildSpec{
						{Queue: "kids", Payload: []byte("bad")}, {Queue: "kids", Payload: []byte("good")}}}, nil
				})},
		{Name: "s2", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) { return nil, nil })},
	}}
	cfg.Flows = []*worqr.Flow{flow}
	startWorker(t, ctx, pool, &cfg)
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i := range ids {
		if ids[i], err = c.StartRun(ctx, flow, nil); err != nil {
			t.Fatal(err)
		}
	}
	ready.Wait()
	close(gate)
	for _, id := range ids {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		r, err := c.WaitRun(wctx, flow, id)
		cancel()
		if err != nil || r.Status != worqr.RunFailed {
			t.Fatalf("run %s: %v, %v; want failed", id, r, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	total, most := 0, 0
	for _, k := range perCall {
		total += k
		most = max(most, k)
	}
	t.Logf("%d end calls ended %d failing children", len(perCall), total)
	// (The stopped siblings end as dead too, their runs already failed:
	// the worker cannot tell, so they weigh as much.)
	if total < n || most != 1 {
		t.Errorf("%d failing children ended, up to %d in one call: want at least %d, one per call", total, most, n)
	}
}
