// Package seam carries test-only dependencies into a worqr.Worker without a
// public hook: a test puts them in the context given to Worker.Start, which
// nothing outside this module can do (the package is internal).
package seam

import (
	"context"
	"sync"
	"time"

	"github.com/worqr/worqr-go/heartbeat"
)

type clockKey struct{}

// WithHeartbeatClock returns ctx carrying the clock the worker's keepalive
// loop reads.
func WithHeartbeatClock(ctx context.Context, c heartbeat.Clock) context.Context {
	return context.WithValue(ctx, clockKey{}, c)
}

// HeartbeatClock returns the clock ctx carries, or nil.
func HeartbeatClock(ctx context.Context) heartbeat.Clock {
	c, _ := ctx.Value(clockKey{}).(heartbeat.Clock)
	return c
}

// ManualClock is a heartbeat.Clock that moves only when Advance is called:
// a worker whose keepalive clock is not advanced stops beating, as a frozen
// process would, while everything else in it runs.
type ManualClock struct {
	mu      sync.Mutex
	now     time.Time
	tickers []*manualTicker
}

// NewManualClock returns a clock reading start.
func NewManualClock(start time.Time) *ManualClock { return &ManualClock{now: start} }

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTicker returns a ticker that fires as Advance passes its period.
func (c *ManualClock) NewTicker(d time.Duration) heartbeat.Ticker {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTicker{c: make(chan time.Time, 1), period: d, next: c.now.Add(d), clock: c}
	c.tickers = append(c.tickers, t)
	return t
}

// Advance moves the clock by d and fires every ticker whose time came (at
// most one pending tick each, as time.Ticker drops ticks).
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.tickers {
		if t.stopped {
			continue
		}
		if t.next.After(c.now) {
			continue
		}
		select { // one tick per Advance at most, as time.Ticker drops ticks
		case t.c <- t.next:
		default:
		}
		for !t.next.After(c.now) {
			t.next = t.next.Add(t.period)
		}
	}
}

// Run advances the clock by step every interval of wall time, from a
// goroutine of its own, until the returned stop is called: a frozen worker
// running again.
func (c *ManualClock) Run(step, every time.Duration) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			c.Advance(step)
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done) }
}

type manualTicker struct {
	c       chan time.Time
	period  time.Duration
	next    time.Time
	stopped bool
	clock   *ManualClock
}

func (t *manualTicker) C() <-chan time.Time { return t.c }

func (t *manualTicker) Stop() {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	t.stopped = true
}
