package rdb_test

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
)

// A worker whose keepalive expired may still take (a zombie) before it
// notices; if it takes back its own requeued task, the next requeue must not
// count that worker's death a second time. The crash count is what buries a
// task after MaxCrashes, so counting twice would bury a task that crashed
// one worker.
func TestRequeueCountsACrashOncePerDeadWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(t, "t1")
	check := func(step string, crashes, crashedOn string) {
		t.Helper()
		got, err := redis.Strings(e.c.Do("HMGET", e.q.Task("t1"), rdb.FieldCrashes, rdb.FieldCrashedOn))
		if err != nil {
			t.Fatal(err)
		}
		if got[0] != crashes || got[1] != crashedOn {
			t.Errorf("%s: c = %q, cw = %q; want %q, %q", step, got[0], got[1], crashes, crashedOn)
		}
	}
	takeCrashes := func(w string, want int) {
		t.Helper()
		got := e.takeFrom(t, e.q, w, 1, false)
		if len(got) != 1 || got[0].ID != "t1" || got[0].Crashes != want {
			t.Fatalf("take by %s = %+v, want t1 with %d crashes", w, got, want)
		}
	}

	takeCrashes("w1", 0)
	e.requeue(t, true, "w1")
	check("w1 died", "1", "w1")

	takeCrashes("w1", 1) // the zombie takes its own requeued task again
	e.requeue(t, true, "w1")
	check("the zombie w1 requeued again", "1", "w1")

	takeCrashes("w2", 1)
	e.requeue(t, true, "w2")
	check("w2 died", "2", "w2")

	takeCrashes("w2", 2) // and w2's zombie
	e.requeue(t, false, "w2")
	check("w2 requeued as stopped", "2", "w2")

	takeCrashes("w3", 2)
	e.checkState(t, nil, func(e *env) state {
		return state{
			e.q.Task("t1"):        active("t1", "w3", "5").with("c", "2", "cw", "w2"),
			e.q.WorkerQueue("w3"): hash{"5": "t1"},
			e.q.Holders:           set{"w3"},
			e.q.Seq:               str("5"),
		}
	})
}

// payloadsOf returns n payloads of size bytes each.
func payloadsOf(n, size int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = make([]byte, size)
	}
	return out
}

func TestChunks(t *testing.T) {
	t.Parallel()
	const max = rdb.MaxEnqueueChunkBytes
	half := max / 2
	tests := []struct {
		name     string
		payloads [][]byte
		want     []int
	}{
		{"nothing", nil, nil},
		{"one", payloadsOf(1, 10), []int{1}},
		{"exactly one chunk", payloadsOf(rdb.MaxEnqueueChunk, 10), []int{1000}},
		{"one task over: steps", payloadsOf(rdb.MaxEnqueueChunk+1, 10), []int{250, 500, 750, 1000, 1001}},
		{"1,100 tasks", payloadsOf(1100, 10), []int{250, 500, 750, 1000, 1100}},
		{"bytes: exactly the cap fits", [][]byte{make([]byte, half), make([]byte, half)}, []int{2}},
		{"bytes: one byte over starts a chunk", [][]byte{make([]byte, half), make([]byte, half), {0}}, []int{2, 3}},
		{"bytes: three halves and a byte", payloadsOf(3, half+1), []int{1, 2, 3}},
		{"bytes: a payload over the cap is a chunk of its own",
			[][]byte{{1}, make([]byte, max+1), {2}}, []int{1, 2, 3}},
		{"over the bytes cap: steps, and bytes before count",
			append(payloadsOf(999, 10), make([]byte, max)), []int{250, 500, 750, 999, 1000}},
		{"bytes: a step cut short by the cap",
			append(append(payloadsOf(100, 10), make([]byte, max-500)), payloadsOf(200, 10)...), []int{100, 151, 301}},
	}
	for _, tc := range tests {
		if got := rdb.Chunks(tc.payloads); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Chunks = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A batch past MaxEnqueueChunk goes out as script calls of EnqueueStep tasks,
// in order: each publishes its own wake-up with its count, and the waiting
// list holds every task in the batch's order, behind those already waiting.
// With nothing but payloads, the tasks are written packed (the hashes shared
// by ids that differ in their last 3 characters: t00000..t00999 in lb:t00),
// with no hash of their own; with a per-task option, each gets its hash.
func TestEnqueueBatchSplitsIntoChunks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		a      *rdb.EnqueueArgs
		packed bool
	}{
		{"plain: packed", nil, true},
		{"max attempts: a hash per task", &rdb.EnqueueArgs{MaxAttempts: 3}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.enqueue(t, "head")
			ids := ids("t", 0, 1100)
			ps := make([][]byte, len(ids))
			want := state{e.q.Task("head"): fresh("head")}
			packs := map[string]hash{}
			for i, id := range ids {
				ps[i] = []byte(payload(id))
				if tc.packed {
					key, field := e.q.Packed(id)
					if packs[key] == nil {
						packs[key] = hash{}
						want[key] = packs[key]
					}
					packs[key][field] = payload(id)
				} else {
					want[e.q.Task(id)] = hash{"d": payload(id), "ma": "3"}
				}
			}
			if tc.packed && len(packs) != 2 {
				t.Fatalf("%d packed hashes, want 2", len(packs))
			}
			want[e.q.Waiting] = append(list{"head"}, ids...)
			if got := rdb.Chunks(ps); !reflect.DeepEqual(got, []int{250, 500, 750, 1000, 1100}) {
				t.Fatalf("Chunks = %v, want 5 chunks [250 500 750 1000 1100]", got)
			}
			l := e.listen(t)
			n, _, err := e.st.EnqueueBatch(e.ctx, e.q, ids, ps, tc.a)
			if err != nil || n != len(ids) {
				t.Fatalf("EnqueueBatch = %d, %v; want %d", n, err, len(ids))
			}
			checkPubs(t, l.collect(t, e), []msg{{"wake", "250"}, {"wake", "250"}, {"wake", "250"}, {"wake", "250"}, {"wake", "100"}})
			e.checkState(t, nil, func(*env) state { return want })
			// Taken, each task has its payload (and a packed one, its hash).
			got := e.takeFrom(t, e.q, "W", 1000, false)
			for i, g := range got[1:] {
				if g.ID != ids[i] || string(g.Payload) != payload(ids[i]) || g.PID == "" {
					t.Fatalf("taking %d = %+v", i, g)
				}
			}
		})
	}
}

// The byte cap splits a batch too: three payloads of just over half the cap
// are three script calls, applied in order, each payload intact.
func TestEnqueueBatchSplitsByBytes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := []string{"b1", "b2", "b3"}
	ps := make([][]byte, len(ids))
	for i := range ps {
		ps[i] = []byte(strings.Repeat(string(rune('x'+i)), rdb.MaxEnqueueChunkBytes/2+1))
	}
	if got := rdb.Chunks(ps); !reflect.DeepEqual(got, []int{1, 2, 3}) {
		t.Fatalf("Chunks = %v, want [1 2 3]", got)
	}
	l := e.listen(t)
	n, _, err := e.st.EnqueueBatch(e.ctx, e.q, ids, ps, nil)
	if err != nil || n != 3 {
		t.Fatalf("EnqueueBatch = %d, %v; want 3", n, err)
	}
	checkPubs(t, l.collect(t, e), []msg{{"wake", "1"}, {"wake", "1"}, {"wake", "1"}})
	if got, err := redis.Strings(e.c.Do("LRANGE", e.q.Waiting, 0, -1)); err != nil || !reflect.DeepEqual(got, ids) {
		t.Errorf("waiting = %v, %v; want %v", got, err, ids)
	}
	for i, id := range ids {
		key, field := e.q.Packed(id) // written packed: a plain batch split into steps
		got, err := redis.Bytes(e.c.Do("HGET", key, field))
		if err != nil || string(got) != string(ps[i]) {
			t.Errorf("payload of %s: %d bytes, %v; want its %d bytes", id, len(got), err, len(ps[i]))
		}
	}
}

func TestEnqueueBatchEdges(t *testing.T) {
	t.Parallel()
	t.Run("empty: nothing sent, nothing written", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		l := e.listen(t)
		n, _, err := e.st.EnqueueBatch(e.ctx, e.q, nil, nil, nil)
		if err != nil || n != 0 {
			t.Errorf("EnqueueBatch(nothing) = %d, %v; want 0, nil", n, err)
		}
		checkPubs(t, l.collect(t, e), nil)
		e.checkState(t, nil, func(*env) state { return state{} })
	})
	t.Run("ids and payloads of different lengths: error, nothing written", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		n, _, err := e.st.EnqueueBatch(e.ctx, e.q, ids("t", 0, 1500), payloadsOf(1499, 1), nil)
		if err == nil || n != 0 {
			t.Errorf("EnqueueBatch = %d, %v; want 0 and an error", n, err)
		}
		e.checkState(t, nil, func(*env) state { return state{} })
	})
}

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

// Stats counts each queue's tasks by place, for queues of several tags in
// one call, in the order asked.
func TestStats(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	qa := e.k.Queue(rdb.Standalone("a"))
	s1 := e.k.Queue(rdb.QueueRef{Tag: "F", Name: "s1"})
	c1 := e.k.Queue(rdb.QueueRef{Tag: "F", Name: "c1"})

	// a: six tasks; A takes two, B two; A's end one done (retained) and
	// one dead; two still wait; two scheduled; paused.
	e.enqueueTo(t, qa, nil, "a1", "a2", "a3", "a4", "a5", "a6")
	e.takeFrom(t, qa, "A", 2, false)
	e.takeFrom(t, qa, "B", 2, false)
	e.endIn(t, qa, 60000, rdb.Done(rdb.KindTask, "A", "1", "a1", nil), rdb.Dead(rdb.KindTask, "A", "2", "a2", "bad"))
	e.enqueueTo(t, qa, &rdb.EnqueueArgs{DueMillis: far}, "a7", "a8")
	if err := e.st.SetPaused(e.ctx, qa, true); err != nil {
		t.Fatal(err)
	}
	// F/s1: two runs, the first taken by A.
	for _, id := range []string{"r1", "r2"} {
		if ok, err := e.st.FlowStart(e.ctx, s1, id, nil, rdb.FlowRef{RetentionMillis: 60000}); err != nil || !ok {
			t.Fatalf("FlowStart: %v, %v", ok, err)
		}
	}
	e.takeFrom(t, s1, "A", 1, true)
	// F/c1: one task waiting, paused, then resumed and paused again.
	e.enqueueTo(t, c1, nil, "k1")
	for _, on := range []bool{true, false, true} {
		if err := e.st.SetPaused(e.ctx, c1, on); err != nil {
			t.Fatal(err)
		}
	}
	// F/s2: nothing at all.
	s2 := e.k.Queue(rdb.QueueRef{Tag: "F", Name: "s2"})

	qs := []rdb.QueueKeys{s1, qa, c1, s2}
	got, err := e.st.Stats(e.ctx, qs)
	if err != nil {
		t.Fatal(err)
	}
	want := []rdb.QueueStat{
		{Waiting: 1, Active: 1, Head: "r2"},
		{Waiting: 2, Scheduled: 2, Active: 2, Dead: 1, Retained: 1, Paused: true, Head: "a5"},
		{Waiting: 1, Paused: true, Head: "k1"},
		{},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Stats =\n%+v\nwant\n%+v", got, want)
	}
	flags, err := e.st.Flags(e.ctx, qs)
	if err != nil {
		t.Fatal(err)
	}
	paused := make([]bool, len(flags))
	for i, f := range flags {
		paused[i] = f.Paused
	}
	if !reflect.DeepEqual(paused, []bool{false, true, true, false}) {
		t.Errorf("Flags' Paused = %v; want [false true true false]", paused)
	}
}

// fakeTB records the errors a checker reports instead of failing.
type fakeTB struct {
	*testing.T
	errs []string
}

func (f *fakeTB) Errorf(format string, args ...any) {
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}

// The checks every store call of these tests runs through must catch what
// they are there for: script KEYS of two hash tags (redistest's pool), and
// a command on a connection asked for another tag, or asked for with no tag
// at all (routed).
func TestTagChecksCatchCrossTagCalls(t *testing.T) {
	t.Parallel()
	fake := &fakeTB{T: t}
	c, err := srv.TagCheckedPool(fake).GetContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, keys := range [][2]string{{"x:{a}:1", "x:{a}:2"}, {"x:{a}:1", "x:{b}:2"}} {
		if _, err := c.Do("EVAL", "return 1", 2, keys[0], keys[1]); err != nil {
			t.Fatal(err)
		}
	}
	if len(fake.errs) != 1 || !strings.Contains(fake.errs[0], `"a" and "b"`) {
		t.Errorf("TagCheckedPool reported %q, want one error for the keys of tags a and b", fake.errs)
	}

	fake.errs = nil
	ns := "x" + redistest.Namespace()
	r := routed{pool: srv.TagCheckedPool(t), t: fake, ns: ns}
	rc, err := r.GetContextForTag(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	for _, key := range []string{ns + ":{a}:k", ns + ":{b}:k", "other:{b}:k"} {
		if _, err := rc.Do("GET", key); err != nil {
			t.Fatal(err)
		}
	}
	if len(fake.errs) != 1 || !strings.Contains(fake.errs[0], ns+":{b}:k") {
		t.Errorf("routed reported %q, want one error for %s:{b}:k", fake.errs, ns)
	}
	fake.errs = nil
	if c, err := r.GetContext(context.Background()); err == nil {
		c.Close()
	}
	if len(fake.errs) != 1 {
		t.Errorf("routed.GetContext reported %q, want one error", fake.errs)
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

// TestKnownQueuesReadInSteps: the set of known queues is read with SSCAN,
// about 1,000 at a time, not one SMEMBERS (16 ms of Redis at 100,000
// queues, read by the reaper on every pass), and each queue comes once.
func TestKnownQueuesReadInSteps(t *testing.T) {
	e := newEnv(t)
	const n = 3500
	refs := make([]rdb.QueueRef, n)
	for i := range refs {
		refs[i] = rdb.Standalone("q" + strconv.Itoa(i))
	}
	if err := e.st.AddKnownQueues(e.ctx, refs); err != nil {
		t.Fatal(err)
	}
	before := commandCalls(t, e.c, "sscan")
	got, err := e.st.KnownQueues(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if calls := commandCalls(t, e.c, "sscan") - before; calls < n/1000 {
		t.Errorf("KnownQueues of %d queues ran %d SSCANs, want at least %d", n, calls, n/1000)
	}
	seen := map[string]bool{}
	for _, r := range got {
		if seen[r.Member()] {
			t.Fatalf("%s listed twice", r.Member())
		}
		seen[r.Member()] = true
	}
	if len(seen) != n {
		t.Fatalf("KnownQueues listed %d queues, want %d", len(seen), n)
	}
}
