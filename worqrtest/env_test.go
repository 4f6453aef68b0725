package worqrtest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
	"github.com/worqr/worqr-go/worqrtest"
)

func TestAdvanceFiresEachPeriodicTick(t *testing.T) {
	ctx := context.Background()
	env := worqrtest.New(t, &worqrtest.Options{InProcess: true})
	cfg := worqr.SchedulerConfig{Config: env.Config()}
	s, err := worqr.NewScheduler(env.Pool(), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Registered, not started: the Env fires the ticks as a running
	// Scheduler would. Each tick is one task, even those more than Grace
	// (10s) behind the end of the Advance.
	if err := s.Register(ctx, worqr.Schedule{Name: "report", Queue: "reports", Every: time.Minute, Payload: []byte("daily")}); err != nil {
		t.Fatal(err)
	}
	env.RequireNotEnqueued(t, "reports", worqrtest.Match{})
	env.Advance(t, 5*time.Minute)
	ms := make([]worqrtest.Match, 5)
	for i := range ms {
		ms[i] = worqrtest.Match{Payload: "daily"}
	}
	env.RequireEnqueuedMany(t, "reports", ms...)
	info, err := env.Inspector().Schedule(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	if info.Fired != 5 || !info.Next.After(env.Now()) {
		t.Fatalf("schedule %+v, want 5 ticks fired and the next after %s", info, env.Now())
	}
}

func TestAdvanceBoundsTheTicks(t *testing.T) {
	ctx := context.Background()
	env := worqrtest.New(t, &worqrtest.Options{InProcess: true})
	cfg := worqr.SchedulerConfig{Config: env.Config()}
	s, err := worqr.NewScheduler(env.Pool(), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Register(ctx, worqr.Schedule{Name: "tick", Queue: "ticks", Every: time.Second}); err != nil {
		t.Fatal(err)
	}
	mustFail(t, func(tb testing.TB) { env.Advance(tb, 2*time.Hour) }, "passes more than 1000 ticks of periodic schedules")
}

func TestAdvanceNeedsTheInProcessRedis(t *testing.T) {
	env := worqrtest.New(t, &worqrtest.Options{InProcess: true})
	mustFail(t, func(tb testing.TB) { env.Advance(tb, -time.Second) }, "the clock only moves forward")
	real := worqrtest.New(t, &worqrtest.Options{RedisURL: realRedis(t)})
	mustFail(t, func(tb testing.TB) { real.Advance(tb, time.Second) }, "Advance needs the in-process Redis", "Options.InProcess")
}

// realRedis returns the URL of a real redis-server for t: the one
// WORQR_TEST_REDIS_URL names, or one started for t.
func realRedis(t *testing.T) string {
	t.Helper()
	s, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s.URL
}

// TestRealRedis runs each helper on a real redis-server, in a namespace
// of the Env's own that its cleanup deletes.
func TestRealRedis(t *testing.T) {
	ctx := context.Background()
	url := realRedis(t)
	var ns string
	t.Run("env", func(t *testing.T) {
		env := worqrtest.New(t, &worqrtest.Options{RedisURL: url})
		ns = env.Config().Namespace
		if d := time.Since(env.Now()); d < -time.Second || d > time.Second {
			t.Errorf("Now is %s from the local clock, want Redis's time", d)
		}
		if _, err := env.Client().Enqueue(ctx, "emails", []byte(`{"to":"ann"}`), &worqr.EnqueueOpts{Type: "welcome", Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
		env.RequireEnqueued(t, "emails", worqrtest.Match{Type: "welcome", Payload: map[string]string{"to": "ann"}, Delay: time.Hour})
		mustFail(t, func(tb testing.TB) { env.RequireEnqueued(tb, "emails", worqrtest.Match{Delay: 2 * time.Hour}) }, "want 2h0m0s")
		res := env.Work(ctx, t, worqr.HandlerFunc(func(ctx context.Context, task *worqr.Task) error {
			return worqr.RetryAfter(time.Minute, errors.New("later"))
		}), nil, nil)
		if res.Kind != worqr.EventRetry || res.RetryAt.Sub(env.Now()) > time.Minute || res.RetryAt.Sub(env.Now()) < 50*time.Second {
			t.Fatalf("got %+v, want a retry due in a minute", res)
		}
		ran := make(chan struct{}, 1)
		if _, err := env.Client().Enqueue(ctx, "pings", nil, nil); err != nil {
			t.Fatal(err)
		}
		ends := env.Drain(ctx, t, &worqr.WorkerConfig{Queues: map[string]worqr.QueueConfig{
			"pings": {Concurrency: 1, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error { ran <- struct{}{}; return nil })},
		}})
		if len(ends) != 1 || ends[0].Kind != worqr.EventDone || len(ran) != 1 {
			t.Fatalf("drain ended %v, want [done]", kinds(ends))
		}
	})
	// The namespace is gone with its test.
	pool, err := redisconn.NewPool(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	c := pool.Get()
	defer c.Close()
	keys, err := redis.Strings(c.Do("KEYS", ns+":*"))
	if err != nil || len(keys) > 0 {
		t.Fatalf("keys of namespace %s left: %v, %v", ns, keys, err)
	}
}

func TestAdvanceExpiresUniqueKeys(t *testing.T) {
	ctx := context.Background()
	env := worqrtest.New(t, &worqrtest.Options{InProcess: true})
	opts := &worqr.EnqueueOpts{UniqueKey: "ann", UniqueTTL: time.Hour}
	if _, err := env.Client().Enqueue(ctx, "digests", nil, opts); err != nil {
		t.Fatal(err)
	}
	env.Advance(t, time.Hour-time.Millisecond)
	if _, err := env.Client().Enqueue(ctx, "digests", nil, opts); !errors.Is(err, worqr.ErrDuplicate) {
		t.Fatalf("enqueue before UniqueTTL passed: %v, want ErrDuplicate", err)
	}
	env.Advance(t, time.Millisecond)
	if _, err := env.Client().Enqueue(ctx, "digests", nil, opts); err != nil {
		t.Fatalf("enqueue once UniqueTTL passed: %v", err)
	}
}

func TestNewHidesThePassword(t *testing.T) {
	msg := mustFail(t, func(tb testing.TB) {
		worqrtest.New(tb, &worqrtest.Options{RedisURL: "redis://ann:secret@127.0.0.1:1/0"})
	}, "worqrtest: Redis at redis://ann:xxxxx@127.0.0.1:1/0")
	if strings.Contains(msg, "secret") {
		t.Fatalf("the failure shows the password: %s", msg)
	}
}
