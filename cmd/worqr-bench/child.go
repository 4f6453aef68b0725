package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/worqr"
)

// childMode is the hidden first argument that makes the binary a worker
// process of the bench: "hold" takes -jobs jobs, prints "ready" and blocks in
// its handlers until it is killed; "drain" runs no-op handlers and prints
// "done <count> <unix nanos of the latest finish>" as finishes are accepted.
// Both stop gracefully when stdin closes (the bench is gone) or on SIGTERM.
const childMode = "child-worker"

func runChild(args []string) int {
	fs := flag.NewFlagSet(childMode, flag.ContinueOnError)
	mode := fs.String("mode", "", "hold or drain")
	url := fs.String("redis-url", "", "Redis URL")
	ns := fs.String("namespace", "", "worqr namespace")
	queue := fs.String("queue", benchQueue, "queue to serve")
	concurrency := fs.Int("concurrency", 1, "handler goroutines")
	jobs := fs.Int("jobs", 1, "hold: jobs to take before printing ready")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	pool := &redis.Pool{
		MaxIdle: 2 * *concurrency, IdleTimeout: time.Minute,
		DialContext: func(ctx context.Context) (redis.Conn, error) { return redis.DialURLContext(ctx, *url) },
	}
	defer pool.Close()

	cfg := &worqr.WorkerConfig{Config: worqr.Config{Namespace: *ns, Logger: newLogger()}}
	var (
		count, last atomic.Int64
		started     atomic.Int64
	)
	switch *mode {
	case "hold":
		cfg.Queues = map[string]worqr.QueueConfig{*queue: {Concurrency: *concurrency,
			Handler: worqr.HandlerFunc(func(ctx context.Context, _ *worqr.Task) error {
				if started.Add(1) == int64(*jobs) {
					fmt.Println("ready")
				}
				<-ctx.Done()
				return ctx.Err()
			})}}
	case "drain":
		cfg.Queues = map[string]worqr.QueueConfig{*queue: {Concurrency: *concurrency, Handler: noop}}
		cfg.OnEvent = func(e worqr.Event) {
			if e.Kind == worqr.EventDone {
				last.Store(time.Now().UnixNano())
				count.Add(1)
			}
		}
		go reportDone(ctx, &count, &last)
	default:
		fmt.Fprintf(os.Stderr, "%s: -mode must be hold or drain, not %q\n", childMode, *mode)
		return 2
	}
	w, err := worqr.NewWorker(pool, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", childMode, err)
		return 1
	}
	if err := w.Start(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", childMode, err)
		return 1
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = w.Stop(sctx)
	return 0
}
