package otelworqr_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	otelworqr "github.com/worqr/worqr-go/contrib/otel"
	"github.com/worqr/worqr-go/worqr"
)

// A queue that merges the tasks of a key (KeyPolicy.Merge): a traced
// enqueue merges as an untraced one (equal payloads once; the span context
// is in the metadata, not the payload), and the task's span is a child of
// the producer span of the enqueue that created it. Payloads an earlier
// version put in trace envelopes (each with its own span context) reach
// the handler out of them, and the span links to each producer.
func TestMergedPayloadsUnwrapped(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(map[bool]string{false: "enqueued now", true: "enqueued by an earlier version"}[old], func(t *testing.T) {
			testMerged(t, old)
		})
	}
}

func testMerged(t *testing.T, old bool) {
	e := setup(t)
	ctx := context.Background()
	if err := e.client.SetKeyPolicy(ctx, "mq", worqr.KeyPolicy{Merge: true}); err != nil {
		t.Fatal(err)
	}
	if err := e.client.SetKeyPolicy(ctx, "plain", worqr.KeyPolicy{Merge: true}); err != nil {
		t.Fatal(err)
	}
	var producers []trace.SpanContext
	for _, p := range []string{"a", "b", "a"} {
		// The same payloads, traced and not, each into one waiting task.
		if _, err := e.client.Enqueue(ctx, "plain", []byte(p), &worqr.EnqueueOpts{Key: "k"}); err != nil {
			t.Fatal(err)
		}
		if old {
			pctx := traced(e)
			producers = append(producers, trace.SpanContextFromContext(pctx))
			if _, err := e.client.Enqueue(ctx, "mq", otelworqr.OldEnvelope(pctx, []byte(p)), &worqr.EnqueueOpts{Key: "k"}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := otelworqr.Enqueue(ctx, e.client, e.in, "mq", []byte(p), &worqr.EnqueueOpts{Key: "k"}, e.tp); err != nil {
			t.Fatal(err)
		}
		sends := e.spans("mq send", len(producers)+1)
		producers = append(producers, sends[len(sends)-1].SpanContext())
	}
	type got struct {
		payload  string
		payloads []string
	}
	handler := func(ch chan<- got) worqr.Handler {
		return worqr.HandlerFunc(func(_ context.Context, tk *worqr.Task) error {
			g := got{payload: string(tk.Payload)}
			for _, p := range tk.Payloads {
				g.payloads = append(g.payloads, string(p.Data))
			}
			ch <- g
			return nil
		})
	}
	plain, tracedCh := make(chan got, 4), make(chan got, 4)
	e.worker("plain", worqr.QueueConfig{Keys: worqr.KeyPolicy{Merge: true}, Handler: handler(plain)})
	e.worker("mq", worqr.QueueConfig{Keys: worqr.KeyPolicy{Merge: true}, Handler: handler(tracedCh)})
	var want, g got
	for _, c := range []struct {
		ch  chan got
		dst *got
	}{{plain, &want}, {tracedCh, &g}} {
		select {
		case *c.dst = <-c.ch:
		case <-time.After(10 * time.Second):
			t.Fatal("a handler did not run within 10s")
		}
	}
	if len(want.payloads) != 2 {
		t.Fatalf("without tracing the task holds payloads %q: want the 2 distinct ones", want.payloads)
	}
	if g.payload != want.payload || strings.Join(g.payloads, ",") != strings.Join(want.payloads, ",") {
		t.Errorf("traced: the handler saw payload %q and payloads %q; without tracing %q and %q", g.payload, g.payloads, want.payload, want.payloads)
	}
	span := e.spans("mq process", 1)[0]
	if !old {
		if span.Parent().SpanID() != producers[0].SpanID() {
			t.Errorf("the process span's parent is %v, want the send span of the enqueue that created the task (%v)", span.Parent().SpanID(), producers[0].SpanID())
		}
		return
	}
	linked := map[trace.SpanID]bool{}
	for _, l := range span.Links() {
		linked[l.SpanContext.SpanID()] = true
	}
	for i, p := range producers {
		if !linked[p.SpanID()] {
			t.Errorf("the process span does not link to the send span of enqueue %d (links %v)", i, span.Links())
		}
	}
}
