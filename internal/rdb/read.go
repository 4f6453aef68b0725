package rdb

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	"github.com/gomodule/redigo/redis"
)

// TaskRecord is a task hash as Redis holds it, decoded. Decoding never
// fails: a field that does not parse (corrupt data) reads as its zero value.
type TaskRecord struct {
	ID              string
	Payload         []byte
	State           string // a State* constant; StateQueued when unset
	Failures        int
	Crashes         int
	CancelRequested bool
	WorkerID        string
	PID             string
	LastError       string
	DeadReason      string
	DeadAt          int64 // unix ms
	DeadWorker      string
	Result          []byte
	Progress        string // the last report of a run (Task.Progress)
	FinishedAt      int64  // unix ms
	DueAt           int64  // unix ms, scheduled tasks only
	MaxAttempts     int
	TimeoutMs       int64
	DeadlineMs      int64  // unix ms, 0 = none
	RetentionMs     int64  // the task's own retention, 0 = the queue's
	Parent          string // a flow child's run
	RunStatus       string // a flow run's status
	Meta            string // the task's (or child's, or run's) metadata, "" when none
	Priority        int    // its priority level, 0 when none
	Unique          string // the key of its uniqueness lock (QueueKeys.UniquePrefix + its UniqueKey), "" when none
	StartedAt       int64  // unix ms (Redis time) its latest taking was handed out, 0 = never
	EnqueuedAt      int64  // unix ms (Redis time) a task of an id of the caller's was enqueued, 0 = not kept
	// Attempts is its history of failed attempts, oldest first, at most
	// HistoryMax (read by Task, not by Tasks).
	Attempts []Attempt
}

func atoi64(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// recordFields are the fields of a task hash DecodeTask reads.
var recordFields = []any{FieldPayload, FieldState, FieldFailures, FieldCrashes, FieldCancel, FieldWorker, FieldPID,
	FieldError, FieldDeadReason, FieldDeadAt, FieldDeadWorker, FieldResult, FieldProgress, FieldFinishedAt,
	FieldMaxAttempts, FieldTimeout, FieldDeadline, FieldRetention, FieldParent, FieldRunStatus, FieldMeta,
	FieldPriority, FieldStarted, FieldEnqueuedAt, FieldUnique}

// taskFields are the fields Task reads: a record's and its history's.
var taskFields = append(append([]any(nil), recordFields...), historyFields...)

// DecodeTask reads a task hash (the fields of recordFields, and of
// historyFields when present); nil when m is empty (no such task).
func DecodeTask(id string, m map[string]string) *TaskRecord {
	if len(m) == 0 {
		return nil
	}
	r := &TaskRecord{
		ID:              id,
		Payload:         []byte(m[FieldPayload]),
		State:           StateQueued,
		CancelRequested: m[FieldCancel] != "",
		WorkerID:        m[FieldWorker],
		PID:             m[FieldPID],
		LastError:       m[FieldError],
		DeadReason:      m[FieldDeadReason],
		DeadAt:          atoi64(m[FieldDeadAt]),
		DeadWorker:      m[FieldDeadWorker],
		FinishedAt:      atoi64(m[FieldFinishedAt]),
		TimeoutMs:       timeoutMs(m[FieldTimeout]),
		DeadlineMs:      atoi64(m[FieldDeadline]),
		RetentionMs:     atoi64(m[FieldRetention]),
		Parent:          m[FieldParent],
		RunStatus:       m[FieldRunStatus],
		Progress:        m[FieldProgress],
		Meta:            m[FieldMeta],
		StartedAt:       atoi64(m[FieldStarted]),
		EnqueuedAt:      atoi64(m[FieldEnqueuedAt]),
		Unique:          m[FieldUnique],
		Attempts:        decodeHistory(m),
	}
	if s := m[FieldState]; s != "" {
		r.State = s
	}
	if v, ok := m[FieldResult]; ok {
		r.Result = []byte(v)
	}
	r.Failures, _ = strconv.Atoi(m[FieldFailures])
	r.Crashes, _ = strconv.Atoi(m[FieldCrashes])
	r.MaxAttempts, _ = strconv.Atoi(m[FieldMaxAttempts])
	r.Priority, _ = strconv.Atoi(m[FieldPriority])
	return r
}

// Tasks returns the tasks of queue q with the given ids, in order, skipping
// those gone; a scheduled task carries its due time. Their histories are
// not read (see Task).
func (s *Store) Tasks(ctx context.Context, q QueueKeys, ids []string) ([]*TaskRecord, error) {
	return s.tasks(ctx, q, ids, recordFields)
}

// tasks is Tasks, reading fields of each task hash.
func (s *Store) tasks(ctx context.Context, q QueueKeys, ids []string, fields []any) ([]*TaskRecord, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	// A loaded task waits packed, with no hash (see QueueKeys.Packed): its
	// packed field is read before its hash, so that a take between the two
	// reads shows the task running, not gone. Only the fields a record
	// holds are read (and HLEN, for a hash holding none of them): a flow
	// run keeps a record of every child it fanned out, so its HGETALL
	// grows with its children.
	const per = 4
	cmds := make([]command, 0, per*len(ids))
	for _, id := range ids {
		pkey, pfield := q.Packed(id)
		cmds = append(cmds, cmdOf("HGET", pkey, pfield), command{"HMGET", append([]any{q.Task(id)}, fields...)},
			cmdOf("HLEN", q.Task(id)), cmdOf("ZSCORE", q.Scheduled, id))
	}
	rs, err := s.pipeline(ctx, q.Ref.Tag, cmds)
	if err != nil {
		return nil, err
	}
	out := make([]*TaskRecord, 0, len(ids))
	for i, id := range ids {
		vs, err := redis.Values(rs[per*i+1], nil)
		if err != nil {
			return nil, err
		}
		m := make(map[string]string, len(fields))
		for j, v := range vs {
			if b, ok := v.([]byte); ok {
				m[fields[j].(string)] = string(b)
			}
		}
		if n, _ := redis.Int(rs[per*i+2], nil); n == 0 {
			m = nil
			if p, err := redis.String(rs[per*i], nil); err == nil {
				m = map[string]string{FieldPayload: p}
			}
		} else if len(m) == 0 {
			m[FieldPayload] = "" // a hash with none of them (corrupt): shown, as it is listed
		}
		r := DecodeTask(id, m)
		if r == nil {
			continue
		}
		if r.State == StateScheduled {
			r.DueAt, _ = redis.Int64(rs[per*i+3], nil)
		}
		out = append(out, r)
	}
	return out, nil
}

// Task returns task id of queue q, its history of failed attempts
// included, or nil when there is none. One round trip.
func (s *Store) Task(ctx context.Context, q QueueKeys, id string) (*TaskRecord, error) {
	ts, err := s.tasks(ctx, q, []string{id}, taskFields)
	if err != nil || len(ts) == 0 {
		return nil, err
	}
	return ts[0], nil
}

// Len returns the number of tasks waiting in q, at every priority level.
func (s *Store) Len(ctx context.Context, q QueueKeys) (int, error) {
	lens, err := s.levelLens(ctx, q)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, l := range lens {
		n += l
	}
	return n, nil
}

// levelLens returns the length of each of q's waiting lists, from the
// highest priority level down to level 0 (the order of taking).
func (s *Store) levelLens(ctx context.Context, q QueueKeys) ([]int, error) {
	cmds := make([]command, 0, MaxLevel+1)
	for l := MaxLevel; l >= 0; l-- {
		cmds = append(cmds, cmdOf("LLEN", q.Level(l)))
	}
	rs, err := s.pipeline(ctx, q.Ref.Tag, cmds)
	if err != nil {
		return nil, err
	}
	out := make([]int, len(rs))
	for i, r := range rs {
		if out[i], err = redis.Int(r, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Span is one page of ids of a queue's place, with the place's size.
type Span struct {
	IDs   []string
	Total int
}

// Waiting returns the ids from position offset of q's waiting list (front
// first) and its length.
// With priority levels, the lists are read in the order of taking: highest
// level first.
func (s *Store) Waiting(ctx context.Context, q QueueKeys, offset, limit int) (Span, error) {
	lens, err := s.levelLens(ctx, q)
	if err != nil {
		return Span{}, err
	}
	var sp Span
	var cmds []command
	for i, n := range lens {
		sp.Total += n
		if limit <= 0 || n == 0 {
			continue
		}
		if offset >= n {
			offset -= n
			continue
		}
		cmds = append(cmds, cmdOf("LRANGE", q.Level(MaxLevel-i), offset, offset+limit-1))
		limit -= n - offset
		offset = 0
	}
	if len(cmds) == 0 {
		return sp, nil
	}
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
	return sp, nil
}

// Scheduled returns a page of q's scheduled ids, soonest first.
func (s *Store) Scheduled(ctx context.Context, q QueueKeys, offset, limit int) (Span, error) {
	return s.span(ctx, q.Ref.Tag, cmdOf("ZCARD", q.Scheduled), cmdOf("ZRANGE", q.Scheduled, offset, offset+limit-1))
}

// Dead returns a page of q's dead ids, newest first.
func (s *Store) Dead(ctx context.Context, q QueueKeys, offset, limit int) (Span, error) {
	return s.span(ctx, q.Ref.Tag, cmdOf("ZCARD", q.Dead), cmdOf("ZREVRANGE", q.Dead, offset, offset+limit-1))
}

// Retained returns a page of q's retained ended ids, those kept longest
// first, and how many are kept. Only the entries not yet past their time
// (Redis's clock) count: an entry past it names a task whose hash has
// expired, and stays in the set until an ending trims it (at most
// RETAIN_TRIM per call, so a quiet queue after a burst of endings may keep
// many). Two round trips: TIME, then the page.
func (s *Store) Retained(ctx context.Context, q QueueKeys, offset, limit int) (Span, error) {
	now, err := s.Time(ctx, q.Ref.Tag)
	if err != nil {
		return Span{}, err
	}
	live := "(" + strconv.FormatInt(now, 10)
	return s.span(ctx, q.Ref.Tag, cmdOf("ZCOUNT", q.Retained, live, "+inf"),
		cmdOf("ZRANGE", q.Retained, "+inf", live, "BYSCORE", "REV", "LIMIT", offset, limit))
}

func (s *Store) span(ctx context.Context, tag string, count, page command) (Span, error) {
	rs, err := s.pipeline(ctx, tag, []command{count, page})
	if err != nil {
		return Span{}, err
	}
	total, err := redis.Int(rs[0], nil)
	if err != nil {
		return Span{}, err
	}
	ids, err := redis.Strings(rs[1], nil)
	return Span{IDs: ids, Total: total}, err
}

// Holding is one taking held by a worker.
type Holding struct {
	Worker, PID, ID string
}

// Active returns every taking of q: the pids each worker of the holder index
// holds and the task id of each.
func (s *Store) Active(ctx context.Context, q QueueKeys) ([]Holding, error) {
	hs, err := s.Holders(ctx, []QueueKeys{q})
	if err != nil || len(hs[0]) == 0 {
		return nil, err
	}
	cmds := make([]command, len(hs[0]))
	for i, w := range hs[0] {
		cmds[i] = cmdOf("HGETALL", q.WorkerQueue(w))
	}
	rs, err := s.pipeline(ctx, q.Ref.Tag, cmds)
	if err != nil {
		return nil, err
	}
	var out []Holding
	for i, w := range hs[0] {
		held, err := redis.StringMap(rs[i], nil)
		if err != nil {
			return nil, err
		}
		for pid, id := range held {
			out = append(out, Holding{Worker: w, PID: pid, ID: id})
		}
	}
	sort.Slice(out, func(i, j int) bool { return pidLess(out[i].PID, out[j].PID) })
	return out, nil
}

// pidLess orders pids (decimal numbers) by value: by take order.
func pidLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// QueueStat counts the tasks of one queue by place.
type QueueStat struct {
	Waiting, Scheduled, Active, Dead, Retained int64
	Paused                                     bool
	// Head is the id at the front of the waiting list of level 0 ("" when
	// empty); Waiting counts every priority level.
	Head string
	// FairHeads are the ids at the front of the lists of a fair queue's
	// first FairHeadKeys keys in turn (the ring's front), for the age of
	// its oldest waiting task beside Head. Keys further back in the ring,
	// and keys held by their limits (out of the ring), are not read.
	FairHeads []string
	// Keys counts the keys of an ordered queue that have tasks; Behind the
	// tasks waiting behind their heads (in the keys' lists, counted by the
	// scripts that move them: KeyBehind), which Waiting does not count.
	// A fair queue's keys' lists are counted in Waiting (the state hash's
	// "n"), and its keys in turn or held in Keys (its "k"), each kept by
	// the scripts that change it (lua/include/fair.lua).
	Keys, Behind int64
	// OldestActiveMs is how long ago the oldest taking still held started
	// (Redis time; 0 when none is held).
	OldestActiveMs int64
}

// FairHeadKeys is how many keys in turn of a fair queue Stats reads the
// front of (FairHeads): one LRANGE of the ring and one LINDEX per key, so
// that a read costs the same however many keys wait.
const FairHeadKeys = 100

// holdReadWhole is the most takings of one worker in one queue that Stats
// reads with one HGETALL (about 0.2 us of Redis each: 1 ms); a worker
// holding more is read by HSCAN steps of holdScanCount, one round trip
// each, so that no command holds Redis for more than about a millisecond
// however many takings one worker holds.
const (
	holdReadWhole = 5000
	holdScanCount = 1000
)

// oldestTries are how many of a queue's oldest takings (by pid) each
// round trip of Stats checks are still held, in turn: a taking that ended
// between the read of the holdings and the check is skipped for the next.
// Past them (takings that all ended meanwhile, or that have no start
// recorded) the queue's OldestActiveMs stays 0.
var oldestTries = []int{4, BulkChunk}

// holding is one taking of a queue seen by Stats, by pid's value.
type holding struct {
	pid int64
	id  string
}

// Stats counts the tasks of each queue and finds the start of its oldest
// taking. Per tag, in round trips of pipelined commands, each command
// bounded by the length of a list or set read whole, by holdReadWhole or
// by holdScanCount:
//
//  1. the counts of each queue, its holder index, Redis time;
//  2. the retained entries still kept (Redis's clock; see Retained), the
//     count of each holder's holdings (HLEN), and the front of the list
//     of each of a fair queue's first FairHeadKeys keys in turn;
//  3. (only for queues with takings) each holder's holdings, pid -> task
//     id: HGETALL, or for a worker holding more than holdReadWhole
//     takings of the queue HSCAN steps, one round trip each;
//  4. (idem) the start (F_STARTED) and pid of the task of each of its
//     oldestTries lowest pids: the lowest pid whose task still names it is
//     the oldest taking, since pids count takings in the order they were
//     handed out, and so by start time. A round trip more when all of
//     them ended meanwhile.
//
// Steps 3 and 4 read every taking's pid and id (about 30 bytes each): a
// read costs about 0.2 us of Redis per taking held, whatever the number of
// tasks waiting. A task moving between two round trips may be counted in
// neither place for that read.
func (s *Store) Stats(ctx context.Context, qs []QueueKeys) ([]QueueStat, error) {
	out := make([]QueueStat, len(qs))
	err := s.perTag(qs, func(tag string, idx []int) error {
		const per = 11 + MaxLevel
		cmds := make([]command, 0, per*len(idx)+1)
		for _, i := range idx {
			q := qs[i]
			cmds = append(cmds, cmdOf("LLEN", q.Waiting), cmdOf("ZCARD", q.Scheduled), cmdOf("ZCARD", q.Dead),
				cmdOf("ZCARD", q.Retained), cmdOf("HEXISTS", q.Config, "paused"), cmdOf("LINDEX", q.Waiting, 0),
				cmdOf("SMEMBERS", q.Holders), cmdOf("HLEN", q.KeyHeads))
			for l := 1; l <= MaxLevel; l++ {
				cmds = append(cmds, cmdOf("LLEN", q.Level(l)))
			}
			cmds = append(cmds, cmdOf("GET", q.KeyBehind), cmdOf("HMGET", q.FairState, fairCountN, fairCountK),
				cmdOf("LRANGE", q.FairRing, 0, FairHeadKeys-1))
		}
		cmds = append(cmds, cmdOf("TIME"))
		rs, err := s.pipeline(ctx, tag, cmds)
		if err != nil {
			return err
		}
		now, err := timeMillis(rs[len(rs)-1], nil)
		if err != nil {
			return err
		}
		live := "(" + strconv.FormatInt(now, 10)
		// The second round trip: the retained entries still kept (those
		// with any), then the holdings' count of each queue's holders.
		type holder struct {
			i      int // the queue's index in qs
			key    string
			n      int64
			cursor string
		}
		var second []command
		var hs []holder
		var fronts []int // the queue's index in qs, of each LINDEX after the holders' HLENs
		for _, i := range idx {
			second = append(second, cmdOf("ZCOUNT", qs[i].Retained, live, "+inf"))
		}
		var lindex []command
		for j, i := range idx {
			r := rs[per*j : per*j+per]
			st := &out[i]
			for k, dst := range []*int64{&st.Waiting, &st.Scheduled, &st.Dead, &st.Retained} {
				if *dst, err = redis.Int64(r[k], nil); err != nil {
					return err
				}
			}
			for l := 1; l <= MaxLevel; l++ {
				n, _ := redis.Int64(r[7+l], nil)
				st.Waiting += n
			}
			p, _ := redis.Int(r[4], nil)
			st.Paused = p == 1
			st.Head, _ = redis.String(r[5], nil)
			holders, err := redis.Strings(r[6], nil)
			if err != nil {
				return err
			}
			st.Keys, _ = redis.Int64(r[7], nil)
			st.Behind, _ = redis.Int64(r[8+MaxLevel], nil)
			if fc, _ := redis.Int64s(r[9+MaxLevel], nil); len(fc) == 2 {
				st.Waiting += max(fc[0], 0)
				st.Keys += max(fc[1], 0)
			}
			for _, w := range holders {
				k := qs[i].WorkerQueue(w)
				second = append(second, cmdOf("HLEN", k))
				hs = append(hs, holder{i: i, key: k})
			}
			ring, _ := redis.Strings(r[10+MaxLevel], nil)
			for _, key := range ring {
				lindex = append(lindex, cmdOf("LINDEX", qs[i].FairListPrefix+key, 0))
				fronts = append(fronts, i)
			}
		}
		second = append(second, lindex...)
		rs, err = s.pipeline(ctx, tag, second)
		if err != nil {
			return err
		}
		for k, i := range idx {
			if out[i].Retained, err = redis.Int64(rs[k], nil); err != nil {
				return err
			}
		}
		for k, i := range fronts {
			if id, _ := redis.String(rs[len(idx)+len(hs)+k], nil); id != "" {
				out[i].FairHeads = append(out[i].FairHeads, id)
			}
		}
		// The third: the holdings themselves, of the holders that have
		// any (whole, or a first HSCAN step).
		var third []command
		var read []int // indexes in hs, of the third's commands
		for k := range hs {
			hs[k].n, _ = redis.Int64(rs[len(idx)+k], nil)
			out[hs[k].i].Active += hs[k].n
			switch {
			case hs[k].n == 0:
				continue
			case hs[k].n <= holdReadWhole:
				third = append(third, cmdOf("HGETALL", hs[k].key))
			default:
				third = append(third, cmdOf("HSCAN", hs[k].key, "0", "COUNT", holdScanCount))
			}
			read = append(read, k)
		}
		if len(read) == 0 {
			return nil
		}
		held := map[int][]holding{}
		add := func(k int, kv []string) {
			for f := 0; f+1 < len(kv); f += 2 {
				if pid, err := strconv.ParseInt(kv[f], 10, 64); err == nil {
					held[hs[k].i] = append(held[hs[k].i], holding{pid: pid, id: kv[f+1]})
				}
			}
		}
		// step reads one HSCAN reply of hs[k] into held and its cursor.
		step := func(k int, reply any) error {
			v, err := redis.Values(reply, nil)
			if err != nil || len(v) != 2 {
				return fmt.Errorf("rdb: HSCAN of %s: %v (%d values)", hs[k].key, err, len(v))
			}
			hs[k].cursor, _ = redis.String(v[0], nil)
			kv, err := redis.Strings(v[1], nil)
			if err != nil {
				return err
			}
			add(k, kv)
			return nil
		}
		rs, err = s.pipeline(ctx, tag, third)
		if err != nil {
			return err
		}
		for n, k := range read {
			if hs[k].n <= holdReadWhole {
				kv, err := redis.Strings(rs[n], nil)
				if err != nil {
					return err
				}
				add(k, kv)
			} else if err := step(k, rs[n]); err != nil {
				return err
			}
		}
		// The next HSCAN steps of the holdings read in steps, one round
		// trip per step.
		for {
			var more []command
			var which []int
			for _, k := range read {
				if hs[k].n > holdReadWhole && hs[k].cursor != "0" {
					more = append(more, cmdOf("HSCAN", hs[k].key, hs[k].cursor, "COUNT", holdScanCount))
					which = append(which, k)
				}
			}
			if len(more) == 0 {
				break
			}
			rs, err = s.pipeline(ctx, tag, more)
			if err != nil {
				return err
			}
			for n, k := range which {
				if err := step(k, rs[n]); err != nil {
					return err
				}
			}
		}
		return s.oldestActive(ctx, tag, qs, held, now, out)
	})
	return out, err
}

// oldestActive sets OldestActiveMs of each queue of held (its takings as
// Stats read them) from the start of its oldest taking still held: the
// lowest pid whose task hash still names that pid. now is the Redis time
// of the read. At most len(oldestTries) round trips.
func (s *Store) oldestActive(ctx context.Context, tag string, qs []QueueKeys, held map[int][]holding, now int64, out []QueueStat) error {
	for _, hs := range held {
		sort.Slice(hs, func(a, b int) bool { return hs[a].pid < hs[b].pid })
	}
	next := map[int]int{} // the index in held[i] of the next taking to check
	for _, tries := range oldestTries {
		if len(held) == 0 {
			break
		}
		var cmds []command
		type check struct {
			i int
			h holding
		}
		var checks []check
		for i, hs := range held {
			from := next[i]
			for _, h := range hs[from:min(from+tries, len(hs))] {
				cmds = append(cmds, cmdOf("HMGET", qs[i].Task(h.id), FieldStarted, FieldPID))
				checks = append(checks, check{i, h})
			}
			next[i] = min(from+tries, len(hs))
		}
		rs, err := s.pipeline(ctx, tag, cmds)
		if err != nil {
			return err
		}
		found := map[int]bool{}
		for k, c := range checks {
			if found[c.i] {
				continue
			}
			v, _ := redis.Strings(rs[k], nil)
			if len(v) != 2 || v[1] != strconv.FormatInt(c.h.pid, 10) {
				continue // ended (or handed out again) since the holdings were read
			}
			started, err := strconv.ParseInt(v[0], 10, 64)
			if err != nil || started <= 0 {
				continue // no start recorded: not a taking to date
			}
			found[c.i] = true
			out[c.i].OldestActiveMs = max(now-started, 0)
		}
		for i, hs := range held {
			if found[i] || next[i] >= len(hs) {
				delete(held, i)
			}
		}
	}
	return nil
}

// DeleteNamespace deletes every key of the namespace, SCANning 1,000 at a
// time (one UNLINK per batch), and returns how many it deleted. UNLINK,
// not DEL: a key is one command however large its value, and DEL frees
// the value before it returns, holding Redis as long as the value is
// large, where UNLINK leaves a large one to a background thread. On a
// Redis Cluster (a pool that implements EachMaster) it scans every master
// and deletes each batch one hash tag at a time.
func (s *Store) DeleteNamespace(ctx context.Context) (int, error) {
	deleted := 0
	if em, ok := s.pool.(EachMaster); ok {
		err := em.EachMaster(ctx, func(c redis.Conn) error {
			n, err := s.deleteNamespaceOn(ctx, c, true)
			deleted += n
			return err
		})
		return deleted, err
	}
	err := s.withConn(ctx, RegistryTag, func(c redis.Conn) error {
		n, err := s.deleteNamespaceOn(ctx, c, false)
		deleted = n
		return err
	})
	return deleted, err
}

// EachMaster is a pool of several masters (a Redis Cluster client): it
// calls f with a connection to each master in turn.
type EachMaster interface {
	EachMaster(ctx context.Context, f func(c redis.Conn) error) error
}

func (s *Store) deleteNamespaceOn(ctx context.Context, c redis.Conn, perTag bool) (int, error) {
	deleted := 0
	cursor := "0"
	for {
		v, err := redis.Values(do(ctx, c, "SCAN", cursor, "MATCH", s.keys.Namespace()+":*", "COUNT", BulkChunk))
		if err != nil {
			return deleted, err
		}
		if len(v) != 2 {
			return deleted, fmt.Errorf("rdb: SCAN: reply of %d values", len(v))
		}
		cursor, _ = redis.String(v[0], nil)
		keys, _ := redis.Strings(v[1], nil)
		groups := map[string][]any{}
		var order []string
		for _, k := range keys {
			tag := ""
			if perTag {
				tag = HashTag(k)
			}
			if _, ok := groups[tag]; !ok {
				order = append(order, tag)
			}
			groups[tag] = append(groups[tag], k)
		}
		for _, tag := range order {
			n, err := redis.Int(do(ctx, c, "UNLINK", groups[tag]...))
			if err != nil {
				return deleted, err
			}
			deleted += n
		}
		if cursor == "0" {
			return deleted, nil
		}
	}
}

// CancelAsked reports for each task id of queue q whether a cancel was asked
// while it runs (one pipelined HMGET per id, one round trip). A remote
// session's beat reads it for the takings it holds. A flow run's status
// stands for its mark: run_cancel marks a running stage task and end_run
// drops the mark in the same call, so a run that is no longer running
// counts as cancelled.
func (s *Store) CancelAsked(ctx context.Context, q QueueKeys, ids []string) ([]bool, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	cmds := make([]command, len(ids))
	for i, id := range ids {
		cmds[i] = cmdOf("HMGET", q.Task(id), FieldCancel, FieldRunStatus)
	}
	rs, err := s.pipeline(ctx, q.Ref.Tag, cmds)
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(ids))
	for i := range ids {
		v, _ := redis.Strings(rs[i], nil)
		out[i] = len(v) == 2 && (v[0] != "" || (v[1] != "" && v[1] != RunRunning))
	}
	return out, nil
}

// timeoutMs is a task's own timeout as stored: 0 for none of its own (the
// queue's), -1 for no limit, else its milliseconds.
func timeoutMs(s string) int64 {
	if s == "-1" {
		return -1
	}
	return atoi64(s)
}
