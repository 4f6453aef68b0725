package rdb_test

import (
	"math"
	"reflect"
	"strconv"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
)

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
