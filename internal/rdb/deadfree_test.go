package rdb_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/rdb"
)

// seedWideDead puts id into the dead set with a hash of n child records,
// as a flow run whose stage went dead after fan-outs keeps them (4 fields
// per child: k:, kq:, kr:, ke:).
func (e *env) seedWideDead(t *testing.T, id string, at int64, n int) {
	t.Helper()
	args := []any{e.q.Task(id), rdb.FieldPayload, "", rdb.FieldState, "dead", rdb.FieldRunStatus, "failed"}
	for i := range n {
		c := "c" + strconv.Itoa(i)
		args = append(args, "k:"+c, "done", "kq:"+c, "kid", "kr:"+c, "result of "+c, "ke:"+c, "")
	}
	e.do(t, "HSET", args...)
	e.do(t, "ZADD", e.q.Dead, at, id)
}

// waitLazyFreed waits until the server's background thread has freed at
// least n values more than before, and fails the test after about 2 s.
func (e *env) waitLazyFreed(t *testing.T, before, n int, what string) {
	t.Helper()
	for i := 0; e.lazyFreed(t) < before+n; i++ {
		if i == 200 {
			t.Fatalf("%s: freed by the script itself, not aside (lazyfreed_objects %d, want %d)",
				what, e.lazyFreed(t), before+n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The hashes a dead set holds can be wide: a flow run whose stage went
// dead keeps the record of every child it fanned out before (10 fan-outs
// of 1,000 children are 40,000 fields), and its payload and result, the
// bytes a dead call weighs, are empty. DEL frees such a hash field by
// field before it returns (40,000 fields held Redis for about 10 ms on a
// loaded machine, 120,000 for 56 ms), and one delete call may take 250 of
// them: a DeleteAllDead of a stage's dead set, or a trim at its caps, held
// Redis for seconds. They are unlinked: Redis frees a value of more than
// 64 elements in its background thread.
func TestDeadWideHashesAreFreedAside(t *testing.T) {
	t.Run("delete", func(t *testing.T) {
		e := newEnv(t)
		e.seedWideDead(t, "r1", 1, 1000)
		e.seedWideDead(t, "r2", 2, 1000)
		before := e.lazyFreed(t)
		p, err := e.st.DeadOldest(e.ctx, e.q, rdb.DeadDelete, rdb.BulkStep, "", "")
		if err != nil || p.Handled != 2 {
			t.Fatalf("DeadOldest delete: %+v, %v; want 2 deleted", p, err)
		}
		e.waitLazyFreed(t, before, 2, "the 2 dead hashes deleted")
	})
	t.Run("trim", func(t *testing.T) {
		e := newEnv(t)
		e.setCfg(t, e.q, "dead_max", 1)
		e.seedWideDead(t, "r1", 1, 1000)
		e.enqueue(t, "a")
		e.take(t, "A", 1)
		before := e.lazyFreed(t)
		e.endTask(t, 0, rdb.Dead(rdb.KindTask, "A", "1", "a", "boom"))
		if n := e.do(t, "EXISTS", e.q.Task("r1")); n != int64(0) {
			t.Fatalf("the dead set's cap of 1 left the oldest entry")
		}
		e.waitLazyFreed(t, before, 1, "the dead hash trimmed at the cap")
	})
}
