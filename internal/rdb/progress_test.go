package rdb_test

import (
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
)

// A child fanned out by a version before 'pe' keeps its fan-out's number
// in the progress field ('pg'). When such a child runs after the upgrade
// and its handler reports progress, the report must not destroy the
// number: progress.lua moves it to 'pe' first. It overwrote it, and the
// child, once dead, was refused by its run's requeue though the run waited
// for it (the 'pg' collision the 'pe' field fixed, left open for the
// children in flight during an upgrade).
func TestLegacyChildKeepsItsFanOutNumberWhenItReportsProgress(t *testing.T) {
	t.Parallel()
	f := newFlowEnv(t)
	f.fanOut(t, "s2", false) // continue: the run waits for k2 and k3
	// k1 as an earlier version fanned it out: its number in 'pg', no 'pe'.
	f.do(t, "HDEL", f.c1.Task("k1"), "pe")
	f.do(t, "HSET", f.c1.Task("k1"), rdb.FieldProgress, "1")
	// Its handler (this version) reports progress, then it dies.
	if ok, err := f.st.Progress(f.ctx, f.c1, "A", "2", "k1", "half way"); err != nil || !ok {
		t.Fatalf("Progress = %v, %v", ok, err)
	}
	if got, _ := redis.String(f.do(t, "HGET", f.c1.Task("k1"), rdb.FieldProgress), nil); got != "half way" {
		t.Fatalf("k1's progress: %q, want the report", got)
	}
	f.endChild(t, f.c1, rdb.Dead(rdb.KindChild, "A", "2", "k1", "bad"))
	n, refused, err := f.st.DeadIDs(f.ctx, f.c1, rdb.DeadRequeue, []string{"k1"})
	if err != nil || n != 1 || len(refused) != 0 {
		t.Fatalf("requeue of dead k1 = %d, refused %v, %v; want 1 requeued", n, refused, err)
	}
	if st, _ := redis.String(f.do(t, "HGET", f.s1.Task("r1"), "k:k1"), nil); st != "pending" {
		t.Errorf("k1 in its run after the requeue: %q, want pending", st)
	}
}

// A child's fan-out number ('pe') has a field of its own: it was
// kept in the progress field ('pg'), which the child's handler overwrites
// when it reports progress, and a dead child that had reported progress
// was then refused by its run's requeue (its number no longer matched the
// run's) while the run waited for it. A child fanned out by an earlier
// version, which kept its number in 'pg', is still requeued.
func TestDeadChildThatReportedProgressIsRequeued(t *testing.T) {
	t.Parallel()
	for _, old := range []bool{false, true} {
		f := newFlowEnv(t)
		f.fanOut(t, "s2", false) // continue: the run waits for k2 and k3
		if old {
			f.do(t, "HDEL", f.c1.Task("k1"), "pe")
			f.do(t, "HSET", f.c1.Task("k1"), rdb.FieldProgress, "1")
		} else {
			if ok, err := f.st.Progress(f.ctx, f.c1, "A", "2", "k1", "half way"); err != nil || !ok {
				t.Fatalf("Progress = %v, %v", ok, err)
			}
			if got, _ := redis.String(f.do(t, "HGET", f.c1.Task("k1"), "pe"), nil); got != "1" {
				t.Fatalf("k1's fan-out number after its progress report: %q, want 1", got)
			}
		}
		f.endChild(t, f.c1, rdb.Dead(rdb.KindChild, "A", "2", "k1", "bad"))
		n, refused, err := f.st.DeadIDs(f.ctx, f.c1, rdb.DeadRequeue, []string{"k1"})
		if err != nil || n != 1 || len(refused) != 0 {
			t.Fatalf("old=%v: requeue of dead k1 = %d, refused %v, %v; want 1 requeued", old, n, refused, err)
		}
		if st, _ := redis.String(f.do(t, "HGET", f.s1.Task("r1"), "k:k1"), nil); st != "pending" {
			t.Errorf("old=%v: k1 in its run after the requeue: %q, want pending", old, st)
		}
	}
}
