package worqr_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// A run cancelled while its stage task waits, and the waiting children of
// a run cancelled after its fan-out, are taken out of their queues by the
// cancel itself: no end of a taking reports them, so the cancel must, or
// the history (and every follower of the events: the dashboard, the
// Prometheus collector) never counts them. Before, CancelRun's only event
// carried no queue: the waiting run counted nothing, and of three children
// (one running, two waiting) only the running one counted.
func TestHistoryCountsWhatARunCancelTookOut(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Namespace()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	var running atomic.Int32
	kid := worqr.HandlerFunc(func(ctx context.Context, _ *worqr.Task) error {
		running.Add(1)
		<-ctx.Done() // until the run's cancel reaches it
		return ctx.Err()
	})
	fan := worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
		return &worqr.StageResult{Children: []worqr.ChildSpec{{Queue: "kids"}, {Queue: "kids"}, {Queue: "kids"}}}, nil
	})
	served := &worqr.Flow{Name: "served", Stages: []worqr.Stage{{Name: "fan", Queue: worqr.QueueConfig{Concurrency: 1},
		Children: map[string]worqr.QueueConfig{"kids": {Concurrency: 1, Handler: kid}}, Handler: fan}}}
	idle := &worqr.Flow{Name: "idle", Stages: []worqr.Stage{{Name: "first", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: fan}}}
	c := flowWorker(t, ctx, pool, ns, served)
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	cancelled := func(queue string) int64 {
		ms, err := in.History(ctx, queue, 2)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, m := range ms {
			n += m.Cancelled
		}
		return n
	}

	// A run no worker serves waits in its first stage.
	id, err := c.StartRun(ctx, idle, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := c.CancelRun(ctx, idle, id); err != nil || !ok {
		t.Fatalf("CancelRun: %v %v", ok, err)
	}
	c.Flush()
	if n := cancelled("idle/first"); n != 1 {
		t.Errorf("history of idle/first: %d cancelled, want 1 (the run taken out of the stage's queue)", n)
	}

	// A run fanned out to three children of concurrency 1: one runs, two
	// wait.
	id, err = c.StartRun(ctx, served, nil)
	if err != nil {
		t.Fatal(err)
	}
	wait(t, 10*time.Second, "a child to run", func() bool { return running.Load() == 1 })
	if ok, err := c.CancelRun(ctx, served, id); err != nil || !ok {
		t.Fatalf("CancelRun: %v %v", ok, err)
	}
	c.Flush()
	end := time.Now().Add(10 * time.Second)
	for cancelled("served/kids") < 3 && time.Now().Before(end) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := cancelled("served/kids"); n != 3 {
		t.Errorf("history of served/kids: %d cancelled, want 3 (one running, told; two waiting, taken out)", n)
	}
	if n := cancelled("served/fan"); n != 0 {
		t.Errorf("history of served/fan: %d cancelled, want 0 (the stage had fanned out: it ran and ended)", n)
	}
	if r := running.Load(); r != 1 {
		t.Errorf("%d children ran, want 1", r)
	}
}

// A child that ends dead fails its run (fail-fast, the default) and takes
// its waiting siblings out of their queue in the same end: those cancels
// are reported by that end (no end of their own will), and counted.
func TestHistoryCountsTheSiblingsAFailedChildTookOut(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Namespace()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	var ran atomic.Int32
	flow := fanOfThree("ff", worqr.QueueConfig{Concurrency: 1, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
		ran.Add(1)
		return worqr.SkipRetry(errors.New("no")) // dead at once: the run fails
	})})
	c := flowWorker(t, ctx, pool, ns, flow)
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.StartRun(ctx, flow, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFailed(t, ctx, c, flow, id)
	if d, k := deadAndCancelled(t, ctx, in, "ff/kids"); d != 1 || k != 2 || ran.Load() != 1 {
		t.Errorf("history of ff/kids: %d dead, %d cancelled, %d ran; want 1 dead (the child that failed), 2 cancelled (its waiting siblings), 1 ran", d, k, ran.Load())
	}
}

// A child that crashed MaxCrashes workers is buried by the take that
// reaches it, and fails its run (fail-fast) as a child that ends dead
// does: the take takes its waiting siblings out of their queue, and no
// end of a taking reports those cancels; the take's worker must. Before,
// the buried child counted dead and its two siblings nowhere.
func TestHistoryCountsTheSiblingsABuriedChildTookOut(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Namespace()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	var ran atomic.Int32
	flow := fanOfThree("pc", worqr.QueueConfig{Concurrency: 1, MaxCrashes: 2, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
		ran.Add(1)
		return nil
	})})
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	// The children wait, untaken, until the first is made a poison one.
	if err := in.Pause(ctx, "pc/kids"); err != nil {
		t.Fatal(err)
	}
	c := flowWorker(t, ctx, pool, ns, flow)
	id, err := c.StartRun(ctx, flow, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := pool.Get()
	defer conn.Close()
	waiting := ns + ":{pc}:q:kids"
	var kids []string
	wait(t, 10*time.Second, "the fan-out", func() bool {
		kids, err = redis.Strings(conn.Do("LRANGE", waiting, 0, -1))
		return err == nil && len(kids) == 3
	})
	// Its holders died twice (as the reaper counts them).
	if _, err := conn.Do("HSET", ns+":{pc}:t:"+kids[0], "c", 2); err != nil {
		t.Fatal(err)
	}
	if err := in.Resume(ctx, "pc/kids"); err != nil {
		t.Fatal(err)
	}
	waitFailed(t, ctx, c, flow, id)
	if d, k := deadAndCancelled(t, ctx, in, "pc/kids"); d != 1 || k != 2 || ran.Load() != 0 {
		t.Errorf("history of pc/kids: %d dead, %d cancelled, %d ran; want 1 dead (the buried child), 2 cancelled (its waiting siblings), 0 ran", d, k, ran.Load())
	}
}

// The same through a remote session, whose child fails its run in either
// way: its take of the child queue buries the poison child, or its end
// buries the child it ran (Bury: dead). The session reports the cancels
// of the siblings the run's stop took out.
func TestRemoteHistoryCountsTheSiblingsABuriedChildTookOut(t *testing.T) {
	for _, byEnd := range []bool{false, true} {
		name := map[bool]string{false: "by its take", true: "by its end"}[byEnd]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			fl := map[bool]string{false: "rpc", true: "rpe"}[byEnd]
			flow := &worqr.Flow{Name: fl, Stages: []worqr.Stage{
				{Name: "split", Children: map[string]worqr.QueueConfig{"part": {MaxCrashes: 2}}},
			}}
			cfg := worqr.RemoteConfig{Flows: []*worqr.Flow{flow}}
			cfg.EventInterval = 20 * time.Millisecond
			b := setupRemoteOn(t, ctx, srv.TagCheckedPool(t), cfg)
			cf := &worqr.Flow{Name: fl, Stages: []worqr.Stage{
				{Name: "split", Handler: worqr.StageHandlerFunc(nil), Queue: worqr.QueueConfig{Concurrency: 1},
					Children: map[string]worqr.QueueConfig{"part": {Handler: worqr.HandlerFunc(nil), Concurrency: 1}}},
			}}
			if _, err := b.client.StartRun(ctx, cf, nil); err != nil {
				t.Fatal(err)
			}
			s := open(t, b, fl+"/split", fl+"/part")
			k := takeOne(t, s, fl+"/split", 0)
			parts := []worqr.ChildSpec{{Queue: "part"}, {Queue: "part"}, {Queue: "part"}}
			if out, err := s.FanOut(ctx, k.PID, nil, parts); err != nil || out != worqr.EventFannedOut {
				t.Fatalf("fan-out = %q, %v", out, err)
			}
			if byEnd {
				c := takeOne(t, s, fl+"/part", 0)
				if out, err := s.Bury(ctx, c.PID, "no"); err != nil || out != worqr.EventDead {
					t.Fatalf("bury = %q, %v", out, err)
				}
			} else {
				pool := srv.Pool()
				t.Cleanup(func() { pool.Close() })
				conn := pool.Get()
				defer conn.Close()
				kids, err := redis.Strings(conn.Do("LRANGE", b.ns+":{"+fl+"}:q:part", 0, -1))
				if err != nil || len(kids) != 3 {
					t.Fatalf("children waiting: %v %v", kids, err)
				}
				if _, err := conn.Do("HSET", b.ns+":{"+fl+"}:t:"+kids[0], "c", 2); err != nil {
					t.Fatal(err)
				}
				if ks, err := s.Take(ctx, worqr.TakeRequest{Queue: fl + "/part", Max: 3}); err != nil || len(ks) != 0 {
					t.Fatalf("take: %+v %v; want the poison child buried, its siblings stopped", ks, err)
				}
			}
			if d, k := deadAndCancelled(t, ctx, b.insp, fl+"/part"); d != 1 || k != 2 {
				t.Errorf("history of %s/part: %d dead, %d cancelled; want 1 dead (the buried child), 2 cancelled (its waiting siblings)", fl, d, k)
			}
		})
	}
}

// fanOfThree is a flow of one stage that fans out three children to its
// child queue "kids", served as kids.
func fanOfThree(name string, kids worqr.QueueConfig) *worqr.Flow {
	fan := worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
		return &worqr.StageResult{Children: []worqr.ChildSpec{{Queue: "kids"}, {Queue: "kids"}, {Queue: "kids"}}}, nil
	})
	return &worqr.Flow{Name: name, Stages: []worqr.Stage{{Name: "fan", Queue: worqr.QueueConfig{Concurrency: 1},
		Children: map[string]worqr.QueueConfig{"kids": kids}, Handler: fan}}}
}

// waitFailed waits until run id of flow has failed.
func waitFailed(t *testing.T, ctx context.Context, c *worqr.Client, flow *worqr.Flow, id string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if r, err := c.WaitRun(wctx, flow, id); err != nil || r.Status != worqr.RunFailed {
		t.Fatalf("WaitRun: %+v %v; want failed", r, err)
	}
}

// deadAndCancelled adds up queue's history of the last two minutes, once
// its dead count is at least one.
func deadAndCancelled(t *testing.T, ctx context.Context, in *worqr.Inspector, queue string) (dead, cancelled int64) {
	t.Helper()
	count := func() (dead, cancelled int64) {
		ms, err := in.History(ctx, queue, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			dead, cancelled = dead+m.Dead, cancelled+m.Cancelled
		}
		return dead, cancelled
	}
	wait(t, 10*time.Second, "the history of "+queue, func() bool { d, _ := count(); return d >= 1 })
	return count() // (the worker's events of one end or take are published together)
}

// flowWorker starts a worker of flow on pool (fast timings, events
// published every 20 ms) and returns a client of namespace ns.
func flowWorker(t *testing.T, ctx context.Context, pool *redis.Pool, ns string, flow *worqr.Flow) *worqr.Client {
	t.Helper()
	wc := fastTimings(ns)
	wc.EventInterval = 20 * time.Millisecond
	wc.Flows = []*worqr.Flow{flow}
	startWorker(t, ctx, pool, &wc)
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
