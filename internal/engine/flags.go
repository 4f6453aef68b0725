package engine

import (
	"sync/atomic"
	"time"

	"github.com/worqr/worqr-go/internal/rdb"
)

// Flags are what a queue's config hash says, as last read, and what its
// takes learnt of its limits.
type Flags struct {
	Paused  atomic.Bool  // a paused queue gives nothing
	Levels  atomic.Int32 // the highest priority level in use
	Limited atomic.Bool  // it may have global limits
	Fair    atomic.Bool  // its keys share it (rdb.KeyPolicy.Fair)
	// KeyLimited: its keys may be limited (rdb.QueueFlags.KeyLimited).
	KeyLimited atomic.Bool
	Rate       RateGate // the rate limit allows no start before its time
	// ConcWait: the concurrency limit was reached, until a wake-up, a
	// poll, or flags that say the queue has no limits (a Worker's only).
	ConcWait atomic.Bool
}

// Apply stores flags f: the limits may have changed (a rate raised or
// removed), so the next take works out the wait again from what is stored
// now rather than wait out the one the old limits said. It reports
// whether the queue was resumed and whether a rate wait was dropped.
func (q *Flags) Apply(f rdb.QueueFlags) (resumed, unheld bool) {
	q.Levels.Store(int32(f.Levels))
	unheld = q.Rate.Clear()
	q.Limited.Store(f.Limited)
	q.Fair.Store(f.Fair)
	q.KeyLimited.Store(f.KeyLimited)
	if !f.Limited {
		q.ConcWait.Store(false)
	}
	was := q.Paused.Swap(f.Paused)
	return was && !f.Paused, unheld
}

// RateGate is when a queue's rate limit allows the next start, as the
// last take said (unix ns; 0: no wait known).
type RateGate struct{ until atomic.Int64 }

// Hold records that no start is allowed for wait ms.
func (g *RateGate) Hold(wait rdb.LimitWait) {
	g.until.Store(time.Now().Add(time.Duration(wait) * time.Millisecond).UnixNano())
}

// Held reports whether no start is allowed now, and until when.
func (g *RateGate) Held() (bool, time.Time) {
	if u := g.until.Load(); u > 0 {
		if t := time.Unix(0, u); time.Now().Before(t) {
			return true, t
		}
	}
	return false, time.Time{}
}

// Clear forgets the wait (the limits may have changed) and reports
// whether one was recorded.
func (g *RateGate) Clear() bool { return g.until.Swap(0) > 0 }
