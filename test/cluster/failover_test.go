package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb/cluster"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// TestFailoverLostEnd loses an acknowledged finish for sure: the replica of
// the queue's master is frozen (SIGSTOP) while a worker's end is applied
// on the master, then the master is SIGKILLed and the replica resumed and
// promoted without that end. The task is still held, in the new master, by
// a worker that is alive and no longer runs it: nobody would ever recover
// it. The ClusterPool counts the master that left the map (Switches), the
// worker releases what it holds and does not run, and the task runs again
// and ends for good. Meanwhile a read of the queue, sent just after the
// kill, waits for the promotion rather than failing to dial.
func TestFailoverLostEnd(t *testing.T) {
	rc, ctx, pool, ns, q, master, replica := failoverSetup(t, 40*time.Second, "lost-end-")

	var mu sync.Mutex
	runs := 0
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	ends := make(chan worqr.EventKind, 16)
	cfg := fastWorker(ns, map[string]worqr.QueueConfig{q: {Concurrency: 1,
		Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
			mu.Lock()
			runs++
			first := runs == 1
			mu.Unlock()
			started <- struct{}{}
			if first {
				<-release
			}
			return nil
		})}})
	// The session outlives the failover (while a master is down the whole
	// cluster answers CLUSTERDOWN, heartbeats included): a lost session
	// would have its takings requeued by the reaper, which is not what
	// this test is about.
	cfg.HeartbeatInterval, cfg.HeartbeatTTL = 500*time.Millisecond, 10*time.Second
	cfg.OnEvent = func(e worqr.Event) {
		if e.Queue == q && (e.Kind == worqr.EventDone || e.Kind == worqr.EventLost) {
			ends <- e.Kind
		}
	}
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
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the task never started")
	}
	// The take reached the replica; from now on it hears nothing.
	resume := lagReplica(ctx, t, master, replica, q)
	close(release)
	select {
	case k := <-ends:
		if k != worqr.EventDone {
			t.Fatalf("first end: %v", k)
		}
	case <-ctx.Done():
		t.Fatal("the first end was never acknowledged")
	}
	// A pool of its own, seeded away from the doomed master, with no
	// connection to it yet: its first call there dials.
	var others []string
	for _, a := range rc.Addrs() {
		if a != master.Addr {
			others = append(others, a)
		}
	}
	fresh, err := redisconn.NewCluster(others, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	freshIn, err := worqr.NewInspector(fresh, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	switchesBefore := pool.Switches()
	lenDone := make(chan error, 1)
	promoted, took, err := rc.KillMasterThen(ctx, master, func() {
		resume()
		// A call to the dead master's slot waits for the promotion
		// (within its deadline) instead of failing to dial.
		go func() {
			lctx, c := context.WithTimeout(ctx, 15*time.Second)
			defer c()
			_, err := freshIn.Queue(lctx, q)
			lenDone <- err
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-lenDone; err != nil {
		t.Errorf("a read of the queue of the dead master during the failover: %v", err)
	}
	t.Logf("master %s killed with the end unreplicated; replica %s promoted after %v", master.Addr, promoted.Addr, took.Round(time.Millisecond))
	// The end was lost: on the new master the task is held again, and the
	// worker, seeing the switch, puts it back: it runs again. (The state
	// is not read here: the worker may have run it again already.)
	select {
	case <-started:
	case <-time.After(15 * time.Second):
		info, err := in.Task(ctx, q, id)
		if errors.Is(err, worqr.ErrTaskNotFound) {
			t.Fatal("the end reached the replica after all (the task is done and gone): nothing was lost")
		}
		t.Fatalf("the task whose end was lost never ran again (switches %d -> %d): %+v, %v", switchesBefore, pool.Switches(), info, err)
	}
	select {
	case k := <-ends:
		if k != worqr.EventDone {
			t.Fatalf("second end: %v", k)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second run never ended")
	}
	// Done, and not kept (the queue has no retention): gone.
	if info, err := in.Task(ctx, q, id); !errors.Is(err, worqr.ErrTaskNotFound) {
		t.Errorf("after the second run: %+v, %v; want the task gone", info, err)
	}
	if pool.Switches() == switchesBefore {
		t.Error("the pool counted no switch")
	}
}

// lagReplica makes replica (of master) miss what master writes next: once
// the replica has everything master wrote, it is frozen (SIGSTOP) and the
// replication link filled with a junk key of hash tag tag (the kernel's
// socket buffers take up to tcp_rmem + tcp_wmem, 36 MB at most on the test
// machine; what the master writes after that stays in its own output
// buffer to the replica, and dies with it). resume lets the replica go on;
// it runs when the test ends too, and twice is once.
func lagReplica(ctx context.Context, t *testing.T, master, replica *redistest.Server, tag string) (resume func()) {
	t.Helper()
	mc, err := redis.Dial("tcp", master.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	// (Not WAIT on mc: it counts the replicas that have mc's own last
	// write, and mc wrote nothing, so it returned at once and the replica
	// was sometimes still empty: its promotion then lost everything.)
	if err := replicaCaughtUp(ctx, mc, replica.Addr); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(replica.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	resume = func() { once.Do(func() { _ = syscall.Kill(replica.Pid(), syscall.SIGCONT) }) }
	t.Cleanup(resume)
	if _, err := mc.Do("SET", "{"+tag+"}:junk", strings.Repeat("j", 96<<20)); err != nil {
		t.Fatal(err)
	}
	return resume
}

// replicaCaughtUp waits until the replica at addr has applied everything the
// master behind mc had written when it was called (its slave_repl_offset
// reaches the master's master_repl_offset).
func replicaCaughtUp(ctx context.Context, mc redis.Conn, addr string) error {
	offset := func(c redis.Conn, field string) (int64, error) {
		info, err := redis.String(c.Do("INFO", "replication"))
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, field+":"); ok {
				return strconv.ParseInt(v, 10, 64)
			}
		}
		return 0, fmt.Errorf("no %s in INFO replication", field)
	}
	want, err := offset(mc, "master_repl_offset")
	if err != nil {
		return err
	}
	rc, err := redis.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer rc.Close()
	for {
		got, err := offset(rc, "slave_repl_offset")
		if err != nil {
			return err
		}
		if got >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replica %s at offset %d, master at %d: %w", addr, got, want, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// failoverSetup starts a cluster of 3 masters with a replica each (stopped
// when the test ends) and a ClusterPool on it, and picks a queue named
// prefix... whose master does not serve the registry (the keepalive stays on
// a live master when the queue's master is killed), with that master and its
// replica. ctx ends after timeout.
func failoverSetup(t *testing.T, timeout time.Duration, prefix string) (rc *redistest.ReplicaCluster, ctx context.Context,
	pool clusterConns, ns, q string, master, replica *redistest.Server) {
	t.Helper()
	if testing.Short() {
		t.Skip("short mode")
	}
	rc, err := redistest.StartClusterWithReplicas(3)
	if err != nil {
		if err == redistest.ErrNoRedisCLI {
			t.Skip(redistest.ClusterHint)
		}
		t.Fatalf("starting the cluster with replicas: %v", err)
	}
	t.Cleanup(rc.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	pool = clusterPool(t, rc.Addrs())
	reg, err := rc.NodeOf(ctx, cluster.TagSlot("reg"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; q == "" && i < 1000; i++ {
		name := prefix + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		n, err := rc.NodeOf(ctx, cluster.TagSlot(name))
		if err != nil {
			t.Fatal(err)
		}
		if n != reg {
			q, master = name, n
		}
	}
	if replica, err = rc.ReplicaOf(ctx, master); err != nil {
		t.Fatal(err)
	}
	return rc, ctx, pool, redistest.Namespace(), q, master, replica
}
