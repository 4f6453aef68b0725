package rdb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gomodule/redigo/redis"
)

// Taken is one task handed to a worker by Take, or buried by it.
type Taken struct {
	ID string
	// PID is "" when the task was buried instead (bad data, or too many
	// crashes); Reason then says why.
	PID    string
	Reason string
	// Stopped are, for a buried flow child that failed its run
	// (fail-fast), the siblings the run's stop took out of where they
	// waited: no end of a taking reports their cancels.
	Stopped     []QueuedTask
	Payload     []byte
	Attempt     int // failed attempts so far + 1
	Crashes     int
	MaxAttempts int   // per-task override, 0 = queue default
	TimeoutMs   int64 // per-task override: > 0 its limit, < 0 none, 0 the queue's
	// Expired: the task is not to be run: its deadline had passed when it
	// was taken (Redis time), or (Cancelled) its cancel marked it where it
	// waited. The worker ends the taking with NotRun.
	Expired   bool
	Cancelled bool
	// Run is the flow run's whole hash, for takes of a stage queue; empty
	// (not nil) when RunUnread says it was too big to come with the take.
	Run map[string]string
	// RunUnread, when > 0, is the number of fields of a run the take did
	// not hand out (a take hands out at most 4,000 fields of runs: a run
	// keeps the records of every child it fanned out): read it with
	// ReadRun before the stage runs.
	RunUnread int
	// Parent is the run id of a flow child.
	Parent string
	// Meta is the task's metadata: a flow child's (Child.Meta), a task's
	// (EnqueueArgs.Meta); "" when none.
	Meta string
	// Head is, for a task taken in a batch behind its key's head
	// (TakeArgs.Batch), the head's id; "" otherwise. A batch's tasks come
	// right after its head, in their key's order.
	Head string
}

// ErrExpired is returned by Take when the worker's deadline has passed:
// its keepalive may be gone, so nothing was taken.
var ErrExpired = errors.New("worqr: keepalive deadline passed")

// TakeArgs are the arguments of one Take.
type TakeArgs struct {
	Worker string
	// Until is the worker's deadline (unix ms, Redis time): a take at or
	// after it is refused with ErrExpired. Its keepalive must live at least
	// until then (see heartbeat.Session.Until).
	Until      int64
	Max        int // at most MaxTake
	MaxCrashes int // a task that crashed this many workers is buried; 0 = no limit
	// Stage: a flow stage queue; each Taken carries the run's hash.
	Stage bool
	// Child: a flow child queue. A child buried for bad data is counted
	// as failed in its run, found from its id (<run id>.<suffix>) when its
	// data is gone.
	Child bool
	// Ack: TakeWait waits, with WAIT in the same round trip, until the
	// store's replicas (SetReplicas) have the take, so that a failover
	// right after it finds the takings held on the promoted replica; when
	// too few acknowledge in time it returns the takings (applied on the
	// primary) with a *ReplicaError. EndTake waits for replicas whatever
	// Ack says (its ends do).
	Ack bool
	// Levels: the queue has priority levels 1..Levels (its config's
	// "prio"); their lists are taken from first, highest first. 0: the
	// plain take.
	Levels int
	// Limited: the queue may have global limits (its config's "rate",
	// "period", "conc"): the take reads them and starts no more than they
	// allow. false: the plain take.
	Limited bool
	// Batch, when above 1 (at most MaxKeyBatch): each key's head taken
	// comes with up to Batch-1 tasks of its key waiting behind it (see
	// Taken.Head), to be ended together (Ending.Batch). With Limited, each
	// counts as a start. 0 or 1: the plain take.
	Batch int
	// Fair: the queue is fair (its config's "fair", see KeyPolicy.Fair):
	// after its waiting list, the take serves its keys' lists in turn,
	// each key within its limit of running takings, and counts each taking
	// in its key's running count. false: the plain take (the keys' tasks
	// wait).
	Fair bool
	// Park > 0: the worker runs that many takings of this plain queue at
	// once (no levels, no limits, no batches); a take that finds fewer
	// tasks than it asked for parks it, so that an enqueue hands it tasks
	// while it holds fewer (see Handoff). 0: never parked.
	Park int
	// ParkMs > 0: the park entry is valid that long from the take (Redis
	// time), and never past Until; 0: until Until.
	ParkMs int64
}

// MaxKeyBatch is the largest TakeArgs.Batch.
const MaxKeyBatch = 1000

// keys returns the keys a take declares beyond its fixed ones: the level
// lists and the rate log, which the script reaches by name.
func (a TakeArgs) keys(q QueueKeys) []any {
	var out []any
	for l := min(a.Levels, MaxLevel); l >= 1; l-- {
		out = append(out, q.Level(l))
	}
	if a.Limited {
		out = append(out, q.RateLog())
	}
	if a.fair() {
		out = append(out, q.FairRing, q.FairState)
	}
	if a.parks() {
		out = append(out, q.Park) // last
	}
	return out
}

// parks reports whether the take may park its worker.
func (a TakeArgs) parks() bool {
	return a.Park > 0 && a.Levels == 0 && !a.Limited && a.Batch <= 1 && !a.Stage && !a.Child && !a.Fair
}

// fair reports whether the take serves the queue's keys in turn.
func (a TakeArgs) fair() bool { return a.Fair && !a.Stage && !a.Child }

// takeFields are a take's own arguments: in the take script's ARGV
// (TAKE) and in the end script's, for the take it runs after the ends
// (END). take_tasks (lua/include/take.lua) reads them by name from either.
//
//	worker       the taking worker's id (TakeArgs.Worker)
//	max          most tasks to take, at most MaxTake (an end's: 0 takes nothing)
//	deadline     the worker's deadline, unix ms (TakeArgs.Until): nothing
//	             is taken at or after it (Redis time)
//	max_crashes  a task that crashed this many workers is buried; 0: no limit
//	kind         the queue's Kind: task, stage or child
//	safe         1: the store routes by tag (maybe a Redis Cluster): the take
//	             reads every task hash before it writes anything, so that a
//	             slot migration caught half way changes nothing (TRYAGAIN)
//	levels       the queue's priority levels 1..levels (at most MaxLevel); 0: none
//	limited      1: the queue may have global limits (see limit_allowance)
//	batch        above 1 (a task queue; at most MaxKeyBatch): each key's
//	             head comes with up to batch-1 tasks of its key; else 0
//	park         above 0 (a take that may park, see parks): a take that
//	             finds fewer tasks than it asked for parks the worker,
//	             which runs park takings of the queue at once; else 0
//	park_ms      how long the park entry is valid (0: until deadline)
//	fair         1: a fair queue (TakeArgs.Fair): after the waiting list,
//	             the keys' lists in turn (see lua/include/fair.lua)
var takeFields = []string{"worker", "max", "deadline", "max_crashes", "kind", "safe", "levels", "limited",
	"batch", "park", "park_ms", "fair"}

// takeArgv is the take script's ARGV: the take's fields, the task key
// prefix and the tag's prefixes.
var takeArgv = declare("TAKE", fieldsOf(takeFields, []string{"task_prefix"}, prefixFields)...)

// put sets the take's fields (takeFields) in v, max among them; safe: the
// store routes by tag.
func (a TakeArgs) put(v values, safe bool) {
	kind := KindTask
	switch {
	case a.Stage:
		kind = KindStage
	case a.Child:
		kind = KindChild
	}
	batch := 0
	if a.Batch > 1 && kind == KindTask {
		batch = min(a.Batch, MaxKeyBatch)
	}
	park, parkMs := 0, int64(0)
	if a.parks() {
		park, parkMs = a.Park, max(a.ParkMs, 0)
	}
	v.set("worker", a.Worker)
	v.set("max", min(a.Max, MaxTake))
	v.set("deadline", a.Until)
	v.set("max_crashes", a.MaxCrashes)
	v.set("kind", string(kind))
	v.set("safe", flag(safe))
	v.set("levels", max(min(a.Levels, MaxLevel), 0))
	v.set("limited", flag(a.Limited))
	v.set("batch", batch)
	v.set("park", park)
	v.set("park_ms", parkMs)
	v.set("fair", flag(a.fair()))
}

// takenRow is one row of a take's reply, per id handed out (or buried):
//
//	id            the task's id
//	pid           the taking's pid; "" when the task was buried instead
//	payload       its payload; a stage's: the run's whole hash (field/value
//	              array), or its number of fields when too big to hand out;
//	              a task's or child's with metadata (FieldMeta):
//	              {payload, metadata}, read by the HMGET that reads the
//	              payload. Buried: the reason
//	attempt       failed attempts + 1; 0: past its deadline, -1: cancelled
//	              where it waited (neither is run). Buried: the queue, id
//	              pairs of the siblings a failed run's stop took out of
//	              where they waited, or ""
//	crashes       workers it crashed
//	max_attempts  its own max attempts ("": the queue's)
//	timeout       its own timeout in ms ("": the queue's)
//	parent        a flow child's run id; with batch, for a task taken behind
//	              its key's head, the head's id; else ""
var takenRow = declare("TAKEN", "id", "pid", "payload", "attempt", "crashes", "max_attempts", "timeout", "parent")

// Take pops up to a.Max (at most MaxTake) ids from the front of the queue
// for worker a.Worker. Tasks that crashed a.MaxCrashes workers or whose data
// is bad are buried.
func (s *Store) Take(ctx context.Context, q QueueKeys, a TakeArgs) ([]Taken, error) {
	taken, _, err := s.TakeWait(ctx, q, a)
	return taken, err
}

// LimitWait says whether a queue's global limits cut a take: 0 they did
// not; > 0 the rate limit allows the next start in that many ms (Redis
// clock); WaitWake (-1) the concurrency limit is reached: a taking must end
// first (its end publishes a wake-up).
type LimitWait int64

// WaitWake is the LimitWait of a take cut by the concurrency limit.
const WaitWake LimitWait = -1

// TakeWait is Take, and says whether the queue's global limits cut it.
// With a.Ack and replicas to wait for, a *ReplicaError may come back with
// the takings: they are taken (on the primary).
func (s *Store) TakeWait(ctx context.Context, q QueueKeys, a TakeArgs) ([]Taken, LimitWait, error) {
	extra := a.keys(q)
	args := make([]any, 0, 7+len(extra)+takeArgv.width())
	args = append(args, 6+len(extra), q.Waiting, q.WorkerQueue(a.Worker), q.Holders, q.Seq, q.Dead, q.Config)
	args = append(args, extra...)
	args = takeCall(args, q, a, s.tagged)
	var r any
	var err error
	if a.Ack {
		r, err = s.evalAck(ctx, q.Ref.Tag, takeScript, args...)
	} else {
		r, err = s.eval(ctx, q.Ref.Tag, takeScript, args...)
	}
	err, replica := splitReplica(err)
	vals, err := redis.Values(r, err)
	if err != nil {
		if e, ok := err.(redis.Error); ok && strings.HasPrefix(string(e), "WQEXPIRED") {
			return nil, 0, ErrExpired
		}
		return nil, 0, err
	}
	taken, wait, err := decodeTaken(vals, a)
	if err == nil {
		err = replica
	}
	return taken, wait, err
}

// takeCall appends the take script's ARGV (TAKE) to args.
func takeCall(args []any, q QueueKeys, a TakeArgs, safe bool) []any {
	v := takeArgv.put(args)
	a.put(v, safe)
	v.set("task_prefix", q.TaskPrefix)
	q.putPrefixes(v)
	return v.done()
}

// decodeTaken decodes the flat reply of a take (a takenRow per id, then
// the limit's wait when a limit cut the take).
func decodeTaken(vals []any, a TakeArgs) ([]Taken, LimitWait, error) {
	stage, batch := a.Stage, a.Batch > 1 && !a.Stage && !a.Child
	width := takenRow.width()
	at := takenRow.index
	id, pid, payload, attempt := at("id"), at("pid"), at("payload"), at("attempt")
	crashes, maxAttempts, timeout, parent := at("crashes"), at("max_attempts"), at("timeout"), at("parent")
	var wait LimitWait
	if len(vals)%width == 1 {
		w, err := redis.Int64(vals[len(vals)-1], nil)
		if err != nil {
			return nil, 0, fmt.Errorf("rdb: take: limit wait: %w", err)
		}
		wait = LimitWait(w)
		vals = vals[:len(vals)-1]
	}
	if len(vals)%width != 0 {
		return nil, 0, fmt.Errorf("rdb: take: reply of %d values", len(vals))
	}
	out := make([]Taken, 0, len(vals)/width)
	for i := 0; i < len(vals); i += width {
		row := vals[i : i+width]
		var t Taken
		t.ID, _ = redis.String(row[id], nil)
		t.PID, _ = redis.String(row[pid], nil)
		if t.PID == "" {
			t.Reason, _ = redis.String(row[payload], nil)
			if ks, ok := row[attempt].([]any); ok {
				var err error
				if t.Stopped, err = queuedTasks(ks); err != nil {
					return nil, 0, fmt.Errorf("rdb: take: stopped children of %s: %w", t.ID, err)
				}
			}
		} else {
			switch pm, pair := row[payload].([]any); {
			case stage:
				if n, ok := row[payload].(int64); ok {
					t.Run, t.RunUnread = map[string]string{}, int(n)
				} else {
					t.Run, _ = redis.StringMap(row[payload], nil)
				}
			case pair && len(pm) == 2:
				// A task or flow child with metadata: {payload, metadata}.
				t.Payload, _ = redis.Bytes(pm[0], nil)
				t.Meta, _ = redis.String(pm[1], nil)
			default:
				t.Payload, _ = redis.Bytes(row[payload], nil)
			}
			t.Attempt, _ = redis.Int(row[attempt], nil)
			// The take's marks: -1 cancelled where it waited, 0 past its
			// deadline.
			t.Cancelled = t.Attempt == -1
			t.Expired = t.Attempt <= 0
			t.Crashes, _ = redis.Int(row[crashes], nil)
			if s, _ := redis.String(row[maxAttempts], nil); s != "" {
				t.MaxAttempts, _ = strconv.Atoi(s)
			}
			if s, _ := redis.String(row[timeout], nil); s != "" {
				t.TimeoutMs, _ = strconv.ParseInt(s, 10, 64)
			}
			t.Parent, _ = redis.String(row[parent], nil)
			if batch {
				t.Head, t.Parent = t.Parent, ""
			}
		}
		out = append(out, t)
	}
	return out, wait, nil
}
