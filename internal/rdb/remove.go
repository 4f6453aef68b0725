package rdb

import (
	"context"
	"fmt"

	"github.com/gomodule/redigo/redis"
)

// removeKeys are the KEYS of remove_queue.lua for q: its level lists, its
// sets, its config, rate log, key heads, park hash, an indexed
// consumer's progress, the count of tasks behind its key heads, and a
// fair queue's ring, state hash and keys waiting out their rate.
func (s *Store) removeKeys(q QueueKeys) []any {
	c := s.keys.Consumer(q.Ref.Name)
	out := make([]any, 0, 24)
	for l := 0; l <= MaxLevel; l++ {
		out = append(out, q.Level(l))
	}
	return append(out, q.Scheduled, q.Dead, q.Retained, q.Holders, q.Config, q.RateLog(), q.KeyHeads, q.Park,
		c.State, c.Done, q.KeyBehind, q.FairRing, q.FairState, q.FairTimed)
}

// DeleteRetained deletes up to BulkStep entries of stand-alone queue q's
// retained set, oldest first, with the hash of each that is still an
// ended task, and returns how many entries it removed: fewer than
// BulkStep means none are left.
func (s *Store) DeleteRetained(ctx context.Context, q QueueKeys) (int, error) {
	args := append(s.removeKeys(q), "retained", q.TaskPrefix, q.WorkerQueuePrefix, BulkStep)
	return redis.Int(s.eval(ctx, q.Ref.Tag, removeQueueScript, args...))
}

// QueueLeft is what a DropQueue found left in a queue that kept it: the
// queue's counts (Held: takings; Keys: keys of an ordered queue with tasks;
// Progress: an indexed consumer's progress).
type QueueLeft struct {
	Waiting, Scheduled, Held, Dead, Retained, Keys int64
	Progress                                       bool
}

// DropQueue deletes the keys of stand-alone queue q (see remove_queue.lua)
// when it holds nothing, and returns how many keys it deleted; otherwise
// it changes nothing and returns ok false with what is left. forced: an
// indexed consumer's progress is deleted too, rather than keeping the
// queue. The tag's counters (seq, lruns) stay, so that pids and load ids
// are never reused, and so does the config's highest priority level
// (prio, never lowered: not counted in deleted); the locks of unique keys, of caller-chosen ids and of
// bulk-load checkpoints expire on their own. Idempotent.
func (s *Store) DropQueue(ctx context.Context, q QueueKeys, forced bool) (deleted int, ok bool, left QueueLeft, err error) {
	force := "0"
	if forced {
		force = "1"
	}
	args := append(s.removeKeys(q), "drop", q.TaskPrefix, q.WorkerQueuePrefix, force)
	r, err := redis.Int64s(s.eval(ctx, q.Ref.Tag, removeQueueScript, args...))
	if err != nil {
		return 0, false, left, err
	}
	switch {
	case len(r) == 2 && r[0] == 1:
		return int(r[1]), true, left, nil
	case len(r) == 8 && r[0] == 0:
		left = QueueLeft{Waiting: r[1], Scheduled: r[2], Held: r[3], Dead: r[4], Retained: r[5], Keys: r[6], Progress: r[7] == 1}
		return 0, false, left, nil
	}
	return 0, false, left, fmt.Errorf("rdb: remove_queue: reply %v", r)
}

// ForgetQueue removes q from the known queues and deletes its counters
// from the minutes of history from firstMinute to lastMinute (unix
// minutes, at most HistoryMaxMinutes+20 of them), one transaction of the
// registry's tag. Idempotent.
func (s *Store) ForgetQueue(ctx context.Context, q QueueRef, firstMinute, lastMinute int64, outcomes []string) error {
	if n := lastMinute - firstMinute + 1; n < 1 || n > HistoryMaxMinutes+20 {
		return fmt.Errorf("rdb: forget queue: %d minutes of history", n)
	}
	cmds := make([]command, 0, lastMinute-firstMinute+2)
	for m := firstMinute; m <= lastMinute && len(outcomes) > 0; m++ {
		args := make([]any, 0, len(outcomes)+1)
		args = append(args, s.keys.History(m))
		for _, o := range outcomes {
			args = append(args, histField(q.Member(), o))
		}
		cmds = append(cmds, cmdOf("HDEL", args...))
	}
	cmds = append(cmds, cmdOf("SREM", s.keys.KnownQueues(), q.Member()))
	return s.withConn(ctx, RegistryTag, func(c redis.Conn) error {
		return multi(ctx, c, cmds...)
	})
}
