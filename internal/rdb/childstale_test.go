package rdb_test

import (
	"math"
	"reflect"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// A child is counted in its run once. A take that buries a child whose
// data is gone counts it as failed in the run its id names only if that
// run still waits for it (child_ended, flow.lua): here r1.a already ended
// done and was counted, and a stale copy of its id (no data left) is
// buried. The run must not count it a second time: not as failed (a
// fail-fast run would fail and stop r1.b), and not in its pending count.
func TestBuriedStaleChildIsNotCountedTwice(t *testing.T) {
	t.Parallel()
	f := newFlowEnv(t)
	f.start(t, f.s1, "r1")
	tk := f.takeFrom(t, f.s1, "A", 1, true)
	f.endIn(t, f.s1, 0, f.stage(rdb.Done(rdb.KindStage, "A", tk[0].PID, "r1", nil), "s2", true, nil,
		rdb.Child{ID: "r1.a", Queue: "c1", Payload: []byte("a")}, rdb.Child{ID: "r1.b", Queue: "c1", Payload: []byte("b")}))
	got := f.takeFrom(t, f.c1, "A", 1, false)
	if len(got) != 1 || got[0].ID != "r1.a" {
		t.Fatalf("took %+v, want r1.a", got)
	}
	end := rdb.Done(rdb.KindChild, "A", got[0].PID, "r1.a", nil)
	end.Run = "r1"
	f.endIn(t, f.c1, 0, end)
	f.do(t, "LPUSH", f.c1.Waiting, "r1.a") // a stale copy of the ended child's id
	buried, err := f.st.Take(f.ctx, f.c1, rdb.TakeArgs{Worker: "B", Until: math.MaxInt64, Max: 1, Child: true})
	if err != nil || len(buried) != 1 || buried[0].ID != "r1.a" || buried[0].PID != "" {
		t.Fatalf("take of the stale id = %+v, %v; want r1.a buried", buried, err)
	}
	h, _ := redis.StringMap(f.do(t, "HGETALL", f.s1.Task("r1")), nil)
	if h["fs"] != "running" || h["k:r1.a"] != "done" || h["k:r1.b"] != "pending" || h["kp"] != "1" {
		t.Fatalf("run r1 after the stale child was buried: fs=%s k:r1.a=%s k:r1.b=%s kp=%s; want running, done, pending, 1",
			h["fs"], h["k:r1.a"], h["k:r1.b"], h["kp"])
	}
	if w, _ := redis.Strings(f.do(t, "LRANGE", f.c1.Waiting, 0, -1), nil); !reflect.DeepEqual(w, []string{"r1.b"}) {
		t.Fatalf("c1 waiting %v, want [r1.b]", w)
	}
}
