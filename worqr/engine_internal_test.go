package worqr

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/worqr/worqr-go/defaults"

	"github.com/worqr/worqr-go/internal/engine"
	"github.com/worqr/worqr-go/internal/rdb"
)

func TestDecide(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	backoff := func(attempt int, _ error) time.Duration { return time.Duration(attempt) * time.Second }
	plain := testEngine(rdb.KindTask, QueueConfig{MaxAttempts: 3, Backoff: backoff}, nil, 0)
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
	} {
		t.Run(c.name, func(t *testing.T) {
			tk := taken
			if c.attempt > 0 {
				tk.Attempt = c.attempt
			}
			tk.MaxAttempts = c.maxAtt
			e := plain.Decide("w1", tk, outcomeOf(c.err, []byte("res")), log)
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
		q := testEngine(rdb.KindTask, QueueConfig{MaxAttempts: 3,
			Backoff: func(int, error) time.Duration { panic("no") }}, nil, 0)
		e := q.Decide("w1", taken, outcomeOf(errors.New("boom"), nil), log)
		if e.Ask != rdb.AskRetry || e.RetryDelayMs <= 0 {
			t.Fatalf("ending %q delay %d, want a retry after the default backoff", e.Ask, e.RetryDelayMs)
		}
	})

	t.Run("an error's text is cut at 8 KiB", func(t *testing.T) {
		e := plain.Decide("w1", taken, outcomeOf(errors.New(strings.Repeat("é", engine.MaxErrorLen)), nil), log)
		if len(e.Err) > engine.MaxErrorLen || !strings.HasPrefix(strings.Repeat("é", engine.MaxErrorLen), e.Err) {
			t.Fatalf("stored %d bytes, want at most %d, cut at a character", len(e.Err), engine.MaxErrorLen)
		}
	})

	flow := &Flow{Name: "f", Retention: time.Hour, IndexBy: []string{"user"}, Stages: []Stage{
		{Name: "a", ContinueOnChildFailure: true, Children: map[string]QueueConfig{"c": {}}},
		{Name: "b"},
	}}
	t.Run("a stage's ending says where the run goes", func(t *testing.T) {
		q := testEngine(rdb.KindStage, QueueConfig{MaxAttempts: 1}, flow, 0)
		for _, err := range []error{nil, errors.New("boom"), ErrGiveBack} {
			e := q.Decide("w1", taken, outcomeOf(err, nil), log)
			if e.Kind != rdb.KindStage || e.Stage == nil || e.Stage.Next != "b" || e.Stage.FailFast ||
				e.Stage.RunRetentionMs != time.Hour.Milliseconds() || len(e.Stage.IndexBy) != 1 {
				t.Fatalf("ending of %v: %+v %+v", err, e, e.Stage)
			}
		}
		last := testEngine(rdb.KindStage, QueueConfig{}, flow, 1)
		if e := last.Decide("w1", taken, outcomeOf(nil, nil), log); e.Stage.Next != "" || !e.Stage.FailFast {
			t.Fatalf("the last stage's ending: %+v", e.Stage)
		}
	})
	t.Run("a child's ending names its run", func(t *testing.T) {
		q := testEngine(rdb.KindChild, QueueConfig{MaxAttempts: 1}, flow, 0)
		tk := taken
		tk.Parent = "run1"
		if e := q.Decide("w1", tk, outcomeOf(errors.New("x"), nil), log); e.Kind != rdb.KindChild || e.Run != "run1" || e.Ask != rdb.AskDead {
			t.Fatalf("ending %+v", e)
		}
	})
	t.Run("a taking not to run ends as its queue's kind", func(t *testing.T) {
		q := testEngine(rdb.KindStage, QueueConfig{}, flow, 0)
		// Cancelled where it waited, with no run state kept (a remote
		// session drops it): still a stage's end, with the run's retention.
		e := q.NotRun("w1", rdb.Taken{PID: "p1", ID: "t1", Cancelled: true})
		if e.Kind != rdb.KindStage || e.Ask != rdb.AskCancel || e.Stage == nil || e.Stage.RunRetentionMs != time.Hour.Milliseconds() {
			t.Fatalf("ending %+v %+v", e, e.Stage)
		}
		if e := q.NotRun("w1", rdb.Taken{PID: "p1", ID: "t1", Expired: true}); e.Ask != rdb.AskExpire {
			t.Fatalf("expired: ending %+v", e)
		}
	})
}

func TestFanOut(t *testing.T) {
	flow := &Flow{Name: "f", Stages: []Stage{{Name: "a", Children: map[string]QueueConfig{"c": {}}}}}
	q := testEngine(rdb.KindStage, QueueConfig{}, flow, 0)
	names := engine.FanOutNames{Fields: "fields", Children: "children", Lower: true}
	done := func() rdb.Ending {
		return q.Decide("w1", rdb.Taken{PID: "p", ID: "run"}, outcomeOf(nil, nil), slog.Default())
	}

	t.Run("fields and children are recorded", func(t *testing.T) {
		e := done()
		err := asInvalid(q.FanOut(&e, map[string]string{"k": "v"}, engineChildren([]ChildSpec{{Queue: "c", Payload: []byte("x")}}), 1<<20, names))
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
		{name: "too many children", children: make([]ChildSpec, defaults.MaxChildren+1), field: "children"},
		{name: "an empty field name", fields: map[string]string{"": "v"}, field: "fields"},
	} {
		t.Run("refuses "+c.name, func(t *testing.T) {
			e := done()
			err := asInvalid(q.FanOut(&e, c.fields, engineChildren(c.children), 10, names))
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
		err := asInvalid(q.FanOut(&e, nil, engineChildren([]ChildSpec{{Queue: "nope"}}), 10, engine.FanOutNames{Fields: "StageResult.Fields", Children: "StageResult.Children"}))
		var ie *InvalidError
		if !errors.As(err, &ie) || ie.Field != "StageResult.Children[0].Queue" {
			t.Fatalf("err %v", err)
		}
	})
}

// testEngine is the engine initEngine makes of a queue of kind with cfg
// (filled as a Worker fills it) in flow's stage.
func testEngine(kind rdb.Kind, cfg QueueConfig, flow *Flow, stage int) *engine.Queue {
	q := &engine.Queue{}
	initEngine(q, kind, "q", rdb.QueueKeys{}, &cfg, flow, stage)
	return q
}
