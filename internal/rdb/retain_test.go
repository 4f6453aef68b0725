package rdb_test

import (
	"fmt"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// retainTrim is RETAIN_TRIM (lua/include/finalize.lua): the most expired
// entries of retained sets one script call trims.
const retainTrim = 1000

// TestRetainedTrimIsBounded: the entries of a retained set expire in bulk
// (tasks that ended in a burst, then a quiet queue), and the ending that
// came next trimmed them all in one ZREMRANGEBYSCORE: half a second of
// Redis for a million. An ending trims at most retainTrim of them per
// script call, oldest first, however many tasks the call ends; the calls
// after it trim the rest.
func TestRetainedTrimIsBounded(t *testing.T) {
	e := newEnv(t)
	const expired = 2*retainTrim + 500
	args := []any{e.q.Retained}
	for i := range expired {
		args = append(args, e.start-1000-int64(i), fmt.Sprintf("old%04d", i)) // old2499 expired first
	}
	e.do(t, "ZADD", args...)
	card := func() int {
		t.Helper()
		n, err := redis.Int(e.do(t, "ZCARD", e.q.Retained), nil)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	listed := func(id string) bool {
		t.Helper()
		return e.do(t, "ZSCORE", e.q.Retained, id) != nil
	}

	// One call ending two tasks.
	e.enqueue(t, "a", "b")
	got := e.takeFrom(t, e.q, "A", 2, false)
	e.endIn(t, e.q, 60000, rdb.Done(rdb.KindTask, "A", got[0].PID, "a", nil), rdb.Done(rdb.KindTask, "A", got[1].PID, "b", nil))
	if n := card(); n != expired-retainTrim+2 {
		t.Fatalf("after one call ending 2 tasks: %d entries, want %d (%d expired trimmed)", n, expired-retainTrim+2, retainTrim)
	}
	if listed(fmt.Sprintf("old%04d", expired-1)) || !listed(fmt.Sprintf("old%04d", expired-retainTrim-1)) {
		t.Fatal("the call did not trim the oldest entries first")
	}

	// The next endings trim the rest, retainTrim each.
	left := expired - retainTrim
	for i := 0; left > 0; i++ {
		id := fmt.Sprintf("n%d", i)
		e.enqueue(t, id)
		got := e.takeFrom(t, e.q, "A", 1, false)
		e.endTask(t, 60000, rdb.Done(rdb.KindTask, "A", got[0].PID, id, nil))
		left = max(left-retainTrim, 0)
		if n := card(); n != left+2+i+1 {
			t.Fatalf("after call %d: %d entries, want %d", i+2, n, left+2+i+1)
		}
	}
	for _, id := range []string{"a", "b", "n0", "n1"} {
		if !listed(id) {
			t.Fatalf("%s is not listed", id)
		}
	}
}
