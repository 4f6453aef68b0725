package rdb_test

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
)

// Fair queues (KeyPolicy.Fair, lua/include/fair.lua): the keys' lists, the
// ring of keys in turn and each key's state, as the scripts keep them.

// fairEnv is an env whose queue is fair, each key served by policy per.
func fairEnv(t *testing.T, per rdb.KeyLimits) *env {
	t.Helper()
	e := newEnv(t)
	if err := e.st.WriteKeyPolicy(e.ctx, e.q, rdb.KeyPolicy{Fair: true, PerKey: per}); err != nil {
		t.Fatal(err)
	}
	return e
}

// fairEnq enqueues tasks ids of key in one call, each with payload
// payload(id) and score 1 (so that its envelope is fairPayload's).
func (e *env) fairEnq(t *testing.T, key string, ids ...string) {
	t.Helper()
	ps, sc := make([][]byte, len(ids)), make([]string, len(ids))
	for i, id := range ids {
		ps[i], sc[i] = []byte(payload(id)), "1"
	}
	if _, err := e.st.EnqueueKey(e.ctx, e.q, key, ids, ps, sc, nil); err != nil {
		t.Fatalf("EnqueueKey %s %v: %v", key, ids, err)
	}
}

// fairPayload is the payload field of task id of key enqueued by fairEnq.
func fairPayload(key, id string) string {
	return string(rdb.EncodeEnvelope(key, []rdb.Entry{{Score: 1, Payload: []byte(payload(id))}}))
}

// fairQueued is the hash of task id of key waiting in its key's list.
func fairQueued(key, id string) hash {
	return hash{"d": fairPayload(key, id), rdb.FieldFairKey: key, "s": "queued"}
}

// fairActive is the hash of task id of key taken by w under pid, counted.
func fairActive(key, id, w, pid string) hash {
	return fairQueued(key, id).with("s", "active", "w", w, "p", pid, rdb.FieldFairPID, pid).started()
}

// fairTake takes up to max tasks of the fair queue for worker w.
func (e *env) fairTake(t *testing.T, w string, max int) []rdb.Taken {
	t.Helper()
	got, err := e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: w, Until: math.MaxInt64, Max: max, Fair: true})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// joined is the ids of got, space-separated.
func joined(got []rdb.Taken) string { return strings.Join(takenIDs(got), " ") }

// fst is a fair key's state as the scripts store it: its running takings,
// its turn's credit left, where it is (0 out, 1 in turn, 2 held by its
// limit).
func fst(running, credit, where int) string {
	return strconv.Itoa(running*4096 + credit*4 + where)
}

// The first task of a key puts the key in turn (the ring) and wakes the
// workers; more tasks of a key in turn join its list and nothing else.
func TestFairEnqueue(t *testing.T) {
	t.Parallel()
	e := fairEnv(t, rdb.KeyLimits{})
	before := e.dump(t)
	l := e.listen(t)
	e.fairEnq(t, "A", "a1", "a2")
	e.fairEnq(t, "B", "b1")
	e.fairEnq(t, "A", "a3")
	e.checkState(t, before, func(e *env) state {
		return before.with(
			e.q.Task("a1"), fairQueued("A", "a1"), e.q.Task("a2"), fairQueued("A", "a2"),
			e.q.Task("a3"), fairQueued("A", "a3"), e.q.Task("b1"), fairQueued("B", "b1"),
			e.q.FairListPrefix+"A", list{"a1", "a2", "a3"}, e.q.FairListPrefix+"B", list{"b1"},
			e.q.FairRing, list{"A", "B"},
			e.q.FairState, hash{"p:": "1 0", "s:A": fst(0, 0, 1), "s:B": fst(0, 0, 1), "n": "4", "k": "2"})
	})
	checkPubs(t, l.collect(t, e), []msg{{"wake", "2"}, {"wake", "1"}, {"wake", "1"}})
}

// A take serves the keys in turn, after the waiting list (tasks with no
// key): each key of weight w starts up to w tasks per turn, within its
// limit; a lone key gets every slot asked for.
func TestFairTake(t *testing.T) {
	t.Parallel()
	t.Run("keys take turns", func(t *testing.T) {
		t.Parallel()
		e := fairEnv(t, rdb.KeyLimits{})
		e.fairEnq(t, "A", "a1", "a2", "a3")
		e.fairEnq(t, "B", "b1")
		e.fairEnq(t, "C", "c1", "c2")
		before := e.dump(t)
		got := e.fairTake(t, "W", 4)
		if joined(got) != "a1 a2 b1 c1" {
			t.Fatalf("took %q, want a1 a2 b1 c1 (A twice: the ring went round)", joined(got))
		}
		pid := func(i int) string { return got[i].PID }
		e.checkState(t, before, func(e *env) state {
			return before.with(
				e.q.Task("a1"), fairActive("A", "a1", "W", pid(0)), e.q.Task("a2"), fairActive("A", "a2", "W", pid(1)),
				e.q.Task("b1"), fairActive("B", "b1", "W", pid(2)), e.q.Task("c1"), fairActive("C", "c1", "W", pid(3)),
				e.q.FairListPrefix+"A", list{"a3"}, e.q.FairListPrefix+"B", nil, e.q.FairListPrefix+"C", list{"c2"},
				// B's list ran out exactly: it stays in turn until a take finds it empty.
				e.q.FairRing, list{"B", "C", "A"},
				e.q.FairState, hash{"p:": "1 0", "s:A": fst(2, 0, 1), "s:B": fst(1, 0, 1), "s:C": fst(1, 0, 1), "n": "2", "k": "3"},
				e.q.WorkerQueue("W"), hash{pid(0): "a1", pid(1): "a2", pid(2): "b1", pid(3): "c1"},
				e.q.Holders, set{"W"}, e.q.Seq, str(pid(3)))
		})
		if got := e.fairTake(t, "W", 1); joined(got) != "c2" {
			t.Fatalf("took %q, want c2 (B ran dry, C is next)", joined(got))
		}
		if r := e.strs(t, "LRANGE", e.q.FairRing, 0, -1); !reflect.DeepEqual(r, []string{"A", "C"}) {
			t.Errorf("ring %v, want [A C]: B out (found empty), C's turn over", r)
		}
	})
	t.Run("a lone key gets the whole take", func(t *testing.T) {
		t.Parallel()
		e := fairEnv(t, rdb.KeyLimits{})
		e.fairEnq(t, "A", "a1", "a2", "a3")
		if got := e.fairTake(t, "W", 10); joined(got) != "a1 a2 a3" {
			t.Fatalf("took %q", joined(got))
		}
		if n := e.do(t, "EXISTS", e.q.FairRing); n != int64(0) {
			t.Errorf("the ring is left with a key whose list ran dry")
		}
		if s := e.field2(t, e.q.FairState, "s:A"); s != fst(3, 0, 0) {
			t.Errorf("A's state %s, want %s (3 running, out of turn)", s, fst(3, 0, 0))
		}
	})
	t.Run("tasks with no key first", func(t *testing.T) {
		t.Parallel()
		e := fairEnv(t, rdb.KeyLimits{})
		e.fairEnq(t, "A", "a1")
		e.enqueue(t, "p1")
		if got := e.fairTake(t, "W", 1); joined(got) != "p1" {
			t.Fatalf("took %q, want p1", joined(got))
		}
		if got := e.fairTake(t, "W", 1); joined(got) != "a1" {
			t.Fatalf("took %q, want a1", joined(got))
		}
		if e.field(t, "p1", rdb.FieldFairPID) != "" {
			t.Errorf("a task with no key was counted")
		}
	})
	t.Run("a key runs at most its limit", func(t *testing.T) {
		t.Parallel()
		e := fairEnv(t, rdb.KeyLimits{MaxRunning: 2})
		e.fairEnq(t, "A", "a1", "a2", "a3", "a4")
		e.fairEnq(t, "B", "b1")
		if got := e.fairTake(t, "W", 10); joined(got) != "a1 a2 b1" {
			t.Fatalf("took %q, want a1 a2 b1", joined(got))
		}
		if got := e.fairTake(t, "X", 10); len(got) != 0 {
			t.Fatalf("another worker took %q past A's limit", joined(got))
		}
		if s := e.field2(t, e.q.FairState, "s:A"); s != fst(2, 0, 2) {
			t.Errorf("A's state %s, want %s (2 running, held)", s, fst(2, 0, 2))
		}
		if r := e.strs(t, "LRANGE", e.q.FairRing, 0, -1); len(r) != 0 {
			t.Errorf("ring %v, want empty: A held, B empty", r)
		}
	})
	t.Run("a ring longer than a take reads goes round in order", func(t *testing.T) {
		t.Parallel()
		e := fairEnv(t, rdb.KeyLimits{})
		var want []string
		for k := range 40 {
			key := "k" + strconv.Itoa(k)
			e.fairEnq(t, key, key+"a", key+"b")
			want = append(want, key+"a")
		}
		for k := range 40 {
			want = append(want, "k"+strconv.Itoa(k)+"b")
		}
		var got []string
		for range 80 {
			got = append(got, joined(e.fairTake(t, "W", 1)))
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("one at a time: %v, want %v", got, want)
		}
		// Each key stays in turn until a take finds its list empty: a take
		// that finds nothing takes up to 16 such keys out.
		for range 3 {
			if got := e.fairTake(t, "W", 1); len(got) != 0 {
				t.Errorf("took %q from empty keys", joined(got))
			}
		}
		if n := e.do(t, "LLEN", e.q.FairRing); n != int64(0) {
			t.Errorf("the ring holds %d keys once every list ran dry", n)
		}
	})
	t.Run("a key's weight is its tasks per turn", func(t *testing.T) {
		t.Parallel()
		e := fairEnv(t, rdb.KeyLimits{})
		if err := e.st.SetKeyLimits(e.ctx, e.q, "A", rdb.KeyLimits{Weight: 3}); err != nil {
			t.Fatal(err)
		}
		e.fairEnq(t, "A", "a1", "a2", "a3", "a4", "a5")
		e.fairEnq(t, "B", "b1", "b2", "b3")
		var order []string
		for range 8 {
			order = append(order, joined(e.fairTake(t, "W", 1)))
		}
		if got := strings.Join(order, " "); got != "a1 a2 a3 b1 a4 a5 b2 b3" {
			t.Errorf("one at a time: %s, want a1 a2 a3 b1 a4 a5 b2 b3", got)
		}
	})
	t.Run("a lone key takes turn after turn, its credit kept across takes", func(t *testing.T) {
		t.Parallel()
		e := fairEnv(t, rdb.KeyLimits{Weight: 3})
		e.fairEnq(t, "A", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9")
		for _, c := range []struct {
			max   int
			taken string
			state string
		}{
			{4, "a1 a2 a3 a4", fst(4, 2, 1)}, // a turn of 3, then 1 of the next: 2 left
			{1, "a5", fst(5, 1, 1)},          // within that turn
			{4, "a6 a7 a8 a9", fst(9, 0, 1)}, // its last, then one full turn: just over
		} {
			if got := joined(e.fairTake(t, "W", c.max)); got != c.taken {
				t.Fatalf("a take of %d: %s, want %s", c.max, got, c.taken)
			}
			if got := e.field2(t, e.q.FairState, "s:A"); got != c.state {
				t.Fatalf("after taking %s: state %s, want %s", c.taken, got, c.state)
			}
		}
	})
}

// field2 reads field f of hash key.
func (e *env) field2(t *testing.T, key, f string) string {
	t.Helper()
	v, _ := redis.String(e.c.Do("HGET", key, f))
	return v
}

// Every way a taking ends gives its key's slot back in the same script,
// once: a key held by its limit goes back in turn (with a wake-up), and
// a task given back or requeued goes to the front of its key's list.
func TestFairEnd(t *testing.T) {
	t.Parallel()
	// seed: A's limit is 1, B has none; W runs a1 (A held, a2 waits) and b1
	// (B's list ran dry: out of turn).
	seed := func(t *testing.T) (*env, string, string) {
		e := fairEnv(t, rdb.KeyLimits{})
		if err := e.st.SetKeyLimits(e.ctx, e.q, "A", rdb.KeyLimits{MaxRunning: 1}); err != nil {
			t.Fatal(err)
		}
		e.fairEnq(t, "A", "a1", "a2")
		e.fairEnq(t, "B", "b1")
		got := e.fairTake(t, "W", 10)
		if joined(got) != "a1 b1" {
			t.Fatalf("took %q, want a1 b1", joined(got))
		}
		return e, got[0].PID, got[1].PID
	}
	t.Run("done frees the slot and puts the held key in turn", func(t *testing.T) {
		t.Parallel()
		e, pa, pb := seed(t)
		before := e.dump(t)
		l := e.listen(t)
		e.finish(t, "W", pa, "a1")
		e.checkState(t, before, func(e *env) state {
			return before.with(e.q.Task("a1"), nil, e.q.WorkerQueue("W"), hash{pb: "b1"},
				e.q.FairRing, list{"A"},
				e.q.FairState, hash{"p:": "1 0", "p:A": "1 1", "s:A": fst(0, 0, 1), "s:B": fst(1, 0, 0), "n": "1", "k": "1"})
		})
		checkPubs(t, l.collect(t, e), []msg{{"wake", "1"}})
		if got := e.fairTake(t, "X", 10); joined(got) != "a2" {
			t.Fatalf("took %q, want a2 (B's list is empty)", joined(got))
		}
	})
	t.Run("a key with nothing left is forgotten", func(t *testing.T) {
		t.Parallel()
		e, pa, pb := seed(t)
		e.finish(t, "W", pb, "b1")
		if n := e.do(t, "HEXISTS", e.q.FairState, "s:B"); n != int64(0) {
			t.Errorf("B's state is kept with nothing running or waiting")
		}
		e.finish(t, "W", pa, "a1")
	})
	t.Run("give back: the front of its key's list", func(t *testing.T) {
		t.Parallel()
		e, pa, _ := seed(t)
		before := e.dump(t)
		l := e.listen(t)
		e.giveBack(t, "W", pa, "a1")
		e.checkState(t, before, func(e *env) state {
			w := before[e.q.WorkerQueue("W")].(hash)
			return before.with(e.q.Task("a1"), fairQueued("A", "a1").with(rdb.FieldFairPID, pa).started(),
				e.q.WorkerQueue("W"), w.without(pa), e.q.FairListPrefix+"A", list{"a1", "a2"},
				e.q.FairRing, list{"A"}, e.q.FairState, hash{"p:": "1 0", "p:A": "1 1", "s:A": fst(0, 0, 1), "s:B": fst(1, 0, 0), "n": "2", "k": "1"})
		})
		checkPubs(t, l.collect(t, e), []msg{{"wake", "2"}})
	})
	t.Run("a lost end frees nothing", func(t *testing.T) {
		t.Parallel()
		e, pa, _ := seed(t)
		before := e.dump(t)
		got, err := e.st.End(e.ctx, e.q, 0, []rdb.Ending{rdb.Done(rdb.KindTask, "Z", pa, "a1", nil)})
		if err != nil || got[0].Outcome != rdb.OutcomeLost {
			t.Fatalf("End by a non-owner: %+v, %v; want lost", got, err)
		}
		e.checkState(t, before, nil)
	})
	t.Run("retry: scheduled, then the back of its key's list", func(t *testing.T) {
		t.Parallel()
		e, pa, _ := seed(t)
		e.fairEnq(t, "A", "a3")
		e.endTask(t, 0, rdb.Retry(rdb.KindTask, "W", pa, "a1", 0, "boom"))
		if s := e.field2(t, e.q.FairState, "s:A"); s != fst(0, 0, 1) {
			t.Errorf("A's state %s after the retry, want %s", s, fst(0, 0, 1))
		}
		if _, err := e.st.Move(e.ctx, e.q, 100); err != nil {
			t.Fatal(err)
		}
		if l := e.strs(t, "LRANGE", e.q.FairListPrefix+"A", 0, -1); !reflect.DeepEqual(l, []string{"a2", "a3", "a1"}) {
			t.Errorf("A's list %v, want [a2 a3 a1]", l)
		}
		if w := e.waitingIDs(t); len(w) != 0 {
			t.Errorf("waiting list %v: a key's task went to the queue's list", w)
		}
	})
	t.Run("requeue of a dead worker: slots back, tasks to the front", func(t *testing.T) {
		t.Parallel()
		e, _, _ := seed(t)
		before := e.dump(t)
		l := e.listen(t)
		e.requeue(t, true, "W")
		e.checkState(t, before, func(e *env) state {
			return before.with(
				e.q.Task("a1"), fairQueued("A", "a1").with(rdb.FieldFairPID, before[e.q.Task("a1")].(hash)["fc"], "c", "1", "cw", "W").started(),
				e.q.Task("b1"), fairQueued("B", "b1").with(rdb.FieldFairPID, before[e.q.Task("b1")].(hash)["fc"], "c", "1", "cw", "W").started(),
				e.q.WorkerQueue("W"), nil, e.q.Holders, nil,
				e.q.FairListPrefix+"A", list{"a1", "a2"}, e.q.FairListPrefix+"B", list{"b1"},
				e.q.FairRing, list{"B", "A"}, e.q.FairState, hash{"p:": "1 0", "p:A": "1 1", "s:A": fst(0, 0, 1), "s:B": fst(0, 0, 1), "n": "3", "k": "2"})
		})
		checkPubs(t, l.collect(t, e), []msg{{"wake", "3"}})
		e.requeue(t, true, "W") // again: nothing left, nothing freed twice
		if s := e.field2(t, e.q.FairState, "s:A"); s != fst(0, 0, 1) {
			t.Errorf("A's state %s after a second requeue, want %s", s, fst(0, 0, 1))
		}
	})
	t.Run("cancel of a waiting task: out of its key's list", func(t *testing.T) {
		t.Parallel()
		e, _, _ := seed(t)
		e.cancel(t, "a2")
		if l := e.strs(t, "LRANGE", e.q.FairListPrefix+"A", 0, -1); len(l) != 0 {
			t.Errorf("A's list %v after the cancel of a2", l)
		}
		if e.field(t, "a2", rdb.FieldState) != "" {
			t.Errorf("a2 is still there (no retention: deleted)")
		}
	})
}

// fairCommands runs take (of max) and the end of what it took, done, on
// e's queue (fair or not), and returns the commands each ran in Redis.
func fairCommands(t *testing.T, e *env, a *keyAuditor, fair bool, max int) (take, end, n int) {
	t.Helper()
	st := rdb.NewStore(e.pool, e.ns) // a plain pool: no cluster-safe reads
	var got []rdb.Taken
	c := scriptCommands(t, a, func() {
		var err error
		got, err = st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: max, Fair: fair})
		if err != nil {
			t.Fatal(err)
		}
	})
	take = c["take"]
	c = scriptCommands(t, a, func() {
		es := make([]rdb.Ending, len(got))
		for i, g := range got {
			es[i] = rdb.Done(rdb.KindTask, "W", g.PID, g.ID, nil)
		}
		if _, err := st.End(e.ctx, e.q, 0, es); err != nil {
			t.Fatal(err)
		}
	})
	return take, c["end"], len(got)
}

// What a fair queue's take and end cost beside a plain queue's, counted
// inside Redis (MONITOR), per task: a take of k tasks of k keys (each
// task's key list popped, the ring and the keys' states read and written
// once per take) and their ends (one HINCRBY per key). The plain queue's
// hot path is TestPlainHotPathCommandsByMonitor's.
func TestFairCommands(t *testing.T) {
	for _, c := range []struct {
		name      string
		keys, k   int
		take, end int // more than the plain queue's, for the k tasks
	}{
		// 1 task, 1 key with a backlog: LRANGE of the ring, HMGET of the
		// states, LPOP of its list, HSET of its state (the ring is left
		// as it is); HINCRBY at its end.
		{"one task, one key", 1, 1, 4, 1},
		// 1 task among 100 keys: the ring moves the key to its back
		// (LTRIM, RPUSH).
		{"one task of 100 keys", 100, 1, 6, 1},
		// 10 tasks of 10 keys, one LPOP each; the ring goes round whole.
		{"10 tasks of 10 keys", 10, 10, 13, 10},
		// 10 tasks of one key's backlog: one LPOP.
		{"10 tasks of one key", 1, 10, 4, 1},
		// A key with a rate (not reached): its log's ZCOUNT when the take
		// reaches it, then ZREMRANGEBYSCORE, ZADD and PEXPIRE of its starts.
		{"one task, one key with a rate", 1, 1, 8, 1},
		{"10 tasks of 10 keys with a rate", 10, 10, 53, 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			plain := newEnv(t)
			pa := newKeyAuditor(t, plain.ns)
			for i := range c.k + 1 {
				plain.enqueue(t, "p"+strconv.Itoa(i))
			}
			pt, pe, _ := fairCommands(t, plain, pa, false, c.k)

			var per rdb.KeyLimits
			if strings.HasSuffix(c.name, "with a rate") {
				per = rdb.KeyLimits{Rate: 1000, PeriodMs: 60_000}
			}
			e := fairEnv(t, per)
			a := newKeyAuditor(t, e.ns)
			for k := range c.keys {
				key := "k" + strconv.Itoa(k)
				e.fairEnq(t, key, key+"a", key+"b", key+"c", key+"d", key+"e", key+"f", key+"g", key+"h", key+"i", key+"j", key+"k")
			}
			ft, fe, n := fairCommands(t, e, a, true, c.k)
			if n != c.k {
				t.Fatalf("took %d, want %d", n, c.k)
			}
			t.Logf("take of %d: plain %d, fair %d; end: plain %d, fair %d; %.1f more per task",
				c.k, pt, ft, pe, fe, float64(ft-pt+fe-pe)/float64(c.k))
			if ft-pt != c.take || fe-pe != c.end {
				t.Errorf("fair take %d and end %d commands more than a plain queue's, want %d and %d",
					ft-pt, fe-pe, c.take, c.end)
			}
		})
	}
}

// fairTruth counts what the fair state hash's counts stand for, the slow
// way: the ids in every key's list of e's queue (SCAN) and the keys whose
// state is not out.
func (e *env) fairTruth(t *testing.T) (n, k int64) {
	t.Helper()
	keys, err := redistest.Keys(e.ctx, e.c, e.ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range keys {
		if strings.HasPrefix(key, e.q.FairListPrefix) {
			l, _ := redis.Int64(e.c.Do("LLEN", key))
			n += l
		}
	}
	st, _ := redis.StringMap(e.c.Do("HGETALL", e.q.FairState))
	for f, v := range st {
		if x, _ := strconv.Atoi(v); strings.HasPrefix(f, "s:") && x%4 != 0 {
			k++
		}
	}
	return n, k
}

// checkFairCounts checks the fair state hash's counts, and Stats' Waiting
// and Keys, against fairTruth.
func (e *env) checkFairCounts(t *testing.T, step string) {
	t.Helper()
	n, k := e.fairTruth(t)
	if got := e.field2(t, e.q.FairState, "n"); got != strconv.FormatInt(n, 10) && !(n == 0 && got == "") {
		t.Errorf("%s: count n %q, want %d (the ids in the keys' lists)", step, got, n)
	}
	if got := e.field2(t, e.q.FairState, "k"); got != strconv.FormatInt(k, 10) && !(k == 0 && got == "") {
		t.Errorf("%s: count k %q, want %d (the keys not out)", step, got, k)
	}
	st, err := e.st.Stats(e.ctx, []rdb.QueueKeys{e.q})
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := redis.Int64(e.c.Do("LLEN", e.q.Waiting))
	if st[0].Waiting != plain+n || st[0].Keys != k {
		t.Errorf("%s: Stats waiting %d, keys %d; want %d and %d", step, st[0].Waiting, st[0].Keys, plain+n, k)
	}
}

// The fair state hash counts the ids in the keys' lists (Stats adds them to
// Waiting) and the keys in turn or held (Stats' Keys) exactly, after every
// kind of move, on a store that pops (a single Redis) and on one that reads
// and trims (a cluster's).
func TestFairCounts(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 700<<10)
	tests := []struct {
		name string
		// seed prepares e's queue (A: a1..a4, limit 2; B: b1; C: c1, c2)
		// and returns the operation.
		seed func(t *testing.T, e *env, take func(w string, max int) []rdb.Taken) func()
	}{
		{"enqueue to a new key and to a key in turn", func(t *testing.T, e *env, take func(string, int) []rdb.Taken) func() {
			return func() { e.fairEnq(t, "D", "d1"); e.fairEnq(t, "A", "a5", "a6") }
		}},
		{"a take across keys", func(t *testing.T, e *env, take func(string, int) []rdb.Taken) func() {
			return func() { take("W", 4) }
		}},
		{"a take that drains keys and holds one", func(t *testing.T, e *env, take func(string, int) []rdb.Taken) func() {
			return func() { take("W", 10) }
		}},
		{"a take that finds a key in turn empty", func(t *testing.T, e *env, take func(string, int) []rdb.Taken) func() {
			e.cancel(t, "b1")
			return func() { take("W", 10) }
		}},
		{"a take that puts ids back past its byte bound", func(t *testing.T, e *env, take func(string, int) []rdb.Taken) func() {
			if _, err := e.st.EnqueueKey(e.ctx, e.q, "E", []string{"e1", "e2"}, [][]byte{[]byte(big), []byte(big)},
				[]string{"1", "1"}, nil); err != nil {
				t.Fatal(err)
			}
			return func() {
				// e2 is past the bound: back in E's list.
				if got := joined(take("W", 10)); got != "a1 a2 b1 c1 c2 e1" {
					t.Fatalf("took %q", got)
				}
			}
		}},
		{"done, give back and retry", func(t *testing.T, e *env, take func(string, int) []rdb.Taken) func() {
			got := take("W", 3)
			return func() {
				e.finish(t, "W", got[0].PID, got[0].ID)
				e.giveBack(t, "W", got[1].PID, got[1].ID)
				e.endTask(t, 0, rdb.Retry(rdb.KindTask, "W", got[2].PID, got[2].ID, 0, "boom"))
			}
		}},
		{"a retry made due, another promoted", func(t *testing.T, e *env, take func(string, int) []rdb.Taken) func() {
			got := take("W", 2)
			e.endTask(t, 0, rdb.Retry(rdb.KindTask, "W", got[0].PID, got[0].ID, 0, "boom"))
			e.endTask(t, 0, rdb.Retry(rdb.KindTask, "W", got[1].PID, got[1].ID, 3_600_000, "boom"))
			return func() {
				if _, err := e.st.Move(e.ctx, e.q, 100); err != nil {
					t.Fatal(err)
				}
				if ok, err := e.st.Promote(e.ctx, e.q, got[1].ID); err != nil || !ok {
					t.Fatalf("promote: %v %v", ok, err)
				}
			}
		}},
		{"a dead worker's takings requeued, twice", func(t *testing.T, e *env, take func(string, int) []rdb.Taken) func() {
			take("W", 10)
			return func() { e.requeue(t, true, "W"); e.requeue(t, true, "W") }
		}},
		{"a release", func(t *testing.T, e *env, take func(string, int) []rdb.Taken) func() {
			take("W", 3)
			return func() {
				if _, _, err := e.st.Release(e.ctx, e.q, "W", nil); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"a zombie's end changes nothing", func(t *testing.T, e *env, take func(string, int) []rdb.Taken) func() {
			got := take("W", 1)
			e.requeue(t, true, "W")
			return func() {
				out, err := e.st.End(e.ctx, e.q, 0, []rdb.Ending{rdb.Done(rdb.KindTask, "W", got[0].PID, got[0].ID, nil)})
				if err != nil || out[0].Outcome != rdb.OutcomeLost {
					t.Fatalf("zombie end: %+v %v", out, err)
				}
			}
		}},
		{"cancels of waiting tasks", func(t *testing.T, e *env, take func(string, int) []rdb.Taken) func() {
			return func() { e.cancel(t, "a3"); e.cancel(t, "c2") }
		}},
		{"a dead task requeued to its key's list", func(t *testing.T, e *env, take func(string, int) []rdb.Taken) func() {
			got := take("W", 1)
			e.endTask(t, 0, rdb.Dead(rdb.KindTask, "W", got[0].PID, got[0].ID, "bad"))
			return func() {
				if _, _, err := e.st.DeadIDs(e.ctx, e.q, rdb.DeadRequeue, []string{got[0].ID}); err != nil {
					t.Fatal(err)
				}
			}
		}},
	}
	for _, safe := range []bool{false, true} {
		for _, tc := range tests {
			t.Run(fmt.Sprintf("%s/safe=%v", tc.name, safe), func(t *testing.T) {
				t.Parallel()
				e := fairEnv(t, rdb.KeyLimits{})
				if err := e.st.SetKeyLimits(e.ctx, e.q, "A", rdb.KeyLimits{MaxRunning: 2}); err != nil {
					t.Fatal(err)
				}
				e.fairEnq(t, "A", "a1", "a2", "a3", "a4")
				e.fairEnq(t, "B", "b1")
				e.fairEnq(t, "C", "c1", "c2")
				st := rdb.NewStore(e.pool, e.ns) // pops
				if safe {
					st = e.st // reads, then trims
				}
				take := func(w string, max int) []rdb.Taken {
					t.Helper()
					got, err := st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: w, Until: math.MaxInt64, Max: max, Fair: true})
					if err != nil {
						t.Fatal(err)
					}
					return got
				}
				op := tc.seed(t, e, take)
				e.checkFairCounts(t, "seeded")
				op()
				e.checkFairCounts(t, "after")
			})
		}
	}
}

// A bulk delete or cancel of a fair queue's keys' lists empties them front
// first, BulkStep tasks per chunk, and takes them off the count of ids in
// the lists; the keys' states and the ring stay (a take takes an empty key
// out of turn).
func TestFairBulk(t *testing.T) {
	t.Parallel()
	seed := func(t *testing.T) (*env, string) {
		e := fairEnv(t, rdb.KeyLimits{})
		if err := e.st.SetKeyLimits(e.ctx, e.q, "A", rdb.KeyLimits{MaxRunning: 1}); err != nil {
			t.Fatal(err)
		}
		e.fairEnq(t, "A", "a1", "a2", "a3")
		e.fairEnq(t, "B", "b1", "b2")
		got := e.fairTake(t, "W", 1)
		return e, got[0].PID
	}
	t.Run("delete", func(t *testing.T) {
		t.Parallel()
		e, _ := seed(t)
		before := e.dump(t)
		n, err := e.st.BulkFair(e.ctx, e.q, []string{"A", "B"}, rdb.BulkDelete)
		if err != nil || n != 4 {
			t.Fatalf("BulkFair = %d, %v; want 4", n, err)
		}
		e.checkState(t, before, func(e *env) state {
			fs := before[e.q.FairState].(hash)
			return before.with(e.q.Task("a2"), nil, e.q.Task("a3"), nil, e.q.Task("b1"), nil, e.q.Task("b2"), nil,
				e.q.FairListPrefix+"A", nil, e.q.FairListPrefix+"B", nil, e.q.FairState, fs.without("n"))
		})
		e.checkFairCounts(t, "deleted")
	})
	t.Run("cancel, retained", func(t *testing.T) {
		t.Parallel()
		e, _ := seed(t)
		e.setCfg(t, e.q, "retention", 60_000)
		if n, err := e.st.BulkFair(e.ctx, e.q, []string{"A", "B"}, rdb.BulkCancel); err != nil || n != 4 {
			t.Fatalf("BulkFair = %d, %v; want 4", n, err)
		}
		for _, id := range []string{"a2", "a3", "b1", "b2"} {
			if s := e.field(t, id, rdb.FieldState); s != "cancelled" {
				t.Errorf("%s is %q, want cancelled", id, s)
			}
		}
		if r := e.strs(t, "ZRANGE", e.q.Retained, 0, -1); len(r) != 4 {
			t.Errorf("retained %v, want the 4 cancelled", r)
		}
		e.checkFairCounts(t, "cancelled")
	})
	t.Run("in chunks of BulkStep", func(t *testing.T) {
		t.Parallel()
		e := fairEnv(t, rdb.KeyLimits{})
		ids := make([]string, rdb.BulkStep+10)
		for i := range ids {
			ids[i] = fmt.Sprintf("a%03d", i)
		}
		e.fairEnq(t, "A", ids...)
		e.fairEnq(t, "B", "b1")
		if n, err := e.st.BulkFair(e.ctx, e.q, []string{"A", "B"}, rdb.BulkDelete); err != nil || n != rdb.BulkStep {
			t.Fatalf("first chunk: %d, %v; want %d", n, err, rdb.BulkStep)
		}
		if l := e.strs(t, "LRANGE", e.q.FairListPrefix+"A", 0, -1); len(l) != 10 || l[0] != ids[rdb.BulkStep] {
			t.Errorf("A's list after a chunk: %v, want the last 10", l)
		}
		e.checkFairCounts(t, "a chunk")
		if n, err := e.st.BulkFair(e.ctx, e.q, []string{"A", "B"}, rdb.BulkDelete); err != nil || n != 11 {
			t.Fatalf("second chunk: %d, %v; want 11", n, err)
		}
		e.checkFairCounts(t, "two chunks")
	})
}

// A key with a rate starts at most Rate tasks in any window of its period,
// across every take: the take that reaches its rate takes it out of turn
// into the zset of keys waiting out their rate, scored by when the oldest
// start in its window leaves it; a take after that time puts it back in
// turn, with a wake-up.
func TestFairRate(t *testing.T) {
	t.Parallel()
	const period = 60_000
	// seed: A starts at most 2 per minute, B has no rate.
	seed := func(t *testing.T) *env {
		e := fairEnv(t, rdb.KeyLimits{})
		if err := e.st.SetKeyLimits(e.ctx, e.q, "A", rdb.KeyLimits{Rate: 2, PeriodMs: period}); err != nil {
			t.Fatal(err)
		}
		e.fairEnq(t, "A", "a1", "a2", "a3", "a4", "a5")
		e.fairEnq(t, "B", "b1", "b2", "b3")
		return e
	}
	t.Run("a take stops a key at its rate", func(t *testing.T) {
		t.Parallel()
		e := seed(t)
		before := e.dump(t)
		var got []rdb.Taken
		e.call(t, func() { got = e.fairTake(t, "W", 10) })
		if joined(got) != "a1 a2 b1 b2 b3" {
			t.Fatalf("took %q, want a1 a2 b1 b2 b3 (A's rate is 2)", joined(got))
		}
		pid := func(i int) string { return got[i].PID }
		e.checkState(t, before, func(e *env) state {
			fs := before[e.q.FairState].(hash)
			return before.with(
				e.q.Task("a1"), fairActive("A", "a1", "W", pid(0)), e.q.Task("a2"), fairActive("A", "a2", "W", pid(1)),
				e.q.Task("b1"), fairActive("B", "b1", "W", pid(2)), e.q.Task("b2"), fairActive("B", "b2", "W", pid(3)),
				e.q.Task("b3"), fairActive("B", "b3", "W", pid(4)),
				// B ran dry: out; A waits out its rate.
				e.q.FairListPrefix+"A", list{"a3", "a4", "a5"}, e.q.FairListPrefix+"B", nil, e.q.FairRing, nil,
				e.q.FairState, fs.with("s:A", fst(2, 0, 3), "s:B", fst(3, 0, 0), "n", "3", "k", "1", "tw", "@now+60000"),
				e.q.FairTimed, zset{{"A", "@now+60000"}},
				e.q.FairRateLogPrefix+"A", ttl(unordered{{pid(0), "@now"}, {pid(1), "@now"}}, period),
				e.q.WorkerQueue("W"), hash{pid(0): "a1", pid(1): "a2", pid(2): "b1", pid(3): "b2", pid(4): "b3"},
				e.q.Holders, set{"W"}, e.q.Seq, str(pid(4)))
		})
		// Its ends free its slots but not its rate: it stays out of turn.
		for i := range got {
			e.finish(t, "W", got[i].PID, got[i].ID)
		}
		if got := e.fairTake(t, "X", 10); len(got) != 0 {
			t.Fatalf("another worker took %q past A's rate", joined(got))
		}
		if s := e.field2(t, e.q.FairState, "s:A"); s != fst(0, 0, 3) {
			t.Errorf("A's state %s, want %s (waiting out its rate)", s, fst(0, 0, 3))
		}
	})
	t.Run("its time come, a take puts it back in turn", func(t *testing.T) {
		t.Parallel()
		e := seed(t)
		got := e.fairTake(t, "W", 10)
		for i := range got {
			e.finish(t, "W", got[i].PID, got[i].ID)
		}
		// A minute on: the starts left the window, A is due.
		old := e.now(t) - period - 1
		e.do(t, "ZADD", e.q.FairRateLogPrefix+"A", "XX", old, got[0].PID, old, got[1].PID)
		e.do(t, "ZADD", e.q.FairTimed, old+period, "A")
		e.do(t, "HSET", e.q.FairState, "tw", old+period)
		before := e.dump(t)
		l := e.listen(t)
		if got := e.fairTake(t, "X", 10); len(got) != 0 {
			t.Fatalf("took %q, want nothing (A goes back at the ring's back)", joined(got))
		}
		e.checkState(t, before, func(e *env) state {
			fs := before[e.q.FairState].(hash)
			return before.with(e.q.FairTimed, nil, e.q.FairRing, list{"A"},
				e.q.FairState, fs.with("s:A", fst(0, 0, 1)).without("tw"))
		})
		checkPubs(t, l.collect(t, e), []msg{{"wake", "1"}})
		if got := e.fairTake(t, "X", 10); joined(got) != "a3 a4" {
			t.Fatalf("took %q, want a3 a4: its rate again", joined(got))
		}
	})
	t.Run("its time come, a take of other keys puts it back at the ring's back", func(t *testing.T) {
		t.Parallel()
		e := seed(t)
		got := e.fairTake(t, "W", 10)
		old := e.now(t) - period - 1
		e.do(t, "ZADD", e.q.FairRateLogPrefix+"A", "XX", old, got[0].PID, old, got[1].PID)
		e.do(t, "ZADD", e.q.FairTimed, old+period, "A")
		e.do(t, "HSET", e.q.FairState, "tw", old+period)
		e.fairEnq(t, "B", "b4", "b5")
		if got := e.fairTake(t, "X", 1); joined(got) != "b4" {
			t.Fatalf("took %q, want b4", joined(got))
		}
		if r := e.strs(t, "LRANGE", e.q.FairRing, 0, -1); !reflect.DeepEqual(r, []string{"B", "A"}) {
			t.Errorf("ring %v, want [B A]: A back behind the key in turn", r)
		}
		if got := e.fairTake(t, "X", 10); joined(got) != "b5 a3 a4" {
			t.Fatalf("took %q, want b5 a3 a4", joined(got))
		}
	})
	t.Run("a key at its limit is held, not timed", func(t *testing.T) {
		t.Parallel()
		e := fairEnv(t, rdb.KeyLimits{})
		if err := e.st.SetKeyLimits(e.ctx, e.q, "A", rdb.KeyLimits{MaxRunning: 1, Rate: 1, PeriodMs: period}); err != nil {
			t.Fatal(err)
		}
		e.fairEnq(t, "A", "a1", "a2")
		if got := e.fairTake(t, "W", 10); joined(got) != "a1" {
			t.Fatalf("took %q", joined(got))
		}
		if s := e.field2(t, e.q.FairState, "s:A"); s != fst(1, 0, 2) {
			t.Errorf("A's state %s, want %s: held by its limit (its end puts it back, the next take times it)", s, fst(1, 0, 2))
		}
	})
	t.Run("a rate is a policy's, the queue's default too", func(t *testing.T) {
		t.Parallel()
		e := fairEnv(t, rdb.KeyLimits{Rate: 1, PeriodMs: period})
		e.fairEnq(t, "A", "a1", "a2")
		e.fairEnq(t, "B", "b1", "b2")
		if got := e.fairTake(t, "W", 10); joined(got) != "a1 b1" {
			t.Fatalf("took %q, want a1 b1: one each", joined(got))
		}
		if err := e.st.SetKeyLimits(e.ctx, e.q, "C", rdb.KeyLimits{Weight: 1}); err != nil {
			t.Fatal(err)
		}
		e.fairEnq(t, "C", "c1", "c2")
		if got := e.fairTake(t, "W", 10); joined(got) != "c1 c2" {
			t.Fatalf("took %q, want c1 c2: C's own policy has no rate", joined(got))
		}
	})
}

// Stats reads the front of the lists of a fair queue's first FairHeadKeys
// keys in turn, in the ring's order, and no more: a read costs the same
// however many keys wait. A key whose list is empty adds nothing.
func TestFairHeads(t *testing.T) {
	t.Parallel()
	e := fairEnv(t, rdb.KeyLimits{})
	keys := rdb.FairHeadKeys + 5
	for k := range keys {
		key := "k" + strconv.Itoa(k)
		e.fairEnq(t, key, key+"a", key+"b")
	}
	st, err := e.st.Stats(e.ctx, []rdb.QueueKeys{e.q})
	if err != nil {
		t.Fatal(err)
	}
	if got := st[0].FairHeads; len(got) != rdb.FairHeadKeys || got[0] != "k0a" || got[len(got)-1] != "k"+strconv.Itoa(rdb.FairHeadKeys-1)+"a" {
		t.Fatalf("FairHeads = %d ids (%v first), want the fronts of the first %d keys, k0a first", len(got), got[:min(len(got), 1)], rdb.FairHeadKeys)
	}
	if _, err := e.c.Do("DEL", e.q.FairListPrefix+"k0"); err != nil {
		t.Fatal(err)
	}
	st, err = e.st.Stats(e.ctx, []rdb.QueueKeys{e.q})
	if err != nil {
		t.Fatal(err)
	}
	if got := st[0].FairHeads; len(got) != rdb.FairHeadKeys-1 || got[0] != "k1a" {
		t.Errorf("FairHeads with k0's list empty = %d ids (%v first), want %d from k1a", len(got), got[:min(len(got), 1)], rdb.FairHeadKeys-1)
	}
	plain := newEnv(t)
	plain.enqueue(t, "p1")
	if st, err := plain.st.Stats(plain.ctx, []rdb.QueueKeys{plain.q}); err != nil || st[0].FairHeads != nil || st[0].Head != "p1" {
		t.Errorf("plain queue: Stats = %+v, %v; want head p1, no fair heads", st, err)
	}
}

// A fair queue's gates hold whatever became of the key's latest task's
// hash, and for every way a keyed task is added.
func TestFairGatesHold(t *testing.T) {
	t.Parallel()
	gated := func(t *testing.T, p rdb.KeyPolicy) *env {
		t.Helper()
		e := newEnv(t)
		p.Fair = true
		if err := e.st.WriteKeyPolicy(e.ctx, e.q, p); err != nil {
			t.Fatal(err)
		}
		return e
	}
	enq := func(t *testing.T, e *env, id string) rdb.KeyEnqueued {
		t.Helper()
		got, err := e.st.EnqueueKey(e.ctx, e.q, "A", []string{id}, [][]byte{[]byte(id)}, nil, nil)
		if err != nil || len(got) != 1 {
			t.Fatalf("EnqueueKey %s = %v, %v", id, got, err)
		}
		return got[0]
	}
	t.Run("throttle: a key at its rate drops an enqueue after its task's hash is gone", func(t *testing.T) {
		t.Parallel()
		e := gated(t, rdb.KeyPolicy{Throttle: true, PerKey: rdb.KeyLimits{Rate: 1, PeriodMs: 3_600_000}})
		enq(t, e, "a1")
		got := e.fairTake(t, "W", 1)
		e.finish(t, "W", got[0].PID, "a1") // retention 0: its hash goes
		if got := enq(t, e, "a2"); !got.Merged || got.ID != "a1" {
			t.Errorf("enqueue within A's rate window = %+v, want answered by a1", got)
		}
		if n := e.field2(t, e.q.FairState, "n"); n != "" {
			t.Errorf("%s ids wait in the keys' lists, want none", n)
		}
	})
	t.Run("a gated task's end drops its key's pointer, a throttle's does not", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			p    rdb.KeyPolicy
			kept bool
		}{{rdb.KeyPolicy{Singleton: true}, false}, {rdb.KeyPolicy{DebounceMs: 1}, false},
			{rdb.KeyPolicy{Throttle: true, PerKey: rdb.KeyLimits{Rate: 1, PeriodMs: 3_600_000}}, true}} {
			e := gated(t, c.p)
			enq(t, e, "a1")
			if c.p.DebounceMs > 0 {
				if _, err := e.st.Promote(e.ctx, e.q, "a1"); err != nil {
					t.Fatal(err)
				}
			}
			if e.field2(t, e.q.FairState, "o:A") != "a1" {
				t.Fatalf("%+v: the key's pointer does not name a1", c.p)
			}
			got := e.fairTake(t, "W", 1)
			e.finish(t, "W", got[0].PID, "a1")
			if o := e.field2(t, e.q.FairState, "o:A"); (o == "a1") != c.kept {
				t.Errorf("%+v: after a1's end the key's pointer is %q, want it kept %v", c.p, o, c.kept)
			}
		}
	})
	t.Run("singleton: EnqueueMerge's write is gated too", func(t *testing.T) {
		t.Parallel()
		e := gated(t, rdb.KeyPolicy{Singleton: true})
		enq(t, e, "a1")
		tail, err := e.st.ReadKeyTail(e.ctx, e.q, "A")
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.st.KeyMergeInto(e.ctx, e.q, "A", tail, "a2", []byte("a2"), "", nil)
		if err != nil || !got.Merged || got.ID != "a1" {
			t.Errorf("KeyMergeInto while a1 waits = %+v, %v; want answered by a1", got, err)
		}
		if n := e.field2(t, e.q.FairState, "n"); n != "1" {
			t.Errorf("%s ids wait in the keys' lists, want a1 alone", n)
		}
	})
}

// A fair queue's flags say whether any of its keys may be limited: by the
// queue's PerKey policy or by a key's own (a running limit or a rate; a
// weight limits nothing), counted once per key however often its policy is
// stored, and the workers are told when that turns.
func TestFairKeyLimitedFlag(t *testing.T) {
	flags := func(t *testing.T, e *env) rdb.QueueFlags {
		t.Helper()
		fl, err := e.st.Flags(e.ctx, []rdb.QueueKeys{e.q})
		if err != nil {
			t.Fatal(err)
		}
		return fl[0]
	}
	t.Run("a queue with weights alone is not limited", func(t *testing.T) {
		e := fairEnv(t, rdb.KeyLimits{Weight: 2})
		if err := e.st.SetKeyLimits(e.ctx, e.q, "A", rdb.KeyLimits{Weight: 5}); err != nil {
			t.Fatal(err)
		}
		if fl := flags(t, e); !fl.Fair || fl.KeyLimited {
			t.Fatalf("flags %+v, want fair and not key-limited", fl)
		}
	})
	t.Run("the queue's policy limits its keys", func(t *testing.T) {
		for _, per := range []rdb.KeyLimits{{MaxRunning: 3}, {Rate: 5, PeriodMs: 1000}} {
			e := fairEnv(t, per)
			if fl := flags(t, e); !fl.KeyLimited {
				t.Fatalf("PerKey %+v: flags %+v, want key-limited", per, fl)
			}
			if err := e.st.WriteKeyPolicy(e.ctx, e.q, rdb.KeyPolicy{Fair: true}); err != nil {
				t.Fatal(err)
			}
			if fl := flags(t, e); fl.KeyLimited {
				t.Fatalf("PerKey removed: flags %+v, want not key-limited", fl)
			}
		}
	})
	t.Run("a key's own limits count once per key", func(t *testing.T) {
		e := fairEnv(t, rdb.KeyLimits{})
		l := e.listen(t)
		set := func(key string, lim rdb.KeyLimits, limited bool, count string) {
			t.Helper()
			if err := e.st.SetKeyLimits(e.ctx, e.q, key, lim); err != nil {
				t.Fatal(err)
			}
			if fl := flags(t, e); fl.KeyLimited != limited {
				t.Fatalf("after %s %+v: flags %+v, want key-limited %v", key, lim, fl, limited)
			}
			if got := e.field2(t, e.q.Config, "klim"); got != count {
				t.Fatalf("after %s %+v: %q keys counted as limited, want %q", key, lim, got, count)
			}
		}
		set("A", rdb.KeyLimits{MaxRunning: 1}, true, "1")
		set("A", rdb.KeyLimits{MaxRunning: 2}, true, "1")
		set("B", rdb.KeyLimits{Rate: 1, PeriodMs: 500}, true, "2")
		set("A", rdb.KeyLimits{Weight: 4}, true, "1")
		set("C", rdb.KeyLimits{}, true, "1") // removing a policy C never had
		set("B", rdb.KeyLimits{}, false, "")
		set("A", rdb.KeyLimits{}, false, "")
		// Told twice, when the count left 0 and when it came back: the
		// workers read the flags again.
		checkPubs(t, l.collect(t, e), []msg{{"wake", "0"}, {"wake", "0"}})
		if p, _ := redis.String(e.c.Do("HGET", e.q.FairState, "p:A")); p != "" {
			t.Fatalf("A's policy %q after its removal", p)
		}
	})
}
