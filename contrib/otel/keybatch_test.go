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
	handled := make(chan int, 10) // the size of each batch handled
	e.worker("kb", worqr.QueueConfig{KeyBatch: 3, BatchHandler: worqr.BatchHandlerFunc(func(ctx context.Context, b *worqr.Batch) error {
		var ps []string
		for _, tk := range b.Tasks {
			ps = append(ps, string(tk.Payload))
		}
		mu.Lock()
		got = append(got, ps)
		mu.Unlock()
		handled <- len(ps)
		return nil
	})})
	timeout := time.After(5 * time.Second)
	for n := 0; n < 3; {
		select {
		case k := <-handled:
			n += k
		case <-timeout:
			t.Fatalf("%d of 3 tasks reached the batch handler within 5s", n)
		}
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
	// Each batch attempt, decoded or not, says how it ended (one attempt:
	// an error sends the batch's head to the dead set).
	attempts := make(chan error, 10)
	signal := func(next worqr.Handler) worqr.Handler {
		return worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			err := next.HandleTask(ctx, t)
			attempts <- err
			return err
		})
	}
	e.worker("kb", worqr.QueueConfig{KeyBatch: 3, MaxAttempts: 1, BatchHandler: worqr.HandleBatchOf(func(ctx context.Context, b *worqr.Batch, vs []string) error {
		mu.Lock()
		done = append(done, vs...)
		mu.Unlock()
		return nil
	}, nil)}, signal)
	timeout := time.After(10 * time.Second)
wait: // until the 3 are done, an attempt failed, or 10 s passed: checked below
	for {
		select {
		case err := <-attempts:
			mu.Lock()
			n := len(done)
			mu.Unlock()
			if err != nil || n == 3 {
				break wait
			}
		case <-timeout:
			break wait
		}
	}
	in, err := worqr.NewInspector(e.pool, &e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	qi, err := in.Queue(ctx, "kb")
	if err != nil {
		t.Fatal(err)
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
