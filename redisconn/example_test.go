package redisconn_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// A redisconn.Cluster follows a Redis Cluster: every worqr call touches the keys
// of one hash tag (a queue's name), and goes to the master that serves it.
// Give it to NewClient, NewWorker and NewInspector as a *redis.Pool.
func ExampleNewCluster() {
	ctx := context.Background()
	seeds := strings.Split(os.Getenv("WORQR_REDIS_CLUSTER"), ",") // 10.0.0.1:7000,10.0.0.2:7000
	pool, err := redisconn.NewCluster(seeds, nil)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-cluster"}

	ran := make(chan string, 3)
	h := worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
		ran <- t.Queue + " " + string(t.Payload)
		return nil
	})
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg, Queues: map[string]worqr.QueueConfig{
		"emails": {Concurrency: 4, Handler: h},
		"images": {Concurrency: 4, Handler: h},
		"videos": {Concurrency: 4, Handler: h},
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
	for _, q := range []string{"emails", "images", "videos"} {
		if _, err := client.Enqueue(ctx, q, []byte("#1"), nil); err != nil {
			panic(err)
		}
	}
	var got []string
	for i := 0; i < 3; i++ {
		got = append(got, <-ran)
	}
	sort.Strings(got)
	fmt.Println(strings.Join(got, ", "))
	fmt.Println(len(pool.Masters()), "masters")
	// Output:
	// emails #1, images #1, videos #1
	// 3 masters
}

// A redisconn.Sentinel asks Redis Sentinel for the primary, and follows it to
// the new one on a failover. Workers keep running through it.
func ExampleNewSentinel() {
	ctx := context.Background()
	// "mymaster@10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379"
	master, sentinels, err := redisconn.ParseSentinel(os.Getenv("WORQR_REDIS_SENTINEL"))
	if err != nil {
		panic(err)
	}
	pool, err := redisconn.NewSentinel(master, sentinels, nil)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-sentinel"}

	ran := make(chan string, 1)
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg, Queues: map[string]worqr.QueueConfig{
		"emails": {Concurrency: 4, Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
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
	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		panic(err)
	}
	if _, err := client.Enqueue(ctx, "emails", []byte("welcome"), nil); err != nil {
		panic(err)
	}
	fmt.Println(<-ran)
	fmt.Println(pool.Switches(), "failovers")
	// Output:
	// welcome
	// 0 failovers
}

// NewPool is a redigo pool for one Redis server, from a redis:// or
// rediss:// URL (user, password and database in it; TLS files in Options).
func ExampleNewPool() {
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), &redisconn.Options{MaxIdle: 16})
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-pool"}
	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		panic(err)
	}
	if _, err := client.Enqueue(context.Background(), "emails", []byte("hi"), nil); err != nil {
		panic(err)
	}
	in, err := worqr.NewInspector(pool, &cfg)
	if err != nil {
		panic(err)
	}
	q, err := in.Queue(context.Background(), "emails")
	if err != nil {
		panic(err)
	}
	fmt.Println(q.Waiting, "waiting")
	// Output: 1 waiting
}
