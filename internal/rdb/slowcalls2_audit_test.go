//go:build audit

package rdb_test

// More of the measurements of docs/BENCHMARKS.md, "Calls that grew with
// the data" (flows): see slowcalls_audit_test.go.

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
)

// fanOutRun starts run id in s1, takes it (as w) and fans it out to n
// children in c1; it returns the children's ids.
func (f *flowEnv) fanOutRun(t *testing.T, id, w string, n int, failFast bool) []string {
	t.Helper()
	f.start(t, f.s1, id)
	tk := f.takeFrom(t, f.s1, w, 1, true)
	var cs []rdb.Child
	var ids []string
	for i := 0; i < n; i++ {
		c := id + ".c" + strconv.Itoa(i)
		cs = append(cs, rdb.Child{ID: c, Queue: "c1", Payload: []byte("x")})
		ids = append(ids, c)
	}
	f.endIn(t, f.s1, 0, f.stage(rdb.Done(rdb.KindStage, w, tk[0].PID, id, nil), "s2", failFast, nil, cs...))
	return ids
}

// Item 1: one end call failing one child in each of k runs (fail-fast),
// each run fanned out to 1,000 children.
func TestAudit2FailFastMany(t *testing.T) {
	for _, k := range []int{1, 10, 100} {
		f := newFlowEnv(t)
		var es []rdb.Ending
		for r := 0; r < k; r++ {
			id := "r" + strconv.Itoa(r)
			f.fanOutRun(t, id, "A", 1000, true)
		}
		// Each run's first child is taken (the c1 list holds them run
		// after run: take them by moving the first child of each run to
		// the front).
		for r := k - 1; r >= 0; r-- {
			c := "r" + strconv.Itoa(r) + ".c0"
			f.do(t, "LREM", f.c1.Waiting, 1, c)
			f.do(t, "LPUSH", f.c1.Waiting, c)
		}
		tk := f.takeFrom(t, f.c1, "B", k, false)
		for _, x := range tk {
			e := rdb.Dead(rdb.KindChild, "B", x.PID, x.ID, "boom")
			e.Run = x.Parent
			es = append(es, e)
		}
		f.measure(t, "end call failing children of k runs (fail-fast)", fmt.Sprintf("k=%d runs x 1,000 children", k), func() {
			f.endIn(t, f.c1, 0, es...)
		})
	}
}

// Item 1b: fail-fast of a run whose 10th fan-out is pending (9 earlier
// fan-outs of 1,000 children recorded in its hash).
func TestAudit2FailFastAfterFanOuts(t *testing.T) {
	f := newFlowEnv(t)
	var args []any
	args = append(args, f.s1.Task("r1"))
	f.start(t, f.s1, "r1")
	for i := 0; i < 9000; i++ {
		c := "r1.old" + strconv.Itoa(i)
		args = append(args, "k:"+c, "done", "kq:"+c, "c2", "kr:"+c, "result-"+c)
	}
	f.do(t, "HSET", args...)
	tk := f.takeFrom(t, f.s1, "A", 1, true)
	var cs []rdb.Child
	for i := 0; i < 1000; i++ {
		cs = append(cs, rdb.Child{ID: "r1.c" + strconv.Itoa(i), Queue: "c1", Payload: []byte("x")})
	}
	f.endIn(t, f.s1, 0, f.stage(rdb.Done(rdb.KindStage, "A", tk[0].PID, "r1", nil), "s2", true, nil, cs...))
	c := f.takeFrom(t, f.c1, "B", 1, false)
	e := rdb.Dead(rdb.KindChild, "B", c[0].PID, c[0].ID, "boom")
	e.Run = "r1"
	f.measure(t, "end (child dead, fail-fast), 9 earlier fan-outs", "1,000 pending + 9,000 earlier", func() {
		f.endIn(t, f.c1, 0, e)
	})
}

// bigRun writes k x 1,000 children's fields into run id's hash.
func (f *flowEnv) bigRun(t *testing.T, id string, k int) {
	var args []any
	args = append(args, f.s1.Task(id))
	for i := 0; i < 1000*k; i++ {
		c := id + ".c" + strconv.Itoa(i)
		args = append(args, "k:"+c, "done", "kq:"+c, "c1", "kr:"+c, "result-"+c)
	}
	f.do(t, "HSET", args...)
}

// Item 2: the take of a stage whose run fanned out 10 x 1,000 children.
func TestAudit2StageTake(t *testing.T) {
	f := newFlowEnv(t)
	f.start(t, f.s1, "r1")
	f.bigRun(t, "r1", 10)
	var got []rdb.Taken
	f.measure(t, "take of a stage + its run read", "run of 10 x 1,000 children", func() {
		got = f.takeFrom(t, f.s1, "A", 1, true)
		got = readRuns(t, f, got)
	})
	if len(got) != 1 || len(got[0].Run) < 30000 {
		t.Fatalf("run of %d fields", len(got[0].Run))
	}
	f.measure(t, "Store.Run of that run", "run of 10 x 1,000 children", func() {
		r, err := f.st.Run(f.ctx, f.s1, "r1")
		if err != nil || len(r.Children) != 10000 {
			t.Fatal(err)
		}
	})
}

// Item 2b: a take of 100 stage runs of 1 x 1,000 children each.
func TestAudit2StageTakeMany(t *testing.T) {
	f := newFlowEnv(t)
	for r := 0; r < 100; r++ {
		id := "r" + strconv.Itoa(r)
		f.start(t, f.s1, id)
		f.bigRun(t, id, 1)
	}
	var got []rdb.Taken
	f.measure(t, "take of 100 stage runs + their reads", "100 runs of 1,000 children", func() {
		got = f.takeFrom(t, f.s1, "A", 100, true)
		got = readRuns(t, f, got)
	})
	for _, g := range got {
		if len(g.Run) < 3000 {
			t.Fatalf("run of %d fields", len(g.Run))
		}
	}
}

// Item 3: FindRuns of a value with n runs.
func TestAudit2FindRuns(t *testing.T) {
	for _, n := range []int{100000, 1000000} {
		f := newFlowEnv(t)
		f.fill(t, n, func(i int) []any { return []any{"ZADD", f.ix, "inf", "run" + strconv.Itoa(i)} })
		f.measure(t, "FindRuns (index read)", fmt.Sprintf("%d runs of one value", n), func() {
			ids, err := f.st.FindRuns(f.ctx, f.s1, "user", "u1")
			if err != nil || len(ids) != n {
				t.Fatal(len(ids), err)
			}
		})
		f.do(t, "DEL", f.ix)
	}
}

// ---- audit2_before_test.go (readRuns; on the item2 branch it reads
// Taken.RunUnread runs with Store.ReadRun, as the worker does) ----
func readRuns(t *testing.T, f *flowEnv, got []rdb.Taken) []rdb.Taken {
	for i, g := range got {
		if g.RunUnread > 0 {
			m, err := f.st.ReadRun(f.ctx, f.s1, g.ID)
			if err != nil {
				t.Fatal(err)
			}
			got[i].Run = m
		}
	}
	return got
}
