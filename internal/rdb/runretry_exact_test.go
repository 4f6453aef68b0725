package rdb_test

import (
	"sort"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// TestRunRetryForgetsExactlyTheFailedFanOut: RetryRun forgets the records
// of the fan-out that failed the run, and no other. It told them apart by
// the child queues of the children it could see as the failed fan-out's
// (cancelled ones, and the failing child while its dead hash named the
// fan-out), which missed both ways: a done child of the failed fan-out in
// another child queue than the failing one was kept (the stage run again
// saw it as an earlier fan-out's result), and once the failing child's dead
// entry was deleted, with no sibling pending, every child record went,
// earlier stages' results too. The run keeps its failed fan-out's list
// ('kl') until RetryRun reads it.
func TestRunRetryForgetsExactlyTheFailedFanOut(t *testing.T) {
	for _, how := range []string{"sibling done in another queue", "dead child deleted"} {
		t.Run(how, func(t *testing.T) {
			f := newFlowEnv(t)
			c3 := f.k.Queue(rdb.QueueRef{Tag: "F", Name: "c3"})
			f.start(t, f.s1, "r1")
			f.takeFrom(t, f.s1, "A", 1, true)
			f.endStage(t, rdb.Done(rdb.KindStage, "A", "1", "r1", nil), "s2", true,
				rdb.Child{ID: "r1.k1", Queue: "c1", Payload: []byte("p")})
			f.takeFrom(t, f.c1, "A", 1, false)
			e := rdb.Done(rdb.KindChild, "A", "2", "r1.k1", []byte("res1"))
			e.Run = "r1"
			f.endIn(t, f.c1, 0, e)
			if got := f.takeFrom(t, f.s2, "A", 1, true); len(got) != 1 {
				t.Fatalf("s2 took %+v, want r1", got)
			}
			f.endIn(t, f.s2, 0, f.stage(rdb.Done(rdb.KindStage, "A", "3", "r1", nil), "", true, nil,
				rdb.Child{ID: "r1.k2", Queue: "c2", Payload: []byte("p")},
				rdb.Child{ID: "r1.k3", Queue: "c3", Payload: []byte("p")}))
			f.takeFrom(t, c3, "A", 1, false)
			d := rdb.Done(rdb.KindChild, "A", "4", "r1.k3", []byte("res3"))
			d.Run = "r1"
			f.endIn(t, c3, 0, d)
			f.takeFrom(t, f.c2, "A", 1, false)
			d = rdb.Dead(rdb.KindChild, "A", "5", "r1.k2", "boom")
			d.Run = "r1"
			f.endIn(t, f.c2, 0, d)
			if s, _ := redis.String(f.do(t, "HGET", f.s1.Task("r1"), rdb.FieldRunStatus), nil); s != "failed" {
				t.Fatalf("run status %q, want failed", s)
			}
			if how == "dead child deleted" {
				if n, _, err := f.st.DeadIDs(f.ctx, f.c2, rdb.DeadDelete, []string{"r1.k2"}); err != nil || n != 1 {
					t.Fatalf("delete dead r1.k2: %d, %v", n, err)
				}
			}
			if ok, err := f.st.RunRetry(f.ctx, f.s1, "r1"); err != nil || !ok {
				t.Fatalf("RunRetry = %v, %v", ok, err)
			}
			rec, err := f.st.Run(f.ctx, f.s1, "r1")
			if err != nil || rec == nil {
				t.Fatalf("Run = %+v, %v", rec, err)
			}
			var ids []string
			for _, c := range rec.Children {
				ids = append(ids, c.ID+"="+c.Status)
			}
			sort.Strings(ids)
			if len(rec.Children) != 1 || rec.Children[0].ID != "r1.k1" || string(rec.Children[0].Result) != "res1" {
				t.Fatalf("children after the retry: %v; want only s1's r1.k1, done with its result", ids)
			}
			if n, _ := redis.Int(f.do(t, "HEXISTS", f.s1.Task("r1"), "kl"), nil); n != 0 {
				t.Fatalf("the retried run still lists a fan-out ('kl')")
			}
		})
	}
}
