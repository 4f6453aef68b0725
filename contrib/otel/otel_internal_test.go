package otelworqr

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/worqr/worqr-go/worqr"
)

func TestEnvelopeCarriesTraceState(t *testing.T) {
	ts, err := trace.ParseTraceState("vendor=a b,other=c")
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled, TraceState: ts})
	p := wrap(trace.ContextWithSpanContext(context.Background(), sc), []byte("\x00wqt:t\x00body"))
	carrier, inner, ok := split(p)
	if !ok || string(inner) != "\x00wqt:t\x00body" {
		t.Fatalf("split(%q) = %q, %v", p, inner, ok)
	}
	got := trace.SpanContextFromContext(prop.Extract(context.Background(), carrier))
	if !got.Equal(sc.WithRemote(true)) {
		t.Errorf("extracted %+v, want %+v", got, sc)
	}
	if typ, ok := taskType(inner); !ok || typ != "t" {
		t.Errorf("taskType = %q, %v", typ, ok)
	}
}

// A task's type (worqr.EnqueueOpts.Type) is a tag the client puts in
// front of what Enqueue gives it: the envelope is found behind it, and the
// tag stays in front of the payload, where a Mux reads it. A task stored by
// an earlier version, envelope first, is read as before.
func TestEnvelopeBehindTheTypeTag(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	env := wrap(trace.ContextWithSpanContext(context.Background(), sc), []byte("body"))
	for _, p := range [][]byte{
		append([]byte("\x00wqt:t\x00"), env...),                                                   // this version
		wrap(trace.ContextWithSpanContext(context.Background(), sc), []byte("\x00wqt:t\x00body")), // an earlier one
	} {
		carrier, inner, ok := split(p)
		if !ok || string(inner) != "\x00wqt:t\x00body" || string(Unwrap(p)) != "\x00wqt:t\x00body" {
			t.Errorf("split(%q) = %q, %v; want the typed payload out of its envelope", p, inner, ok)
			continue
		}
		if got := trace.SpanContextFromContext(prop.Extract(context.Background(), carrier)); got.SpanID() != sc.SpanID() {
			t.Errorf("split(%q): span %v, want %v", p, got.SpanID(), sc.SpanID())
		}
	}
	if _, _, ok := split([]byte("\x00wqt:t\x00body")); ok {
		t.Error("a typed payload without an envelope split")
	}
}

func TestUnwrap(t *testing.T) {
	for _, p := range []string{"", "plain", "\x00wqh:", "\x00wqh:no terminator", "\x00wqh:\x00empty header"} {
		if got := string(Unwrap([]byte(p))); got != p {
			t.Errorf("Unwrap(%q) = %q, want it unchanged", p, got)
		}
	}
	if got := string(Unwrap([]byte("\x00wqh:00-x\x00in\x00ner"))); got != "in\x00ner" {
		t.Errorf("Unwrap = %q", got)
	}
}

func TestMiddlewareGivesThePayloadBackAndRecordsPanics(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	stored := wrap(trace.ContextWithSpanContext(context.Background(), sc), []byte("in"))
	task := &worqr.Task{ID: "t1", Queue: "q", Payload: stored, Attempt: 1}
	var saw string
	h := Middleware(tp)(worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
		saw = string(t.Payload)
		panic("kaput")
	}))
	func() {
		defer func() {
			if v := recover(); v != "kaput" {
				t.Errorf("recovered %v, want the handler's panic to go on", v)
			}
		}()
		_ = h.HandleTask(context.Background(), task)
	}()
	if saw != "in" || string(task.Payload) != string(stored) {
		t.Errorf("handler saw %q, task left with %q; want %q and the stored payload back", saw, task.Payload, "in")
	}
	ended := sr.Ended()
	if len(ended) != 1 || ended[0].Status().Code != codes.Error || ended[0].Status().Description != "panic: kaput" {
		t.Fatalf("spans %v: want one ended with status Error panic: kaput", ended)
	}
}

// OldEnvelope is wrap, for the tests of the package outside.
var OldEnvelope = wrap

// wrap returns payload in the envelope an earlier version of Enqueue
// put around it, holding the span context of ctx (payload itself when ctx
// holds no valid span context).
func wrap(ctx context.Context, payload []byte) []byte {
	c := propagation.MapCarrier{}
	prop.Inject(ctx, c)
	tp := c.Get("traceparent")
	if tp == "" {
		return payload
	}
	ts := c.Get("tracestate")
	n := len(mark) + len(tp) + 1 + len(payload)
	if ts != "" {
		n += 1 + len(ts)
	}
	out := make([]byte, 0, n)
	out = append(out, mark...)
	out = append(out, tp...)
	if ts != "" {
		out = append(out, '\n')
		out = append(out, ts...)
	}
	out = append(out, 0)
	return append(out, payload...)
}
