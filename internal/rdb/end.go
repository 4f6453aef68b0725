package rdb

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/gomodule/redigo/redis"
)

// ErrLost is reported when the caller no longer owns a taking: nothing was
// changed. Package worqr exports it as ErrTaskLost.
var ErrLost = errors.New("worqr: task lost")

// Ask is what the owner of a taking asks its end to record.
type Ask string

// The asks of an Ending.
const (
	AskDone  Ask = "done"  // the work is done (a stage: forward or fan out)
	AskRetry Ask = "retry" // a failed attempt, to run again after a delay
	AskDead  Ask = "dead"  // a failed attempt, to the dead set
	AskBack  Ask = "back"  // give back: to the front of the queue, nothing counted
	// AskExpire ends a taking the take found past its deadline (never
	// run): expired, once the script confirms it on Redis's clock.
	AskExpire Ask = "expire"
	// AskCancel ends a taking the take found marked cancelled where it
	// waited (never run): cancelled.
	AskCancel Ask = "cancel"
	AskLater  Ask = "later" // rate limited: to run again after a delay, no attempt counted
)

// Kind is the kind of queue a taking belongs to.
type Kind string

// The kinds of queue.
const (
	KindTask  Kind = "task"  // a stand-alone queue
	KindStage Kind = "stage" // a flow's stage queue
	KindChild Kind = "child" // a flow's child queue
)

// StageEnd is what a done stage records: fields merged into the run, then
// either children fanned out or the run forwarded to Next.
type StageEnd struct {
	Next           string // "" after the last stage
	FailFast       bool   // a dead child fails the run
	RunRetentionMs int64
	IndexBy        []string
	Fields         []string // "f:"-prefixed name/value pairs
	Children       []Child
	// SleepMs is how long the run waits before Next starts (Redis time;
	// 0: it starts at once). Not with Children.
	SleepMs int64
	// Await is the signal the run waits for before Next starts (""
	// none): SleepMs bounds the wait (0: none). Not with Children.
	Await string
	// Join makes Children a stage's branches (Stage.Branches), Next the
	// stage itself: JoinAll moves the run on when every branch has
	// ended, JoinAny when the first one is done (the others are
	// cancelled), and either marks the run joined at Next (FieldJoined),
	// so that its next taking there runs the join. "" for a plain fan-out.
	Join string
}

// The joins of a stage's branches (StageEnd.Join).
const (
	JoinAll = "all"
	JoinAny = "any"
)

// FieldJoined is the run hash's field naming the stage whose branches
// have ended (on any: one is done): the run's next taking there runs the
// join. Written by the branches' fan-in, dropped by the run's next
// forward (flow.lua, "Joins"; a literal there, as the fan-out's fields).
const FieldJoined = "jn"

// Child is one child task a stage fans out.
type Child struct {
	ID, Queue string
	Payload   []byte
	// Meta is stored with the child (FieldMeta) when not "", and handed
	// out by its takes (Taken.Meta). Opaque to the scripts.
	Meta string
}

// Ending is how one taking ends. Build it with Done, Retry, Dead or GiveBack.
type Ending struct {
	Kind         Kind
	Worker, PID  string
	ID           string
	Ask          Ask
	RetryDelayMs int64
	Err          string
	Result       []byte
	Stage        *StageEnd // KindStage
	Run          string    // KindChild: the child's run
	// Fields (KindChild, a branch of a join): "f:"-prefixed name/value
	// pairs merged into the run's state when the child ends done, in the
	// same step.
	Fields []string
	// Batch (KindTask): the tasks taken behind this head in its batch
	// (Taken.Head), in order. They end with it, in the same step, and only
	// if every one of them is still owned; see WithBatch.
	Batch []Member
}

// Member is a task taken in a batch behind its key's head, and the result
// it records when the batch is done.
type Member struct {
	PID, ID string
	Result  []byte
}

// WithBatch returns e (a head's ending) ending the tasks taken behind it
// too: done, they are done; otherwise they go back to the front of their
// key's list, in order, while the head ends as e asks (a retry counts a
// failed attempt on each; a dead head resets their counters).
func (e Ending) WithBatch(ms []Member) Ending {
	e.Batch = ms
	return e
}

// Done ends a taking whose work is done, with its result.
func Done(k Kind, worker, pid, id string, result []byte) Ending {
	return Ending{Kind: k, Worker: worker, PID: pid, ID: id, Ask: AskDone, Result: result}
}

// Retry ends a failed attempt that runs again after delayMs.
func Retry(k Kind, worker, pid, id string, delayMs int64, err string) Ending {
	return Ending{Kind: k, Worker: worker, PID: pid, ID: id, Ask: AskRetry, RetryDelayMs: delayMs, Err: err}
}

// Dead ends a failed attempt in the dead set.
func Dead(k Kind, worker, pid, id string, err string) Ending {
	return Ending{Kind: k, Worker: worker, PID: pid, ID: id, Ask: AskDead, Err: err}
}

// Expire ends a taking of a plain queue that was past its deadline when
// taken.
func Expire(worker, pid, id string) Ending {
	return Ending{Kind: KindTask, Worker: worker, PID: pid, ID: id, Ask: AskExpire}
}

// NotRun ends a taking that is not to be run (Taken.Expired): as cancelled
// when its cancel marked it where it waited (Taken.Cancelled: a task, or a
// flow run or child whose run was cancelled or failed while it waited deep
// in its list), else (a task of a plain queue) as expired.
func NotRun(worker string, t Taken) Ending {
	if t.Cancelled {
		switch {
		case t.Run != nil:
			return Ending{Kind: KindStage, Worker: worker, PID: t.PID, ID: t.ID, Ask: AskCancel}
		case t.Parent != "":
			return Ending{Kind: KindChild, Worker: worker, PID: t.PID, ID: t.ID, Ask: AskCancel, Run: t.Parent}
		}
		return Ending{Kind: KindTask, Worker: worker, PID: t.PID, ID: t.ID, Ask: AskCancel}
	}
	return Expire(worker, t.PID, t.ID)
}

// Later schedules a taking to run again after delayMs without counting a
// failed attempt (the handler was rate limited).
func Later(k Kind, worker, pid, id string, delayMs int64, err string) Ending {
	return Ending{Kind: k, Worker: worker, PID: pid, ID: id, Ask: AskLater, RetryDelayMs: delayMs, Err: err}
}

// GiveBack puts a taking back at the front of its queue.
func GiveBack(k Kind, worker, pid, id string) Ending {
	return Ending{Kind: k, Worker: worker, PID: pid, ID: id, Ask: AskBack}
}

// Ended is what End recorded for one taking: its outcome (OutcomeLost when
// the worker no longer owned it: nothing changed) and, for a flow child, its
// run's (OutcomeLost when the run did not change).
type Ended struct {
	Outcome Outcome
	Run     Outcome
	// Members are the outcomes of an Ending's Batch, in order: done,
	// cancelled, retry (back behind the head, which retries), requeued
	// (back behind the head, given back or dead), or lost with the head.
	Members []Outcome
	// Stopped are the children of a child's run that its end took out of
	// where they waited, when it failed the run (fail-fast) or, the first
	// done branch of a JoinAny, moved it on: no end of a taking reports
	// their cancels.
	Stopped []QueuedTask
}

// endArgv is the end script's fixed ARGV; the endings' records follow it.
//
//	task_prefix   the task key prefix
//	wake_channel  the queue's wake channel
//	queue_prefix .. index_prefix  the tag's prefixes (prefixFields)
//	retention     how long the queue keeps ended tasks, ms (0: deleted at once)
//
// then a take's fields (takeFields), for the take the end runs after the
// ends (max 0: none).
var endArgv = declare("END", fieldsOf([]string{"task_prefix", "wake_channel"}, prefixFields,
	[]string{"retention"}, takeFields)...)

// endRecord is the fixed part of one ending's record in the end script's
// ARGV. A record is its size (how many values follow in it), then these
// fields (an Ending's), then its kind's tail: recChild, recStage, or
// recBatch and its members.
var endRecord = declare("REC", "kind", "worker", "pid", "id", "ask", "delay", "err", "result")

// recChild is the tail of a child's record: its run's id; then a counted
// list of the state field/value pairs it merges into the run when done
// ("f:" names; Ending.Fields).
var recChild = declare("REC_CHILD", "run")

// recStage is the tail of a stage's record: StageEnd's next stage ("" after
// the last), its fan-out policy (failfast | continue, then, for the
// branches of a join, " all" or " any": StageEnd.Join) and the run's
// retention ms, how long the run sleeps before its next stage (ms, 0:
// none; StageEnd.SleepMs), the signal it awaits there ("": none; with
// it, sleep is the wait's bound, 0 none); then three counted lists (a count, then the values):
// indexed properties, state field/value pairs ("f:" names) and the
// children fanned out (fanOutChild values each).
var recStage = declare("REC_STAGE", "next_stage", "policy", "run_retention", "sleep", "await")

// recBatch is the tail of a batch's record (a key's head and the tasks
// taken behind it): how many members follow, batchMember values each.
var recBatch = declare("REC_BATCH", "members")

// batchMember is one task of a batch behind its head (a Member).
var batchMember = declare("MEMBER", "pid", "id", "result")

// fanOutChild is one child a stage fans out (a Child; meta "" for none).
var fanOutChild = declare("FANOUT", "id", "queue", "payload", "meta")

// endReply is the end script's reply: each taking's endedRow (ends), the
// take's takenRows (taken), and, only when there are any, the members'
// outcomes (members) and the children a child's end took out of their
// queues (stopped rows). The fields that may be missing come last, in
// the order they drop.
var endReply = declare("END_REPLY", "ends", "taken", "members", "stopped")

// endedRow is what the end script answers per taking: its outcome
// (OutcomeLost: not the owner, nothing changed) and, for a child, its
// run's (OutcomeLost when the run did not change).
var endedRow = declare("ENDED", "outcome", "run")

// stoppedRow is one child a child's end took out of where it waited when
// it failed its run: the 1-based position of that ending, the child's
// queue and id.
var stoppedRow = declare("STOPPED", "at", "queue", "id")

func appendList(args []any, vals []string) []any {
	args = append(args, len(vals))
	for _, v := range vals {
		args = append(args, v)
	}
	return args
}

// endCall appends the end script's fixed ARGV (END) to args: t is the take
// to run after the ends.
func endCall(args []any, q QueueKeys, retentionMs int64, t TakeArgs, safe bool) []any {
	v := endArgv.put(args)
	v.set("task_prefix", q.TaskPrefix)
	v.set("wake_channel", q.WakeChannel)
	q.putPrefixes(v)
	v.set("retention", retentionMs)
	t.put(v, safe)
	return v.done()
}

// appendRecord appends e's record to the end script's ARGV: its size, its
// endRecord, its kind's tail.
func appendRecord(args []any, e Ending) []any {
	kind := string(e.Kind)
	if len(e.Batch) > 0 && e.Kind == KindTask {
		kind = "batch"
	}
	mark := len(args)
	args = append(args, 0) // the size, below
	v := endRecord.put(args)
	v.set("kind", kind)
	v.set("worker", e.Worker)
	v.set("pid", e.PID)
	v.set("id", e.ID)
	v.set("ask", string(e.Ask))
	v.set("delay", e.RetryDelayMs)
	v.set("err", e.Err)
	v.set("result", e.Result)
	args = v.done()
	switch {
	case kind == "batch":
		v = recBatch.put(args)
		v.set("members", len(e.Batch))
		args = v.done()
		for _, m := range e.Batch {
			v = batchMember.put(args)
			v.set("pid", m.PID)
			v.set("id", m.ID)
			v.set("result", m.Result)
			args = v.done()
		}
	case e.Kind == KindChild:
		v = recChild.put(args)
		v.set("run", e.Run)
		args = v.done()
		args = appendList(args, e.Fields)
	case e.Kind == KindStage:
		st := e.Stage
		if st == nil {
			st = &StageEnd{}
		}
		policy := "continue"
		if st.FailFast {
			policy = "failfast"
		}
		if st.Join != "" {
			policy += " " + st.Join
		}
		v = recStage.put(args)
		v.set("next_stage", st.Next)
		v.set("policy", policy)
		v.set("run_retention", st.RunRetentionMs)
		v.set("sleep", st.SleepMs)
		v.set("await", st.Await)
		args = v.done()
		args = appendList(args, st.IndexBy)
		args = appendList(args, st.Fields)
		args = append(args, fanOutChild.width()*len(st.Children))
		for _, ch := range st.Children {
			v = fanOutChild.put(args)
			v.set("id", ch.ID)
			v.set("queue", ch.Queue)
			v.set("payload", ch.Payload)
			v.set("meta", ch.Meta)
			args = v.done()
		}
	}
	args[mark] = len(args) - mark - 1
	return args
}

// End records the ends of takings of queue q in one script call: the one way
// a taking ends. retentionMs is how long the queue keeps ended tasks. Each
// taking is checked for ownership and answered on its own. While the store
// waits for replicas (SetReplicas), a *ReplicaError comes with the outcomes:
// the ends were recorded on the primary.
func (s *Store) End(ctx context.Context, q QueueKeys, retentionMs int64, es []Ending) ([]Ended, error) {
	out, _, err := s.EndTake(ctx, q, retentionMs, es, nil)
	return out, err
}

// EndTake is End, then, in the same script call, a take as Take(ctx, q,
// *take) would run it (nothing when take is nil or take.Max is 0, or when
// take.Until has passed: then no error, nothing taken). A worker refills the
// slots its ends free without a round trip of its own.
func (s *Store) EndTake(ctx context.Context, q QueueKeys, retentionMs int64, es []Ending, take *TakeArgs) ([]Ended, []Taken, error) {
	ended, taken, _, err := s.EndTakeWait(ctx, q, retentionMs, es, take)
	return ended, taken, err
}

// EndTakeWait is EndTake, and says whether the queue's global limits cut
// its take. A take with Max 0 takes nothing but still tells the script
// the queue's flags (Limited: the ends announce freed slots).
func (s *Store) EndTakeWait(ctx context.Context, q QueueKeys, retentionMs int64, es []Ending, take *TakeArgs) ([]Ended, []Taken, LimitWait, error) {
	var t TakeArgs
	if take != nil {
		t = *take
	}
	t.Max = max(t.Max, 0)
	keys := make([]any, 0, 8+3*len(es))
	keys = append(keys, q.Scheduled, q.Dead, q.Config, q.Waiting, q.Retained, q.Holders, q.Seq, q.WorkerQueue(t.Worker))
	args := make([]any, 0, endArgv.width()+10*len(es))
	args = endCall(args, q, retentionMs, t, s.tagged)
	for _, e := range es {
		keys = append(keys, q.WorkerQueue(e.Worker), q.Task(e.ID))
		if e.Kind == KindChild {
			keys = append(keys, q.Task(e.Run))
		}
		if len(e.Batch) > 0 && e.Kind == KindTask {
			for _, m := range e.Batch {
				keys = append(keys, q.Task(m.ID))
			}
		}
		args = appendRecord(args, e)
	}
	// The keys a stage's end writes by name (the next stage's queue, each
	// child's hash and queue) are declared after every taking's keys, so
	// that a cluster checks them before the script runs; the script reaches
	// them from the tag's prefixes.
	for _, e := range es {
		if e.Kind != KindStage || e.Stage == nil {
			continue
		}
		seen := map[string]bool{}
		if e.Stage.Next != "" && len(e.Stage.Children) == 0 {
			keys = append(keys, q.QueuePrefix+e.Stage.Next)
		}
		for _, ch := range e.Stage.Children {
			keys = append(keys, q.Task(ch.ID))
			if !seen[ch.Queue] {
				seen[ch.Queue] = true
				keys = append(keys, q.QueuePrefix+ch.Queue)
			}
		}
	}
	if t.Max > 0 {
		keys = append(keys, t.keys(q)...)
	}
	all := make([]any, 0, 1+len(keys)+len(args))
	all = append(all, len(keys))
	all = append(all, keys...)
	all = append(all, args...)
	r, err := s.evalAck(ctx, q.Ref.Tag, endScript, all...)
	err, replica := splitReplica(err)
	reply, err := redis.Values(r, err)
	if err != nil {
		return nil, nil, 0, err
	}
	out, taken, wait, err := decodeEnded(reply, es, t)
	if err != nil {
		return out, nil, 0, err
	}
	return out, taken, wait, replica
}

// decodeEnded decodes the end script's reply (endReply) to endings es and
// the take t it ran after them.
func decodeEnded(reply []any, es []Ending, t TakeArgs) ([]Ended, []Taken, LimitWait, error) {
	if len(reply) != endReply.width() {
		return nil, nil, 0, fmt.Errorf("rdb: end: reply of %d values, want %d", len(reply), endReply.width())
	}
	at := endReply.index
	codes, err := redis.Ints(reply[at("ends")], nil)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("rdb: end: %w", err)
	}
	w, outcome, run := endedRow.width(), endedRow.index("outcome"), endedRow.index("run")
	if len(codes) != w*len(es) {
		return nil, nil, 0, fmt.Errorf("rdb: end: %d codes for %d takings", len(codes), len(es))
	}
	out := make([]Ended, len(es))
	for i := range out {
		row := codes[w*i : w*i+w]
		out[i] = Ended{Outcome: Outcome(row[outcome]), Run: Outcome(row[run])}
	}
	// The children ends took out of their queues.
	vs, err := redis.Strings(reply[at("stopped")], nil)
	w = stoppedRow.width()
	if err != nil || len(vs)%w != 0 {
		return nil, nil, 0, fmt.Errorf("rdb: end: stopped children: %v %v", reply[at("stopped")], err)
	}
	pos, queue, id := stoppedRow.index("at"), stoppedRow.index("queue"), stoppedRow.index("id")
	for j := 0; j < len(vs); j += w {
		row := vs[j : j+w]
		n, err := strconv.Atoi(row[pos])
		if err != nil || n < 1 || n > len(out) {
			return nil, nil, 0, fmt.Errorf("rdb: end: stopped child of taking %q", row[pos])
		}
		out[n-1].Stopped = append(out[n-1].Stopped, QueuedTask{Queue: row[queue], ID: row[id]})
	}
	// The outcomes of the batches' members, in order.
	ms, err := redis.Ints(reply[at("members")], nil)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("rdb: end: members: %w", err)
	}
	for i, e := range es {
		if e.Kind != KindTask || len(e.Batch) == 0 {
			continue
		}
		if len(ms) < len(e.Batch) {
			return nil, nil, 0, fmt.Errorf("rdb: end: %d member outcomes left for a batch of %d", len(ms), len(e.Batch))
		}
		out[i].Members = make([]Outcome, len(e.Batch))
		for j := range e.Batch {
			out[i].Members[j] = Outcome(ms[j])
		}
		ms = ms[len(e.Batch):]
	}
	vals, err := redis.Values(reply[at("taken")], nil)
	if err != nil {
		return out, nil, 0, fmt.Errorf("rdb: end: take: %w", err)
	}
	taken, wait, err := decodeTaken(vals, t)
	if err != nil {
		return out, nil, 0, err
	}
	return out, taken, wait, nil
}
