package worqr_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/worqr/worqr-go/worqr"
)

// A Scheduler registers its schedules at start and fires every schedule of
// the namespace; the Inspector lists them.
func ExampleScheduler() {
	ctx := context.Background()
	pool, err := worqr.NewPool(os.Getenv("WORQR_REDIS_URL"), nil) // redis://localhost:6379/0
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
