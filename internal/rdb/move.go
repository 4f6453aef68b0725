package rdb

import (
	"context"
	"fmt"

	"github.com/gomodule/redigo/redis"
)

// Move pushes up to batch due scheduled tasks to the back of the queue and
// trims the dead set by age. It returns how many it moved.
func (s *Store) Move(ctx context.Context, q QueueKeys, batch int) (int, error) {
	return redis.Int(s.eval(ctx, q.Ref.Tag, moveScript, moveArgs(q, batch)...))
}

func moveArgs(q QueueKeys, batch int) []any {
	return []any{q.Scheduled, q.Waiting, q.Dead, q.Config, batch, q.TaskPrefix, q.WakeChannel}
}

// ConnGroups splits qs into the groups whose calls may share a
// connection, in the order their first queue appears: one group on a
// pool that does not route by hash tag (a single Redis); on a Redis
// Cluster, one per master as the slot map last said (one per hash tag for
// a tag whose master is unknown). A call that reaches a node that no
// longer serves its slot is refused there, unrun (MoveEach sends it again
// alone).
func (s *Store) ConnGroups(qs []QueueRef) [][]QueueRef {
	if !s.tagged {
		if len(qs) == 0 {
			return nil
		}
		return [][]QueueRef{qs}
	}
	var out [][]QueueRef
	at := map[string]int{}
	for _, q := range qs {
		g := "tag " + q.Tag
		if s.shard != nil {
			if m := s.shard.MasterOf(q.Tag); m != "" {
				g = "master " + m
			}
		}
		i, ok := at[g]
		if !ok {
			i = len(out)
			at[g] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], q)
	}
	return out
}

// MoveEach is Move for each of qs, queues of one of ConnGroups' groups,
// in one round trip, each call moving up to batch tasks and deleting up to
// trim dead entries of each kind (TrimDead when alone): Redis runs the
// calls of a round trip back to back, so their bounds add up. ns[i] is how
// many tasks of qs[i] it moved, more[i] whether its call reached either
// bound (more may be due or old: the caller goes on with Move), and
// errs[i] its error. A connection error fails every queue (the calls may
// have run or not: a move is safe to repeat); an error reply fails its
// queue only, but for a call refused unrun (notRun: its script or function
// not loaded on a restarted Redis, its slot served by another node now or
// being moved), which is run again alone, as Move runs it: loading the
// script, following the cluster.
func (s *Store) MoveEach(ctx context.Context, qs []QueueKeys, batch, trim int) (ns []int, more []bool, errs []error) {
	ns, more, errs = make([]int, len(qs)), make([]bool, len(qs)), make([]error, len(qs))
	fail := func(err error) ([]int, []bool, []error) {
		for i := range errs {
			errs[i] = err
		}
		return ns, more, errs
	}
	if len(qs) == 0 {
		return ns, more, errs
	}
	libs() // names the functions
	m := s.mode.Load()
	args := func(q QueueKeys) []any { return append(moveArgs(q, batch), trim) }
	cmds := make([]command, len(qs))
	for i, q := range qs {
		cmds[i].name, cmds[i].args = moveScript.command(m, s.tagged, args(q))
	}
	// A refused call runs again on a connection of its own (its tag's
	// node): this one goes back first, so that the two are never held at
	// once (a pool of one free connection would refuse the second).
	rs, err := s.pipeline(ctx, qs[0].Ref.Tag, cmds)
	if err != nil {
		return fail(err)
	}
	for i, r := range rs {
		var err error
		if e, ok := r.(redis.Error); ok {
			if !notRun(e) {
				errs[i] = e
				continue
			}
			r, err = s.eval(ctx, qs[i].Ref.Tag, moveScript, args(qs[i])...)
		}
		var v []int
		if v, errs[i] = redis.Ints(r, err); errs[i] == nil && len(v) != 2 {
			errs[i] = fmt.Errorf("rdb: move: reply %v, want {moved, more}", v)
		}
		if errs[i] == nil {
			ns[i], more[i] = v[0], v[1] == 1
		}
	}
	return ns, more, errs
}

// Promote moves scheduled task id of q (delayed, or waiting for a retry)
// to the back of its queue now (see promote.lua). It reports false when
// the task was not scheduled.
func (s *Store) Promote(ctx context.Context, q QueueKeys, id string) (bool, error) {
	n, err := redis.Int(s.eval(ctx, q.Ref.Tag, promoteScript,
		q.Scheduled, q.Waiting, q.Config, q.Task(id), id, q.TaskPrefix, q.WakeChannel))
	return n == 1, err
}
