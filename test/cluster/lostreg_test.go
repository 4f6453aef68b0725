package cluster_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/rdb/cluster"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// A worker registers while the replica of the {reg} master lags (frozen),
// takes a task of a queue served by another master, and then the {reg}
// master dies: the promoted replica never saw the registration. The
// worker's beat finds its key gone; it retires the session, puts back what
// the session held, and registers again under a new id. Before, the old
// id's takings (in the queue's master, which did not fail) were reached by
// no reaper pass (the old id is not in the registry any more) until the
// next sweep, 5 minutes later (found by an audit).
func TestRegistryFailoverLosesRegistration(t *testing.T) {
	rc, ctx, pool, ns, q, _, _ := failoverSetup(t, 120*time.Second, "reg-lost-")
	regMaster, err := rc.NodeOf(ctx, cluster.TagSlot("reg"))
	if err != nil {
		t.Fatal(err)
	}
	regReplica, err := rc.ReplicaOf(ctx, regMaster)
	if err != nil {
		t.Fatal(err)
	}
	client, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	id, err := client.Enqueue(ctx, q, []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	resume := lagReplica(ctx, t, regMaster, regReplica, "reg")
	var runs atomic.Int32
	started := make(chan string, 4)
	cfg := fastWorker(ns, map[string]worqr.QueueConfig{q: {Concurrency: 1,
		Handler: worqr.HandlerFunc(func(ctx context.Context, tk *worqr.Task) error {
			runs.Add(1)
			started <- tk.ID
			<-ctx.Done()
			return ctx.Err()
		})}})
	cfg.Config.DisableEvents = true
	cfg.HeartbeatInterval, cfg.HeartbeatTTL = 500*time.Millisecond, 10*time.Second
	w, err := worqr.NewWorker(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = w.Stop(sctx)
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the task never started")
	}
	oldID := w.ID()
	// The worker has run a while: its reaper made its first pass and its
	// first sweep (at its first lease), as in any process up for a second.
	_ = redistest.Pause(ctx, 1500*time.Millisecond)
	promoted, took, err := rc.KillMasterThen(ctx, regMaster, resume)
	if err != nil {
		t.Fatal(err)
	}
	promotedAt := time.Now()
	t.Logf("{reg} master killed with the registration of %s unreplicated; %s promoted after %v", oldID, promoted.Addr, took.Round(time.Millisecond))
	select {
	case <-started: // the second run
		t.Logf("the task ran again within %v of the promotion (runs: %d)", time.Since(promotedAt).Round(time.Millisecond), runs.Load())
		return
	case <-time.After(30 * time.Second):
	}
	in, _ := worqr.NewInspector(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	ws, werr := in.Workers(ctx)
	var ids []string
	for _, x := range ws {
		ids = append(ids, x.ID)
	}
	info, err := in.Task(ctx, q, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Fatalf("30 s after the {reg} failover the task is still %s under worker %s (the worker now runs as %s; registered workers %v, %v): never offered again until a Sweep", info.State, info.WorkerID, w.ID(), ids, werr)
}
