package cluster_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/worqr"
)

// TestFailoverLostTake loses an acknowledged take for sure: a task
// reaches the replica of its queue's master (Replicas 1), the replica is
// frozen and its replication link filled, then a worker starts and takes
// the task on the master only; the master is SIGKILLed and the replica
// resumed and promoted. On the new master the task is not held: it is
// offered again while the first handler still runs it. The worker sees
// the master leave the map (ClusterPool.Switched), confirms its keepalive,
// finds in its release call that the new master does not hold the taking,
// and cancels the handler with ErrLostInFailover; the task then runs
// again. Without the check the first run goes on (the test fails).
func TestFailoverLostTake(t *testing.T) {
	rc, ctx, pool, ns, q, master, replica := failoverSetup(t, 60*time.Second, "lost-take-")

	type run struct {
		start, end time.Time
		cause      error
	}
	var mu sync.Mutex
	var runs []*run
	started := make(chan struct{}, 4)
	ended := make(chan struct{}, 1) // holds a value after a run ended
	cfg := fastWorker(ns, map[string]worqr.QueueConfig{q: {Concurrency: 2,
		Handler: worqr.HandlerFunc(func(ctx context.Context, _ *worqr.Task) error {
			r := &run{start: time.Now()}
			mu.Lock()
			runs = append(runs, r)
			first := len(runs) == 1
			mu.Unlock()
			started <- struct{}{}
			if first {
				select {
				case <-ctx.Done():
				case <-time.After(40 * time.Second):
				}
			}
			mu.Lock()
			r.end, r.cause = time.Now(), context.Cause(ctx)
			mu.Unlock()
			select {
			case ended <- struct{}{}:
			default:
			}
			return nil
		})}})
	// The session outlives the failover (while a master is down the whole
	// cluster answers CLUSTERDOWN, heartbeats included).
	cfg.HeartbeatInterval, cfg.HeartbeatTTL = 500*time.Millisecond, 15*time.Second
	var lost []worqr.Event
	cfg.OnEvent = func(e worqr.Event) {
		if e.Queue == q && e.Kind == worqr.EventLost {
			mu.Lock()
			lost = append(lost, e)
			mu.Unlock()
		}
	}
	client, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true, Replicas: 1, ReplicaTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns, DisableEvents: true, Replicas: 1, ReplicaTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	id, err := client.Enqueue(ctx, q, []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	// From now on the replica hears nothing: frozen, and its link filled
	// (the kernel's socket buffers take the first tens of MB; what the
	// master writes after stays in its own buffer and dies with it).
	if err := syscall.Kill(replica.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = syscall.Kill(replica.Pid(), syscall.SIGCONT)
		}
	}()
	mc, err := redis.Dial("tcp", master.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	if _, err := mc.Do("SET", "{"+q+"}:junk", strings.Repeat("j", 96<<20)); err != nil {
		t.Fatal(err)
	}
	// The worker starts now (its registration and keepalive live on
	// another master, whose replica is fine): its take reaches the
	// master only.
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
	switched := make(chan time.Time, 1)
	sw := pool.Switched()
	go func() {
		select {
		case <-sw:
			switched <- time.Now()
		case <-ctx.Done():
		}
	}()
	var killed time.Time
	promoted, took, err := rc.KillMasterThen(ctx, master, func() {
		killed = time.Now()
		resumed = true
		_ = syscall.Kill(replica.Pid(), syscall.SIGCONT)
	})
	if err != nil {
		t.Fatal(err)
	}
	var switchAt time.Time
	select {
	case switchAt = <-switched:
	case <-time.After(20 * time.Second):
		t.Fatal("the pool saw no switch")
	}
	timeout := time.After(15 * time.Second)
	var first run
	for {
		mu.Lock()
		first = *runs[0]
		mu.Unlock()
		if !first.end.IsZero() {
			break
		}
		select {
		case <-ended:
		case <-timeout:
			info, err := in.Task(ctx, q, id)
			held, herr := redis.StringMap(promoted.Pool().Get().Do("HGETALL", rdb.NewKeys(ns).Queue(rdb.Standalone(q)).WorkerQueue(w.ID())))
			t.Fatalf("the first run (its take lost with the master) still runs 15 s after the switch; task %+v (%v); the new master holds %v (%v)",
				info, err, held, herr)
		}
	}
	if !errors.Is(first.cause, worqr.ErrLostInFailover) {
		t.Fatalf("the first run ended with cause %v, want ErrLostInFailover", first.cause)
	}
	select {
	case <-started:
	case <-time.After(15 * time.Second):
		info, err := in.Task(ctx, q, id)
		t.Fatalf("the task never ran again: %+v, %v", info, err)
	}
	mu.Lock()
	second := *runs[1]
	n := len(runs)
	nlost := len(lost)
	mu.Unlock()
	if n != 2 || nlost != 1 {
		t.Errorf("%d runs and %d EventLost, want 2 and 1", n, nlost)
	}
	overlap := time.Duration(0)
	if first.end.After(second.start) {
		overlap = first.end.Sub(second.start)
	}
	promotedAt := killed.Add(took)
	t.Logf("master %s killed; replica %s promoted (seen) after %v; pool switched %v after the promotion was seen; "+
		"first run cancelled %v after the switch; the two runs overlapped %v",
		master.Addr, promoted.Addr, took.Round(time.Millisecond), switchAt.Sub(promotedAt).Round(time.Millisecond),
		first.end.Sub(switchAt), overlap)
}
