package rdb_test

import (
	"math"
	"reflect"
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
