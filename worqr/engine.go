package worqr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"github.com/rs/xid"
	"github.com/worqr/worqr-go/internal/group"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/registry"
)

// queueEngine is what both drivers of a taking's life share for one queue:
// a Worker, which runs handlers in this process, and a Remote, which hands
// takings to workers elsewhere. It holds the queue's keys, its config, its
// place in a flow and its flags, and decides how a taking is taken and
// ended: the take's arguments, the outcome policy, a stage's fan-out and
// the end group's shape are written here once.
type queueEngine struct {
	kind   rdb.Kind
	flow   *Flow // stage and child queues
	stage  int   // the stage (declaring the child queue)
	member string
	qk     rdb.QueueKeys
	cfg    QueueConfig
	queueFlags
}

// nextStage is the stage after q's (its declaring stage's, for a child
// queue), or "" after the last.
func (q *queueEngine) nextStage() string {
	if q.stage+1 < len(q.flow.Stages) {
		return q.flow.Stages[q.stage+1].Name
	}
	return ""
}

// takeArgs are the arguments every take of up to n tasks of q under
// worker (whose keepalive holds until until) carries: the queue's kind and
// flags. A queue with no priority levels and no limits takes the plain
// way. A driver adds what only it does (key batches, hand-off parks).
func (q *queueEngine) takeArgs(worker string, until time.Time, n int) rdb.TakeArgs {
	return rdb.TakeArgs{Worker: worker, Until: until.UnixMilli(), Max: n,
		MaxCrashes: q.cfg.MaxCrashes, Stage: q.kind == rdb.KindStage, Child: q.kind == rdb.KindChild,
		Levels: int(q.levels.Load()), Limited: q.limited.Load()}
}

// decide is the outcome policy: how an attempt of taking taken, run under
// worker, ends in Redis, from what the attempt returned. It is the only
// place that decides.
//   - nil: done, recording result (a stage forwards its run, or fans out
//     once the driver adds its children: see fanOut).
//   - ErrGiveBack: back to the front of the queue, no attempt counted.
//   - a RateLimitedError: run again after its Delay (at least 1 ms), no
//     attempt counted.
//   - ErrSkipRetry, or any failure of the last attempt (the task's
//     MaxAttempts, else the queue's): the dead set.
//   - a RetryAfterError (or a remote's explicit retry-in): retried after
//     its Delay.
//   - any other failure: retried after the queue's Backoff.
//
// A failure's text is stored cut to maxErrorLen bytes.
func (q *queueEngine) decide(worker string, taken rdb.Taken, err error, result []byte, log *slog.Logger) rdb.Ending {
	var e rdb.Ending
	switch {
	case err == nil:
		e = rdb.Done(q.kind, worker, taken.PID, taken.ID, result)
	case errors.Is(err, ErrGiveBack):
		e = rdb.GiveBack(q.kind, worker, taken.PID, taken.ID)
	default:
		msg := clip(err.Error())
		maxAttempts := q.cfg.MaxAttempts
		if taken.MaxAttempts > 0 {
			maxAttempts = taken.MaxAttempts
		}
		var rl *RateLimitedError
		switch {
		case errors.As(err, &rl) && !errors.Is(err, ErrSkipRetry):
			e = rdb.Later(q.kind, worker, taken.PID, taken.ID, max(rl.Delay.Milliseconds(), 1), msg)
		case errors.Is(err, ErrSkipRetry) || taken.Attempt >= maxAttempts:
			e = rdb.Dead(q.kind, worker, taken.PID, taken.ID, msg)
		default:
			d, ok := retryIn(err)
			if !ok {
				d = retryWait(&q.cfg, taken.Attempt, err, log)
			}
			e = rdb.Retry(q.kind, worker, taken.PID, taken.ID, max(d.Milliseconds(), 0), msg)
		}
	}
	return q.recordFor(taken, e)
}

// recordFor adds to e what q's kind records with an ending: where a stage
// goes next and its run's settings, a child's run.
func (q *queueEngine) recordFor(taken rdb.Taken, e rdb.Ending) rdb.Ending {
	switch q.kind {
	case rdb.KindStage:
		e.Stage = &rdb.StageEnd{
			Next: q.nextStage(), FailFast: !q.flow.Stages[q.stage].ContinueOnChildFailure,
			RunRetentionMs: q.flow.Retention.Milliseconds(), IndexBy: q.flow.IndexBy,
		}
	case rdb.KindChild:
		e.Run = taken.Parent
	}
	return e
}

// notRun is the ending of a taking the take found not to run: past its
// deadline on Redis's clock, or cancelled where it waited.
func (q *queueEngine) notRun(worker string, taken rdb.Taken) rdb.Ending {
	e := rdb.NotRun(worker, taken)
	if taken.Cancelled {
		// A run or a child marked where it waited ends as what its queue
		// holds, whatever the taking's kept data says.
		e.Kind = q.kind
	}
	return q.recordFor(taken, e)
}

// retryIn is the wait a failure asks for before the next attempt: a
// RetryAfterError's Delay, or a remote's explicit retry-in.
func retryIn(err error) (time.Duration, bool) {
	var ra *RetryAfterError
	if errors.As(err, &ra) {
		return ra.Delay, true
	}
	var rf *remoteFailure
	if errors.As(err, &rf) && rf.retryIn > 0 {
		return rf.retryIn, true
	}
	return 0, false
}

// remoteFailure is a failed attempt a remote worker reported: its reason,
// stored as given, and the wait it asked for before the next attempt (0:
// the queue's backoff).
type remoteFailure struct {
	reason  string
	retryIn time.Duration
}

func (e *remoteFailure) Error() string { return e.reason }

// retryWait is cfg.Backoff's wait after failed attempt number attempt. A
// Backoff that panics is the user's code failing on the way of a failed
// attempt, as a handler's panic is: the attempt is retried after
// DefaultBackoff and the panic logged, since it runs outside any
// handler's recover.
func retryWait(cfg *QueueConfig, attempt int, err error, log *slog.Logger) (d time.Duration) {
	defer func() {
		if v := recover(); v != nil {
			log.Error("worker: QueueConfig.Backoff panicked; the default backoff applies", "attempt", attempt,
				"err", &PanicError{Value: v, Stack: debug.Stack()})
			d = DefaultBackoff(attempt, err)
		}
	}()
	return cfg.Backoff(attempt, err)
}

// fanOutNames name a stage end's inputs in the errors of fanOut, as its
// driver's caller knows them: a handler's StageResult, a remote's call.
type fanOutNames struct {
	fields   string // the state fields
	children string // the children list
	lower    bool   // a child's fields in lower case (queue, payload, meta)
}

// fanOut adds to a stage's done ending e the state fields and the
// children it fans out, after checking them against the flow and the
// bounds: at most MaxStateFields fields and MaxChildren children, each
// child in a queue the stage declared and at most maxPayload bytes, and
// fields and children together at most stageBudget(maxPayload) bytes, so
// that one end call stays within what an enqueue call may carry. Nothing is
// added when a check fails.
func (q *queueEngine) fanOut(e *rdb.Ending, fields map[string]string, children []ChildSpec, maxPayload int, n fanOutNames) error {
	st := q.flow.Stages[q.stage]
	budget := stageBudget(maxPayload)
	size, err := checkStateFields(n.fields, fields, maxPayload, budget)
	if err != nil {
		return err
	}
	if len(children) > MaxChildren {
		return invalid(n.children, "has %d children (at most %d per stage)", len(children), MaxChildren)
	}
	child := func(i int, name string) string {
		if n.lower {
			name = strings.ToLower(name)
		}
		return fmt.Sprintf("%s[%d].%s", n.children, i, name)
	}
	out := make([]rdb.Child, 0, len(children))
	for i, c := range children {
		if _, ok := st.Children[c.Queue]; !ok {
			return invalid(child(i, "Queue"), "%q is not a child queue declared by stage %s", c.Queue, st.Name)
		}
		if len(c.Payload) > maxPayload {
			return invalid(child(i, "Payload"), "is %d bytes, over MaxPayloadBytes (%d)", len(c.Payload), maxPayload)
		}
		meta, err := encodeMeta(child(i, "Meta"), c.Meta)
		if err != nil {
			return err
		}
		if size += len(c.Payload) + len(meta); size > budget {
			return invalid(n.children, "carry %d bytes or more with the fields (at most %d per stage end: MaxStageBytes, or MaxPayloadBytes when larger)", size, budget)
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

// appliedEarlier tells, for an end that Redis answered "lost" after an
// earlier attempt of it (tried) whose reply was lost, whether that attempt
// was applied. While session's keepalive exists in Redis, and lost says
// the session is not lost here, nobody else moves its takings (the reaper
// requeues dead workers only), so a taking that vanished from a live
// session was ended by it. out is then what the applied end recorded: what
// it asked, unless the task reads cancelled (a cancel asked while it ran
// wins over any end); a task no retention keeps answers what it asked.
func (q *queueEngine) appliedEarlier(ctx context.Context, st *rdb.Store, reg *registry.Registry, session string, lost func() bool, tried rdb.Ending) (applied bool, out rdb.Outcome, err error) {
	actx, cancel := context.WithTimeout(ctx, callTimeout)
	alive, err := reg.Alive(actx, []string{session})
	cancel()
	if err != nil || !alive[0] || lost() {
		return false, out, err
	}
	rctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if rec, err := st.Task(rctx, q.qk, tried.ID); err == nil && rec != nil && rec.State == rdb.StateCancelled {
		return true, rdb.OutcomeCancelled, nil
	}
	return true, asked(tried), nil
}

// asked is the outcome an ending asks for (a cancel asked meanwhile would
// have made it OutcomeCancelled).
func asked(e rdb.Ending) rdb.Outcome {
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

// memberAsked is the outcome an ending asks for the tasks of its batch
// behind the head (see rdb.Ending.WithBatch).
func memberAsked(e rdb.Ending) rdb.Outcome {
	switch e.Ask {
	case rdb.AskDone:
		return rdb.OutcomeDone
	case rdb.AskRetry, rdb.AskLater:
		return rdb.OutcomeRetry
	}
	return rdb.OutcomeRequeued
}

var eventOf = map[rdb.Outcome]EventKind{
	rdb.OutcomeDone:      EventDone,
	rdb.OutcomeCancelled: EventCancelled,
	rdb.OutcomeRequeued:  EventGivenBack,
	rdb.OutcomeRetry:     EventRetry,
	rdb.OutcomeDead:      EventDead,
	rdb.OutcomeForwarded: EventForwarded,
	rdb.OutcomeFannedOut: EventFannedOut,
	rdb.OutcomeExpired:   EventExpired,
}

// readFlags reads the flags of qs from their config hashes (one round trip
// per tag) and applies each queue's as read: on a Redis Cluster with a
// master down for good, the queues of the others still see their pauses,
// levels and limits. woke is called for each queue resumed, or whose rate
// wait was dropped (its limits may have changed); errs[i] is the read
// error of qs[i], whose flags stay as they were.
func readFlags(ctx context.Context, st *rdb.Store, qs []*queueEngine, woke func(i int, resumed, unheld bool)) []error {
	qks := make([]rdb.QueueKeys, len(qs))
	for i, q := range qs {
		qks[i] = q.qk
	}
	flags, errs := st.FlagsEach(ctx, qks)
	for i, q := range qs {
		if errs[i] != nil {
			continue
		}
		if resumed, unheld := q.apply(flags[i]); resumed || unheld {
			woke(i, resumed, unheld)
		}
	}
	return errs
}

// newEndGroup is a queue's one way to end takings: ends that arrive
// together share one script call (group commit), whatever their kind; each
// is checked and answered on its own. A call carries at most 64 ends and
// rdb.MaxTake of weight (endWeight), and at most 2 calls are in flight.
func newEndGroup[R any](run func(ctx context.Context, es []rdb.Ending) ([]R, error)) *group.Group[rdb.Ending, R] {
	return &group.Group[rdb.Ending, R]{
		MaxBatch: 64, MaxInFlight: 2,
		Weight: endWeight, MaxWeight: rdb.MaxTake,
		Run: func(ctx context.Context, es []rdb.Ending) ([]R, error) {
			ctx, cancel := context.WithTimeout(ctx, callTimeout)
			defer cancel()
			return run(ctx, es)
		},
	}
}

// callTimeout bounds one Redis call the runtime makes on its own behalf
// (an end, a take, a release, a read of flags): a reply lost on a silent
// connection is noticed within it, and the call tried again.
const callTimeout = 5 * time.Second
