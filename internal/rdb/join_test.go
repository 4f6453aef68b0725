package rdb_test

import (
	"reflect"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
)

// joinFanned seeds run r1 taken in s1 and fanned out into the branches of
// its join, k1 and k2 in c1, the stage s1 itself next (StageEnd.Join), and
// k1 taken by A; k2 waits in c1.
func (f *flowEnv) joinFanned(t *testing.T, join string, failFast bool) {
	t.Helper()
	f.start(t, f.s1, "r1")
	tk := f.takeFrom(t, f.s1, "A", 1, true)
	e := f.stage(rdb.Done(rdb.KindStage, "A", tk[0].PID, "r1", nil), "s1", failFast, nil,
		rdb.Child{ID: "k1", Queue: "c1"}, rdb.Child{ID: "k2", Queue: "c1"})
	e.Stage.Join = join
	f.endIn(t, f.s1, 0, e)
	if got := f.takeFrom(t, f.c1, "A", 1, false); len(got) != 1 || got[0].ID != "k1" {
		t.Fatalf("take of the first branch: %+v", got)
	}
}

// endBranch ends the taking pid of branch id of r1 done, with fields.
func (f *flowEnv) endBranch(t *testing.T, pid, id string, fields map[string]string) rdb.Ended {
	t.Helper()
	e := rdb.Done(rdb.KindChild, "A", pid, id, nil)
	e.Run, e.Fields = "r1", rdb.StateFields(fields)
	got, err := f.st.End(f.ctx, f.c1, 0, []rdb.Ending{e})
	if err != nil || len(got) != 1 {
		t.Fatalf("End of branch %s: %+v, %v", id, got, err)
	}
	return got[0]
}

func (f *flowEnv) runFields(t *testing.T, fields ...string) []string {
	t.Helper()
	args := []any{f.s1.Task("r1")}
	for _, s := range fields {
		args = append(args, s)
	}
	vs, err := redis.Strings(f.do(t, "HMGET", args...), nil)
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

// The branches of a join (Stage.Branches) are children whose ends merge
// their fields into the run and whose fan-in marks the run joined at their
// stage ('jn'), which the run's next forward clears; on any, the first
// done branch moves the run on and takes the others out.
func TestEndBranch(t *testing.T) {
	t.Parallel()
	t.Run("all: each end merges its fields; the last forwards the run to its stage, joined there", func(t *testing.T) {
		t.Parallel()
		f := newFlowEnv(t)
		f.joinFanned(t, rdb.JoinAll, true)
		if got := f.endBranch(t, "2", "k1", map[string]string{"x": "1"}); got.Outcome != rdb.OutcomeDone || got.Run != rdb.OutcomeLost {
			t.Errorf("the first branch's end: %+v; want done, the run unchanged", got)
		}
		if got := f.runFields(t, "f:x", "jn", "s"); !reflect.DeepEqual(got, []string{"1", "", "children"}) {
			t.Errorf("after the first branch: f:x, jn, s = %q; want its field merged, the run waiting", got)
		}
		tk := f.takeFrom(t, f.c1, "A", 1, false)
		if got := f.endBranch(t, tk[0].PID, "k2", map[string]string{"y": "2"}); got.Outcome != rdb.OutcomeDone || got.Run != rdb.OutcomeForwarded {
			t.Errorf("the last branch's end: %+v; want done, the run forwarded", got)
		}
		if got := f.runFields(t, "f:x", "f:y", "jn", "st", "s"); !reflect.DeepEqual(got, []string{"1", "2", "s1", "s1", "queued"}) {
			t.Errorf("after the last branch: f:x, f:y, jn, st, s = %q; want both fields, joined at s1, queued there", got)
		}
		if got := f.llen(t, f.s1.Waiting); got != 1 {
			t.Errorf("s1 holds %d runs, want the joined one", got)
		}
		// The join runs, and its forward clears the mark.
		tk = f.takeFrom(t, f.s1, "A", 1, true)
		if tk[0].Run["jn"] != "s1" {
			t.Errorf("the join's take hands out jn = %q, want s1", tk[0].Run["jn"])
		}
		f.endIn(t, f.s1, 0, f.stage(rdb.Done(rdb.KindStage, "A", tk[0].PID, "r1", nil), "s2", true, nil))
		if got := f.runFields(t, "jn", "st"); !reflect.DeepEqual(got, []string{"", "s2"}) {
			t.Errorf("after the join: jn, st = %q; want no mark, at s2", got)
		}
	})
	t.Run("any: the first done branch forwards the run joined and takes the waiting one out", func(t *testing.T) {
		t.Parallel()
		f := newFlowEnv(t)
		f.joinFanned(t, rdb.JoinAny, true)
		got := f.endBranch(t, "2", "k1", map[string]string{"x": "1"})
		want := rdb.Ended{Outcome: rdb.OutcomeDone, Run: rdb.OutcomeForwarded, Stopped: []rdb.QueuedTask{{Queue: "c1", ID: "k2"}}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("the first branch's end: %+v; want %+v", got, want)
		}
		if got := f.runFields(t, "f:x", "jn", "st", "s", "k:k2", "kp"); !reflect.DeepEqual(got, []string{"1", "s1", "s1", "queued", "cancelled", ""}) {
			t.Errorf("f:x, jn, st, s, k:k2, kp = %q; want the field, joined and queued at s1, k2 cancelled", got)
		}
		if n := f.llen(t, f.c1.Waiting); n != 0 {
			t.Errorf("c1 still holds %d branches", n)
		}
	})
	t.Run("any, continue: a failed branch counts as ended, the run waits for the other", func(t *testing.T) {
		t.Parallel()
		f := newFlowEnv(t)
		f.joinFanned(t, rdb.JoinAny, false)
		e := rdb.Dead(rdb.KindChild, "A", "2", "k1", "bad")
		e.Run = "r1"
		if got := f.endIn(t, f.c1, 0, e); got[0].Run != rdb.OutcomeLost {
			t.Errorf("the failed branch's end: %+v; want the run unchanged", got)
		}
		if got := f.runFields(t, "k:k1", "kp", "fs"); !reflect.DeepEqual(got, []string{"failed", "1", "running"}) {
			t.Errorf("k:k1, kp, fs = %q; want k1 failed, one pending, the run running", got)
		}
	})
}
