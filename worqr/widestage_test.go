package worqr_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// A stage whose result has more fields than Lua's unpack takes (about
// 8,000 values) ends as any other: the end script failed after it claimed
// the taking, and the run was left active, held by nobody, never recovered
// (found by an audit).
func TestStageWithManyFields(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	cfg := fastTimings(ns)
	flow := &worqr.Flow{Name: "wide", Retention: time.Minute, Stages: []worqr.Stage{
		{Name: "s1", Queue: worqr.QueueConfig{Concurrency: 1, MaxAttempts: 2}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				f := map[string]string{}
				for i := 0; i < 5000; i++ {
					f[fmt.Sprintf("f%d", i)] = "v"
				}
				return &worqr.StageResult{Fields: f}, nil
			})},
		{Name: "s2", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) { return nil, nil })},
	}}
	cfg.Flows = []*worqr.Flow{flow}
	startWorker(t, ctx, pool, &cfg)
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, pool, &worqr.Config{Namespace: ns})
	id, err := c.StartRun(ctx, flow, nil)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	info, err := c.WaitRun(wctx, flow, id)
	if err == nil {
		t.Logf("run ended: %s %s", info.Status, info.LastError)
		return
	}
	r, _ := in.Run(ctx, flow.Name, id)
	conn := pool.Get()
	defer conn.Close()
	keys, _ := redis.Strings(conn.Do("KEYS", ns+":{wide}:wq:*"))
	held := 0
	for _, k := range keys {
		n, _ := redis.Int(conn.Do("HLEN", k))
		held += n
	}
	waiting, _ := redis.Int(conn.Do("LLEN", ns+":{wide}:q:s1"))
	t.Fatalf("run never ends (WaitRun: %v): status %s, stage %s, task state %s; held by no worker (%d takings in wq hashes), %d waiting",
		err, r.Status, r.Stage, r.TaskState, held, waiting)
}

// Nor does such a stage take down the other takings the worker's group
// commit ends in the same call: well-behaved runs were stranded with it.
func TestWideStageDoesNotStrandItsNeighbours(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	cfg := fastTimings(ns)
	gate := make(chan struct{})
	const n = 64
	started := make(chan struct{}, n)
	flow := &worqr.Flow{Name: "wide", Retention: time.Minute, Stages: []worqr.Stage{
		{Name: "s1", Queue: worqr.QueueConfig{Concurrency: n}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				f := map[string]string{"ok": "1"}
				if r.State["wide"] != "" {
					for i := 0; i < 5000; i++ {
						f[fmt.Sprintf("f%d", i)] = "v"
					}
				}
				started <- struct{}{}
				<-gate
				return &worqr.StageResult{Fields: f}, nil
			})},
	}}
	cfg.Flows = []*worqr.Flow{flow}
	startWorker(t, ctx, pool, &cfg)
	c, _ := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	in := newInspector(t, pool, &worqr.Config{Namespace: ns})
	var ids []string
	for i := 0; i < n; i++ {
		st := map[string]string{}
		if i%8 == 0 {
			st["wide"] = "1"
		}
		id, err := c.StartRun(ctx, flow, st)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for i := 0; i < n; i++ {
		<-started
	}
	close(gate)
	time.Sleep(5 * time.Second)
	stuck := 0
	for i, id := range ids {
		r, _ := in.Run(ctx, flow.Name, id)
		if r.Status == worqr.RunRunning && i%8 != 0 {
			stuck++
			t.Logf("run %d (%s): status %s, task %s", i, id, r.Status, r.TaskState)
		}
	}
	if stuck > 0 {
		t.Fatalf("%d well-behaved runs stuck forever (ended in the same end call as a wide one)", stuck)
	}
}
