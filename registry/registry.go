package registry

import (
	"context"

	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// ConnGetter is satisfied by *redis.Pool. The registry never closes it.
type ConnGetter = rdb.ConnGetter

// Registry reads and writes the {reg} keys of one namespace.
type Registry struct {
	pool ConnGetter
	keys rdb.Keys
}

// New returns the registry of the namespace keys was built for.
func New(pool ConnGetter, keys rdb.Keys) *Registry {
	return &Registry{pool: pool, keys: keys}
}

func (r *Registry) do(ctx context.Context, cmd string, args ...any) (any, error) {
	c, err := r.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return redis.DoContext(c, ctx, cmd, args...)
}

// Register creates worker id's keepalive (alive for ttl), lists it in the
// Workers set and records the queues it serves, in one atomic step.
func (r *Registry) Register(ctx context.Context, id string, ttl time.Duration, queues []rdb.QueueRef) error {
	c, err := r.pool.GetContext(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return rdb.Register(ctx, c, r.keys, id, ttl.Milliseconds(), queues)
}

// Beat renews worker id's keepalive for ttl. It reports false when the key was
// already gone: the worker is dead to the cluster and must not renew it.
func (r *Registry) Beat(ctx context.Context, id string, ttl time.Duration) (bool, error) {
	reply, err := r.do(ctx, "SET", r.keys.Keepalive(id), "RUN", "PX", ttl.Milliseconds(), "XX")
	if err != nil {
		return false, err
	}
	return reply != nil, nil
}

// Deregister deletes worker id's keepalive and removes it from the Workers
// set. Call it only once the worker holds no takings (or they were requeued).
func (r *Registry) Deregister(ctx context.Context, id string) error {
	c, err := r.pool.GetContext(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Send("MULTI"); err != nil {
		return err
	}
	_ = c.Send("DEL", r.keys.Keepalive(id))
	_ = c.Send("SREM", r.keys.Workers(), id)
	_, err = redis.DoContext(c, ctx, "EXEC")
	return err
}

// Workers returns the registered worker ids, alive or not yet reaped.
func (r *Registry) Workers(ctx context.Context) ([]string, error) {
	return redis.Strings(r.do(ctx, "SMEMBERS", r.keys.Workers()))
}

// Alive reports for each id whether its keepalive key exists.
func (r *Registry) Alive(ctx context.Context, ids []string) ([]bool, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = r.keys.Keepalive(id)
	}
	vals, err := redis.Values(r.do(ctx, "MGET", args...))
	if err != nil {
		return nil, err
	}
	if len(vals) != len(ids) {
		return nil, fmt.Errorf("registry: MGET returned %d values for %d keys", len(vals), len(ids))
	}
	out := make([]bool, len(ids))
	for i, v := range vals {
		out[i] = v != nil
	}
	return out, nil
}

// Forget removes ids from the Workers set (their keepalives are gone).
func (r *Registry) Forget(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	args := make([]any, 0, len(ids)+1)
	args = append(args, r.keys.Workers())
	for _, id := range ids {
		args = append(args, id)
	}
	_, err := r.do(ctx, "SREM", args...)
	return err
}

// KnownQueues returns every queue any worker of the namespace ever served.
func (r *Registry) KnownQueues(ctx context.Context) ([]rdb.QueueRef, error) {
	members, err := redis.Strings(r.do(ctx, "SMEMBERS", r.keys.KnownQueues()))
	if err != nil {
		return nil, err
	}
	out := make([]rdb.QueueRef, len(members))
	for i, m := range members {
		out[i] = rdb.ParseMember(m)
	}
	return out, nil
}

// AcquireLease makes holder the reaper for ttl if nobody holds the lease. It
// reports whether holder got it. The lease is never released early: it
// spaces reaper passes across the whole cluster.
func (r *Registry) AcquireLease(ctx context.Context, holder string, ttl time.Duration) (bool, error) {
	reply, err := r.do(ctx, "SET", r.keys.ReaperLease(), holder, "PX", ttl.Milliseconds(), "NX")
	if err != nil {
		return false, err
	}
	return reply != nil, nil
}
