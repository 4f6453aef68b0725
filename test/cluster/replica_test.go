package cluster_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb/cluster"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// waitsOn returns how many WAIT commands each master has run, by address.
func waitsOn(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, n := range cl.Nodes {
		c, err := redis.Dial("tcp", n.Addr)
		if err != nil {
			t.Fatal(err)
		}
		info, err := redis.String(c.Do("INFO", "commandstats"))
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_wait:calls="); ok {
				out[n.Addr], _ = strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			}
		}
	}
	return out
}

// With Config.Replicas on a cluster, WAIT runs on the master that took the
// write (here without replicas, so every write is reported as not
// replicated, and applied), also after the queue's slot moved under a
// client whose slot map is stale; a worker's ends wait there too.
func TestReplicasOnCluster(t *testing.T) {
	pool := needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := worqr.Config{Namespace: redistest.Namespace(), Replicas: 1, ReplicaTimeout: 5 * time.Millisecond}
	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	queues := spread(t, "rw")
	// enqueue enqueues to q and checks that master want ran one WAIT and
	// no other master one, but stale (the master a stale map names, whose
	// redirection comes back with the WAIT sent behind the FCALL).
	enqueue := func(q, want, stale string) {
		t.Helper()
		before := waitsOn(t)
		id, err := client.Enqueue(ctx, q, []byte("p"), nil)
		var re *worqr.ReplicaError
		if !errors.As(err, &re) || re.Got != 0 || id == "" {
			t.Fatalf("enqueue to %s on a cluster without replicas: %q, %v", q, id, err)
		}
		after := waitsOn(t)
		for addr := range after {
			d := after[addr] - before[addr]
			switch {
			case addr == want && d != 1:
				t.Fatalf("enqueue to %s: %d WAIT on its master %s, want 1 (%v -> %v)", q, d, want, before, after)
			case addr == stale && d != 1:
				t.Fatalf("enqueue to %s: %d WAIT on %s, the master the stale map names, want 1: the redirection was not exercised", q, d, addr)
			case addr != want && addr != stale && d != 0:
				t.Fatalf("enqueue to %s: %d WAIT on %s, which does not serve it (%v -> %v)", q, d, addr, before, after)
			}
		}
	}
	for _, q := range queues {
		// The first call to each master loads the library there (FCALL
		// answers "Function not found", the call runs again, WAIT follows).
		if _, err := client.Enqueue(ctx, q, []byte("warm-up"), nil); !errors.Is(err, worqr.ErrNotReplicated) {
			t.Fatal(err)
		}
		enqueue(q, ownerOf(t, q), "")
	}
	// The first queue's slot moves; the client's map still names the old
	// master: its FCALL is redirected, and WAIT follows the write.
	slot := cluster.TagSlot(queues[0])
	from := ownerOf(t, queues[0])
	to := cl.Nodes[0]
	if to.Addr == from {
		to = cl.Nodes[1]
	}
	if err := cl.MoveSlot(ctx, slot, to, 1000, nil); err != nil {
		t.Fatal(err)
	}
	enqueue(queues[0], to.Addr, from)
	if qi, err := in.Queue(ctx, queues[0]); err != nil || qi.Waiting != 3 {
		t.Fatalf("%s holds %+v (%v), want 3 waiting: each enqueue ran once", queues[0], qi, err)
	}

	noop := worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil })
	wc := fastWorker(cfg.Namespace, map[string]worqr.QueueConfig{
		queues[0]: {Concurrency: 2, Handler: noop}, queues[1]: {Concurrency: 2, Handler: noop}, queues[2]: {Concurrency: 2, Handler: noop},
	})
	wc.Replicas, wc.ReplicaTimeout = cfg.Replicas, cfg.ReplicaTimeout
	w, err := worqr.NewWorker(pool, wc)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop(context.Background()) }()
	redistest.WaitFor(t, 20*time.Second, "7 ends reported as not replicated", func() bool { return w.Unreplicated() == 7 })
}
