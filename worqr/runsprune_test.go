package worqr_test

import (
	"context"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// A flow's list of runs (what Inspector.Runs pages through) loses the runs
// whose data expired: a worker's reaper prunes it with each sweep. It grew
// by one entry per run forever (found by an audit).
func TestReaperPrunesExpiredRunsFromTheList(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	flow := &worqr.Flow{Name: "pr", Retention: time.Millisecond, Stages: []worqr.Stage{
		{Name: "s", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			})},
	}}
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1500 // more than one chunk
	ended := make([]string, 0, n)
	for i := 0; i < n; i++ {
		id, err := c.StartRun(ctx, flow, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := c.CancelRun(ctx, flow, id); err != nil || !ok {
			t.Fatalf("cancel run %s: %v, %v", id, ok, err)
		}
		ended = append(ended, id)
	}
	live, err := c.StartRun(ctx, flow, nil)
	if err != nil {
		t.Fatal(err)
	}
	qk := rdb.NewKeys(ns).Queue(rdb.QueueRef{Tag: "pr", Name: "pr"})
	conn := pool.Get()
	defer conn.Close()
	wait(t, 10*time.Second, "the ended runs to expire", func() bool {
		k, err := redis.Int(conn.Do("EXISTS", qk.Task(ended[len(ended)-1])))
		return err == nil && k == 0
	})
	if k, err := redis.Int(conn.Do("ZCARD", qk.Runs)); err != nil || k != n+1 {
		t.Fatalf("runs listed before the reaper's sweep: %d, %v; want %d", k, err, n+1)
	}
	cfg := fastTimings(ns)
	cfg.Flows = []*worqr.Flow{flow}
	startWorker(t, ctx, pool, &cfg) // its reaper sweeps when it first holds the lease
	wait(t, 10*time.Second, "the list to lose the expired runs", func() bool {
		k, err := redis.Int(conn.Do("ZCARD", qk.Runs))
		return err == nil && k == 1
	})
	ids, err := redis.Strings(conn.Do("ZRANGE", qk.Runs, 0, -1))
	if err != nil || len(ids) != 1 || ids[0] != live {
		t.Fatalf("runs listed %v, %v; want only the running one %s", ids, err, live)
	}
}
