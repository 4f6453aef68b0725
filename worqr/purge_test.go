package worqr_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// DeleteAllWaiting empties an ordered queue whose keys have delayed heads:
// a head ended by a chunk with no room left for all its followers moves
// its key on, the next task made the head in the waiting list, which an
// earlier part had passed already. One key with 1,500 tasks behind its
// delayed head, and 1,000 delayed heads with one task behind each.
func TestDeleteAllWaitingWithDelayedKeyHeads(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	cfg := worqr.Config{Namespace: redistest.Namespace()}
	c, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	later := &worqr.EnqueueOpts{Key: "long", Delay: time.Hour}
	if _, err := c.Enqueue(ctx, "one", []byte("head"), later); err != nil {
		t.Fatal(err)
	}
	behind := make([][]byte, 1500)
	for i := range behind {
		behind[i] = []byte(fmt.Sprint(i))
	}
	if _, err := c.EnqueueBatch(ctx, "one", behind, &worqr.EnqueueOpts{Key: "long"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 1000; i++ {
		k := fmt.Sprint("k", i)
		if _, err := c.Enqueue(ctx, "many", []byte("head"), &worqr.EnqueueOpts{Key: k, Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Enqueue(ctx, "many", []byte("behind"), &worqr.EnqueueOpts{Key: k}); err != nil {
			t.Fatal(err)
		}
	}
	for q, want := range map[string]int{"one": 1501, "many": 2000} {
		n, err := in.DeleteAllWaiting(ctx, q, nil)
		if err != nil || n != want {
			t.Errorf("%s: deleted %d (%v), want %d", q, n, err, want)
		}
		qi, err := in.Queue(ctx, q)
		if err != nil || qi.Waiting != 0 || qi.Scheduled != 0 || qi.Keys != 0 {
			t.Errorf("%s after the purge: %+v (%v), want nothing left", q, qi, err)
		}
	}
}
