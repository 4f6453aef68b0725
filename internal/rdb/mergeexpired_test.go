package rdb_test

import (
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
)

// A merge goes into the key's waiting tail and keeps that task's deadline
// (EnqueueOpts.Key's godoc). A tail whose deadline has already passed never
// runs: the take hands it out to be ended as expired. A payload merged
// into it then was acknowledged (Merged, the tail's id) and never ran: it
// must start a task of its own instead, behind the late one. The tail is
// checked both behind a head (the key's list) and as the head itself, and
// for the checked merge of Client.EnqueueMerge (mode read / into).
func TestMergeIntoAnExpiredTailStartsATask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setCfg(t, e.q, "merge", "1")
	past := &rdb.EnqueueArgs{DeadlineMs: e.now(t) - 1000}
	enq := func(key, id, p string, a *rdb.EnqueueArgs) rdb.KeyEnqueued {
		t.Helper()
		out, err := e.st.EnqueueKey(e.ctx, e.q, key, []string{id}, [][]byte{[]byte(p)}, []string{""}, a)
		if err != nil || len(out) != 1 {
			t.Fatalf("EnqueueKey %s %s: %v %v", key, id, out, err)
		}
		return out[0]
	}

	// Behind a running head: the late task waits in the key's list.
	enq("K", "h", "h", nil)
	if got := e.takeFrom(t, e.q, "W", 10, false); len(got) != 1 || got[0].ID != "h" {
		t.Fatalf("take %+v", got)
	}
	enq("K", "late", "late", past)
	if r := enq("K", "x", "x", nil); r.Merged {
		t.Errorf("x merged into %s, whose deadline has passed: x never runs", r.ID)
	}

	// The key's head itself, waiting in the queue past its deadline.
	enq("L", "late2", "late2", past)
	if r := enq("L", "y", "y", nil); r.Merged {
		t.Errorf("y merged into %s, whose deadline has passed: y never runs", r.ID)
	}

	// EnqueueMerge reads the tail to merge into: none.
	tail, err := e.st.ReadKeyTail(e.ctx, e.q, "M")
	if err != nil || tail != nil {
		t.Fatalf("tail of an empty key: %+v %v", tail, err)
	}
	enq("M", "late3", "late3", past)
	if tail, err := e.st.ReadKeyTail(e.ctx, e.q, "M"); err != nil || tail != nil {
		t.Errorf("EnqueueMerge's tail of M = %+v (%v), want none: late3's deadline has passed", tail, err)
	}
}
