package worqr_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

func TestSmokeEnqueueAndDrain(t *testing.T) {
	pool := srv.TagCheckedPool(t)
	ns := redistest.Namespace()
	ctx := context.Background()
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string]int{}
	done := make(chan struct{}, 1000)
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{
		Config: worqr.Config{Namespace: ns},
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 8, Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			mu.Lock()
			got[t.ID]++
			mu.Unlock()
			return nil
		})}},
		OnEvent: func(e worqr.Event) {
			if e.Kind == worqr.EventDone {
				done <- struct{}{}
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	payloads := make([][]byte, 500)
	for i := range payloads {
		payloads[i] = []byte("x")
	}
	ids, err := c.EnqueueBatch(ctx, "q", payloads, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range ids {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("timeout")
		}
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	conn := pool.Get()
	defer conn.Close()
	keys, _ := redistest.Keys(ctx, conn, ns)
	t.Log(keys)
}
