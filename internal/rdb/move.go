package rdb

import (
	"context"

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

// MoveEach is Move of up to batch tasks for each of qs, queues of one of
// ConnGroups' groups, in one round trip: ns[i] is how many tasks of qs[i]
// it moved and errs[i] its error. A connection error fails every queue
// (the calls may have run or not: a move is safe to repeat); an error
// reply fails its queue only, but for a call refused unrun (notRun: its
// script or function not loaded on a restarted Redis, its slot served by
// another node now or being moved), which is run again alone, as Move
// runs it: loading the script, following the cluster.
func (s *Store) MoveEach(ctx context.Context, qs []QueueKeys, batch int) (ns []int, errs []error) {
	ns, errs = make([]int, len(qs)), make([]error, len(qs))
	fail := func(err error) ([]int, []error) {
		for i := range errs {
			errs[i] = err
		}
		return ns, errs
	}
	if len(qs) == 0 {
		return ns, errs
	}
	c, err := s.conn(ctx, qs[0].Ref.Tag)
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	libs() // names the functions
	m := s.mode.Load()
	cmds := make([]command, len(qs))
	for i, q := range qs {
		cmds[i].name, cmds[i].args = moveScript.command(m, s.tagged, moveArgs(q, batch))
	}
	rs, err := pipelineOn(ctx, c, cmds)
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
			r, err = s.eval(ctx, qs[i].Ref.Tag, moveScript, moveArgs(qs[i], batch)...)
		}
		ns[i], errs[i] = redis.Int(r, err)
	}
	return ns, errs
}

// Promote moves scheduled task id of q (delayed, or waiting for a retry)
// to the back of its queue now (see promote.lua). It reports false when
// the task was not scheduled.
func (s *Store) Promote(ctx context.Context, q QueueKeys, id string) (bool, error) {
	n, err := redis.Int(s.eval(ctx, q.Ref.Tag, promoteScript,
		q.Scheduled, q.Waiting, q.Config, q.Task(id), id, q.TaskPrefix, q.WakeChannel))
	return n == 1, err
}
