package worqr_test

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// Fan-outs that end together are not all written in one script call: an
// ending weighs its children (and fields) in its group's call, which holds
// about rdb.MaxTake of weight. 64 fan-outs of 1,000 children in one call
// held Redis for hundreds of milliseconds (found by an audit). A call that
// creates children carries about 5 arguments per child: with the weights
// each fan-out of MaxChildren (which weighs more than rdb.MaxTake) has a
// call of its own.
func TestGroupedFanOutsAreSplit(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var fanOuts []int // arguments of each script call that created children
	record := func(args []any) bool {
		if len(args) > 4*worqr.MaxChildren {
			mu.Lock()
			fanOuts = append(fanOuts, len(args))
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
	const n = 64
	gate := make(chan struct{})
	started := make(chan struct{}, n)
	flow := &worqr.Flow{Name: "fan", Retention: time.Minute, Stages: []worqr.Stage{
		{Name: "s1", Queue: worqr.QueueConfig{Concurrency: n},
			Children: map[string]worqr.QueueConfig{"kids": {Concurrency: 1, Handler: worqr.HandlerFunc(
				func(ctx context.Context, t *worqr.Task) error { <-ctx.Done(); return ctx.Err() })}},
			Handler: worqr.StageHandlerFunc(
				func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
					ks := make([]worqr.ChildSpec, worqr.MaxChildren)
					for i := range ks {
						ks[i] = worqr.ChildSpec{Queue: "kids", Payload: []byte("0123456789abcdef")}
					}
					started <- struct{}{}
					<-gate
					return &worqr.StageResult{Children: ks}, nil
				})},
	}}
	cfg.Flows = []*worqr.Flow{flow}
	startWorker(t, ctx, pool, &cfg)
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := c.StartRun(ctx, flow, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		<-started
	}
	close(gate)
	wait(t, 60*time.Second, "every fan-out", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return sum(fanOuts) >= n*5*worqr.MaxChildren
	})
	mu.Lock()
	defer mu.Unlock()
	sort.Ints(fanOuts)
	t.Logf("%d calls created children; arguments: fewest %d, most %d", len(fanOuts), fanOuts[0], fanOuts[len(fanOuts)-1])
	if len(fanOuts) != n || fanOuts[len(fanOuts)-1] >= 2*fanOuts[0] {
		t.Errorf("one call carried %d arguments, another %d: %d calls for %d fan-outs: fan-outs were grouped", fanOuts[len(fanOuts)-1], fanOuts[0], len(fanOuts), n)
	}
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}
