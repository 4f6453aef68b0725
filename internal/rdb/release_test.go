package rdb_test

import (
	"reflect"
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
)

// After a failover a worker checks, in the release's one call, which of
// the pids its handlers run the new primary still holds: a take that the
// old primary acknowledged and never passed on is missing there.
func TestReleaseCheckReportsMissing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(t, "a", "b", "c", "d")
	got := e.takeFrom(t, e.q, "W", 3, false)
	if len(got) != 3 {
		t.Fatalf("took %d, want 3", len(got))
	}
	// got[1]'s take "was lost": the holdings no longer list it. got[2]
	// is held but not run (its take reply was lost): put back.
	e.do(t, "HDEL", e.q.WorkerQueue("W"), got[1].PID)
	known := []string{got[0].PID, got[1].PID, "999999"}
	for run := 0; run < 2; run++ {
		r, err := e.st.ReleaseCheck(e.ctx, e.q, "W", known)
		if err != nil {
			t.Fatal(err)
		}
		wantBack := 1
		if run == 1 {
			wantBack = 0 // idempotent
		}
		if r.Requeued != wantBack || len(r.Cancelled) != 0 {
			t.Errorf("run %d: requeued %d cancelled %v, want %d and none", run, r.Requeued, r.Cancelled, wantBack)
		}
		if want := []string{got[1].PID, "999999"}; !reflect.DeepEqual(r.Missing, want) {
			t.Errorf("run %d: missing %v, want %v", run, r.Missing, want)
		}
	}
	if w := e.waitingIDs(t); !reflect.DeepEqual(w, []string{"c", "d"}) {
		t.Errorf("waiting %v, want [c d] (the unknown taking back at the front)", w)
	}
	if held := e.strs(t, "HKEYS", e.q.WorkerQueue("W")); !reflect.DeepEqual(held, []string{got[0].PID}) {
		t.Errorf("W holds %v, want only %s", held, got[0].PID)
	}
	// Nothing known, nothing held: nothing missing.
	r, err := e.st.ReleaseCheck(e.ctx, e.q, "V", nil)
	if err != nil || r.Requeued != 0 || r.Missing != nil {
		t.Errorf("empty: %+v %v", r, err)
	}
}

// A taking the worker did not know of whose cancel was asked meanwhile is
// ended as cancelled, not put back, and the release names it (its end,
// which would have reported it, never comes).
func TestReleaseNamesCancelled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(t, "a", "b", "c")
	got := e.takeFrom(t, e.q, "W", 2, false)
	if len(got) != 2 {
		t.Fatalf("took %d, want 2", len(got))
	}
	e.cancel(t, "b")
	r, err := e.st.ReleaseCheck(e.ctx, e.q, "W", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []rdb.Cancelled{{ID: "b", PID: got[1].PID, Worker: "W"}}; r.Requeued != 1 || !reflect.DeepEqual(r.Cancelled, want) {
		t.Errorf("released %+v, want a requeued and b cancelled", r)
	}
	if w := e.waitingIDs(t); !reflect.DeepEqual(w, []string{"a", "c"}) {
		t.Errorf("waiting %v, want [a c]", w)
	}
}
