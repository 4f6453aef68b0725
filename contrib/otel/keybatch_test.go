package otelworqr_test

import (
	"context"
	"sync"
	"testing"
	"time"

	otelworqr "github.com/worqr/worqr-go/contrib/otel"
	"github.com/worqr/worqr-go/worqr"
)

// A queue with KeyBatch: every task of the batch reaches the BatchHandler
// with its payload as enqueued, those of an earlier version (in a trace
// envelope) too, not only the batch's head.
func TestKeyBatchPayloadsUnwrapped(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(map[bool]string{false: "enqueued now", true: "enqueued by an earlier version"}[old], func(t *testing.T) {
			testKeyBatchPayloads(t, old)
		})
	}
}

func testKeyBatchPayloads(t *testing.T, old bool) {
	e := setup(t)
	ctx := context.Background()
	enqueueABC(ctx, t, e, old)
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

// The same with HandleBatchOf: every payload decodes (an envelope left
// on would send the batch's head to the dead set).
func TestKeyBatchTypedRuns(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(map[bool]string{false: "enqueued now", true: "enqueued by an earlier version"}[old], func(t *testing.T) {
			testKeyBatchTyped(t, old)
		})
	}
}

func testKeyBatchTyped(t *testing.T, old bool) {
	e := setup(t)
	ctx := context.Background()
	enqueueABC(ctx, t, e, old)
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

// enqueueABC enqueues "a", "b" and "c" under key k of queue kb, traced,
// or (old) each in the envelope an earlier version put around it.
func enqueueABC(ctx context.Context, t *testing.T, e *env, old bool) {
	t.Helper()
	for _, p := range []string{`"a"`, `"b"`, `"c"`} {
		var err error
		if old {
			_, err = e.client.Enqueue(ctx, "kb", otelworqr.OldEnvelope(traced(e), []byte(p)), &worqr.EnqueueOpts{Key: "k"})
		} else {
			_, err = otelworqr.Enqueue(ctx, e.client, e.in, "kb", []byte(p), &worqr.EnqueueOpts{Key: "k"}, e.tp)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// traced returns a context holding a span of e's tracer (ended at once:
// only its context is used).
func traced(e *env) context.Context {
	ctx, span := e.tp.Tracer("test").Start(context.Background(), "producer")
	span.End()
	return ctx
}
