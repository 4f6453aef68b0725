package worqr_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// A Scheduler registers its schedules at start and fires every schedule of
// the namespace; the Inspector lists them.
func ExampleScheduler() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-scheduler"}
	s, err := worqr.NewScheduler(pool, &worqr.SchedulerConfig{Config: cfg, Schedules: []worqr.Schedule{
		{Name: "nightly-report", Queue: "reports", Cron: "0 30 2 * * *", TimeZone: "Europe/Paris", Missed: worqr.MissedRunOnce},
		{Name: "heartbeat", Queue: "pings", Every: 10 * time.Second},
	}})
	if err != nil {
		panic(err)
	}
	if err := s.Start(ctx); err != nil {
		panic(err)
	}
	defer s.Stop(ctx)
	in, err := worqr.NewInspector(pool, &cfg)
	if err != nil {
		panic(err)
	}
	list, err := in.Schedules(ctx)
	if err != nil {
		panic(err)
	}
	for _, sc := range list {
		fmt.Printf("%s -> %s cron=%q every=%s zone=%q missed=%s\n", sc.Name, sc.Queue, sc.Cron, sc.Every, sc.TimeZone, sc.Missed)
	}
	// Output:
	// heartbeat -> pings cron="" every=10s zone="" missed=skip
	// nightly-report -> reports cron="0 30 2 * * *" every=0s zone="Europe/Paris" missed=run_once
}

// A schedule enqueues one task per tick, once across every Scheduler of
// the namespace; a worker runs it as any other task. The task of a tick has
// the id "<schedule>.<tick in unix ms>".
func ExampleSchedule() {
	ctx := context.Background()
	pool, err := redisconn.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "example-schedule"}

	ticks := make(chan *worqr.Task, 1)
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg, Queues: map[string]worqr.QueueConfig{
		"maintenance": {Concurrency: 1, Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			select {
			case ticks <- t:
			default: // a later tick, after the example stopped reading
			}
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

	s, err := worqr.NewScheduler(pool, &worqr.SchedulerConfig{
		Config:       cfg,
		Schedules:    []worqr.Schedule{{Name: "purge-sessions", Queue: "maintenance", Every: time.Second, Payload: []byte("purge")}},
		PollInterval: 50 * time.Millisecond, // how late a tick may be enqueued (default 1s)
	})
	if err != nil {
		panic(err)
	}
	if err := s.Start(ctx); err != nil {
		panic(err)
	}
	defer s.Stop(ctx)

	t := <-ticks
	fmt.Println(string(t.Payload), strings.HasPrefix(t.ID, "purge-sessions."))
	// Output:
	// purge true
}
