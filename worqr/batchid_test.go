package worqr_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/worqr/worqr-go/worqr"
)

// EnqueueBatch accepts EnqueueOpts.ID for a batch of one; with UniqueKeys
// too, a repeat (say, after a lost reply) must return the same id, as
// Enqueue does, and another payload must match ErrDuplicate. It said
// "0 of 1 tasks enqueued: task already enqueued" (a *BatchError matching
// neither) although the task exists.
func TestBatchOfOneWithIDRepeated(t *testing.T) {
	ctx := context.Background()
	_, _, c, in := freshNamespace(t)
	opts := &worqr.EnqueueOpts{ID: "order-1", UniqueKeys: []string{"k"}, UniqueTTL: time.Hour}
	ids, err := c.EnqueueBatch(ctx, "q", [][]byte{[]byte("p")}, opts)
	if err != nil || len(ids) != 1 || ids[0] != "order-1" {
		t.Fatalf("first: %v, %v", ids, err)
	}
	ids, err = c.EnqueueBatch(ctx, "q", [][]byte{[]byte("p")}, opts)
	if err != nil || len(ids) != 1 || ids[0] != "order-1" {
		t.Errorf("repeat with the same payload: %v, %v; want [order-1], nil", ids, err)
	}
	_, err = c.EnqueueBatch(ctx, "q", [][]byte{[]byte("other")}, opts)
	if !errors.Is(err, worqr.ErrDuplicate) {
		t.Errorf("repeat with another payload: %v; want ErrDuplicate", err)
	}
	if n := queueLen(t, in, "q"); n != 1 {
		t.Errorf("waiting: %d, want 1", n)
	}
}

// A batch of one with an id of the caller's whose unique key is held is
// left out (DuplicatesError) but its id was remembered all the same: once
// the key is free, the same enqueue says "already enqueued" (with the fix
// above: returns the id, nil) and no task of that id exists: lost.
func TestBatchOfOneWithIDLeftOutIsNotRemembered(t *testing.T) {
	ctx := context.Background()
	_, _, c, in := freshNamespace(t)
	holder, err := c.Enqueue(ctx, "q", []byte("h"), &worqr.EnqueueOpts{UniqueKey: "k", UniqueTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	opts := &worqr.EnqueueOpts{ID: "order-2", UniqueKeys: []string{"k"}, UniqueTTL: time.Hour}
	if _, err := c.EnqueueBatch(ctx, "q", [][]byte{[]byte("p")}, opts); !errors.Is(err, worqr.ErrDuplicate) {
		t.Fatalf("while the key is held: %v, want ErrDuplicate", err)
	}
	if _, err := c.Cancel(ctx, "q", holder); err != nil { // frees the key
		t.Fatal(err)
	}
	ids, err := c.EnqueueBatch(ctx, "q", [][]byte{[]byte("p")}, opts)
	info, terr := in.Task(ctx, "q", "order-2")
	if err != nil || len(ids) != 1 || ids[0] != "order-2" || terr != nil || info.State != worqr.StateQueued {
		t.Fatalf("once the key is free: %v, %v; task: %+v, %v; want order-2 enqueued", ids, err, info, terr)
	}
}
