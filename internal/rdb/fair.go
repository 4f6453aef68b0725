package rdb

import (
	"context"
	"strconv"
	"strings"

	"github.com/gomodule/redigo/redis"
)

// FairKey is one key of a fair queue as its state says: its takings
// running (counted by the takes, given back by their ends), whether it is
// in turn (in the ring), held by its limit or waiting out its rate
// (Timed), the ids waiting in its list, and its own policy (nil: the
// queue's).
type FairKey struct {
	Key     string
	Running int
	InTurn  bool
	Held    bool
	Timed   bool
	Waiting int
	Limits  *KeyLimits
}

// setState reads a key's state as the scripts store it (lua/include/fair.lua).
func (k *FairKey) setState(v string) {
	st, _ := strconv.ParseInt(v, 10, 64)
	k.Running = int(st / fairRun)
	k.InTurn, k.Held, k.Timed = st%fairCredit == fairIn, st%fairCredit == fairBlocked, st%fairCredit == fairTimed
}

// ReadFairKey reads the state of key on fair queue q, in one round trip.
func (s *Store) ReadFairKey(ctx context.Context, q QueueKeys, key string) (FairKey, error) {
	out := []FairKey{{Key: key}}
	if err := s.fillFair(ctx, q, out, true); err != nil {
		return FairKey{}, err
	}
	return out[0], nil
}

// fillFair reads each key's policy and waiting ids (and, with states, its
// state), in one round trip.
func (s *Store) fillFair(ctx context.Context, q QueueKeys, ks []FairKey, states bool) error {
	if len(ks) == 0 {
		return nil
	}
	fields := make([]any, 0, 1+2*len(ks))
	fields = append(fields, q.FairState)
	for _, k := range ks {
		fields = append(fields, "p:"+k.Key)
		if states {
			fields = append(fields, "s:"+k.Key)
		}
	}
	cmds := make([]command, 0, 1+len(ks))
	cmds = append(cmds, cmdOf("HMGET", fields...))
	for _, k := range ks {
		cmds = append(cmds, cmdOf("LLEN", q.FairListPrefix+k.Key))
	}
	rs, err := s.pipeline(ctx, q.Ref.Tag, cmds)
	if err != nil {
		return err
	}
	v, err := redis.Strings(rs[0], nil)
	if err != nil {
		return err
	}
	per := 1
	if states {
		per = 2
	}
	for i := range ks {
		if p := v[per*i]; p != "" {
			l := parseKeyLimits(p)
			ks[i].Limits = &l
		}
		if states {
			ks[i].setState(v[per*i+1])
		}
		ks[i].Waiting, _ = redis.Int(rs[1+i], nil)
	}
	return nil
}

// FairKeys returns one page of the keys of fair queue q that have a state
// (tasks running, waiting, or a place in turn): HSCAN of the state hash
// from cursor (next is 0 after the last page), about count keys, each with
// its state, policy and waiting ids.
func (s *Store) FairKeys(ctx context.Context, q QueueKeys, cursor uint64, count int) ([]FairKey, uint64, error) {
	kv, next, err := s.hscanPage(ctx, q.Ref.Tag, q.FairState, cursor, count, "MATCH", "s:*")
	if err != nil {
		return nil, 0, err
	}
	out := make([]FairKey, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		k := FairKey{Key: strings.TrimPrefix(kv[i], "s:")}
		k.setState(kv[i+1])
		out = append(out, k)
	}
	return out, next, s.fillFair(ctx, q, out, false)
}

// FairPolicy reads fair queue q's policy for each key without one of its
// own (KeyPolicy.PerKey).
func (s *Store) FairPolicy(ctx context.Context, q QueueKeys) (KeyLimits, error) {
	p, err := redis.String(s.cmd(ctx, q.Ref.Tag, "HGET", q.FairState, "p:"))
	if err != nil && err != redis.ErrNil {
		return KeyLimits{}, err
	}
	return parseKeyLimits(p), nil
}

// FairCount returns how many keys of fair queue q are in turn or held (the
// state hash's count k).
func (s *Store) FairCount(ctx context.Context, q QueueKeys) (int, error) {
	n, err := redis.Int(s.cmd(ctx, q.Ref.Tag, "HGET", q.FairState, fairCountK))
	if err == redis.ErrNil {
		return 0, nil
	}
	return n, err
}

// BulkFair deletes or cancels up to BulkStep of the tasks waiting in the
// lists of keys of fair queue q, front first, and returns how many it
// handled: fewer than BulkStep means those lists are empty. The keys'
// states stay (a take takes an empty key out of turn).
func (s *Store) BulkFair(ctx context.Context, q QueueKeys, keys []string, action BulkAction) (int, error) {
	return s.bulkChunk(ctx, q, func(n int) []any {
		args := make([]any, 0, 8+len(keys))
		args = append(args, q.Waiting, q.Scheduled, q.Config, q.Retained, "fair", string(action), n, q.TaskPrefix)
		for _, k := range keys {
			args = append(args, k)
		}
		return args
	})
}

// FairWaiting returns the ids from position offset (at most limit) of the
// waiting tasks in the keys' lists of fair queue q, key after key (each
// key's in the order they will start, the keys in the state hash's scan
// order, not the order of their turns), and how many wait in all (the
// state hash's count n). It reads one page of keys and their lists'
// lengths per round trip, and at most BulkChunk ids (a larger limit
// reads BulkChunk).
func (s *Store) FairWaiting(ctx context.Context, q QueueKeys, offset, limit int) (Span, error) {
	limit = min(limit, BulkChunk)
	total, err := redis.Int(s.cmd(ctx, q.Ref.Tag, "HGET", q.FairState, fairCountN))
	if err != nil && err != redis.ErrNil {
		return Span{}, err
	}
	sp := Span{Total: max(total, 0)}
	for cursor := uint64(0); limit > 0 && sp.Total > 0; {
		ks, next, err := s.FairKeys(ctx, q, cursor, 100)
		if err != nil {
			return Span{}, err
		}
		var cmds []command
		for _, k := range ks {
			if limit <= 0 || k.Waiting == 0 {
				continue
			}
			if offset >= k.Waiting {
				offset -= k.Waiting
				continue
			}
			n := min(limit, k.Waiting-offset)
			cmds = append(cmds, cmdOf("LRANGE", q.FairListPrefix+k.Key, offset, offset+n-1))
			limit -= n
			offset = 0
		}
		if len(cmds) > 0 {
			rs, err := s.pipeline(ctx, q.Ref.Tag, cmds)
			if err != nil {
				return Span{}, err
			}
			for _, r := range rs {
				ids, err := redis.Strings(r, nil)
				if err != nil {
					return Span{}, err
				}
				sp.IDs = append(sp.IDs, ids...)
			}
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	return sp, nil
}

// FairKeyWaiting returns the ids waiting in key's list of fair queue q, the
// next to start first, from offset (at most limit).
func (s *Store) FairKeyWaiting(ctx context.Context, q QueueKeys, key string, offset, limit int) ([]string, error) {
	if limit <= 0 {
		return nil, nil
	}
	return redis.Strings(s.cmd(ctx, q.Ref.Tag, "LRANGE", q.FairListPrefix+key, offset, offset+limit-1))
}
