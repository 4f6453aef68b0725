package otelworqr_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	otelworqr "github.com/worqr/worqr-go/contrib/otel"
	"github.com/worqr/worqr-go/remote"
)

// A task enqueued by Enqueue and served by a remote worker (a session of
// remote.Server, what the gateway serves) reached the remote in its trace
// envelope, bytes it could not read (found by an audit). The session takes
// the envelope off: the remote gets the payload as given and the producer
// span's context as TraceParent, to link its own span to it.
func TestRemoteGetsThePayloadAndTheTraceContext(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	if _, err := otelworqr.Enqueue(ctx, e.client, e.in, "pdf", []byte("report.md"), nil, e.tp); err != nil {
		t.Fatal(err)
	}
	ended := e.sr.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended by the enqueue, want 1", len(ended))
	}
	sc := ended[0].SpanContext()
	want := fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
	r, err := remote.NewServer(e.pool, &remote.Config{Config: e.cfg, AnyQueue: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = r.Stop(sctx)
	})
	s, err := r.Open(ctx, remote.OpenOpts{Name: "remote", Queues: []string{"pdf"}})
	if err != nil {
		t.Fatal(err)
	}
	ts, err := s.Take(ctx, remote.TakeRequest{Queue: "pdf", Max: 1, Wait: 5 * time.Second})
	if err != nil || len(ts) != 1 {
		t.Fatalf("take: %d takings, %v", len(ts), err)
	}
	if got := ts[0]; string(got.Payload) != "report.md" || got.TraceParent != want {
		t.Errorf("the remote got payload %q, traceparent %q; want %q, %q", got.Payload, got.TraceParent, "report.md", want)
	}
	if _, err := s.Finish(ctx, ts[0].PID, nil); err != nil {
		t.Fatal(err)
	}
	_ = s.Close(ctx)
}
