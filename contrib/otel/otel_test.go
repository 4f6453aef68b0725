package otelworqr_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/xid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	otelworqr "github.com/worqr/worqr-go/contrib/otel"
	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// env is one test's namespace, with a client and a tracer provider whose
// ended spans the recorder keeps.
type env struct {
	t      *testing.T
	pool   *redis.Pool
	cfg    worqr.Config
	client *worqr.Client
	in     *worqr.Inspector
	sr     *tracetest.SpanRecorder
	ended  *endSignal
	tp     *sdktrace.TracerProvider
}

// endSignal is a span processor that says when a span ended (after the
// recorder registered before it kept it).
type endSignal struct{ c chan struct{} }

func (s *endSignal) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (s *endSignal) OnEnd(sdktrace.ReadOnlySpan) {
	select {
	case s.c <- struct{}{}:
	default:
	}
}
func (s *endSignal) Shutdown(context.Context) error   { return nil }
func (s *endSignal) ForceFlush(context.Context) error { return nil }

func setup(t *testing.T) *env {
	t.Helper()
	t.Parallel()
	pool, err := redisconn.NewPool(redisURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	cfg := worqr.Config{Namespace: "oteltest-" + xid.New().String()}
	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = in.DeleteNamespace(context.Background()) })
	sr := tracetest.NewSpanRecorder()
	ended := &endSignal{c: make(chan struct{}, 1)}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr), sdktrace.WithSpanProcessor(ended))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &env{t: t, pool: pool, cfg: cfg, client: client, in: in, sr: sr, ended: ended, tp: tp}
}

// worker starts a worker serving queue with h, wrapped in the tracing
// middleware (and mws after it); it is stopped at the end of the test.
func (e *env) worker(queue string, qc worqr.QueueConfig, mws ...worqr.Middleware) {
	e.t.Helper()
	e.workerWith(queue, qc, append([]worqr.Middleware{otelworqr.Middleware(e.tp)}, mws...))
}

// workerWith starts a worker serving queue with h wrapped in mws only.
func (e *env) workerWith(queue string, qc worqr.QueueConfig, mws []worqr.Middleware) {
	e.t.Helper()
	qc.Concurrency = 1
	w, err := worqr.NewWorker(e.pool, &worqr.WorkerConfig{Config: e.cfg,
		Queues:            map[string]worqr.QueueConfig{queue: qc},
		Middleware:        mws,
		HeartbeatInterval: 100 * time.Millisecond, HeartbeatTTL: 500 * time.Millisecond,
		ReaperInterval: 100 * time.Millisecond, PollInterval: 100 * time.Millisecond})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
}

// spans waits until n ended spans named name are recorded and returns them.
func (e *env) spans(name string, n int) []sdktrace.ReadOnlySpan {
	e.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		var got []sdktrace.ReadOnlySpan
		for _, s := range e.sr.Ended() {
			if s.Name() == name {
				got = append(got, s)
			}
		}
		if len(got) >= n {
			return got
		}
		select {
		case <-e.ended.c: // a span ended since the last check
		case <-timeout:
			e.t.Fatalf("after 10s: ended spans named %s: %s", name, strings.Join(names(e.sr.Ended()), ", "))
		}
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	out := []string{}
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

// seen is what a handler observed of one run.
type seen struct {
	payload []byte
	typ     string
	sc      trace.SpanContext
}

// recorder returns a handler that reports what it saw on ch and returns
// err.
func recorder(ch chan<- seen, err error) worqr.Handler {
	return worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
		ch <- seen{payload: append([]byte(nil), t.Payload...), typ: t.Type, sc: trace.SpanContextFromContext(ctx)}
		return err
	})
}

func receive(t *testing.T, ch <-chan seen) seen {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not run within 10s")
		return seen{}
	}
}

// attrs checks that s has every attribute of want.
func attrs(t *testing.T, s sdktrace.ReadOnlySpan, want ...attribute.KeyValue) {
	t.Helper()
	have := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		have[kv.Key] = kv.Value
	}
	for _, kv := range want {
		if v, ok := have[kv.Key]; !ok || v != kv.Value {
			t.Errorf("span %q: %s = %v (present %v), want %v", s.Name(), kv.Key, v.Emit(), ok, kv.Value.Emit())
		}
	}
}

func TestEnqueueThenProcess(t *testing.T) {
	e := setup(t)
	ctx, parent := e.tp.Tracer("test").Start(context.Background(), "request")
	id, err := otelworqr.Enqueue(ctx, e.client, e.in, "q", []byte("hello"), nil, e.tp)
	parent.End()
	if err != nil {
		t.Fatal(err)
	}
	// The payload is stored as given; the span context is in the task's
	// metadata.
	info, err := e.in.Task(context.Background(), "q", id)
	if err != nil {
		t.Fatal(err)
	}
	if string(info.Payload) != "hello" || !strings.HasPrefix(info.Meta["traceparent"], "00-") {
		t.Errorf("stored payload %q, meta %v: want %q as given and a traceparent in the metadata", info.Payload, info.Meta, "hello")
	}

	ch := make(chan seen, 1)
	e.worker("q", worqr.QueueConfig{Handler: recorder(ch, nil)})
	got := receive(t, ch)
	if string(got.payload) != "hello" {
		t.Errorf("handler saw payload %q, want %q", got.payload, "hello")
	}

	prod := e.spans("q send", 1)[0]
	cons := e.spans("q process", 1)[0]
	if prod.SpanKind() != trace.SpanKindProducer {
		t.Errorf("producer span kind %v", prod.SpanKind())
	}
	if prod.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("producer span's parent %v, want the caller's span %v", prod.Parent().SpanID(), parent.SpanContext().SpanID())
	}
	attrs(t, prod,
		attribute.String("messaging.system", "worqr"),
		attribute.String("messaging.destination.name", "q"),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.message.id", id))

	if cons.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("consumer span kind %v", cons.SpanKind())
	}
	attrs(t, cons,
		attribute.String("messaging.system", "worqr"),
		attribute.String("messaging.destination.name", "q"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.message.id", id),
		attribute.Int("worqr.attempt", 1),
		attribute.Int("worqr.crashes", 0))
	if links := cons.Links(); len(links) != 1 || !links[0].SpanContext.Equal(prod.SpanContext().WithRemote(true)) {
		t.Errorf("consumer links %+v, want one to the producer span %v", links, prod.SpanContext())
	}
	if cons.Parent().SpanID() != prod.SpanContext().SpanID() || cons.SpanContext().TraceID() != prod.SpanContext().TraceID() {
		t.Errorf("consumer span (trace %v, parent %v) is not the producer's child (trace %v, span %v)",
			cons.SpanContext().TraceID(), cons.Parent().SpanID(), prod.SpanContext().TraceID(), prod.SpanContext().SpanID())
	}
	if !got.sc.Equal(cons.SpanContext()) {
		t.Errorf("the handler's context holds span %v, want the consumer span %v", got.sc, cons.SpanContext())
	}
	if cons.Status().Code != codes.Unset || len(cons.Events()) != 0 {
		t.Errorf("successful run: status %+v, events %v", cons.Status(), cons.Events())
	}
}

func TestFailingHandlerMarksSpanError(t *testing.T) {
	e := setup(t)
	id, err := otelworqr.Enqueue(context.Background(), e.client, e.in, "q", []byte("x"), nil, e.tp)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan seen, 2)
	e.worker("q", worqr.QueueConfig{Handler: recorder(ch, errors.New("boom")), MaxAttempts: 2,
		Backoff: func(int, error) time.Duration { return 0 }})
	receive(t, ch)
	receive(t, ch)
	cons := e.spans("q process", 2)
	for i, s := range cons {
		if s.Status().Code != codes.Error || s.Status().Description != "boom" {
			t.Errorf("run %d: status %+v, want Error boom", i+1, s.Status())
		}
		ev := s.Events()
		if len(ev) != 1 || ev[0].Name != "exception" {
			t.Fatalf("run %d: events %+v, want one exception", i+1, ev)
		}
		attrs(t, s, attribute.String("messaging.message.id", id))
	}
	for i, s := range cons {
		found := false
		for _, kv := range s.Events()[0].Attributes {
			if kv.Key == "exception.message" && kv.Value.AsString() == "boom" {
				found = true
			}
		}
		if !found {
			t.Errorf("run %d: the exception event does not hold the error: %+v", i+1, s.Events()[0].Attributes)
		}
	}
	// Both attempts are children of the one producer span, numbered.
	prod := e.spans("q send", 1)[0]
	attempts := map[int64]bool{}
	for _, s := range cons {
		if s.Parent().SpanID() != prod.SpanContext().SpanID() {
			t.Errorf("a retry's span is not the producer's child")
		}
		for _, kv := range s.Attributes() {
			if kv.Key == "worqr.attempt" {
				attempts[kv.Value.AsInt64()] = true
			}
		}
	}
	if !attempts[1] || !attempts[2] {
		t.Errorf("worqr.attempt over the runs: %v, want 1 and 2", attempts)
	}
}

// A typed task (EnqueueOpts.Type) enqueued traced reaches the handler of
// its type with its payload as given and its span a child of the
// producer's, with or without a Key (the context in its metadata either
// way, the payload stored as given), whether Middleware wraps the Mux or
// the Mux's handler.
func TestTypedTasksAreTraced(t *testing.T) {
	for _, tc := range []struct {
		name       string
		key        string
		muxOutside bool // Middleware inside the Mux, around the type's handler
	}{
		{"plain, Middleware around the Mux", "", false},
		{"plain, Middleware inside the Mux", "", true},
		{"keyed, Middleware around the Mux", "k", false},
		{"keyed, Middleware inside the Mux", "k", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			ctx := context.Background()
			id, err := otelworqr.Enqueue(ctx, e.client, e.in, "q", []byte("hi"), &worqr.EnqueueOpts{Type: "greet", Key: tc.key}, e.tp)
			if err != nil {
				t.Fatal(err)
			}
			info, err := e.in.Task(ctx, "q", id)
			if err != nil {
				t.Fatal(err)
			}
			if want := "\x00wqt:greet\x00hi"; string(info.Payload) != want || info.Meta["traceparent"] == "" {
				t.Errorf("stored payload %q, meta %v; want %q and the span context in the metadata", info.Payload, info.Meta, want)
			}
			ch := make(chan seen, 1)
			mux := worqr.NewMux()
			if tc.muxOutside {
				mux.Handle("greet", otelworqr.Middleware(e.tp)(recorder(ch, nil)))
				e.workerWith("q", worqr.QueueConfig{Handler: mux}, nil)
			} else {
				mux.Handle("greet", recorder(ch, nil))
				e.worker("q", worqr.QueueConfig{Handler: mux})
			}
			got := receive(t, ch)
			if got.typ != "greet" || string(got.payload) != "hi" {
				t.Errorf("the Mux's handler saw type %q payload %q, want greet, hi", got.typ, got.payload)
			}
			prod := e.spans("q send", 1)[0]
			cons := e.spans("q process", 1)[0]
			if cons.Parent().SpanID() != prod.SpanContext().SpanID() || len(cons.Links()) != 1 ||
				cons.Links()[0].SpanContext.SpanID() != prod.SpanContext().SpanID() {
				t.Errorf("consumer span: parent %v, links %v; want the producer span %v as both", cons.Parent().SpanID(), cons.Links(), prod.SpanContext().SpanID())
			}
			attrs(t, cons, attribute.String("worqr.task.type", "greet"), attribute.String("messaging.message.id", id))
			if cons.Status().Code != codes.Unset {
				t.Errorf("status %+v: the Mux did not route the task", cons.Status())
			}
		})
	}
	t.Run("a bad type of a keyed enqueue is refused by its field", func(t *testing.T) {
		e := setup(t)
		_, err := otelworqr.Enqueue(context.Background(), e.client, e.in, "q", []byte("hi"), &worqr.EnqueueOpts{Type: "bad type", Key: "k"}, e.tp)
		var ie *worqr.InvalidError
		if !errors.As(err, &ie) || ie.Field != "EnqueueOpts.Type" {
			t.Errorf("Enqueue with a bad type = %v, want an InvalidError naming EnqueueOpts.Type", err)
		}
	})
}

func TestNoEnvelopeGivesRootSpan(t *testing.T) {
	e := setup(t)
	id, err := e.client.Enqueue(context.Background(), "q", []byte("plain"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan seen, 1)
	e.worker("q", worqr.QueueConfig{Handler: recorder(ch, nil)})
	if got := receive(t, ch); string(got.payload) != "plain" {
		t.Errorf("handler saw %q", got.payload)
	}
	cons := e.spans("q process", 1)[0]
	if cons.Parent().IsValid() || len(cons.Links()) != 0 {
		t.Errorf("span of a task without envelope: parent %v, links %v; want a root span", cons.Parent(), cons.Links())
	}
	attrs(t, cons, attribute.String("messaging.message.id", id))
}

func TestResultAndGiveBackThroughTheEnvelope(t *testing.T) {
	e := setup(t)
	id, err := otelworqr.Enqueue(context.Background(), e.client, e.in, "q", []byte("x"), nil, e.tp)
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	e.worker("q", worqr.QueueConfig{Retention: time.Minute, Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
		runs++
		if runs == 1 {
			return worqr.ErrGiveBack
		}
		t.SetResult([]byte("res:" + string(t.Payload)))
		return nil
	})})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := e.client.Wait(ctx, "q", id) // woken by the task's end event
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if info.State != worqr.StateDone || string(info.Result) != "res:x" {
		t.Fatalf("task %s result %s, want done with res:x", info.State, info.Result)
	}
	cons := e.spans("q process", 2)
	given := 0
	for _, s := range cons {
		if s.Status().Code != codes.Unset {
			t.Errorf("status %+v: a give-back or success is no error", s.Status())
		}
		for _, kv := range s.Attributes() {
			if kv.Key == "worqr.gave_back" && kv.Value.AsBool() {
				given++
			}
		}
	}
	if given != 1 {
		t.Errorf("%d spans with worqr.gave_back, want 1", given)
	}
}

func TestRepeatedIDIsIdempotent(t *testing.T) {
	e := setup(t)
	opts := &worqr.EnqueueOpts{ID: "order-7"}
	id1, err := otelworqr.Enqueue(context.Background(), e.client, e.in, "q", []byte("x"), opts, e.tp)
	if err != nil {
		t.Fatal(err)
	}
	id2, err := otelworqr.Enqueue(context.Background(), e.client, e.in, "q", []byte("x"), opts, e.tp)
	if err != nil || id1 != "order-7" || id2 != id1 {
		t.Fatalf("repeated enqueue: %q, %q, %v; want order-7 twice, no error", id1, id2, err)
	}
	if _, err := otelworqr.Enqueue(context.Background(), e.client, e.in, "q", []byte("other"), opts, e.tp); !errors.Is(err, worqr.ErrDuplicate) {
		t.Fatalf("same ID, other payload: %v, want ErrDuplicate", err)
	}
	sends := e.spans("q send", 3)
	if sends[2].Status().Code != codes.Error || sends[0].Status().Code != codes.Unset || sends[1].Status().Code != codes.Unset {
		t.Errorf("send statuses %v %v %v, want Unset Unset Error", sends[0].Status(), sends[1].Status(), sends[2].Status())
	}
}

func TestEnqueueBatch(t *testing.T) {
	e := setup(t)
	ids, err := otelworqr.EnqueueBatch(context.Background(), e.client, "q", [][]byte{[]byte("a"), []byte("b")}, nil, e.tp)
	if err != nil || len(ids) != 2 {
		t.Fatal(ids, err)
	}
	ch := make(chan seen, 2)
	e.worker("q", worqr.QueueConfig{Handler: recorder(ch, nil)})
	got := map[string]bool{string(receive(t, ch).payload): true, string(receive(t, ch).payload): true}
	if !got["a"] || !got["b"] {
		t.Errorf("handler saw %v", got)
	}
	prod := e.spans("q send", 1)[0]
	attrs(t, prod, attribute.Int("messaging.batch.message_count", 2))
	for _, s := range e.spans("q process", 2) {
		if len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID() != prod.SpanContext().SpanID() {
			t.Errorf("consumer links %v, want the batch's send span", s.Links())
		}
	}
}

// A task enqueued by an earlier version carries its span context in an
// envelope around its payload: its trace goes on across a rolling upgrade,
// and the handler sees the payload without it.
func TestEnvelopeOfAnEarlierVersionStillTraced(t *testing.T) {
	e := setup(t)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	id, err := e.client.Enqueue(context.Background(), "q", []byte("\x00wqh:"+tp+"\x00old"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan seen, 1)
	e.worker("q", worqr.QueueConfig{Handler: recorder(ch, nil)})
	if got := receive(t, ch); string(got.payload) != "old" {
		t.Errorf("handler saw %q, want the payload out of its envelope", got.payload)
	}
	cons := e.spans("q process", 1)[0]
	if cons.Parent().SpanID().String() != "00f067aa0ba902b7" || cons.SpanContext().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("consumer span: trace %v parent %v; want the envelope's", cons.SpanContext().TraceID(), cons.Parent().SpanID())
	}
	attrs(t, cons, attribute.String("messaging.message.id", id))
}

// The caller's own metadata goes with the span context; the payload and
// the caller's options are left as given.
func TestEnqueueKeepsTheCallersMeta(t *testing.T) {
	e := setup(t)
	opts := &worqr.EnqueueOpts{Meta: map[string]string{"tenant": "t1"}}
	ids, err := otelworqr.EnqueueBatch(context.Background(), e.client, "q", [][]byte{[]byte("a")}, opts, e.tp)
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.Meta) != 1 {
		t.Errorf("the caller's EnqueueOpts.Meta was changed: %v", opts.Meta)
	}
	info, err := e.in.Task(context.Background(), "q", ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if string(info.Payload) != "a" || info.Meta["tenant"] != "t1" || info.Meta["traceparent"] == "" {
		t.Errorf("stored payload %q meta %v; want a, the caller's tenant and a traceparent", info.Payload, info.Meta)
	}
}

func TestNoSpanContextNoEnvelope(t *testing.T) {
	e := setup(t)
	id, err := otelworqr.Enqueue(context.Background(), e.client, e.in, "q", []byte("x"), nil, noop.NewTracerProvider())
	if err != nil {
		t.Fatal(err)
	}
	info, err := e.in.Task(context.Background(), "q", id)
	if err != nil {
		t.Fatal(err)
	}
	if string(info.Payload) != "x" {
		t.Errorf("stored %q: without a span context the payload goes as it is", info.Payload)
	}
}
