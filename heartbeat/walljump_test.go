package heartbeat_test

import (
	"context"
	"errors"
	"testing"
	"time"
	"unsafe"

	"github.com/worqr/worqr-go/heartbeat"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/internal/seam"
	"github.com/worqr/worqr-go/registry"
)

// wallShifted returns t, which must carry a monotonic clock reading (as
// time.Now's do), with its wall clock moved by whole seconds of d and its
// monotonic reading kept: what time.Now returns after the system clock was
// stepped (NTP, a VM resumed, an operator's date -s). time has no API for
// it; the layout is that of Go's time.Time (with a monotonic reading, wall
// holds 33 bits of seconds since 1885 above 30 bits of nanoseconds).
func wallShifted(t *testing.T, at time.Time, d time.Duration) time.Time {
	t.Helper()
	type rep struct {
		wall uint64
		ext  int64
		loc  *time.Location
	}
	r := *(*rep)(unsafe.Pointer(&at))
	if r.wall&(1<<63) == 0 {
		t.Fatal("wallShifted: no monotonic reading")
	}
	r.wall = uint64(int64(r.wall) + int64(d/time.Second)<<30)
	out := *(*time.Time)(unsafe.Pointer(&r))
	if got := out.Unix() - at.Unix(); got != int64(d/time.Second) || out.Sub(at) != 0 {
		t.Fatalf("wallShifted: wall moved %ds, monotonic %v; the layout of time.Time changed", got, out.Sub(at))
	}
	return out
}

// stepClock is a manual clock whose readings carry a monotonic reading
// that follows Advance, and whose wall clock can be stepped apart from it.
type stepClock struct {
	*tickClock
	t     *testing.T
	start time.Time // the manual clock's start
	mono  time.Time // time.Now() when made: the monotonic base
	step  time.Duration
}

func newStepClock(t *testing.T) *stepClock {
	start := time.Unix(1_700_000_000, 0)
	return &stepClock{
		tickClock: &tickClock{ManualClock: seam.NewManualClock(start), made: make(chan struct{}, 100)},
		t:         t, start: start, mono: time.Now(),
	}
}

func (c *stepClock) Now() time.Time {
	return wallShifted(c.t, c.mono.Add(c.ManualClock.Now().Sub(c.start)), c.step)
}

// The Keeper and a Lease time their silence (Fresh, "no good beat for a
// whole TTL") on the local clock. They stored the last good beat as unix
// nanoseconds, which drops Go's monotonic reading: every elapsed time was
// read on the wall clock. A step of the system clock forward by a TTL made
// a worker stale (no takes, takings received not run) and, with one failed
// beat, retired its session (every handler cancelled and run again
// elsewhere); a Lease (a remote's session on the gateway) was retired at
// once. A step back made a worker cut off from Redis never find its
// keepalive lost: its handlers ran on for as long as the step, while the
// reaper requeued their tasks to other workers.
func TestKeeperTimesSilenceOnTheMonotonicClock(t *testing.T) {
	t.Parallel()
	t.Run("stepped forward", func(t *testing.T) {
		t.Parallel()
		clock := newStepClock(t)
		b := setup(t)
		b.clock = clock.tickClock
		b.keeper.Clock = clock
		s1 := b.start(t)
		b.run(t, b.ctx)
		b.waitTicker(t)
		b.beatOnce(t, s1.ID(), interval)
		b.waitFresh(t, "after a good beat")

		clock.step = 2 * ttl // the system clock jumps on: no time passed
		if !b.keeper.Fresh() {
			t.Error("Fresh() = false right after a good beat: the wall clock was stepped forward")
		}
		// One beat meets a blip.
		b.net.failNext(1000, dialFails)
		b.clock.Advance(interval)
		if e := b.next(t); e.Kind != heartbeat.Failed {
			t.Fatalf("event = %+v, want Failed", e)
		}
		select {
		case e := <-b.events:
			t.Fatalf("event %+v after one failed beat %v after a good one (TTL %v)", e, 2*interval, ttl)
		case <-time.After(10 * interval):
		}
		checkLive(t, s1)
	})
	t.Run("stepped back", func(t *testing.T) {
		t.Parallel()
		clock := newStepClock(t)
		const short = 5 * interval
		b := setup(t, func(k *heartbeat.Keeper) { k.TTL = short })
		b.clock = clock.tickClock
		b.keeper.Clock = clock
		s1 := b.start(t)
		b.run(t, b.ctx)
		b.waitTicker(t)
		clock.step = -time.Hour
		b.net.setDown(true) // cut off from Redis for good
		for range short / interval {
			b.clock.Advance(interval)
			if e := b.next(t); e.Kind != heartbeat.Failed {
				break
			}
		}
		deadline := time.After(patience)
		for {
			select {
			case e := <-b.events:
				if e.Kind == heartbeat.Lost && e.ID == s1.ID() {
					checkRetired(t, s1, heartbeat.ErrLost)
					return
				}
			case <-deadline:
				t.Fatalf("no Lost a whole TTL (%v) without a good beat: the wall clock was stepped back an hour", short)
			}
		}
	})
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
