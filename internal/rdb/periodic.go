package rdb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gomodule/redigo/redis"
)

// A schedule of periodic tasks lives under the {periodic} tag: its hash
// (definition, next tick, last fired tick, pause flag), the sorted set of
// unpaused schedules by next tick and the set of every name. The definition
// is opaque here (package worqr encodes it); the timing key says whether a
// new definition moves the ticks.

// ScheduleRecord is a schedule's hash, decoded.
type ScheduleRecord struct {
	Name   string
	Def    []byte
	Next   int64 // next tick, unix ms (Redis time)
	Last   int64 // last tick fired, 0 = none
	Fired  int64 // ticks fired
	Paused bool
}

// DueSchedule is a schedule whose next tick has come.
type DueSchedule struct {
	Name string
	Def  []byte
	Next int64 // as the hash holds it: what AdvanceSchedule compares
}

func (s *Store) periodic(ctx context.Context, name, op string, args ...any) (int, error) {
	k := s.keys
	all := append([]any{k.Schedule(name), k.ScheduleDue(), k.ScheduleNames(), op, name}, args...)
	return redis.Int(s.eval(ctx, PeriodicTag, periodicScript, all...))
}

// PutSchedule stores schedule name with definition def. A schedule whose
// timing key is unchanged keeps its next tick, last tick and pause;
// otherwise its next tick becomes next. It reports whether the timing was
// set.
func (s *Store) PutSchedule(ctx context.Context, name string, def []byte, timing string, next int64) (bool, error) {
	n, err := s.periodic(ctx, name, "put", def, timing, next)
	return n == 1, err
}

// AdvanceSchedule moves schedule name's next tick from expect to next and
// records last (0 = nothing fired) as its last fired tick and count more
// ticks fired, only if its next tick is still expect and its timing key is
// still timing (the one of the definition the caller placed next with):
// peers racing on a tick advance it once, and a pass that read a
// definition since re-registered with another timing changes nothing. It
// reports whether it applied.
func (s *Store) AdvanceSchedule(ctx context.Context, name, timing string, expect, next, last int64, count int) (bool, error) {
	f := ""
	if last > 0 {
		f = strconv.FormatInt(last, 10)
	}
	n, err := s.periodic(ctx, name, "advance", expect, next, f, count, timing)
	return n == 1, err
}

// PauseSchedule pauses schedule name; false when there is none.
func (s *Store) PauseSchedule(ctx context.Context, name string) (bool, error) {
	n, err := s.periodic(ctx, name, "pause")
	return n == 1, err
}

// ResumeSchedule resumes schedule name at tick next (when it was paused);
// false when there is none.
//
// next was worked out from timing: when the schedule was re-registered
// with another timing since it was read, nothing changes and
// ErrTimingChanged comes back (read it again).
func (s *Store) ResumeSchedule(ctx context.Context, name, timing string, next int64) (bool, error) {
	n, err := s.periodic(ctx, name, "resume", next, timing)
	if n == -1 {
		return false, ErrTimingChanged
	}
	return n == 1, err
}

// ErrTimingChanged: a schedule's timing is no longer the one the caller
// read (ResumeSchedule).
var ErrTimingChanged = errors.New("rdb: the schedule's timing changed")

// RemoveSchedule deletes schedule name; false when there was none.
func (s *Store) RemoveSchedule(ctx context.Context, name string) (bool, error) {
	n, err := s.periodic(ctx, name, "remove")
	return n == 1, err
}

// DueSchedules returns Redis's time (unix ms; now, when > 0, stands for it)
// and up to limit unpaused schedules whose next tick is at or before it.
func (s *Store) DueSchedules(ctx context.Context, now int64, limit int) (int64, []DueSchedule, error) {
	at := ""
	if now > 0 {
		at = strconv.FormatInt(now, 10)
	}
	vals, err := redis.Values(s.eval(ctx, PeriodicTag, periodicDue, s.keys.ScheduleDue(), at, limit, s.keys.SchedulePrefix()))
	if err != nil {
		return 0, nil, err
	}
	if len(vals)%3 != 1 {
		return 0, nil, fmt.Errorf("rdb: periodic due: reply of %d values", len(vals))
	}
	now, err = redis.Int64(vals[0], nil)
	if err != nil {
		return 0, nil, fmt.Errorf("rdb: periodic due: %w", err)
	}
	out := make([]DueSchedule, 0, len(vals)/3)
	for i := 1; i < len(vals); i += 3 {
		var d DueSchedule
		d.Name, _ = redis.String(vals[i], nil)
		d.Def, _ = redis.Bytes(vals[i+1], nil)
		d.Next, _ = redis.Int64(vals[i+2], nil)
		out = append(out, d)
	}
	return now, out, nil
}

// Schedule returns schedule name, or nil when there is none.
func (s *Store) Schedule(ctx context.Context, name string) (*ScheduleRecord, error) {
	m, err := redis.StringMap(s.cmd(ctx, PeriodicTag, "HGETALL", s.keys.Schedule(name)))
	if err != nil {
		return nil, err
	}
	return decodeSchedule(name, m), nil
}

// Schedules returns every schedule, in no particular order.
func (s *Store) Schedules(ctx context.Context) ([]*ScheduleRecord, error) {
	names, err := redis.Strings(s.cmd(ctx, PeriodicTag, "SMEMBERS", s.keys.ScheduleNames()))
	if err != nil {
		return nil, err
	}
	var out []*ScheduleRecord
	for len(names) > 0 {
		chunk := names[:min(len(names), BulkChunk)]
		names = names[len(chunk):]
		cmds := make([]command, len(chunk))
		for i, n := range chunk {
			cmds[i] = cmdOf("HGETALL", s.keys.Schedule(n))
		}
		rs, err := s.pipeline(ctx, PeriodicTag, cmds)
		if err != nil {
			return nil, err
		}
		for i, n := range chunk {
			m, err := redis.StringMap(rs[i], nil)
			if err != nil {
				return nil, err
			}
			if r := decodeSchedule(n, m); r != nil {
				out = append(out, r)
			}
		}
	}
	return out, nil
}

func decodeSchedule(name string, m map[string]string) *ScheduleRecord {
	if len(m) == 0 {
		return nil
	}
	return &ScheduleRecord{Name: name, Def: []byte(m["d"]), Next: atoi64(m["n"]), Last: atoi64(m["l"]),
		Fired: atoi64(m["f"]), Paused: m["p"] != ""}
}

// Time returns Redis's time (unix ms) on the server of tag.
func (s *Store) Time(ctx context.Context, tag string) (int64, error) {
	return timeMillis(s.cmd(ctx, tag, "TIME"))
}

// TickTaskID returns the id of the task schedule name enqueues for its tick
// at t: "<name>.<t unix ms>" (worqr's Schedule.Name documents the form).
func TickTaskID(name string, t time.Time) string {
	return name + "." + strconv.FormatInt(t.UnixMilli(), 10)
}
