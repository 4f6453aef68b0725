package rdb_test

import (
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// TestRunCancelledDeepKeepsItsState: a run cancelled while it waited deep
// in its stage's list is taken later, not to run, and ended. Once ended, a
// run's task state is its status (RunInfo.TaskState): the take's writes
// (state active) must not outlive it, whether its end comes (NotRun) or
// its worker dies first (the reaper's requeue).
func TestRunCancelledDeepKeepsItsState(t *testing.T) {
	for _, how := range []string{"end", "requeue"} {
		t.Run(how, func(t *testing.T) {
			f := newFlowEnv(t)
			f.start(t, f.s1, "r2")
			f.crowd(t, f.s1.Waiting, stopScan)
			f.runCancel(t, "r2")
			runs := f.takeFrom(t, f.s1, "B", 1, true)
			if len(runs) != 1 || runs[0].ID != "r2" || !runs[0].Cancelled {
				t.Fatalf("took %+v from s1, want r2 not to run", runs)
			}
			if how == "end" {
				f.notRun(t, f.s1, "B", runs)
			} else if _, _, err := f.st.Requeue(f.ctx, f.s1, []string{"B"}, true); err != nil {
				t.Fatal(err)
			}
			s, _ := redis.Strings(f.do(t, "HMGET", f.s1.Task("r2"), rdb.FieldRunStatus, rdb.FieldState, "w", "p"), nil)
			if s[0] != "cancelled" || s[1] != "cancelled" || s[2] != "" || s[3] != "" {
				t.Fatalf("r2: status, state, worker, pid = %q; want cancelled, cancelled and no owner", s)
			}
		})
	}
}
