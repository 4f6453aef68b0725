package rdb_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
)

// bulkCalls runs f and returns how many calls of the bulk script it made
// (the slow log records every command meanwhile).
func (e *env) bulkCalls(t *testing.T, f func()) int {
	t.Helper()
	// (A first call loads the scripts: those counted are f's.)
	if _, err := e.st.BulkLevel(e.ctx, e.k.Queue(rdb.Standalone("warm")), rdb.PlaceScheduled, 0, rdb.BulkDelete); err != nil {
		t.Fatal(err)
	}
	e.do(t, "CONFIG", "SET", "slowlog-log-slower-than", 0)
	e.do(t, "CONFIG", "SET", "slowlog-max-len", 10000)
	e.do(t, "SLOWLOG", "RESET")
	f()
	calls := 0
	for _, en := range e.do(t, "SLOWLOG", "GET", -1).([]any) {
		if args := en.([]any)[3].([]any); len(args) > 1 && strings.HasSuffix(string(args[1].([]byte)), "_bulk") {
			calls++
		}
	}
	e.do(t, "CONFIG", "SET", "slowlog-log-slower-than", 10000)
	return calls
}

// seedLoaded pushes n loaded (packed) tasks of size bytes each onto q's
// waiting list and returns their ids and payloads.
func (e *env) seedLoaded(t *testing.T, n, size int) ([]string, []string) {
	t.Helper()
	var ids, ps []string
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("loaded%04d", i)
		p := fmt.Sprintf("%08d", i) + strings.Repeat("p", size-8)
		k, f := e.q.Packed(id)
		e.do(t, "HSET", k, f, p)
		e.do(t, "RPUSH", e.q.Waiting, id)
		ids, ps = append(ids, id), append(ps, p)
	}
	return ids, ps
}

// A bulk cancel (CancelAll) makes each loaded task's hash from its packed
// field in the script: a chunk of 250 loaded tasks of 1 MiB held Redis for
// 343 ms. A call stops once it has copied about 1 MiB (one task at least);
// the chunk goes on in the next call, every task cancelled once with its
// payload.
func TestBulkCancelOfLoadedTasksIsCutByBytes(t *testing.T) {
	e := newEnv(t)
	e.setCfg(t, e.q, "retention", 60000)
	ids, ps := e.seedLoaded(t, 6, 400<<10)
	var n int
	calls := e.bulkCalls(t, func() {
		var err error
		if n, err = e.st.BulkLevel(e.ctx, e.q, rdb.PlaceWaiting, 0, rdb.BulkCancel); err != nil {
			t.Fatal(err)
		}
	})
	if n != len(ids) {
		t.Fatalf("cancelled %d, want %d", n, len(ids))
	}
	if calls < 2 {
		t.Fatalf("%d bulk calls copied %d loaded payloads of 400 KiB, want calls cut at about 1 MiB", calls, len(ids))
	}
	for i, id := range ids {
		if s, d := e.field(t, id, rdb.FieldState), e.field(t, id, rdb.FieldPayload); s != "cancelled" || d != ps[i] {
			t.Fatalf("%s: state %q, payload of %d bytes; want cancelled with its payload", id, s, len(d))
		}
	}
	if w := e.do(t, "LLEN", e.q.Waiting); w != int64(0) || len(e.packedKeys(t)) != 0 {
		t.Fatalf("left waiting %v, packed %v", w, e.packedKeys(t))
	}
}

// A bulk delete (DeleteAllWaiting) frees its tasks' bytes in the script:
// a call stops once they pass its bound.
func TestBulkDeleteIsCutByBytes(t *testing.T) {
	e := newEnv(t)
	big := strings.Repeat("p", 24<<20)
	for i := 0; i < 4; i++ {
		id := fmt.Sprintf("t%d", i)
		e.do(t, "HSET", e.q.Task(id), rdb.FieldPayload, big)
		e.do(t, "RPUSH", e.q.Waiting, id)
	}
	var n int
	calls := e.bulkCalls(t, func() {
		var err error
		if n, err = e.st.BulkLevel(e.ctx, e.q, rdb.PlaceWaiting, 0, rdb.BulkDelete); err != nil {
			t.Fatal(err)
		}
	})
	if n != 4 || calls < 2 {
		t.Fatalf("deleted %d in %d calls, want 4 in calls cut before 96 MiB", n, calls)
	}
	if w := e.do(t, "LLEN", e.q.Waiting); w != int64(0) {
		t.Fatalf("%v left waiting", w)
	}
}
