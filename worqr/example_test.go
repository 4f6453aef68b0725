package worqr_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

func Example() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example"}

	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		panic(err)
	}
	done := make(chan string)
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{
		Config: cfg,
		Queues: map[string]worqr.QueueConfig{
			"greetings": {Concurrency: 4, Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
				done <- string(t.Payload)
				return nil
			})},
		},
	})
	if err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	if _, err := client.Enqueue(ctx, "greetings", []byte("hello"), nil); err != nil {
		panic(err)
	}
	fmt.Println(<-done)

	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	fmt.Println(w.Stop(stopCtx))
	// Output:
	// hello
	// <nil>
}
