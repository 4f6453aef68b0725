package worqr_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// Wait blocks until a task has ended and returns what Redis holds about it:
// for a done task, the result its handler set. The queue's Retention keeps
// that result readable after the task ended.
func ExampleClient_Wait() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-wait"}
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg, Queues: map[string]worqr.QueueConfig{
		"shout": {Concurrency: 4, Retention: time.Hour, Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			t.SetResult([]byte(strings.ToUpper(string(t.Payload))))
			return nil
		})},
	}})
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

	id, err := client.Enqueue(ctx, "shout", []byte("hello"), nil)
	if err != nil {
		panic(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	t, err := client.Wait(wctx, "shout", id)
	if err != nil {
		panic(err)
	}
	fmt.Println(t.State, string(t.Result))
	// Output:
	// done HELLO
}

// Cancel removes a waiting task, or tells a running task's worker to stop
// it: the handler's context ends with ErrTaskCancelled as its cause, and the
// task ends as cancelled whatever the handler returns.
func ExampleClient_Cancel() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-cancel"}
	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		panic(err)
	}

	later, err := client.Enqueue(ctx, "exports", []byte("tomorrow"), &worqr.EnqueueOpts{Delay: 24 * time.Hour})
	if err != nil {
		panic(err)
	}
	fmt.Println(client.Cancel(ctx, "exports", later))

	started := make(chan struct{}, 1)
	cause := make(chan error, 1)
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg, Queues: map[string]worqr.QueueConfig{
		"exports": {Concurrency: 1, Retention: time.Hour, Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			started <- struct{}{}
			<-ctx.Done() // a long export, which stops when its context ends
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
	defer w.Stop(ctx)
	running, err := client.Enqueue(ctx, "exports", []byte("now"), nil)
	if err != nil {
		panic(err)
	}
	<-started
	fmt.Println(client.Cancel(ctx, "exports", running))
	fmt.Println("handler:", errors.Is(<-cause, worqr.ErrTaskCancelled))
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	t, err := client.Wait(wctx, "exports", running)
	if err != nil {
		panic(err)
	}
	fmt.Println(t.State)
	// Output:
	// removed <nil>
	// requested <nil>
	// handler: true
	// cancelled
}
