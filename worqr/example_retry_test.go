package worqr_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// A handler's error is a failed attempt, retried with backoff up to
// MaxAttempts. RetryAfter picks the delay of the next attempt; the task keeps
// its id, and Task.Attempt counts up.
func ExampleRetryAfter() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-retry"}

	charge := worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
		if t.Attempt == 1 {
			return worqr.RetryAfter(10*time.Millisecond, errors.New("bank busy"))
		}
		t.SetResult([]byte(fmt.Sprintf("charged on attempt %d", t.Attempt)))
		return nil
	})
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{
		Config: cfg,
		Queues: map[string]worqr.QueueConfig{
			"payments": {Concurrency: 4, Handler: charge, MaxAttempts: 3, Retention: time.Hour},
		},
		ReaperInterval: 10 * time.Millisecond, // also how often due retries move back to their queue
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
	id, err := client.Enqueue(ctx, "payments", []byte("order-1"), nil)
	if err != nil {
		panic(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	t, err := client.Wait(wctx, "payments", id)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s %q, last error %q\n", t.State, t.Result, t.LastError)
	// Output:
	// done "charged on attempt 2", last error "worqr: retry after 10ms: bank busy"
}

// SkipRetry sends a task to the dead set at once, for work that can never
// succeed; the dead set keeps it with its error until it is requeued
// (Inspector.RequeueDead, once the cause is fixed) or deleted.
func ExampleSkipRetry() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-skipretry"}

	fixed := make(chan struct{}, 1)
	done := make(chan string, 1)
	send := worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
		select {
		case <-fixed:
			done <- string(t.Payload)
			return nil
		default:
			return worqr.SkipRetry(fmt.Errorf("no such mailbox: %s", t.Payload))
		}
	})
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg, Queues: map[string]worqr.QueueConfig{
		"emails": {Concurrency: 4, Handler: send},
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
	in, err := worqr.NewInspector(pool, &cfg)
	if err != nil {
		panic(err)
	}
	id, err := client.Enqueue(ctx, "emails", []byte("bob@example.com"), nil)
	if err != nil {
		panic(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	t, err := client.Wait(wctx, "emails", id)
	if err != nil {
		panic(err)
	}
	fmt.Println(t.State, t.Failures, t.DeadReason)

	dead, n, err := in.Tasks(ctx, "emails", worqr.StateDead, 0, 10)
	if err != nil {
		panic(err)
	}
	fmt.Println(n, dead[0].LastError)

	fixed <- struct{}{} // the mailbox exists now
	fmt.Println(in.RequeueDead(ctx, "emails", id))
	fmt.Println(<-done)
	// Output:
	// dead 1 failed
	// 1 no such mailbox: bob@example.com
	// 1 <nil>
	// bob@example.com
}

// RateLimited runs the task again later without spending an attempt: the
// work did not fail, something it depends on (an API's quota) asked it to
// wait.
func ExampleRateLimited() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-ratelimited"}

	refusals := make(chan struct{}, 1)
	refusals <- struct{}{} // the API refuses the first call
	ran := make(chan string, 1)
	call := worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
		select {
		case <-refusals:
			return worqr.RateLimited(10*time.Millisecond, errors.New("429 Too Many Requests"))
		default:
			ran <- fmt.Sprintf("%s ran on attempt %d", t.Payload, t.Attempt)
			return nil
		}
	})
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{
		Config:         cfg,
		Queues:         map[string]worqr.QueueConfig{"api": {Concurrency: 1, Handler: call}},
		ReaperInterval: 10 * time.Millisecond, // also how often due tasks move back to their queue
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
	if _, err := client.Enqueue(ctx, "api", []byte("GET /v1/rates"), nil); err != nil {
		panic(err)
	}
	fmt.Println(<-ran)
	// Output:
	// GET /v1/rates ran on attempt 1
}
