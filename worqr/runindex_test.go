package worqr_test

import (
	"context"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// A run indexed by a property the worker's Flow no longer declares
// (IndexBy changed between start and end, e.g. a deploy) leaves its index
// when it ends: a stage's end used the worker's IndexBy, not the
// properties stored on the run, and the entry stayed at +inf in a key with
// no expiry, forever (found by an audit).
func TestRunIndexFollowsTheRunNotTheDeploy(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	stages := []worqr.Stage{{Name: "s", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
		func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) { return nil, nil })}}
	old := &worqr.Flow{Name: "ixf", Retention: time.Second, IndexBy: []string{"user"}, Stages: stages}
	now := &worqr.Flow{Name: "ixf", Retention: time.Second, Stages: stages}
	c, _ := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	id, err := c.StartRun(ctx, old, map[string]string{"user": "42"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := fastTimings(ns)
	cfg.Flows = []*worqr.Flow{now}
	startWorker(t, ctx, pool, &cfg)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if info, err := c.WaitRun(wctx, now, id); err != nil || info.Status != worqr.RunDone {
		t.Fatal(info, err)
	}
	time.Sleep(1300 * time.Millisecond)
	conn := pool.Get()
	defer conn.Close()
	ix := ns + ":{ixf}:ix:user:42"
	score, _ := redis.String(conn.Do("ZSCORE", ix, id))
	ttl, _ := redis.Int(conn.Do("PTTL", ix))
	ex, _ := redis.Int(conn.Do("EXISTS", ns+":{ixf}:t:"+id))
	t.Logf("run hash exists=%d; index entry score %q, index PTTL %d", ex, score, ttl)
	if ex == 0 && score == "inf" && ttl == -1 {
		t.Errorf("the run ended and expired, its index entry stays +inf with no expiry")
	}
	if runs, err := c.FindRuns(ctx, old, "user", "42"); err == nil {
		t.Logf("FindRuns under the old definition: %d runs", len(runs))
	}
}
