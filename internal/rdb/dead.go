package rdb

import (
	"context"
	"errors"
	"strconv"

	"github.com/gomodule/redigo/redis"
)

// DeadOp is what to do with dead tasks.
type DeadOp string

// The dead-set operations.
const (
	DeadRequeue DeadOp = "requeue"
	DeadDelete  DeadOp = "delete"
)

// DeadIDs applies op to the given dead ids and returns how many were dead,
// and the ids whose requeue it refused: flow children whose run no longer
// waits for them (failed with them, cancelled, or moved on). They stay
// dead. A child whose run still waits for its other children goes back
// into it. Each call of the script applies op to the ids in order until
// its byte bound (see dead.lua); the rest go in the next call. An error
// of a later call comes back with what the calls before it did.
func (s *Store) DeadIDs(ctx context.Context, q QueueKeys, op DeadOp, ids []string) (int, []string, error) {
	total := 0
	var refused []string
	for len(ids) > 0 {
		p, err := s.deadIDs(ctx, q, op, ids)
		total += p.Handled
		refused = append(refused, p.Refused...)
		if err != nil {
			return total, refused, err
		}
		ids = ids[max(p.Read, 1):]
	}
	return total, refused, nil
}

func (s *Store) deadIDs(ctx context.Context, q QueueKeys, op DeadOp, ids []string) (DeadPass, error) {
	args := make([]any, 0, 8+2*len(ids))
	args = append(args, 3+len(ids), q.Dead, q.Waiting, q.Config)
	for _, id := range ids {
		args = append(args, q.Task(id)) // declared: a cluster checks them
	}
	args = append(args, string(op), q.TaskPrefix, q.WakeChannel, q.IndexPrefix, "ids")
	for _, id := range ids {
		args = append(args, id)
	}
	p, _, err := deadReply(s.eval(ctx, q.Ref.Tag, deadScript, args...))
	return p, err
}

// DeadPass is what one DeadOldest call did.
type DeadPass struct {
	Handled int      // tasks requeued or deleted
	Read    int      // entries read: fewer than asked when the set ended
	Refused []string // ids whose requeue was refused (see DeadIDs), in order
	// Cut says the call stopped at its byte bound (see dead.lua): Read is
	// then fewer than asked though entries may be left after those read.
	Cut bool
	// After and AfterScore are the cursor of the next call: the last id
	// refused so far, and its score.
	After, AfterScore string
}

// DeadOldest applies op to up to n (at most BulkStep) of the oldest dead
// tasks after the cursor (after, afterScore: the last id refused by a call
// before, "" for none; see dead.lua), and reports what it did and the
// cursor of the next call. The entries before a cursor are those refused:
// a cursor, not a count of them, so that entries another client (or the
// dead set's caps) removes meanwhile do not make a call pass some it never
// read.
func (s *Store) DeadOldest(ctx context.Context, q QueueKeys, op DeadOp, n int, after, afterScore string) (DeadPass, error) {
	return s.DeadOldestBefore(ctx, q, op, n, after, afterScore, 0)
}

// DeadOldestBefore is DeadOldest over the entries dead before unix ms
// before (0: all): a pass over the whole dead set (RequeueAllDead) that
// reads only the tasks dead when it started does not requeue again, and
// again, the tasks it requeued that die again meanwhile.
func (s *Store) DeadOldestBefore(ctx context.Context, q QueueKeys, op DeadOp, n int, after, afterScore string, before int64) (DeadPass, error) {
	p := DeadPass{After: after, AfterScore: afterScore}
	if n < 1 {
		return p, nil
	}
	bound := ""
	if before > 0 {
		bound = strconv.FormatInt(before, 10)
	}
	p, score, err := deadReply(s.eval(ctx, q.Ref.Tag, deadScript, 3,
		q.Dead, q.Waiting, q.Config, string(op), q.TaskPrefix, q.WakeChannel, q.IndexPrefix, "oldest", min(n, BulkStep),
		after, afterScore, bound))
	if err != nil {
		return DeadPass{After: after, AfterScore: afterScore}, err
	}
	p.After, p.AfterScore = after, afterScore
	if len(p.Refused) > 0 {
		p.After, p.AfterScore = p.Refused[len(p.Refused)-1], score
	}
	return p, nil
}

// deadReply reads the dead script's reply: the number handled, the entries
// read, the score of the last id refused, whether the call stopped at its
// byte bound, then the ids refused.
func deadReply(r any, err error) (DeadPass, string, error) {
	var p DeadPass
	vs, err := redis.Values(r, err)
	if err != nil {
		return p, "", err
	}
	if len(vs) < 4 {
		return p, "", errors.New("rdb: short reply of dead")
	}
	if p.Handled, err = redis.Int(vs[0], nil); err != nil {
		return p, "", err
	}
	if p.Read, err = redis.Int(vs[1], nil); err != nil {
		return p, "", err
	}
	score, err := redis.String(vs[2], nil)
	if err != nil {
		return p, "", err
	}
	cut, err := redis.Int(vs[3], nil)
	if err != nil {
		return p, "", err
	}
	p.Cut = cut == 1
	p.Refused, err = redis.Strings(vs[4:], nil)
	return p, score, err
}
