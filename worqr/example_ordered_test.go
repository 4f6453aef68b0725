package worqr_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// Tasks enqueued with the same Key run one at a time, in enqueue order, on
// any number of workers; tasks of different keys run side by side.
func ExampleEnqueueOpts_key() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-key"}
	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		panic(err)
	}
	for _, op := range []struct{ account, op string }{
		{"acct-1", "open"}, {"acct-2", "open"}, {"acct-1", "deposit 10"},
		{"acct-1", "withdraw 5"}, {"acct-2", "deposit 7"}, {"acct-1", "close"},
	} {
		if _, err := client.Enqueue(ctx, "ledger", []byte(op.op), &worqr.EnqueueOpts{Key: op.account}); err != nil {
			panic(err)
		}
	}

	var mu sync.Mutex
	history := map[string][]string{}
	done := make(chan struct{}, 6)
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg, Queues: map[string]worqr.QueueConfig{
		"ledger": {Concurrency: 4, Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			mu.Lock()
			history[t.Key] = append(history[t.Key], string(t.Payload))
			mu.Unlock()
			done <- struct{}{}
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
	for i := 0; i < 6; i++ {
		<-done
	}
	mu.Lock()
	defer mu.Unlock()
	fmt.Println("acct-1:", strings.Join(history["acct-1"], ", "))
	fmt.Println("acct-2:", strings.Join(history["acct-2"], ", "))
	// Output:
	// acct-1: open, deposit 10, withdraw 5, close
	// acct-2: open, deposit 7
}

// With KeyPolicy.Merge, an enqueue whose key's last task has not started
// adds its payload to that task instead of adding a task: the handler gets
// them all at once (Task.Payloads), each distinct payload once.
func ExampleKeyPolicy() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-merge"}
	policy := worqr.KeyPolicy{Merge: true}
	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		panic(err)
	}
	// Workers store their QueueConfig.Keys when they start; before any has,
	// the client stores the same policy.
	if err := client.SetKeyPolicy(ctx, "reindex", policy); err != nil {
		panic(err)
	}
	var ids []string
	for _, field := range []string{"title", "price", "title"} {
		id, err := client.Enqueue(ctx, "reindex", []byte(field), &worqr.EnqueueOpts{Key: "product-7"})
		if err != nil {
			panic(err)
		}
		ids = append(ids, id)
	}
	fmt.Println("one task:", ids[0] == ids[1] && ids[1] == ids[2])

	got := make(chan []string, 1)
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg, Queues: map[string]worqr.QueueConfig{
		"reindex": {Concurrency: 4, Keys: policy, Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			var fields []string
			for _, p := range t.Payloads {
				fields = append(fields, string(p.Data))
			}
			got <- fields
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
	fmt.Println(<-got)
	// Output:
	// one task: true
	// [title price]
}

// EnqueueMerge merges a payload into the key's waiting task with a function
// of the caller's: here counts add up, so the handler writes one total.
func ExampleClient_EnqueueMerge() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-mergefunc"}
	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		panic(err)
	}
	add := func(waiting, incoming []byte) ([]byte, error) {
		a, err := strconv.Atoi(string(waiting))
		if err != nil {
			return nil, err
		}
		b, err := strconv.Atoi(string(incoming))
		if err != nil {
			return nil, err
		}
		return []byte(strconv.Itoa(a + b)), nil
	}
	for _, views := range []string{"3", "1", "5"} {
		_, merged, err := client.EnqueueMerge(ctx, "counters", "page-views:/home", []byte(views), add, nil)
		if err != nil {
			panic(err)
		}
		fmt.Println("merged:", merged)
	}

	got := make(chan string, 1)
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg, Queues: map[string]worqr.QueueConfig{
		"counters": {Concurrency: 4, Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			got <- fmt.Sprintf("%s += %s", t.Key, t.Payload)
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
	fmt.Println(<-got)
	// Output:
	// merged: false
	// merged: true
	// merged: true
	// page-views:/home += 9
}
