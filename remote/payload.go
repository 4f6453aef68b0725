package remote

import (
	"bytes"
	"strings"

	"github.com/worqr/worqr-go/worqr"
)

// traceMark starts a payload that carries a trace context: contrib/otel's
// Enqueue writes "\x00wqh:" + traceparent [+ "\n" + tracestate] + "\x00" +
// payload for a keyed task (others carry it in their metadata), and did
// for every task before EnqueueOpts.Meta. A Worker leaves it to the otel
// middleware; a remote (gateway) worker has none, so its session takes it
// off (see remotePayload).
const traceMark = "\x00wqh:"

// splitTrace returns the trace context and the inner payload of a payload
// that carries one. The envelope is outermost, or behind the tag of the
// task's type (EnqueueOpts.Type, put on by the client after contrib/otel
// wrapped the payload): the tag then stays in front of the payload
// returned.
func splitTrace(p []byte) (traceparent, tracestate string, payload []byte, ok bool) {
	var tag []byte
	if _, inner, typed := splitTyped(p); typed {
		tag = p[:len(p)-len(inner)]
	}
	rest, found := bytes.CutPrefix(p[len(tag):], []byte(traceMark))
	if !found {
		return "", "", nil, false
	}
	i := bytes.IndexByte(rest, 0)
	if i <= 0 {
		return "", "", nil, false
	}
	traceparent, tracestate, _ = strings.Cut(string(rest[:i]), "\n")
	if len(tag) == 0 {
		return traceparent, tracestate, rest[i+1:], true
	}
	return traceparent, tracestate, append(append(make([]byte, 0, len(tag)+len(rest)-i-1), tag...), rest[i+1:]...), true
}

// remotePayload fills k's payload fields for a remote worker, which has no
// middleware to read the envelopes a Go producer may have put around the
// payload: the trace context (TraceParent, TraceState) and the task type
// (Type) are taken off and given as fields, and each merged payload of
// that type out of its tag too. The payloads merged into a
// task of an ordered queue are taken out of their trace envelopes too; as
// each carried a context of its own, equal ones were kept apart by the
// merge, and the first of each is kept, as the merge keeps it without
// tracing (worqr.Payload is then the last one left).
func remotePayload(k *Taking) {
	if len(k.Payloads) > 0 {
		out := make([]worqr.Payload, 0, len(k.Payloads))
		seen := map[string]bool{}
		traced := false
		for _, p := range k.Payloads {
			if _, _, inner, ok := splitTrace(p.Data); ok {
				traced = true
				p.Data = inner
			}
			if seen[string(p.Data)] {
				continue
			}
			seen[string(p.Data)] = true
			out = append(out, p)
		}
		if traced {
			k.Payloads = out
		}
	}
	if tp, ts, inner, ok := splitTrace(k.Payload); ok {
		k.TraceParent, k.TraceState, k.Payload = tp, ts, inner
	}
	if len(k.Payloads) > 0 {
		k.Payload = k.Payloads[len(k.Payloads)-1].Data
	}
	if typ, inner, ok := splitTyped(k.Payload); ok {
		k.Type, k.Payload = typ, inner
		// The merged payloads of that type come out of their tags too
		// (a Mux hands them so); one of another type, or of none, is
		// left as it was stored.
		for i, p := range k.Payloads {
			if pt, inner, ok := splitTyped(p.Data); ok && pt == typ {
				k.Payloads[i].Data = inner
			}
		}
	}
}
