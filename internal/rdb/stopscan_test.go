package rdb_test

import (
	"strconv"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// stopScan is STOP_SCAN (lua/include/flow.lua): how many list entries the
// LREMs that stop one run may pass.
const stopScan = 20000

// crowd pushes n ids of other runs at the back of list.
func (f *flowEnv) crowd(t *testing.T, list string, n int) {
	t.Helper()
	for lo := 0; lo < n; lo += 1000 {
		args := []any{list}
		for i := lo; i < min(lo+1000, n); i++ {
			args = append(args, "other"+strconv.Itoa(i))
		}
		f.do(t, "RPUSH", args...)
	}
}

func (f *flowEnv) llen(t *testing.T, list string) int {
	t.Helper()
	n, err := redis.Int(f.do(t, "LLEN", list), nil)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// notRun ends takings handed out not to be run (Taken.Expired) as a
// worker does, and checks each was cancelled.
func (f *flowEnv) notRun(t *testing.T, q rdb.QueueKeys, w string, got []rdb.Taken) {
	t.Helper()
	var es []rdb.Ending
	for _, g := range got {
		if !g.Expired || !g.Cancelled {
			t.Fatalf("%s was handed out to run (attempt %d): its run was cancelled", g.ID, g.Attempt)
		}
		es = append(es, rdb.NotRun(w, g))
	}
	for i, r := range f.endIn(t, q, 0, es...) {
		if r.Outcome != rdb.OutcomeCancelled {
			t.Fatalf("the end of %s: %v, want cancelled", got[i].ID, r.Outcome)
		}
	}
}

// TestRunStopsAreBounded: cancelling a run LREMed its stage task, or each
// of its pending children, from lists that other runs share: a run
// fanned out to 1,000 children in a child queue of 100,000 held Redis for
// 1.5 s (run_cancel, and the end of a child that fails its run fast).
// Past STOP_SCAN entries of list, the tasks are marked where they wait,
// and the takes that reach them hand them out never to run; their ends
// drop them and leave the ended run as it is.
func TestRunStopsAreBounded(t *testing.T) {
	f := newFlowEnv(t)
	const n = 50
	f.start(t, f.s1, "r1")
	f.takeFrom(t, f.s1, "A", 1, true)
	var cs []rdb.Child
	for i := range n {
		cs = append(cs, rdb.Child{ID: "r1.c" + strconv.Itoa(i), Queue: "c1", Payload: []byte("x")})
	}
	f.endStage(t, rdb.Done(rdb.KindStage, "A", "1", "r1", nil), "s2", true, cs...)
	f.crowd(t, f.c1.Waiting, stopScan)
	// r2 waits in s1 in front of as many other runs.
	f.start(t, f.s1, "r2")
	f.crowd(t, f.s1.Waiting, stopScan)

	f.runCancel(t, "r1")
	f.runCancel(t, "r2")
	if got := f.llen(t, f.c1.Waiting); got != n+stopScan {
		t.Fatalf("child queue: %d entries, want %d: the cancel LREMed past its bound", got, n+stopScan)
	}
	if got := f.llen(t, f.s1.Waiting); got != 1+stopScan {
		t.Fatalf("stage queue: %d entries, want %d: the cancel LREMed past its bound", got, 1+stopScan)
	}
	for _, c := range cs {
		if s, _ := redis.Strings(f.do(t, "HMGET", f.c1.Task(c.ID), rdb.FieldCancel, rdb.FieldState), nil); s[0] != "1" || s[1] != rdb.StateCancelled {
			t.Fatalf("%s: cancel mark and state %q, want 1, cancelled", c.ID, s)
		}
		if s, _ := redis.String(f.do(t, "HGET", f.s1.Task("r1"), "k:"+c.ID), nil); s != "cancelled" {
			t.Fatalf("r1 records %s as %q, want cancelled", c.ID, s)
		}
	}

	// The takes hand them out not to run; their ends drop them.
	kids := f.takeFrom(t, f.c1, "B", n, false)
	f.notRun(t, f.c1, "B", kids)
	for _, c := range cs {
		if k, _ := redis.Int(f.do(t, "EXISTS", f.c1.Task(c.ID)), nil); k != 0 {
			t.Fatalf("%s's hash is left after its end", c.ID)
		}
	}
	runs := f.takeFrom(t, f.s1, "B", 1, true)
	if len(runs) != 1 || runs[0].ID != "r2" {
		t.Fatalf("took %+v from s1, want r2", runs)
	}
	f.notRun(t, f.s1, "B", runs)
	for _, id := range []string{"r1", "r2"} {
		if s, _ := redis.String(f.do(t, "HGET", f.s1.Task(id), rdb.FieldRunStatus), nil); s != "cancelled" {
			t.Fatalf("%s: status %q, want cancelled", id, s)
		}
	}
}
