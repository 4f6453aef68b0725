package rdb

import (
	"context"
	"fmt"

	"github.com/gomodule/redigo/redis"
)

// Requeue puts every taking the given workers hold in the queue back at its
// front, oldest first, and forgets their holdings there (the fail-worker
// step). crashed says whether the workers died (each task counts a crash,
// once per dead worker) or stopped on purpose. It is idempotent. It runs one
// script call per RequeueChunk takings (the order is kept within each; each
// chunk goes in front of the one before); on an error, what is left stays
// held for the next call. cancelled are the takings that ended as
// cancelled instead (their cancel was asked while they ran).
func (s *Store) Requeue(ctx context.Context, q QueueKeys, workers []string, crashed bool) (requeued int, cancelled []Cancelled, err error) {
	for lo := 0; lo < len(workers); lo += RequeueWorkers {
		n, c, err := s.requeueGroup(ctx, q, workers[lo:min(lo+RequeueWorkers, len(workers))], crashed)
		requeued += n
		cancelled = append(cancelled, c...)
		if err != nil {
			return requeued, cancelled, err
		}
	}
	return requeued, cancelled, nil
}

// requeueGroup is Requeue for at most RequeueWorkers workers.
func (s *Store) requeueGroup(ctx context.Context, q QueueKeys, workers []string, crashed bool) (requeued int, cancelled []Cancelled, err error) {
	if len(workers) == 0 {
		return 0, nil, nil
	}
	args := make([]any, 0, 10+2*len(workers))
	args = append(args, 5+len(workers), q.Waiting, q.Holders, q.Config, q.Retained)
	for _, w := range workers {
		args = append(args, q.WorkerQueue(w))
	}
	args = append(args, q.Park) // last: the workers are parked no more
	flag := "0"
	if crashed {
		flag = "1"
	}
	args = append(args, q.WakeChannel, q.TaskPrefix, flag, RequeueChunk)
	for _, w := range workers {
		args = append(args, w)
	}
	for {
		vals, err := redis.Values(s.eval(ctx, q.Ref.Tag, requeueScript, args...))
		if err != nil {
			return requeued, cancelled, err
		}
		if len(vals) < 2 {
			return requeued, cancelled, fmt.Errorf("rdb: requeue: reply of %d values, want 2 or more", len(vals))
		}
		n, err := redis.Int(vals[0], nil)
		var more int
		if err == nil {
			more, err = redis.Int(vals[1], nil)
		}
		var ids []Cancelled
		if err == nil {
			ids, err = cancelledOf(vals[2:], "")
		}
		if err != nil {
			return requeued, cancelled, fmt.Errorf("rdb: requeue: %w", err)
		}
		requeued += n
		cancelled = append(cancelled, ids...)
		if more == 0 {
			return requeued, cancelled, nil
		}
	}
}

// Release puts back at the front of the queue the takings worker w holds in
// it other than known (pids w runs): takings whose take reply was lost. It
// is idempotent; requeued tasks count no crash.
func (s *Store) Release(ctx context.Context, q QueueKeys, w string, known []string) (requeued int, cancelled []Cancelled, err error) {
	r, err := s.ReleaseCheck(ctx, q, w, known)
	return r.Requeued, r.Cancelled, err
}

// Cancelled is a taking that a requeue or a release ended as cancelled
// instead of putting it back (its cancel was asked while it was held): its
// task, and its pid and holder when known ("" for a task taken in a batch
// behind its key's head).
type Cancelled struct{ ID, PID, Worker string }

// cancelledOf reads the flat id, pid, worker triples of a requeue or
// release reply; worker fills an empty worker.
func cancelledOf(flat []any, worker string) ([]Cancelled, error) {
	vs, err := redis.Strings(flat, nil)
	if err != nil {
		return nil, err
	}
	if len(vs)%3 != 0 {
		return nil, fmt.Errorf("%d values of cancelled takings, want triples", len(vs))
	}
	out := make([]Cancelled, 0, len(vs)/3)
	for i := 0; i < len(vs); i += 3 {
		c := Cancelled{ID: vs[i], PID: vs[i+1], Worker: vs[i+2]}
		if c.Worker == "" {
			c.Worker = worker
		}
		out = append(out, c)
	}
	return out, nil
}

// Released is what ReleaseCheck did and found.
type Released struct {
	// Requeued counts the takings put back that w held and did not know;
	// Cancelled are those that ended as cancelled instead (their cancel
	// was asked).
	Requeued  int
	Cancelled []Cancelled
	// Missing are the pids of known that w does not hold in the queue:
	// ended already, or lost (a take that a failed primary acknowledged
	// and never passed on to the replica promoted in its place).
	Missing []string
	// Seq is the tag's taking counter when the call ran: a taking with a
	// pid at most Seq that w held and did not know was put back (a
	// hand-off whose message had not arrived, say).
	Seq int64
}

// ReleaseCheck is Release, and in the same script call (one read of w's
// holdings) reports which of known w does not hold.
func (s *Store) ReleaseCheck(ctx context.Context, q QueueKeys, w string, known []string) (Released, error) {
	args := make([]any, 0, 6+len(known))
	args = append(args, q.Waiting, q.WorkerQueue(w), q.Config, q.Retained, q.Seq, q.WakeChannel, q.TaskPrefix)
	for _, pid := range known {
		args = append(args, pid)
	}
	vals, err := redis.Values(s.eval(ctx, q.Ref.Tag, releaseScript, args...))
	if err != nil {
		return Released{}, err
	}
	if len(vals) < 3 {
		return Released{}, fmt.Errorf("rdb: release: reply of %d values, want 3 or more", len(vals))
	}
	var r Released
	if r.Requeued, err = redis.Int(vals[0], nil); err == nil {
		var flat []any
		if flat, err = redis.Values(vals[1], nil); err == nil {
			r.Cancelled, err = cancelledOf(flat, w)
		}
	}
	if err == nil {
		r.Seq, err = redis.Int64(vals[2], nil)
	}
	if err == nil && len(vals) > 3 {
		r.Missing, err = redis.Strings(vals[3:], nil)
	}
	if err != nil {
		return Released{}, fmt.Errorf("rdb: release: %w", err)
	}
	return r, nil
}
