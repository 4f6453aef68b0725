package otelworqr_test

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/rs/xid"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	otelworqr "github.com/worqr/worqr-go/contrib/otel"
	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// A task traced from its enqueue to its run: Enqueue starts a producer span
// whose context travels with the task, and Middleware runs the handler in a
// consumer span under it, handing the handler the payload as it was given.
func ExampleMiddleware() {
	ctx := context.Background()
	pool, _ := redisconn.NewPool(redisURL, nil) // your *redis.Pool
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-" + xid.New().String()}
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr)) // your exporter instead of sr

	got := make(chan string, 1)
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg,
		Queues: map[string]worqr.QueueConfig{"emails": {Concurrency: 4,
			Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
				got <- string(t.Payload)
				return nil
			})}},
		Middleware: []worqr.Middleware{otelworqr.Middleware(tp)}, // first: outermost
	})
	if err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Stop(ctx)
	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		panic(err)
	}

	id, err := otelworqr.Enqueue(ctx, client, nil, "emails", []byte("welcome"), nil, tp) // nil: no EnqueueOpts.ID to check
	if err != nil {
		panic(err)
	}
	fmt.Println("handler got", <-got)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := client.Wait(wctx, "emails", id); err != nil { // the span ends before the task does
		panic(err)
	}
	spans := sr.Ended()
	sort.Slice(spans, func(i, j int) bool { return spans[i].Name() < spans[j].Name() })
	for _, s := range spans {
		fmt.Println(s.Name(), s.SpanKind())
	}
	fmt.Println("one trace:", spans[0].SpanContext().TraceID() == spans[1].SpanContext().TraceID())
	// Output:
	// handler got welcome
	// emails process consumer
	// emails send producer
	// one trace: true
}
