package cluster_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/rdb/cluster"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// role returns what ROLE's first field says at addr ("" when it does not
// answer).
func role(addr string) string {
	c, err := redis.Dial("tcp", addr, redis.DialConnectTimeout(time.Second), redis.DialReadTimeout(time.Second))
	if err != nil {
		return ""
	}
	defer c.Close()
	v, err := redis.Values(c.Do("ROLE"))
	if err != nil || len(v) == 0 {
		return ""
	}
	r, _ := redis.String(v[0], nil)
	return r
}

// TestShardedWakeUpAfterFailover runs an idle worker (no polling) on a
// cluster of its own whose queue's master has a replica. After a manual
// failover (CLUSTER FAILOVER: the old master becomes the replica and tells
// the worker's sharded subscription it no longer serves the slot) and then
// after a SIGKILL of the new master (its replica, the first master, is
// promoted by the other masters), the worker subscribes again on the master
// of the moment, and a task enqueued then wakes it.
func TestShardedWakeUpAfterFailover(t *testing.T) {
	needCluster(t)
	own, err := redistest.StartCluster(3)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	first := own.Nodes[0]
	q := ""
	for i := 0; q == "" && i < 1000; i++ {
		name := "sfail-" + strconv.Itoa(i)
		if n, err := own.NodeOf(ctx, cluster.TagSlot(name)); err == nil && n == first {
			q = name
		}
	}
	if q == "" {
		t.Fatal("no queue name served by the first master")
	}
	replica, err := own.AddReplica(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Stop()

	pool := clusterPool(t, own.Addrs()[1:2])
	ns := redistest.Namespace()
	qk := rdb.NewStore(pool, ns).Queue(rdb.Standalone(q))
	ran := make(chan string, 4)
	cfg := fastWorker(ns, map[string]worqr.QueueConfig{q: {Concurrency: 1,
		Handler: worqr.HandlerFunc(func(_ context.Context, task *worqr.Task) error {
			ran <- string(task.Payload)
			return nil
		})}})
	cfg.PollInterval = noPoll
	startWorker(t, ctx, pool, cfg)
	client, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	// subscribedOn waits until addr has the worker's sharded subscriptions.
	subscribedOn := func(addr string) {
		t.Helper()
		redistest.WaitFor(t, 30*time.Second, "the worker's sharded subscription on "+addr, func() bool {
			return role(addr) == "master" && numsub(t, addr, qk.WakeChannel, true) == 1 &&
				numsub(t, addr, qk.CancelChannel, true) == 1
		})
	}
	seen := map[string]bool{}
	// wakes enqueues payload (again while the cluster heals) and waits for
	// the worker to run it.
	wakes := func(payload string) {
		t.Helper()
		seen[payload] = true
		redistest.WaitFor(t, 30*time.Second, "an enqueue of "+payload, func() bool {
			_, err := client.Enqueue(ctx, q, []byte(payload), nil)
			return err == nil
		})
		timeout := time.After(20 * time.Second)
		for {
			select {
			case got := <-ran:
				if got == payload {
					return
				}
				// An earlier task again: its end, acknowledged by a master
				// killed before its replica had it, was lost (at least
				// once).
				if !seen[got] {
					t.Errorf("ran %q, want %q", got, payload)
				}
			case <-timeout:
				t.Fatalf("no wake-up for %q", payload)
			}
		}
	}
	subscribedOn(first.Addr)
	wakes("before")

	// A manual failover: the replica becomes the master.
	rc, err := redis.Dial("tcp", replica.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rc.Do("CLUSTER", "FAILOVER"); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	subscribedOn(replica.Addr)
	if n := numsub(t, first.Addr, qk.WakeChannel, true); n != 0 {
		t.Errorf("the old master still has %d subscribers of the wake channel", n)
	}
	wakes("after the failover")

	// The new master dies: the old one, now its replica, is promoted.
	replica.Kill()
	subscribedOn(first.Addr)
	wakes("after the kill")
}
