package cluster_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/rdb/cluster"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// The tests of this file run workers whose PollInterval is an hour: an idle
// worker takes again only when a wake-up message reaches it (or when its
// subscription is confirmed, which is why each test waits for it before it
// enqueues).
const noPoll = time.Hour

// numsub returns what node addr answers to PUBSUB SHARDNUMSUB (sharded) or
// PUBSUB NUMSUB for channel.
func numsub(t *testing.T, addr, channel string, sharded bool) int {
	t.Helper()
	c, err := redis.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sub := "NUMSUB"
	if sharded {
		sub = "SHARDNUMSUB"
	}
	v, err := redis.Values(c.Do("PUBSUB", sub, channel))
	if err != nil || len(v) != 2 {
		t.Fatalf("PUBSUB %s %s on %s: %v, %v", sub, channel, addr, v, err)
	}
	n, _ := redis.Int(v[1], nil)
	return n
}

// waitSharded waits until each channel has exactly one sharded subscriber,
// on the master that serves its slot and on no other node, and no plain
// subscriber anywhere.
func waitSharded(t *testing.T, channels ...string) {
	t.Helper()
	for _, ch := range channels {
		owner := ownerOf(t, rdb.HashTag(ch))
		redistest.WaitFor(t, 15*time.Second, "one sharded subscriber of "+ch+" on "+owner, func() bool {
			for _, n := range cl.Nodes {
				want := 0
				if n.Addr == owner {
					want = 1
				}
				if numsub(t, n.Addr, ch, true) != want || numsub(t, n.Addr, ch, false) != 0 {
					return false
				}
			}
			return true
		})
	}
}

// monitor records what node addr runs (MONITOR) until the test ends.
type monitor struct {
	mu    sync.Mutex
	lines []string
}

func startMonitor(t *testing.T, addr string) *monitor {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if _, err := nc.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(nc)
	if l, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
		t.Fatalf("MONITOR on %s: %q, %v", addr, l, err)
	}
	m := &monitor{}
	go func() {
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			m.mu.Lock()
			m.lines = append(m.lines, l)
			m.mu.Unlock()
		}
	}()
	return m
}

// seen returns the recorded lines that contain every part.
func (m *monitor) seen(parts ...string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
next:
	for _, l := range m.lines {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				continue next
			}
		}
		out = append(out, l)
	}
	return out
}

// startWorker starts a worker on pool and stops it when the test ends.
func startWorker(t *testing.T, ctx context.Context, pool worqr.ConnGetter, cfg *worqr.WorkerConfig) *worqr.Worker {
	t.Helper()
	w, err := worqr.NewWorker(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = w.Stop(sctx)
	})
	return w
}

// TestShardedWakeUp: an idle worker serving a queue on each master, with
// no polling, runs a task enqueued on any of them, so the wake-up reached
// it. It listens with one SSUBSCRIBE per channel on the channel's master
// only (PUBSUB SHARDNUMSUB; no plain subscriber: PUBSUB NUMSUB), and the
// enqueue script published with SPUBLISH on the queue's master, never with
// PUBLISH, which a cluster broadcasts to every node (MONITOR on every
// node); so are a pause's and a resume's announcements.
func TestShardedWakeUp(t *testing.T) {
	pool := needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	ns := redistest.Namespace()
	st := rdb.NewStore(pool, ns)
	queues := spread(t, "swake-")
	ran := make(chan string, 16)
	qc := map[string]worqr.QueueConfig{}
	var channels []string
	for _, q := range queues {
		q := q
		qc[q] = worqr.QueueConfig{Concurrency: 1, Handler: worqr.HandlerFunc(func(_ context.Context, task *worqr.Task) error {
			ran <- q + "/" + string(task.Payload)
			return nil
		})}
		qk := st.Queue(rdb.Standalone(q))
		channels = append(channels, qk.WakeChannel, qk.CancelChannel)
	}
	cfg := fastWorker(ns, qc)
	cfg.PollInterval = noPoll
	startWorker(t, ctx, pool, cfg)
	waitSharded(t, channels...)

	monitors := map[string]*monitor{}
	for _, n := range cl.Nodes {
		monitors[n.Addr] = startMonitor(t, n.Addr)
	}
	client, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queues {
		if _, err := client.Enqueue(ctx, q, []byte("w"), nil); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-ran:
			if got != q+"/w" {
				t.Errorf("ran %s, want %s/w", got, q)
			}
		case <-time.After(20 * time.Second): // far below PollInterval
			t.Fatalf("the task of %s never ran: its wake-up did not reach the worker", q)
		}
		wake := st.Queue(rdb.Standalone(q)).WakeChannel
		owner := ownerOf(t, q)
		redistest.WaitFor(t, 10*time.Second, "SPUBLISH of "+wake+" in "+owner+"'s MONITOR", func() bool {
			return len(monitors[owner].seen(`"SPUBLISH"`, wake)) > 0
		})
	}
	// A pause and a resume are announced on the wake channel from outside
	// a script (a "0"): sharded too. The resume's announcement is what
	// makes the worker take the task enqueued while paused (the pause's
	// announcement may reach it after the enqueue's wake-up: then the task
	// runs earlier, which this test does not mind).
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Pause(ctx, queues[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, queues[0], []byte("held"), nil); err != nil {
		t.Fatal(err)
	}
	if err := in.Resume(ctx, queues[0]); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-ran:
		if got != queues[0]+"/held" {
			t.Errorf("ran %s, want %s/held", got, queues[0])
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the task enqueued while paused never ran after the resume")
	}
	owner := ownerOf(t, queues[0])
	wake := st.Queue(rdb.Standalone(queues[0])).WakeChannel
	redistest.WaitFor(t, 10*time.Second, "the resume's SPUBLISH in "+owner+"'s MONITOR", func() bool {
		return len(monitors[owner].seen(`"SPUBLISH"`, wake, `"0"`)) >= 2
	})
	for addr, m := range monitors {
		// The events channel stays on plain pub/sub (a worker's batched
		// events, low-rate): only wake-ups and cancels must be sharded.
		var plain []string
		for _, l := range m.seen(`"PUBLISH"`, ns) {
			if !strings.Contains(l, `:events"`) {
				plain = append(plain, l)
			}
		}
		if l := plain; len(l) > 0 {
			t.Errorf("%s ran a plain PUBLISH (broadcast to every node): %q", addr, l)
		}
		for _, q := range queues {
			if owner := ownerOf(t, q); owner != addr {
				if l := m.seen("SPUBLISH", "{"+q+"}"); len(l) > 0 {
					t.Errorf("%s published for %s, served by %s: %q", addr, q, owner, l)
				}
			}
		}
	}
}

// TestShardedCancel: a cancel asked for a running task reaches the
// handler's context through the queue's sharded cancel channel.
func TestShardedCancel(t *testing.T) {
	pool := needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	ns := redistest.Namespace()
	st := rdb.NewStore(pool, ns)
	q := spread(t, "scancel-")[2]
	qk := st.Queue(rdb.Standalone(q))
	started := make(chan string, 1)
	cause := make(chan error, 1)
	cfg := fastWorker(ns, map[string]worqr.QueueConfig{q: {Concurrency: 1,
		Handler: worqr.HandlerFunc(func(hctx context.Context, task *worqr.Task) error {
			started <- task.ID
			<-hctx.Done()
			cause <- context.Cause(hctx)
			return hctx.Err()
		})}})
	cfg.PollInterval = noPoll
	startWorker(t, ctx, pool, cfg)
	waitSharded(t, qk.WakeChannel, qk.CancelChannel)
	client, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	id, err := client.Enqueue(ctx, q, []byte("long"), nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-started:
		if got != id {
			t.Fatalf("started %s, want %s", got, id)
		}
	case <-ctx.Done():
		t.Fatal("the task never started")
	}
	if st, err := client.Cancel(ctx, q, id); err != nil || st != worqr.CancelRequested {
		t.Fatalf("cancel: %v, %v; want %v", st, err, worqr.CancelRequested)
	}
	select {
	case err := <-cause:
		if !errors.Is(err, worqr.ErrTaskCancelled) {
			t.Errorf("the handler's context ended with %v, want %v", err, worqr.ErrTaskCancelled)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the cancel never reached the running handler")
	}
}

// TestShardedWakeUpAfterSlotMove moves the slot of an idle worker's queue
// to another master (CLUSTER SETSLOT and MIGRATE): the old master tells
// the worker's subscription it no longer serves the channels (SUNSUBSCRIBE),
// the worker subscribes again on the new master, and a task enqueued then
// still wakes it. Then it moves the slot back.
func TestShardedWakeUpAfterSlotMove(t *testing.T) {
	pool := needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns := redistest.Namespace()
	st := rdb.NewStore(pool, ns)
	q := spread(t, "smove-")[0]
	qk := st.Queue(rdb.Standalone(q))
	ran := make(chan string, 4)
	cfg := fastWorker(ns, map[string]worqr.QueueConfig{q: {Concurrency: 1,
		Handler: worqr.HandlerFunc(func(_ context.Context, task *worqr.Task) error {
			ran <- string(task.Payload)
			return nil
		})}})
	cfg.PollInterval = noPoll
	startWorker(t, ctx, pool, cfg)
	waitSharded(t, qk.WakeChannel, qk.CancelChannel)
	client, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	slot := cluster.TagSlot(q)
	home := ownerOf(t, q)
	for round, payload := range []string{"after the move", "after the move back"} {
		from := ownerOf(t, q)
		var to *redistest.Server
		for _, n := range cl.Nodes {
			if (round == 0 && n.Addr != from) || (round == 1 && n.Addr == home) {
				to = n
				break
			}
		}
		if err := cl.MoveSlot(ctx, slot, to, 100, nil); err != nil {
			t.Fatalf("moving slot %d to %s: %v", slot, to.Addr, err)
		}
		// The subscription follows the slot; a task enqueued then is
		// published on the new master.
		waitSharded(t, qk.WakeChannel, qk.CancelChannel)
		if _, err := client.Enqueue(ctx, q, []byte(payload), nil); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-ran:
			if got != payload {
				t.Errorf("ran %q, want %q", got, payload)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("no wake-up %s to %s", payload, to.Addr)
		}
	}
}

// busPublishes returns what CLUSTER INFO of node addr counts of publish
// messages sent to other nodes over the cluster bus: plain (a PUBLISH, sent
// to every node) and sharded (an SPUBLISH, sent to the replicas of its
// shard only).
func busPublishes(t *testing.T, addr string) (plain, sharded int) {
	t.Helper()
	c, err := redis.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	info, err := redis.String(c.Do("CLUSTER", "INFO"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		n, _ := strconv.Atoi(v)
		switch k {
		case "cluster_stats_messages_publish_sent":
			plain = n
		case "cluster_stats_messages_publishshard_sent":
			sharded = n
		}
	}
	return plain, sharded
}

// TestShardedNotBroadcast counts the cluster bus messages that wake-ups
// cost: n enqueues through a ClusterPool (sharded pub/sub) send none to the
// other nodes (this cluster has no replicas), while the same enqueues
// through a routing pool that is not a ShardedPubSub (plain PUBLISH, as
// before sharded pub/sub) send one to every other node per enqueue.
func TestShardedNotBroadcast(t *testing.T) {
	pool := needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw := rawCluster(ctx, t, 4, 0)
	defer raw.Close()
	ns := redistest.Namespace()
	q := spread(t, "sbus-")[1]
	owner := ownerOf(t, q)
	const n = 100
	for _, c := range []struct {
		name      string
		pool      worqr.ConnGetter
		wantPlain int
	}{
		{"sharded", pool, 0},
		{"plain", raw, n * (len(cl.Nodes) - 1)},
	} {
		client, err := worqr.NewClient(c.pool, &worqr.Config{Namespace: ns, DisableEvents: true})
		if err != nil {
			t.Fatal(err)
		}
		plain0, shard0 := busPublishes(t, owner)
		for i := 0; i < n; i++ {
			if _, err := client.Enqueue(ctx, q, []byte("x"), nil); err != nil {
				t.Fatal(err)
			}
		}
		plain1, shard1 := busPublishes(t, owner)
		t.Logf("%s: %d enqueues sent %d plain and %d sharded publish messages over the bus from %s",
			c.name, n, plain1-plain0, shard1-shard0, owner)
		if (c.wantPlain == 0 && plain1 != plain0) || plain1-plain0 < c.wantPlain || shard1 != shard0 {
			t.Errorf("%s: %d plain and %d sharded bus publishes, want %d (or more, for the plain pool) and 0",
				c.name, plain1-plain0, shard1-shard0, c.wantPlain)
		}
	}
}
