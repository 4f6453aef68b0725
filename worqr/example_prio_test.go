package worqr_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// A task's priority is its level within its queue: the highest level waiting
// is taken first, in enqueue order within a level.
func ExampleEnqueueOpts_priority() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-priority"}
	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		panic(err)
	}
	for _, t := range []struct {
		payload  string
		priority int
	}{{"newsletter", 0}, {"password reset", 9}, {"receipt", 5}, {"digest", 0}} {
		if _, err := client.Enqueue(ctx, "emails", []byte(t.payload), &worqr.EnqueueOpts{Priority: t.priority}); err != nil {
			panic(err)
		}
	}

	ran := make(chan string, 4)
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg, Queues: map[string]worqr.QueueConfig{
		"emails": {Concurrency: 1, Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			ran <- string(t.Payload)
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
	for i := 0; i < 4; i++ {
		fmt.Println(<-ran)
	}
	// Output:
	// password reset
	// receipt
	// newsletter
	// digest
}

// A worker may share its slots among its queues: by weight
// (PriorityWeighted: weights 6, 3 and 1 get about 60%, 30% and 10% of the
// takes) or in strict order (PriorityStrict: a queue is served only while
// every queue of higher weight is empty).
func ExampleWorkerConfig_priority() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-strict"}
	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		panic(err)
	}
	for _, q := range []string{"low", "critical", "low", "critical"} {
		if _, err := client.Enqueue(ctx, q, []byte(q), nil); err != nil {
			panic(err)
		}
	}

	ran := make(chan string, 4)
	h := worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
		ran <- t.Queue
		return nil
	})
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{
		Config:      cfg,
		Priority:    worqr.PriorityStrict,
		Concurrency: 1, // shared by the queues
		Queues: map[string]worqr.QueueConfig{
			"critical": {Weight: 10, Handler: h},
			"low":      {Weight: 1, Handler: h},
		},
	})
	if err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Stop(ctx)
	for i := 0; i < 4; i++ {
		fmt.Println(<-ran)
	}
	// Output:
	// critical
	// critical
	// low
	// low
}

// Limits hold across every worker of every process: the take script applies
// them, on Redis's clock. Here at most two tasks of the queue run at once,
// though the worker has eight slots.
func ExampleLimits() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-limits"}

	started := make(chan struct{}, 10)
	release := make(chan struct{})
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg, Queues: map[string]worqr.QueueConfig{
		"crawl": {
			Concurrency: 8,
			Limits:      &worqr.Limits{Concurrency: 2, Rate: 100, Period: time.Second},
			Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
				started <- struct{}{}
				<-release
				return nil
			}),
		},
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
	payloads := make([][]byte, 10)
	for i := range payloads {
		payloads[i] = []byte(fmt.Sprintf("https://example.com/%d", i))
	}
	if _, err := client.EnqueueBatch(ctx, "crawl", payloads, nil); err != nil {
		panic(err)
	}

	<-started
	<-started // two run; the others wait for a free place
	in, err := worqr.NewInspector(pool, &cfg)
	if err != nil {
		panic(err)
	}
	q, err := in.Queue(ctx, "crawl")
	if err != nil {
		panic(err)
	}
	fmt.Printf("active=%d waiting=%d\n", q.Active, q.Waiting)
	l, err := in.Limits(ctx, "crawl")
	fmt.Printf("%+v %v\n", l, err)
	close(release)
	// Output:
	// active=2 waiting=8
	// {Rate:100 Period:1s Concurrency:2} <nil>
}
