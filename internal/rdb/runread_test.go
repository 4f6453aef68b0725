package rdb_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
)

// A take of a stage queue hands out at most 4,000 fields of runs in all: a
// run past that (it keeps the records of every child it fanned out) comes
// as its number of fields, and ReadRun reads it in HSCAN steps of 1,000.
// The HGETALL of a run that fanned out 10 x 1,000 children held Redis for
// 19 ms inside the take; a take of 100 runs of 1,000 children, 230 ms.
func TestStageTakeBoundsTheRunsItHandsOut(t *testing.T) {
	f := newFlowEnv(t)
	// r1, r2: 500 children each (1,508 fields); r3: 3,000 (9,008 fields);
	// r4: none.
	for i, n := range []int{500, 500, 3000, 0} {
		id := "r" + strconv.Itoa(i+1)
		f.start(t, f.s1, id)
		f.runWithChildren(t, id, n)
	}
	var got []rdb.Taken
	cmds := runCommands(t, f.ns, func() { got = f.takeFrom(t, f.s1, "A", 4, true) })
	if len(got) != 4 {
		t.Fatalf("took %d runs, want 4", len(got))
	}
	whole := map[string]bool{}
	for _, c := range cmds {
		if strings.EqualFold(c[0], "HGETALL") {
			whole[c[1]] = true
		}
	}
	inlined := 0
	for i, g := range got {
		full, _ := redis.StringMap(f.do(t, "HGETALL", f.s1.Task(g.ID)), nil)
		switch {
		case i == 2:
			// 3,016 fields handed out before it: r3 does not fit.
			if g.RunUnread != len(full) || len(g.Run) != 0 || g.Run == nil || whole[f.s1.Task(g.ID)] {
				t.Errorf("%s: RunUnread %d, %d fields handed out, read whole: %v; want %d unread, none handed out",
					g.ID, g.RunUnread, len(g.Run), whole[f.s1.Task(g.ID)], len(full))
			}
		default:
			if g.RunUnread != 0 || len(g.Run) != len(full) {
				t.Errorf("%s: RunUnread %d, %d of %d fields handed out; want all", g.ID, g.RunUnread, len(g.Run), len(full))
			}
			inlined += len(g.Run)
		}
	}
	if inlined > 4000 {
		t.Errorf("the take handed out %d fields of runs, more than 4,000", inlined)
	}
	// NotRun of such a taking is a stage's.
	if e := rdb.NotRun("A", rdb.Taken{ID: "r3", PID: got[2].PID, Cancelled: true, Run: got[2].Run, RunUnread: got[2].RunUnread}); e.Kind != rdb.KindStage {
		t.Errorf("NotRun of an unread run: kind %v, want a stage's", e.Kind)
	}

	// ReadRun and Run read it in steps of at most 1,000 entries, never
	// whole.
	var m map[string]string
	var rec *rdb.RunRecord
	cmds = runCommands(t, f.ns, func() {
		var err error
		if m, err = f.st.ReadRun(f.ctx, f.s1, "r3"); err != nil {
			t.Fatal(err)
		}
		if rec, err = f.st.Run(f.ctx, f.s1, "r3"); err != nil {
			t.Fatal(err)
		}
		if _, err = f.st.Runs(f.ctx, f.s1, []string{"r3", "r4"}); err != nil {
			t.Fatal(err)
		}
	})
	full, _ := redis.StringMap(f.do(t, "HGETALL", f.s1.Task("r3")), nil)
	if len(m) != len(full) || m["kr:r3.c2999"] != "resr3.c2999" || m["fs"] != "running" {
		t.Errorf("ReadRun: %d fields, want %d", len(m), len(full))
	}
	if rec == nil || len(rec.Children) != 3000 || string(rec.Children[0].Result) == "" {
		t.Errorf("Run: %+v", rec)
	}
	scans := 0
	for _, c := range cmds {
		switch strings.ToUpper(c[0]) {
		case "HSCAN":
			scans++
			if n, err := strconv.Atoi(c[len(c)-1]); len(c) != 5 || !strings.EqualFold(c[3], "COUNT") || err != nil || n < 1 || n > 1000 {
				t.Errorf("%q: want HSCAN key cursor COUNT 1 to 1000", c)
			}
		case "HGETALL", "HKEYS", "HVALS":
			t.Errorf("%q: a run read whole", c[:2])
		}
	}
	// Three reads of 9,008 entries, about 1,000 per step.
	if scans < 3*9 {
		t.Errorf("%d HSCAN steps for three reads of 9,008 entries: want at least 27", scans)
	}
}
