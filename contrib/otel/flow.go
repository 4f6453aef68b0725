package otelworqr

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/worqr/worqr-go/worqr"
)

// Attribute keys of flow spans.
const (
	FlowKey     = attribute.Key("worqr.flow")     // the flow's name
	ChildrenKey = attribute.Key("worqr.children") // how many children a stage fanned out
	// SleepKey, AwaitKey and AgainKey say how a stage moved its run on:
	// the sleep before its next stage (ms, StageResult.Sleep), the signal
	// it waits for (StageResult.Await), and that the stage runs again
	// (StageResult.Again). SignalKey names a signal (Signal's span), and
	// DeliveredKey says whether its run waited for it.
	SleepKey     = attribute.Key("worqr.sleep_ms")
	AwaitKey     = attribute.Key("worqr.await")
	AgainKey     = attribute.Key("worqr.again")
	SignalKey    = attribute.Key("worqr.signal")
	DeliveredKey = attribute.Key("worqr.signal.delivered")
)

// Signal sends signal name to run runID of flow as client.Signal does, in
// a producer span ("<flow> signal") of tp (the global TracerProvider when
// nil) with the run's id, the signal's name and whether the run waited
// for it (worqr.signal.delivered).
func Signal(ctx context.Context, client *worqr.Client, flow *worqr.Flow, runID, name string, payload []byte, sigID string, tp trace.TracerProvider) (bool, error) {
	attrs := []attribute.KeyValue{systemKV, semconv.MessagingOperationTypeSend, semconv.MessagingOperationName("signal"),
		semconv.MessagingMessageID(runID), SignalKey.String(name)}
	span := "signal"
	if flow != nil {
		span = flow.Name + " signal"
		attrs = append(attrs, FlowKey.String(flow.Name))
	}
	ctx, s := tracer(tp).Start(ctx, span, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	defer s.End()
	now, err := client.Signal(ctx, flow, runID, name, payload, sigID)
	if err != nil {
		fail(s, err)
		return false, err
	}
	s.SetAttributes(DeliveredKey.Bool(now))
	return now, nil
}

// StartRun starts a run of flow as client.StartRun does, in a producer
// span ("<flow> send") of tp (the global TracerProvider when nil) whose
// context is stored with the run, in its metadata (worqr.RunOpts.Meta,
// keys traceparent and tracestate), not in its state. opts.Meta, when
// given, is stored too (it is not changed).
//
// StageMiddleware makes each stage of the run a child of this span.
func StartRun(ctx context.Context, client *worqr.Client, flow *worqr.Flow, state map[string]string, opts *worqr.RunOpts, tp trace.TracerProvider) (string, error) {
	attrs := []attribute.KeyValue{systemKV, semconv.MessagingOperationTypeSend, semconv.MessagingOperationName("send")}
	name := "send"
	if flow != nil {
		name = flow.Name + " send"
		attrs = append(attrs, FlowKey.String(flow.Name))
		if len(flow.Stages) > 0 {
			attrs = append(attrs, semconv.MessagingDestinationName(flow.Stages[0].Name))
		}
	}
	ctx, span := tracer(tp).Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	defer span.End()
	o := worqr.RunOpts{}
	if opts != nil {
		o = *opts
	}
	o.Meta = inject(ctx, o.Meta)
	id, err := client.StartRun(ctx, flow, state, &o)
	if err != nil {
		fail(span, err)
		return "", err
	}
	span.SetAttributes(semconv.MessagingMessageID(id))
	return id, nil
}

// inject returns a copy of meta with the span context of ctx added (meta
// itself when ctx holds none).
func inject(ctx context.Context, meta map[string]string) map[string]string {
	c := propagation.MapCarrier{}
	prop.Inject(ctx, c)
	if len(c) == 0 {
		return meta
	}
	out := make(map[string]string, len(meta)+len(c))
	for k, v := range meta {
		out[k] = v
	}
	for k, v := range c {
		out[k] = v
	}
	return out
}

// extract returns ctx with the remote span context meta holds, and a link
// to it; ctx as it is when meta holds none.
func extract(ctx context.Context, meta map[string]string) (context.Context, []trace.SpanStartOption) {
	if len(meta) == 0 {
		return ctx, nil
	}
	pctx := prop.Extract(ctx, propagation.MapCarrier(meta))
	sc := trace.SpanContextFromContext(pctx)
	if !sc.IsValid() || !sc.IsRemote() {
		return ctx, nil
	}
	return pctx, []trace.SpanStartOption{trace.WithLinks(trace.Link{SpanContext: sc})}
}

// StageMiddleware returns a worqr.StageMiddleware, for
// WorkerConfig.StageMiddleware, that runs each stage of a flow run in a
// consumer span ("<stage> process") of tp (the global TracerProvider when
// nil), child of and linked to the run's span (StartRun), and stores the
// stage span's context with every child the stage fans out (in
// worqr.ChildSpec.Meta), so that Middleware makes each child's span a
// child of the stage's. A stage's error is recorded on its span, with
// status Error; a panic too, and it goes on up to the worker.
//
// A run started without a span context (by Client.StartRun) gets a root
// span per stage; its children are still children of their stage's span.
func StageMiddleware(tp trace.TracerProvider) worqr.StageMiddleware {
	tr := tracer(tp)
	return func(next worqr.StageHandler) worqr.StageHandler {
		return worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (res *worqr.StageResult, err error) {
			attrs := []attribute.KeyValue{
				systemKV,
				semconv.MessagingDestinationName(r.Stage),
				semconv.MessagingOperationTypeProcess,
				semconv.MessagingOperationName("process"),
				semconv.MessagingMessageID(r.ID),
				FlowKey.String(r.Flow),
				AttemptKey.Int(r.Attempt),
			}
			ctx, opts := extract(ctx, r.Meta)
			opts = append(opts, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
			ctx, span := tr.Start(ctx, r.Stage+" process", opts...)
			returned := false
			defer func() {
				v := recover()
				endProcess(span, v, exited(returned, err))
				if v != nil {
					panic(v)
				}
			}()
			res, err = next.HandleStage(ctx, r)
			returned = true
			if err == nil && res != nil && len(res.Children) > 0 {
				// The children are the caller's: a copy carries the context.
				out := *res
				out.Children = make([]worqr.ChildSpec, len(res.Children))
				for i, c := range res.Children {
					c.Meta = inject(ctx, c.Meta)
					out.Children[i] = c
				}
				res = &out
				span.SetAttributes(ChildrenKey.Int(len(out.Children)))
			}
			if err == nil && res != nil {
				if res.Sleep > 0 {
					span.SetAttributes(SleepKey.Int64(res.Sleep.Milliseconds()))
				}
				if res.Await != "" {
					span.SetAttributes(AwaitKey.String(res.Await))
				}
				if res.Again {
					span.SetAttributes(AgainKey.Bool(true))
				}
			}
			return res, err
		})
	}
}
