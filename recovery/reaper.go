package recovery

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/registry"
)

// Recovered reports what a pass did for one queue.
type Recovered struct {
	Queue     string
	Workers   []string // the dead workers whose takings were requeued
	Requeued  int
	Cancelled int // takings dropped because their cancel had been asked
}

// Reaper requeues the takings of dead workers.
type Reaper struct {
	Pool     rdb.ConnGetter
	Keys     rdb.Keys
	Registry *registry.Registry
	// Holder is written into the lease; any string that names this process.
	Holder string
	// Interval between lease attempts and the lease's length.
	Interval time.Duration
	Logger   *slog.Logger
	// OnRecovered, when set, is called for each queue a pass requeued in.
	OnRecovered func(Recovered)
}

// Run tries the lease every Interval and runs a pass when it gets it, until
// ctx ends. Errors are logged and the loop goes on.
func (r *Reaper) Run(ctx context.Context) {
	t := time.NewTicker(r.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// The lease ends a little before the next tick, so that a lone
		// reaper gets it every interval (Redis expires to the millisecond,
		// and a lease of exactly one interval is often still there).
		ok, err := r.Registry.AcquireLease(ctx, r.Holder, r.Interval*9/10)
		if err != nil {
			if ctx.Err() == nil {
				r.log().Warn("recovery: lease failed", "err", err)
			}
			continue
		}
		if !ok {
			continue
		}
		if _, err := r.Pass(ctx); err != nil && ctx.Err() == nil {
			r.log().Warn("recovery: pass failed", "err", err)
		}
		if _, err := r.Move(ctx); err != nil && ctx.Err() == nil {
			r.log().Warn("recovery: mover failed", "err", err)
		}
	}
}

// Pass runs one recovery pass without the lease and returns what it requeued.
// It is safe to run concurrently with other passes.
func (r *Reaper) Pass(ctx context.Context) ([]Recovered, error) {
	queues, err := r.Registry.KnownQueues(ctx)
	if err != nil {
		return nil, err
	}
	c, err := r.Pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()

	// One round trip: every queue's holder index and the Workers set.
	qks := make([]rdb.QueueKeys, len(queues))
	for i, q := range queues {
		qks[i] = r.Keys.Queue(q)
		if err := c.Send("SMEMBERS", qks[i].Holders); err != nil {
			return nil, err
		}
	}
	if err := c.Send("SMEMBERS", r.Keys.Workers()); err != nil {
		return nil, err
	}
	if err := c.Flush(); err != nil {
		return nil, err
	}
	holders := make([][]string, len(queues))
	seen := map[string]bool{}
	var ids []string
	add := func(list []string) {
		for _, w := range list {
			if !seen[w] {
				seen[w] = true
				ids = append(ids, w)
			}
		}
	}
	for i := range queues {
		holders[i], err = redis.Strings(redis.ReceiveContext(c, ctx))
		if err != nil {
			return nil, err
		}
		add(holders[i])
	}
	registered, err := redis.Strings(redis.ReceiveContext(c, ctx))
	if err != nil {
		return nil, err
	}
	add(registered)
	if len(ids) == 0 {
		return nil, nil
	}

	alive, err := r.Registry.Alive(ctx, ids)
	if err != nil {
		return nil, err
	}
	dead := map[string]bool{}
	for i, id := range ids {
		if !alive[i] {
			dead[id] = true
		}
	}
	if len(dead) == 0 {
		return nil, nil
	}

	var out []Recovered
	for i, qk := range qks {
		var ws []string
		for _, w := range holders[i] {
			if dead[w] {
				ws = append(ws, w)
			}
		}
		if len(ws) == 0 {
			continue
		}
		n, cancelled, err := rdb.Requeue(ctx, c, qk, ws, true)
		if err != nil {
			return out, fmt.Errorf("recovery: requeue %s: %w", qk.Ref.Name, err)
		}
		rec := Recovered{Queue: qk.Ref.Name, Workers: ws, Requeued: n, Cancelled: cancelled}
		if n > 0 || cancelled > 0 {
			r.log().Info("recovery: requeued takings of dead workers",
				"queue", rec.Queue, "workers", ws, "requeued", n, "cancelled", cancelled)
			if r.OnRecovered != nil {
				r.OnRecovered(rec)
			}
			out = append(out, rec)
		}
	}
	var gone []string
	for _, w := range registered {
		if dead[w] {
			gone = append(gone, w)
		}
	}
	if err := r.Registry.Forget(ctx, gone); err != nil {
		return out, err
	}
	return out, nil
}

// MoveBatch is how many due tasks one move script call moves.
const MoveBatch = 500

// Move pushes every due scheduled task (delayed enqueues, retries) of every
// known queue to the back of its queue, in batches of MoveBatch, each batch
// one atomic script run against Redis time; it also trims dead sets by age.
// It is safe to run concurrently with other movers: each task moves once.
// It returns how many tasks it moved.
func (r *Reaper) Move(ctx context.Context) (int, error) {
	queues, err := r.Registry.KnownQueues(ctx)
	if err != nil {
		return 0, err
	}
	c, err := r.Pool.GetContext(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	total := 0
	for _, q := range queues {
		qk := r.Keys.Queue(q)
		for {
			n, err := rdb.Move(ctx, c, qk, MoveBatch)
			if err != nil {
				return total, fmt.Errorf("recovery: move %s: %w", q.Name, err)
			}
			total += n
			if n < MoveBatch {
				break
			}
		}
	}
	return total, nil
}

func (r *Reaper) log() *slog.Logger {
	if r.Logger == nil {
		return slog.Default()
	}
	return r.Logger
}
