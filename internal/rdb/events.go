package rdb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gomodule/redigo/redis"
)

// HistoryTTL is how long, in seconds, a minute of history lives after the
// last flush that counted in it (EXPIRE on every flush that touches it).
const HistoryTTL = 2 * 60 * 60

// HistoryMaxMinutes is the most minutes History reads: what HistoryTTL keeps.
const HistoryMaxMinutes = HistoryTTL / 60

// HistCount is one per-minute counter: N takings or tasks of Queue had
// Outcome during unix minute Minute.
type HistCount struct {
	Minute  int64
	Queue   string
	Outcome string
	N       int64
}

// histField is the field of queue's outcome in a minute's hash. A queue
// name may hold '|'; an outcome never does, so the last '|' splits it.
func histField(queue, outcome string) string { return queue + "|" + outcome }

// ErrNotSent wraps the error of a PublishEvents that sent nothing to Redis
// (no connection could be had): nothing was counted, so the caller may send
// the same counts again without counting them twice.
var ErrNotSent = errors.New("rdb: nothing sent")

// PublishEvents publishes one encoded batch of events on the namespace's
// events channel (when batch is not empty) and, when logLen > 0, appends it
// to the event log stream, trimmed to about logLen batches (XADD MAXLEN ~);
// in the same round trip it adds hist to the per-minute history: one HINCRBY
// per counter and one EXPIRE (HistoryTTL) per minute touched. Its cost is
// per call, whatever the number of tasks the counts stand for. HINCRBY is
// not idempotent, so the caller must not send counts again after an error
// that is not ErrNotSent (Redis may have applied them).
func (s *Store) PublishEvents(ctx context.Context, batch []byte, logLen int, hist ...HistCount) error {
	var cmds []command
	if len(batch) > 0 {
		cmds = append(cmds, cmdOf("PUBLISH", s.keys.Events(), batch))
		if logLen > 0 {
			cmds = append(cmds, cmdOf("XADD", s.keys.EventLog(), "MAXLEN", "~", logLen, "*", "b", batch))
		}
	}
	var minutes []int64
	seen := map[int64]bool{}
	for _, h := range hist {
		if h.N == 0 {
			continue
		}
		cmds = append(cmds, cmdOf("HINCRBY", s.keys.History(h.Minute), histField(h.Queue, h.Outcome), h.N))
		if !seen[h.Minute] {
			seen[h.Minute] = true
			minutes = append(minutes, h.Minute)
		}
	}
	for _, m := range minutes {
		cmds = append(cmds, cmdOf("EXPIRE", s.keys.History(m), HistoryTTL))
	}
	if len(cmds) == 0 {
		return nil
	}
	c, err := s.conn(ctx, RegistryTag)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	defer c.Close()
	rs, err := pipelineOn(ctx, c, cmds)
	if err != nil {
		return err
	}
	for _, r := range rs {
		if e, ok := r.(redis.Error); ok {
			return e
		}
	}
	return nil
}

// History reads n minutes of history starting at unix minute first, in one
// pipelined round trip: every counter of every queue (HGETALL) when queue
// is "", else only queue's counters of the given outcomes (HMGET). It
// returns the counters that are not zero, in minute order.
func (s *Store) History(ctx context.Context, first int64, n int, queue string, outcomes []string) ([]HistCount, error) {
	if n <= 0 {
		return nil, nil
	}
	cmds := make([]command, n)
	var fields []any
	if queue != "" {
		for _, o := range outcomes {
			fields = append(fields, histField(queue, o))
		}
	}
	for i := range cmds {
		key := s.keys.History(first + int64(i))
		if queue == "" {
			cmds[i] = cmdOf("HGETALL", key)
		} else {
			cmds[i] = cmdOf("HMGET", append([]any{key}, fields...)...)
		}
	}
	rs, err := s.pipeline(ctx, RegistryTag, cmds)
	if err != nil {
		return nil, err
	}
	var out []HistCount
	for i, r := range rs {
		m := first + int64(i)
		if queue != "" {
			vs, err := redis.Int64s(r, nil)
			if err != nil && !errors.Is(err, redis.ErrNil) {
				return nil, err
			}
			for j, v := range vs {
				if v != 0 && j < len(outcomes) {
					out = append(out, HistCount{Minute: m, Queue: queue, Outcome: outcomes[j], N: v})
				}
			}
			continue
		}
		kv, err := redis.StringMap(r, nil)
		if err != nil {
			return nil, err
		}
		for f, v := range kv {
			i := strings.LastIndexByte(f, '|')
			if i < 0 {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n == 0 {
				continue
			}
			out = append(out, HistCount{Minute: m, Queue: f[:i], Outcome: f[i+1:], N: n})
		}
	}
	return out, nil
}

// EventsChannel is the channel PublishEvents publishes on (for Listen).
func (s *Store) EventsChannel() string { return s.keys.Events() }

// EventLog returns up to n of the most recent batches in the event log,
// oldest first.
func (s *Store) EventLog(ctx context.Context, n int) ([][]byte, error) {
	entries, err := redis.Values(s.cmd(ctx, RegistryTag, "XREVRANGE", s.keys.EventLog(), "+", "-", "COUNT", n))
	if err != nil {
		return nil, err
	}
	out := make([][]byte, 0, len(entries))
	for i := len(entries) - 1; i >= 0; i-- {
		e, err := redis.Values(entries[i], nil)
		if err != nil || len(e) != 2 {
			continue
		}
		fields, err := redis.ByteSlices(e[1], nil)
		if err != nil {
			continue
		}
		for j := 0; j+1 < len(fields); j += 2 {
			if string(fields[j]) == "b" {
				out = append(out, fields[j+1])
			}
		}
	}
	return out, nil
}
