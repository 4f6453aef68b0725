package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/internal/seam"
	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// eventSubscribers sums PUBSUB NUMSUB of namespace ns's events channel over
// every master (a plain channel: each node counts its own subscribers).
func eventSubscribers(t *testing.T, ns string) int {
	t.Helper()
	n := 0
	for _, node := range cl.Nodes {
		n += numsub(t, node.Addr, ns+":{reg}:events", false)
	}
	return n
}

// Waits on a cluster, for tasks of queues served by every master, on a
// Client whose pool allows 4 connections a node: they share one plain
// subscription to the events channel (one subscriber in the whole
// cluster), outlast the kill of that subscription's connection, return
// each task done with its result once it ends, with no recheck to help
// (their clocks never move), and leave no subscriber behind.
func TestWaitOnCluster(t *testing.T) {
	workerPool := needCluster(t)
	small, err := redisconn.NewCluster(cl.Addrs()[:1], &redisconn.Options{MaxActive: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns := redistest.Namespace()
	release := make(chan struct{})
	queues := map[string]worqr.QueueConfig{}
	names := spread(t, "waited-")
	for _, q := range names {
		queues[q] = worqr.QueueConfig{Concurrency: 16, Retention: time.Minute,
			Handler: worqr.HandlerFunc(func(ctx context.Context, task *worqr.Task) error {
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
				task.SetResult(task.Payload)
				return nil
			})}
	}
	wc := fastWorker(ns, queues)
	wc.EventInterval = 20 * time.Millisecond
	w, err := worqr.NewWorker(workerPool, wc)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = w.Stop(sctx)
	}()
	c, err := worqr.NewClient(small, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		q, id string
		info  *worqr.TaskInfo
		err   error
	}
	frozen := seam.WithHeartbeatClock(ctx, seam.NewManualClock(time.Now()))
	out := make(chan result, 64)
	n := 0
	for _, q := range names {
		for i := 0; i < 10; i++ {
			id, err := c.Enqueue(ctx, q, []byte(fmt.Sprintf("%s-%d", q, i)), nil)
			if err != nil {
				t.Fatal(err)
			}
			n++
			go func() {
				info, err := c.Wait(frozen, q, id)
				out <- result{q, id, info, err}
			}()
		}
	}
	// (Each queue's Wait adds its ended channel: the subscription is made
	// again with it, the one before it gone a moment later.)
	redistest.WaitFor(t, 15*time.Second, fmt.Sprintf("%d Waits subscribed once to the events channel", n),
		func() bool { return eventSubscribers(t, ns) == 1 })
	// Drop it: the Client subscribes again (and every Wait reads again).
	killed := 0
	for _, node := range cl.Nodes {
		conn, err := redis.Dial("tcp", node.Addr)
		if err != nil {
			t.Fatal(err)
		}
		k, err := redis.Int(conn.Do("CLIENT", "KILL", "TYPE", "pubsub"))
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		killed += k
	}
	if killed == 0 {
		t.Fatal("no pub/sub connection killed")
	}
	redistest.WaitFor(t, 15*time.Second, fmt.Sprintf("%d Waits subscribed once again to the events channel", n),
		func() bool { return eventSubscribers(t, ns) == 1 })
	close(release)
	for i := 0; i < n; i++ {
		select {
		case r := <-out:
			if r.err != nil || r.info.State != worqr.StateDone || string(r.info.Result) != string(r.info.Payload) {
				t.Fatalf("Wait(%s, %s) = %+v, %v; want it done with its result", r.q, r.id, r.info, r.err)
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d Waits returned", i, n)
		}
	}
	redistest.WaitFor(t, 15*time.Second, "no subscriber of the events channel left", func() bool { return eventSubscribers(t, ns) == 0 })
}

// A Wait on a cluster is woken by its task's end on the queue's ended
// channel, a sharded channel on the queue's master (the end script
// SPUBLISHes it): here the worker publishes no events and the Waits' clocks
// never move, so nothing else could wake them. One SSUBSCRIBE subscriber
// per queue, on its master, none left once the Waits returned.
func TestWaitWokenByItsEndOnCluster(t *testing.T) {
	workerPool := needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns := redistest.Namespace()
	release := make(chan struct{})
	queues := map[string]worqr.QueueConfig{}
	names := spread(t, "ended-")
	for _, q := range names {
		queues[q] = worqr.QueueConfig{Concurrency: 4, Handler: worqr.HandlerFunc(func(ctx context.Context, task *worqr.Task) error {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			return nil
		})}
	}
	wc := fastWorker(ns, queues)
	wc.DisableEvents = true
	w, err := worqr.NewWorker(workerPool, wc)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = w.Stop(sctx)
	}()
	c, err := worqr.NewClient(workerPool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	frozen := seam.WithHeartbeatClock(ctx, seam.NewManualClock(time.Now()))
	type result struct {
		q    string
		info *worqr.TaskInfo
		err  error
	}
	out := make(chan result, len(names))
	for _, q := range names {
		id, err := c.Enqueue(ctx, q, []byte(q), nil)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			info, err := c.Wait(frozen, q, id)
			out <- result{q, info, err}
		}()
	}
	ended := func(q string) int { return numsub(t, ownerOf(t, q), ns+":{"+q+"}:ended:"+q, true) }
	redistest.WaitFor(t, 15*time.Second, "a sharded subscriber of each queue's ended channel", func() bool {
		for _, q := range names {
			if ended(q) != 1 {
				return false
			}
		}
		return true
	})
	close(release)
	for range names {
		select {
		case r := <-out:
			if r.err != nil || r.info.State != worqr.StateDone {
				t.Fatalf("Wait on %s = %+v, %v; want done", r.q, r.info, r.err)
			}
		case <-ctx.Done():
			t.Fatal("a Wait was not woken by its task's end")
		}
	}
	redistest.WaitFor(t, 15*time.Second, "no subscriber of the ended channels left", func() bool {
		for _, q := range names {
			if ended(q) != 0 {
				return false
			}
		}
		return true
	})
}
