package rdb

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// script is one Lua script, run by SHA with a fallback to EVAL on NOSCRIPT.
type script struct {
	src      string
	hash     string
	keyCount int // -1: the caller passes the key count first
}

// load builds a script from lua/<name>.lua with the parts of lua/lib.lua it
// uses prepended.
func load(name string, keyCount int) *script {
	lib, err := luaFiles.ReadFile("lua/lib.lua")
	if err != nil {
		panic("rdb: missing embedded lib.lua") // a build defect, caught by every test
	}
	src, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic("rdb: missing embedded script " + name)
	}
	full := libFor(string(lib), string(src)) + string(src)
	sum := sha1.Sum([]byte(full))
	return &script{src: full, hash: hex.EncodeToString(sum[:]), keyCount: keyCount}
}

// DoContext runs the script on c. When ctx carries a deadline and c supports
// timeouts, it uses the connection's read deadline rather than redigo's
// goroutine-per-call DoContext: cheaper on the hot path, and bounded the same.
func (s *script) DoContext(ctx context.Context, c redis.Conn, keysAndArgs ...any) (any, error) {
	args := make([]any, 0, 2+len(keysAndArgs))
	args = append(args, s.hash)
	if s.keyCount >= 0 {
		args = append(args, s.keyCount)
	}
	args = append(args, keysAndArgs...)
	r, err := s.do(ctx, c, "EVALSHA", args)
	if e, ok := err.(redis.Error); ok && strings.HasPrefix(string(e), "NOSCRIPT ") {
		args[0] = s.src
		r, err = s.do(ctx, c, "EVAL", args)
	}
	return r, err
}

func (s *script) do(ctx context.Context, c redis.Conn, cmd string, args []any) (any, error) {
	if dl, ok := ctx.Deadline(); ok {
		if cwt, ok := c.(redis.ConnWithTimeout); ok {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			return cwt.DoWithTimeout(time.Until(dl), cmd, args...)
		}
	}
	return redis.DoContext(c, ctx, cmd, args...)
}

// libFor returns the parts of lib that src needs: its local values and the
// local functions src calls, directly or through other lib functions, in lib's
// order. Each script run defines only what it uses, which keeps the fixed
// cost of a call low.
func libFor(lib, src string) string {
	type block struct{ name, text string }
	var blocks []block
	var head strings.Builder // comments and local values: always kept
	lines := strings.SplitAfter(lib, "\n")
	for i := 0; i < len(lines); i++ {
		name, ok := strings.CutPrefix(lines[i], "local function ")
		if !ok {
			if strings.HasPrefix(lines[i], "local ") {
				head.WriteString(lines[i])
			}
			continue
		}
		name = name[:strings.IndexByte(name, '(')]
		j := i
		for j < len(lines) && lines[j] != "end\n" {
			j++
		}
		blocks = append(blocks, block{name, strings.Join(lines[i:j+1], "")})
		i = j
	}
	need := map[string]bool{}
	var mark func(text string)
	mark = func(text string) {
		for _, b := range blocks {
			if !need[b.name] && strings.Contains(text, b.name+"(") {
				need[b.name] = true
				mark(b.text)
			}
		}
	}
	mark(src)
	out := head.String()
	for _, b := range blocks {
		if need[b.name] {
			out += b.text
		}
	}
	return out
}

// The scripts are immutable once built.
var (
	enqueueScript  = load("enqueue", -1)
	takeScript     = load("take", 6)
	finishScript   = load("finish", 6)
	finishMany     = load("finish_many", 3)
	givebackScript = load("giveback", 5)
	requeueScript  = load("requeue", -1)
	releaseScript  = load("release", 3)
	cancelScript   = load("cancel", 4)
	registerScript = load("register", 3)
	moveScript     = load("move", 4)
	deadScript     = load("dead", 2)
	flowStart      = load("flow_start", -1)
	flowFinish     = load("flow_finish", 6)
	childFinish    = load("child_finish", 7)
	runCancel      = load("run_cancel", 1)
)

// ErrLost is returned by Finish and GiveBack when the caller no longer owns the
// taking: nothing was changed. Package worqr exports it as ErrTaskLost.
var ErrLost = errors.New("worqr: task lost")

// ErrDuplicate is returned by Enqueue when the unique key is held by another
// task. Package worqr exports it.
var ErrDuplicate = errors.New("worqr: duplicate task")

// Conn is the part of a redigo connection the wrappers use.
type Conn = redis.Conn

// EnqueueArgs are the options of one Enqueue call.
type EnqueueArgs struct {
	DelayMillis int64  // > 0: scheduled at Redis time + delay
	DueMillis   int64  // > 0: scheduled at this unix time (ms)
	UniqueKey   string // full key (QueueKeys.UniquePrefix + user key); one task only
	UniqueTTL   int64  // ms
	MaxAttempts int    // > 0: per-task override
	TimeoutMs   int64  // > 0: per-task override
}

func optInt(v int64) string {
	if v <= 0 {
		return ""
	}
	return strconv.FormatInt(v, 10)
}

// Enqueue writes the tasks and pushes their ids at the back of the queue (or
// schedules them) in one script call. When a.UniqueKey is held it returns
// the holder's id and ErrDuplicate.
func Enqueue(ctx context.Context, c Conn, q QueueKeys, ids []string, payloads [][]byte, a *EnqueueArgs) (string, error) {
	if len(ids) != len(payloads) {
		return "", fmt.Errorf("rdb: enqueue: %d ids for %d payloads", len(ids), len(payloads))
	}
	if a == nil {
		a = &EnqueueArgs{}
	}
	args := make([]any, 0, 10+3*len(ids))
	args = append(args, 2+len(ids), q.Waiting, q.Scheduled)
	for _, id := range ids {
		args = append(args, q.Task(id))
	}
	args = append(args, q.WakeChannel, optInt(a.DelayMillis), optInt(a.DueMillis),
		a.UniqueKey, a.UniqueTTL, optInt(int64(a.MaxAttempts)), optInt(a.TimeoutMs))
	for _, id := range ids {
		args = append(args, id)
	}
	for _, p := range payloads {
		args = append(args, p)
	}
	vals, err := redis.Values(enqueueScript.DoContext(ctx, c, args...))
	if err != nil {
		return "", err
	}
	if n, _ := redis.Int(vals[0], nil); n < 0 && len(vals) > 1 {
		holder, _ := redis.String(vals[1], nil)
		return holder, ErrDuplicate
	}
	return "", nil
}

// Taken is one task handed to a worker by Take, or buried by it.
type Taken struct {
	ID string
	// PID is "" when the task was buried instead (bad data, or too many
	// crashes); Reason then says why.
	PID         string
	Reason      string
	Payload     []byte
	Attempt     int // failed attempts so far + 1
	Crashes     int
	MaxAttempts int   // per-task override, 0 = queue default
	TimeoutMs   int64 // per-task override, 0 = queue default
	// Run is the flow run's whole hash, for takes of a stage queue.
	Run map[string]string
	// Parent is the run id of a flow child.
	Parent string
}

// Take pops up to max ids from the front of the queue for worker w. Tasks that
// crashed maxCrashes workers (0 = no limit) or whose data is bad are buried.
// For a flow stage queue (stage true) each Taken carries the run's hash.
func Take(ctx context.Context, c Conn, q QueueKeys, w string, max, maxCrashes int, stage bool) ([]Taken, error) {
	flag := "0"
	if stage {
		flag = "1"
	}
	vals, err := redis.Values(takeScript.DoContext(ctx, c,
		q.Waiting, q.WorkerQueue(w), q.Holders, q.Seq, q.Dead, q.Config,
		w, max, q.TaskPrefix, q.ProcPrefix, maxCrashes, flag,
		q.QueuePrefix, q.WakePrefix, q.ScheduledPrefix, q.CancelPrefix, q.IndexPrefix))
	if err != nil {
		return nil, err
	}
	const width = 8
	if len(vals)%width != 0 {
		return nil, fmt.Errorf("rdb: take: reply of %d values", len(vals))
	}
	out := make([]Taken, 0, len(vals)/width)
	for i := 0; i < len(vals); i += width {
		var t Taken
		t.ID, _ = redis.String(vals[i], nil)
		t.PID, _ = redis.String(vals[i+1], nil)
		if t.PID == "" {
			t.Reason, _ = redis.String(vals[i+2], nil)
		} else {
			if stage {
				t.Run, _ = redis.StringMap(vals[i+2], nil)
			} else {
				t.Payload, _ = redis.Bytes(vals[i+2], nil)
			}
			t.Attempt, _ = redis.Int(vals[i+3], nil)
			t.Crashes, _ = redis.Int(vals[i+4], nil)
			if s, _ := redis.String(vals[i+5], nil); s != "" {
				t.MaxAttempts, _ = strconv.Atoi(s)
			}
			if s, _ := redis.String(vals[i+6], nil); s != "" {
				t.TimeoutMs, _ = strconv.ParseInt(s, 10, 64)
			}
			t.Parent, _ = redis.String(vals[i+7], nil)
		}
		out = append(out, t)
	}
	return out, nil
}

// Outcome is how a taking ended, as recorded in Redis.
type Outcome int

// The outcomes scripts return.
const (
	OutcomeLost      Outcome = 0
	OutcomeDone      Outcome = 1
	OutcomeCancelled Outcome = 2
	OutcomeRequeued  Outcome = 3
	OutcomeRetry     Outcome = 4
	OutcomeDead      Outcome = 5
)

func (o Outcome) String() string {
	switch o {
	case OutcomeDone:
		return "done"
	case OutcomeCancelled:
		return "cancelled"
	case OutcomeRequeued:
		return "requeued"
	case OutcomeRetry:
		return "retry"
	case OutcomeDead:
		return "dead"
	case OutcomeFannedOut:
		return "fanned_out"
	case OutcomeForwarded:
		return "forwarded"
	default:
		return "lost"
	}
}

// FinishMode says what a finish records.
type FinishMode string

// The finish modes.
const (
	FinishDone  FinishMode = "done"
	FinishRetry FinishMode = "retry"
	FinishDead  FinishMode = "dead"
)

// FinishArgs describe the end of one taking.
type FinishArgs struct {
	Mode            FinishMode
	RetryDelayMs    int64  // FinishRetry
	Err             string // FinishRetry, FinishDead
	RetentionMillis int64  // how long a done or cancelled task is kept
	Result          []byte // FinishDone
}

// Finish records the end of worker w's taking pid of task id. It returns
// ErrLost, having changed nothing, when w no longer owns pid. A cancel asked
// while the task ran wins over every mode (OutcomeCancelled).
func Finish(ctx context.Context, c Conn, q QueueKeys, w, pid, id string, a FinishArgs) (Outcome, error) {
	if a.Mode == "" {
		a.Mode = FinishDone
	}
	code, err := redis.Int(finishScript.DoContext(ctx, c,
		q.WorkerQueue(w), q.Proc(pid), q.Task(id), q.Scheduled, q.Dead, q.Config,
		pid, id, w, string(a.Mode), a.RetryDelayMs, a.Err, a.RetentionMillis, a.Result, q.TaskPrefix))
	if err != nil {
		return OutcomeLost, err
	}
	if code == 0 {
		return OutcomeLost, ErrLost
	}
	return Outcome(code), nil
}

// Taking names one taking to finish: its worker, pid and task id.
type Taking struct {
	Worker, PID, ID string
	Args            FinishArgs
}

// FinishMany records the ends of several takings of queue q in one script
// call. Each gets its own outcome; OutcomeLost (with no error) for a taking
// its worker no longer owns, which was left unchanged.
func FinishMany(ctx context.Context, c Conn, q QueueKeys, ts []Taking) ([]Outcome, error) {
	args := make([]any, 0, 6+8*len(ts))
	args = append(args, q.Scheduled, q.Dead, q.Config, q.TaskPrefix, q.ProcPrefix, q.WorkerQueuePrefix)
	for _, t := range ts {
		mode := t.Args.Mode
		if mode == "" {
			mode = FinishDone
		}
		args = append(args, t.Worker, t.PID, t.ID, string(mode), t.Args.RetryDelayMs, t.Args.Err,
			t.Args.RetentionMillis, t.Args.Result)
	}
	codes, err := redis.Ints(finishMany.DoContext(ctx, c, args...))
	if err != nil {
		return nil, err
	}
	if len(codes) != len(ts) {
		return nil, fmt.Errorf("rdb: finish many: %d codes for %d takings", len(codes), len(ts))
	}
	out := make([]Outcome, len(codes))
	for i, code := range codes {
		out[i] = Outcome(code)
	}
	return out, nil
}

// GiveBack puts worker w's taking pid of task id back at the front of its queue.
// It returns ErrLost, having changed nothing, when w no longer owns pid, and
// OutcomeCancelled when a cancel was asked meanwhile (the task ends).
func GiveBack(ctx context.Context, c Conn, q QueueKeys, w, pid, id string) (Outcome, error) {
	code, err := redis.Int(givebackScript.DoContext(ctx, c,
		q.WorkerQueue(w), q.Proc(pid), q.Task(id), q.Waiting, q.Config, pid, id, q.WakeChannel))
	if err != nil {
		return OutcomeLost, err
	}
	if code == 0 {
		return OutcomeLost, ErrLost
	}
	return Outcome(code), nil
}

// Requeue puts every taking the given workers hold in the queue back at its
// front, oldest first, and forgets their holdings there (the fail-worker
// step). crashed says whether the workers died (each task counts a crash) or
// stopped on purpose. It is idempotent.
func Requeue(ctx context.Context, c Conn, q QueueKeys, workers []string, crashed bool) (requeued, cancelled int, err error) {
	if len(workers) == 0 {
		return 0, 0, nil
	}
	args := make([]any, 0, 8+2*len(workers))
	args = append(args, 3+len(workers), q.Waiting, q.Holders, q.Config)
	for _, w := range workers {
		args = append(args, q.WorkerQueue(w))
	}
	flag := "0"
	if crashed {
		flag = "1"
	}
	args = append(args, q.WakeChannel, q.ProcPrefix, q.TaskPrefix, flag)
	for _, w := range workers {
		args = append(args, w)
	}
	vals, err := redis.Ints(requeueScript.DoContext(ctx, c, args...))
	if err != nil {
		return 0, 0, err
	}
	if len(vals) != 2 {
		return 0, 0, fmt.Errorf("rdb: requeue: reply of %d values", len(vals))
	}
	return vals[0], vals[1], nil
}

// Release puts back at the front of the queue the takings worker w holds in
// it other than known (pids w runs): takings whose take reply was lost. It
// is idempotent; requeued tasks count no crash.
func Release(ctx context.Context, c Conn, q QueueKeys, w string, known []string) (requeued, cancelled int, err error) {
	args := make([]any, 0, 7+len(known))
	args = append(args, q.Waiting, q.WorkerQueue(w), q.Config, q.WakeChannel, q.ProcPrefix, q.TaskPrefix, "")
	for _, pid := range known {
		args = append(args, pid)
	}
	vals, err := redis.Ints(releaseScript.DoContext(ctx, c, args...))
	if err != nil {
		return 0, 0, err
	}
	if len(vals) != 2 {
		return 0, 0, fmt.Errorf("rdb: release: reply of %d values", len(vals))
	}
	return vals[0], vals[1], nil
}

// CancelResult says what Cancel did.
type CancelResult int

// The results of Cancel.
const (
	CancelNoop      CancelResult = 0 // unknown, ended, dead, or already asked
	CancelRemoved   CancelResult = 1 // was waiting or scheduled: ended, no worker gets it
	CancelRequested CancelResult = 2 // running: its owner was told to stop
	CancelRefused   CancelResult = 3 // a flow run or child: cancel the run
)

// Cancel ends a waiting or scheduled task or asks the owner of a running one
// to stop.
func Cancel(ctx context.Context, c Conn, q QueueKeys, id string) (CancelResult, error) {
	code, err := redis.Int(cancelScript.DoContext(ctx, c,
		q.Waiting, q.Task(id), q.Scheduled, q.Config, id, q.CancelChannel))
	return CancelResult(code), err
}

// Move pushes up to batch due scheduled tasks to the back of the queue and
// trims the dead set by age. It returns how many it moved.
func Move(ctx context.Context, c Conn, q QueueKeys, batch int) (int, error) {
	return redis.Int(moveScript.DoContext(ctx, c,
		q.Scheduled, q.Waiting, q.Dead, q.Config, batch, q.TaskPrefix, q.WakeChannel))
}

// DeadOp is what to do with dead tasks.
type DeadOp string

// The dead-set operations.
const (
	DeadRequeue DeadOp = "requeue"
	DeadDelete  DeadOp = "delete"
)

// DeadIDs applies op to the given dead ids and returns how many were dead.
func DeadIDs(ctx context.Context, c Conn, q QueueKeys, op DeadOp, ids []string) (int, error) {
	args := make([]any, 0, 4+len(ids))
	args = append(args, q.Dead, q.Waiting, string(op), q.TaskPrefix, q.WakeChannel, q.IndexPrefix, "ids")
	for _, id := range ids {
		args = append(args, id)
	}
	return redis.Int(deadScript.DoContext(ctx, c, args...))
}

// DeadOldest applies op to up to n of the oldest dead tasks.
func DeadOldest(ctx context.Context, c Conn, q QueueKeys, op DeadOp, n int) (int, error) {
	if n < 1 {
		return 0, nil
	}
	return redis.Int(deadScript.DoContext(ctx, c,
		q.Dead, q.Waiting, string(op), q.TaskPrefix, q.WakeChannel, q.IndexPrefix, "oldest", n))
}

// Register creates worker w's keepalive with the given TTL, lists w among the
// workers and records the queues it serves, atomically. It fails if the id
// was ever used while its key still exists.
func Register(ctx context.Context, c Conn, k Keys, w string, ttlMillis int64, queues []QueueRef) error {
	args := make([]any, 0, 5+len(queues))
	args = append(args, k.Keepalive(w), k.Workers(), k.KnownQueues(), ttlMillis, w)
	for _, q := range queues {
		args = append(args, q.Member())
	}
	ok, err := redis.Int(registerScript.DoContext(ctx, c, args...))
	if err != nil {
		return err
	}
	if ok != 1 {
		return fmt.Errorf("worqr: register %s: id already in use", w)
	}
	return nil
}

// FlowRef is what flow scripts need beyond one queue's keys: how long ended
// runs are kept and the state properties runs are indexed by.
type FlowRef struct {
	RetentionMillis int64
	IndexBy         []string
}

func (q QueueKeys) prefixes() []any {
	return []any{q.QueuePrefix, q.WakePrefix, q.ScheduledPrefix, q.CancelPrefix, q.IndexPrefix}
}

// IndexKey is the index of runs whose state property prop is value.
func (q QueueKeys) IndexKey(prop, value string) string { return q.IndexPrefix + prop + ":" + value }

func appendList(args []any, vals []string) []any {
	args = append(args, len(vals))
	for _, v := range vals {
		args = append(args, v)
	}
	return args
}

// FlowStart creates run id in the first stage's queue q with the given state
// fields (names already prefixed) and index keys, and stores the flow's
// retention and indexed properties on the run. It returns false when the id
// exists.
func FlowStart(ctx context.Context, c Conn, q QueueKeys, id string, fields []string, indexKeys []string, f FlowRef) (bool, error) {
	args := make([]any, 0, 8+len(fields)+len(indexKeys))
	args = append(args, 2+len(indexKeys), q.Waiting, q.Task(id))
	for _, k := range indexKeys {
		args = append(args, k)
	}
	args = append(args, q.WakeChannel, id, q.Ref.Name, f.RetentionMillis, strings.Join(f.IndexBy, ","))
	for _, f := range fields {
		args = append(args, f)
	}
	n, err := redis.Int(flowStart.DoContext(ctx, c, args...))
	return n == 1, err
}

// Child is one child task a stage fans out.
type Child struct {
	ID, Queue string
	Payload   []byte
}

// Outcomes of flow scripts beyond those of Finish.
const (
	OutcomeFannedOut Outcome = 6
	OutcomeForwarded Outcome = 7
)

// FlowFinish records the end of worker w's stage taking pid of run id (in
// stage queue q): a done stage merges fields (prefixed name/value pairs) into
// the run and fans out children (failFast: a dead child fails the run) or
// forwards the run to next ("" after the last stage). ErrLost when w no
// longer owns pid.
func FlowFinish(ctx context.Context, c Conn, q QueueKeys, w, pid, id string, a FinishArgs, f FlowRef, next string, fields []string, children []Child, failFast bool) (Outcome, error) {
	if a.Mode == "" {
		a.Mode = FinishDone
	}
	args := make([]any, 0, 24+len(f.IndexBy)+len(fields)+3*len(children))
	args = append(args, q.WorkerQueue(w), q.Proc(pid), q.Task(id), q.Scheduled, q.Dead, q.Config,
		pid, id, w, string(a.Mode), a.RetryDelayMs, a.Err, f.RetentionMillis, q.TaskPrefix, next)
	args = append(args, q.prefixes()...)
	args = appendList(args, f.IndexBy)
	args = appendList(args, fields)
	args = append(args, 3*len(children))
	for _, ch := range children {
		args = append(args, ch.ID, ch.Queue, ch.Payload)
	}
	policy := "continue"
	if failFast {
		policy = "failfast"
	}
	args = append(args, policy)
	code, err := redis.Int(flowFinish.DoContext(ctx, c, args...))
	if err != nil {
		return OutcomeLost, err
	}
	if code == 0 {
		return OutcomeLost, ErrLost
	}
	return Outcome(code), nil
}

// ChildFinish records the end of worker w's taking pid of child id (in child
// queue q) of run runID, records it in the run and, for the last pending
// child, forwards the run (the run's next stage and the fan-out policy were
// stored on the child at fan-out). It returns the child's outcome and the
// run's (0 when unchanged).
func ChildFinish(ctx context.Context, c Conn, q QueueKeys, w, pid, id, runID string, a FinishArgs) (child, run Outcome, err error) {
	if a.Mode == "" {
		a.Mode = FinishDone
	}
	args := make([]any, 0, 20)
	args = append(args, q.WorkerQueue(w), q.Proc(pid), q.Task(id), q.Scheduled, q.Dead, q.Config, q.Task(runID),
		pid, id, w, string(a.Mode), a.RetryDelayMs, a.Err, a.Result, q.TaskPrefix)
	args = append(args, q.prefixes()...)
	vals, err := redis.Ints(childFinish.DoContext(ctx, c, args...))
	if err != nil {
		return OutcomeLost, 0, err
	}
	if len(vals) != 2 {
		return OutcomeLost, 0, fmt.Errorf("rdb: child finish: reply of %d values", len(vals))
	}
	if vals[0] == 0 {
		return OutcomeLost, 0, ErrLost
	}
	return Outcome(vals[0]), Outcome(vals[1]), nil
}

// RunCancel ends running run id as cancelled, with its stage task and pending
// children. It reports false when the run was not running. q is any queue of
// the flow's tag.
func RunCancel(ctx context.Context, c Conn, q QueueKeys, id string, f FlowRef) (bool, error) {
	args := make([]any, 0, 10+len(f.IndexBy))
	args = append(args, q.Task(id), id, q.TaskPrefix, f.RetentionMillis)
	args = append(args, q.prefixes()...)
	args = appendList(args, f.IndexBy)
	n, err := redis.Int(runCancel.DoContext(ctx, c, args...))
	return n == 1, err
}
