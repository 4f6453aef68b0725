package worqr_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// An Enqueue with an id of the caller's, repeated after its first attempt's
// reply was lost (or after ErrNotReplicated), finds the task enqueued
// before: it must not report the task acknowledged by the replicas
// (Config.Replicas) unless they have it. Both repeats used to return nil:
// the replicas' answer was dropped with the "same task" reply, and a repeat
// on a new connection waited for nothing (its script wrote nothing, so
// WAIT covered no write of its own), while the replica had not the task.
func TestIdempotentEnqueueRepeatWaitsForReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	primary, replicas, err := redistest.StartReplicated(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Stop()
	defer replicas[0].Stop()

	t.Run("repeat after ErrNotReplicated", func(t *testing.T) {
		pool := primary.Pool()
		defer pool.Close()
		// Two replicas asked of one: every write falls short.
		cfg := worqr.Config{Namespace: redistest.Namespace(), Replicas: 2, ReplicaTimeout: 100 * time.Millisecond}
		client, err := worqr.NewClient(pool, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		opts := &worqr.EnqueueOpts{ID: "order-1"}
		id, err := client.Enqueue(ctx, "r", []byte("p"), opts)
		if id != "order-1" || !errors.Is(err, worqr.ErrNotReplicated) {
			t.Fatalf("first enqueue: %q, %v; want order-1 and ErrNotReplicated", id, err)
		}
		id, err = client.Enqueue(ctx, "r", []byte("p"), opts)
		if id != "order-1" || !errors.Is(err, worqr.ErrNotReplicated) {
			t.Fatalf("repeated enqueue: %q, %v; want order-1 and ErrNotReplicated (one replica of two has it)", id, err)
		}
	})

	t.Run("repeat after a lost reply, replica frozen", func(t *testing.T) {
		pool := newReplyLossPool(primary.URL)
		defer pool.Close()
		cfg := worqr.Config{Namespace: redistest.Namespace(), Replicas: 1, ReplicaTimeout: 300 * time.Millisecond}
		client, err := worqr.NewClient(pool, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		// Known queue recorded first, so that the lost call is the enqueue
		// (its replica's answer does not matter: on a loaded machine 300 ms
		// can pass before it comes).
		if _, err := client.Enqueue(ctx, "r", []byte("warm"), nil); err != nil && !errors.Is(err, worqr.ErrNotReplicated) {
			t.Fatal(err)
		}
		if err := replicas[0].Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = replicas[0].Signal(syscall.SIGCONT) }()
		pool.setLose(nthCall("enqueue", 1))
		opts := &worqr.EnqueueOpts{ID: "order-2"}
		if id, err := client.Enqueue(ctx, "r", []byte("p"), opts); err == nil {
			t.Fatalf("first enqueue: %q, nil; want its reply lost", id)
		}
		pool.setLose(nil)
		if _, err := newInspector(t, pool, &cfg).Task(ctx, "r", "order-2"); err != nil {
			t.Fatalf("the first enqueue was not applied: %v", err)
		}
		// The retry the docs advise, the same id and payload, by a
		// producer started again (a new pool: its connection wrote nothing
		// before).
		pool2 := primary.Pool()
		defer pool2.Close()
		client2, err := worqr.NewClient(pool2, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		id, err := client2.Enqueue(ctx, "r", []byte("p"), opts)
		if id != "order-2" || !errors.Is(err, worqr.ErrNotReplicated) {
			t.Fatalf("repeated enqueue: %q, %v; want order-2 and ErrNotReplicated (the replica, frozen, does not have it)", id, err)
		}
	})

	// A scheduler whose replicas fall short still moves on: the tick's task
	// is enqueued on the primary (its repeat finds it there and falls short
	// the same way), so the pass reports the shortfall and advances.
	t.Run("scheduler with too few replicas", func(t *testing.T) {
		pool := primary.Pool()
		defer pool.Close()
		cfg := worqr.Config{Namespace: redistest.Namespace(), Replicas: 2, ReplicaTimeout: 100 * time.Millisecond, DisableEvents: true}
		s, err := worqr.NewScheduler(pool, &worqr.SchedulerConfig{Config: cfg})
		if err != nil {
			t.Fatal(err)
		}
		base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		if err := s.RegisterAt(ctx, worqr.Schedule{Name: "tick", Queue: "p", Every: time.Minute}, base); err != nil {
			t.Fatal(err)
		}
		at := base.Add(time.Minute)
		for pass := 1; pass <= 2; pass++ {
			if _, err := s.PassAt(ctx, at); !errors.Is(err, worqr.ErrNotReplicated) && pass == 1 {
				t.Fatalf("pass %d: %v; want ErrNotReplicated", pass, err)
			}
		}
		in, err := worqr.NewInspector(pool, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		info, err := in.Schedule(ctx, "tick")
		if err != nil {
			t.Fatal(err)
		}
		if want := at.Add(time.Minute); !info.Next.Equal(want) || info.Fired != 1 {
			t.Fatalf("schedule next %s, fired %d; want %s and 1 (advanced past the tick enqueued on the primary)", info.Next, info.Fired, want)
		}
	})
}
