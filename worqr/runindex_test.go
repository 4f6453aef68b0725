package worqr_test

import (
	"context"
	"math"
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
	in := newInspector(t, pool, &worqr.Config{Namespace: ns})
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
	if runs, err := in.FindRuns(ctx, old, "user", "42"); err == nil {
		t.Logf("FindRuns under the old definition: %d runs", len(runs))
	}
}

// An index value that always has a run going (a tenant, a busy user) never
// lets its index key expire, and the entries of the runs that ended and
// expired stayed in it: one entry per run, for ever. FindRuns never reads
// them (it stops at Redis's now), so only memory showed it.
func TestRunIndexForgetsExpiredRuns(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	hold := make(chan struct{})
	f := &worqr.Flow{Name: "ixg", Retention: 300 * time.Millisecond, IndexBy: []string{"user"}, Stages: []worqr.Stage{{
		Name: "s", Queue: worqr.QueueConfig{Concurrency: 8}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				if r.State["hold"] == "1" {
					select {
					case <-hold:
					case <-ctx.Done():
					}
				}
				return nil, nil
			})}}}
	c, _ := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	in := newInspector(t, pool, &worqr.Config{Namespace: ns})
	cfg := fastTimings(ns)
	cfg.Flows = []*worqr.Flow{f}
	startWorker(t, ctx, pool, &cfg)
	t.Cleanup(func() { close(hold) }) // (before the worker's Stop)
	if _, err := c.StartRun(ctx, f, map[string]string{"user": "42", "hold": "1"}); err != nil {
		t.Fatal(err)
	}
	conn := pool.Get()
	defer conn.Close()
	ix := ns + ":{ixg}:ix:user:42"
	runs := func(n int) {
		ids := make([]string, n)
		for i := range ids {
			id, err := c.StartRun(ctx, f, map[string]string{"user": "42"})
			if err != nil {
				t.Fatal(err)
			}
			ids[i] = id
		}
		wait(t, 10*time.Second, "the runs to end", func() bool {
			score, err := redis.Float64(conn.Do("ZSCORE", ix, ids[n-1]))
			return err == nil && !math.IsInf(score, 1)
		})
		time.Sleep(400 * time.Millisecond) // past the retention of every run ended
	}
	runs(50)
	runs(1) // a start and an end after the others expired
	n, err := redis.Int(conn.Do("ZCARD", ix))
	if err != nil {
		t.Fatal(err)
	}
	ttl, _ := redis.Int(conn.Do("PTTL", ix))
	found, err := in.FindRuns(ctx, f, "user", "42")
	t.Logf("index: %d entries, PTTL %d; FindRuns: %d runs", n, ttl, len(found))
	if err != nil || len(found) != 1 {
		t.Fatalf("FindRuns: %d runs (%v), want the one running", len(found), err)
	}
	if n > 2 {
		t.Errorf("the index keeps %d entries for 1 run found: the entries of 51 runs past their retention stay while a run of the value is going", n)
	}
}
