package cluster_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/rdb/cluster"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// masterDown starts a 3-master cluster of its own with
// cluster-require-full-coverage no (the masters left serve their slots
// while one is down: docs/guide/cluster.md, "Failover"), and
// returns it, a queue name served by the master it will kill (not the
// registry's) and one served by another master.
func masterDown(t *testing.T, ctx context.Context, prefix string) (own *redistest.Cluster, dead *redistest.Server, qDead, qLive string) {
	t.Helper()
	needCluster(t)
	own, err := redistest.StartCluster(3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(own.Stop)
	for _, n := range own.Nodes {
		c, err := redis.Dial("tcp", n.Addr)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Do("CONFIG", "SET", "cluster-require-full-coverage", "no")
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	reg, err := own.NodeOf(ctx, cluster.TagSlot(rdb.RegistryTag))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range own.Nodes {
		if n != reg {
			dead = n
			break
		}
	}
	for i := 0; (qDead == "" || qLive == "") && i < 1000; i++ {
		name := prefix + strconv.Itoa(i)
		n, err := own.NodeOf(ctx, cluster.TagSlot(name))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case n == dead && qDead == "":
			qDead = name
		case n != dead && qLive == "":
			qLive = name
		}
	}
	if qDead == "" || qLive == "" {
		t.Fatal("no queue names on the masters wanted")
	}
	return own, dead, qDead, qLive
}

// killForGood SIGKILLs master dead of own and waits until the other
// masters have marked it failed (CLUSTER NODES flag "fail").
func killForGood(t *testing.T, own *redistest.Cluster, dead *redistest.Server) {
	t.Helper()
	dead.Kill()
	var other *redistest.Server
	for _, n := range own.Nodes {
		if n != dead {
			other = n
			break
		}
	}
	redistest.WaitFor(t, 30*time.Second, "the killed master marked failed", func() bool {
		c, err := redis.Dial("tcp", other.Addr)
		if err != nil {
			return false
		}
		defer c.Close()
		nodes, err := redis.String(c.Do("CLUSTER", "NODES"))
		if err != nil {
			return false
		}
		for _, l := range strings.Split(nodes, "\n") {
			f := strings.Fields(l)
			if len(f) > 2 && strings.HasPrefix(f[1], dead.Addr) {
				for _, fl := range strings.Split(f[2], ",") {
					if fl == "fail" {
						return true
					}
				}
			}
		}
		return false
	})
}

// TestOneMasterDownFlagsOfTheOthers: with one master down for good
// (cluster-require-full-coverage no), a worker that serves a queue on it
// and one on a live master still reads the live queue's flags: a task
// enqueued there with a priority level (the queue's first: its level
// becomes known through the flags, announced on the queue's wake channel
// and read at every poll) runs.
//
// It failed: the worker's one Listen needs every master (the dead one's
// slots have no master: no wake-up, no flag announcement reaches the
// worker), and its poll reads the flags of every queue in one call that
// fails at the dead master's queue, so that none is applied: the
// priority task waited, never taken, for as long as the master was down
// (as would a pause or a resume of the live queue go unseen).
func TestOneMasterDownFlagsOfTheOthers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	own, dead, qDead, qLive := masterDown(t, ctx, "down-")
	pool := clusterPool(t, own.Addrs())
	ns := redistest.Namespace()
	ran := make(chan string, 16)
	h := worqr.HandlerFunc(func(_ context.Context, task *worqr.Task) error {
		ran <- string(task.Payload)
		return nil
	})
	cfg := &worqr.WorkerConfig{Config: worqr.Config{Namespace: ns, DisableEvents: true},
		Queues: map[string]worqr.QueueConfig{qDead: {Concurrency: 1, Handler: h}, qLive: {Concurrency: 1, Handler: h}},
		// A TTL longer than the seconds the dead master is only
		// suspected: the registry's master is a live one.
		HeartbeatInterval: 200 * time.Millisecond, HeartbeatTTL: 5 * time.Second,
		ReaperInterval: 500 * time.Millisecond, PollInterval: 300 * time.Millisecond}
	startWorker(t, ctx, pool, cfg)
	client, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	expect := func(payload string, within time.Duration) {
		t.Helper()
		timeout := time.After(within)
		for {
			select {
			case got := <-ran:
				if got == payload {
					return
				}
			case <-timeout:
				t.Fatalf("%q did not run within %s", payload, within)
			}
		}
	}
	if _, err := client.Enqueue(ctx, qLive, []byte("before"), nil); err != nil {
		t.Fatal(err)
	}
	expect("before", 10*time.Second)

	killForGood(t, own, dead)
	// The live master serves its queue.
	if _, err := client.Enqueue(ctx, qLive, []byte("plain"), nil); err != nil {
		t.Fatal(err)
	}
	expect("plain", 10*time.Second)
	if _, err := client.Enqueue(ctx, qLive, []byte("prio"), &worqr.EnqueueOpts{Priority: 3}); err != nil {
		t.Fatal(err)
	}
	expect("prio", 15*time.Second)
}

// TestOneMasterDownWakeUpsOfTheOthers: with one master down for good
// (cluster-require-full-coverage no), a worker that serves a queue on it
// and one on a live master, and never polls, is still woken by a task
// enqueued on the live master, and a cancel of a task it runs there
// reaches the handler.
//
// It failed: the worker's Listen wanted a master for every channel and
// ended at once without one ("no master serves the slot"), so that the
// worker listened to nothing while the master was down: no wake-up (a
// worker that polls runs the task a PollInterval late), no hand-off, and
// no cancel of a running task (the handler ran to its end).
func TestOneMasterDownWakeUpsOfTheOthers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	own, dead, qDead, qLive := masterDown(t, ctx, "downw-")
	pool := clusterPool(t, own.Addrs())
	ns := redistest.Namespace()
	ran := make(chan string, 16)
	stopped := make(chan error, 1)
	h := worqr.HandlerFunc(func(hctx context.Context, task *worqr.Task) error {
		ran <- string(task.Payload)
		if string(task.Payload) == "long" {
			select {
			case <-hctx.Done():
				stopped <- context.Cause(hctx)
			case <-time.After(60 * time.Second):
				stopped <- nil
			}
		}
		return nil
	})
	cfg := &worqr.WorkerConfig{Config: worqr.Config{Namespace: ns, DisableEvents: true},
		Queues:            map[string]worqr.QueueConfig{qDead: {Concurrency: 2, Handler: h}, qLive: {Concurrency: 2, Handler: h}},
		HeartbeatInterval: 200 * time.Millisecond, HeartbeatTTL: 5 * time.Second,
		ReaperInterval: 500 * time.Millisecond, PollInterval: noPoll}
	startWorker(t, ctx, pool, cfg)
	client, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	expect := func(payload string, within time.Duration) {
		t.Helper()
		timeout := time.After(within)
		for {
			select {
			case got := <-ran:
				if got == payload {
					return
				}
			case <-timeout:
				t.Fatalf("%q did not run within %s", payload, within)
			}
		}
	}
	liveNode, err := own.NodeOf(ctx, cluster.TagSlot(qLive))
	if err != nil {
		t.Fatal(err)
	}
	wake := rdb.NewStore(pool, ns).Queue(rdb.Standalone(qLive)).WakeChannel
	subscribed := func() {
		t.Helper()
		redistest.WaitFor(t, 20*time.Second, "the worker's sharded subscription on the live master", func() bool {
			return numsub(t, liveNode.Addr, wake, true) == 1
		})
	}
	subscribed()
	if _, err := client.Enqueue(ctx, qLive, []byte("before"), nil); err != nil {
		t.Fatal(err)
	}
	expect("before", 10*time.Second)

	killForGood(t, own, dead)
	// Give the worker the time to listen again (its backoff is at most
	// 5 s); the subscription is then on the live masters only.
	subscribed()
	if _, err := client.Enqueue(ctx, qLive, []byte("woken"), nil); err != nil {
		t.Fatal(err)
	}
	expect("woken", 10*time.Second)
	id, err := client.Enqueue(ctx, qLive, []byte("long"), nil)
	if err != nil {
		t.Fatal(err)
	}
	expect("long", 10*time.Second)
	if st, err := client.Cancel(ctx, qLive, id); err != nil || st != worqr.CancelRequested {
		t.Fatalf("cancel: %v, %v", st, err)
	}
	select {
	case cause := <-stopped:
		if cause == nil {
			t.Fatal("the handler was never cancelled")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancel did not reach the running handler within 10s")
	}
}
