package registry

import (
	"context"
	"errors"
	"time"

	"github.com/worqr/worqr-go/internal/rdb"
)

// ConnGetter is satisfied by *redis.Pool. The registry never closes it.
type ConnGetter = rdb.ConnGetter

// Queue names one queue: the hash tag its keys live under and its name. A
// stand-alone queue is its own tag; a flow's stage and child queues have the
// flow's name as their tag.
type Queue = rdb.QueueRef

// ErrIDInUse is returned by Register for an id whose keepalive exists: ids
// are never reused.
var ErrIDInUse = rdb.ErrIDInUse

// Registry reads and writes the {reg} keys of one namespace.
type Registry struct {
	st *rdb.Store
}

// New returns the registry of namespace (for example "worqr") on pool.
func New(pool ConnGetter, namespace string) (*Registry, error) {
	if pool == nil {
		return nil, errors.New("registry: pool is nil")
	}
	if namespace == "" {
		return nil, errors.New("registry: namespace is empty")
	}
	return &Registry{st: rdb.NewStore(pool, namespace)}, nil
}

// Register creates worker id's keepalive (alive for ttl), lists it in the
// Workers set, describes it (host, process id) and records the queues it
// serves, in one atomic step. at is Redis's clock read before the keepalive
// was set: it lives at least until at + ttl.
func (r *Registry) Register(ctx context.Context, id string, ttl time.Duration, host string, pid int, queues []Queue) (at time.Time, err error) {
	ms, err := r.st.Register(ctx, id, ttl.Milliseconds(), host, pid, queues)
	if err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(ms), nil
}

// Beat renews worker id's keepalive for ttl. It reports false when the key was
// already gone: the worker is dead to the cluster and must not renew it. at is
// Redis's clock read just before the renewal (same round trip): a renewed
// keepalive lives at least until at + ttl.
func (r *Registry) Beat(ctx context.Context, id string, ttl time.Duration) (alive bool, at time.Time, err error) {
	alive, ms, err := r.st.Beat(ctx, id, ttl.Milliseconds())
	if err != nil {
		return false, time.Time{}, err
	}
	return alive, time.UnixMilli(ms), nil
}

// Deregister deletes worker id's keepalive and description and removes it
// from the Workers set. Call it only once the worker holds no takings (or
// they were requeued).
func (r *Registry) Deregister(ctx context.Context, id string) error {
	return r.st.Deregister(ctx, id)
}

// Workers returns the registered worker ids, alive or not yet reaped.
func (r *Registry) Workers(ctx context.Context) ([]string, error) {
	return r.st.Workers(ctx)
}

// Alive reports for each id whether its keepalive key exists.
func (r *Registry) Alive(ctx context.Context, ids []string) ([]bool, error) {
	return r.st.Alive(ctx, ids)
}

// Forget removes ids from the Workers set (their keepalives are gone).
func (r *Registry) Forget(ctx context.Context, ids []string) error {
	return r.st.Forget(ctx, ids)
}

// KnownQueues returns every queue any worker of the namespace ever served or
// any client enqueued to.
func (r *Registry) KnownQueues(ctx context.Context) ([]Queue, error) {
	return r.st.KnownQueues(ctx)
}

// AcquireLease makes holder the reaper for ttl (at least 1 ms) if nobody
// holds the lease. It reports whether holder got it. The lease is never
// released early: it spaces reaper passes across the whole cluster.
func (r *Registry) AcquireLease(ctx context.Context, holder string, ttl time.Duration) (bool, error) {
	return r.st.AcquireLease(ctx, holder, ttl.Milliseconds())
}

// WorkerInfo describes one registered worker.
type WorkerInfo struct {
	ID      string
	Host    string
	PID     int
	Started time.Time // Redis time of registration
	TTL     time.Duration
	Queues  []Queue
	// Alive is false when the keepalive is gone (dead, not yet reaped).
	Alive bool
	// KeepaliveAge is how long ago the keepalive was last renewed (as TTL
	// minus the time it has left); 0 when dead.
	KeepaliveAge time.Duration
}

// Describe returns what the registry holds about the given workers.
func (r *Registry) Describe(ctx context.Context, ids []string) ([]WorkerInfo, error) {
	recs, err := r.st.WorkerRecords(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]WorkerInfo, len(recs))
	for i, rec := range recs {
		wi := WorkerInfo{ID: rec.ID, Host: rec.Host, PID: rec.PID, TTL: time.Duration(rec.TTLMs) * time.Millisecond,
			Queues: rec.Queues, Alive: rec.KeepaliveLeftMs >= 0}
		if rec.Start > 0 {
			wi.Started = time.UnixMilli(rec.Start)
		}
		if wi.Alive {
			wi.KeepaliveAge = max(wi.TTL-time.Duration(rec.KeepaliveLeftMs)*time.Millisecond, 0)
		}
		out[i] = wi
	}
	return out, nil
}
