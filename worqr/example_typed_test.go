package worqr_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

type Signup struct {
	Email string `json:"email"`
	Plan  string `json:"plan"`
}

// Handle decodes each payload into a value (JSON by default) before the
// handler sees it; EnqueueValue encodes one. A payload that does not decode
// goes to the dead set at once: it never will.
func ExampleHandle() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-handle"}

	got := make(chan Signup, 1)
	welcome := worqr.Handle(func(ctx context.Context, t *worqr.Task, s Signup) error {
		got <- s
		return nil
	}, nil)
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg, Queues: map[string]worqr.QueueConfig{
		"signups": {Concurrency: 4, Handler: welcome},
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

	if _, err := worqr.EnqueueValue(ctx, client, "signups", Signup{Email: "ada@example.com", Plan: "pro"}, nil, nil); err != nil {
		panic(err)
	}
	fmt.Printf("%+v\n", <-got)

	id, err := client.Enqueue(ctx, "signups", []byte("not json"), nil)
	if err != nil {
		panic(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	t, err := client.Wait(wctx, "signups", id)
	if err != nil {
		panic(err)
	}
	fmt.Println(t.State, t.Failures)
	// Output:
	// {Email:ada@example.com Plan:pro}
	// dead 1
}

// A Mux serves one queue with a handler per task type: EnqueueOpts.Type
// gives a task its type, and the Mux routes it. Tasks without a type go to
// Fallback; a type nobody handles goes to the dead set at once.
func ExampleMux() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-mux"}

	ran := make(chan string, 3)
	mux := worqr.NewMux()
	mux.Handle("signup.welcome", worqr.Handle(func(ctx context.Context, t *worqr.Task, s Signup) error {
		ran <- t.Type + " to " + s.Email
		return nil
	}, nil))
	mux.Handle("invoice.send", worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
		ran <- t.Type + " " + string(t.Payload)
		return nil
	}))
	mux.Fallback = worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
		ran <- "untyped " + string(t.Payload)
		return nil
	})
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg, Queues: map[string]worqr.QueueConfig{
		"default": {Concurrency: 1, Handler: mux},
	}})
	if err != nil {
		panic(err)
	}
	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		panic(err)
	}

	welcome := &worqr.EnqueueOpts{Type: "signup.welcome"}
	if _, err := worqr.EnqueueValue(ctx, client, "default", Signup{Email: "ada@example.com"}, nil, welcome); err != nil {
		panic(err)
	}
	if _, err := client.Enqueue(ctx, "default", []byte("#42"), &worqr.EnqueueOpts{Type: "invoice.send"}); err != nil {
		panic(err)
	}
	if _, err := client.Enqueue(ctx, "default", []byte("legacy"), nil); err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Stop(ctx)
	for i := 0; i < 3; i++ {
		fmt.Println(<-ran)
	}
	// Output:
	// signup.welcome to ada@example.com
	// invoice.send #42
	// untyped legacy
}
