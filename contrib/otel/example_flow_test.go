package otelworqr_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/rs/xid"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	otelworqr "github.com/worqr/worqr-go/contrib/otel"
	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// A flow run traced end to end: the run's span, its stages under it, and
// the children of a fan-out under their stage.
func ExampleStageMiddleware() {
	ctx := context.Background()
	pool, _ := redisconn.NewPool(redisURL, nil) // your *redis.Pool
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-" + xid.New().String()}
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr)) // your exporter instead of sr

	flow := &worqr.Flow{Name: "orders", Stages: []worqr.Stage{
		{Name: "check", Queue: worqr.QueueConfig{Concurrency: 1},
			Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return nil, nil })},
		{Name: "ship", Queue: worqr.QueueConfig{Concurrency: 1},
			Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
				return &worqr.StageResult{Children: []worqr.ChildSpec{{Queue: "parcel", Payload: []byte("1")}, {Queue: "parcel", Payload: []byte("2")}}}, nil
			}),
			Children: map[string]worqr.QueueConfig{"parcel": {Concurrency: 2,
				Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil })}}},
		{Name: "notify", Queue: worqr.QueueConfig{Concurrency: 1},
			Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return nil, nil })},
	}}
	w, _ := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg, Flows: []*worqr.Flow{flow},
		Middleware:      []worqr.Middleware{otelworqr.Middleware(tp)},
		StageMiddleware: []worqr.StageMiddleware{otelworqr.StageMiddleware(tp)}})
	_ = w.Start(ctx)
	defer func() { _ = w.Stop(ctx) }()
	client, _ := worqr.NewClient(pool, &cfg)
	in, _ := worqr.NewInspector(pool, &cfg)
	defer func() { _, _ = in.DeleteNamespace(ctx) }()

	id, err := otelworqr.StartRun(ctx, client, flow, nil, nil, tp)
	if err != nil {
		fmt.Println(err)
		return
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := client.WaitRun(wctx, flow, id); err != nil { // every span has ended by then
		fmt.Println(err)
		return
	}
	printTree(sr.Ended())
	// Output:
	// orders send
	//   check process
	//   notify process
	//   ship process
	//     parcel process
	//     parcel process
}

// printTree prints spans as a tree of names, children sorted by name.
func printTree(spans []sdktrace.ReadOnlySpan) {
	kids := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		kids[s.Parent().SpanID()] = append(kids[s.Parent().SpanID()], s)
	}
	var walk func(parent trace.SpanID, depth int)
	walk = func(parent trace.SpanID, depth int) {
		ss := kids[parent]
		sort.Slice(ss, func(i, j int) bool { return ss[i].Name() < ss[j].Name() })
		for _, s := range ss {
			fmt.Println(strings.Repeat("  ", depth) + s.Name())
			walk(s.SpanContext().SpanID(), depth+1)
		}
	}
	walk(trace.SpanID{}, 0)
}
