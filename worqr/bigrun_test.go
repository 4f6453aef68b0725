package worqr_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// A stage whose run is too big to come with the take (it keeps the records
// of every child it fanned out: a take hands out at most 4,000 fields of
// runs) still sees its whole run: the worker reads it in steps before the
// handler runs.
func TestStageSeesABigRunWhole(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	const kids = 3000
	got := make(chan *worqr.Run, 1)
	flow := &worqr.Flow{Name: "big", Retention: time.Minute, Stages: []worqr.Stage{
		{Name: "s1", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				got <- r
				return nil, nil
			})},
	}}
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.StartRun(ctx, flow, map[string]string{"user": "u1"})
	if err != nil {
		t.Fatal(err)
	}
	// The records an earlier stage's fan-outs left.
	conn := pool.Get()
	defer conn.Close()
	args := []any{ns + ":{big}:t:" + id}
	for i := 0; i < kids; i++ {
		k := id + ".k" + strconv.Itoa(i)
		args = append(args, "k:"+k, "done", "kq:"+k, "kids", "kr:"+k, "r"+strconv.Itoa(i))
	}
	if n, err := redis.Int(conn.Do("HSET", args...)); err != nil || n != 3*kids {
		t.Fatalf("HSET: %d, %v", n, err)
	}
	cfg := fastTimings(ns)
	cfg.Flows = []*worqr.Flow{flow}
	startWorker(t, ctx, pool, &cfg)
	select {
	case r := <-got:
		if len(r.Children) != kids || r.State["user"] != "u1" {
			t.Fatalf("the stage saw %d children and state %v, want %d and user u1", len(r.Children), r.State, kids)
		}
		if r.Children[0].Status != "done" || r.Children[0].Queue != "kids" || len(r.Children[0].Result) == 0 {
			t.Fatalf("child %+v", r.Children[0])
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the stage never ran")
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if r, err := c.WaitRun(wctx, flow, id); err != nil || r.Status != worqr.RunDone {
		t.Fatalf("run: %v, %v; want done", r, err)
	}
}
