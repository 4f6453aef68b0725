// Package otelworqr traces worqr tasks and flow runs with OpenTelemetry: a
// producer span at enqueue (or at the start of a run) whose context travels
// with the task (or run), and a consumer span around the handler that runs
// it (each stage, each fan-out child).
//
// Enqueue (and EnqueueBatch) start a "<queue> send" span (kind Producer)
// and store its context with the task in the task's metadata
// (worqr.EnqueueOpts.Meta: keys traceparent and tracestate, W3C Trace
// Context written by propagation.TraceContext, beside any metadata of the
// caller's), not in its payload: the payload is stored, handed to the
// handler and shown by Inspector.Task and the operator tools as it was
// given. Middleware, given to WorkerConfig.Middleware, reads it from
// Task.Meta and runs the handler in a "<queue> process" span (kind
// Consumer).
//
// A keyed task (EnqueueOpts.Key) carries it the same way. A task of an
// ordered queue that merges (KeyPolicy.Merge) keeps the metadata of the
// enqueue that created it: its consumer span is a child of that enqueue's
// producer span; the producer spans of the enqueues merged into it later
// end without a consumer span linked to them. A task's type
// (worqr.EnqueueOpts.Type) is a tag in front of the payload, which a
// worqr.Mux reads whether Middleware wraps it or the Mux's handlers.
//
// Tasks enqueued by an earlier version of this package carry their span
// context in an envelope around the payload:
//
//	"\x00wqh:" + traceparent [+ "\n" + tracestate] + "\x00" + payload
//
// (behind the type's tag, or in front of it). Middleware reads the
// context from it and hands the handler the payload without it, for a
// merged task's payloads too (each enveloped one links the span to its
// producer), so a rolling upgrade keeps their traces; Unwrap removes it.
//
// The consumer span is a child of the producer span and also links to it.
// The OpenTelemetry messaging conventions ask for the link; a worqr task is
// processed on its own (not in a batch), so making it the child as well
// puts enqueue and every run of the task (retries included) in one trace,
// which is what one wants to see when following a task. A task enqueued
// without a span context (by Client.Enqueue, or while none was at hand)
// gets a root consumer span.
//
// The trace context adds about 60 bytes (more with a tracestate) to the
// task's metadata, counted against worqr.MaxMetaBytes with the caller's
// own; the payload is stored as given.
//
// Flow runs are traced as one trace. StartRun starts a "<flow> send" span
// (kind Producer) and stores its context with the run, in the run's
// metadata (worqr.RunOpts.Meta: keys traceparent and tracestate), not in
// its state or a payload. StageMiddleware, given to
// WorkerConfig.StageMiddleware, runs each stage attempt in a "<stage>
// process" span (kind Consumer), child of and linked to the run's span,
// and stores that span's context in the metadata of every child the stage
// fans out (worqr.ChildSpec.Meta); Middleware runs each child in a "<child
// queue> process" span, child of and linked to its stage's span. So the
// run's span is the root (or a child of the caller's span at StartRun),
// the stages are its children and the fan-out children are their
// stage's children. Metadata costs no payload bytes and nothing on a
// plain queue's take. A run started by Client.StartRun gets a root span
// per stage; its children are still under their stage's span. Stages
// served by remote workers (the gateway) are not traced; a task of
// Enqueue (or a child) served by a remote worker reaches it with the
// context of the producer span (or of its stage's) as the taking's
// TraceParent and TraceState.
package otelworqr

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/worqr/worqr-go/worqr"
)

// ScopeName is the instrumentation scope of the spans.
const ScopeName = "github.com/worqr/worqr-go/contrib/otel"

// Attribute keys of worqr's own (the others are OpenTelemetry's messaging
// semantic conventions).
const (
	AttemptKey  = attribute.Key("worqr.attempt")   // Task.Attempt
	CrashesKey  = attribute.Key("worqr.crashes")   // Task.Crashes
	TaskTypeKey = attribute.Key("worqr.task.type") // the task's type (worqr.EnqueueOpts.Type)
	GaveBackKey = attribute.Key("worqr.gave_back") // true when the handler returned worqr.ErrGiveBack
)

// mark starts a payload that carries a trace context.
const mark = "\x00wqh:"

// typeMark starts the tag of a task's type (worqr.EnqueueOpts.Type).
const typeMark = "\x00wqt:"

var (
	prop     = propagation.TraceContext{}
	systemKV = semconv.MessagingSystemKey.String("worqr")
)

func tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(ScopeName)
}

// carry stores the span context of ctx with an enqueue, in a copy of opts
// whose Meta holds it beside the caller's own (traceparent, tracestate).
// Without a valid span context in ctx, opts is returned as it is.
func carry(ctx context.Context, opts *worqr.EnqueueOpts) *worqr.EnqueueOpts {
	c := propagation.MapCarrier{}
	prop.Inject(ctx, c)
	if c.Get("traceparent") == "" {
		return opts
	}
	var o worqr.EnqueueOpts
	if opts != nil {
		o = *opts
	}
	meta := make(map[string]string, len(o.Meta)+len(c))
	for k, v := range o.Meta {
		if k != "traceparent" && k != "tracestate" {
			meta[k] = v
		}
	}
	for k, v := range c {
		meta[k] = v
	}
	o.Meta = meta
	return &o
}

// split returns the carrier and the payload out of the envelope of an
// enveloped payload. The envelope is outermost, or inside the tag of the
// task's type (worqr.EnqueueOpts.Type, which the client puts on after
// Enqueue wrapped the payload): the tag then stays in front of the
// payload returned, where a Mux looks for it.
func split(p []byte) (carrier propagation.MapCarrier, payload []byte, ok bool) {
	tag := typeTag(p)
	rest, found := bytes.CutPrefix(p[len(tag):], []byte(mark))
	if !found {
		return nil, nil, false
	}
	i := bytes.IndexByte(rest, 0)
	if i <= 0 {
		return nil, nil, false
	}
	tp, ts, _ := strings.Cut(string(rest[:i]), "\n")
	carrier = propagation.MapCarrier{"traceparent": tp}
	if ts != "" {
		carrier["tracestate"] = ts
	}
	if len(tag) == 0 {
		return carrier, rest[i+1:], true
	}
	return carrier, append(append(make([]byte, 0, len(tag)+len(rest)-i-1), tag...), rest[i+1:]...), true
}

// typeTag returns the tag of a task's type at the front of p
// ("\x00wqt:" + type + "\x00"), empty when p has none.
func typeTag(p []byte) []byte {
	rest, found := bytes.CutPrefix(p, []byte(typeMark))
	if !found {
		return nil
	}
	i := bytes.IndexByte(rest, 0)
	if i <= 0 {
		return nil
	}
	return p[:len(typeMark)+i+1]
}

// Unwrap returns the payload inside the trace envelope Enqueue adds (a
// task type's tag in front of the envelope stays in front), or p as it is
// when it has none.
func Unwrap(p []byte) []byte {
	if _, inner, ok := split(p); ok {
		return inner
	}
	return p
}

// Enqueue enqueues payload on queue as client.Enqueue does, in a producer
// span ("<queue> send") of tp (the global TracerProvider when nil) whose
// context is stored with the task, in its metadata (see the package
// documentation). opts is not changed: its Meta, if any, is copied with
// the context added (a traceparent or tracestate in it is replaced).
//
// With EnqueueOpts.ID, an enqueue repeated after its reply was lost holds
// the same payload, and Client.Enqueue answers it with the same id (the
// metadata, another span context, is not compared). in (an Inspector of
// the client's namespace) serves a task enqueued by an earlier version of
// this package, whose span context was in its payload: a repeat then
// carried another payload, refused with ErrDuplicate; Enqueue reads the
// task and, when it holds the same payload (envelope aside), returns its
// id without an error. in is read only then: nil is fine.
func Enqueue(ctx context.Context, client *worqr.Client, in *worqr.Inspector, queue string, payload []byte, opts *worqr.EnqueueOpts, tp trace.TracerProvider) (string, error) {
	ctx, span := tracer(tp).Start(ctx, queue+" send", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(sendAttrs(queue)...))
	defer span.End()
	opts = carry(ctx, opts)
	id, err := client.Enqueue(ctx, queue, payload, opts)
	if err != nil && errors.Is(err, worqr.ErrDuplicate) && opts != nil && opts.ID != "" && in != nil {
		// The task of an earlier version has its type's tag inside its
		// envelope.
		if info, ierr := in.Task(ctx, queue, opts.ID); ierr == nil && bytes.Equal(untyped(Unwrap(info.Payload), opts.Type), payload) {
			id, err = opts.ID, nil
		}
	}
	if err != nil {
		fail(span, err)
		return "", err
	}
	span.SetAttributes(semconv.MessagingMessageID(id))
	return id, nil
}

// EnqueueBatch enqueues payloads on queue as client.EnqueueBatch does, in
// one producer span ("<queue> send", with messaging.batch.message_count)
// whose context is stored with every task, in its metadata (as Enqueue).
func EnqueueBatch(ctx context.Context, client *worqr.Client, queue string, payloads [][]byte, opts *worqr.EnqueueOpts, tp trace.TracerProvider) ([]string, error) {
	ctx, span := tracer(tp).Start(ctx, queue+" send", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(append(sendAttrs(queue), semconv.MessagingBatchMessageCount(len(payloads)))...))
	defer span.End()
	opts = carry(ctx, opts)
	ids, err := client.EnqueueBatch(ctx, queue, payloads, opts)
	if err != nil {
		fail(span, err)
		return nil, err
	}
	return ids, nil
}

func sendAttrs(queue string) []attribute.KeyValue {
	return []attribute.KeyValue{
		systemKV,
		semconv.MessagingDestinationName(queue),
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName("send"),
	}
}

func fail(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// Middleware returns a worqr.Middleware that runs each task in a consumer
// span ("<queue> process") of tp (the global TracerProvider when nil),
// child of and linked to the producer span stored by Enqueue, read from
// the task's metadata (Task.Meta; for a flow child: the span of the stage
// that fanned it out, see StageMiddleware) or, for a task enqueued by an
// earlier version of this package, from the envelope around its payload,
// which the handler gets without it. A handler's error is recorded
// on the span and sets its status to Error; worqr.ErrGiveBack does not (the
// span gets worqr.gave_back=true instead). A panic is recorded too, and
// goes on up to the worker; a handler that ends its goroutine with
// runtime.Goexit records worqr.ErrHandlerExited, as the worker does.
//
// A merged task (KeyPolicy.Merge) of an earlier version holds one
// envelope per enqueue merged into it: the handler gets Task.Payloads out
// of their envelopes, equal payloads once (the first, as the merge keeps
// them; Task.Payload the last left), and the span links to the producer
// span of each.
//
// Put it first in WorkerConfig.Middleware, so that the middleware after it
// sees the span in the context and the payload as enqueued.
func Middleware(tp trace.TracerProvider) worqr.Middleware {
	tr := tracer(tp)
	return func(next worqr.Handler) worqr.Handler {
		return worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) (err error) {
			attrs := []attribute.KeyValue{
				systemKV,
				semconv.MessagingDestinationName(t.Queue),
				semconv.MessagingOperationTypeProcess,
				semconv.MessagingOperationName("process"),
				semconv.MessagingMessageID(t.ID),
				AttemptKey.Int(t.Attempt),
				CrashesKey.Int(t.Crashes),
			}
			opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
			var meta map[string]string // where the span context came with the task
			if carrier, inner, ok := split(t.Payload); ok {
				// The handler sees the payload as enqueued; the Task goes back
				// as it came (the worker reads nothing of it but its result,
				// which SetResult keeps on this same Task).
				orig := t.Payload
				t.Payload = inner
				defer func() { t.Payload = orig }()
				meta = carrier
			}
			if t.Meta["traceparent"] != "" {
				// A task of Enqueue: the producer span's context; a flow
				// child: the context of the stage that fanned it out (see
				// StageMiddleware). In the task's metadata.
				meta = t.Meta
			}
			var links []trace.SpanStartOption
			ctx, links = extract(ctx, meta)
			opts = append(opts, links...)
			linked := map[trace.SpanID]bool{trace.SpanContextFromContext(ctx).SpanID(): len(links) > 0}
			// A task merged into (KeyPolicy.Merge) holds the payload of
			// every enqueue merged, each in its own envelope.
			restore, more := unwrapMerged(t, linked)
			defer restore()
			opts = append(opts, more...)
			if b := worqr.BatchOf(ctx); b != nil {
				// A batch of an ordered queue (KeyBatch): t is its head;
				// every other task comes out of its envelope too, and the
				// span links to its producer span.
				for _, bt := range b.Tasks {
					if bt == t {
						continue
					}
					var carrier propagation.MapCarrier
					if c, inner, ok := split(bt.Payload); ok {
						orig, bt := bt.Payload, bt
						bt.Payload = inner
						defer func() { bt.Payload = orig }()
						carrier = c
					}
					if bt.Meta["traceparent"] != "" {
						carrier = bt.Meta
					}
					if carrier != nil {
						if sc := trace.SpanContextFromContext(prop.Extract(context.Background(), carrier)); sc.IsValid() && !linked[sc.SpanID()] {
							linked[sc.SpanID()] = true
							opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
						}
					}
					restore, more := unwrapMerged(bt, linked)
					defer restore()
					opts = append(opts, more...)
				}
			}
			if typ, ok := taskType(t.Payload); ok {
				attrs = append(attrs, TaskTypeKey.String(typ))
			} else if t.Type != "" { // inside a Mux, which took the tag off
				attrs = append(attrs, TaskTypeKey.String(t.Type))
			}
			ctx, span := tr.Start(ctx, t.Queue+" process", append(opts, trace.WithAttributes(attrs...))...)
			returned := false
			defer func() {
				v := recover()
				endProcess(span, v, exited(returned, err))
				if v != nil {
					panic(v)
				}
			}()
			err = next.HandleTask(ctx, t)
			returned = true
			return err
		})
	}
}

// unwrapMerged takes the payloads of a task merged into
// (KeyPolicy.Merge, Task.Payloads) out of their envelopes, as the queue
// would have merged them without tracing: each envelope carries its own
// span context, so equal payloads were stored as distinct ones; the first
// of each (the lowest score, as Merge keeps) is kept, and t.Payload is the
// last one left. It returns what puts the task back as it came, and a link
// to the producer span of each payload not yet in linked.
func unwrapMerged(t *worqr.Task, linked map[trace.SpanID]bool) (restore func(), links []trace.SpanStartOption) {
	if len(t.Payloads) == 0 {
		return func() {}, nil
	}
	out := make([]worqr.Payload, 0, len(t.Payloads))
	seen := map[string]bool{}
	wrapped := false
	for _, p := range t.Payloads {
		carrier, inner, ok := split(p.Data)
		if !ok {
			inner = p.Data
		} else {
			wrapped = true
			if sc := trace.SpanContextFromContext(prop.Extract(context.Background(), carrier)); sc.IsValid() && !linked[sc.SpanID()] {
				linked[sc.SpanID()] = true
				links = append(links, trace.WithLinks(trace.Link{SpanContext: sc}))
			}
		}
		if seen[string(inner)] {
			continue
		}
		seen[string(inner)] = true
		out = append(out, worqr.Payload{Data: inner, Score: p.Score})
	}
	if !wrapped {
		return func() {}, nil
	}
	origs, orig := t.Payloads, t.Payload
	t.Payloads, t.Payload = out, out[len(out)-1].Data
	return func() { t.Payloads, t.Payload = origs, orig }, links
}

// exited is the error of a handler call that returned err, or that ended
// its goroutine with runtime.Goexit (returned false, no panic): the worker
// ends such an attempt as failed with worqr.ErrHandlerExited.
func exited(returned bool, err error) error {
	if !returned {
		return worqr.ErrHandlerExited
	}
	return err
}

// endProcess ends the consumer span of a handler call that panicked with v
// (not nil; the caller panics again), or returned err (see exited): a
// give-back is marked, any other error recorded.
func endProcess(span trace.Span, v any, err error) {
	defer span.End()
	switch {
	case v != nil:
		span.AddEvent("panic", trace.WithAttributes(attribute.String("panic.value", fmt.Sprint(v))))
		span.SetStatus(codes.Error, "panic: "+fmt.Sprint(v))
	case err == nil:
	case errors.Is(err, worqr.ErrGiveBack):
		span.SetAttributes(GaveBackKey.Bool(true))
	default:
		fail(span, err)
	}
}

// taskType returns the type of a typed payload (worqr.EnqueueOpts.Type).
func taskType(p []byte) (string, bool) {
	tag := typeTag(p)
	if len(tag) == 0 {
		return "", false
	}
	return string(tag[len(typeMark) : len(tag)-1]), true
}

// untyped returns p without the tag of task type typ in front ("": p).
func untyped(p []byte, typ string) []byte {
	if typ == "" {
		return p
	}
	if t, ok := taskType(p); ok && t == typ {
		return p[len(typeTag(p)):]
	}
	return p
}
