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

// Enqueue adds a task and returns its id. With an id of the caller's
// choosing the enqueue is idempotent: repeated (say after a lost reply), it
// adds nothing. A unique key refuses a second task while the first is held.
// The Inspector reads the task and the queue back.
func ExampleClient_Enqueue() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-enqueue"}
	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		panic(err)
	}
	in, err := worqr.NewInspector(pool, &cfg)
	if err != nil {
		panic(err)
	}

	opts := &worqr.EnqueueOpts{ID: "invoice-42", MaxAttempts: 3, Timeout: time.Minute}
	id, err := client.Enqueue(ctx, "invoices", []byte(`{"invoice":42}`), opts)
	fmt.Println(id, err)
	again, err := client.Enqueue(ctx, "invoices", []byte(`{"invoice":42}`), opts)
	fmt.Println(again, err)

	unique := &worqr.EnqueueOpts{UniqueKey: "customer-7", UniqueTTL: time.Hour}
	if _, err := client.Enqueue(ctx, "invoices", []byte(`{"invoice":43}`), unique); err != nil {
		panic(err)
	}
	_, err = client.Enqueue(ctx, "invoices", []byte(`{"invoice":44}`), unique)
	fmt.Println(errors.Is(err, worqr.ErrDuplicate))

	t, err := in.Task(ctx, "invoices", "invoice-42")
	if err != nil {
		panic(err)
	}
	fmt.Println(t.State, string(t.Payload))
	q, err := in.Queue(ctx, "invoices")
	if err != nil {
		panic(err)
	}
	fmt.Println(q.Waiting, "waiting")
	// Output:
	// invoice-42 <nil>
	// invoice-42 <nil>
	// true
	// queued {"invoice":42}
	// 2 waiting
}

// A delayed task waits in the scheduled set until it is due (on Redis's
// clock); Inspector.RunNow moves it to the back of its queue at once.
func ExampleEnqueueOpts_delay() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-delay"}
	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		panic(err)
	}
	in, err := worqr.NewInspector(pool, &cfg)
	if err != nil {
		panic(err)
	}
	id, err := client.Enqueue(ctx, "reminders", []byte("call back"), &worqr.EnqueueOpts{Delay: time.Hour})
	if err != nil {
		panic(err)
	}
	t, err := in.Task(ctx, "reminders", id)
	if err != nil {
		panic(err)
	}
	fmt.Println(t.State, t.DueAt.After(time.Now().Add(59*time.Minute)))

	ran := make(chan string, 1)
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg, Queues: map[string]worqr.QueueConfig{
		"reminders": {Concurrency: 1, Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
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

	fmt.Println(in.RunNow(ctx, "reminders", id))
	fmt.Println(<-ran)
	// Output:
	// scheduled true
	// true <nil>
	// call back
}
