package heartbeat_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/heartbeat"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/internal/seam"
	"github.com/worqr/worqr-go/registry"
)

func TestLeaseBeatsUntilStaleOrGone(t *testing.T) {
	ctx := context.Background()
	pool := srv.TagCheckedPool(t)
	reg, err := registry.New(pool, redistest.Namespace())
	if err != nil {
		t.Fatal(err)
	}
	clock := seam.NewManualClock(time.Unix(1_700_000_000, 0))
	open := func() *heartbeat.Lease {
		l, err := heartbeat.Open(ctx, reg, ttl, "remote-1", 0, nil, clock)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}

	// Beats move the deadline on; a lease not beaten for TTL - TTL/10 by
	// its clock is stale and retired for good, even though its key lives.
	l := open()
	until := l.Until()
	clock.Advance(ttl / 2)
	// The deadline is the beat's Redis time + TTL - TTL/10, in ms: a beat
	// in the same ms as the open would leave it where it was.
	for opened := until.Add(-(ttl - ttl/10)).UnixMilli(); redisMillis(t) <= opened; {
	}
	if err := l.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if !l.Until().After(until) {
		t.Errorf("a beat left the deadline at %v", l.Until())
	}
	clock.Advance(ttl - ttl/10)
	if l.Fresh() || !l.Lost() {
		t.Fatal("a lease silent for TTL - TTL/10 is still fresh")
	}
	if err := l.Beat(ctx); !errors.Is(err, heartbeat.ErrLost) {
		t.Errorf("beat of a stale lease = %v, want ErrLost", err)
	}
	if alive, _ := reg.Alive(ctx, []string{l.ID()}); !alive[0] {
		t.Error("the key should still live (only the lease gave up)")
	}

	// A beat that finds the key gone retires the lease.
	l = open()
	if err := reg.Deregister(ctx, l.ID()); err != nil {
		t.Fatal(err)
	}
	if err := l.Beat(ctx); !errors.Is(err, heartbeat.ErrLost) || !l.Lost() {
		t.Errorf("beat after the key vanished = %v (lost %v), want ErrLost", err, l.Lost())
	}
	if l.Context().Err() == nil {
		t.Error("a lost lease's context is not cancelled")
	}
}

// redisMillis is the test server's clock (TIME), in unix ms.
func redisMillis(t *testing.T) int64 {
	t.Helper()
	c, err := redis.DialURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	v, err := redis.Int64s(c.Do("TIME"))
	if err != nil {
		t.Fatal(err)
	}
	return v[0]*1000 + v[1]/1000
}

func TestLeaseTimesSilenceOnTheMonotonicClock(t *testing.T) {
	t.Parallel()
	reg, err := registry.New(srv.TagCheckedPool(t), redistest.Namespace())
	if err != nil {
		t.Fatal(err)
	}
	clock := newStepClock(t)
	l, err := heartbeat.Open(context.Background(), reg, ttl, "remote-1", 0, nil, clock)
	if err != nil {
		t.Fatal(err)
	}
	clock.step = ttl // the gateway's clock jumps on: no time passed
	if !l.Fresh() || l.Lost() {
		t.Fatal("a lease opened an instant ago is retired: the wall clock was stepped forward")
	}
	if err := l.Beat(context.Background()); err != nil {
		t.Fatalf("beat: %v", err)
	}

	clock.step = -time.Hour
	clock.Advance(ttl - ttl/10)
	if l.Fresh() || !errors.Is(l.Cause(), heartbeat.ErrLost) {
		t.Fatal("a lease silent for TTL - TTL/10 is still fresh: the wall clock was stepped back")
	}
}
