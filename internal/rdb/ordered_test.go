package rdb_test

import (
	"fmt"
	"math"
	"math/rand"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	t.Parallel()
	in := []rdb.Entry{{Score: 1, Payload: []byte("a:b")}, {Score: 2.5, Payload: nil}, {Score: 1e15, Payload: []byte("\xff\x00")}}
	key, out, ok := rdb.DecodeEnvelope(rdb.EncodeEnvelope("k:1", in))
	if !ok || key != "k:1" || len(out) != 3 || out[0].Score != 1 || string(out[0].Payload) != "a:b" ||
		out[1].Score != 2.5 || len(out[1].Payload) != 0 || out[2].Score != 1e15 || string(out[2].Payload) != "\xff\x00" {
		t.Fatalf("round trip: %q %+v %v", key, out, ok)
	}
	for _, bad := range []string{"plain", "\xffwqk\x01", "\xffwqk\x019:k", "\xffwqk\x011:k1:5:ab", "\xffwqk\x011:kx:1:a"} {
		if _, _, ok := rdb.DecodeEnvelope([]byte(bad)); ok {
			t.Errorf("DecodeEnvelope(%q) accepted", bad)
		}
	}
}

// Lowkiq's merging rules (seeds/lowkiq.md "Job merging rules"), one
// enqueue sequence per case into one key of a merging queue. The seed's
// own example shows v2 at score 3 after the merge, against its rule "the
// minimal score is chosen for equal payloads": the rule wins here.
func TestKeyMergeRules(t *testing.T) {
	t.Parallel()
	type enq struct{ p, score string }
	cases := []struct {
		name string
		seq  []enq
		want []string
	}{
		{"seed example", []enq{{"v1", "1"}, {"v2", "2"}, {"v2", "3"}, {"v3", "4"}}, []string{"v1:1", "v2:2", "v3:4"}},
		{"equal payload keeps the lower score", []enq{{"a", "5"}, {"a", "3"}, {"a", "9"}}, []string{"a:3"}},
		{"score order, not arrival order", []enq{{"c", "30"}, {"a", "10"}, {"b", "20"}}, []string{"a:10", "b:20", "c:30"}},
		{"equal scores keep arrival order", []enq{{"x", "1"}, {"y", "1"}, {"z", "1"}}, []string{"x:1", "y:1", "z:1"}},
		{"fractional scores", []enq{{"b", "1.5"}, {"a", "1.25"}}, []string{"a:1.25", "b:1.5"}},
		{"empty payloads", []enq{{"", "2"}, {"", "1"}}, []string{":1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.setCfg(t, e.q, "merge", "1")
			first := ""
			for i, x := range c.seq {
				got := e.keyed(t, "K", "t"+string(rune('a'+i)), x.p, x.score)
				if i == 0 {
					first = got.ID
					if got.Merged {
						t.Fatalf("the first enqueue merged: %+v", got)
					}
				} else if !got.Merged || got.ID != first {
					t.Fatalf("enqueue %d = %+v, want merged into %s", i, got, first)
				}
			}
			if got := e.entries(t, first); !reflect.DeepEqual(got, c.want) {
				t.Errorf("payloads %v, want %v", got, c.want)
			}
			if got := e.strs(t, "LRANGE", e.q.Waiting, 0, -1); !reflect.DeepEqual(got, []string{first}) {
				t.Errorf("waiting %v, want [%s]", got, first)
			}
		})
	}
}

// A merge into a waiting task keeps its retry state and due time; a task
// that runs is not merged into (the new one waits behind it); without
// merging every enqueue is a task of its own.
func TestKeyMergeTargets(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setCfg(t, e.q, "merge", "1")
	e.keyed(t, "K", "a", "1", "1")
	got := e.takeFrom(t, e.q, "W", 10, false)
	if len(got) != 1 || got[0].ID != "a" {
		t.Fatalf("take %+v", got)
	}
	if r := e.keyed(t, "K", "b", "2", "2"); r.Merged || r.ID != "b" {
		t.Fatalf("enqueue while a runs = %+v, want a task of its own", r)
	}
	if r := e.keyed(t, "K", "c", "3", "3"); !r.Merged || r.ID != "b" {
		t.Fatalf("enqueue behind b = %+v, want merged into b", r)
	}
	// a fails: retried, still the key's head; nothing of K is available.
	e.endTask(t, 0, rdb.Retry(rdb.KindTask, "W", got[0].PID, "a", 60_000, "boom"))
	due, _ := redis.Int64(e.c.Do("ZSCORE", e.q.Scheduled, "a"))
	if r := e.keyed(t, "K", "d", "4", "4"); !r.Merged || r.ID != "b" {
		t.Fatalf("enqueue = %+v, want merged into b (the tail)", r)
	}
	if n := e.takeFrom(t, e.q, "W", 10, false); len(n) != 0 {
		t.Fatalf("took %+v while K's head waits for its retry", n)
	}
	if got := e.entries(t, "b"); !reflect.DeepEqual(got, []string{"2:2", "3:3", "4:4"}) {
		t.Errorf("b holds %v", got)
	}
	// b's payloads and a's retry state: a keeps its failures and due time.
	if e.field(t, "a", rdb.FieldFailures) != "1" {
		t.Errorf("a lost its failure count")
	}
	if d, _ := redis.Int64(e.c.Do("ZSCORE", e.q.Scheduled, "a")); d != due {
		t.Errorf("a's due time moved: %d, want %d", d, due)
	}

	// A key whose only task is scheduled for a retry merges into it,
	// keeping its count and due time.
	e.keyed(t, "L", "x", "x1", "1")
	lx := e.takeFrom(t, e.q, "W", 10, false)
	if len(lx) != 1 || lx[0].ID != "x" {
		t.Fatalf("take %+v", lx)
	}
	e.endTask(t, 0, rdb.Retry(rdb.KindTask, "W", lx[0].PID, "x", 60_000, "boom"))
	xdue, _ := redis.Int64(e.c.Do("ZSCORE", e.q.Scheduled, "x"))
	if r := e.keyed(t, "L", "y", "x2", "2"); !r.Merged || r.ID != "x" {
		t.Fatalf("enqueue = %+v, want merged into the retrying x", r)
	}
	if d, _ := redis.Int64(e.c.Do("ZSCORE", e.q.Scheduled, "x")); d != xdue || e.field(t, "x", rdb.FieldFailures) != "1" {
		t.Errorf("x's retry state changed: due %d (want %d), failures %q", d, xdue, e.field(t, "x", rdb.FieldFailures))
	}

	// Without merging, each enqueue is a task.
	e2 := newEnv(t)
	e2.keyed(t, "K", "a", "1", "1")
	if r := e2.keyed(t, "K", "b", "1", "1"); r.Merged {
		t.Fatalf("merged on a queue that does not merge: %+v", r)
	}
}

// Only the head of each key circulates: ends move the next task of the key
// to the back of the waiting list; retries keep the head; a dead head
// blocks its key (default) or lets it move on.
func TestKeyHeads(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, x := range [][2]string{{"A", "a1"}, {"A", "a2"}, {"B", "b1"}, {"A", "a3"}, {"B", "b2"}} {
		e.keyed(t, x[0], x[1], x[1], "")
	}
	waiting := func() []string { return e.strs(t, "LRANGE", e.q.Waiting, 0, -1) }
	if got := waiting(); !reflect.DeepEqual(got, []string{"a1", "b1"}) {
		t.Fatalf("waiting %v, want the heads [a1 b1]", got)
	}
	got := e.takeFrom(t, e.q, "W", 10, false)
	if len(got) != 2 {
		t.Fatalf("take %+v", got)
	}
	if k, es, ok := rdb.DecodeEnvelope(got[0].Payload); !ok || k != "A" || string(es[0].Payload) != "a1" {
		t.Errorf("taken payload %q", got[0].Payload)
	}
	e.finish(t, "W", got[0].PID, "a1")
	if w := waiting(); !reflect.DeepEqual(w, []string{"a2"}) {
		t.Fatalf("after a1 ended: waiting %v, want [a2]", w)
	}
	// b1 dies: B is blocked (its head stays b1, in the dead set).
	e.endTask(t, 0, rdb.Dead(rdb.KindTask, "W", got[1].PID, "b1", "bad"))
	if w := waiting(); !reflect.DeepEqual(w, []string{"a2"}) {
		t.Fatalf("after b1 died: waiting %v, want [a2]", w)
	}
	ks, err := e.st.Key(e.ctx, e.q, "B")
	if err != nil || ks == nil || ks.Head != "b1" || !ks.Blocked() || ks.Behind != 1 {
		t.Fatalf("Key(B) = %+v, %v; want blocked by b1 with 1 behind", ks, err)
	}
	// Requeued, b1 runs again first; deleted, b2 moves up.
	if n, _, err := e.st.DeadIDs(e.ctx, e.q, rdb.DeadRequeue, []string{"b1"}); n != 1 || err != nil {
		t.Fatalf("requeue: %d %v", n, err)
	}
	if w := waiting(); !reflect.DeepEqual(w, []string{"a2", "b1"}) {
		t.Fatalf("after b1 was requeued: waiting %v", w)
	}
	got = e.takeFrom(t, e.q, "W", 10, false)
	e.endTask(t, 0, rdb.Dead(rdb.KindTask, "W", got[1].PID, "b1", "bad"))
	if n, _, err := e.st.DeadIDs(e.ctx, e.q, rdb.DeadDelete, []string{"b1"}); n != 1 || err != nil {
		t.Fatalf("delete: %d %v", n, err)
	}
	if w := waiting(); !reflect.DeepEqual(w, []string{"b2"}) {
		t.Fatalf("after b1 was deleted: waiting %v, want [b2]", w)
	}
	// a2 retries: a3 waits for it.
	e.endTask(t, 0, rdb.Retry(rdb.KindTask, "W", got[0].PID, "a2", 1, "boom"))
	if w := waiting(); !reflect.DeepEqual(w, []string{"b2"}) {
		t.Fatalf("after a2 failed: waiting %v, want [b2]", w)
	}
	// The queue moves on: a dead task lets its key's next one run.
	e.setCfg(t, e.q, "ondead", "next")
	got = e.takeFrom(t, e.q, "W", 10, false) // b2
	e.endTask(t, 0, rdb.Dead(rdb.KindTask, "W", got[0].PID, "b2", "bad"))
	if ks, _ := e.st.Key(e.ctx, e.q, "B"); ks != nil {
		t.Errorf("B still has a head after its last task died on a moving queue: %+v", ks)
	}
	// Cancel of a task behind its head takes it out of the key's list.
	e.keyed(t, "C", "c1", "c1", "")
	e.keyed(t, "C", "c2", "c2", "")
	e.keyed(t, "C", "c3", "c3", "")
	if r, err := e.st.Cancel(e.ctx, e.q, "c2"); r != rdb.CancelRemoved || err != nil {
		t.Fatalf("cancel c2: %v %v", r, err)
	}
	if l := e.strs(t, "LRANGE", e.q.KeyListPrefix+"C", 0, -1); !reflect.DeepEqual(l, []string{"c3"}) {
		t.Errorf("C's list %v, want [c3]", l)
	}
	if r, err := e.st.Cancel(e.ctx, e.q, "c1"); r != rdb.CancelRemoved || err != nil {
		t.Fatalf("cancel c1: %v %v", r, err)
	}
	if w := waiting(); !strings.HasSuffix(strings.Join(w, ","), "c3") {
		t.Errorf("after its head was cancelled, c3 is not waiting: %v", w)
	}
}

// A worker that dies gives its head back to the front; the key's next task
// stays behind it.
func TestKeyHeadRequeuedToFront(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.keyed(t, "A", "a1", "1", "")
	e.keyed(t, "A", "a2", "2", "")
	e.keyed(t, "B", "b1", "1", "")
	got, err := e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 1})
	if err != nil || len(got) != 1 || got[0].ID != "a1" {
		t.Fatalf("take %+v %v", got, err)
	}
	e.requeue(t, true, "W")
	if w := e.strs(t, "LRANGE", e.q.Waiting, 0, -1); !reflect.DeepEqual(w, []string{"a1", "b1"}) {
		t.Fatalf("waiting %v, want [a1 b1]", w)
	}
	// The dead worker's late end changes nothing.
	if out, err := e.st.End(e.ctx, e.q, 0, []rdb.Ending{rdb.Done(rdb.KindTask, "W", got[0].PID, "a1", nil)}); err != nil || out[0].Outcome != rdb.OutcomeLost {
		t.Fatalf("zombie end: %+v %v", out, err)
	}
	if w := e.strs(t, "LRANGE", e.q.Waiting, 0, -1); !reflect.DeepEqual(w, []string{"a1", "b1"}) {
		t.Fatalf("after the zombie's end: waiting %v", w)
	}
}

// A dead task requeued on a queue whose key moved on goes back under its
// key: behind the head, or merged into the waiting tail with the tail's
// counters reset (Lowkiq: a job from the morgue merged into a queued one).
func TestKeyRequeueDeadAfterMoveOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setCfg(t, e.q, "ondead", "next", "merge", "1")
	e.keyed(t, "A", "a1", "old", "1")
	got := e.takeFrom(t, e.q, "W", 1, false)
	e.endTask(t, 0, rdb.Dead(rdb.KindTask, "W", got[0].PID, "a1", "bad"))
	e.keyed(t, "A", "a2", "new", "2") // the head now
	got = e.takeFrom(t, e.q, "W", 1, false)
	e.endTask(t, 0, rdb.Retry(rdb.KindTask, "W", got[0].PID, "a2", 60_000, "boom"))
	if n, _, err := e.st.DeadIDs(e.ctx, e.q, rdb.DeadRequeue, []string{"a1"}); n != 1 || err != nil {
		t.Fatalf("requeue: %d %v", n, err)
	}
	if got := e.entries(t, "a2"); !reflect.DeepEqual(got, []string{"old:1", "new:2"}) {
		t.Errorf("a2 holds %v", got)
	}
	if e.field(t, "a2", rdb.FieldFailures) != "" || e.field(t, "a2", rdb.FieldState) != rdb.StateQueued {
		t.Errorf("a2 kept its retry state: failures %q state %q", e.field(t, "a2", rdb.FieldFailures), e.field(t, "a2", rdb.FieldState))
	}
	if w := e.strs(t, "LRANGE", e.q.Waiting, 0, -1); !reflect.DeepEqual(w, []string{"a2"}) {
		t.Errorf("waiting %v, want [a2] due at once", w)
	}
	if n, _ := redis.Int(e.c.Do("EXISTS", e.q.Task("a1"))); n != 0 {
		t.Errorf("a1 still exists after merging")
	}
}

// A task enqueued for later behind its key's head keeps its due time: when
// it moves up it goes to the scheduled set, not the waiting list; a cancel
// finds it in the key's list.
func TestKeyDelayedBehindHead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.keyed(t, "K", "a", "a", "")
	for _, id := range []string{"b", "c"} {
		if _, err := e.st.EnqueueKey(e.ctx, e.q, "K", []string{id}, [][]byte{[]byte(id)}, nil, &rdb.EnqueueArgs{DelayMillis: 60_000}); err != nil {
			t.Fatal(err)
		}
	}
	if ids, err := e.st.KeyBehind(e.ctx, e.q, "K", 0, 10); err != nil || !reflect.DeepEqual(ids, []string{"b", "c"}) {
		t.Fatalf("behind: %v %v", ids, err)
	}
	if r, err := e.st.Cancel(e.ctx, e.q, "c"); r != rdb.CancelRemoved || err != nil {
		t.Fatalf("cancel c: %v %v", r, err)
	}
	got := e.takeFrom(t, e.q, "W", 10, false)
	e.finish(t, "W", got[0].PID, "a")
	if w := e.strs(t, "LRANGE", e.q.Waiting, 0, -1); len(w) != 0 {
		t.Errorf("waiting %v, want none: b is due later", w)
	}
	due, err := redis.Int64(e.c.Do("ZSCORE", e.q.Scheduled, "b"))
	if err != nil || due < e.start+59_000 {
		t.Errorf("b scheduled at %d (%v), want about a minute from the start", due, err)
	}
	if e.field(t, "b", rdb.FieldState) != rdb.StateScheduled {
		t.Errorf("b's state %q", e.field(t, "b", rdb.FieldState))
	}
	if l := e.strs(t, "LRANGE", e.q.KeyListPrefix+"K", 0, -1); len(l) != 0 {
		t.Errorf("K's list %v, want empty", l)
	}
}

// Ends that move several keys on in one end call publish one wake-up with
// the count; a cancel that moves a key on publishes its own.
func TestKeyWakeUps(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, k := range []string{"A", "B", "C"} {
		e.keyed(t, k, k+"1", "1", "")
		e.keyed(t, k, k+"2", "2", "")
	}
	got := e.takeFrom(t, e.q, "W", 3, false)
	l := e.listen(t)
	e.endIn(t, e.q, 0, rdb.Done(rdb.KindTask, "W", got[0].PID, got[0].ID, nil),
		rdb.Done(rdb.KindTask, "W", got[1].PID, got[1].ID, nil), rdb.Done(rdb.KindTask, "W", got[2].PID, got[2].ID, nil))
	checkPubs(t, l.collect(t, e), []msg{{"wake", "3"}})
	e.keyed(t, "A", "A3", "3", "")
	e.cancel(t, "A2")
	checkPubs(t, l.collect(t, e), []msg{{"wake", "1"}})
}

// A merge goes into the key's waiting tail and keeps that task's deadline
// (EnqueueOpts.Key's godoc). A tail whose deadline has already passed never
// runs: the take hands it out to be ended as expired. A payload merged
// into it then was acknowledged (Merged, the tail's id) and never ran: it
// must start a task of its own instead, behind the late one. The tail is
// checked both behind a head (the key's list) and as the head itself, and
// for the checked merge of Client.EnqueueMerge (mode read / into).
func TestMergeIntoAnExpiredTailStartsATask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setCfg(t, e.q, "merge", "1")
	past := &rdb.EnqueueArgs{DeadlineMs: e.now(t) - 1000}
	enq := func(key, id, p string, a *rdb.EnqueueArgs) rdb.KeyEnqueued {
		t.Helper()
		out, err := e.st.EnqueueKey(e.ctx, e.q, key, []string{id}, [][]byte{[]byte(p)}, []string{""}, a)
		if err != nil || len(out) != 1 {
			t.Fatalf("EnqueueKey %s %s: %v %v", key, id, out, err)
		}
		return out[0]
	}

	// Behind a running head: the late task waits in the key's list.
	enq("K", "h", "h", nil)
	if got := e.takeFrom(t, e.q, "W", 10, false); len(got) != 1 || got[0].ID != "h" {
		t.Fatalf("take %+v", got)
	}
	enq("K", "late", "late", past)
	if r := enq("K", "x", "x", nil); r.Merged {
		t.Errorf("x merged into %s, whose deadline has passed: x never runs", r.ID)
	}

	// The key's head itself, waiting in the queue past its deadline.
	enq("L", "late2", "late2", past)
	if r := enq("L", "y", "y", nil); r.Merged {
		t.Errorf("y merged into %s, whose deadline has passed: y never runs", r.ID)
	}

	// EnqueueMerge reads the tail to merge into: none.
	tail, err := e.st.ReadKeyTail(e.ctx, e.q, "M")
	if err != nil || tail != nil {
		t.Fatalf("tail of an empty key: %+v %v", tail, err)
	}
	enq("M", "late3", "late3", past)
	if tail, err := e.st.ReadKeyTail(e.ctx, e.q, "M"); err != nil || tail != nil {
		t.Errorf("EnqueueMerge's tail of M = %+v (%v), want none: late3's deadline has passed", tail, err)
	}
}

// mergeMax is MERGE_MAX (lua/include/key.lua): the most distinct payloads
// a task gathers by merging.
const mergeMax = 100

// TestMergeIsBounded: a merge reads, sorts and writes the whole envelope of
// the key's waiting tail, which grew without bound (a tail of 100,000
// payloads held Redis for a second per enqueue, and a call of 1,000
// merging tasks for seconds). A task gathers at most mergeMax distinct
// payloads; the next one starts a new task behind it, where the following
// ones merge. A payload it holds already still merges into it. Every
// payload is kept, in order.
func TestMergeIsBounded(t *testing.T) {
	e := newEnv(t)
	e.keyed(t, "k", "h", "p0", "1")
	e.setCfg(t, e.q, "merge", "1")
	const n = 2*mergeMax + 50
	ids := make([]string, n)
	ps := make([][]byte, n)
	scores := make([]string, n)
	for i := range n {
		ids[i] = "m" + strconv.Itoa(i)
		ps[i] = []byte("p" + strconv.Itoa(i+1))
		scores[i] = strconv.Itoa(i + 2)
	}
	ps[n-1] = []byte("p1") // held by h already
	got, err := e.st.EnqueueKey(e.ctx, e.q, "k", ids, ps, scores, nil)
	if err != nil {
		t.Fatal(err)
	}
	// h (queued: the key's waiting tail) takes p1..p99; p100 starts m99,
	// which takes p101..p199; p200 starts m199.
	tails := []string{"h", "m99", "m199"}
	for i, g := range got {
		want := tails[min((i+1)/mergeMax, 2)]
		if i == n-1 {
			want = "m199" // p1 is in h, but m199 is the waiting tail now
		}
		if g.ID != want || g.Merged != (g.ID != ids[i]) {
			t.Fatalf("task %d went to %+v, want %s", i, g, want)
		}
	}
	seen := 0
	for _, id := range tails {
		es := e.entries(t, id)
		if len(es) > mergeMax {
			t.Fatalf("%s gathered %d payloads, more than %d", id, len(es), mergeMax)
		}
		seen += len(es)
	}
	if seen != n+1 {
		t.Fatalf("the tasks hold %d payloads, want %d", seen, n+1)
	}
	if v, _ := redis.Int(e.do(t, "HGET", e.q.Task("h"), rdb.FieldMergeVersion), nil); v != mergeMax-1 {
		t.Fatalf("h counts %d merges, want %d", v, mergeMax-1)
	}
	// A payload a full task holds already merges into it.
	e.do(t, "DEL", e.q.KeyListPrefix+"k") // h is the key's waiting tail again
	if r := e.keyed(t, "k", "again", "p5", "0"); r.ID != "h" || !r.Merged {
		t.Fatalf("p5 again went to %+v, want merged into h", r)
	}
	if es := e.entries(t, "h"); len(es) != mergeMax || es[0] != "p5:0" {
		t.Fatalf("h holds %d payloads, the first %s; want %d, p5:0", len(es), es[0], mergeMax)
	}
}

// Batches per key (TakeArgs.Batch, Ending.WithBatch): a key's head is taken
// with up to n-1 tasks waiting behind it, and they end together.

// batchEnv enqueues a1..a<n> under key A and b1 under key B.
func batchEnv(t *testing.T, n int) *env {
	t.Helper()
	e := newEnv(t)
	for i := 1; i <= n; i++ {
		id := "a" + strconv.Itoa(i)
		e.keyed(t, "A", id, id, "")
	}
	e.keyed(t, "B", "b1", "b1", "")
	return e
}

func TestKeyBatchTakeAndDone(t *testing.T) {
	t.Parallel()
	e := batchEnv(t, 5)
	got := e.takeBatch(t, "W", 10, 3)
	if want := []string{"a1", "a2", "a3", "b1"}; !reflect.DeepEqual(takenIDs(got), want) {
		t.Fatalf("took %v, want %v", takenIDs(got), want)
	}
	for i, head := range []string{"", "a1", "a1", ""} {
		if got[i].Head != head || got[i].PID == "" {
			t.Errorf("taken %s: head %q pid %q, want head %q", got[i].ID, got[i].Head, got[i].PID, head)
		}
	}
	p0, _ := strconv.Atoi(got[0].PID)
	for i := 1; i < 3; i++ {
		if p, _ := strconv.Atoi(got[i].PID); p != p0+i {
			t.Errorf("pid of %s is %d, want %d (a batch's pids follow its head's)", got[i].ID, p, p0+i)
		}
	}
	if l := e.list(t, "A"); !reflect.DeepEqual(l, []string{"a4", "a5"}) {
		t.Fatalf("A's list %v, want [a4 a5]", l)
	}
	if n, _ := redis.Int(e.c.Do("HLEN", e.q.WorkerQueue("W"))); n != 4 {
		t.Fatalf("W holds %d takings, want 4", n)
	}
	if kb := e.field(t, "a1", rdb.FieldBatch); kb != "a2 a3" {
		t.Errorf("a1's batch field %q", kb)
	}
	// Without Batch, a take hands out heads alone.
	if more := e.takeFrom(t, e.q, "W", 10, false); len(more) != 0 {
		t.Fatalf("plain take found %v while A's head runs", takenIDs(more))
	}
	out := e.endIn(t, e.q, 60_000, batchOf(rdb.Done(rdb.KindTask, "W", got[0].PID, "a1", []byte("r-a1")), got[:3]))
	if out[0].Outcome != rdb.OutcomeDone || !reflect.DeepEqual(out[0].Members, []rdb.Outcome{rdb.OutcomeDone, rdb.OutcomeDone}) {
		t.Fatalf("batch end: %+v", out[0])
	}
	for _, id := range []string{"a1", "a2", "a3"} {
		if s, r := e.field(t, id, rdb.FieldState), e.field(t, id, rdb.FieldResult); s != rdb.StateDone || r != "r-"+id {
			t.Errorf("%s: state %q result %q", id, s, r)
		}
	}
	if w := e.waitingIDs(t); !reflect.DeepEqual(w, []string{"a4"}) {
		t.Fatalf("waiting %v, want [a4]: the key moves up after the batch", w)
	}
	// A task enqueued for later stops a batch: it waits for its time.
	e.keyed(t, "A", "a6", "a6", "")
	if _, err := e.st.EnqueueKey(e.ctx, e.q, "A", []string{"a7"}, [][]byte{[]byte("a7")}, nil, &rdb.EnqueueArgs{DelayMillis: 60_000}); err != nil {
		t.Fatal(err)
	}
	e.keyed(t, "A", "a8", "a8", "")
	got = e.takeBatch(t, "W", 10, 10)
	if want := []string{"a4", "a5", "a6"}; !reflect.DeepEqual(takenIDs(got), want) {
		t.Fatalf("took %v, want %v (stopped by a7, due later)", takenIDs(got), want)
	}
}

func TestKeyBatchRetryKeepsTheBatchInOrder(t *testing.T) {
	t.Parallel()
	e := batchEnv(t, 5)
	got := e.takeBatch(t, "W", 1, 3)
	out := e.endIn(t, e.q, 0, batchOf(rdb.Retry(rdb.KindTask, "W", got[0].PID, "a1", 0, "boom"), got))
	if out[0].Outcome != rdb.OutcomeRetry || !reflect.DeepEqual(out[0].Members, []rdb.Outcome{rdb.OutcomeRetry, rdb.OutcomeRetry}) {
		t.Fatalf("batch retry: %+v", out[0])
	}
	if l := e.list(t, "A"); !reflect.DeepEqual(l, []string{"a2", "a3", "a4", "a5"}) {
		t.Fatalf("A's list %v, want [a2 a3 a4 a5]", l)
	}
	for _, id := range []string{"a1", "a2", "a3"} {
		if n := e.field(t, id, rdb.FieldFailures); n != "1" {
			t.Errorf("%s: failures %q, want 1", id, n)
		}
	}
	if s := e.field(t, "a2", rdb.FieldState); s != rdb.StateQueued || e.field(t, "a2", rdb.FieldBatchOf) != "" || e.field(t, "a2", rdb.FieldPID) != "" {
		t.Errorf("a2 after the retry: state %q, still marked taken", s)
	}
	// The retry is due at once (delay 0): the mover brings a1 back.
	if _, err := e.st.Move(e.ctx, e.q, 100); err != nil {
		t.Fatal(err)
	}
	got = e.takeBatch(t, "W", 2, 3)
	if want := []string{"b1", "a1", "a2", "a3"}; !reflect.DeepEqual(takenIDs(got), want) {
		t.Fatalf("took again %v, want %v (a1 came back behind b1)", takenIDs(got), want)
	}
	got = got[1:]
	for _, x := range got {
		if x.Attempt != 2 {
			t.Errorf("%s: attempt %d, want 2", x.ID, x.Attempt)
		}
	}
	// Given back: the same, nothing counted.
	e.endIn(t, e.q, 0, batchOf(rdb.GiveBack(rdb.KindTask, "W", got[0].PID, "a1"), got))
	if w, l := e.waitingIDs(t), e.list(t, "A"); w[0] != "a1" || !reflect.DeepEqual(l, []string{"a2", "a3", "a4", "a5"}) {
		t.Fatalf("after give back: waiting %v, A's list %v", w, l)
	}
}

// Dead: Lowkiq's rule. The head (the oldest) goes dead and blocks its key,
// or lets it move on; the tasks behind it wait, their counters reset.
func TestKeyBatchDead(t *testing.T) {
	t.Parallel()
	for _, onDead := range []string{"block", "next"} {
		t.Run(onDead, func(t *testing.T) {
			t.Parallel()
			e := batchEnv(t, 4)
			e.setCfg(t, e.q, "ondead", onDead)
			got := e.takeBatch(t, "W", 1, 3)
			e.endIn(t, e.q, 0, batchOf(rdb.Retry(rdb.KindTask, "W", got[0].PID, "a1", 0, "boom"), got))
			if _, err := e.st.Move(e.ctx, e.q, 100); err != nil {
				t.Fatal(err)
			}
			got = e.takeBatch(t, "W", 2, 3)[1:] // b1, then A's batch
			out := e.endIn(t, e.q, 0, batchOf(rdb.Dead(rdb.KindTask, "W", got[0].PID, "a1", "bad"), got))
			if out[0].Outcome != rdb.OutcomeDead || !reflect.DeepEqual(out[0].Members, []rdb.Outcome{rdb.OutcomeRequeued, rdb.OutcomeRequeued}) {
				t.Fatalf("batch dead: %+v", out[0])
			}
			if s := e.field(t, "a1", rdb.FieldState); s != rdb.StateDead {
				t.Errorf("a1: state %q, want dead", s)
			}
			for _, id := range []string{"a2", "a3"} {
				if n := e.field(t, id, rdb.FieldFailures); n != "" {
					t.Errorf("%s: failures %q, want reset", id, n)
				}
			}
			ks, err := e.st.Key(e.ctx, e.q, "A")
			if err != nil || ks == nil {
				t.Fatalf("Key(A): %+v %v", ks, err)
			}
			if onDead == "block" {
				if !ks.Blocked() || ks.Head != "a1" || !reflect.DeepEqual(e.list(t, "A"), []string{"a2", "a3", "a4"}) {
					t.Fatalf("A: %+v, list %v; want blocked by a1, [a2 a3 a4] behind", ks, e.list(t, "A"))
				}
				return
			}
			if ks.Head != "a2" || !reflect.DeepEqual(e.list(t, "A"), []string{"a3", "a4"}) {
				t.Fatalf("A: %+v, list %v; want a2 the head, [a3 a4] behind", ks, e.list(t, "A"))
			}
			if w := e.waitingIDs(t); !reflect.DeepEqual(w, []string{"a2"}) {
				t.Fatalf("waiting %v, want [a2]", w)
			}
		})
	}
}

// A dead worker's batch goes back whole: the tasks behind the head to the
// front of their key's list, in order, the head to the front of the queue
// (one crash, on the head). The zombie's late end changes nothing.
func TestKeyBatchRequeuedWhole(t *testing.T) {
	t.Parallel()
	e := batchEnv(t, 5)
	got := e.takeBatch(t, "W", 2, 3) // a1 a2 a3 b1
	e.requeue(t, true, "W")
	if w := e.waitingIDs(t); !reflect.DeepEqual(w, []string{"a1", "b1"}) {
		t.Fatalf("waiting %v, want [a1 b1]", w)
	}
	if l := e.list(t, "A"); !reflect.DeepEqual(l, []string{"a2", "a3", "a4", "a5"}) {
		t.Fatalf("A's list %v, want [a2 a3 a4 a5]", l)
	}
	if c1, c2 := e.field(t, "a1", rdb.FieldCrashes), e.field(t, "a2", rdb.FieldCrashes); c1 != "1" || c2 != "" {
		t.Errorf("crashes: a1 %q a2 %q, want 1 and none", c1, c2)
	}
	before := e.dump(t)
	zombie, err := e.st.End(e.ctx, e.q, 0, []rdb.Ending{batchOf(rdb.Done(rdb.KindTask, "W", got[0].PID, "a1", nil), got[:3])})
	if err != nil || zombie[0].Outcome != rdb.OutcomeLost ||
		!reflect.DeepEqual(zombie[0].Members, []rdb.Outcome{rdb.OutcomeLost, rdb.OutcomeLost}) {
		t.Fatalf("zombie end: %+v %v", zombie, err)
	}
	e.checkState(t, before, nil)
	// Taken again by another worker: the same batch, in order.
	again := e.takeBatch(t, "V", 1, 3)
	if want := []string{"a1", "a2", "a3"}; !reflect.DeepEqual(takenIDs(again), want) {
		t.Fatalf("took again %v, want %v", takenIDs(again), want)
	}
}

// Part of a batch put back (a requeue split in chunks, a release) takes the
// whole batch back with it, so that no member is left taken while its key
// moves on; and an end finds the batch no longer whole: lost, nothing
// changed.
func TestKeyBatchPartsGoBackTogether(t *testing.T) {
	t.Parallel()
	e := batchEnv(t, 5)
	got := e.takeBatch(t, "W", 1, 3)
	// The live worker says it runs the head only: the release puts back
	// a2 and a3, and the head with them.
	if n, _, err := e.st.Release(e.ctx, e.q, "W", []string{got[0].PID}); err != nil || n != 3 {
		t.Fatalf("release: %d %v, want 3 put back", n, err)
	}
	if w, l := e.waitingIDs(t), e.list(t, "A"); !reflect.DeepEqual(w, []string{"a1", "b1"}) || !reflect.DeepEqual(l, []string{"a2", "a3", "a4", "a5"}) {
		t.Fatalf("after release: waiting %v, A's list %v", w, l)
	}
	// One member's taking gone (by hand): the batch's end is lost whole.
	got = e.takeBatch(t, "W", 1, 3)
	e.do(t, "HDEL", e.q.WorkerQueue("W"), got[2].PID)
	before := e.dump(t)
	out, err := e.st.End(e.ctx, e.q, 0, []rdb.Ending{batchOf(rdb.Done(rdb.KindTask, "W", got[0].PID, "a1", nil), got)})
	if err != nil || out[0].Outcome != rdb.OutcomeLost {
		t.Fatalf("end of a broken batch: %+v %v", out, err)
	}
	e.checkState(t, before, nil)
}

// A merging queue merges into the key's waiting tail, never into a task
// that runs in a batch.
func TestKeyBatchMerge(t *testing.T) {
	t.Parallel()
	e := batchEnv(t, 3)
	e.setCfg(t, e.q, "merge", "1")
	got := e.takeBatch(t, "W", 1, 5) // a1 a2 a3: the key's list is empty
	if len(got) != 3 {
		t.Fatalf("took %v", takenIDs(got))
	}
	if r := e.keyed(t, "A", "a4", "x", ""); r.Merged {
		t.Fatalf("merged into %s, which runs", r.ID)
	}
	if r := e.keyed(t, "A", "a5", "y", ""); !r.Merged || r.ID != "a4" {
		t.Fatalf("a5: %+v, want merged into a4", r)
	}
}

// With global limits, every task of a batch counts as a start.
func TestKeyBatchLimited(t *testing.T) {
	t.Parallel()
	e := batchEnv(t, 5)
	e.setCfg(t, e.q, "conc", 2)
	got, err := e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 2, Batch: 5, Limited: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a1", "b1"}; !reflect.DeepEqual(takenIDs(got), want) {
		t.Fatalf("took %v, want %v (two heads fill the limit)", takenIDs(got), want)
	}
}

// A take hands out at most MaxTake takings, batches included.
func TestKeyBatchTakeCapped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, key := range []string{"A", "B"} {
		ids := make([]string, 1000)
		ps := make([][]byte, 1000)
		for i := range ids {
			ids[i] = key + strconv.Itoa(i)
			ps[i] = []byte("x")
		}
		if _, err := e.st.EnqueueKey(e.ctx, e.q, key, ids, ps, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	got := e.takeBatch(t, "W", 2, rdb.MaxKeyBatch)
	if len(got) != rdb.MaxTake || got[0].ID != "A0" || got[len(got)-1].ID != "B0" || got[len(got)-2].ID != "A998" {
		t.Fatalf("took %d: %s ... %s %s", len(got), got[0].ID, got[len(got)-2].ID, got[len(got)-1].ID)
	}
}

// A key whose list is not a list (corrupt data) never aborts a batch take
// that popped ids: the head is taken alone and the others still run.
func TestKeyBatchCorruptKeyListTakesTheHeadAlone(t *testing.T) {
	t.Parallel()
	e := batchEnv(t, 3)
	e.do(t, "DEL", e.q.KeyListPrefix+"A")
	e.do(t, "SET", e.q.KeyListPrefix+"A", "not a list")
	got := e.takeBatch(t, "W", 10, 3)
	if want := []string{"a1", "b1"}; !reflect.DeepEqual(takenIDs(got), want) {
		t.Fatalf("took %v, want %v", takenIDs(got), want)
	}
	for _, g := range got {
		if g.PID == "" || g.Head != "" {
			t.Errorf("taken %+v: want a taking of its own", g)
		}
	}
	// Their end does not fail on the corrupt list either: both end done,
	// and the list is set aside.
	out, err := e.st.End(e.ctx, e.q, 0, []rdb.Ending{rdb.Done(rdb.KindTask, "W", got[0].PID, "a1", nil),
		rdb.Done(rdb.KindTask, "W", got[1].PID, "b1", nil)})
	if err != nil || len(out) != 2 || out[0].Outcome != rdb.OutcomeDone || out[1].Outcome != rdb.OutcomeDone {
		t.Fatalf("end: %+v, %v; want both done", out, err)
	}
	if n, _ := redis.Int(e.c.Do("EXISTS", e.q.KeyListPrefix+"A:bad")); n != 1 {
		t.Error("the corrupt list was not set aside")
	}
}

// A head whose list of members is stale (a member now runs in another
// batch, under another worker) never puts that member back: only takings
// of its own batch are claimed.
func TestKeyBatchRequeueLeavesAnotherBatchsMember(t *testing.T) {
	t.Parallel()
	e := batchEnv(t, 5)
	got := e.takeBatch(t, "W", 1, 3) // a1, with a2 and a3 behind it
	if len(got) != 3 {
		t.Fatalf("took %v", takenIDs(got))
	}
	// a3 as if it ran in another batch, headed by a9, held by V.
	e.do(t, "HSET", e.q.Task("a3"), "w", "V", "kf", "a9")
	e.do(t, "HDEL", e.q.WorkerQueue("W"), got[2].PID)
	e.do(t, "HSET", e.q.WorkerQueue("V"), got[2].PID, "a3")
	e.requeue(t, false, "W")
	if id, _ := redis.String(e.c.Do("HGET", e.q.WorkerQueue("V"), got[2].PID)); id != "a3" {
		t.Fatalf("V's taking of a3 was put back by W's requeue (holds %q)", id)
	}
	if l := e.list(t, "A"); !reflect.DeepEqual(l, []string{"a2", "a4", "a5"}) {
		t.Fatalf("A's list %v, want [a2 a4 a5] (a3 still runs under V)", l)
	}
}

// A cancel asked while a batch of one key runs wins over what the handler
// said, for the batch's head as for each task taken behind it (end.lua,
// end_batch): the head's cancel is not overwritten by the batch's done.
func TestKeyBatchCancelOfTheHeadWinsOverDone(t *testing.T) {
	t.Parallel()
	e := batchEnv(t, 3)
	got := e.takeBatch(t, "W", 1, 3)
	if want := []string{"a1", "a2", "a3"}; !reflect.DeepEqual(takenIDs(got), want) {
		t.Fatalf("took %v, want %v", takenIDs(got), want)
	}
	e.cancel(t, "a1")
	e.cancel(t, "a3")
	out := e.endIn(t, e.q, 60_000, batchOf(rdb.Done(rdb.KindTask, "W", got[0].PID, "a1", []byte("r-a1")), got))
	if out[0].Outcome != rdb.OutcomeCancelled ||
		!reflect.DeepEqual(out[0].Members, []rdb.Outcome{rdb.OutcomeDone, rdb.OutcomeCancelled}) {
		t.Fatalf("batch end after the cancels of a1 and a3: %+v, want cancelled with members [done cancelled]", out[0])
	}
	for id, want := range map[string]string{"a1": rdb.StateCancelled, "a2": rdb.StateDone, "a3": rdb.StateCancelled} {
		if s := e.field(t, id, rdb.FieldState); s != want {
			t.Errorf("%s: state %q, want %q", id, s, want)
		}
	}
	if r := e.field(t, "a1", rdb.FieldResult); r != "" {
		t.Errorf("the cancelled head kept the handler's result %q", r)
	}
}

// keyBatch is a taking of the random run: a key's head and its batch.
type keyBatch struct {
	w     string
	items []rdb.Taken
}

// Ordered queues under random operations: keyed enqueues (now, later, due
// already, past their deadline; merging on or off), takes with and
// without batches by two workers, every kind of end, ends repeated (a lost
// reply) and ends by zombies, the reaper's requeue, releases, cancels, dead
// requeues and deletes, the mover and promote, the dead set's caps,
// MoveOnDead switched, and bulk deletes and cancels. After every step the
// key invariants hold (keyInvariants): no id in two places, one task of a
// key in circulation (its head), every head somewhere, every entry of a
// key's list behind a head. Each seed runs through the tag-routed store
// (the take reads before it writes) or a plain pool, in turn.
// WORQR_KEY_SEEDS runs more seeds (an audit ran 2,100).
func TestKeyedInvariantsUnderRandomOperations(t *testing.T) {
	t.Parallel()
	seeds := 24
	if s := os.Getenv("WORQR_KEY_SEEDS"); s != "" {
		seeds, _ = strconv.Atoi(s)
	}
	for seed := 0; seed < seeds; seed++ {
		if !t.Run(fmt.Sprint(seed), func(t *testing.T) { keyedRandomRun(t, int64(seed)) }) {
			return
		}
	}
}

// keyedRandomRun runs 300 random steps of seed, checking the key
// invariants after each.
func keyedRandomRun(t *testing.T, seed int64) {
	r := rand.New(rand.NewSource(seed))
	e := newEnv(t)
	if seed%2 == 1 {
		e.st = rdb.NewStore(e.pool, e.ns) // not routed by tag: the take pops (no 'm')
	}
	e.setCfg(t, e.q, "retention", 600000, "dead_max", 1000)
	var live []keyBatch
	var zombies []keyBatch
	n := 0
	var log []string
	defer func() {
		if t.Failed() {
			for _, l := range log {
				t.Log(l)
			}
		}
	}()
	ids := []string{}
	logf := func(f string, a ...any) { log = append(log, fmt.Sprintf(f, a...)) }
	now := e.now(t)
	for step := 0; step < 300 && !t.Failed(); step++ {
		switch op := r.Intn(16); op {
		case 0, 1, 2:
			key := string(rune('A' + r.Intn(2)))
			n++
			id := fmt.Sprintf("%s%d", key, n)
			var a *rdb.EnqueueArgs
			switch r.Intn(6) {
			case 0:
				a = &rdb.EnqueueArgs{DueMillis: now + 100000}
			case 1:
				a = &rdb.EnqueueArgs{DueMillis: now - 1000}
			case 2:
				a = &rdb.EnqueueArgs{DeadlineMs: now - 10}
			}
			out, err := e.st.EnqueueKey(e.ctx, e.q, key, []string{id}, [][]byte{[]byte("p" + strconv.Itoa(r.Intn(4)))}, []string{""}, a)
			if err != nil {
				t.Fatal(err)
			}
			logf("enqueue %s %s %+v -> %+v", key, id, a, out)
			if out[0].Merged {
				if s := e.field(t, out[0].ID, rdb.FieldState); s != rdb.StateQueued && s != rdb.StateScheduled {
					t.Errorf("merged into %s in state %s", out[0].ID, s)
				}
			} else {
				ids = append(ids, id)
			}
		case 3, 4:
			w := []string{"W", "V"}[r.Intn(2)]
			b := []int{0, 3}[r.Intn(2)]
			got, err := e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: w, Until: 1 << 62, Max: 1 + r.Intn(3), Batch: b, MaxCrashes: 3})
			if err != nil {
				t.Fatal(err)
			}
			logf("take %s b%d -> %v", w, b, takenIDs(got))
			for j := 0; j < len(got); {
				k := j + 1
				for k < len(got) && got[k].Head != "" && got[k].Head == got[j].ID {
					k++
				}
				if got[j].PID != "" {
					live = append(live, keyBatch{w, got[j:k]})
				}
				j = k
			}
		case 5, 6, 7:
			if len(live) == 0 {
				continue
			}
			i := r.Intn(len(live))
			b := live[i]
			live = append(live[:i], live[i+1:]...)
			h := b.items[0]
			var en rdb.Ending
			ask := r.Intn(6)
			switch {
			case h.Expired:
				en = rdb.NotRun(b.w, h)
			case ask == 0:
				en = rdb.Retry(rdb.KindTask, b.w, h.PID, h.ID, 0, "x")
			case ask == 1:
				en = rdb.Retry(rdb.KindTask, b.w, h.PID, h.ID, 100000, "x")
			case ask == 2:
				en = rdb.Dead(rdb.KindTask, b.w, h.PID, h.ID, "x")
			case ask == 3:
				en = rdb.GiveBack(rdb.KindTask, b.w, h.PID, h.ID)
			default:
				en = rdb.Done(rdb.KindTask, b.w, h.PID, h.ID, nil)
			}
			if len(b.items) > 1 {
				en = batchOf(en, b.items)
			}
			out, err := e.st.End(e.ctx, e.q, 600000, []rdb.Ending{en})
			if err != nil {
				t.Fatal(err)
			}
			logf("end %s %v ask %s -> %+v", b.w, takenIDs(b.items), en.Ask, out)
			if out[0].Outcome == rdb.OutcomeLost {
				t.Errorf("live end lost")
			}
			if r.Intn(3) == 0 {
				zombies = append(zombies, b) // a repeated end (lost reply)
			}
		case 8:
			w := []string{"W", "V"}[r.Intn(2)]
			_, _, err := e.st.Requeue(e.ctx, e.q, []string{w}, r.Intn(2) == 0)
			if err != nil {
				t.Fatal(err)
			}
			logf("requeue %s", w)
			var keep []keyBatch
			for _, b := range live {
				if b.w == w {
					zombies = append(zombies, b)
				} else {
					keep = append(keep, b)
				}
			}
			live = keep
		case 9:
			if len(zombies) == 0 {
				continue
			}
			b := zombies[r.Intn(len(zombies))]
			en := rdb.Done(rdb.KindTask, b.w, b.items[0].PID, b.items[0].ID, nil)
			if len(b.items) > 1 {
				en = batchOf(en, b.items)
			}
			out, err := e.st.End(e.ctx, e.q, 600000, []rdb.Ending{en})
			if err != nil {
				t.Fatal(err)
			}
			logf("zombie end %v -> %+v", takenIDs(b.items), out)
			if out[0].Outcome != rdb.OutcomeLost {
				t.Errorf("zombie end not lost")
			}
		case 10:
			if len(ids) == 0 {
				continue
			}
			id := ids[r.Intn(len(ids))]
			res, err := e.st.Cancel(e.ctx, e.q, id)
			if err != nil {
				t.Fatal(err)
			}
			logf("cancel %s -> %v", id, res)
		case 11:
			dead := e.strs(t, "ZRANGE", e.q.Dead, 0, -1)
			if len(dead) == 0 {
				continue
			}
			id := dead[r.Intn(len(dead))]
			op := []rdb.DeadOp{rdb.DeadRequeue, rdb.DeadDelete}[r.Intn(2)]
			if _, _, err := e.st.DeadIDs(e.ctx, e.q, op, []string{id}); err != nil {
				t.Fatal(err)
			}
			logf("dead %s %s", op, id)
		case 12:
			if _, err := e.st.Move(e.ctx, e.q, 100); err != nil {
				t.Fatal(err)
			}
			sc := e.strs(t, "ZRANGE", e.q.Scheduled, 0, -1)
			if len(sc) > 0 && r.Intn(2) == 0 {
				id := sc[r.Intn(len(sc))]
				if _, err := e.st.Promote(e.ctx, e.q, id); err != nil {
					t.Fatal(err)
				}
				logf("promote %s", id)
			}
			logf("move")
		case 13:
			switch r.Intn(4) {
			case 0:
				e.setCfg(t, e.q, "ondead", []string{"block", "next"}[r.Intn(2)])
			case 1:
				e.setCfg(t, e.q, "merge", []string{"0", "1"}[r.Intn(2)])
			case 2:
				e.setCfg(t, e.q, "dead_max", []int{0, 1, 1000}[r.Intn(3)])
			}
			cfg, _ := redis.StringMap(e.c.Do("HGETALL", e.q.Config))
			logf("cfg %v", cfg)
		case 14:
			if r.Intn(4) != 0 {
				continue
			}
			act := []rdb.BulkAction{rdb.BulkDelete, rdb.BulkCancel}[r.Intn(2)]
			var err error
			switch r.Intn(3) {
			case 0:
				_, err = e.st.Bulk(e.ctx, e.q, rdb.PlaceWaiting, act)
			case 1:
				_, err = e.st.Bulk(e.ctx, e.q, rdb.PlaceScheduled, act)
			case 2:
				_, err = e.st.BulkKeys(e.ctx, e.q, []string{"A", "B"}, act)
			}
			if err != nil {
				t.Fatal(err)
			}
			logf("bulk %s", act)
		case 15:
			w := []string{"W", "V"}[r.Intn(2)]
			var known []string
			var keep []keyBatch
			for _, b := range live {
				if b.w == w && r.Intn(2) == 0 {
					for _, x := range b.items {
						known = append(known, x.PID)
					}
					keep = append(keep, b)
				} else if b.w == w {
					zombies = append(zombies, b)
				} else {
					keep = append(keep, b)
				}
			}
			live = keep
			if _, _, err := e.st.Release(e.ctx, e.q, w, known); err != nil {
				t.Fatal(err)
			}
			logf("release %s known %v", w, known)
		}
		e.keyInvariants(t, fmt.Sprintf("step %d", step))
		e.checkBehind(t, fmt.Sprintf("step %d", step))
	}
}

// keyInvariants checks the invariants of ordered queue e.q (keys A and B,
// workers W and V) and fails t, naming where, for each broken one.
func (e *env) keyInvariants(t *testing.T, where string) {
	t.Helper()
	place := map[string][]string{} // id -> places
	add := func(id, p string) { place[id] = append(place[id], p) }
	for _, id := range e.strs(t, "LRANGE", e.q.Waiting, 0, -1) {
		add(id, "waiting")
	}
	for _, id := range e.strs(t, "ZRANGE", e.q.Scheduled, 0, -1) {
		add(id, "scheduled")
	}
	for _, id := range e.strs(t, "ZRANGE", e.q.Dead, 0, -1) {
		add(id, "dead")
	}
	keys := []string{e.q.WorkerQueue("W"), e.q.WorkerQueue("V")}
	for _, k := range keys {
		m, _ := redis.StringMap(e.c.Do("HGETALL", k))
		for _, id := range m {
			add(id, "held")
		}
	}
	lists := []string{e.q.KeyListPrefix + "A", e.q.KeyListPrefix + "B"}
	inList := map[string]string{}
	for _, l := range lists {
		key := strings.TrimPrefix(l, e.q.KeyListPrefix)
		for _, en := range e.strs(t, "LRANGE", l, 0, -1) {
			id, _, _ := strings.Cut(en, "@")
			add(id, "list:"+key)
			inList[id] = key
		}
	}
	for id, ps := range place {
		if len(ps) > 1 {
			t.Errorf("%s: %s is in %v", where, id, ps)
		}
	}
	heads, _ := redis.StringMap(e.c.Do("HGETALL", e.q.KeyHeads))
	// The fields of every task found, in one round trip: key, batch_of,
	// state.
	fields := map[string][]string{}
	ids := make([]string, 0, len(place))
	for id := range place {
		ids = append(ids, id)
		if err := e.c.Send("HMGET", e.q.Task(id), rdb.FieldKey, rdb.FieldBatchOf, rdb.FieldState); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.c.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		f, err := redis.Strings(e.c.Receive())
		if err != nil {
			t.Fatal(err)
		}
		fields[id] = f
	}
	// each key: circulating tasks (not in list) that are not the head and not batch members
	circ := map[string][]string{}
	for id, ps := range place {
		if strings.HasPrefix(ps[0], "list:") || ps[0] == "dead" {
			continue
		}
		okey := fields[id][0]
		if okey == "" {
			continue
		}
		if fields[id][1] != "" && ps[0] == "held" {
			continue
		}
		circ[okey] = append(circ[okey], id+"("+ps[0]+")")
		if heads[okey] != id {
			t.Errorf("%s: %s of key %s is %s but the key's head is %q", where, id, okey, ps[0], heads[okey])
		}
	}
	for k, ids := range circ {
		if len(ids) > 1 {
			sort.Strings(ids)
			t.Errorf("%s: key %s has %v circulating", where, k, ids)
		}
	}
	for k, h := range heads {
		ps := place[h]
		if len(ps) == 0 {
			s := e.field(t, h, rdb.FieldState)
			t.Errorf("%s: key %s's head %s is nowhere (state %q)", where, k, h, s)
		}
		if len(ps) > 0 && strings.HasPrefix(ps[0], "list:") {
			t.Errorf("%s: key %s's head %s is in a list", where, k, h)
		}
	}
	for id, key := range inList {
		if heads[key] == "" {
			t.Errorf("%s: %s waits in key %s's list, which has no head", where, id, key)
		}
		if s := fields[id][2]; s != rdb.StateQueued && s != rdb.StateCancelled {
			t.Errorf("%s: %s in key list with state %q", where, id, s)
		}
	}
}

// Metadata given with a keyed enqueue is stored beside each new task's
// payload and handed out with it, by a take of the key's head and with a
// batch's tasks behind it; a merge keeps the waiting task's own.
func TestKeyedMeta(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	enq := func(key, id, meta string) rdb.KeyEnqueued {
		t.Helper()
		out, err := e.st.EnqueueKey(e.ctx, e.q, key, []string{id}, [][]byte{[]byte(id)}, nil, &rdb.EnqueueArgs{Meta: meta})
		if err != nil || len(out) != 1 {
			t.Fatalf("EnqueueKey %s %s: %v %v", key, id, out, err)
		}
		return out[0]
	}
	enq("A", "a1", "m1")
	enq("A", "a2", "m2")
	enq("A", "a3", "")
	for id, want := range map[string]string{"a1": "m1", "a2": "m2", "a3": ""} {
		if got := e.field(t, id, rdb.FieldMeta); got != want {
			t.Errorf("%s: metadata %q, want %q", id, got, want)
		}
	}
	got := e.takeBatch(t, "W", 10, 3)
	if len(got) != 3 {
		t.Fatalf("took %v, want a1 with a2 and a3 behind it", takenIDs(got))
	}
	for i, want := range []string{"m1", "m2", ""} {
		if got[i].Meta != want {
			t.Errorf("taken %s: meta %q, want %q", got[i].ID, got[i].Meta, want)
		}
		if _, es, ok := rdb.DecodeEnvelope(got[i].Payload); !ok || len(es) != 1 || string(es[0].Payload) != got[i].ID {
			t.Errorf("taken %s: payload %q", got[i].ID, got[i].Payload)
		}
	}

	// A merge into a waiting task keeps that task's metadata.
	m := newEnv(t)
	m.setCfg(t, m.q, "merge", "1")
	for _, x := range [][2]string{{"b1", "mb1"}, {"b2", "mb2"}} {
		if _, err := m.st.EnqueueKey(m.ctx, m.q, "B", []string{x[0]}, [][]byte{[]byte(x[0])}, nil, &rdb.EnqueueArgs{Meta: x[1]}); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.field(t, "b1", rdb.FieldMeta); got != "mb1" {
		t.Errorf("merged into b1: its metadata %q, want mb1 (its own)", got)
	}
	if n, _ := redis.Int(m.c.Do("EXISTS", m.q.Task("b2"))); n != 0 {
		t.Errorf("b2 has a hash: it was to merge into b1")
	}
	if got := m.takeFrom(t, m.q, "W", 1, false); len(got) != 1 || got[0].Meta != "mb1" {
		t.Errorf("take of the merged task: %+v, want meta mb1", got)
	}
}

// The count of the tasks behind key heads (QueueKeys.KeyBehind, Stats'
// Behind) is kept by every script that moves a task into or out of a
// key's list, in the same call, so that it needs no scan of the keys:
// after each operation it equals the entries of the queue's key lists,
// and an operation repeated (a reaper's requeue again, a zombie's end
// after it) leaves it as it was. Each row starts from key A with a1 at
// its head and a2..a5 behind it, and key B with b1 alone: 4 behind.
func TestKeyBehindCount(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// seed prepares the queue and returns the operation.
		seed func(t *testing.T, e *env) func()
		want int64
	}{
		{"enqueue: behind a head, and the head of a new key", func(t *testing.T, e *env) func() {
			return func() { e.keyed(t, "A", "a6", "a6", ""); e.keyed(t, "C", "c1", "c1", "") }
		}, 5},
		{"an end moves the key's next task up", func(t *testing.T, e *env) func() {
			got := e.takeFrom(t, e.q, "W", 1, false)
			return func() { e.finish(t, "W", got[0].PID, "a1") }
		}, 3},
		{"a batch take takes its members from behind the head", func(t *testing.T, e *env) func() {
			return func() { e.takeBatch(t, "W", 1, 3) }
		}, 2},
		{"a batch given back puts its members back behind the head", func(t *testing.T, e *env) func() {
			got := e.takeBatch(t, "W", 1, 3)
			return func() { e.endTask(t, 0, batchOf(rdb.GiveBack(rdb.KindTask, "W", got[0].PID, "a1"), got)) }
		}, 4},
		{"a batch done moves the key past it", func(t *testing.T, e *env) func() {
			got := e.takeBatch(t, "W", 1, 3)
			return func() { e.endTask(t, 0, batchOf(rdb.Done(rdb.KindTask, "W", got[0].PID, "a1", nil), got)) }
		}, 1},
		{"a dead worker's batch requeued, twice", func(t *testing.T, e *env) func() {
			e.takeBatch(t, "W", 1, 3)
			return func() { e.requeue(t, true, "W"); e.requeue(t, true, "W") }
		}, 4},
		{"a requeued batch's late end (a zombie) changes nothing", func(t *testing.T, e *env) func() {
			got := e.takeBatch(t, "W", 1, 3)
			e.requeue(t, true, "W")
			return func() {
				out, err := e.st.End(e.ctx, e.q, 0, []rdb.Ending{batchOf(rdb.Done(rdb.KindTask, "W", got[0].PID, "a1", nil), got)})
				if err != nil || out[0].Outcome != rdb.OutcomeLost {
					t.Fatalf("zombie end: %+v %v", out, err)
				}
			}
		}, 4},
		{"a release puts back a batch its worker does not run", func(t *testing.T, e *env) func() {
			got := e.takeBatch(t, "W", 1, 3)
			return func() {
				if _, _, err := e.st.Release(e.ctx, e.q, "W", []string{got[0].PID}); err != nil {
					t.Fatal(err)
				}
			}
		}, 4},
		{"a cancel behind a head", func(t *testing.T, e *env) func() {
			return func() { e.cancel(t, "a3") }
		}, 3},
		{"a dead head deleted: the next one moves up", func(t *testing.T, e *env) func() {
			got := e.takeFrom(t, e.q, "W", 1, false)
			e.endTask(t, 0, rdb.Dead(rdb.KindTask, "W", got[0].PID, "a1", "bad"))
			return func() {
				if _, _, err := e.st.DeadIDs(e.ctx, e.q, rdb.DeadDelete, []string{"a1"}); err != nil {
					t.Fatal(err)
				}
			}
		}, 3},
		{"a dead task requeued behind its key's new head", func(t *testing.T, e *env) func() {
			e.setCfg(t, e.q, "ondead", "next")
			got := e.takeFrom(t, e.q, "W", 1, false)
			e.endTask(t, 0, rdb.Dead(rdb.KindTask, "W", got[0].PID, "a1", "bad")) // a2 moves up: 3 behind
			return func() {
				if _, _, err := e.st.DeadIDs(e.ctx, e.q, rdb.DeadRequeue, []string{"a1"}); err != nil {
					t.Fatal(err)
				}
			}
		}, 4},
		{"a merge into the key's waiting tail adds none", func(t *testing.T, e *env) func() {
			e.setCfg(t, e.q, "merge", "1")
			return func() { e.keyed(t, "A", "a6", "a6", "") }
		}, 4},
		{"a head deleted by hand: the next enqueue moves its next task up", func(t *testing.T, e *env) func() {
			e.do(t, "DEL", e.q.Task("a1"))
			return func() { e.keyed(t, "A", "a6", "a6", "") }
		}, 4},
		{"a bulk delete of the keys' lists", func(t *testing.T, e *env) func() {
			return func() {
				if _, err := e.st.BulkKeys(e.ctx, e.q, []string{"A", "B"}, rdb.BulkDelete); err != nil {
					t.Fatal(err)
				}
			}
		}, 0},
		{"a bulk cancel of the waiting heads takes their lists along", func(t *testing.T, e *env) func() {
			return func() {
				if _, err := e.st.Bulk(e.ctx, e.q, rdb.PlaceWaiting, rdb.BulkCancel); err != nil {
					t.Fatal(err)
				}
			}
		}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := batchEnv(t, 5)
			if n := e.keyListEntries(t); n != 4 {
				t.Fatalf("seeded %d behind, want 4", n)
			}
			tc.seed(t, e)()
			if n := e.keyListEntries(t); n != tc.want {
				t.Errorf("the key lists hold %d entries, want %d", n, tc.want)
			}
			e.checkBehind(t, tc.name)
		})
	}
}

// keyListEntries counts the entries of the key lists of e.q: those of the
// keys the tests enqueue to (A, B) and of any key with a head. Not KEYS:
// it walks every key of the server, which the package's parallel tests
// fill, at every step of the random test.
func (e *env) keyListEntries(t *testing.T) int64 {
	t.Helper()
	keys := map[string]bool{"A": true, "B": true}
	heads, err := redis.StringMap(e.c.Do("HGETALL", e.q.KeyHeads))
	if err != nil {
		t.Fatal(err)
	}
	for k := range heads {
		keys[k] = true
	}
	var n int64
	for k := range keys {
		c, err := redis.Int64(e.c.Do("LLEN", e.q.KeyListPrefix+k))
		if err != nil {
			t.Fatalf("LLEN %s: %v", k, err)
		}
		n += c
	}
	return n
}

// checkBehind fails t, naming where, unless e.q's count of tasks behind
// key heads (its key, and Stats' Behind) is the entries of its key lists,
// and the key is absent at 0.
func (e *env) checkBehind(t *testing.T, where string) {
	t.Helper()
	want := e.keyListEntries(t)
	v, err := e.c.Do("GET", e.q.KeyBehind)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := redis.Int64(v, nil)
	switch {
	case want == 0 && v != nil:
		t.Errorf("%s: the count of tasks behind key heads is %q with none behind, want no key", where, v)
	case got != want:
		t.Errorf("%s: the count of tasks behind key heads is %d, the key lists hold %d", where, got, want)
	}
	st, err := e.st.Stats(e.ctx, []rdb.QueueKeys{e.q})
	if err != nil {
		t.Fatal(err)
	}
	if st[0].Behind != want {
		t.Errorf("%s: Stats' Behind = %d, the key lists hold %d", where, st[0].Behind, want)
	}
}
