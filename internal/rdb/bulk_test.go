package rdb_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
)

// Bulk empties a stand-alone queue's waiting list or scheduled set
// BulkStep tasks per call: 2,600 tasks take eleven calls (ten of 250, then
// 100, the short one saying none are left). Deleting drops each task and its
// unique key; cancelling ends each as cancelled, kept and listed in the
// retained set when the queue has a retention. The other place is left
// alone, and a call on an empty place changes nothing.
func TestBulk(t *testing.T) {
	t.Parallel()
	const n = 2600
	all := ids("t", 0, n)
	unique := all[n-3:] // enqueued one by one, each holding a unique key
	tests := []struct {
		name      string
		place     rdb.Place
		action    rdb.BulkAction
		retention int64 // the queue's configured retention (ms)
	}{
		{"delete waiting (retention set: still deleted)", rdb.PlaceWaiting, rdb.BulkDelete, 60000},
		{"cancel waiting, retention: kept as cancelled and retained", rdb.PlaceWaiting, rdb.BulkCancel, 60000},
		{"cancel waiting, no retention: gone", rdb.PlaceWaiting, rdb.BulkCancel, 0},
		{"delete scheduled", rdb.PlaceScheduled, rdb.BulkDelete, 0},
		{"cancel scheduled, retention: kept as cancelled and retained", rdb.PlaceScheduled, rdb.BulkCancel, 60000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			var a rdb.EnqueueArgs
			other := &rdb.EnqueueArgs{DueMillis: far} // the place not emptied
			if tc.place == rdb.PlaceScheduled {
				a, other = rdb.EnqueueArgs{DueMillis: far}, nil
			}
			if tc.retention > 0 {
				e.setCfg(t, e.q, "retention", tc.retention)
			}
			e.enqueueTo(t, e.q, other, "o1")
			ps := make([][]byte, n-len(unique))
			for i := range ps {
				ps[i] = []byte(payload(all[i]))
			}
			if k, _, err := e.st.EnqueueBatch(e.ctx, e.q, all[:n-len(unique)], ps, &a); err != nil || k != len(ps) {
				t.Fatalf("EnqueueBatch = %d, %v", k, err)
			}
			for i, id := range unique {
				u := a
				u.UniqueKey, u.UniqueTTL = fmt.Sprint("u", i), 60000
				e.enqueueTo(t, e.q, &u, id)
			}
			l := e.listen(t)
			var calls []int
			e.call(t, func() {
				for {
					k, err := e.st.Bulk(e.ctx, e.q, tc.place, tc.action)
					if err != nil {
						t.Fatalf("Bulk: %v", err)
					}
					calls = append(calls, k)
					if k < rdb.BulkStep {
						return
					}
				}
			})
			checkPubs(t, l.collect(t, e), nil)
			if want := []int{250, 250, 250, 250, 250, 250, 250, 250, 250, 250, 100}; !reflect.DeepEqual(calls, want) {
				t.Errorf("Bulk calls handled %v, want %v", calls, want)
			}
			want := state{}
			if tc.retention > 0 {
				want[e.q.Config] = hash{"retention": fmt.Sprint(tc.retention)}
			}
			if other != nil {
				want[e.q.Task("o1")] = fresh("o1").with("s", "scheduled")
				want[e.q.Scheduled] = zset{{"o1", fmt.Sprint(far)}}
			} else {
				want[e.q.Task("o1")] = fresh("o1")
				want[e.q.Waiting] = list{"o1"}
			}
			if tc.action == rdb.BulkCancel && tc.retention > 0 {
				retained := zset{}
				for i, id := range all {
					h := fresh(id).with("s", "cancelled", "ft", "@now")
					if i >= n-len(unique) {
						h = h.with("u", uniqueKey(e.q, fmt.Sprint("u", i-(n-len(unique)))))
					}
					want[e.q.Task(id)] = ttl(h, tc.retention)
					retained = append(retained, z{id, fmt.Sprintf("@now+%d", tc.retention)})
				}
				want[e.q.Retained] = ttl(retained, tc.retention)
			}
			e.checkState(t, nil, func(*env) state { return want })

			// Run again: none left, nothing changes.
			before := e.dump(t)
			if k, err := e.st.Bulk(e.ctx, e.q, tc.place, tc.action); err != nil || k != 0 {
				t.Errorf("Bulk again = %d, %v; want 0", k, err)
			}
			e.checkState(t, before, nil)
		})
	}
}

// TestBulkCancelOfAnIDWithoutData drops a waiting id whose task hash is
// gone and writes nothing for it, even when the queue retains cancelled
// tasks.
func TestBulkCancelOfAnIDWithoutData(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setCfg(t, e.q, "retention", 60000)
	e.enqueue(t, "real")
	e.do(t, "RPUSH", e.q.Waiting, "ghost")
	n, err := e.st.Bulk(e.ctx, e.q, rdb.PlaceWaiting, rdb.BulkCancel)
	if err != nil || n != 2 {
		t.Fatalf("Bulk = %d, %v; want 2, nil", n, err)
	}
	if got := e.do(t, "EXISTS", e.q.Task("ghost")); got != int64(0) {
		t.Fatalf("a record was made up for the id without data (EXISTS = %v)", got)
	}
	if got := e.do(t, "ZSCORE", e.q.Retained, "ghost"); got != nil {
		t.Fatalf("the id without data is listed as retained (score %v)", got)
	}
	if got, _ := redis.String(e.do(t, "HGET", e.q.Task("real"), rdb.FieldState), nil); got != rdb.StateCancelled {
		t.Fatalf("the real task's state = %q, want cancelled", got)
	}
}

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
