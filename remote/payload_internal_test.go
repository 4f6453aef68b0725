package remote

import (
	"reflect"
	"testing"

	"github.com/worqr/worqr-go/worqr"
)

// The payloads merged into a task of an ordered queue, each in a trace
// envelope of its own (equal ones kept apart by the merge), reach a remote
// as the merge keeps them without tracing: out of their envelopes, the
// first of equal ones kept, Payload the last one left.
func TestRemotePayloadOfMergedTracedPayloads(t *testing.T) {
	env := func(span, p string) []byte {
		return []byte("\x00wqh:00-4bf92f3577b34da6a3ce929d0e0e4736-" + span + "-01\x00" + p)
	}
	k := Taking{Payload: env("0000000000000003", "a"), Payloads: []worqr.Payload{
		{Data: env("0000000000000001", "a"), Score: 1},
		{Data: env("0000000000000002", "b"), Score: 2},
		{Data: env("0000000000000003", "a"), Score: 3},
	}}
	remotePayload(&k)
	want := []worqr.Payload{{Data: []byte("a"), Score: 1}, {Data: []byte("b"), Score: 2}}
	if !reflect.DeepEqual(k.Payloads, want) || string(k.Payload) != "b" {
		t.Errorf("payloads %v, payload %q; want %v, %q", k.Payloads, k.Payload, want, "b")
	}
	if k.TraceParent != "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000003-01" {
		t.Errorf("traceparent %q, want the last enqueue's", k.TraceParent)
	}
	plain := Taking{Payload: []byte("\x00wqh:broken")}
	remotePayload(&plain)
	if string(plain.Payload) != "\x00wqh:broken" || plain.TraceParent != "" {
		t.Errorf("a payload that only starts like an envelope became %q (traceparent %q)", plain.Payload, plain.TraceParent)
	}
}
