package worqr_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// A Worker serves several queues, each with its handler, its concurrency
// and its retry settings. Middleware wraps every handler: logging
// (worqr.Log), metrics (worqr.Observe), tracing.
func ExampleWorker() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-worker"}

	send := worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error { return nil })
	resize := worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error { return nil })
	ran := make(chan string, 2)
	observe := worqr.Observe(func(t *worqr.Task, took time.Duration, err error) {
		ran <- fmt.Sprintf("%s %s attempt %d: %v", t.Queue, t.Payload, t.Attempt, err)
	})
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{
		Config: cfg,
		Queues: map[string]worqr.QueueConfig{
			"emails":     {Concurrency: 20, Handler: send, MaxAttempts: 5},
			"thumbnails": {Concurrency: 2, Handler: resize, Timeout: time.Minute},
		},
		Middleware: []worqr.Middleware{observe},
	})
	if err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		panic(err)
	}
	if _, err := client.Enqueue(ctx, "emails", []byte("welcome"), nil); err != nil {
		panic(err)
	}
	if _, err := client.Enqueue(ctx, "thumbnails", []byte("cat.jpg"), nil); err != nil {
		panic(err)
	}
	fmt.Println(<-ran)
	fmt.Println(<-ran)

	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second) // the grace period
	defer cancel()
	fmt.Println("stopped:", w.Stop(stopCtx))
	// Unordered output:
	// emails welcome attempt 1: <nil>
	// thumbnails cat.jpg attempt 1: <nil>
	// stopped: <nil>
}

// Stop lets running handlers finish until its context ends; then it cancels
// those still running (context.Cause says ErrWorkerStopped) and puts their
// tasks back at the front of their queues, for another worker to run.
func ExampleWorker_Stop() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-stop"}

	started := make(chan struct{}, 1)
	cause := make(chan error, 1)
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg, Queues: map[string]worqr.QueueConfig{
		"reports": {Concurrency: 1, Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			started <- struct{}{}
			<-ctx.Done() // a long job, which stops when its context ends
			cause <- context.Cause(ctx)
			return ctx.Err()
		})},
	}})
	if err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		panic(err)
	}
	in, err := worqr.NewInspector(pool, &cfg)
	if err != nil {
		panic(err)
	}
	if _, err := client.Enqueue(ctx, "reports", []byte("yearly"), nil); err != nil {
		panic(err)
	}
	<-started

	stopCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond) // the grace period
	defer cancel()
	fmt.Println("stop:", w.Stop(stopCtx))
	fmt.Println("handler:", <-cause)
	q, err := in.Queue(ctx, "reports")
	if err != nil {
		panic(err)
	}
	fmt.Println(q.Waiting, "waiting")
	// Output:
	// stop: context deadline exceeded
	// handler: worqr: worker stopped
	// 1 waiting
}
