package rdb_test

import (
	"reflect"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// A batch of one key is owned only if every member's pid still maps to that
// member's id (own_every). After a failover the new primary may hand out the
// batch's pids again, to another key's batch: a late end of the old batch
// must be lost, and the new batch stay owned and reachable by the reaper.
// Simulated: the holdings of a's batch are lost and the counter set back.
func TestEndOfABatchWithReissuedPidsIsLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, id := range []string{"a1", "a2", "a3"} {
		e.keyed(t, "A", id, id, "")
	}
	for _, id := range []string{"b1", "b2", "b3"} {
		e.keyed(t, "B", id, id, "")
	}
	old := e.takeBatch(t, "W", 1, 3)
	if want := []string{"a1", "a2", "a3"}; !reflect.DeepEqual(takenIDs(old), want) {
		t.Fatalf("took %v, want %v", takenIDs(old), want)
	}
	for _, g := range old {
		e.do(t, "HDEL", e.q.WorkerQueue("W"), g.PID)
	}
	e.do(t, "DECRBY", e.q.Seq, len(old))
	got := e.takeBatch(t, "W", 1, 3)
	if want := []string{"b1", "b2", "b3"}; !reflect.DeepEqual(takenIDs(got), want) {
		t.Fatalf("second take %v, want %v", takenIDs(got), want)
	}
	for i := range got {
		if got[i].PID != old[i].PID {
			t.Fatalf("second take's pids %v, want a's pids reissued", got)
		}
	}
	ended, err := e.st.End(e.ctx, e.q, 0, []rdb.Ending{batchOf(rdb.Done(rdb.KindTask, "W", old[0].PID, "a1", nil), old)})
	if err != nil || len(ended) != 1 || ended[0].Outcome != rdb.OutcomeLost {
		t.Fatalf("late end of a's batch under reissued pids = %+v, %v; want lost", ended, err)
	}
	held, err := redis.StringMap(e.c.Do("HGETALL", e.q.WorkerQueue("W")))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range got {
		if held[g.PID] != g.ID {
			t.Fatalf("W's holdings %v, want pid %s -> %s (still reachable)", held, g.PID, g.ID)
		}
	}
}
