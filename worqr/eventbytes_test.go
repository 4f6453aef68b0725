package worqr_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// Events carry their handler's error: a published event's is cut as the
// task's stored error is (8 KiB), and a publication is bounded in bytes.
// 64 handlers failing at once with errors of 1 MiB were one PUBLISH of
// 64 MiB (177 ms of Redis, a worker's keepalive beats timing out): past
// the 32 MiB a subscriber may fall behind by, Redis disconnected every
// follower, which missed every one of those events.
func TestFollowersGetTheEventsOfLongErrors(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var dead []worqr.Event
	paused := false
	fctx, stop := context.WithCancel(ctx)
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		_ = in.Follow(fctx, func(e worqr.Event) {
			mu.Lock()
			defer mu.Unlock()
			switch e.Kind {
			case worqr.EventPaused:
				paused = true
			case worqr.EventDead:
				dead = append(dead, e)
			}
		})
	}()
	t.Cleanup(func() { stop(); <-followed })
	wait(t, 10*time.Second, "the follower subscribed", func() bool {
		if err := in.Pause(ctx, "probe"); err != nil {
			t.Fatal(err)
		}
		in.Flush()
		mu.Lock()
		defer mu.Unlock()
		return paused
	})

	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	const n = 64
	long := strings.Repeat("e", 1<<20)
	gate := make(chan struct{})
	var local sync.Map // what OnEvent got: the error whole
	cfg := fastTimings(ns)
	cfg.OnEvent = func(e worqr.Event) {
		if e.Kind == worqr.EventDead {
			local.Store(e.TaskID, len(e.Err.Error()))
		}
	}
	cfg.Queues = map[string]worqr.QueueConfig{"errs": {Concurrency: n, MaxAttempts: 1,
		Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			<-gate
			return errors.New(long)
		})}}
	startWorker(t, ctx, pool, &cfg)
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = []byte("x")
	}
	if _, err := c.EnqueueBatch(ctx, "errs", payloads, nil); err != nil {
		t.Fatal(err)
	}
	wait(t, 10*time.Second, "every handler running", func() bool {
		q, err := in.Queue(ctx, "errs")
		return err == nil && q.Active == n
	})
	close(gate)
	wait(t, 10*time.Second, "the dead event of every task followed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(dead) == n
	})
	mu.Lock()
	defer mu.Unlock()
	for _, e := range dead {
		if got := len(e.Err.Error()); got != 8<<10 {
			t.Fatalf("a followed event's error has %d bytes, want its first 8 KiB", got)
		}
		if got, _ := local.Load(e.TaskID); got != len(long) {
			t.Fatalf("OnEvent got an error of %v bytes, want %d (whole)", got, len(long))
		}
	}
}
