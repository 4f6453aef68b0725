package heartbeat_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/heartbeat"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/registry"
)

const (
	interval = 50 * time.Millisecond
	ttl      = 500 * time.Millisecond // ten intervals: slack for a loaded CI machine
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type env struct {
	pool *redis.Pool
	k    rdb.Keys
	loop *heartbeat.Loop
}

// newEnv registers worker "A" with the test TTL and returns a loop for it.
func newEnv(t *testing.T) *env {
	t.Helper()
	pool := srv.TagCheckedPool(t)
	k := rdb.NewKeys(redistest.Namespace())
	reg := registry.New(pool, k)
	if err := reg.Register(context.Background(), "A", ttl, nil); err != nil {
		t.Fatal(err)
	}
	return &env{pool: pool, k: k, loop: &heartbeat.Loop{
		Registry: reg, ID: "A", Interval: interval, TTL: ttl, Logger: quiet,
	}}
}

func (e *env) keyExists(t *testing.T) bool {
	t.Helper()
	c := e.pool.Get()
	defer c.Close()
	n, err := redis.Int(c.Do("EXISTS", e.k.Keepalive("A")))
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// start runs the loop in a goroutine; the returned channel gets Run's error.
// The loop is stopped at cleanup.
func (e *env) start(t *testing.T, ctx context.Context) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		done <- e.loop.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-finished:
		case <-time.After(5 * time.Second):
			t.Error("Run did not return after its context was cancelled")
		}
	})
	return done
}

// wait returns Run's result, failing the test if it takes longer than d.
func wait(t *testing.T, done <-chan error, d time.Duration) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("Run did not return within %v", d)
		return nil
	}
}

func TestRunReturnsLostWhenKeyDeleted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	done := e.start(t, context.Background())
	time.Sleep(2 * interval) // a couple of good beats first

	c := e.pool.Get()
	_, err := c.Do("DEL", e.k.Keepalive("A"))
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	// The next beat (within one interval) finds the key gone. The bound
	// is generous; the point is that Run does not wait for its context.
	if err := wait(t, done, 2*time.Second); !errors.Is(err, heartbeat.ErrLost) {
		t.Fatalf("Run = %v, want ErrLost", err)
	}
	if e.keyExists(t) {
		t.Error("the loop recreated the deleted keepalive")
	}
}

func TestRunKeepsKeyAlive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	done := e.start(t, context.Background())

	// Over three TTLs the key, left alone, would expire; the loop renews it.
	end := time.Now().Add(3 * ttl)
	for time.Now().Before(end) {
		if !e.keyExists(t) {
			t.Fatal("keepalive expired while the loop was running")
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned %v while the key was alive", err)
		default:
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestPauseLetsKeyExpire(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	done := e.start(t, context.Background())
	time.Sleep(2 * interval)

	e.loop.Pause()
	deadline := time.Now().Add(5 * time.Second)
	for e.keyExists(t) {
		if time.Now().After(deadline) {
			t.Fatal("keepalive still exists 5s after Pause")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Paused like a frozen process: it has not noticed anything yet.
	time.Sleep(2 * interval)
	select {
	case err := <-done:
		t.Fatalf("Run returned %v while paused", err)
	default:
	}

	e.loop.Resume()
	if err := wait(t, done, 2*time.Second); !errors.Is(err, heartbeat.ErrLost) {
		t.Fatalf("Run after Resume = %v, want ErrLost", err)
	}
	if e.keyExists(t) {
		t.Error("the loop brought an expired keepalive back")
	}
}

func TestRunReturnsContextError(t *testing.T) {
	t.Parallel()
	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := e.start(t, ctx)
		time.Sleep(2 * interval)
		cancel()
		if err := wait(t, done, 2*time.Second); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v, want context.Canceled", err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		ctx, cancel := context.WithTimeout(context.Background(), 3*interval)
		defer cancel()
		done := e.start(t, ctx)
		if err := wait(t, done, 2*time.Second); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Run = %v, want context.DeadlineExceeded", err)
		}
	})
}

// brokenPool fails every connection, as an unreachable Redis would.
type brokenPool struct{}

func (brokenPool) GetContext(context.Context) (redis.Conn, error) {
	return nil, errors.New("dial tcp: connection refused")
}

func TestRunLostWhenNoBeatForATTL(t *testing.T) {
	t.Parallel()
	loop := &heartbeat.Loop{
		Registry: registry.New(brokenPool{}, rdb.NewKeys(redistest.Namespace())),
		ID:       "A", Interval: interval, TTL: ttl, Logger: quiet,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	err := loop.Run(ctx)
	elapsed := time.Since(start)
	if !errors.Is(err, heartbeat.ErrLost) {
		t.Fatalf("Run with Redis unreachable = %v, want ErrLost", err)
	}
	// Failed beats alone are not a loss: only a whole TTL without a good one.
	if elapsed < ttl {
		t.Errorf("Run gave up after %v, before a whole TTL (%v) without a beat", elapsed, ttl)
	}
}

// deadFirst hands out n dead connections (as a pool full of connections
// reset by a blip would), then live ones from pool.
type deadFirst struct {
	pool *redis.Pool
	mu   sync.Mutex
	n    int
}

func (d *deadFirst) GetContext(ctx context.Context) (redis.Conn, error) {
	d.mu.Lock()
	dead := d.n > 0
	if dead {
		d.n--
	}
	d.mu.Unlock()
	if dead {
		a, b := net.Pipe()
		b.Close()
		return redis.NewConn(a, time.Second, time.Second), nil
	}
	return d.pool.GetContext(ctx)
}

// One blip must not cost the keepalive: a beat that draws dead connections
// tries others within the same interval.
func TestBeatSurvivesDeadPooledConnections(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// As many dead connections as beats in one TTL: without retries inside
	// a beat, every beat of a whole TTL fails and the keepalive is lost.
	getter := &deadFirst{pool: e.pool, n: 2 * int(ttl/interval)}
	e.loop.Registry = registry.New(getter, e.k)
	done := e.start(t, context.Background())
	select {
	case err := <-done:
		t.Fatalf("Run returned %v: dead pooled connections cost the keepalive", err)
	case <-time.After(2 * ttl):
	}
	if !e.keyExists(t) {
		t.Fatal("keepalive expired")
	}
}
