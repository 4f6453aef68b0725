package worqr_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// A worker that finds its keepalive lost puts back what it held under the
// dead id itself (requeueLost), before any reaper does: after a failover of
// a Redis Cluster's registry master no reaper pass finds that id, and its
// takings would wait for a sweep minutes later. With no reaper running
// anywhere, the task cancelled by the loss runs again under the worker's
// new id.
func TestLostKeepaliveRequeuesItsOwnTakings(t *testing.T) {
	pool := srv.Pool()
	defer pool.Close()
	c := pool.Get()
	defer c.Close()
	cfg := worqr.Config{Namespace: redistest.Namespace()}
	keys := rdb.NewKeys(cfg.Namespace)
	started := make(chan string, 2)
	var runs atomic.Int32
	w := startWorker(t, context.Background(), pool, &worqr.WorkerConfig{Config: cfg, DisableReaper: true,
		HeartbeatInterval: 100 * time.Millisecond, HeartbeatTTL: 3 * time.Second, PollInterval: 100 * time.Millisecond,
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 1, Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			started <- t.ID
			if runs.Add(1) == 1 {
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		})}}})
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	}()
	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	id, err := client.Enqueue(context.Background(), "q", []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var dead string
	select {
	case <-started:
		dead = w.ID()
	case <-time.After(5 * time.Second):
		t.Fatal("the task never started")
	}
	if _, err := c.Do("DEL", keys.Keepalive(dead)); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-started:
		if got != id || w.ID() == dead {
			t.Fatalf("ran %s under %s, want %s under a new id", got, w.ID(), id)
		}
	case <-time.After(3 * time.Second):
		held, _ := c.Do("HGETALL", rdb.NewKeys(cfg.Namespace).Queue(rdb.Standalone("q")).WorkerQueue(dead))
		t.Fatalf("the task held by the lost id was not put back (no reaper runs): the dead id still holds %s", held)
	}
}
