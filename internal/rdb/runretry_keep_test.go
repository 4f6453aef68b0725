package rdb_test

import (
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// TestRunRetryKeepsEarlierFanOuts: RetryRun forgets the failed fan-out's
// children, and only those. A run whose stage s1 fanned out k1 (done, with
// a result the later stages read as Run.Children) and whose stage s2 then
// failed (for good, or by a fail-fast child of its own fan-out) runs s2
// again with k1's record: dropping every child record lost k1's result.
func TestRunRetryKeepsEarlierFanOuts(t *testing.T) {
	for _, how := range []string{"stage dead", "child failed"} {
		t.Run(how, func(t *testing.T) {
			f := newFlowEnv(t)
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
			if how == "stage dead" {
				f.endIn(t, f.s2, 0, f.stage(rdb.Dead(rdb.KindStage, "A", "3", "r1", "down"), "", true, nil))
			} else {
				f.endIn(t, f.s2, 0, f.stage(rdb.Done(rdb.KindStage, "A", "3", "r1", nil), "", true, nil,
					rdb.Child{ID: "r1.k2", Queue: "c2", Payload: []byte("p")},
					rdb.Child{ID: "r1.k3", Queue: "c2", Payload: []byte("p")}))
				f.takeFrom(t, f.c2, "A", 1, false)
				d := rdb.Dead(rdb.KindChild, "A", "4", "r1.k2", "boom")
				d.Run = "r1"
				f.endIn(t, f.c2, 0, d)
			}
			if s, _ := redis.String(f.do(t, "HGET", f.s1.Task("r1"), rdb.FieldRunStatus), nil); s != "failed" {
				t.Fatalf("run status %q, want failed", s)
			}
			if ok, err := f.st.RunRetry(f.ctx, f.s1, "r1"); err != nil || !ok {
				t.Fatalf("RunRetry = %v, %v", ok, err)
			}
			rec, err := f.st.Run(f.ctx, f.s1, "r1")
			if err != nil || rec == nil {
				t.Fatalf("Run = %+v, %v", rec, err)
			}
			if len(rec.Children) != 1 || rec.Children[0].ID != "r1.k1" || rec.Children[0].Status != "done" ||
				string(rec.Children[0].Result) != "res1" || rec.Children[0].Queue != "c1" {
				t.Fatalf("children after the retry: %+v; want only s1's k1, done with its result", rec.Children)
			}
		})
	}
}
