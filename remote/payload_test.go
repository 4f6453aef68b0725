package remote_test

import (
	"context"
	"strings"
	"testing"

	"github.com/worqr/worqr-go/remote"
	"github.com/worqr/worqr-go/worqr"
)

// A remote (gateway) worker gets a merged task's payloads of its Type out
// of their tags, as Payload is: they came still tagged.
func TestRemoteMergedTypedPayloadsAreUnwrapped(t *testing.T) {
	ctx := context.Background()
	b := setupRemote(t, ctx, remote.Config{Queues: map[string]worqr.QueueConfig{"rm": {Keys: worqr.KeyPolicy{Merge: true}}}})
	s := open(t, b, "rm")
	for _, p := range []string{"1", "2"} {
		if _, err := b.client.Enqueue(ctx, "rm", []byte(p), &worqr.EnqueueOpts{Key: "x", Type: "a"}); err != nil {
			t.Fatal(err)
		}
	}
	k := takeOne(t, s, "rm", 0)
	var got []string
	for _, p := range k.Payloads {
		got = append(got, string(p.Data))
	}
	if k.Type != "a" || string(k.Payload) != "2" || strings.Join(got, " ") != "1 2" {
		t.Errorf("taking of type %q, payload %q, payloads %q; want type a, payload 2, payloads [1 2]", k.Type, k.Payload, got)
	}
	if _, err := s.Finish(ctx, k.PID, nil); err != nil {
		t.Fatal(err)
	}
}

// A remote (gateway) worker gets a task's metadata (EnqueueOpts.Meta) as
// Taking.Meta, and the trace context in it as TraceParent and TraceState,
// the payload as given.
func TestRemoteTakingCarriesMeta(t *testing.T) {
	ctx := context.Background()
	b := setupRemote(t, ctx, remote.Config{Queues: map[string]worqr.QueueConfig{"rmeta": {}}})
	s := open(t, b, "rmeta")
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	meta := map[string]string{"traceparent": tp, "tracestate": "a=1", "tenant": "t1"}
	if _, err := b.client.Enqueue(ctx, "rmeta", []byte("p"), &worqr.EnqueueOpts{Meta: meta}); err != nil {
		t.Fatal(err)
	}
	k := takeOne(t, s, "rmeta", 0)
	if string(k.Payload) != "p" || k.Meta["tenant"] != "t1" || k.TraceParent != tp || k.TraceState != "a=1" {
		t.Errorf("taking: payload %q meta %v traceparent %q tracestate %q; want p, the meta, its trace context",
			k.Payload, k.Meta, k.TraceParent, k.TraceState)
	}
	if _, err := s.Finish(ctx, k.PID, nil); err != nil {
		t.Fatal(err)
	}
}

// A keyed task traced by contrib/otel holds its trace context in an
// envelope around the payload; with a type (EnqueueOpts.Type) the client
// puts the type's tag in front of that envelope (an earlier version of
// contrib/otel put the envelope in front of the tag). Either way a remote
// worker gets the type, the trace context and the payload as given.
func TestRemoteTypedTracedKeyedTask(t *testing.T) {
	ctx := context.Background()
	b := setupRemote(t, ctx, remote.Config{Queues: map[string]worqr.QueueConfig{"rtt": {}}})
	s := open(t, b, "rtt")
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	envelope := "\x00wqh:" + tp + "\x00" // contrib/otel's (this module does not import it)
	if _, err := b.client.Enqueue(ctx, "rtt", []byte(envelope+"inv-7"), &worqr.EnqueueOpts{Key: "a", Type: "bill"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Enqueue(ctx, "rtt", []byte(envelope+"\x00wqt:bill\x00inv-8"), &worqr.EnqueueOpts{Key: "b"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"inv-7", "inv-8"} {
		k := takeOne(t, s, "rtt", 0)
		if k.Type != "bill" || string(k.Payload) != want || k.TraceParent != tp {
			t.Errorf("taking: type %q payload %q traceparent %q; want bill, %s, %s", k.Type, k.Payload, k.TraceParent, want, tp)
		}
		if _, err := s.Finish(ctx, k.PID, nil); err != nil {
			t.Fatal(err)
		}
	}
}
