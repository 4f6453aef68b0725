package rdb

import (
	"context"

	"github.com/gomodule/redigo/redis"
)

// PublishEvents publishes one encoded batch of events on the namespace's
// events channel and, when logLen > 0, appends it to the event log stream,
// trimmed to about logLen batches (XADD MAXLEN ~), in one round trip.
func (s *Store) PublishEvents(ctx context.Context, batch []byte, logLen int) error {
	cmds := []command{cmdOf("PUBLISH", s.keys.Events(), batch)}
	if logLen > 0 {
		cmds = append(cmds, cmdOf("XADD", s.keys.EventLog(), "MAXLEN", "~", logLen, "*", "b", batch))
	}
	rs, err := s.pipeline(ctx, RegistryTag, cmds)
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
