package worqrtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"
	"github.com/rs/xid"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/recovery"
	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// envRedisURL names the environment variable that sends every Env not
// created with Options.RedisURL or Options.InProcess to a real Redis.
const envRedisURL = "WORQR_TEST_REDIS_URL"

// Options are New's options. A nil pointer means the defaults.
type Options struct {
	// RedisURL is a real Redis to run on (redis://host:port/db), in a
	// namespace of the Env's own that its cleanup deletes. Default: the
	// WORQR_TEST_REDIS_URL environment variable, and when that is empty
	// too, an in-process Redis (miniredis) of the Env's own.
	RedisURL string
	// InProcess runs the Env on an in-process Redis whatever
	// WORQR_TEST_REDIS_URL says: for tests that move the clock (Advance),
	// which only the in-process Redis allows.
	InProcess bool
}

// Env is one test's worqr: a Redis (in-process by default), a namespace of
// its own, a Client and an Inspector on it, and, on the in-process Redis,
// a clock that moves only when the test says so. Create it with New; it is
// cleaned up when the test ends. It is safe for concurrent use.
type Env struct {
	ns        string
	url       string
	mr        *miniredis.Miniredis // nil on a real Redis
	pool      *redis.Pool
	client    *worqr.Client
	inspector *worqr.Inspector
	mover     *recovery.Reaper
	queues    atomic.Int64 // queues made up by Work

	clockMu sync.Mutex
	clock   time.Time // the in-process Redis's time (TIME)
}

// New returns an Env for t. On the in-process Redis its clock starts at the
// wall clock's time, to the millisecond, and stands still until Advance.
func New(t testing.TB, opts *Options) *Env {
	t.Helper()
	var o Options
	if opts != nil {
		o = *opts
	}
	addr := o.RedisURL
	if addr == "" && !o.InProcess {
		addr = os.Getenv(envRedisURL)
	}
	e := &Env{ns: "worqrtest-" + xid.New().String(), url: addr}
	if addr == "" {
		e.mr = miniredis.NewMiniRedis()
		if err := e.mr.Start(); err != nil {
			t.Fatalf("worqrtest: starting the in-process Redis: %v", err)
		}
		t.Cleanup(e.mr.Close)
		e.clock = time.Now().Truncate(time.Millisecond)
		e.mr.SetTime(e.clock)
		// Keys expire as the clock moves (keepalives, unique keys, ids),
		// and only then.
		e.mr.ClockTTL(true)
		addr = "redis://" + e.mr.Addr()
	}
	pool, err := redisconn.NewPool(addr, nil)
	if err != nil {
		t.Fatalf("worqrtest: %s: %v", e.where(), err)
	}
	e.pool = pool
	t.Cleanup(func() { pool.Close() })
	cfg := e.Config()
	if e.client, err = worqr.NewClient(pool, &cfg); err != nil {
		t.Fatalf("worqrtest: %v", err)
	}
	if e.inspector, err = worqr.NewInspector(pool, &cfg); err != nil {
		t.Fatalf("worqrtest: %v", err)
	}
	if e.mover, err = recovery.New(pool, &recovery.Config{Namespace: e.ns, Interval: time.Second}); err != nil {
		t.Fatalf("worqrtest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.inspector.Ping(ctx); err != nil {
		t.Fatalf("worqrtest: Redis at %s: %v", e.where(), err)
	}
	if e.mr == nil {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := e.inspector.DeleteNamespace(ctx); err != nil {
				t.Errorf("worqrtest: deleting namespace %s: %v", e.ns, err)
			}
		})
	}
	return e
}

// where names the Redis the Env runs on, for messages, without its
// password.
func (e *Env) where() string {
	if e.mr != nil {
		return "the in-process Redis"
	}
	if u, err := url.Parse(e.url); err == nil {
		return u.Redacted()
	}
	return "the Redis of Options.RedisURL or " + envRedisURL
}

// Pool is the Env's connection pool, for the Clients, Workers and
// Schedulers of the code under test. The Env closes it when the test ends.
func (e *Env) Pool() *redis.Pool { return e.pool }

// Config is the worqr.Config of the Env: its namespace, and DisableEvents
// (a Worker's OnEvent still sees its events; set it to false on a copy to
// test Inspector.Follow). Give it to every Client, Worker, Inspector and
// Scheduler of the test, so that they share the Env's tasks.
func (e *Env) Config() worqr.Config {
	return worqr.Config{Namespace: e.ns, DisableEvents: true}
}

// Client is a Client on the Env's namespace.
func (e *Env) Client() *worqr.Client { return e.client }

// Inspector is an Inspector on the Env's namespace.
func (e *Env) Inspector() *worqr.Inspector { return e.inspector }

// Now is the time on Redis's clock, to the millisecond: the time every
// due time, deadline, retry and periodic tick is compared with. On the
// in-process Redis it stands still between calls of Advance; on a real
// Redis it is read from Redis (the local clock if Redis cannot be read).
func (e *Env) Now() time.Time {
	if e.mr != nil {
		e.clockMu.Lock()
		defer e.clockMu.Unlock()
		return e.clock
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ms, err := rdb.NewStore(e.pool, e.ns).Time(ctx, rdb.PeriodicTag)
	if err != nil {
		return time.Now().Truncate(time.Millisecond)
	}
	return time.UnixMilli(ms)
}

// Advance moves Redis's clock forward by d, and does what worqr's
// background loops would have done meanwhile: scheduled tasks (delays,
// retries) that came due move to their queues, as a reaper would have
// moved them, and each tick of a periodic schedule registered in the
// namespace (Scheduler.Register, or a Scheduler's Start) is fired at its
// time, as a running Scheduler would have: at most 1,000 ticks (more fail
// the test: advance in smaller steps).
//
// It needs the in-process Redis: on a real one, whose clock nobody moves,
// it fails the test.
func (e *Env) Advance(t testing.TB, d time.Duration) {
	t.Helper()
	if e.mr == nil {
		t.Fatalf("worqrtest: Advance needs the in-process Redis, and this Env runs on %s: "+
			"create it with Options.InProcess for a test that moves the clock", e.where())
	}
	if d < 0 {
		t.Fatalf("worqrtest: Advance(%s): the clock only moves forward", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e.clockMu.Lock()
	defer e.clockMu.Unlock()
	target := e.clock.Add(d)
	for ticks := 0; ; ticks++ {
		next, err := e.nextTick(ctx, target)
		if err != nil {
			t.Fatalf("worqrtest: Advance: %v", err)
		}
		if next.IsZero() {
			break
		}
		if ticks == maxTicks {
			t.Fatalf("worqrtest: Advance(%s) passes more than %d ticks of periodic schedules: advance in smaller steps", d, maxTicks)
		}
		if next.After(e.clock) {
			e.set(next)
		}
		if err := e.move(ctx); err != nil {
			t.Fatalf("worqrtest: Advance: %v", err)
		}
		if err := e.fire(ctx); err != nil {
			t.Fatalf("worqrtest: Advance: firing the ticks due at %s: %v", stamp(e.clock), err)
		}
	}
	e.set(target)
	if err := e.move(ctx); err != nil {
		t.Fatalf("worqrtest: Advance: %v", err)
	}
}

// maxTicks is the most periodic ticks one Advance fires: each one is a
// Scheduler's pass, a few milliseconds.
const maxTicks = 1000

// set sets the in-process Redis's clock.
func (e *Env) set(now time.Time) {
	e.clock = now
	e.mr.SetTime(now)
}

// nextTick returns the earliest next tick, at or before limit, of the
// schedules not paused (zero: none).
func (e *Env) nextTick(ctx context.Context, limit time.Time) (time.Time, error) {
	scheds, err := e.inspector.Schedules(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("reading schedules: %w", err)
	}
	var next time.Time
	for _, s := range scheds {
		if s.Paused || s.Next.IsZero() || s.Next.After(limit) {
			continue
		}
		if next.IsZero() || s.Next.Before(next) {
			next = s.Next
		}
	}
	return next, nil
}

// fire runs a Scheduler's pass: it fires the ticks due on the clock.
func (e *Env) fire(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, defaultBound)
	defer cancel()
	cfg := worqr.SchedulerConfig{Config: e.Config(), PollInterval: time.Hour} // one pass, at Start
	s, err := worqr.NewScheduler(e.pool, &cfg)
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	defer s.Stop(context.WithoutCancel(ctx))
	for {
		next, err := e.nextTick(ctx, e.clock)
		if err != nil || next.IsZero() {
			return err
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(time.Millisecond):
		}
	}
}

// move moves every due scheduled task to its queue, as a reaper does.
func (e *Env) move(ctx context.Context) error {
	if _, err := e.mover.Move(ctx); err != nil {
		return fmt.Errorf("moving due tasks: %w", err)
	}
	return nil
}
