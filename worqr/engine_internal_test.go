package worqr

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/rdb"
)

func TestDecide(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	backoff := func(attempt int, _ error) time.Duration { return time.Duration(attempt) * time.Second }
	plain := &queueEngine{kind: rdb.KindTask, cfg: QueueConfig{MaxAttempts: 3, Backoff: backoff}}
	taken := rdb.Taken{PID: "p1", ID: "t1", Attempt: 1}

	for _, c := range []struct {
		name    string
		err     error
		attempt int // 0: taken's
		maxAtt  int // the task's own MaxAttempts
		ask     rdb.Ask
		delayMs int64
		text    string
	}{
		{name: "nil is done", ask: rdb.AskDone},
		{name: "ErrGiveBack goes back", err: ErrGiveBack, ask: rdb.AskBack},
		{name: "a wrapped ErrGiveBack goes back", err: errors.Join(errors.New("x"), ErrGiveBack), ask: rdb.AskBack},
		{name: "a failure retries after the backoff", err: errors.New("boom"), ask: rdb.AskRetry, delayMs: 1000, text: "boom"},
		{name: "the last attempt is dead", err: errors.New("boom"), attempt: 3, ask: rdb.AskDead, text: "boom"},
		{name: "the task's MaxAttempts wins over the queue's", err: errors.New("boom"), attempt: 1, maxAtt: 1, ask: rdb.AskDead, text: "boom"},
		{name: "SkipRetry is dead at once", err: SkipRetry(errors.New("bad")), ask: rdb.AskDead, text: "bad"},
		{name: "RetryAfter sets the wait", err: RetryAfter(7*time.Second, errors.New("busy")), ask: rdb.AskRetry, delayMs: 7000, text: "worqr: retry after 7s: busy"},
		{name: "RetryAfter on the last attempt is dead", err: RetryAfter(time.Second, nil), attempt: 3, ask: rdb.AskDead, text: "worqr: retry after 1s"},
		{name: "RateLimited counts no attempt, even the last", err: RateLimited(0, nil), attempt: 3, ask: rdb.AskLater, delayMs: 1, text: "worqr: rate limited, retry in 0s"},
		{name: "RateLimited with SkipRetry is dead", err: SkipRetry(RateLimited(time.Second, nil)), ask: rdb.AskDead, text: "worqr: rate limited, retry in 1s"},
		{name: "a remote's failure with a retry-in", err: &remoteFailure{reason: "r", retryIn: 3 * time.Second}, ask: rdb.AskRetry, delayMs: 3000, text: "r"},
		{name: "a remote's failure without one takes the backoff", err: &remoteFailure{reason: "r"}, attempt: 2, ask: rdb.AskRetry, delayMs: 2000, text: "r"},
		{name: "a remote's bury", err: SkipRetry(&remoteFailure{reason: "gone"}), ask: rdb.AskDead, text: "gone"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tk := taken
			if c.attempt > 0 {
				tk.Attempt = c.attempt
			}
			tk.MaxAttempts = c.maxAtt
			e := plain.decide("w1", tk, c.err, []byte("res"), log)
			if e.Ask != c.ask || e.RetryDelayMs != c.delayMs || e.Err != c.text {
				t.Fatalf("ending %q delay %d err %q, want %q delay %d err %q", e.Ask, e.RetryDelayMs, e.Err, c.ask, c.delayMs, c.text)
			}
			if e.Worker != "w1" || e.PID != "p1" || e.ID != "t1" || e.Kind != rdb.KindTask {
				t.Fatalf("ending names %s %s %s %s, want w1 p1 t1 task", e.Worker, e.PID, e.ID, e.Kind)
			}
			if c.ask == rdb.AskDone && string(e.Result) != "res" {
				t.Fatalf("result %q, want res", e.Result)
			}
		})
	}

	t.Run("a Backoff that panics takes the default backoff", func(t *testing.T) {
		q := &queueEngine{kind: rdb.KindTask, cfg: QueueConfig{MaxAttempts: 3,
			Backoff: func(int, error) time.Duration { panic("no") }}}
		e := q.decide("w1", taken, errors.New("boom"), nil, log)
		if e.Ask != rdb.AskRetry || e.RetryDelayMs <= 0 {
			t.Fatalf("ending %q delay %d, want a retry after the default backoff", e.Ask, e.RetryDelayMs)
		}
	})

	t.Run("an error's text is cut at 8 KiB", func(t *testing.T) {
		e := plain.decide("w1", taken, errors.New(strings.Repeat("é", maxErrorLen)), nil, log)
		if len(e.Err) > maxErrorLen || !strings.HasPrefix(strings.Repeat("é", maxErrorLen), e.Err) {
			t.Fatalf("stored %d bytes, want at most %d, cut at a character", len(e.Err), maxErrorLen)
		}
	})

	flow := &Flow{Name: "f", Retention: time.Hour, IndexBy: []string{"user"}, Stages: []Stage{
		{Name: "a", ContinueOnChildFailure: true, Children: map[string]QueueConfig{"c": {}}},
		{Name: "b"},
	}}
	t.Run("a stage's ending says where the run goes", func(t *testing.T) {
		q := &queueEngine{kind: rdb.KindStage, flow: flow, stage: 0, cfg: QueueConfig{MaxAttempts: 1}}
		for _, err := range []error{nil, errors.New("boom"), ErrGiveBack} {
			e := q.decide("w1", taken, err, nil, log)
			if e.Kind != rdb.KindStage || e.Stage == nil || e.Stage.Next != "b" || e.Stage.FailFast ||
				e.Stage.RunRetentionMs != time.Hour.Milliseconds() || len(e.Stage.IndexBy) != 1 {
				t.Fatalf("ending of %v: %+v %+v", err, e, e.Stage)
			}
		}
		last := &queueEngine{kind: rdb.KindStage, flow: flow, stage: 1}
		if e := last.decide("w1", taken, nil, nil, log); e.Stage.Next != "" || !e.Stage.FailFast {
			t.Fatalf("the last stage's ending: %+v", e.Stage)
		}
	})
	t.Run("a child's ending names its run", func(t *testing.T) {
		q := &queueEngine{kind: rdb.KindChild, flow: flow, stage: 0, cfg: QueueConfig{MaxAttempts: 1}}
		tk := taken
		tk.Parent = "run1"
		if e := q.decide("w1", tk, errors.New("x"), nil, log); e.Kind != rdb.KindChild || e.Run != "run1" || e.Ask != rdb.AskDead {
			t.Fatalf("ending %+v", e)
		}
	})
	t.Run("a taking not to run ends as its queue's kind", func(t *testing.T) {
		q := &queueEngine{kind: rdb.KindStage, flow: flow, stage: 0}
		// Cancelled where it waited, with no run state kept (a remote
		// session drops it): still a stage's end, with the run's retention.
		e := q.notRun("w1", rdb.Taken{PID: "p1", ID: "t1", Cancelled: true})
		if e.Kind != rdb.KindStage || e.Ask != rdb.AskCancel || e.Stage == nil || e.Stage.RunRetentionMs != time.Hour.Milliseconds() {
			t.Fatalf("ending %+v %+v", e, e.Stage)
		}
		if e := q.notRun("w1", rdb.Taken{PID: "p1", ID: "t1", Expired: true}); e.Ask != rdb.AskExpire {
			t.Fatalf("expired: ending %+v", e)
		}
	})
}

func TestFanOut(t *testing.T) {
	flow := &Flow{Name: "f", Stages: []Stage{{Name: "a", Children: map[string]QueueConfig{"c": {}}}}}
	q := &queueEngine{kind: rdb.KindStage, flow: flow}
	names := fanOutNames{fields: "fields", children: "children", lower: true}
	done := func() rdb.Ending { return q.decide("w1", rdb.Taken{PID: "p", ID: "run"}, nil, nil, slog.Default()) }

	t.Run("fields and children are recorded", func(t *testing.T) {
		e := done()
		err := q.fanOut(&e, map[string]string{"k": "v"}, []ChildSpec{{Queue: "c", Payload: []byte("x")}}, 1<<20, names)
		if err != nil {
			t.Fatal(err)
		}
		if len(e.Stage.Fields) != 2 || len(e.Stage.Children) != 1 || !strings.HasPrefix(e.Stage.Children[0].ID, "run.") {
			t.Fatalf("stage end %+v", e.Stage)
		}
	})
	for _, c := range []struct {
		name     string
		children []ChildSpec
		fields   map[string]string
		field    string
	}{
		{name: "an undeclared child queue", children: []ChildSpec{{Queue: "nope"}}, field: "children[0].queue"},
		{name: "a child over MaxPayloadBytes", children: []ChildSpec{{Queue: "c", Payload: make([]byte, 11)}}, field: "children[0].payload"},
		{name: "too many children", children: make([]ChildSpec, MaxChildren+1), field: "children"},
		{name: "an empty field name", fields: map[string]string{"": "v"}, field: "fields"},
	} {
		t.Run("refuses "+c.name, func(t *testing.T) {
			e := done()
			err := q.fanOut(&e, c.fields, c.children, 10, names)
			var ie *InvalidError
			if !errors.As(err, &ie) || ie.Field != c.field {
				t.Fatalf("err %v, want an InvalidError of %s", err, c.field)
			}
			if len(e.Stage.Children) != 0 || len(e.Stage.Fields) != 0 {
				t.Fatalf("a refused fan-out recorded %+v", e.Stage)
			}
		})
	}
	t.Run("a handler's names are its StageResult's", func(t *testing.T) {
		e := done()
		err := q.fanOut(&e, nil, []ChildSpec{{Queue: "nope"}}, 10, fanOutNames{fields: "StageResult.Fields", children: "StageResult.Children"})
		var ie *InvalidError
		if !errors.As(err, &ie) || ie.Field != "StageResult.Children[0].Queue" {
			t.Fatalf("err %v", err)
		}
	})
}

func TestEndGroupBoundsEachCall(t *testing.T) {
	var sizes []int
	g := newEndGroup(func(ctx context.Context, es []rdb.Ending) ([]int, error) {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("an end call has no deadline")
		}
		sizes = append(sizes, len(es))
		return make([]int, len(es)), nil
	})
	if g.MaxBatch != 64 || g.MaxWeight != rdb.MaxTake || g.MaxInFlight != 2 {
		t.Fatalf("group bounds %d %d %d", g.MaxBatch, g.MaxWeight, g.MaxInFlight)
	}
	// A fan-out weighs its children, so that a call of several stays
	// within MaxTake of weight.
	fan := rdb.Ending{Kind: rdb.KindStage, Stage: &rdb.StageEnd{Children: make([]rdb.Child, 100)}}
	if g.Weight == nil || g.Weight(fan) != endWeight(fan) || endWeight(fan) < 101 {
		t.Fatalf("a fan-out of 100 children weighs %d in the group", endWeight(fan))
	}
	if _, err := g.Call(context.Background(), rdb.Ending{}); err != nil {
		t.Fatal(err)
	}
	if len(sizes) != 1 {
		t.Fatalf("calls %v", sizes)
	}
}
