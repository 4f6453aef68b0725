package rdb_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
)

// Per-task unique keys in a batch: a task whose key is held (by a task
// enqueued before, or by an earlier task of the same batch) is left out and
// reported; the others are enqueued in the same step.
func TestEnqueueBatchUniqueKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueueUnique(t, "t0", "k1")
	l := e.listen(t)
	ids := []string{"t1", "t2", "t3", "t4"}
	ps := [][]byte{[]byte("pt1"), []byte("pt2"), []byte("pt3"), []byte("pt4")}
	a := &rdb.EnqueueArgs{UniqueKeys: []string{"k1", "k2", "", "k2"}, UniqueTTL: 60000}
	var (
		n    int
		dups []rdb.Dup
		err  error
	)
	before := e.dump(t)
	e.call(t, func() { n, dups, err = e.st.EnqueueBatch(e.ctx, e.q, ids, ps, a) })
	if err != nil || n != 4 {
		t.Fatalf("EnqueueBatch = %d, %v", n, err)
	}
	if want := []rdb.Dup{{Index: 0, Holder: "t0"}, {Index: 3, Holder: "t2"}}; !reflect.DeepEqual(dups, want) {
		t.Fatalf("dups %+v, want %+v", dups, want)
	}
	checkPubs(t, l.collect(t, e), []msg{{"wake", "2"}})
	e.checkState(t, before, func(e *env) state {
		return state{
			e.q.Waiting:          list{"t0", "t2", "t3"},
			e.q.Task("t0"):       fresh("t0").with("u", uniqueKey(e.q, "k1")),
			uniqueKey(e.q, "k1"): ttl(str("t0"), 60000),
			e.q.Task("t2"):       fresh("t2").with("u", uniqueKey(e.q, "k2")),
			e.q.Task("t3"):       fresh("t3"),
			uniqueKey(e.q, "k2"): ttl(str("t2"), 60000),
		}
	})
	// Every key held: nothing is written, every task is reported.
	before = e.dump(t)
	_, dups, err = e.st.EnqueueBatch(e.ctx, e.q, []string{"t5", "t6"}, ps[:2], &rdb.EnqueueArgs{UniqueKeys: []string{"k2", "k1"}, UniqueTTL: 60000})
	if err != nil || len(dups) != 2 || dups[0] != (rdb.Dup{Index: 0, Holder: "t2"}) || dups[1] != (rdb.Dup{Index: 1, Holder: "t0"}) {
		t.Fatalf("all held: dups %+v, %v", dups, err)
	}
	e.checkState(t, before, nil)
	// Single Enqueue refuses per-task keys (it could not report them).
	if _, err := e.st.Enqueue(e.ctx, e.q, ids[:1], ps[:1], a); err == nil {
		t.Fatal("Enqueue took per-task unique keys")
	}
}

// A batch split into several script calls reports duplicates by their index
// in the whole batch, across the calls.
func TestEnqueueBatchUniqueKeysAcrossChunks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := rdb.MaxEnqueueChunk + 500
	ids := make([]string, n)
	keys := make([]string, n)
	ps := make([][]byte, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("t%05d", i)
		ps[i] = []byte("p")
		keys[i] = fmt.Sprint("k", i%(n-2)) // the last two repeat the first two, in the second chunk
	}
	done, dups, err := e.st.EnqueueBatch(e.ctx, e.q, ids, ps, &rdb.EnqueueArgs{UniqueKeys: keys, UniqueTTL: 60000})
	if err != nil || done != n {
		t.Fatalf("EnqueueBatch = %d, %v", done, err)
	}
	want := []rdb.Dup{{Index: n - 2, Holder: ids[0]}, {Index: n - 1, Holder: ids[1]}}
	if !reflect.DeepEqual(dups, want) {
		t.Fatalf("dups %+v, want %+v", dups, want)
	}
	if l, _ := e.st.Len(e.ctx, e.q); l != n-2 {
		t.Fatalf("queue length %d, want %d", l, n-2)
	}
}

// A task taken past its deadline is handed out marked expired (attempt 0);
// its end with Expire records it as expired, kept for its own retention.
func TestDeadlineExpiresAtTake(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueueTo(t, e.q, &rdb.EnqueueArgs{DeadlineMs: 1, RetentionMs: 30000}, "late")
	e.enqueueTo(t, e.q, &rdb.EnqueueArgs{DeadlineMs: far}, "ok")
	got := e.takeFrom(t, e.q, "A", 2, false)
	if len(got) != 2 || !got[0].Expired || got[0].Attempt != 0 || got[1].Expired || got[1].Attempt != 1 {
		t.Fatalf("take: %+v", got)
	}
	before := e.dump(t)
	var ended []rdb.Ended
	e.call(t, func() {
		var err error
		ended, err = e.st.End(e.ctx, e.q, 0, []rdb.Ending{
			rdb.Expire("A", got[0].PID, "late"),
			rdb.Expire("A", got[1].PID, "ok"), // not past: the end refuses to expire it
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	if ended[0].Outcome != rdb.OutcomeExpired || ended[1].Outcome != rdb.OutcomeRequeued {
		t.Fatalf("outcomes %v, %v; want expired, requeued", ended[0].Outcome, ended[1].Outcome)
	}
	e.checkState(t, before, func(e *env) state {
		return state{
			e.q.Task("late"): ttl(hash{"d": "plate", "dl": "1", "rt": "30000", "s": "expired", "ft": "@now"}, 30000),
			e.q.Retained:     ttl(zset{{"late", "@now+30000"}}, 30000),
			e.q.Task("ok"):   hash{"d": "pok", "dl": fmt.Sprint(far), "s": "queued"},
			e.q.Waiting:      list{"ok"},
			e.q.Holders:      set{"A"},
			e.q.Seq:          str("2"),
		}
	})
	// Run again: the takings are gone, nothing changes.
	before = e.dump(t)
	again, err := e.st.End(e.ctx, e.q, 0, []rdb.Ending{rdb.Expire("A", got[0].PID, "late")})
	if err != nil || again[0].Outcome != rdb.OutcomeLost {
		t.Fatalf("second end: %+v %v", again, err)
	}
	e.checkState(t, before, nil)
}

// A task's own retention wins over the queue's, longer or shorter, and the
// retained set lives as long as its latest entry.
func TestTaskRetentionOverridesTheQueues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueueTo(t, e.q, &rdb.EnqueueArgs{RetentionMs: 120000}, "long")
	e.enqueueTo(t, e.q, &rdb.EnqueueArgs{RetentionMs: 5000}, "short")
	e.enqueue(t, "plain")
	got := e.takeFrom(t, e.q, "A", 3, false)
	before := e.dump(t)
	e.call(t, func() {
		e.endIn(t, e.q, 60000,
			rdb.Done(rdb.KindTask, "A", got[0].PID, "long", nil),
			rdb.Done(rdb.KindTask, "A", got[1].PID, "short", nil),
			rdb.Done(rdb.KindTask, "A", got[2].PID, "plain", nil))
	})
	e.checkState(t, before, func(e *env) state {
		return state{
			e.q.Task("long"):  ttl(hash{"d": "plong", "rt": "120000", "s": "done", "ft": "@now"}, 120000),
			e.q.Task("short"): ttl(hash{"d": "pshort", "rt": "5000", "s": "done", "ft": "@now"}, 5000),
			e.q.Task("plain"): ttl(hash{"d": "pplain", "s": "done", "ft": "@now"}, 60000),
			// Scored by expiry; the set's TTL is that of its queue-retention
			// entry, the last added (see finalize).
			e.q.Retained: ttl(zset{{"short", "@now+5000"}, {"plain", "@now+60000"}, {"long", "@now+120000"}}, 60000),
			e.q.Holders:  set{"A"},
			e.q.Seq:      str("3"),
		}
	})
	// A queue without retention keeps a task that asks for it.
	e.enqueueTo(t, e.q, &rdb.EnqueueArgs{RetentionMs: 30000}, "kept")
	got = e.takeFrom(t, e.q, "A", 1, false)
	e.endTask(t, 0, rdb.Done(rdb.KindTask, "A", got[0].PID, "kept", []byte("r")))
	if r, err := e.st.Task(e.ctx, e.q, "kept"); err != nil || r == nil || r.State != rdb.StateDone || r.RetentionMs != 30000 || string(r.Result) != "r" {
		t.Fatalf("kept: %+v %v", r, err)
	}
}
