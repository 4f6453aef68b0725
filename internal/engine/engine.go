// Package engine is what every driver of a queue's takings shares: a
// worqr.Worker, which runs handlers in its own process, and a
// remote.Server, which hands takings to workers elsewhere. For one queue
// it holds the keys, the retry policy, the place in a flow and the flags,
// and it decides how a taking is taken and how it ends: the take's
// arguments, the outcome policy, a stage's fan-out, the end group's shape
// and the check of an end whose reply was lost are written here once.
//
// It takes its inputs as data (the drivers turn their configuration into
// a Queue), so that both front packages import it.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/rs/xid"

	"github.com/worqr/worqr-go/internal/group"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/registry"
)

// CallTimeout bounds one Redis call the runtime makes on its own behalf
// (an end, a take, a release, a read of flags): a reply lost on a silent
// connection is noticed within it, and the call tried again.
const CallTimeout = 5 * time.Second

// Queue is one queue's engine. Its drivers fill it once, before the first
// take; only Flags change after.
type Queue struct {
	Kind rdb.Kind
	// Member names the queue in events, the history and the Inspector:
	// "<queue>", or "<flow>/<queue>" for a flow's.
	Member string
	QK     rdb.QueueKeys
	Policy Policy
	// Stage is the flow stage of a stage queue, and the declaring stage of
	// a child queue; nil for a stand-alone queue.
	Stage *Stage
	Flags
}

// Policy is a queue's retry policy.
type Policy struct {
	// MaxAttempts: a failure of attempt MaxAttempts (or of the task's own
	// MaxAttempts, when it has one) is final.
	MaxAttempts int
	// MaxCrashes: a task taken by MaxCrashes workers that died with it is
	// buried by the next take.
	MaxCrashes int
	// Backoff is the wait before the attempt after failed attempt number
	// attempt. Fallback is used when it panics.
	Backoff, Fallback func(attempt int, err error) time.Duration
	// Timeout is how long an attempt may run (0: no limit), unless the
	// task has its own.
	Timeout time.Duration
	// StuckAfter: a taking that has run this long is reported once as
	// stuck (0: never).
	StuckAfter time.Duration
}

// Stuck reports whether a taking that started at started is stuck at now:
// it has run its queue's StuckAfter.
func (q *Queue) Stuck(started, now time.Time) bool {
	return q.Policy.StuckAfter > 0 && now.Sub(started) >= q.Policy.StuckAfter
}

// StuckEvery is how often a driver looks for stuck takings among qs: a
// tenth of the shortest StuckAfter, between 10 ms and 1 s; 0 when no
// queue reports stuck takings.
func StuckEvery(qs []*Queue) time.Duration {
	every := time.Duration(0)
	for _, q := range qs {
		if d := q.Policy.StuckAfter / 10; q.Policy.StuckAfter > 0 && (every == 0 || d < every) {
			every = d
		}
	}
	if every == 0 {
		return 0
	}
	return min(max(every, 10*time.Millisecond), time.Second)
}

// Timeout is how long an attempt of taken may run, 0 for no limit: the
// task's own timeout (rdb.Taken.TimeoutMs: positive, or negative for
// none), else the queue's.
func (q *Queue) Timeout(taken rdb.Taken) time.Duration {
	switch {
	case taken.TimeoutMs > 0:
		return time.Duration(taken.TimeoutMs) * time.Millisecond
	case taken.TimeoutMs < 0:
		return 0
	}
	return q.Policy.Timeout
}

// Stage is what an ending of a flow's stage or child taking records.
type Stage struct {
	Name string
	// Next is the stage after this one, "" after the last.
	Next string
	// FailFast: a child that fails for good fails its run.
	FailFast bool
	// RunRetentionMs and IndexBy are the run's settings (rdb.FlowRef).
	RunRetentionMs int64
	IndexBy        []string
	// Children are the child queues the stage declared.
	Children map[string]bool
	// Branches are the stage's branches (child queues too), in order; the
	// stage's handler is their join. JoinAny: the join runs once the first
	// branch is done, not once all have ended.
	Branches []string
	JoinAny  bool
}

// MaxBranches is how many branches a stage declares at most: the first
// done branch of a join on any stops the others in its end's step, which
// stays short.
const MaxBranches = 64

// Branching reports whether taking taken of a stage queue is to fan out
// the stage's branches rather than run its handler: the stage has
// branches and its run has not been joined there (rdb.FieldJoined, set by
// the branches' fan-in and cleared when the run moves on).
func (q *Queue) Branching(taken rdb.Taken) bool {
	return q.Kind == rdb.KindStage && len(q.Stage.Branches) > 0 && taken.Run[rdb.FieldJoined] != q.Stage.Name
}

// IsBranch reports whether q, a flow's child queue, is a branch of its
// declaring stage's join (Stage.Branches): its takings run with the run's
// state (ReadBranchRun) and their done ends merge fields into it
// (BranchFields).
func (q *Queue) IsBranch() bool {
	return q.Kind == rdb.KindChild && q.Stage != nil && slices.Contains(q.Stage.Branches, q.QK.Ref.Name)
}

// ErrRunNotRunning is why a branch's taking is not run: its run ended
// (failed, cancelled, or moved on past a join on any) while it waited.
var ErrRunNotRunning = errors.New("its run is not running")

// ReadBranchRun reads the run of a branch's taking, as its handler sees
// it. A run that is gone or no longer running is ErrRunNotRunning: the
// taking is not run, and ends for good (its end finds the run ended and
// drops it). Another error is the read's.
func ReadBranchRun(ctx context.Context, st *rdb.Store, q *Queue, taken rdb.Taken) (*rdb.RunRecord, error) {
	m, err := st.ReadRun(ctx, q.QK, taken.Parent)
	if err != nil {
		return nil, fmt.Errorf("reading run %s: %w", taken.Parent, err)
	}
	r := rdb.DecodeRun(taken.Parent, m)
	if r == nil || r.Status != rdb.RunRunning {
		return nil, fmt.Errorf("branch %s: run %s: %w", q.QK.Ref.Name, taken.Parent, ErrRunNotRunning)
	}
	return r, nil
}

// BranchFields adds to a branch's done ending e the state fields its end
// merges into the run, after checking them against the bounds a stage's
// fields have (CheckStateFields); the error is an *InputError naming
// field.
func (q *Queue) BranchFields(e *rdb.Ending, field string, fields map[string]string, maxPayload int) error {
	if _, err := CheckStateFields(field, fields, maxPayload, StageBudget(maxPayload)); err != nil {
		return err
	}
	e.Fields = rdb.StateFields(fields)
	return nil
}

// FanEnding is the ending of a taking of a join's stage whose run has
// not been joined there (Branching): done, fanning out the branches.
func (q *Queue) FanEnding(worker string, taken rdb.Taken, log *slog.Logger) rdb.Ending {
	e := q.Decide(worker, taken, Outcome{Verdict: Done}, log)
	q.FanBranches(&e)
	return e
}

// FanBranches makes a stage's done ending e fan out one child per branch,
// with no payload, and come back to this stage when they have ended (on
// any: when the first is done), to run the join.
func (q *Queue) FanBranches(e *rdb.Ending) {
	e.Stage.Next = q.Stage.Name
	e.Stage.Join = rdb.JoinAll
	if q.Stage.JoinAny {
		e.Stage.Join = rdb.JoinAny
	}
	e.Stage.Children = make([]rdb.Child, len(q.Stage.Branches))
	for i, b := range q.Stage.Branches {
		e.Stage.Children[i] = rdb.Child{ID: e.ID + "." + xid.New().String(), Queue: b}
	}
}

// Verdict is how an attempt of a taking ends, as its driver saw it.
type Verdict uint8

const (
	// Done: the work is done (a stage forwards its run, or fans out).
	Done Verdict = iota
	// GiveBack: back to the front of the queue, no attempt counted.
	GiveBack
	// Later: run again after Delay (at least 1 ms), no attempt counted
	// (a rate limit said so).
	Later
	// Bury: the dead set at once.
	Bury
	// Retry: run again after Delay, unless it was the last attempt (then
	// the dead set).
	Retry
	// Fail: run again after the queue's Backoff, unless it was the last
	// attempt (then the dead set).
	Fail
)

// Outcome is what an attempt came to.
type Outcome struct {
	Verdict Verdict
	// Delay: Later's and Retry's wait.
	Delay time.Duration
	// Err is the failure: its text is stored (cut to MaxErrorLen bytes),
	// and the queue's Backoff reads it.
	Err error
	// Result is a done attempt's result.
	Result []byte
}

// Decide is the outcome policy: how attempt o of taking taken, run under
// worker, ends in Redis. It is the only place that decides. A failure of
// the last attempt (the task's MaxAttempts, else the queue's) goes to the
// dead set; Later and GiveBack count no attempt.
func (q *Queue) Decide(worker string, taken rdb.Taken, o Outcome, log *slog.Logger) rdb.Ending {
	if o.Verdict == Done {
		return q.RecordFor(taken, rdb.Done(q.Kind, worker, taken.PID, taken.ID, o.Result))
	}
	if o.Verdict == GiveBack {
		return q.RecordFor(taken, rdb.GiveBack(q.Kind, worker, taken.PID, taken.ID))
	}
	msg := ""
	if o.Err != nil {
		msg = Clip(o.Err.Error())
	}
	maxAttempts := q.Policy.MaxAttempts
	if taken.MaxAttempts > 0 {
		maxAttempts = taken.MaxAttempts
	}
	var e rdb.Ending
	switch {
	case o.Verdict == Later:
		e = rdb.Later(q.Kind, worker, taken.PID, taken.ID, max(o.Delay.Milliseconds(), 1), msg)
	case o.Verdict == Bury || taken.Attempt >= maxAttempts:
		e = rdb.Dead(q.Kind, worker, taken.PID, taken.ID, msg)
	default:
		d := o.Delay
		if o.Verdict == Fail {
			d = q.backoff(taken.Attempt, o.Err, log)
		}
		e = rdb.Retry(q.Kind, worker, taken.PID, taken.ID, max(d.Milliseconds(), 0), msg)
	}
	return q.RecordFor(taken, e)
}

// backoff is the Policy's Backoff after failed attempt number attempt. A
// Backoff that panics is the user's code failing on the way of a failed
// attempt, as a handler's panic is: the Fallback applies and the panic is
// logged, since it runs outside any handler's recover.
func (q *Queue) backoff(attempt int, err error, log *slog.Logger) (d time.Duration) {
	defer func() {
		if v := recover(); v != nil {
			log.Error("worker: QueueConfig.Backoff panicked; the default backoff applies", "attempt", attempt,
				"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			d = q.Policy.Fallback(attempt, err)
		}
	}()
	return q.Policy.Backoff(attempt, err)
}

// RecordFor adds to e what q's kind records with an ending: where a stage
// goes next and its run's settings, a child's run.
func (q *Queue) RecordFor(taken rdb.Taken, e rdb.Ending) rdb.Ending {
	switch q.Kind {
	case rdb.KindStage:
		e.Stage = &rdb.StageEnd{
			Next: q.Stage.Next, FailFast: q.Stage.FailFast,
			RunRetentionMs: q.Stage.RunRetentionMs, IndexBy: q.Stage.IndexBy,
		}
	case rdb.KindChild:
		e.Run = taken.Parent
	}
	return e
}

// NotRun is the ending of a taking the take found not to run: past its
// deadline on Redis's clock, or cancelled where it waited.
func (q *Queue) NotRun(worker string, taken rdb.Taken) rdb.Ending {
	e := rdb.NotRun(worker, taken)
	if taken.Cancelled {
		// A run or a child marked where it waited ends as what its queue
		// holds, whatever the taking's kept data says.
		e.Kind = q.Kind
	}
	return q.RecordFor(taken, e)
}

// TakeArgs are the arguments every take of up to n tasks of q under
// worker (whose keepalive holds until until) carries: the queue's kind and
// flags. A queue with no priority levels, no limits and no fair keys
// takes the plain way. A driver adds what only it does (key batches, hand-off parks).
func (q *Queue) TakeArgs(worker string, until time.Time, n int) rdb.TakeArgs {
	return rdb.TakeArgs{Worker: worker, Until: until.UnixMilli(), Max: n,
		MaxCrashes: q.Policy.MaxCrashes, Stage: q.Kind == rdb.KindStage, Child: q.Kind == rdb.KindChild,
		Levels: int(q.Levels.Load()), Limited: q.Limited.Load(), Fair: q.Fair.Load()}
}

// Child is a child task a stage fans out.
type Child struct {
	Queue   string
	Payload []byte
	Meta    map[string]string
}

// FanOutNames name a stage end's inputs in the errors of FanOut, as its
// driver's caller knows them: a handler's StageResult, a remote's call.
type FanOutNames struct {
	Fields   string // the state fields
	Children string // the children list
	Lower    bool   // a child's fields in lower case (queue, payload, meta)
	Sleep    string // how long the run sleeps before its next stage (Resume)
	Again    string // the stage runs again next (Resume)
	Await    string // the signal the run awaits before its next stage (Resume)
}

// FanOut adds to a stage's done ending e the state fields and the
// children it fans out, after checking them against the flow and the
// bounds: at most MaxStateFields fields and MaxChildren children, each
// child in a queue the stage declared and at most maxPayload bytes, and
// fields and children together at most StageBudget(maxPayload) bytes, so
// that one end call stays within what an enqueue call may carry. Nothing is
// added when a check fails; the error is an *InputError.
func (q *Queue) FanOut(e *rdb.Ending, fields map[string]string, children []Child, maxPayload int, n FanOutNames) error {
	budget := StageBudget(maxPayload)
	size, err := CheckStateFields(n.Fields, fields, maxPayload, budget)
	if err != nil {
		return err
	}
	if len(children) > MaxChildren {
		return Invalid(n.Children, "has %d children (at most %d per stage)", len(children), MaxChildren)
	}
	child := func(i int, name string) string {
		if n.Lower {
			name = strings.ToLower(name)
		}
		return fmt.Sprintf("%s[%d].%s", n.Children, i, name)
	}
	out := make([]rdb.Child, 0, len(children))
	for i, c := range children {
		if !q.Stage.Children[c.Queue] {
			return Invalid(child(i, "Queue"), "%q is not a child queue declared by stage %s", c.Queue, q.Stage.Name)
		}
		if len(c.Payload) > maxPayload {
			return Invalid(child(i, "Payload"), "is %d bytes, over MaxPayloadBytes (%d)", len(c.Payload), maxPayload)
		}
		meta, err := EncodeMeta(child(i, "Meta"), c.Meta)
		if err != nil {
			return err
		}
		if size += len(c.Payload) + len(meta); size > budget {
			return Invalid(n.Children, "carry %d bytes or more with the fields (at most %d per stage end: 4 MiB, or MaxPayloadBytes when larger)", size, budget)
		}
		// A child's id starts with its run's: a take that buries a child
		// whose data is gone still counts it in its run.
		out = append(out, rdb.Child{ID: e.ID + "." + xid.New().String(), Queue: c.Queue, Payload: c.Payload, Meta: meta})
	}
	e.Stage.Fields = rdb.StateFields(fields)
	if len(out) > 0 {
		e.Stage.Children = out
	}
	return nil
}

// Resume sets how a stage's done ending e, fanned out (FanOut) with no
// children, moves its run on: after sleep (a durable timer: the run waits
// in the next stage's scheduled set, on Redis's clock; 0: at once), or
// once signal await comes (at most sleep; 0: without bound), to this same
// stage again when again, else to the next. A run with children moves on
// when its last child ends, so none applies with children; after the
// last stage, sleep and await only with again. Nothing is changed when a
// check fails; the error is an *InputError.
func (q *Queue) Resume(e *rdb.Ending, sleep time.Duration, again bool, await string, n FanOutNames) error {
	if sleep == 0 && !again && await == "" {
		return nil
	}
	field := n.Sleep
	switch {
	case await != "":
		field = n.Await
	case sleep == 0:
		field = n.Again
	}
	switch {
	case sleep < 0 || sleep > 0 && sleep < time.Millisecond:
		return Invalid(n.Sleep, "(%v) must be 0 or at least 1ms", sleep)
	case len(await) > MaxFieldNameLen:
		return Invalid(n.Await, "is %d bytes long (a state field's name: at most %d)", len(await), MaxFieldNameLen)
	case len(e.Stage.Children) > 0:
		return Invalid(field, "does not apply with children: the run moves on when its last child ends")
	case !again && e.Stage.Next == "" && (sleep > 0 || await != ""):
		return Invalid(field, "after the last stage needs %s: the run has no next stage to wait before", n.Again)
	}
	if again {
		e.Stage.Next = q.Stage.Name
	}
	e.Stage.SleepMs = sleep.Milliseconds()
	e.Stage.Await = await
	return nil
}

// AppliedEarlier tells, for an end that Redis answered "lost" after an
// earlier attempt of it (tried) whose reply was lost, whether that attempt
// was applied. While session's keepalive exists in Redis, and lost says
// the session is not lost here, nobody else moves its takings (the reaper
// requeues dead workers only), so a taking that vanished from a live
// session was ended by it. out is then what the applied end recorded: what
// it asked, unless the task reads cancelled (a cancel asked while it ran
// wins over any end), or, a child's done end, its run counted it other
// than done (the end found it cancelled: a sibling of a join on any was
// done first, or its run had ended); a task no retention keeps answers
// what it asked.
func (q *Queue) AppliedEarlier(ctx context.Context, st *rdb.Store, reg *registry.Registry, session string, lost func() bool, tried rdb.Ending) (applied bool, out rdb.Outcome, err error) {
	actx, cancel := context.WithTimeout(ctx, CallTimeout)
	alive, err := reg.Alive(actx, []string{session})
	cancel()
	if err != nil || !alive[0] || lost() {
		return false, out, err
	}
	rctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	if rec, err := st.Task(rctx, q.QK, tried.ID); err == nil && rec != nil && rec.State == rdb.StateCancelled {
		return true, rdb.OutcomeCancelled, nil
	}
	if tried.Kind == rdb.KindChild && tried.Ask == rdb.AskDone && tried.Run != "" {
		// The end deleted the child: its run says whether it counted it done.
		if s, err := st.ChildStatus(rctx, q.QK, tried.Run, tried.ID); err == nil && s != "" && s != "done" {
			return true, rdb.OutcomeCancelled, nil
		}
	}
	return true, Asked(tried), nil
}

// Asked is the outcome an ending asks for (a cancel asked meanwhile would
// have made it OutcomeCancelled).
func Asked(e rdb.Ending) rdb.Outcome {
	switch e.Ask {
	case rdb.AskRetry, rdb.AskLater:
		return rdb.OutcomeRetry
	case rdb.AskDead:
		return rdb.OutcomeDead
	case rdb.AskBack:
		return rdb.OutcomeRequeued
	case rdb.AskExpire:
		return rdb.OutcomeExpired
	case rdb.AskCancel:
		return rdb.OutcomeCancelled
	}
	if e.Kind == rdb.KindStage && e.Stage != nil {
		switch {
		case len(e.Stage.Children) > 0:
			return rdb.OutcomeFannedOut
		case e.Stage.Next != "":
			return rdb.OutcomeForwarded
		}
	}
	return rdb.OutcomeDone
}

// MemberAsked is the outcome an ending asks for the tasks of its batch
// behind the head (see rdb.Ending.WithBatch).
func MemberAsked(e rdb.Ending) rdb.Outcome {
	switch e.Ask {
	case rdb.AskDone:
		return rdb.OutcomeDone
	case rdb.AskRetry, rdb.AskLater:
		return rdb.OutcomeRetry
	}
	return rdb.OutcomeRequeued
}

// ReadFlags reads the flags of qs from their config hashes (one round trip
// per tag) and applies each queue's as read: on a Redis Cluster with a
// master down for good, the queues of the others still see their pauses,
// levels and limits. woke is called for each queue resumed, or whose rate
// wait was dropped (its limits may have changed); errs[i] is the read
// error of qs[i], whose flags stay as they were.
func ReadFlags(ctx context.Context, st *rdb.Store, qs []*Queue, woke func(i int, resumed, unheld bool)) []error {
	qks := make([]rdb.QueueKeys, len(qs))
	for i, q := range qs {
		qks[i] = q.QK
	}
	flags, errs := st.FlagsEach(ctx, qks)
	for i, q := range qs {
		if errs[i] != nil {
			continue
		}
		if resumed, unheld := q.Apply(flags[i]); resumed || unheld {
			woke(i, resumed, unheld)
		}
	}
	return errs
}

// NewEndGroup is a queue's one way to end takings: ends that arrive
// together share one script call (group commit), whatever their kind; each
// is checked and answered on its own. A call carries at most 64 ends and
// rdb.MaxTake of weight (EndWeight), and at most 2 calls are in flight.
func NewEndGroup[R any](run func(ctx context.Context, es []rdb.Ending) ([]R, error)) *group.Group[rdb.Ending, R] {
	return &group.Group[rdb.Ending, R]{
		MaxBatch: 64, MaxInFlight: 2,
		Weight: EndWeight, MaxWeight: rdb.MaxTake,
		Run: func(ctx context.Context, es []rdb.Ending) ([]R, error) {
			ctx, cancel := context.WithTimeout(ctx, CallTimeout)
			defer cancel()
			return run(ctx, es)
		},
	}
}

// EndWeight weighs an ending in its group's end call, which holds at most
// rdb.MaxTake of weight (and always its first ending), so that no end call
// holds Redis for more than a few milliseconds. It weighs one per taking
// it ends (a batch per key ends all its takings), plus the children a
// stage's fan-out creates and the fields it (or a branch of a join)
// writes, plus, for a child's ending that may fail its run (dead, or
// cancel), the children that failing stops: the ending does not know its
// run's fan-out, so it weighs the most a fan-out has (MaxChildren) and
// gets a call of its own. (A done branch of a join on any stops at most
// MaxBranches-1 others: not weighed.)
//
// The bytes an ending writes weigh one per endByteUnit, so that one call
// carries about MaxEnqueueChunkBytes (4 MiB) at most, as an enqueue call
// does. A failed attempt's error is written twice (the last error and the
// attempt history's entry), and a batch's retry writes it so on each task
// of the batch too.
func EndWeight(e rdb.Ending) int {
	n := 1 + len(e.Batch)
	size := len(e.Result) + len(e.Err)
	switch e.Ask {
	case rdb.AskRetry:
		size += len(e.Err) * (1 + 2*len(e.Batch))
	case rdb.AskDead:
		size += len(e.Err)
	}
	for _, m := range e.Batch {
		size += len(m.Result)
	}
	if e.Stage != nil {
		n += len(e.Stage.Children) + len(e.Stage.Fields)/2
		for _, f := range e.Stage.Fields {
			size += len(f)
		}
		for _, c := range e.Stage.Children {
			size += len(c.Payload) + len(c.Meta)
		}
	}
	if e.Kind == rdb.KindChild && (e.Ask == rdb.AskDead || e.Ask == rdb.AskCancel) {
		n += MaxChildren
	}
	n += len(e.Fields) / 2 // a branch's state fields
	for _, f := range e.Fields {
		size += len(f)
	}
	return n + size/endByteUnit
}

// endByteUnit is how many bytes of an ending weigh as much as one taking:
// rdb.MaxTake of them make rdb.MaxEnqueueChunkBytes.
const endByteUnit = rdb.MaxEnqueueChunkBytes / rdb.MaxTake
