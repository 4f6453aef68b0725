package rdb_test

import (
	"math"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
)

// load applies one chunk of ids (payload "p"+id) under load name, from line
// first, and fails the test unless it was applied.
func (e *env) load(t *testing.T, name string, first int64, ids []string) {
	t.Helper()
	ps := make([][]byte, len(ids))
	for i, id := range ids {
		ps[i] = []byte(payload(id))
	}
	r, err := e.st.LoadChunk(e.ctx, e.q, &rdb.LoadArgs{Name: name, Fingerprint: "fp", TTLMillis: 60_000},
		&rdb.LoadChunk{First: first, After: first + int64(len(ids)), IDs: ids, Payloads: ps, Tail: "x"})
	if err != nil || r.Status != rdb.LoadApplied {
		t.Fatalf("LoadChunk = %+v, %v", r, err)
	}
}

// A loaded task waits with no hash of its own, its payload a field of a hash
// shared by its neighbours; reads see it as a waiting task, and the take
// makes its hash, so that from then on it is like any other task.
func TestLoadedTasksWaitPacked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := loadIDs(3000) // spans two packed hashes
	e.load(t, "a", 1, ids[:1500])
	e.load(t, "a", 1501, ids[1500:])

	if n, _ := redis.Int(e.c.Do("LLEN", e.q.Waiting)); n != len(ids) {
		t.Fatalf("%d waiting, want %d", n, len(ids))
	}
	if ks, _ := redis.Strings(e.c.Do("KEYS", e.ns+":*:t:*")); len(ks) != 0 {
		t.Fatalf("a load made %d task hashes (%v...), want none", len(ks), ks[0])
	}
	pk := e.packedKeys(t)
	total := 0
	for _, n := range pk {
		total += n
	}
	if len(pk) != 2 || total != len(ids) {
		t.Fatalf("packed hashes %v: want 2 holding %d fields", pk, len(ids))
	}
	key, field := e.q.Packed(ids[7])
	if p, _ := redis.String(e.c.Do("HGET", key, field)); p != payload(ids[7]) {
		t.Fatalf("packed payload of %s = %q", ids[7], p)
	}

	recs, err := e.st.Tasks(e.ctx, e.q, []string{ids[0], ids[2999], "nope"})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || string(recs[0].Payload) != payload(ids[0]) || recs[0].State != rdb.StateQueued ||
		string(recs[1].Payload) != payload(ids[2999]) {
		t.Fatalf("Tasks of two loaded tasks and an unknown id = %+v", recs)
	}

	got := e.takeFrom(t, e.q, "W", 3, false)
	if len(got) != 3 {
		t.Fatalf("took %d, want 3", len(got))
	}
	for i, g := range got {
		if g.ID != ids[i] || string(g.Payload) != payload(ids[i]) || g.PID == "" || g.Attempt != 1 {
			t.Fatalf("taking %d = %+v, want %s with its payload, attempt 1", i, g, ids[i])
		}
		h, _ := redis.StringMap(e.c.Do("HGETALL", e.q.Task(g.ID)))
		if h[rdb.FieldPayload] != payload(g.ID) || h[rdb.FieldState] != rdb.StateActive || h[rdb.FieldPID] != g.PID {
			t.Fatalf("hash of the taken %s = %v", g.ID, h)
		}
		key, field := e.q.Packed(g.ID)
		if ok, _ := redis.Bool(e.c.Do("HEXISTS", key, field)); ok {
			t.Fatalf("the taken %s is still packed", g.ID)
		}
	}
	recs, err = e.st.Tasks(e.ctx, e.q, []string{ids[1]})
	if err != nil || len(recs) != 1 || recs[0].State != rdb.StateActive {
		t.Fatalf("Tasks of a taken loaded task = %+v, %v", recs, err)
	}
	e.endTask(t, 0, rdb.Done(rdb.KindTask, "W", got[0].PID, got[0].ID, nil))
	if n, _ := redis.Int(e.c.Do("EXISTS", e.q.Task(got[0].ID))); n != 0 {
		t.Fatal("a finished loaded task kept its hash (no retention)")
	}

	// Every other task taken: the packed hashes go with their last field.
	for left := len(ids) - 3; left > 0; {
		g := e.takeFrom(t, e.q, "W", 1000, false)
		if len(g) == 0 {
			t.Fatalf("%d tasks left, none taken", left)
		}
		for _, x := range g {
			if x.PID == "" || string(x.Payload) != payload(x.ID) {
				t.Fatalf("taking %+v", x)
			}
		}
		left -= len(g)
	}
	if pk := e.packedKeys(t); len(pk) != 0 {
		t.Fatalf("packed hashes left after every task was taken: %v", pk)
	}
}

// A cancel, a bulk cancel and a bulk delete of loaded tasks: each leaves no
// packed field behind, and a cancel keeps a record (with retention) as it
// does for any waiting task.
func TestLoadedTasksCancelledAndDeleted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		retention int64
		bulk      bool
		action    rdb.BulkAction
	}{
		{"cancel, retention", 60_000, false, ""},
		{"cancel, no retention", 0, false, ""},
		{"bulk cancel, retention", 60_000, true, rdb.BulkCancel},
		{"bulk delete", 60_000, true, rdb.BulkDelete},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			if tc.retention > 0 {
				e.setCfg(t, e.q, "retention", tc.retention)
			}
			ids := loadIDs(10)
			e.load(t, "a", 1, ids)
			var gone []string
			if tc.bulk {
				if n, err := e.st.Bulk(e.ctx, e.q, rdb.PlaceWaiting, tc.action); err != nil || n != len(ids) {
					t.Fatalf("Bulk = %d, %v", n, err)
				}
				gone = ids
			} else {
				r, err := e.st.Cancel(e.ctx, e.q, ids[4])
				if err != nil || r != rdb.CancelRemoved {
					t.Fatalf("Cancel = %v, %v; want removed", r, err)
				}
				if r, err := e.st.Cancel(e.ctx, e.q, ids[4]); err != nil || r != rdb.CancelNoop {
					t.Fatalf("Cancel again = %v, %v; want nothing", r, err)
				}
				gone = ids[4:5]
			}
			waiting, _ := redis.Strings(e.c.Do("LRANGE", e.q.Waiting, 0, -1))
			if len(waiting) != len(ids)-len(gone) {
				t.Fatalf("%d waiting after removing %d of %d", len(waiting), len(gone), len(ids))
			}
			for _, id := range gone {
				key, field := e.q.Packed(id)
				if ok, _ := redis.Bool(e.c.Do("HEXISTS", key, field)); ok {
					t.Fatalf("%s still packed", id)
				}
				h, _ := redis.StringMap(e.c.Do("HGETALL", e.q.Task(id)))
				kept := tc.retention > 0 && tc.action != rdb.BulkDelete
				if kept && (h[rdb.FieldState] != rdb.StateCancelled || h[rdb.FieldPayload] != payload(id)) {
					t.Fatalf("cancelled %s kept as %v, want cancelled with its payload", id, h)
				}
				if !kept && len(h) != 0 {
					t.Fatalf("%s left a hash %v", id, h)
				}
			}
			if !tc.bulk {
				got := e.takeFrom(t, e.q, "W", 100, false)
				if len(got) != len(ids)-1 {
					t.Fatalf("took %d after one cancel, want %d", len(got), len(ids)-1)
				}
				for _, g := range got {
					if g.ID == ids[4] || g.PID == "" {
						t.Fatalf("taking %+v", g)
					}
				}
			}
		})
	}
}

// A chunk one of whose ids waits packed already (from another load) writes
// nothing.
func TestLoadRefusesWaitingIDs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := loadIDs(20)
	e.load(t, "a", 1, ids[:10])
	ps := make([][]byte, 4)
	for i := range ps {
		ps[i] = []byte("new")
	}
	r, err := e.st.LoadChunk(e.ctx, e.q, &rdb.LoadArgs{Name: "b", Fingerprint: "fp", TTLMillis: 60_000},
		&rdb.LoadChunk{First: 1, After: 5, IDs: ids[8:12], Payloads: ps, Tail: "x"})
	if err != nil || r.Status != rdb.LoadIDExists || r.ID != ids[8] {
		t.Fatalf("LoadChunk = %+v, %v; want exists %s", r, err, ids[8])
	}
	if n, _ := redis.Int(e.c.Do("LLEN", e.q.Waiting)); n != 10 {
		t.Fatalf("%d waiting, want 10: a refused chunk wrote", n)
	}
	for _, id := range ids[8:12] {
		key, field := e.q.Packed(id)
		p, _ := redis.String(e.c.Do("HGET", key, field))
		if want := map[bool]string{true: payload(id), false: ""}[id == ids[8] || id == ids[9]]; p != want {
			t.Fatalf("packed payload of %s = %q, want %q", id, p, want)
		}
	}
	if ok, _ := redis.Bool(e.c.Do("EXISTS", e.q.LoadPrefix+"b")); ok {
		t.Fatal("a refused chunk wrote its checkpoint")
	}
}

// An enqueue with a caller-chosen id refuses the id of a loaded task that
// waits packed, and writes nothing.
func TestEnqueueRefusesTheIDOfAWaitingLoadedTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := loadIDs(3)
	e.load(t, "a", 1, ids)
	_, err := e.st.Enqueue(e.ctx, e.q, ids[1:2], [][]byte{[]byte("mine")}, &rdb.EnqueueArgs{IDLockTTL: 60_000, Digest: "x"})
	if err != rdb.ErrIDTaken {
		t.Fatalf("Enqueue with a loaded task's id = %v, want ErrIDTaken", err)
	}
	if n, _ := redis.Int(e.c.Do("EXISTS", e.q.Task(ids[1]), e.q.IDPrefix+ids[1])); n != 0 {
		t.Fatal("the refused enqueue wrote a task hash or an id lock")
	}
	if n, _ := redis.Int(e.c.Do("LLEN", e.q.Waiting)); n != 3 {
		t.Fatalf("%d waiting, want 3", n)
	}
	// Another id is free.
	free := "order-1"
	if _, err := e.st.Enqueue(e.ctx, e.q, []string{free}, [][]byte{[]byte("mine")}, &rdb.EnqueueArgs{IDLockTTL: 60_000, Digest: "x"}); err != nil {
		t.Fatalf("Enqueue with a free id: %v", err)
	}
}

// A packed hash that is not a hash (corrupt data) does not abort a take that
// has popped its ids already: the other tasks are taken, and the id without
// data is buried with the reason.
func TestTakeBuriesAnIDWhosePackedHashIsCorrupt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(t, "ok1")
	bad := loadIDs(1)[0]
	key, _ := e.q.Packed(bad)
	e.do(t, "SET", key, "not a hash")
	e.do(t, "RPUSH", e.q.Waiting, bad)
	e.enqueue(t, "ok2")
	got, err := e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 3})
	if err != nil || len(got) != 3 {
		t.Fatalf("Take = %+v, %v; want 3 takings, no error", got, err)
	}
	if got[0].ID != "ok1" || got[0].PID == "" || got[2].ID != "ok2" || got[2].PID == "" {
		t.Fatalf("the good tasks: %+v", got)
	}
	if got[1].ID != bad || got[1].PID != "" || got[1].Reason == "" {
		t.Fatalf("the id with a corrupt packed hash: %+v, want buried with a reason", got[1])
	}
	if n, _ := redis.Int(e.c.Do("ZCARD", e.q.Dead)); n != 1 {
		t.Fatalf("%d dead, want 1", n)
	}
}
