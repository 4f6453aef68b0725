package worqr

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
)

type order struct {
	ID    int    `json:"id"`
	Email string `json:"email"`
}

func TestHandleDecodesOrBuries(t *testing.T) {
	var got order
	h := Handle(func(_ context.Context, _ *Task, v order) error { got = v; return nil }, nil)
	if err := h.HandleTask(context.Background(), &Task{ID: "a", Payload: []byte(`{"id":7,"email":"x@y"}`)}); err != nil {
		t.Fatal(err)
	}
	if got != (order{ID: 7, Email: "x@y"}) {
		t.Errorf("decoded %+v", got)
	}
	err := h.HandleTask(context.Background(), &Task{ID: "b", Payload: []byte(`not json`)})
	if !errors.Is(err, ErrSkipRetry) || !strings.Contains(err.Error(), "does not decode into worqr.order") {
		t.Errorf("bad payload: %v, want a SkipRetry error naming the type", err)
	}
	// A task enqueued with a type on a queue served by Handle: the error
	// says so, not "invalid character '\x00'".
	typed := typedPayload("order.new", []byte(`{"id":8}`))
	err = h.HandleTask(context.Background(), &Task{ID: "c", Payload: typed})
	if !errors.Is(err, ErrSkipRetry) || !strings.Contains(err.Error(), `carries task type "order.new"`) ||
		!strings.Contains(err.Error(), "Mux") {
		t.Errorf("typed payload: %v, want a SkipRetry error naming the task type and the Mux", err)
	}
}

func TestTypedPayloadRoundTrip(t *testing.T) {
	p := typedPayload("email.send", []byte("body\x00with nul"))
	typ, payload, ok := splitTyped(p)
	if !ok || typ != "email.send" || string(payload) != "body\x00with nul" {
		t.Errorf("splitTyped = %q %q %v", typ, payload, ok)
	}
	if _, _, ok := splitTyped([]byte("plain")); ok {
		t.Error("a plain payload read as typed")
	}
}

func TestMuxRoutes(t *testing.T) {
	m := NewMux()
	var seen []string
	m.Handle("a", HandlerFunc(func(_ context.Context, t *Task) error {
		seen = append(seen, t.Type+":"+string(t.Payload))
		t.SetResult([]byte("ra"))
		return nil
	}))
	m.Handle("b", HandlerFunc(func(_ context.Context, t *Task) error { return errors.New("b failed") }))
	run := func(p []byte) (*Task, error) {
		task := &Task{ID: "x", Payload: p}
		return task, m.HandleTask(context.Background(), task)
	}
	pa := typedPayload("a", []byte("1"))
	task, err := run(pa)
	if err != nil || len(seen) != 1 || seen[0] != "a:1" || string(task.result) != "ra" {
		t.Errorf("type a: err %v, seen %v, result %q", err, seen, task.result)
	}
	pb := typedPayload("b", nil)
	if _, err := run(pb); err == nil || errors.Is(err, ErrSkipRetry) {
		t.Errorf("type b: %v, want its handler's error (retried)", err)
	}
	pc := typedPayload("c", nil)
	if _, err := run(pc); !errors.Is(err, ErrSkipRetry) || !strings.Contains(err.Error(), `"c"`) || !strings.Contains(err.Error(), "a, b") {
		t.Errorf("unknown type: %v, want SkipRetry naming it and the handled types", err)
	}
	if _, err := run([]byte("untyped")); !errors.Is(err, ErrSkipRetry) {
		t.Errorf("untyped without Fallback: %v, want SkipRetry", err)
	}
	m.Fallback = HandlerFunc(func(_ context.Context, t *Task) error { seen = append(seen, "fallback"); return nil })
	if _, err := run([]byte("untyped")); err != nil || seen[len(seen)-1] != "fallback" {
		t.Errorf("untyped with Fallback: %v %v", err, seen)
	}
	for _, bad := range []func(){
		func() { m.Handle("a", m.Fallback) },
		func() { m.Handle("", m.Fallback) },
		func() { m.Handle("d", nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("a wiring mistake did not panic")
				}
			}()
			bad()
		}()
	}
}

func TestChainOrder(t *testing.T) {
	var trail []string
	mw := func(name string) Middleware {
		return func(next Handler) Handler {
			return HandlerFunc(func(ctx context.Context, t *Task) error {
				trail = append(trail, name+">")
				err := next.HandleTask(ctx, t)
				trail = append(trail, "<"+name)
				return err
			})
		}
	}
	var observed time.Duration
	h := Chain(HandlerFunc(func(context.Context, *Task) error { trail = append(trail, "h"); return nil }),
		mw("outer"), mw("inner"), Observe(func(_ *Task, took time.Duration, _ error) { observed = took + 1 }))
	if err := h.HandleTask(context.Background(), &Task{}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(trail, " "); got != "outer> inner> h <inner <outer" {
		t.Errorf("order %q", got)
	}
	if observed == 0 {
		t.Error("Observe was not called")
	}
}

func TestEnqueueValueRefusesWhatDoesNotEncode(t *testing.T) {
	_, err := EnqueueValue(context.Background(), &Client{}, "q", make(chan int), nil, nil)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "does not encode (chan int)") {
		t.Errorf("EnqueueValue(chan) = %v, want an InvalidError", err)
	}
}

// MaxPayloadBytes bounds the caller's payload: the type's tag
// EnqueueOpts.Type adds is not counted, and a refusal names the caller's
// size (it counted the tag, and named the tagged size).
func TestEnqueueTypedLimitIsThePayloads(t *testing.T) {
	ctx := context.Background()
	pool := internalPool(t)
	c, err := NewClient(pool, &Config{Namespace: redistest.Namespace(), MaxPayloadBytes: 16})
	if err != nil {
		t.Fatal(err)
	}
	typ := &EnqueueOpts{Type: "email.send"}
	if _, err := c.Enqueue(ctx, "ty", []byte(strings.Repeat("p", 16)), typ); err != nil {
		t.Errorf("a typed payload of MaxPayloadBytes: %v", err)
	}
	_, err = c.Enqueue(ctx, "ty", []byte(strings.Repeat("p", 17)), typ)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "is 17 bytes, over MaxPayloadBytes (16)") {
		t.Errorf("a typed payload of 17 bytes: %v, want an InvalidError naming 17 bytes", err)
	}
	_, err = c.EnqueueBatch(ctx, "ty", [][]byte{[]byte("p"), []byte(strings.Repeat("p", 17))}, typ)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "payloads[1] is 17 bytes") {
		t.Errorf("a typed batch with a payload of 17 bytes: %v, want an InvalidError naming payloads[1]", err)
	}
}

// A payload that merely starts like a typed one ("\x00wqt:", then a nul
// far in) is not a task type's tag: MaxPayloadBytes counts all of it. Only
// what followed the first nul was counted, so a payload of any size went
// through Enqueue (and the gateway's), EnqueueBatch and EnqueueMerge.
func TestForgedTypeTagDoesNotEscapeTheLimit(t *testing.T) {
	ctx := context.Background()
	pool := internalPool(t)
	c, err := NewClient(pool, &Config{Namespace: redistest.Namespace(), MaxPayloadBytes: 16})
	if err != nil {
		t.Fatal(err)
	}
	forged := []byte(typeMark + strings.Repeat("x", 4096) + "\x00p")
	want := "is 4103 bytes, over MaxPayloadBytes (16)"
	_, err = c.Enqueue(ctx, "forged", forged, nil)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Errorf("Enqueue of a forged typed payload of 4,103 bytes: %v, want an InvalidError %q", err, want)
	}
	_, err = c.EnqueueBatch(ctx, "forged", [][]byte{forged}, &EnqueueOpts{MaxAttempts: 1})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Errorf("EnqueueBatch of it: %v, want an InvalidError %q", err, want)
	}
	bad := []byte(typeMark + "bad type\x00p")
	_, err = c.Enqueue(ctx, "forged", append(bad, strings.Repeat("q", 8)...), nil)
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("Enqueue of a 23-byte payload whose tag names no valid type: %v, want an InvalidError", err)
	}
	if n, err := c.st.Len(ctx, c.st.Queue(rdb.Standalone("forged"))); err != nil || n != 0 {
		t.Errorf("%d tasks enqueued (%v), want none", n, err)
	}
	if _, err := c.Enqueue(ctx, "forged", []byte(strings.Repeat("p", 16)), &EnqueueOpts{Type: "email.send"}); err != nil {
		t.Errorf("a real typed payload of MaxPayloadBytes: %v", err)
	}
}
