package otelworqr

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
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
