package worqr

import (
	"errors"
	"slices"

	"github.com/worqr/worqr-go/internal/engine"
	"github.com/worqr/worqr-go/internal/rdb"
)

// initEngine makes q the engine of a queue of kind: its member name, its
// keys, its config and, for a flow's stage or child queue, the flow and
// the (declaring) stage. The Worker's runners and a remote.Server's queues are
// made by it alike.
func initEngine(q *engine.Queue, kind rdb.Kind, member string, qk rdb.QueueKeys, cfg *QueueConfig, flow *Flow, stage int) {
	q.Kind, q.Member, q.QK = kind, member, qk
	q.Policy = engine.Policy{MaxAttempts: cfg.MaxAttempts, MaxCrashes: cfg.MaxCrashes, Backoff: cfg.Backoff, Fallback: DefaultBackoff,
		Timeout: max(cfg.Timeout, 0), StuckAfter: max(cfg.StuckAfter, 0)}
	if kind == rdb.KindStage || kind == rdb.KindChild {
		st := flow.Stages[stage]
		q.Stage = &engine.Stage{
			Name: st.Name, FailFast: !st.ContinueOnChildFailure,
			RunRetentionMs: flow.Retention.Milliseconds(), IndexBy: flow.IndexBy,
			Children: make(map[string]bool, len(st.Children)),
		}
		if stage+1 < len(flow.Stages) {
			q.Stage.Next = flow.Stages[stage+1].Name
		}
		for name := range st.Children {
			q.Stage.Children[name] = true
		}
		for name := range st.Branches {
			q.Stage.Branches = append(q.Stage.Branches, name)
		}
		slices.Sort(q.Stage.Branches)
		q.Stage.JoinAny = st.JoinAny
	}
}

// outcomeOf is what a handler's return says of its attempt, for the
// engine's outcome policy (engine.Queue.Decide):
//   - nil: done, recording result.
//   - ErrGiveBack: back to the front of the queue, no attempt counted.
//   - RateLimited's error: run again after its Delay, no attempt counted.
//   - ErrSkipRetry: the dead set.
//   - RetryAfter's error: retried after its Delay.
//   - any other failure: retried after the queue's Backoff.
//
// A failure of the last attempt goes to the dead set whatever it says.
func outcomeOf(err error, result []byte) engine.Outcome {
	var rl *rateLimitedError
	var ra *retryAfterError
	switch {
	case err == nil:
		return engine.Outcome{Verdict: engine.Done, Result: result}
	case errors.Is(err, ErrGiveBack):
		return engine.Outcome{Verdict: engine.GiveBack}
	case errors.Is(err, ErrSkipRetry):
		return engine.Outcome{Verdict: engine.Bury, Err: err}
	case errors.As(err, &rl):
		return engine.Outcome{Verdict: engine.Later, Delay: rl.Delay, Err: err}
	case errors.As(err, &ra):
		return engine.Outcome{Verdict: engine.Retry, Delay: ra.Delay, Err: err}
	}
	return engine.Outcome{Verdict: engine.Fail, Err: err}
}

// engineChildren are a stage's children as the engine fans them out.
func engineChildren(cs []ChildSpec) []engine.Child {
	out := make([]engine.Child, len(cs))
	for i, c := range cs {
		out[i] = engine.Child{Queue: c.Queue, Payload: c.Payload, Meta: c.Meta}
	}
	return out
}

// asInvalid is err as this package reports bad input: an engine's
// *engine.InputError becomes an *InvalidError.
func asInvalid(err error) error {
	var ie *engine.InputError
	if errors.As(err, &ie) {
		return &InvalidError{Field: ie.Field, Rule: ie.Rule}
	}
	return err
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

// encodeMeta checks metadata given in field and encodes it as it is stored
// ("" for none: nothing is stored).
func encodeMeta(field string, m map[string]string) (string, error) {
	s, err := engine.EncodeMeta(field, m)
	return s, asInvalid(err)
}
