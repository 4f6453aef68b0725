package worqr_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// A worker whose keepalive is lost never ends anything under that id again
// (DESIGN, Liveness): the handler it cancelled may still return nil, but
// its taking is put back (the worker's own requeue, or a reaper's), not
// recorded as done by a worker the cluster counts as dead. The OnEvent of
// EventKeepaliveLost holds the worker's own requeue back until the
// handler's taking has been dealt with, so that an end sent anyway would
// land first and be applied.
func TestNoEndUnderALostKeepalive(t *testing.T) {
	pool := srv.Pool()
	defer pool.Close()
	c := pool.Get()
	defer c.Close()
	cfg := worqr.Config{Namespace: redistest.Namespace()}
	keys := rdb.NewKeys(cfg.Namespace)
	started := make(chan string, 2)
	outcome := make(chan worqr.Event, 8)
	dealt := make(chan struct{}) // closed at the first outcome of a taking
	var once sync.Once
	var runs atomic.Int32
	onEvent := func(e worqr.Event) {
		switch e.Kind {
		case worqr.EventKeepaliveLost:
			select {
			case <-dealt:
			case <-time.After(3 * time.Second):
			}
		case worqr.EventLost, worqr.EventDone, worqr.EventRetry, worqr.EventDead, worqr.EventCancelled:
			select {
			case outcome <- e:
			default:
			}
			once.Do(func() { close(dealt) })
		}
	}
	w := startWorker(t, context.Background(), pool, &worqr.WorkerConfig{
		Config: cfg, OnEvent: onEvent,
		HeartbeatInterval: 100 * time.Millisecond, HeartbeatTTL: 3 * time.Second, PollInterval: time.Second,
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 1, Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			started <- t.ID
			if runs.Add(1) == 1 {
				<-ctx.Done()
			}
			return nil // says done, though cancelled
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
	case got := <-started:
		if got != id {
			t.Fatalf("ran %s, want %s", got, id)
		}
		dead = w.ID()
	case <-time.After(5 * time.Second):
		t.Fatal("the task never started")
	}
	if _, err := c.Do("DEL", keys.Keepalive(dead)); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-outcome:
		if ev.Kind != worqr.EventLost || ev.TaskID != id || ev.WorkerID != dead {
			t.Fatalf("the cancelled taking of the lost id ended as %+v, want EventLost: nothing sent under a dead id", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no outcome for the taking of the lost id")
	}
	// Put back by the worker, run again under its new id.
	select {
	case got := <-started:
		if got != id {
			t.Fatalf("ran %s, want %s again", got, id)
		}
	case <-time.After(5 * time.Second):
		info, _ := client.Task(context.Background(), "q", id)
		t.Fatalf("the task was not run again under the new id: %+v", info)
	}
}
