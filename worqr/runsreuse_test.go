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

// A run started with an id of its own (RunOpts.ID) may be started again
// once the earlier run of that id expired. Inspector.Runs (and the
// reaper's prune) drops from the flow's list the ids whose run it read
// gone: a run started again under that id between the read and the drop
// lost its entry, and the list (the dashboard's Flows page, worqr flow ls)
// never showed it, running or ended. The drop checks each id again.
func TestRunStartedAgainUnderItsIDStaysListed(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	flow := &worqr.Flow{Name: "reuse", Retention: time.Millisecond, Stages: []worqr.Stage{
		{Name: "s", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) { return nil, nil })},
	}}
	cfg := &worqr.Config{Namespace: ns, DisableEvents: true}
	c, err := worqr.NewClient(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	opts := &worqr.RunOpts{ID: "order-42"}
	if _, err := c.StartRunWith(ctx, flow, nil, opts); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.CancelRun(ctx, flow, opts.ID); err != nil || !ok {
		t.Fatalf("cancel: %v, %v", ok, err)
	}
	qk := rdb.NewKeys(ns).Queue(rdb.QueueRef{Tag: "reuse", Name: "reuse"})
	conn := pool.Get()
	defer conn.Close()
	wait(t, 10*time.Second, "the cancelled run to expire", func() bool {
		k, err := redis.Int(conn.Do("EXISTS", qk.Task(opts.ID)))
		return err == nil && k == 0
	})
	restarted := false
	undo := worqr.OnRunsForget(func(gone []string) {
		if restarted {
			return
		}
		restarted = true
		// Started again between the read that found it gone and the drop.
		if _, err := c.StartRunWith(ctx, flow, nil, opts); err != nil {
			t.Errorf("start again: %v", err)
		}
	})
	if _, err := in.Runs(ctx, flow.Name, "", 0, 10); err != nil {
		t.Fatal(err)
	}
	undo()
	if !restarted {
		t.Fatal("Runs found no expired run to drop")
	}
	runs, err := in.Runs(ctx, flow.Name, worqr.RunRunning, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].ID != opts.ID {
		t.Fatalf("running runs listed: %d; want the run %s started again", len(runs), opts.ID)
	}
}

// Inspector.Runs reads the run list 200 at a time: a run started between
// two pages moved every entry down one rank, and the last run of the first
// page came again first in the second (listed twice).
func TestRunsListsARunOnceWhenOneStartsBetweenPages(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	cfg := &worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true}
	flow := &worqr.Flow{Name: "pages", Stages: []worqr.Stage{
		{Name: "s", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) { return nil, nil })},
	}}
	c, err := worqr.NewClient(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 210; i++ {
		if _, err := c.StartRun(ctx, flow, nil); err != nil {
			t.Fatal(err)
		}
	}
	started := false
	undo := worqr.OnRunsPage(func() {
		if !started {
			started = true
			if _, err := c.StartRun(ctx, flow, nil); err != nil {
				t.Error(err)
			}
		}
	})
	defer undo()
	runs, err := in.Runs(ctx, "pages", "", 0, 250)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range runs {
		if seen[r.ID] {
			t.Fatalf("run %s listed twice", r.ID)
		}
		seen[r.ID] = true
	}
	if len(runs) != 210 {
		t.Errorf("%d runs listed, want the 210 there were when the call began", len(runs))
	}
}
