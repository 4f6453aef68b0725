package worqr_test

import (
	"context"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// The tests of wake.go: the worker's subscription (wake-ups, hand-offs,
// what a drop or a new subscription releases) and the flag poll (pause).

// Hand-off messages sent while the worker's subscription was down are
// lost: each new subscription releases what the worker holds and does
// not run, with no wait for its poll.
func TestResubscribeReleasesLostHandoffs(t *testing.T) {
	ctx := context.Background()
	pool, c, cfg, q := handEnv(t)
	ran := make(chan string, 4)
	w := startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: cfg, PollInterval: time.Hour, // no check of its holdings
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 2, Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
			ran <- t.ID
			return nil
		})}}})
	defer w.Stop(ctx)
	waitParked(t, c, q, w.ID())
	worqr.StrandTaking(t, c, q, w.ID(), "lost")
	select {
	case id := <-ran:
		t.Fatalf("%s ran before the subscription dropped", id)
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := c.Do("CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
		t.Fatal(err)
	}
	worqr.WaitRan(t, ran, "lost", "the stranded taking was not released after the worker subscribed again")
}

// A worker whose subscription drops can receive no hand-off: it unparks
// itself at once, so that enqueues push their tasks with a wake-up rather
// than hand them into a message nobody reads, and parks again once
// subscribed.
func TestSubscriptionDropUnparks(t *testing.T) {
	ctx := context.Background()
	pool, c, cfg, q := handEnv(t)
	w := startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: cfg, PollInterval: time.Hour, // no park renewed by a poll
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 2, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
			return nil
		})}}})
	defer w.Stop(ctx)
	waitParked(t, c, q, w.ID())
	if _, err := c.Do("CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
		t.Fatal(err)
	}
	// The worker waits at least 50 ms before it subscribes again, and
	// parks only after that: the entry is gone meanwhile.
	wait(t, 10*time.Second, "the worker's park entry to go with its subscription", func() bool {
		n, _ := redis.Int(c.Do("HEXISTS", q.Park, w.ID()))
		return n == 0
	})
	waitParked(t, c, q, w.ID())
}

// A paused queue still releases what its worker holds and does not run
// (a release takes nothing): the task goes back to wait for the resume,
// instead of staying held with no handler for the whole pause.
func TestPausedQueueReleasesStrandedTakings(t *testing.T) {
	ctx := context.Background()
	pool, c, cfg, q := handEnv(t)
	ran := make(chan string, 4)
	// Paused before the worker starts: it reads the flag before its first
	// take, so nothing it puts back is taken before the resume.
	in := newInspector(t, pool, &cfg)
	if err := in.Pause(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	w := startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: cfg, PollInterval: 20 * time.Millisecond,
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 1, Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
			ran <- t.ID
			return nil
		})}}})
	defer w.Stop(ctx)
	worqr.StrandTaking(t, c, q, w.ID(), "lost")
	var ids []string
	if !redistest.Within(10*time.Second, func() bool {
		ids, _ = redis.Strings(c.Do("LRANGE", q.Waiting, 0, -1))
		return len(ids) == 1 && ids[0] == "lost"
	}) {
		t.Fatalf("the stranded taking was not put back while the queue is paused (waiting %v)", ids)
	}
	select {
	case id := <-ran:
		t.Fatalf("%s ran while the queue is paused", id)
	default:
	}
	if err := in.Resume(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	worqr.WaitRan(t, ran, "lost", "not run after the resume")
}
