package rdb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gomodule/redigo/redis"
)

// FlowRef is what flow scripts need beyond one queue's keys: how long ended
// runs are kept and the state properties runs are indexed by.
type FlowRef struct {
	RetentionMillis int64
	IndexBy         []string
}

// IndexKey is the index of runs whose state property prop is value.
func (q QueueKeys) IndexKey(prop, value string) string { return q.IndexPrefix + prop + ":" + value }

// StateFields turns a run's state into the prefixed name/value pairs the
// scripts store, sorted by name.
func StateFields(m map[string]string) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	out := make([]string, 0, 2*len(m))
	for _, k := range names {
		out = append(out, runFieldPrefix+k, m[k])
	}
	return out
}

// FlowStart creates run id in the first stage's queue q with the given state
// and indexes it by the properties f.IndexBy it has. It returns false when
// the id exists.
func (s *Store) FlowStart(ctx context.Context, q QueueKeys, id string, state map[string]string, f FlowRef) (bool, error) {
	return s.FlowStartMeta(ctx, q, id, state, "", f)
}

// FlowStartMeta is FlowStart, storing meta with the run (FieldMeta, read
// back as RunRecord.Meta) when it is not "".
func (s *Store) FlowStartMeta(ctx context.Context, q QueueKeys, id string, state map[string]string, meta string, f FlowRef) (bool, error) {
	return s.FlowStartFannedOut(ctx, q, id, state, meta, f, nil, false)
}

// FlowStartFannedOut is FlowStartMeta, the run fanned out into children
// (in its tag's child queues; ids as a stage's fan-out makes them) when
// there are some: its first stage, q's, runs when the last ends (a dead
// child fails the run with failFast, as a stage's fan-out does).
func (s *Store) FlowStartFannedOut(ctx context.Context, q QueueKeys, id string, state map[string]string, meta string, f FlowRef,
	children []Child, failFast bool) (bool, error) {
	fields := StateFields(state)
	if meta != "" {
		fields = append(fields, FieldMeta, meta)
	}
	var ix []string
	for _, p := range f.IndexBy {
		if v, ok := state[p]; ok {
			ix = append(ix, q.IndexKey(p, v))
		}
	}
	args := make([]any, 0, 17+len(fields)+len(ix)+fanOutChild.width()*len(children))
	args = append(args, 3+len(ix), q.Waiting, q.Task(id), q.Runs)
	for _, k := range ix {
		args = append(args, k)
	}
	args = append(args, q.WakeChannel, id, q.Ref.Name, f.RetentionMillis, strings.Join(f.IndexBy, ","), q.TaskPrefix)
	args = append(args, q.prefixes()...)
	policy := "continue"
	if failFast {
		policy = "failfast"
	}
	args = append(args, policy, fanOutChild.width()*len(children))
	for _, ch := range children {
		v := fanOutChild.put(args)
		v.set("id", ch.ID)
		v.set("queue", ch.Queue)
		v.set("payload", ch.Payload)
		v.set("meta", ch.Meta)
		args = v.done()
	}
	for _, f := range fields {
		args = append(args, f)
	}
	r, err := s.evalAck(ctx, q.Ref.Tag, flowStartScript, args...)
	err, replica := splitReplica(err)
	n, err := redis.Int(r, err)
	if err != nil {
		return false, err
	}
	return n == 1, replica
}

// RunCancelStored is RunCancel with the run's retention and indexed
// properties read from the run itself (flow_start stores them), for a
// caller that knows only the flow's name.
func (s *Store) RunCancelStored(ctx context.Context, q QueueKeys, id string) (RunStop, error) {
	args := make([]any, 0, 9)
	args = append(args, q.Task(id), id, q.TaskPrefix, "")
	args = append(args, q.prefixes()...)
	args = append(args, 0)
	return runCancelled(s.eval(ctx, q.Ref.Tag, runCancelScript, args...))
}

// RunCancel ends running run id as cancelled, with its stage task and pending
// children. Its Cancelled is false when the run was not running. q is any
// queue of the flow's tag.
func (s *Store) RunCancel(ctx context.Context, q QueueKeys, id string, f FlowRef) (RunStop, error) {
	args := make([]any, 0, 10+len(f.IndexBy))
	args = append(args, q.Task(id), id, q.TaskPrefix, f.RetentionMillis)
	args = append(args, q.prefixes()...)
	args = appendList(args, f.IndexBy)
	return runCancelled(s.eval(ctx, q.Ref.Tag, runCancelScript, args...))
}

// SignalOutcome is what a signal did to its run (Signal).
type SignalOutcome int

// The outcomes of Signal.
const (
	SignalGone      SignalOutcome = 0  // the run is not running (unknown or ended)
	SignalDelivered SignalOutcome = 1  // the run awaited it, and moves on
	SignalKept      SignalOutcome = 2  // kept for the stage end that awaits it
	SignalTaken     SignalOutcome = -1 // its id was taken already: nothing done
	SignalFull      SignalOutcome = -2 // the run keeps MaxKeptSignals others
)

// MaxKeptSignals is how many signals of distinct names a run keeps before
// it awaits them, expired ones not counted once a signal finds this many
// (FLOW.KEPT in lua/include/flow.lua).
const MaxKeptSignals = 16

// Signal delivers signal name with payload to run id (q: any queue of the
// flow's tag): at once when the run sleeps awaiting it, else kept for
// keptMs for the stage end that awaits it. sigID ("": none) makes it
// idempotent: a signal whose id was taken is not taken again.
func (s *Store) Signal(ctx context.Context, q QueueKeys, id, name string, payload []byte, sigID string, keptMs int64) (SignalOutcome, error) {
	args := make([]any, 0, 11)
	args = append(args, q.Task(id), id, name, payload, sigID, keptMs)
	args = append(args, q.prefixes()...)
	n, err := redis.Int(s.eval(ctx, q.Ref.Tag, signalScript, args...))
	return SignalOutcome(n), err
}

// RunStop is what a run's cancel did: whether the run was running
// (and is now cancelled), and the tasks it took out of where they waited,
// whose cancels no end of a taking will report: the run's stage task (Stage
// names its queue; "" when it ran, waits marked, or the run had fanned
// out), and its waiting children.
type RunStop struct {
	Cancelled bool
	Stage     string
	Children  []QueuedTask
}

// QueuedTask is a task and the name of its queue within its tag.
type QueuedTask struct {
	Queue, ID string
}

// runCancelled decodes run_cancel's reply: 0, or {1, stage, queue, id, ...}.
func runCancelled(r any, err error) (RunStop, error) {
	if err != nil {
		return RunStop{}, err
	}
	if n, ok := r.(int64); ok && n == 0 {
		return RunStop{}, nil
	}
	vals, err := redis.Values(r, nil)
	if err != nil || len(vals) < 2 {
		return RunStop{}, fmt.Errorf("rdb: run_cancel: unexpected reply %v (%v)", r, err)
	}
	stage, err := redis.String(vals[1], nil)
	if err != nil {
		return RunStop{}, fmt.Errorf("rdb: run_cancel: stage: %w", err)
	}
	children, err := queuedTasks(vals[2:])
	if err != nil {
		return RunStop{}, fmt.Errorf("rdb: run_cancel: %w", err)
	}
	return RunStop{Cancelled: true, Stage: stage, Children: children}, nil
}

// queuedTasks reads a script's flat queue, id pairs.
func queuedTasks(flat []any) ([]QueuedTask, error) {
	vs, err := redis.Strings(flat, nil)
	if err != nil || len(vs)%2 != 0 {
		return nil, fmt.Errorf("queue, id pairs: %v (%v)", flat, err)
	}
	var out []QueuedTask
	for i := 0; i < len(vs); i += 2 {
		out = append(out, QueuedTask{Queue: vs[i], ID: vs[i+1]})
	}
	return out, nil
}

// RunRetry runs failed run id again from the stage it failed in (see
// run_retry.lua). It reports false when the run was not failed (unknown,
// running, done or cancelled). q is any queue of the flow's tag.
func (s *Store) RunRetry(ctx context.Context, q QueueKeys, id string) (bool, error) {
	args := make([]any, 0, 8)
	args = append(args, q.Task(id), id, q.DeadPrefix)
	args = append(args, q.prefixes()...)
	n, err := redis.Int(s.eval(ctx, q.Ref.Tag, runRetryScript, args...))
	return n == 1, err
}

// RunRecord is a flow run as Redis holds it.
type RunRecord struct {
	ID         string
	Stage      string
	Status     string
	TaskState  string
	State      map[string]string
	Children   []ChildRecord
	LastError  string
	FinishedAt int64  // unix ms, 0 while running
	Attempt    int    // failed attempts of the current stage + 1
	Meta       string // the run's metadata (FlowStartMeta; "" when none)
	Awaiting   string // the signal the run sleeps awaiting ("" none)
	DueMs      int64  // while its stage task is scheduled: when it is due (unix ms; Run only)
}

// ChildRecord is one child of a run and how it ended.
type ChildRecord struct {
	ID, Queue, Status string
	Result            []byte
	Err               string
}

// DecodeRun reads a run hash (as Take returns it for a stage); nil when m is
// not a run.
func DecodeRun(id string, m map[string]string) *RunRecord {
	if len(m) == 0 || m[FieldRunStatus] == "" {
		return nil
	}
	r := &RunRecord{ID: id, Stage: m[FieldStage], Status: m[FieldRunStatus], TaskState: m[FieldState],
		State: map[string]string{}, LastError: m[FieldError], FinishedAt: atoi64(m[FieldFinishedAt]), Meta: m[FieldMeta],
		Awaiting: m[FieldAwait]}
	if r.TaskState != "scheduled" {
		// Woken by its bound or a RunNow: the field stays until its
		// stage's taking ends, but the run awaits nothing now.
		r.Awaiting = ""
	}
	for k, v := range m {
		switch {
		case strings.HasPrefix(k, runFieldPrefix):
			r.State[k[len(runFieldPrefix):]] = v
		case strings.HasPrefix(k, runChildPrefix):
			cid := k[len(runChildPrefix):]
			ch := ChildRecord{ID: cid, Queue: m[runChildQueuePrefix+cid], Status: v, Err: m[runChildErrorPrefix+cid]}
			if res, ok := m[runChildResultPrefix+cid]; ok {
				ch.Result = []byte(res)
			}
			r.Children = append(r.Children, ch)
		}
	}
	sort.Slice(r.Children, func(i, j int) bool { return r.Children[i].ID < r.Children[j].ID })
	return r
}

// Run returns run id of the flow whose queue q is (any queue of its tag), or
// nil when there is none. The hash is read in steps (see ReadRun).
func (s *Store) Run(ctx context.Context, q QueueKeys, id string) (*RunRecord, error) {
	m, err := s.ReadRun(ctx, q, id)
	if err != nil {
		return nil, err
	}
	r := DecodeRun(id, m)
	if r != nil && r.Status == "running" && r.TaskState == "scheduled" {
		// Asleep (StageResult.Sleep, Await) or waiting for a retry: when
		// its stage task is due is its score in the stage's scheduled set.
		due, err := redis.Int64(s.cmd(ctx, q.Ref.Tag, "ZSCORE", s.Queue(QueueRef{Tag: q.Ref.Tag, Name: r.Stage}).Scheduled, id))
		if err != nil && err != redis.ErrNil {
			return nil, err
		}
		r.DueMs = due
	}
	return r, nil
}

// runScan is how many entries one HSCAN of a run reads: a run keeps the
// records of every child it fanned out (about 3 fields each), so no
// command may read a run whole.
const runScan = 1000

// runStepBytes is about how many bytes one HSCAN step of a run reads: a
// run's state fields may hold up to MaxStageBytes each, so a step bounded
// by its count alone could read many MiB in one command (see runScanner).
const runStepBytes = 1 << 20

// runScanner chooses the COUNT of each HSCAN step of a run from the size
// of the big entries it read lately: about runStepBytes of entries that
// big, at most runScan, and at most four times the last step's (a run's
// first fields may be small and the next big). HSCAN reads whole buckets
// of the hash: a step may read a few entries more than its COUNT. What it
// calls big halves with each step that reads none as big: sized by the
// biggest entry ever read, one entry of 1 MiB would make every later step
// read a single entry, and a run of many small records as many round
// trips.
type runScanner struct {
	count int // of the next step
	big   int // bytes of an entry deemed big (see add)
}

// add records one step's entries and sets the next step's count.
func (r *runScanner) add(kv []string) {
	biggest := 0
	for i := 0; i+1 < len(kv); i += 2 {
		biggest = max(biggest, len(kv[i])+len(kv[i+1]))
	}
	r.big = max(biggest, r.big/2)
	r.count = min(4*r.count, runScan, max(runStepBytes/(r.big+1), 1))
}

// ChildStatus returns how run counted its child cid (pending, done,
// failed, cancelled; "" when the run or the child's entry is gone): a
// child's end deletes the child's own hash, so its run is what remembers it.
func (s *Store) ChildStatus(ctx context.Context, q QueueKeys, run, cid string) (string, error) {
	st, err := redis.String(s.cmd(ctx, q.Ref.Tag, "HGET", q.Task(run), runChildPrefix+cid))
	if errors.Is(err, redis.ErrNil) {
		return "", nil
	}
	return st, err
}

// ReadRun returns the hash of run id (empty when it is gone) in steps of
// HSCAN of at most 1,000 entries and about 1 MiB (see runScanner: the first
// step asks for one entry), so that no command grows with the run's
// children or its state: a small hash (Redis's listpack encoding) comes
// whole with the first. A stage's taking whose run was too big to come
// with the take (Taken.RunUnread) reads it here: its children have all
// ended (the run moved on) and only that taking's end writes its fields,
// so the steps see one state (but for a cancel of the run, which its
// handler is told of).
func (s *Store) ReadRun(ctx context.Context, q QueueKeys, id string) (map[string]string, error) {
	var m map[string]string
	key := q.Task(id)
	err := s.withConn(ctx, q.Ref.Tag, func(c redis.Conn) error {
		// The scan takes several round trips once the hash is no longer
		// compact (a child's records, an attempt's history entry), and a
		// script may write the run between two of them: the view is kept
		// only when the fields every such write changes read the same
		// before and after it, else it is read again.
		for try := 0; ; try++ {
			before, err := redis.Strings(do(ctx, c, "HMGET", runGuard(key)...))
			if err != nil {
				return err
			}
			m = map[string]string{}
			if err := scanRun(ctx, c, key, "0", &runScanner{count: 1}, m); err != nil {
				return err
			}
			after, err := redis.Strings(do(ctx, c, "HMGET", runGuard(key)...))
			if err != nil {
				return err
			}
			if slices.Equal(before, after) || try == runReadTries-1 {
				return nil
			}
		}
	})
	return m, err
}

// runReadTries bounds the reads of a run that a write keeps changing; the
// last one is kept as it is.
const runReadTries = 5

// runGuardFields change with every write of a run hash: a take (state,
// start), an end (state, stage, status, history), a child's end (its
// pending count), a retry or a cancel (status).
var runGuardFields = []string{FieldState, FieldStage, FieldRunStatus, FieldPending, FieldStarted, FieldFinishedAt, FieldHistorySeq, FieldFailures}

// runGuard is the HMGET arguments of runGuardFields of key.
func runGuard(key string) []any {
	args := make([]any, 0, 1+len(runGuardFields))
	args = append(args, key)
	for _, f := range runGuardFields {
		args = append(args, f)
	}
	return args
}

// scanRun reads hash key into m by HSCAN from cursor on, in the steps sc
// chooses, until the cursor comes back to 0 (an entry met twice, during a
// rehash, is the same).
func scanRun(ctx context.Context, c redis.Conn, key, cursor string, sc *runScanner, m map[string]string) error {
	for {
		r, err := redis.Values(do(ctx, c, "HSCAN", key, cursor, "COUNT", sc.count))
		if err != nil {
			return err
		}
		if cursor, err = scanStep(r, m, sc); err != nil || cursor == "0" {
			return err
		}
	}
}

// scanStep adds one HSCAN reply's pairs to m, and to sc, and returns its
// next cursor.
func scanStep(r []any, m map[string]string, sc *runScanner) (string, error) {
	cursor, kv, err := scanReply(r)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	sc.add(kv)
	return cursor, err
}

// scanReply reads the reply of a SCAN, SSCAN or HSCAN: the next cursor
// ("0" after the last step) and the elements (field, value pairs for
// HSCAN).
// hscanPage runs one HSCAN step of hash key (on tag's connection) from
// cursor, with extra arguments (MATCH ...), and returns its field/value
// pairs and the next cursor (0 after the last page).
func (s *Store) hscanPage(ctx context.Context, tag, key string, cursor uint64, count int, extra ...any) ([]string, uint64, error) {
	args := append([]any{key, cursor}, extra...)
	vals, err := redis.Values(s.cmd(ctx, tag, "HSCAN", append(args, "COUNT", max(count, 1))...))
	if err != nil {
		return nil, 0, err
	}
	nextS, kv, err := scanReply(vals)
	if err != nil {
		return nil, 0, err
	}
	next, err := strconv.ParseUint(nextS, 10, 64)
	if err != nil {
		return nil, 0, err
	}
	return kv, next, nil
}

func scanReply(r []any) (string, []string, error) {
	if len(r) != 2 {
		return "", nil, fmt.Errorf("rdb: scan: reply of %d values", len(r))
	}
	cursor, err := redis.String(r[0], nil)
	if err != nil {
		return "", nil, err
	}
	items, err := redis.Strings(r[1], nil)
	return cursor, items, err
}

// Runs returns the runs whose ids are given, in order, skipping those gone:
// in pipelines of at most RunPage ids (FindRuns may name a whole index's
// runs), each run read by HSCAN in the steps ReadRun takes (a small run,
// in Redis's listpack encoding, comes whole with the first; a big one in
// steps of about 1 MiB, see runScanner), one step of every run not read
// whole yet per pipeline, so that no command reads much more than 1 MiB of
// a run, however big its children's results.
func (s *Store) Runs(ctx context.Context, q QueueKeys, ids []string) ([]*RunRecord, error) {
	out := make([]*RunRecord, 0, len(ids))
	for lo := 0; lo < len(ids); lo += RunPage {
		page := ids[lo:min(lo+RunPage, len(ids))]
		ms := make([]map[string]string, len(page))
		scs := make([]*runScanner, len(page))
		cursors := make([]string, len(page))
		left := make([]int, len(page)) // the runs not read whole yet
		for i := range page {
			ms[i], scs[i], cursors[i], left[i] = map[string]string{}, &runScanner{count: 1}, "0", i
		}
		for len(left) > 0 {
			cmds := make([]command, len(left))
			for j, i := range left {
				cmds[j] = cmdOf("HSCAN", q.Task(page[i]), cursors[i], "COUNT", scs[i].count)
			}
			rs, err := s.pipeline(ctx, q.Ref.Tag, cmds)
			if err != nil {
				return nil, err
			}
			next := left[:0]
			for j, i := range left {
				r, err := redis.Values(rs[j], nil)
				if err != nil {
					return nil, err
				}
				if cursors[i], err = scanStep(r, ms[i], scs[i]); err != nil {
					return nil, err
				}
				if cursors[i] != "0" {
					next = append(next, i)
				}
			}
			left = next
		}
		for i, id := range page {
			if r := DecodeRun(id, ms[i]); r != nil {
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// RunPage is how many index entries one command of FindRuns reads, and
// how many runs one pipeline of Runs reads, so that no command grows with
// the index (a whole index costs about 3.4 ms per 100,000 runs).
var RunPage = 1000

// FindRuns returns the ids of the runs indexed under prop = value that are
// running or ended within their retention (by Redis time).
//
// The index is read from its top (running runs score +inf, ended ones the
// time their retention ends) down to Redis's now, RunPage entries per
// call (runs_page.lua: O(log n + RunPage) whatever the index holds), so no
// command grows with the index. The pages are not one snapshot, and are
// not read by rank: a run read already that ends meanwhile moves down,
// below the ranks read, and every entry between moves up one rank (a read
// by rank would pass over one). Each page starts after the last entry read
// that is still where it was read (same score), found again by its id:
// what moves above it changes nothing, and an entry that moves down past
// it is read again (the repeat is dropped). A run started during the read
// may be missed, as may a failed run put back to running during it (it
// moves up, over entries already read).
func (s *Store) FindRuns(ctx context.Context, q QueueKeys, prop, value string) ([]string, error) {
	var ids []string
	key := q.IndexKey(prop, value)
	err := s.withConn(ctx, q.Ref.Tag, func(c redis.Conn) error {
		now, err := redisNow(ctx, c)
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		var read []string // id, score of each entry read, in order
		// The next page starts after the last entry read still where it
		// was read: the script looks for it among the last 16 entries
		// read, then (none of them left there) RunPage entries further
		// back at a time; when no entry read is left where it was (every
		// one moved), the read starts again from the top, a few times at
		// most.
		back, restarts := 0, 0 // entries passed over from the end of read
		for {
			args := []any{key, RunPage}
			n := 16
			if back > 0 {
				n = RunPage
			}
			if hi := len(read) - 2*back; hi > 0 {
				for k := hi - 2; k >= max(0, hi-2*n); k -= 2 {
					args = append(args, read[k], read[k+1])
				}
			} else if len(read) > 0 {
				if restarts++; restarts > 3 {
					return fmt.Errorf("rdb: find runs in %s: the index changes faster than it is read", key)
				}
			}
			r, err := redis.Values(s.run(ctx, c, runsPageScript, args...))
			if err != nil {
				return err
			}
			if len(r) == 0 {
				return fmt.Errorf("rdb: find runs: empty reply")
			}
			if ok, _ := redis.Int(r[0], nil); ok == 0 {
				back += n // none of these is where it was read: look further back
				continue
			}
			back = 0
			page := r[1:]
			for i := 0; i+1 < len(page); i += 2 {
				id, _ := redis.String(page[i], nil)
				scs, _ := redis.String(page[i+1], nil)
				sc, err := redis.Float64(page[i+1], nil)
				if err != nil {
					return err
				}
				if sc <= float64(now) {
					return nil // past its retention, and so is every run below it
				}
				read = append(read, id, scs)
				if !seen[id] {
					seen[id] = true
					ids = append(ids, id)
				}
			}
			if len(page) < 2*RunPage {
				return nil
			}
		}
	})
	return ids, err
}

// RunIDs returns up to limit run ids of the flow, newest first, after
// skipping offset, and how many the list holds (it may name runs whose
// retention ended: Runs skips them).
func (s *Store) RunIDs(ctx context.Context, q QueueKeys, offset, limit int) ([]string, int, error) {
	rs, err := s.pipeline(ctx, q.Ref.Tag, []command{
		cmdOf("ZCARD", q.Runs),
		cmdOf("ZREVRANGE", q.Runs, offset, offset+limit-1),
	})
	if err != nil {
		return nil, 0, err
	}
	total, err := redis.Int(rs[0], nil)
	if err != nil {
		return nil, 0, err
	}
	ids, err := redis.Strings(rs[1], nil)
	return ids, total, err
}

// ForgetRuns drops run ids from the flow's list of runs (their hashes
// expired), each only if its hash is still gone when the call runs: a run
// started again under the same id (RunOpts.ID) since the caller read it
// gone stays listed (runs_forget.lua).
func (s *Store) ForgetRuns(ctx context.Context, q QueueKeys, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	args := make([]any, 0, 2+2*len(ids))
	args = append(args, 1+len(ids), q.Runs)
	for _, id := range ids {
		args = append(args, q.Task(id))
	}
	for _, id := range ids {
		args = append(args, id)
	}
	_, err := s.eval(ctx, q.Ref.Tag, runsForgetScript, args...)
	return err
}

// PruneRuns drops from the flow's list of runs the ids whose hash is gone
// (ended and past their retention, or deleted), looking at up to n ids
// from rank start; it returns how many it looked at and dropped. A run's
// id and hash are written in one step (flow_start); an id may be started
// again once its run is gone (RunOpts.ID), so ForgetRuns checks each
// again as it drops it.
func (s *Store) PruneRuns(ctx context.Context, q QueueKeys, start, n int) (seen, dropped int, err error) {
	ids, err := redis.Strings(s.cmd(ctx, q.Ref.Tag, "ZRANGE", q.Runs, start, start+n-1))
	if err != nil || len(ids) == 0 {
		return 0, 0, err
	}
	cmds := make([]command, len(ids))
	for i, id := range ids {
		cmds[i] = cmdOf("EXISTS", q.Task(id))
	}
	rs, err := s.pipeline(ctx, q.Ref.Tag, cmds)
	if err != nil {
		return 0, 0, err
	}
	var gone []string
	for i, r := range rs {
		if k, err := redis.Int(r, nil); err == nil && k == 0 {
			gone = append(gone, ids[i])
		}
	}
	return len(ids), len(gone), s.ForgetRuns(ctx, q, gone)
}

func redisNow(ctx context.Context, c redis.Conn) (int64, error) {
	return timeMillis(do(ctx, c, "TIME"))
}

// timeMillis converts a TIME reply to unix ms.
func timeMillis(reply any, err error) (int64, error) {
	now, err := redis.Int64s(reply, err)
	if err != nil || len(now) != 2 {
		return 0, fmt.Errorf("rdb: TIME: %v", err)
	}
	return now[0]*1000 + now[1]/1000, nil
}
