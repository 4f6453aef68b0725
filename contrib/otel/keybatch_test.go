package otelworqr_test

import (
	"context"
	"sync"
	"testing"
	"time"

	otelworqr "github.com/worqr/worqr-go/contrib/otel"
	"github.com/worqr/worqr-go/worqr"
)

// A queue with KeyBatch: the tracing middleware unwraps every task of the
// batch, not only its head: the others reached the BatchHandler still in
// their trace envelope (found by an audit).
func TestKeyBatchPayloadsUnwrapped(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	enqueueABC(ctx, t, e)
	var mu sync.Mutex
	var got [][]string
	e.worker("kb", worqr.QueueConfig{KeyBatch: 3, BatchHandler: worqr.BatchHandlerFunc(func(ctx context.Context, b *worqr.Batch) error {
		var ps []string
		for _, tk := range b.Tasks {
			ps = append(ps, string(tk.Payload))
		}
		mu.Lock()
		got = append(got, ps)
		mu.Unlock()
		return nil
	})})
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := 0
		for _, g := range got {
			n += len(g)
		}
		mu.Unlock()
		if n >= 3 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, g := range got {
		for _, p := range g {
			if p != `"a"` && p != `"b"` && p != `"c"` {
				t.Errorf("a batch handler got payload %q: the trace envelope was not removed (batches %q)", p, got)
			}
		}
	}
}

// The same with HandleBatchOf: the envelopes did not decode, and the
// batch's head went dead.
func TestKeyBatchTypedRuns(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	enqueueABC(ctx, t, e)
	var mu sync.Mutex
	var done []string
	e.worker("kb", worqr.QueueConfig{KeyBatch: 3, MaxAttempts: 1, BatchHandler: worqr.HandleBatchOf(func(ctx context.Context, b *worqr.Batch, vs []string) error {
		mu.Lock()
		done = append(done, vs...)
		mu.Unlock()
		return nil
	}, nil)})
	in, err := worqr.NewInspector(e.pool, &e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	var qi *worqr.QueueInfo
	for deadline := time.Now().Add(10 * time.Second); ; {
		if qi, err = in.Queue(ctx, "kb"); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		n := len(done)
		mu.Unlock()
		if n == 3 || qi.Dead > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if qi.Dead != 0 || len(done) != 3 {
		t.Errorf("done %q, %d dead: want all 3 done", done, qi.Dead)
	}
}

// enqueueABC enqueues "a", "b" and "c" under key k of queue kb, traced.
func enqueueABC(ctx context.Context, t *testing.T, e *env) {
	t.Helper()
	for _, p := range []string{`"a"`, `"b"`, `"c"`} {
		if _, err := otelworqr.Enqueue(ctx, e.client, e.in, "kb", []byte(p), &worqr.EnqueueOpts{Key: "k"}, e.tp); err != nil {
			t.Fatal(err)
		}
	}
}
