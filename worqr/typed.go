package worqr

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Codec turns values into payloads and back.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// jsonCodec encodes payloads with encoding/json: the codec of Handle and
// EnqueueValue given none.
type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// Handle returns a Handler that decodes each task's payload into a T with
// codec (encoding/json when nil) and calls fn with it. A payload that does
// not decode never will: the task goes to the dead set at once (SkipRetry)
// with the decode error, and fn is not called; so does a task enqueued with
// a type (EnqueueOpts.Type), which a Mux serves. encoding/json ignores
// fields T does not have: a payload of another type that is a JSON object
// decodes, into the fields the two share. To serve several types on one
// queue, route them by type with a Mux (and Handle as each type's
// handler); to refuse unknown fields, give a stricter Codec.
func Handle[T any](fn func(ctx context.Context, t *Task, v T) error, codec Codec) Handler {
	if codec == nil {
		codec = jsonCodec{}
	}
	return HandlerFunc(func(ctx context.Context, t *Task) error {
		var v T
		if err := codec.Unmarshal(t.Payload, &v); err != nil {
			if typ, _, ok := splitTyped(t.Payload); ok && checkName("task type", typ) == nil {
				// Enqueued with a type (EnqueueOpts.Type): the decode
				// error would only name the tag's first byte.
				return SkipRetry(fmt.Errorf("worqr: task %s carries task type %q (EnqueueOpts.Type): serve its queue with a Mux, not Handle", t.ID, typ))
			}
			return SkipRetry(fmt.Errorf("worqr: payload of task %s does not decode into %T: %w", t.ID, v, err))
		}
		return fn(ctx, t, v)
	})
}

// EnqueueValue encodes v with codec (encoding/json when nil) and enqueues
// it, as Client.Enqueue does with a payload: with EnqueueOpts.Type, as a
// task of that type, for a queue served by a Mux.
func EnqueueValue[T any](ctx context.Context, c *Client, queue string, v T, codec Codec, opts *EnqueueOpts) (string, error) {
	if codec == nil {
		codec = jsonCodec{}
	}
	p, err := codec.Marshal(v)
	if err != nil {
		return "", invalid("v", "does not encode (%T): %v", v, err)
	}
	return c.Enqueue(ctx, queue, p, opts)
}

// typeMark starts a payload that carries a task type.
const typeMark = "\x00wqt:"

// typedPayload returns payload with the tag of task type typ (checked by
// the caller) in front: "\x00wqt:" + typ + "\x00" + payload, the form
// docs/PROTOCOL.md describes, which a Mux, a remote session and the
// Inspector read (contrib/otel writes it too, inside its trace envelope).
func typedPayload(typ string, payload []byte) []byte {
	out := make([]byte, 0, len(typeMark)+len(typ)+1+len(payload))
	out = append(out, typeMark...)
	out = append(out, typ...)
	out = append(out, 0)
	return append(out, payload...)
}

// splitTyped returns the type and inner payload of a typed payload.
func splitTyped(p []byte) (typ string, payload []byte, ok bool) {
	rest, found := bytes.CutPrefix(p, []byte(typeMark))
	if !found {
		return "", nil, false
	}
	i := bytes.IndexByte(rest, 0)
	if i <= 0 {
		return "", nil, false
	}
	return string(rest[:i]), rest[i+1:], true
}

// Mux serves one queue with a handler per task type: tasks enqueued with
// EnqueueOpts.Type are routed by their type, and their
// handler sees Task.Type and the payload as it was given (on a merging
// ordered queue, each of Task.Payloads too). A task with no type goes to
// the Fallback handler; a task of a type nobody handles (or with no type
// and no Fallback) goes to the dead set at once, naming it, and so does a
// task of a merging ordered queue whose merged payloads are of several
// types (or some of none): enqueue each type with its own keys.
type Mux struct {
	handlers map[string]Handler
	// Fallback, when set, runs tasks that carry no type.
	Fallback Handler
}

// NewMux returns an empty Mux.
func NewMux() *Mux { return &Mux{handlers: map[string]Handler{}} }

// Handle routes tasks of type typ to h. It panics on a bad or repeated type
// or a nil handler: a wiring mistake, found at start.
func (m *Mux) Handle(typ string, h Handler) {
	if err := checkName("task type", typ); err != nil {
		panic(err)
	}
	if h == nil {
		panic(fmt.Sprintf("worqr: Mux.Handle(%q): handler is nil", typ))
	}
	if _, dup := m.handlers[typ]; dup {
		panic(fmt.Sprintf("worqr: Mux.Handle(%q): type already handled", typ))
	}
	m.handlers[typ] = h
}

// HandleTask routes t by its type.
func (m *Mux) HandleTask(ctx context.Context, t *Task) error {
	typ, payload, ok := splitTyped(t.Payload)
	if !ok {
		if m.Fallback != nil {
			return m.Fallback.HandleTask(ctx, t)
		}
		return SkipRetry(fmt.Errorf("worqr: task %s carries no type and the Mux has no Fallback", t.ID))
	}
	h := m.handlers[typ]
	if h == nil {
		return SkipRetry(fmt.Errorf("worqr: no handler for task type %q (handled: %s)", typ, strings.Join(m.types(), ", ")))
	}
	typed := *t
	typed.Type, typed.Payload = typ, payload
	if len(t.Payloads) > 0 {
		ps, err := typedPayloads(t, typ)
		if err != nil {
			return err
		}
		typed.Payloads = ps
	}
	err := h.HandleTask(ctx, &typed)
	t.result = typed.result
	return err
}

// typedPayloads returns the payloads of a merged task (KeyPolicy.Merge)
// out of their tags, each of type typ. A task that merged payloads of
// another type, or of none, is refused (SkipRetry, its payloads kept in
// the dead set): no one handler serves them all.
func typedPayloads(t *Task, typ string) ([]Payload, error) {
	out := make([]Payload, len(t.Payloads))
	for i, p := range t.Payloads {
		pt, inner, ok := splitTyped(p.Data)
		if !ok || pt != typ {
			other := "no type"
			if ok {
				other = strconv.Quote(pt)
			}
			return nil, SkipRetry(fmt.Errorf("worqr: task %s merged payloads of type %q and of %s (Payloads[%d]): a Mux runs a task with one type's handler", t.ID, typ, other, i))
		}
		out[i] = Payload{Data: inner, Score: p.Score}
	}
	return out, nil
}

func (m *Mux) types() []string {
	out := make([]string, 0, len(m.handlers))
	for k := range m.handlers {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Middleware wraps a Handler: logging, metrics, tracing, recovery...
type Middleware func(next Handler) Handler

// Chain wraps h in mws; the first is the outermost (it runs first).
func Chain(h Handler, mws ...Middleware) Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// StageMiddleware wraps a StageHandler, as Middleware wraps a Handler.
type StageMiddleware func(next StageHandler) StageHandler

// ChainStage wraps h in mws; the first is the outermost (it runs first).
func ChainStage(h StageHandler, mws ...StageMiddleware) StageHandler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// Observe is a Middleware that calls fn after each run of a handler with how
// long it took and what it returned (for metrics).
func Observe(fn func(t *Task, took time.Duration, err error)) Middleware {
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, t *Task) error {
			start := time.Now()
			err := next.HandleTask(ctx, t)
			fn(t, time.Since(start), err)
			return err
		})
	}
}

// Log is a Middleware that logs each run of a handler: at Debug when it
// succeeds, at Warn when it fails, with the task, attempt and duration.
func Log(logger *slog.Logger) Middleware {
	return Observe(func(t *Task, took time.Duration, err error) {
		attrs := []any{"queue", t.Queue, "task_id", t.ID, "attempt", t.Attempt, "took", took}
		if err != nil {
			logger.Warn("worqr: task failed", append(attrs, "err", err)...)
			return
		}
		logger.Debug("worqr: task done", attrs...)
	})
}
