package otelworqr_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
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
	"github.com/worqr/worqr-go/remote"
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

// goexits runs f on a goroutine of its own and waits for it to end.
func goexits(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

// A handler (or a stage) that ends its goroutine with runtime.Goexit (as
// testing's t.FailNow does) fails its attempt (worqr.ErrHandlerExited):
// its span ended with status Unset and no error, as a success (found by an
// audit).
func TestGoexitMarksSpanError(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	h := otelworqr.Middleware(tp)(worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
		runtime.Goexit()
		return nil
	}))
	goexits(func() {
		_ = h.HandleTask(context.Background(), &worqr.Task{ID: "t1", Queue: "q", Payload: []byte("p"), Attempt: 1})
	})
	s := otelworqr.StageMiddleware(tp)(worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
		runtime.Goexit()
		return nil, nil
	}))
	goexits(func() {
		_, _ = s.HandleStage(context.Background(), &worqr.Run{ID: "r", Flow: "f", Stage: "s", Attempt: 1})
	})
	ended := sr.Ended()
	if len(ended) != 2 {
		t.Fatalf("%d spans ended, want 2", len(ended))
	}
	for _, sp := range ended {
		if sp.Status().Code != codes.Error {
			t.Errorf("span %q: status %v %q, want Error (the attempt failed: %v)", sp.Name(), sp.Status().Code, sp.Status().Description, worqr.ErrHandlerExited)
		}
		recorded := false
		for _, ev := range sp.Events() {
			for _, a := range ev.Attributes {
				if a.Key == "exception.message" && a.Value.AsString() == worqr.ErrHandlerExited.Error() {
					recorded = true
				}
			}
		}
		if !recorded {
			t.Errorf("span %q: no exception event for %v (events %v)", sp.Name(), worqr.ErrHandlerExited, sp.Events())
		}
	}
}

// A queue with KeyBatch: every task of the batch reaches the BatchHandler
// with its payload as enqueued, those of an earlier version (in a trace
// envelope) too, not only the batch's head.
func TestKeyBatchPayloadsUnwrapped(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(map[bool]string{false: "enqueued now", true: "enqueued by an earlier version"}[old], func(t *testing.T) {
			testKeyBatchPayloads(t, old)
		})
	}
}

func testKeyBatchPayloads(t *testing.T, old bool) {
	e := setup(t)
	ctx := context.Background()
	enqueueABC(ctx, t, e, old)
	var mu sync.Mutex
	var got [][]string
	handled := make(chan int, 10) // the size of each batch handled
	e.worker("kb", worqr.QueueConfig{KeyBatch: 3, BatchHandler: worqr.BatchHandlerFunc(func(ctx context.Context, b *worqr.Batch) error {
		var ps []string
		for _, tk := range b.Tasks {
			ps = append(ps, string(tk.Payload))
		}
		mu.Lock()
		got = append(got, ps)
		mu.Unlock()
		handled <- len(ps)
		return nil
	})})
	timeout := time.After(5 * time.Second)
	for n := 0; n < 3; {
		select {
		case k := <-handled:
			n += k
		case <-timeout:
			t.Fatalf("%d of 3 tasks reached the batch handler within 5s", n)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, g := range got {
		for _, p := range g {
			if p != `"a"` && p != `"b"` && p != `"c"` {
				t.Errorf("a batch handler got payload %q: the trace envelope was not removed (batches %q)", p, got)
			}
		}
	}
}

// The same with HandleBatchOf: every payload decodes (an envelope left
// on would send the batch's head to the dead set).
func TestKeyBatchTypedRuns(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(map[bool]string{false: "enqueued now", true: "enqueued by an earlier version"}[old], func(t *testing.T) {
			testKeyBatchTyped(t, old)
		})
	}
}

func testKeyBatchTyped(t *testing.T, old bool) {
	e := setup(t)
	ctx := context.Background()
	enqueueABC(ctx, t, e, old)
	var mu sync.Mutex
	var done []string
	// Each batch attempt, decoded or not, says how it ended (one attempt:
	// an error sends the batch's head to the dead set).
	attempts := make(chan error, 10)
	signal := func(next worqr.Handler) worqr.Handler {
		return worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			err := next.HandleTask(ctx, t)
			attempts <- err
			return err
		})
	}
	e.worker("kb", worqr.QueueConfig{KeyBatch: 3, MaxAttempts: 1, BatchHandler: worqr.HandleBatchOf(func(ctx context.Context, b *worqr.Batch, vs []string) error {
		mu.Lock()
		done = append(done, vs...)
		mu.Unlock()
		return nil
	}, nil)}, signal)
	timeout := time.After(10 * time.Second)
wait: // until the 3 are done, an attempt failed, or 10 s passed: checked below
	for {
		select {
		case err := <-attempts:
			mu.Lock()
			n := len(done)
			mu.Unlock()
			if err != nil || n == 3 {
				break wait
			}
		case <-timeout:
			break wait
		}
	}
	in, err := worqr.NewInspector(e.pool, &e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	qi, err := in.Queue(ctx, "kb")
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if qi.Dead != 0 || len(done) != 3 {
		t.Errorf("done %q, %d dead: want all 3 done", done, qi.Dead)
	}
}

// enqueueABC enqueues "a", "b" and "c" under key k of queue kb, traced,
// or (old) each in the envelope an earlier version put around it.
func enqueueABC(ctx context.Context, t *testing.T, e *env, old bool) {
	t.Helper()
	for _, p := range []string{`"a"`, `"b"`, `"c"`} {
		var err error
		if old {
			_, err = e.client.Enqueue(ctx, "kb", otelworqr.OldEnvelope(traced(e), []byte(p)), &worqr.EnqueueOpts{Key: "k"})
		} else {
			_, err = otelworqr.Enqueue(ctx, e.client, e.in, "kb", []byte(p), &worqr.EnqueueOpts{Key: "k"}, e.tp)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// traced returns a context holding a span of e's tracer (ended at once:
// only its context is used).
func traced(e *env) context.Context {
	ctx, span := e.tp.Tracer("test").Start(context.Background(), "producer")
	span.End()
	return ctx
}

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
