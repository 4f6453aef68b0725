package engine

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

// The outcomes a remote session reports, as it builds them from its calls
// (worqr's tests cover a handler's errors through worqr's outcomeOf).
func TestDecide(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	q := &Queue{Kind: rdb.KindTask, Policy: Policy{MaxAttempts: 3,
		Backoff: func(attempt int, _ error) time.Duration { return time.Duration(attempt) * time.Second }}}
	taken := rdb.Taken{PID: "p1", ID: "t1", Attempt: 2}
	for _, c := range []struct {
		name    string
		o       Outcome
		attempt int
		ask     rdb.Ask
		delayMs int64
	}{
		{name: "a failure with a retry-in waits it", o: Outcome{Verdict: Retry, Delay: 3 * time.Second, Err: errors.New("r")}, ask: rdb.AskRetry, delayMs: 3000},
		{name: "a failure without one takes the backoff", o: Outcome{Verdict: Fail, Err: errors.New("r")}, ask: rdb.AskRetry, delayMs: 2000},
		{name: "a failure of the last attempt is dead", o: Outcome{Verdict: Retry, Delay: time.Second, Err: errors.New("r")}, attempt: 3, ask: rdb.AskDead},
		{name: "a bury is dead at once", o: Outcome{Verdict: Bury, Err: errors.New("r")}, ask: rdb.AskDead},
		{name: "later counts no attempt, even the last", o: Outcome{Verdict: Later, Err: errors.New("r")}, attempt: 3, ask: rdb.AskLater, delayMs: 1},
		{name: "a give-back goes back", o: Outcome{Verdict: GiveBack}, ask: rdb.AskBack},
	} {
		t.Run(c.name, func(t *testing.T) {
			tk := taken
			if c.attempt > 0 {
				tk.Attempt = c.attempt
			}
			e := q.Decide("w1", tk, c.o, log)
			if e.Ask != c.ask || e.RetryDelayMs != c.delayMs {
				t.Fatalf("ending %q delay %d, want %q delay %d", e.Ask, e.RetryDelayMs, c.ask, c.delayMs)
			}
			if c.o.Err != nil && e.Err != c.o.Err.Error() {
				t.Fatalf("stored error %q, want %q", e.Err, c.o.Err)
			}
		})
	}
}

func TestNewEndGroup(t *testing.T) {
	t.Run("bounds each call", func(t *testing.T) {
		var sizes []int
		g := NewEndGroup(func(ctx context.Context, es []rdb.Ending) ([]int, error) {
			if _, ok := ctx.Deadline(); !ok {
				t.Error("an end call has no deadline")
			}
			sizes = append(sizes, len(es))
			return make([]int, len(es)), nil
		})
		if g.MaxBatch != 64 || g.MaxWeight != rdb.MaxTake || g.MaxInFlight != 2 {
			t.Fatalf("group bounds %d %d %d", g.MaxBatch, g.MaxWeight, g.MaxInFlight)
		}
		if _, err := g.Call(context.Background(), rdb.Ending{}); err != nil {
			t.Fatal(err)
		}
		if len(sizes) != 1 {
			t.Fatalf("calls %v", sizes)
		}
	})
	t.Run("weighs a fan-out by its children", func(t *testing.T) {
		g := NewEndGroup(func(context.Context, []rdb.Ending) ([]int, error) { return nil, nil })
		fan := rdb.Ending{Kind: rdb.KindStage, Stage: &rdb.StageEnd{Children: make([]rdb.Child, 100)}}
		if g.Weight == nil || g.Weight(fan) != EndWeight(fan) || EndWeight(fan) < 101 {
			t.Fatalf("a fan-out of 100 children weighs %d in the group", EndWeight(fan))
		}
	})
	t.Run("weighs a child's dead end as a whole fan-out", func(t *testing.T) {
		if w := EndWeight(rdb.Ending{Kind: rdb.KindChild, Ask: rdb.AskDead}); w <= MaxChildren {
			t.Fatalf("a child's dead end weighs %d, want more than %d", w, MaxChildren)
		}
	})
}

func TestTimeout(t *testing.T) {
	q := &Queue{Policy: Policy{Timeout: time.Minute}}
	for _, c := range []struct {
		name string
		ms   int64
		want time.Duration
	}{
		{"the queue's when the task has none", 0, time.Minute},
		{"the task's own", 5000, 5 * time.Second},
		{"none when the task asks for none", -1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := q.Timeout(rdb.Taken{TimeoutMs: c.ms}); got != c.want {
				t.Fatalf("Timeout = %s, want %s", got, c.want)
			}
		})
	}
	t.Run("none when neither has one", func(t *testing.T) {
		if got := (&Queue{}).Timeout(rdb.Taken{}); got != 0 {
			t.Fatalf("Timeout = %s, want 0", got)
		}
	})
}

func TestStuckEvery(t *testing.T) {
	q := func(d time.Duration) *Queue { return &Queue{Policy: Policy{StuckAfter: d}} }
	for _, c := range []struct {
		name string
		qs   []*Queue
		want time.Duration
	}{
		{"none when no queue reports", []*Queue{q(0)}, 0},
		{"a tenth of the shortest", []*Queue{q(5 * time.Second), q(2 * time.Second), q(0)}, 200 * time.Millisecond},
		{"at most a second", []*Queue{q(time.Hour)}, time.Second},
		{"at least 10ms", []*Queue{q(time.Millisecond)}, 10 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := StuckEvery(c.qs); got != c.want {
				t.Fatalf("StuckEvery = %s, want %s", got, c.want)
			}
		})
	}
}

// An ending weighs the bytes it writes: a failed attempt's error twice
// (the last error and its attempt history's entry), a batch's retry on
// every task of the batch; a rate-limited end's (no attempt) once.
func TestEndWeightCountsTheErrorAsWritten(t *testing.T) {
	msg := strings.Repeat("e", 10*endByteUnit)
	batch := []rdb.Member{{PID: "2", ID: "b"}, {PID: "3", ID: "c"}}
	for _, c := range []struct {
		name string
		e    rdb.Ending
		want int
	}{
		{"retry: twice", rdb.Retry(rdb.KindTask, "W", "1", "a", 0, msg), 1 + 20},
		{"dead: twice", rdb.Dead(rdb.KindTask, "W", "1", "a", msg), 1 + 20},
		{"later: once", rdb.Later(rdb.KindTask, "W", "1", "a", 0, msg), 1 + 10},
		{"a batch's retry: twice on each of its 3 tasks", rdb.Retry(rdb.KindTask, "W", "1", "a", 0, msg).WithBatch(batch), 3 + 60},
		{"a batch's dead head: twice, on the head only", rdb.Dead(rdb.KindTask, "W", "1", "a", msg).WithBatch(batch), 3 + 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := EndWeight(c.e); got != c.want {
				t.Errorf("EndWeight = %d, want %d", got, c.want)
			}
		})
	}
}

// Resume: a stage's done ending sleeps before its next stage, or runs the
// stage again; the rules are checked with the field named.
func TestResume(t *testing.T) {
	names := FanOutNames{Sleep: "Sleep", Again: "Again", Await: "Await"}
	stage := func(next string) (*Queue, rdb.Ending) {
		q := &Queue{Kind: rdb.KindStage, Stage: &Stage{Name: "s1", Next: next}}
		return q, q.RecordFor(rdb.Taken{ID: "r"}, rdb.Done(rdb.KindStage, "w", "1", "r", nil))
	}
	t.Run("a sleep before the next stage", func(t *testing.T) {
		q, e := stage("s2")
		if err := q.Resume(&e, 90*time.Second, false, "", names); err != nil || e.Stage.SleepMs != 90_000 || e.Stage.Next != "s2" {
			t.Errorf("Resume = %v: next %q, sleep %d ms", err, e.Stage.Next, e.Stage.SleepMs)
		}
	})
	t.Run("again runs the same stage, after the last one too", func(t *testing.T) {
		q, e := stage("")
		if err := q.Resume(&e, time.Second, true, "", names); err != nil || e.Stage.Next != "s1" || e.Stage.SleepMs != 1000 {
			t.Errorf("Resume = %v: next %q, sleep %d ms", err, e.Stage.Next, e.Stage.SleepMs)
		}
	})
	t.Run("an await before the next stage, bounded by the sleep", func(t *testing.T) {
		q, e := stage("s2")
		if err := q.Resume(&e, time.Hour, false, "paid", names); err != nil || e.Stage.Await != "paid" || e.Stage.SleepMs != 3_600_000 {
			t.Errorf("Resume = %v: await %q, sleep %d ms", err, e.Stage.Await, e.Stage.SleepMs)
		}
	})
	t.Run("nothing asked changes nothing", func(t *testing.T) {
		q, e := stage("s2")
		if err := q.Resume(&e, 0, false, "", names); err != nil || e.Stage.Next != "s2" || e.Stage.SleepMs != 0 {
			t.Errorf("Resume = %v: next %q, sleep %d ms", err, e.Stage.Next, e.Stage.SleepMs)
		}
	})
	for _, c := range []struct {
		name     string
		next     string
		children bool
		sleep    time.Duration
		again    bool
		field    string
		await    string
	}{
		{"a negative sleep", "s2", false, -time.Second, false, "Sleep", ""},
		{"a sleep under a millisecond", "s2", false, time.Microsecond, false, "Sleep", ""},
		{"a sleep with children", "s2", true, time.Second, false, "Sleep", ""},
		{"again with children", "s2", true, 0, true, "Again", ""},
		{"a sleep after the last stage without again", "", false, time.Second, false, "Sleep", ""},
		{"an await with children", "s2", true, 0, false, "Await", "paid"},
		{"an await after the last stage without again", "", false, 0, false, "Await", "paid"},
		{"an await name over 200 bytes", "s2", false, 0, false, "Await", strings.Repeat("n", 201)},
	} {
		t.Run("refused: "+c.name, func(t *testing.T) {
			q, e := stage(c.next)
			if c.children {
				e.Stage.Children = []rdb.Child{{ID: "r.k", Queue: "k"}}
			}
			err := q.Resume(&e, c.sleep, c.again, c.await, names)
			var ie *InputError
			if !errors.As(err, &ie) || ie.Field != c.field || e.Stage.SleepMs != 0 || e.Stage.Next != c.next || e.Stage.Await != "" {
				t.Errorf("Resume = %v: want an InputError naming %s, the ending unchanged (next %q, sleep %d)", err, c.field, e.Stage.Next, e.Stage.SleepMs)
			}
		})
	}
}
