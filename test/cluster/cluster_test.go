// Package cluster_test runs worqr on a real local Redis Cluster (3 masters,
// started by internal/redistest): every script, recovery of a dead worker,
// and slot moves while work flows. It skips when redis-cli is missing.
package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/rdb/cluster"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/recovery"
	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/registry"
	"github.com/worqr/worqr-go/worqr"
)

var (
	cl    *redistest.Cluster
	clErr error
)

func TestMain(m *testing.M) {
	cl, clErr = redistest.StartCluster(3)
	code := m.Run()
	if cl != nil {
		cl.Stop()
	}
	os.Exit(code)
}

// needCluster returns a pool on the cluster: a redisconn.Cluster, or the
// one redistest.Serve.Cluster makes (another client under test).
func needCluster(t *testing.T) worqr.ConnGetter {
	t.Helper()
	if errors.Is(clErr, redistest.ErrNoRedisCLI) {
		t.Skip(redistest.ClusterHint)
	}
	if clErr != nil {
		t.Fatalf("starting the cluster: %v", clErr)
	}
	return clusterPool(t, cl.Addrs()[:1])
}

// clusterConns is what the tests use of a pool on a cluster.
type clusterConns interface {
	rdb.ShardedPubSub
	rdb.SwitchNotifier
}

// clusterPool returns a pool on the cluster of seeds: a redisconn.Cluster
// (closed at cleanup), or the one redistest.Serve.Cluster makes (another
// client under test).
func clusterPool(t *testing.T, seeds []string) clusterConns {
	t.Helper()
	if redistest.Serve.Cluster != nil {
		p, ok := redistest.Serve.Cluster(t, seeds).(clusterConns)
		if !ok {
			t.Fatalf("the cluster pool under test (%T) lacks MasterOf, DialMaster, Refresh or Switched", p)
		}
		return p
	}
	p, err := redisconn.NewCluster(seeds, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// ownerOf returns the address of the master serving hash tag tag.
func ownerOf(t *testing.T, tag string) string {
	t.Helper()
	n, err := cl.NodeOf(context.Background(), cluster.TagSlot(tag))
	if err != nil {
		t.Fatal(err)
	}
	return n.Addr
}

// rawCluster opens a cluster connection to cl (maxIdle idle connections a
// node, retryFor of TRYAGAIN retries, 0 for the default); the caller
// closes it.
func rawCluster(ctx context.Context, t *testing.T, maxIdle int, retryFor time.Duration) *cluster.Pool {
	t.Helper()
	cp, err := cluster.New(ctx, cluster.Options{Seeds: cl.Addrs(), NewPool: func(addr string) *redis.Pool {
		return &redis.Pool{MaxIdle: maxIdle, DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", addr)
		}}
	}, RetryFor: retryFor})
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// otherNode returns a master of cl other than the one at address from.
func otherNode(from string) *redistest.Server {
	for _, n := range cl.Nodes {
		if n.Addr != from {
			return n
		}
	}
	return nil
}

// spread returns one name per master, prefix + n, each served by a
// different master.
func spread(t *testing.T, prefix string) []string {
	t.Helper()
	seen := map[string]bool{}
	var out []string
	for i := 0; len(out) < len(cl.Nodes) && i < 1000; i++ {
		name := prefix + strconv.Itoa(i)
		if a := ownerOf(t, name); !seen[a] {
			seen[a] = true
			out = append(out, name)
		}
	}
	if len(out) != len(cl.Nodes) {
		t.Fatalf("found names on %d masters only", len(out))
	}
	return out
}

// tally counts handled payloads per queue.
type tally struct {
	mu       sync.Mutex
	seen     map[string]int // "queue/payload" -> runs
	doomedOK bool
}

func (ta *tally) add(queue string, payload []byte) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	if ta.seen == nil {
		ta.seen = map[string]int{}
	}
	ta.seen[queue+"/"+string(payload)]++
}

func (ta *tally) count(prefix string) (distinct, runs int) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	for k, n := range ta.seen {
		if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
			distinct++
			runs += n
		}
	}
	return distinct, runs
}

// poll polls cond (redistest.Poll) until it holds or d passes, and
// reports whether it held.
func poll(d time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return redistest.Poll(ctx, cond) == nil
}

func fastWorker(ns string, queues map[string]worqr.QueueConfig, flows ...*worqr.Flow) *worqr.WorkerConfig {
	return &worqr.WorkerConfig{Config: worqr.Config{Namespace: ns}, Queues: queues, Flows: flows,
		HeartbeatInterval: 200 * time.Millisecond, HeartbeatTTL: 800 * time.Millisecond,
		ReaperInterval: 200 * time.Millisecond, PollInterval: 200 * time.Millisecond}
}

// TestEveryScriptOnCluster drives every script of the protocol on the
// cluster: enqueue (plain, batch, unique, delayed: move), take and end (done,
// retry, dead, give back on stop), a flow with a fan-out (flow_start, the
// stage and child ends), dead-set requeue (dead), cancel, bulk, run_cancel,
// register, and the recovery of a dead worker's takings (requeue) and of a
// live worker's unknown takings (release); then the Inspector lists every
// queue.
func TestEveryScriptOnCluster(t *testing.T) {
	pool := needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	ns := redistest.Namespace()
	queues := spread(t, "jobs-")
	flowName := spread(t, "flow-")[1]
	idle := spread(t, "idle-")
	client, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	st := rdb.NewStore(pool, ns)

	// A hand-driven worker (short TTL) takes tasks of "held" and dies
	// holding them; a live one loses a take reply (release).
	held := idle[0]
	for i := 0; i < 5; i++ {
		if _, err := client.Enqueue(ctx, held, []byte("h"+strconv.Itoa(i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	zombie := "zombie-" + ns
	at, err := st.Register(ctx, zombie, 300, "test", os.Getpid(), []rdb.QueueRef{rdb.Standalone(held)})
	if err != nil {
		t.Fatal(err)
	}
	hk := st.Queue(rdb.Standalone(held))
	got, err := st.Take(ctx, hk, rdb.TakeArgs{Worker: zombie, Until: at + 270, Max: 3})
	if err != nil || len(got) != 3 {
		t.Fatalf("zombie take: %d, %v", len(got), err)
	}
	live := "live-" + ns
	at, err = st.Register(ctx, live, 60_000, "test", os.Getpid(), []rdb.QueueRef{rdb.Standalone(held)})
	if err != nil {
		t.Fatal(err)
	}
	lost, err := st.Take(ctx, hk, rdb.TakeArgs{Worker: live, Until: at + 50_000, Max: 1})
	if err != nil || len(lost) != 1 {
		t.Fatalf("live take: %d, %v", len(lost), err)
	}
	if n, _, err := st.Release(ctx, hk, live, nil); err != nil || n != 1 {
		t.Fatalf("release: %d, %v", n, err)
	}
	if err := st.Deregister(ctx, live); err != nil {
		t.Fatal(err)
	}

	var ta tally
	handler := func(queue string) worqr.Handler {
		return worqr.HandlerFunc(func(_ context.Context, task *worqr.Task) error {
			if string(task.Payload) == "fail-once" && task.Attempt == 1 {
				return errors.New("first attempt fails")
			}
			if string(task.Payload) == "doomed" && ta.doomedMayPass() == false {
				return errors.New("doomed")
			}
			ta.add(queue, task.Payload)
			return nil
		})
	}
	qc := map[string]worqr.QueueConfig{}
	for _, q := range queues {
		qc[q] = worqr.QueueConfig{Concurrency: 4, Handler: handler(q), MaxAttempts: 2,
			Backoff: func(int, error) time.Duration { return 50 * time.Millisecond }}
	}
	qc[held] = worqr.QueueConfig{Concurrency: 2, Handler: handler(held)}
	flow := &worqr.Flow{Name: flowName, Stages: []worqr.Stage{
		{Name: "split", Queue: worqr.QueueConfig{Concurrency: 2},
			Handler: worqr.StageHandlerFunc(func(_ context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				var kids []worqr.ChildSpec
				for i := 0; i < 3; i++ {
					kids = append(kids, worqr.ChildSpec{Queue: "part", Payload: []byte(r.ID + "-" + strconv.Itoa(i))})
				}
				return &worqr.StageResult{Fields: map[string]string{"split": "yes"}, Children: kids}, nil
			}),
			Children: map[string]worqr.QueueConfig{"part": {Concurrency: 3, Handler: handler("part")}}},
		{Name: "join", Queue: worqr.QueueConfig{Concurrency: 2},
			Handler: worqr.StageHandlerFunc(func(_ context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				return &worqr.StageResult{Fields: map[string]string{"kids": strconv.Itoa(len(r.Children))}}, nil
			})},
	}}

	// Work enqueued before the worker starts, on every master.
	for _, q := range queues {
		payloads := make([][]byte, 40)
		for i := range payloads {
			payloads[i] = []byte("b" + strconv.Itoa(i))
		}
		if _, err := client.EnqueueBatch(ctx, q, payloads, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := client.Enqueue(ctx, q, []byte("fail-once"), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := client.Enqueue(ctx, q, []byte("later"), &worqr.EnqueueOpts{Delay: 200 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		if _, err := client.Enqueue(ctx, q, []byte("unique"), &worqr.EnqueueOpts{UniqueKey: "u1", UniqueTTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if _, err := client.Enqueue(ctx, q, []byte("unique-again"), &worqr.EnqueueOpts{UniqueKey: "u1", UniqueTTL: time.Minute}); !errors.Is(err, worqr.ErrDuplicate) {
			t.Fatalf("second unique enqueue: %v", err)
		}
	}
	doomed, err := client.Enqueue(ctx, queues[0], []byte("doomed"), &worqr.EnqueueOpts{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	var runs []string
	for i := 0; i < 4; i++ {
		id, err := client.StartRun(ctx, flow, map[string]string{"n": strconv.Itoa(i)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, id)
	}

	w, err := worqr.NewWorker(pool, fastWorker(ns, qc, flow))
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

	for _, q := range queues {
		if !poll(20*time.Second, func() bool {
			d, _ := ta.count(q + "/")
			return d == 43 // 40 + fail-once + later + unique
		}) {
			ta.mu.Lock()
			var missing []string
			for _, p := range []string{"fail-once", "later", "unique"} {
				if ta.seen[q+"/"+p] == 0 {
					missing = append(missing, p)
				}
			}
			ta.mu.Unlock()
			qi, err := in.Queue(ctx, q)
			d, n := ta.count(q + "/")
			t.Fatalf("queue %s not drained: %d distinct ran (%d runs), want 43; missing %v; counts %+v (%v)", q, d, n, missing, qi, err)
		}
	}
	for _, q := range queues {
		if d, n := ta.count(q + "/"); n != d {
			t.Errorf("queue %s: %d tasks ran %d times", q, d, n)
		}
	}
	// The dead task: requeued from the dead set, it runs.
	redistest.WaitFor(t, 10*time.Second, "the doomed task dead", func() bool {
		info, err := in.Task(ctx, queues[0], doomed)
		return err == nil && info.State == worqr.StateDead
	})
	ta.passDoomed()
	if n, err := in.RequeueDead(ctx, queues[0], doomed); err != nil || n != 1 {
		t.Fatalf("requeue dead: %d, %v", n, err)
	}
	redistest.WaitFor(t, 10*time.Second, "the requeued dead task ran", func() bool {
		_, n := ta.count(queues[0] + "/doomed")
		return n == 1
	})
	// The flow: every run fanned out 3 children and joined.
	for _, id := range runs {
		redistest.WaitFor(t, 20*time.Second, "run "+id+" done", func() bool {
			ri, err := in.Run(ctx, flow.Name, id)
			return err == nil && ri.Status == worqr.RunDone
		})
		ri, _ := in.Run(ctx, flow.Name, id)
		if ri.State["kids"] != "3" || ri.State["split"] != "yes" {
			t.Errorf("run %s state %v", id, ri.State)
		}
	}
	if d, n := ta.count("part/"); d != 12 || n != 12 {
		t.Errorf("children: %d distinct, %d runs, want 12", d, n)
	}
	// The dead hand-driven worker's 3 takings, recovered by the worker's
	// reaper, and the released one: all 5 of "held" ran once.
	redistest.WaitFor(t, 20*time.Second, "the dead worker's takings recovered", func() bool {
		d, _ := ta.count(held + "/")
		return d == 5
	})
	if d, n := ta.count(held + "/"); d != 5 || n != 5 {
		t.Errorf("held: %d distinct, %d runs", d, n)
	}
	info, err := in.Task(ctx, held, got[0].ID)
	if err == nil && info.Crashes != 1 {
		t.Errorf("a recovered task counts %d crashes, want 1", info.Crashes)
	}

	// Cancel, bulk delete and a run's cancel on queues nobody serves.
	c1, err := client.Enqueue(ctx, idle[1], []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := client.Cancel(ctx, idle[1], c1); err != nil || s != worqr.CancelRemoved {
		t.Fatalf("cancel: %v, %v", s, err)
	}
	for i := 0; i < 5; i++ {
		if _, err := client.Enqueue(ctx, idle[2], []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := in.DeleteAllWaiting(ctx, idle[2], nil); err != nil || n != 5 {
		t.Fatalf("delete all waiting: %d, %v", n, err)
	}
	idleFlow := &worqr.Flow{Name: idle[1] + "-flow", Stages: []worqr.Stage{{Name: "s", Queue: worqr.QueueConfig{Concurrency: 1},
		Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return nil, nil })}}}
	rid, err := client.StartRun(ctx, idleFlow, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := client.CancelRun(ctx, idleFlow, rid); err != nil || !ok {
		t.Fatalf("cancel run: %v, %v", ok, err)
	}

	qs, err := in.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, q := range qs {
		names = append(names, q.Name)
	}
	sort.Strings(names)
	want := append(append([]string{}, queues...), held, idle[1], idle[2], flowName+"/split", flowName+"/join", flowName+"/part")
	for _, q := range want {
		if i := sort.SearchStrings(names, q); i == len(names) || names[i] != q {
			t.Errorf("Inspector.Queues misses %s: %v", q, names)
		}
	}
	if n, err := in.DeleteNamespace(ctx); err != nil || n == 0 {
		t.Errorf("DeleteNamespace on the cluster: %d, %v", n, err)
	}
}

// doomedMayPass says whether the task "doomed" may succeed now.
func (ta *tally) doomedMayPass() bool {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	return ta.doomedOK
}

func (ta *tally) passDoomed() {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	ta.doomedOK = true
}

// TestSlotMovesWhileWorking moves the slot of a busy queue's tag and the
// registry's slot to other masters while tasks are enqueued and run: every
// task runs exactly once and the worker keeps its registration.
func TestSlotMovesWhileWorking(t *testing.T) {
	needCluster(t)
	cp := rawCluster(context.Background(), t, 32, 0)
	defer cp.Close()
	var pool worqr.ConnGetter = cp
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	ns := redistest.Namespace()
	q := spread(t, "busy-")[0]
	client, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	var ta tally
	w, err := worqr.NewWorker(pool, fastWorker(ns, map[string]worqr.QueueConfig{q: {Concurrency: 8,
		Handler: worqr.HandlerFunc(func(_ context.Context, task *worqr.Task) error {
			ta.add(q, task.Payload)
			return nil
		})}}))
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
	const total = 600
	enqDone := make(chan error, 1)
	progress := make(chan int, total)
	go func() {
		for i := 0; i < total; i++ {
			if _, err := client.Enqueue(ctx, q, []byte("t"+strconv.Itoa(i)), nil); err != nil {
				enqDone <- fmt.Errorf("enqueue %d: %w", i, err)
				return
			}
			progress <- i
			if i%50 == 0 {
				_ = redistest.Pause(ctx, 20*time.Millisecond) // spread the enqueues over the moves
			}
		}
		enqDone <- nil
	}()
	for step, tag := range []string{q, rdb.RegistryTag} {
		for i := range progress { // work is flowing
			if i >= 150*(step+1) {
				break
			}
		}
		slot := cluster.TagSlot(tag)
		from := ownerOf(t, tag)
		to := otherNode(from)
		if err := cl.MoveSlot(ctx, slot, to, 1000, nil); err != nil {
			t.Fatalf("moving slot %d of %s: %v", slot, tag, err)
		}
		if got := ownerOf(t, tag); got != to.Addr {
			t.Fatalf("slot of %s on %s after the move, want %s", tag, got, to.Addr)
		}
	}
	if err := <-enqDone; err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 20*time.Second, "every task ran", func() bool {
		d, _ := ta.count(q + "/")
		return d == total
	})
	if d, n := ta.count(q + "/"); d != total || n != total {
		t.Errorf("%d distinct tasks ran %d times, want %d once each", d, n, total)
	}
	moved, ask, tryagain, _ := cp.Redirections()
	t.Logf("redirections followed: %d MOVED, %d ASK, %d TRYAGAIN", moved, ask, tryagain)
	if moved == 0 {
		t.Error("no MOVED was followed: the moves did not meet the work")
	}
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := in.Workers(ctx)
	if err != nil || len(ws) != 1 || ws[0].ID != w.ID() {
		t.Errorf("workers after the moves: %v, %v (want %s alive)", ws, err, w.ID())
	}
}

// TestTakeDuringMigration takes from a queue whose slot is half moved: some
// task hashes are on the importing node while the waiting list is not. The
// take cannot declare those hashes (it pops their ids), so it reads them
// before writing anything, puts the ids back and answers TRYAGAIN, which the
// cluster connection retries until the migration ends: nothing is lost and
// the order is kept.
func TestTakeDuringMigration(t *testing.T) {
	needCluster(t)
	cp := rawCluster(context.Background(), t, 8, 10*time.Second)
	defer cp.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ns := redistest.Namespace()
	st := rdb.NewStore(cp, ns)
	q := spread(t, "mig-")[0]
	qk := st.Queue(rdb.Standalone(q))
	at, err := st.Register(ctx, "W", 60_000, "test", 1, []rdb.QueueRef{qk.Ref})
	if err != nil {
		t.Fatal(err)
	}
	// Every key the take declares exists on the source (else the cluster
	// answers TRYAGAIN before the script runs): settings, a dead task, a
	// taking W holds (its hash, the holder index, the counter).
	if err := st.WriteSettings(ctx, qk, rdb.QueueSettings{DeadMaxCount: 100, DeadMaxAgeMs: 3_600_000}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Enqueue(ctx, qk, []string{"x", "h"}, [][]byte{[]byte("x"), []byte("h")}, nil); err != nil {
		t.Fatal(err)
	}
	pre, err := st.Take(ctx, qk, rdb.TakeArgs{Worker: "W", Until: at + 50_000, Max: 2})
	if err != nil || len(pre) != 2 {
		t.Fatalf("take: %v, %v", pre, err)
	}
	if _, err := st.End(ctx, qk, 0, []rdb.Ending{rdb.Dead(rdb.KindTask, "W", pre[0].PID, "x", "dead")}); err != nil {
		t.Fatal(err)
	}
	ids := []string{"a", "b", "c", "d", "e"}
	payloads := make([][]byte, len(ids))
	for i := range ids {
		payloads[i] = []byte(ids[i])
	}
	if _, err := st.Enqueue(ctx, qk, ids, payloads, nil); err != nil {
		t.Fatal(err)
	}
	slot := cluster.TagSlot(q)
	from := ownerOf(t, q)
	to := otherNode(from)
	type result struct {
		got []rdb.Taken
		err error
	}
	done := make(chan result, 1)
	err = cl.MoveSlot(ctx, slot, to, 1000, func() {
		src, err := redis.Dial("tcp", from)
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		host, port, _ := cutPort(to.Addr)
		// Two task hashes move first; the waiting list stays behind.
		if _, err := src.Do("MIGRATE", host, port, "", 0, 5000, "KEYS", qk.Task("a"), qk.Task("c")); err != nil {
			t.Fatal(err)
		}
		_, _, before, _ := cp.Redirections()
		go func() {
			got, err := st.Take(ctx, qk, rdb.TakeArgs{Worker: "W", Until: at + 50_000, Max: 5})
			done <- result{got, err}
		}()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, _, n, _ := cp.Redirections(); n > before {
				return
			}
			select {
			case r := <-done:
				t.Fatalf("the take ended during the migration: %d taken, %v", len(r.got), r.err)
			case <-time.After(5 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatal("the take never met TRYAGAIN")
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("take across the migration: %v", r.err)
	}
	var got []string
	for _, tk := range r.got {
		if tk.PID == "" {
			t.Errorf("task %s buried: %s", tk.ID, tk.Reason)
		}
		got = append(got, tk.ID+"="+string(tk.Payload))
	}
	if fmt.Sprint(got) != "[a=a b=b c=c d=d e=e]" {
		t.Errorf("taken %v, want every task in order", got)
	}
}

func cutPort(addr string) (string, string, bool) {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[:i], addr[i+1:], true
		}
	}
	return addr, "", false
}

// TestListenAcrossNodes listens (as a worker does: one sharded connection
// per master) to the wake channels of queues served by every master: a
// wake-up published by an enqueue on any master reaches it.
func TestListenAcrossNodes(t *testing.T) {
	pool := needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ns := redistest.Namespace()
	st := rdb.NewStore(pool, ns)
	queues := spread(t, "wake-")
	var channels []string
	for _, q := range queues {
		channels = append(channels, st.Queue(rdb.Standalone(q)).WakeChannel)
	}
	ready := make(chan struct{})
	got := make(chan string, 16)
	lctx, stop := context.WithCancel(ctx)
	listened := make(chan error, 1)
	go func() {
		listened <- st.Listen(lctx, channels, func() { close(ready) }, func(ch string, _ []byte) { got <- ch })
	}()
	select {
	case <-ready:
	case <-ctx.Done():
		t.Fatal("the subscription was never confirmed")
	}
	client, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, q := range queues {
		if _, err := client.Enqueue(ctx, q, []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
		select {
		case ch := <-got:
			if ch != channels[i] {
				t.Errorf("wake-up on %s, want %s", ch, channels[i])
			}
		case <-ctx.Done():
			t.Fatalf("no wake-up for %s (served by %s)", q, ownerOf(t, q))
		}
	}
	stop()
	if err := <-listened; err != nil {
		t.Errorf("Listen: %v", err)
	}
}

// countedCluster counts the connections taken from a pool on the
// cluster: each call of the mover, or round trip of its pipelined calls,
// takes one.
type countedCluster struct {
	clusterConns
	n atomic.Int64
}

func (p *countedCluster) GetContextForTag(ctx context.Context, tag string) (redis.Conn, error) {
	p.n.Add(1)
	return p.clusterConns.GetContextForTag(ctx, tag)
}

// The mover sends the move calls of the queues whose slots one master
// serves in one round trip, and a call that reaches a master that no
// longer serves its slot is run again where the cluster says.
func TestMoveOfManyQueuesOnCluster(t *testing.T) {
	pool := needCluster(t).(clusterConns)
	ctx := context.Background()
	ns := redistest.Namespace()
	const queues = 30
	reg, err := registry.New(pool, ns)
	if err != nil {
		t.Fatal(err)
	}
	st := rdb.NewStore(pool, ns)
	var refs []registry.Queue
	for i := range queues {
		refs = append(refs, registry.Queue{Tag: fmt.Sprintf("mv%02d", i), Name: fmt.Sprintf("mv%02d", i)})
	}
	if _, err := reg.Register(ctx, "A", time.Minute, "host", 1, refs); err != nil {
		t.Fatal(err)
	}
	enqueueDue := func(t *testing.T, round string) {
		t.Helper()
		for _, r := range refs {
			id := round + r.Name
			if _, err := st.Enqueue(ctx, st.Queue(r), []string{id}, [][]byte{[]byte(id)}, &rdb.EnqueueArgs{DueMillis: 1000}); err != nil {
				t.Fatal(err)
			}
		}
	}
	moveAll := func(t *testing.T) (int, int64) {
		t.Helper()
		cp := &countedCluster{clusterConns: pool}
		r, err := recovery.New(cp, &recovery.Config{Namespace: ns, Interval: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		n, err := r.Move(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n, cp.n.Load()
	}
	waiting := func(t *testing.T, round string) {
		t.Helper()
		for _, r := range refs {
			q := st.Queue(r)
			c, err := pool.GetContextForTag(ctx, r.Tag)
			if err != nil {
				t.Fatal(err)
			}
			w, err := redis.Strings(c.Do("LRANGE", q.Waiting, -1, -1))
			c.Close()
			if err != nil || len(w) != 1 || w[0] != round+r.Name {
				t.Errorf("%s waiting ends with %v (%v), want its due task %s", r.Name, w, err, round+r.Name)
			}
		}
	}

	t.Run("the queues of a master share a round trip", func(t *testing.T) {
		enqueueDue(t, "a")
		n, calls := moveAll(t)
		if n != queues {
			t.Errorf("Move = %d, want %d", n, queues)
		}
		waiting(t, "a")
		// The known queues' read, then at most one round trip a master
		// for its (at most 16) queues, two for one with more.
		if max := int64(1 + 2*len(cl.Nodes)); calls > max {
			t.Errorf("Move took %d connections for %d queues on %d masters, want at most %d", calls, queues, len(cl.Nodes), max)
		}
	})

	t.Run("a call sent to a master that lost its slot is run where the cluster says", func(t *testing.T) {
		enqueueDue(t, "b")
		// The slot of one queue moves to another master behind the
		// pool's slot map: the mover groups it with the queues of the
		// master it no longer has.
		// (The pool reads the map again in the background: if it did
		// while the slot moved, the slot moves on once more.)
		moved := refs[0].Tag
		for i := 0; ; i++ {
			from := ownerOf(t, moved)
			if _, err := cl.MoveTagSlot(ctx, cluster.TagSlot(moved), otherNode(from), redistest.MoveOpts{}); err != nil {
				t.Fatal(err)
			}
			if pool.MasterOf(moved) != ownerOf(t, moved) {
				break
			}
			if i == 2 {
				t.Fatalf("the pool's slot map followed each of 3 moves of %s's slot at once", moved)
			}
		}
		if n, _ := moveAll(t); n != queues {
			t.Errorf("Move = %d after a slot moved, want %d", n, queues)
		}
		waiting(t, "b")
	})
}
