package otelworqr_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	otelworqr "github.com/worqr/worqr-go/contrib/otel"
	"github.com/worqr/worqr-go/worqr"
)

// traceFlow is a 3-stage flow: "check", then "split" fans out n children
// into "part", then "merge". failFirst makes the first attempt of "check"
// fail (it has 2 attempts, no backoff).
func traceFlow(name string, n int, failFirst bool) *worqr.Flow {
	var checks atomic.Int32
	noop := func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return nil, nil }
	return &worqr.Flow{Name: name, Stages: []worqr.Stage{
		{Name: name + "-check", Queue: worqr.QueueConfig{Concurrency: 1, MaxAttempts: 2,
			Backoff: func(int, error) time.Duration { return 0 }},
			Handler: worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				if failFirst && checks.Add(1) == 1 {
					return nil, errors.New("not yet")
				}
				return &worqr.StageResult{Fields: map[string]string{"checked": "yes"}}, nil
			})},
		{Name: name + "-split", Queue: worqr.QueueConfig{Concurrency: 1},
			Handler: worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				res := &worqr.StageResult{}
				for i := range n {
					res.Children = append(res.Children, worqr.ChildSpec{Queue: name + "-part", Payload: []byte(fmt.Sprint(i))})
				}
				return res, nil
			}),
			Children: map[string]worqr.QueueConfig{name + "-part": {Concurrency: 2,
				Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error { return nil })}}},
		{Name: name + "-merge", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(noop)},
	}}
}

// flowWorker serves flow with both tracing middlewares.
func (e *env) flowWorker(flow *worqr.Flow) {
	e.t.Helper()
	w, err := worqr.NewWorker(e.pool, &worqr.WorkerConfig{Config: e.cfg,
		Flows:             []*worqr.Flow{flow},
		Middleware:        []worqr.Middleware{otelworqr.Middleware(e.tp)},
		StageMiddleware:   []worqr.StageMiddleware{otelworqr.StageMiddleware(e.tp)},
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

// runDone waits until run id of flow has ended, checks that it is done
// and returns it.
func (e *env) runDone(flow *worqr.Flow, id string) *worqr.RunInfo {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := e.client.WaitRun(ctx, flow, id) // woken by the run's events
	if err != nil {
		e.t.Fatalf("WaitRun %s: %v", id, err)
	}
	if info.Status != worqr.RunDone {
		e.t.Fatalf("run %s: %s at %s (%s), want done", id, info.Status, info.Stage, info.LastError)
	}
	return info
}

// childOf checks that span s is a child of parent, in its trace, and links
// to it (the messaging conventions' link, as task spans have).
func childOf(t *testing.T, s, parent sdktrace.ReadOnlySpan) {
	t.Helper()
	if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
		t.Errorf("span %q (trace %v, parent %v) is not a child of %q (trace %v, span %v)", s.Name(),
			s.SpanContext().TraceID(), s.Parent().SpanID(), parent.Name(), parent.SpanContext().TraceID(), parent.SpanContext().SpanID())
	}
	if links := s.Links(); len(links) != 1 || links[0].SpanContext.SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("span %q links %+v, want one to %q", s.Name(), links, parent.Name())
	}
	if s.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("span %q kind %v, want consumer", s.Name(), s.SpanKind())
	}
}

// A traced run is one trace: the run's producer span is its root, every
// stage attempt (a retry included) is a child of it, and the children a
// stage fans out are children of that stage's span.
func TestFlowRunIsOneTrace(t *testing.T) {
	e := setup(t)
	flow := traceFlow("tf", 3, true)
	e.flowWorker(flow)
	id, err := otelworqr.StartRun(context.Background(), e.client, flow, map[string]string{"user": "u1"}, nil, e.tp)
	if err != nil {
		t.Fatal(err)
	}
	info := e.runDone(flow, id)
	// The context is in the run's metadata, not its state.
	if info.Meta["traceparent"] == "" || len(info.State) != 2 || info.State["user"] != "u1" {
		t.Errorf("run meta %v, state %v: want a traceparent in the metadata and the state untouched", info.Meta, info.State)
	}

	run := e.spans("tf send", 1)[0]
	if run.Parent().IsValid() || run.SpanKind() != trace.SpanKindProducer {
		t.Errorf("run span: parent %v, kind %v; want a root producer span", run.Parent(), run.SpanKind())
	}
	attrs(t, run, attribute.String("messaging.system", "worqr"), attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.destination.name", "tf-check"), attribute.String("worqr.flow", "tf"),
		attribute.String("messaging.message.id", id))

	checks := e.spans("tf-check process", 2)
	statuses := map[codes.Code]int{}
	for _, s := range checks {
		childOf(t, s, run)
		statuses[s.Status().Code]++
		attrs(t, s, attribute.String("messaging.message.id", id), attribute.String("worqr.flow", "tf"),
			attribute.String("messaging.destination.name", "tf-check"), attribute.String("messaging.operation.type", "process"))
	}
	if statuses[codes.Error] != 1 || statuses[codes.Unset] != 1 {
		t.Errorf("check attempts' statuses %v, want one Error (the failed attempt) and one Unset", statuses)
	}
	split := e.spans("tf-split process", 1)[0]
	childOf(t, split, run)
	attrs(t, split, attribute.Int("worqr.children", 3))
	merge := e.spans("tf-merge process", 1)[0]
	childOf(t, merge, run)
	parts := e.spans("tf-part process", 3)
	for _, s := range parts {
		childOf(t, s, split)
	}
	// Nothing else was traced, and all of it is one trace.
	ended := e.sr.Ended()
	if len(ended) != 1+2+1+3+1 {
		t.Errorf("%d spans ended: %v", len(ended), names(ended))
	}
	for _, s := range ended {
		if s.SpanContext().TraceID() != run.SpanContext().TraceID() {
			t.Errorf("span %q is in trace %v, not the run's %v", s.Name(), s.SpanContext().TraceID(), run.SpanContext().TraceID())
		}
	}
}

// StartRun's span is a child of the caller's; a run started without a span
// context (Client.StartRun) gets root stage spans, and its children are
// still under their stage's span.
func TestFlowRunParents(t *testing.T) {
	e := setup(t)
	flow := traceFlow("tp", 2, false)
	e.flowWorker(flow)
	ctx, req := e.tp.Tracer("test").Start(context.Background(), "request")
	id, err := otelworqr.StartRun(ctx, e.client, flow, nil, &worqr.RunOpts{Meta: map[string]string{"tenant": "t1"}}, e.tp)
	req.End()
	if err != nil {
		t.Fatal(err)
	}
	if info := e.runDone(flow, id); info.Meta["tenant"] != "t1" || info.Meta["traceparent"] == "" {
		t.Errorf("run meta %v: want the caller's metadata and the trace context", info.Meta)
	}
	run := e.spans("tp send", 1)[0]
	if run.Parent().SpanID() != req.SpanContext().SpanID() {
		t.Errorf("run span's parent %v, want the caller's span %v", run.Parent().SpanID(), req.SpanContext().SpanID())
	}

	plain, err := e.client.StartRun(context.Background(), flow, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.runDone(flow, plain)
	var splits []sdktrace.ReadOnlySpan
	for _, s := range e.spans("tp-split process", 2) {
		if s.Parent().IsValid() {
			childOf(t, s, run)
			continue
		}
		if len(s.Links()) != 0 {
			t.Errorf("root stage span with links %v", s.Links())
		}
		splits = append(splits, s)
	}
	if len(splits) != 1 {
		t.Fatalf("%d root split spans, want 1 (the untraced run's)", len(splits))
	}
	under := 0
	for _, s := range e.spans("tp-part process", 4) {
		if s.Parent().SpanID() == splits[0].SpanContext().SpanID() {
			childOf(t, s, splits[0])
			under++
		}
	}
	if under != 2 {
		t.Errorf("%d children under the untraced run's split span, want 2", under)
	}
}

// StageMiddleware hands the worker a copy of the stage's result whose
// children carry the stage span's context beside their own metadata, and
// leaves the handler's result as it was; a panic is recorded and goes on.
func TestStageMiddlewareResultAndPanic(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	mine := &worqr.StageResult{Children: []worqr.ChildSpec{{Queue: "k", Meta: map[string]string{"own": "1"}}, {Queue: "k"}}}
	h := otelworqr.StageMiddleware(tp)(worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
		return mine, nil
	}))
	got, err := h.HandleStage(context.Background(), &worqr.Run{ID: "r", Flow: "f", Stage: "s", Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	stage := sr.Ended()[0]
	want := fmt.Sprintf("00-%s-%s-01", stage.SpanContext().TraceID(), stage.SpanContext().SpanID())
	if got == mine || len(got.Children) != 2 || got.Children[0].Meta["own"] != "1" ||
		got.Children[0].Meta["traceparent"] != want || got.Children[1].Meta["traceparent"] != want {
		t.Errorf("result %+v: want a copy whose children carry traceparent %s", got, want)
	}
	if len(mine.Children[0].Meta) != 1 || mine.Children[1].Meta != nil {
		t.Errorf("the handler's own result was changed: %+v", mine)
	}

	p := otelworqr.StageMiddleware(tp)(worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
		panic("kaput")
	}))
	func() {
		defer func() {
			if v := recover(); v != "kaput" {
				t.Errorf("recovered %v, want the stage's panic to go on", v)
			}
		}()
		_, _ = p.HandleStage(context.Background(), &worqr.Run{ID: "r", Flow: "f", Stage: "s", Attempt: 1})
	}()
	if ended := sr.Ended(); len(ended) != 2 || ended[1].Status().Code != codes.Error || ended[1].Status().Description != "panic: kaput" {
		t.Errorf("spans %v: want the second ended with status Error panic: kaput", names(ended))
	}
}

// A stage that sleeps or waits for a signal says so on its span
// (worqr.sleep_ms, worqr.await, worqr.again), and Signal sends one in a
// span of its own ("<flow> signal") saying whether the run got it.
func TestStageSleepAwaitAndSignalSpans(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	flow := &worqr.Flow{Name: "pay", Stages: []worqr.Stage{
		{Name: "charge", Queue: worqr.QueueConfig{Concurrency: 1},
			Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
				return &worqr.StageResult{Await: "paid", Sleep: time.Hour}, nil
			})},
		{Name: "ship", Queue: worqr.QueueConfig{Concurrency: 1},
			Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return nil, nil })},
	}}
	e.flowWorker(flow)
	id, err := otelworqr.StartRun(ctx, e.client, flow, nil, nil, e.tp)
	if err != nil {
		t.Fatal(err)
	}
	charge := e.spans("charge process", 1)[0]
	attrs(t, charge, attribute.Int64("worqr.sleep_ms", 3_600_000), attribute.String("worqr.await", "paid"))
	// (The stage's span ends before its end reaches Redis: a signal sent
	// in between is kept, and taken by that end at once.)
	delivered, err := otelworqr.Signal(ctx, e.client, flow, id, "paid", []byte("yes"), "", e.tp)
	if err != nil {
		t.Fatal(err)
	}
	e.runDone(flow, id)
	sig := e.spans("pay signal", 1)[0]
	attrs(t, sig, attribute.String("worqr.signal", "paid"), attribute.String("messaging.message.id", id),
		attribute.Bool("worqr.signal.delivered", delivered))
	if sig.SpanKind() != trace.SpanKindProducer {
		t.Errorf("signal span kind %v, want producer", sig.SpanKind())
	}
}
