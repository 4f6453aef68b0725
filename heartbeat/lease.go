package heartbeat

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/worqr/worqr-go/registry"
)

// Lease is a Session renewed by its owner's calls instead of a Keeper's loop:
// a remote worker (the gateway's sessions) beats it over the network. It
// follows the same rules as a Keeper's session: registered with a keepalive
// of TTL, deadline Until on Redis's clock, and once lost (the key found gone,
// or no good beat sent for TTL - TTL/10 by the local clock) it is retired
// for good and never renewed again; a new lease has a new id.
type Lease struct {
	*Session
	reg   *registry.Registry
	ttl   time.Duration
	clock Clock
	// lastOK is when the last good beat was sent, as the time since epoch
	// (the clock when the lease was opened), so that it keeps the clock's
	// monotonic reading (see Keeper).
	lastOK atomic.Int64
	epoch  time.Time
}

// Open registers a new lease (a new worker id) with a keepalive of ttl,
// recording host, pid and the queues it may take from (the reaper's view of
// what it may hold). clock nil means the system clock.
func Open(ctx context.Context, reg *registry.Registry, ttl time.Duration, host string, pid int, queues []registry.Queue, clock Clock) (*Lease, error) {
	if reg == nil {
		return nil, errors.New("heartbeat: Open: registry is nil")
	}
	if ttl <= 0 {
		return nil, errors.New("heartbeat: Open: ttl must be positive")
	}
	if clock == nil {
		clock = systemClock{}
	}
	sent := clock.Now()
	s, err := register(ctx, reg, context.Background(), ttl, host, pid, queues)
	if err != nil {
		return nil, err
	}
	l := &Lease{Session: s, reg: reg, ttl: ttl, clock: clock, epoch: sent}
	return l, nil
}

// TTL is the lease's keepalive lifetime.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Fresh reports whether the last good beat was sent less than TTL - TTL/10
// ago by the local clock: past that the keepalive may be gone (and the
// reaper may have requeued what the lease held), so the lease must not act.
// A lease found stale is retired (cause ErrLost).
func (l *Lease) Fresh() bool {
	if l.Lost() {
		return false
	}
	if l.clock.Now().Sub(l.epoch)-time.Duration(l.lastOK.Load()) < l.ttl-l.ttl/10 {
		return true
	}
	l.Retire(ErrLost)
	return false
}

// Beat renews the keepalive once. It returns ErrLost (and retires the lease)
// when the lease is stale or its key was gone; a connection error is
// returned as is (the lease stays as it was: the caller may beat again while
// Fresh).
func (l *Lease) Beat(ctx context.Context) error {
	if !l.Fresh() {
		return l.Cause()
	}
	sent := l.clock.Now()
	alive, at, err := l.reg.Beat(ctx, l.id, l.ttl)
	if err != nil {
		return err
	}
	if !alive {
		l.Retire(ErrLost)
		return l.Cause()
	}
	l.lastOK.Store(int64(sent.Sub(l.epoch)))
	l.extend(at, l.ttl)
	return nil
}
