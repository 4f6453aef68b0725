package rdb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/gomodule/redigo/redis"
)

// MarkLevel records that queue q has tasks of priority level (1..MaxLevel),
// before they are enqueued, and returns the highest level recorded.
func (s *Store) MarkLevel(ctx context.Context, q QueueKeys, level int) (int, error) {
	return redis.Int(s.eval(ctx, q.Ref.Tag, levelsScript, q.Config, q.Park, level, q.WakeChannel))
}

// Limits are a queue's global limits, kept in its config hash: at most
// Rate starts per PeriodMs (both > 0, or no rate limit), at most Conc
// takings at once (0: none).
type Limits struct {
	Rate     int
	PeriodMs int64
	Conc     int
}

// SetLimits stores q's global limits (zero values remove them) and
// announces the change on its wake channel, so that workers read the
// queue's flags at once.
func (s *Store) SetLimits(ctx context.Context, q QueueKeys, l Limits) error {
	return s.withConn(ctx, q.Ref.Tag, func(c redis.Conn) error {
		cmds := make([]command, 0, 3)
		if l.Rate > 0 && l.PeriodMs > 0 {
			cmds = append(cmds, cmdOf("HSET", q.Config, "rate", l.Rate, "period", l.PeriodMs))
		} else {
			cmds = append(cmds, cmdOf("HDEL", q.Config, "rate", "period"))
		}
		if l.Conc > 0 {
			cmds = append(cmds, cmdOf("HSET", q.Config, "conc", l.Conc))
		} else {
			cmds = append(cmds, cmdOf("HDEL", q.Config, "conc"))
		}
		if l.Rate > 0 && l.PeriodMs > 0 || l.Conc > 0 {
			// A task handed at enqueue would pass the limits: the limits
			// and the parked workers go together.
			cmds = append(cmds, cmdOf("DEL", q.Park))
		}
		if err := multi(ctx, c, cmds...); err != nil {
			return err
		}
		_, err := do(ctx, c, s.publish(), q.WakeChannel, "0")
		return err
	})
}

// ReadLimits returns q's stored global limits.
func (s *Store) ReadLimits(ctx context.Context, q QueueKeys) (Limits, error) {
	v, err := redis.Strings(s.cmd(ctx, q.Ref.Tag, "HMGET", q.Config, "rate", "period", "conc"))
	if err != nil {
		return Limits{}, err
	}
	var l Limits
	l.Rate, _ = strconv.Atoi(v[0])
	l.PeriodMs, _ = strconv.ParseInt(v[1], 10, 64)
	l.Conc, _ = strconv.Atoi(v[2])
	return l, nil
}

// QueueFlags are what a worker reads of a queue's config on every poll and
// every wake-up carrying 0: whether it is paused, its highest priority
// level in use, and whether it has global limits.
type QueueFlags struct {
	Paused  bool
	Levels  int
	Limited bool
	Fair    bool // its keys share it (KeyPolicy.Fair)
	// KeyLimited: a fair queue's keys may be limited (running or rate):
	// its PerKey policy, or the own policy of one of its keys
	// (SetKeyLimits; the count the config hash keeps, see key_limits.lua).
	KeyLimited bool
}

// Flags reads the flags of each queue, one round trip per tag; it fails
// when the flags of any queue could not be read (see FlagsEach).
func (s *Store) Flags(ctx context.Context, qs []QueueKeys) ([]QueueFlags, error) {
	out, errs := s.FlagsEach(ctx, qs)
	for _, err := range errs {
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// FlagsEach reads the flags of each queue, one round trip per tag, and
// returns for each queue its flags or the error that kept them from being
// read: a tag whose read fails does not keep the others from being read.
// On a Redis Cluster (a ShardedPubSub pool) the tags of each master are
// read apart from those of the others, the masters at once, so that a
// master that is down (for good, with cluster-require-full-coverage no)
// fails the reads of its own queues only, and does not use up the time
// of the others'.
func (s *Store) FlagsEach(ctx context.Context, qs []QueueKeys) ([]QueueFlags, []error) {
	out := make([]QueueFlags, len(qs))
	errs := make([]error, len(qs))
	type tagIdx struct {
		tag string
		idx []int
	}
	var groups [][]tagIdx
	at := map[string]int{} // master -> its group
	_ = s.perTag(qs, func(tag string, idx []int) error {
		g := 0
		if s.shard != nil {
			m := s.shard.MasterOf(tag)
			var ok bool
			if g, ok = at[m]; !ok {
				g = len(groups)
				at[m] = g
				groups = append(groups, nil)
			}
		} else if len(groups) == 0 {
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], tagIdx{tag, idx})
		return nil
	})
	read := func(group []tagIdx) {
		for _, ti := range group {
			if err := s.flagsOf(ctx, ti.tag, qs, ti.idx, out); err != nil {
				for _, i := range ti.idx {
					errs[i] = err
				}
			}
		}
	}
	if len(groups) == 1 {
		read(groups[0])
		return out, errs
	}
	var wg sync.WaitGroup
	wg.Add(len(groups))
	for _, g := range groups {
		go func() {
			defer wg.Done()
			read(g)
		}()
	}
	wg.Wait()
	return out, errs
}

// flagsOf reads into out the flags of the queues qs[idx], all of tag.
func (s *Store) flagsOf(ctx context.Context, tag string, qs []QueueKeys, idx []int, out []QueueFlags) error {
	cmds := make([]command, len(idx))
	for j, i := range idx {
		cmds[j] = cmdOf("HMGET", qs[i].Config, "paused", "prio", "rate", "conc", "fair", "dlim", "klim")
	}
	rs, err := s.pipeline(ctx, tag, cmds)
	if err != nil {
		return err
	}
	read := make([]QueueFlags, len(idx))
	for j := range idx {
		v, err := redis.Strings(rs[j], nil)
		if err != nil {
			return err
		}
		levels, _ := strconv.Atoi(v[1])
		rate, _ := strconv.Atoi(v[2])
		conc, _ := strconv.Atoi(v[3])
		klim, _ := strconv.Atoi(v[6])
		read[j] = QueueFlags{Paused: v[0] != "", Levels: min(max(levels, 0), MaxLevel), Limited: rate > 0 || conc > 0,
			Fair: v[4] == "1", KeyLimited: v[4] == "1" && (v[5] == "1" || klim > 0)}
	}
	for j, i := range idx {
		out[i] = read[j]
	}
	return nil
}

// QueueSettings are the settings scripts read from a queue's config hash.
type QueueSettings struct {
	RetentionMs  int64
	DeadMaxCount int
	DeadMaxAgeMs int64
	Keys         KeyPolicy
}

// WriteSettings stores the settings of queue q.
func (s *Store) WriteSettings(ctx context.Context, q QueueKeys, v QueueSettings) error {
	return s.withConn(ctx, q.Ref.Tag, func(c redis.Conn) error {
		return multi(ctx, c, append([]command{cmdOf("HSET", q.Config,
			"retention", v.RetentionMs, "dead_max", v.DeadMaxCount, "dead_age", v.DeadMaxAgeMs)},
			keyPolicyCmds(q, v.Keys)...)...)
	})
}

// SetPaused pauses (on) or resumes queue q: stored in its config hash, and
// announced on its wake channel so that workers look at once.
func (s *Store) SetPaused(ctx context.Context, q QueueKeys, on bool) error {
	return s.withConn(ctx, q.Ref.Tag, func(c redis.Conn) error {
		var err error
		if on {
			// Nothing is handed to a parked worker from now on: the flag
			// and the parked workers go together.
			err = multi(ctx, c, cmdOf("HSET", q.Config, "paused", "1"), cmdOf("DEL", q.Park))
		} else {
			_, err = do(ctx, c, "HDEL", q.Config, "paused")
		}
		if err != nil {
			return err
		}
		_, err = do(ctx, c, s.publish(), q.WakeChannel, "0")
		return err
	})
}

// Holders returns the holder index (workers that may hold takings) of each
// queue. A queue whose index cannot be read (not a set: a hand edit, a key
// of another program) is nil in out and named in err, with the others read
// all the same (the reaper's sweep goes past it); a failure of a whole
// call leaves its queues nil too.
func (s *Store) Holders(ctx context.Context, qs []QueueKeys) ([][]string, error) {
	out := make([][]string, len(qs))
	var errs []error
	err := s.perTag(qs, func(tag string, idx []int) error {
		cmds := make([]command, len(idx))
		for j, i := range idx {
			cmds[j] = cmdOf("SMEMBERS", qs[i].Holders)
		}
		rs, err := s.pipeline(ctx, tag, cmds)
		if err != nil {
			return err
		}
		for j, i := range idx {
			if out[i], err = redis.Strings(rs[j], nil); err != nil {
				errs = append(errs, fmt.Errorf("holders of %s: %w", qs[i].Ref.Member(), err))
			}
		}
		return nil
	})
	return out, errors.Join(append(errs, err)...)
}
