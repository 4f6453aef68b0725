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

	"github.com/hibiken/asynq"
)

// childMode is the hidden first argument that makes the binary a server
// process of the bench: "hold" takes -jobs jobs, prints "ready" and blocks in
// its handlers until it is killed; "drain" runs no-op handlers and prints
// "done <count> <unix nanos>" as handlers return. Both shut down when stdin
// closes (the bench is gone) or on SIGTERM.
const childMode = "child-worker"

func runChild(args []string) int {
	fs := flag.NewFlagSet(childMode, flag.ContinueOnError)
	mode := fs.String("mode", "", "hold or drain")
	url := fs.String("redis-url", "", "Redis URL")
	concurrency := fs.Int("concurrency", 1, "asynq Concurrency")
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
	connOpt, err := asynq.ParseRedisURI(*url)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", childMode, err)
		return 2
	}
	var count, started atomic.Int64
	var h asynq.HandlerFunc
	switch *mode {
	case "hold":
		h = func(ctx context.Context, _ *asynq.Task) error {
			if started.Add(1) == int64(*jobs) {
				fmt.Println("ready")
			}
			<-ctx.Done()
			return ctx.Err()
		}
	case "drain":
		h = func(context.Context, *asynq.Task) error {
			count.Add(1)
			return nil
		}
		go func() {
			t := time.NewTicker(2 * time.Millisecond)
			defer t.Stop()
			var sent int64
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				if c := count.Load(); c != sent {
					sent = c
					fmt.Printf("done %d %d\n", c, time.Now().UnixNano())
				}
			}
		}()
	default:
		fmt.Fprintf(os.Stderr, "%s: -mode must be hold or drain, not %q\n", childMode, *mode)
		return 2
	}
	srv := newServer(connOpt, *concurrency, 0)
	if err := srv.Start(h); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", childMode, err)
		return 1
	}
	<-ctx.Done()
	srv.Shutdown()
	return 0
}
