package rdb_test

import (
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// A worker whose first take of a queue finds it empty parks, and an enqueue
// then hands it a task: the worker never took anything itself, so the park
// is what must put it in the queue's holder index (park.lua). Otherwise the
// handed taking sits in a worker-queue hash no sweep of the holder index
// reaches: lost for good if the worker dies before its registration names
// the queue (DESIGN: every pid in any wq set is reachable by the reaper).
func TestParkOfAFreshWorkerIndexesItAsAHolder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	until := e.now(t) + 60_000
	e.parkW(t, "P", until, 1)
	if n, _ := redis.Int(e.c.Do("SISMEMBER", e.q.Holders, "P")); n != 1 {
		t.Fatal("a worker parked on its first take is not in the holder index")
	}
	e.enqueue(t, "a")
	held, err := redis.StringMap(e.c.Do("HGETALL", e.q.WorkerQueue("P")))
	if err != nil || len(held) != 1 {
		t.Fatalf("P's holdings after the hand-off: %v, %v; want one taking", held, err)
	}
	hs, err := e.st.Holders(e.ctx, []rdb.QueueKeys{e.q})
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || len(hs[0]) != 1 || hs[0][0] != "P" {
		t.Fatalf("holder index %v, want [[P]]: the handed taking must be reachable", hs)
	}
}
