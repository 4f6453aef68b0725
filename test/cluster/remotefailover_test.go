package cluster_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/remote"
	"github.com/worqr/worqr-go/worqr"
)

// A remote session (the gateway's worker) finishes a taking; the master
// acknowledges the end, which never reaches its replica, and the replica is
// promoted. On the new master the task is still held by the session, alive
// and beating, which no longer runs it. After a switch the session releases
// what it holds and does not run before its next take, as a Go worker
// does: before, the task stayed held for as long as the session lived
// (found by an audit).
func TestRemoteFailoverLostEnd(t *testing.T) {
	rc, ctx, pool, ns, q, master, replica := failoverSetup(t, 90*time.Second, "remote-lost-end-")
	r, err := remote.NewServer(pool, &remote.Config{Config: worqr.Config{Namespace: ns},
		Queues: map[string]worqr.QueueConfig{q: {}}, SessionTTL: 20 * time.Second,
		ReaperInterval: 200 * time.Millisecond, PollInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = r.Stop(sctx)
	}()
	s, err := r.Open(ctx, remote.OpenOpts{Name: "remote", Queues: []string{q}})
	if err != nil {
		t.Fatal(err)
	}
	// The remote beats every second, as a remote worker does (running: what
	// it runs; a taking left out of a beat is given back as one the remote
	// never got, so the one taken below is listed until it is finished).
	var (
		runMu   sync.Mutex
		running = []string{}
	)
	beatCtx, stopBeat := context.WithCancel(ctx)
	defer stopBeat()
	go func() {
		for beatCtx.Err() == nil {
			runMu.Lock()
			now := append([]string{}, running...)
			runMu.Unlock()
			_, _ = s.Beat(beatCtx, now)
			_ = redistest.Pause(beatCtx, time.Second)
		}
	}()
	client, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	id, err := client.Enqueue(ctx, q, []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	runMu.Lock() // (no beat between the take and its listing)
	tk, err := s.Take(ctx, remote.TakeRequest{Queue: q, Max: 1, Wait: 5 * time.Second})
	if err != nil || len(tk) != 1 {
		runMu.Unlock()
		t.Fatalf("take: %v, %v", tk, err)
	}
	running = []string{tk[0].PID}
	runMu.Unlock()
	resume := lagReplica(ctx, t, master, replica, q)
	if k, err := s.Finish(ctx, tk[0].PID, nil); err != nil || k != worqr.EventDone {
		t.Fatalf("finish: %v, %v", k, err)
	}
	runMu.Lock()
	running = []string{}
	runMu.Unlock()
	promoted, took, err := rc.KillMasterThen(ctx, master, resume)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("master killed with the finish unreplicated; %s promoted after %v", promoted.Addr, took.Round(time.Millisecond))
	// The remote keeps working: it takes from q as a remote worker would.
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		tctx, c := context.WithTimeout(ctx, 3*time.Second)
		again, err := s.Take(tctx, remote.TakeRequest{Queue: q, Max: 1, Wait: time.Second})
		c()
		if err == nil && len(again) == 1 {
			t.Logf("the task came back after the failover (pid %s): fine", again[0].PID)
			return
		}
		info, ierr := in.Task(ctx, q, id)
		if ierr != nil && strings.Contains(ierr.Error(), "not found") {
			t.Skip("the end reached the replica after all: nothing was lost, the test proves nothing")
		}
		_ = info
		if err != nil {
			t.Logf("take: %v", err)
		}
	}
	_, berr := s.Beat(ctx, []string{})
	info, err := in.Task(ctx, q, id)
	t.Fatalf("20 s after the failover, with the session alive (its beat now: err=%v), the task whose finish was lost is still held by it and never offered again: state %s worker %s pid %s, %v (session %s)", berr, info.State, info.WorkerID, info.PID, err, s.ID())
}
