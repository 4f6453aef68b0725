package rdb_test

import (
	"math"
	"reflect"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// One End call ends a batch of takings of one queue (the worker's group
// commit): each is checked for ownership on its own and gets its own
// outcome, and an item that is not its worker's changes nothing while the
// others are applied.

func TestEndBatchOfTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(t, "t1", "t2", "t3", "t4", "t5", "t6")
	e.take(t, "A", 6) // pids 1..6
	e.cancel(t, "t6")
	l := e.listen(t)
	batch := []rdb.Ending{
		rdb.Done(rdb.KindTask, "A", "1", "t1", []byte("r1")),
		rdb.Retry(rdb.KindTask, "A", "2", "t2", 5000, "boom"),
		rdb.Dead(rdb.KindTask, "A", "3", "t3", "bad"),
		rdb.GiveBack(rdb.KindTask, "A", "4", "t4"),
		rdb.Done(rdb.KindTask, "B", "5", "t5", nil), // A holds pid 5
		rdb.Done(rdb.KindTask, "A", "6", "t6", []byte("ignored")),
		rdb.Done(rdb.KindTask, "A", "1", "t1", nil), // ended above
	}
	var got []rdb.Ended
	var err error
	e.call(t, func() { got, err = e.st.End(e.ctx, e.q, 60000, batch) })
	pubs := l.collect(t, e)
	want := []rdb.Ended{
		{Outcome: rdb.OutcomeDone},
		{Outcome: rdb.OutcomeRetry},
		{Outcome: rdb.OutcomeDead},
		{Outcome: rdb.OutcomeRequeued},
		{Outcome: rdb.OutcomeLost},
		{Outcome: rdb.OutcomeCancelled},
		{Outcome: rdb.OutcomeLost},
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("End = %+v, %v; want %+v", got, err, want)
	}
	e.checkState(t, nil, func(e *env) state {
		return state{
			e.q.Task("t1"):       ttl(fresh("t1").with("s", "done", "ft", "@now", "r", "r1"), 60000),
			e.q.Task("t2"):       fresh("t2").with("s", "scheduled", "n", "1", "e", "boom"),
			e.q.Scheduled:        zset{{"t2", "@now+5000"}},
			e.q.Task("t3"):       fresh("t3").with("n", "1", "e", "bad").buried("failed", "A"),
			e.q.Dead:             zset{{"t3", "@now"}},
			e.q.Task("t4"):       queued("t4"),
			e.q.Waiting:          list{"t4"},
			e.q.Task("t5"):       active("t5", "A", "5"), // the lost item: untouched
			e.q.WorkerQueue("A"): hash{"5": "t5"},
			e.q.Task("t6"):       ttl(fresh("t6").with("s", "cancelled", "x", "1", "ft", "@now"), 60000),
			e.q.Retained:         ttl(zset{{"t1", "@now+60000"}, {"t6", "@now+60000"}}, 60000),
			e.q.Holders:          set{"A"},
			e.q.Seq:              str("6"),
		}
	})
	checkPubs(t, pubs, []msg{{"wake", "1"}})
}

func TestEndBatchOfStages(t *testing.T) {
	t.Parallel()
	f := newFlowEnv(t)
	for _, id := range []string{"r1", "r2", "r3"} {
		f.start(t, f.s1, id)
	}
	f.takeFrom(t, f.s1, "A", 3, true) // r1, r2, r3 as pids 1, 2, 3
	l := f.listen(t)
	batch := []rdb.Ending{
		f.stage(rdb.Done(rdb.KindStage, "B", "3", "r3", nil), "", false, nil), // A holds pid 3
		f.stage(rdb.Done(rdb.KindStage, "A", "1", "r1", nil), "s2", false, map[string]string{"out": "v1"}),
		f.stage(rdb.Done(rdb.KindStage, "A", "2", "r2", nil), "s2", true, nil, children...),
		f.stage(rdb.Done(rdb.KindStage, "A", "3", "r3", nil), "", false, map[string]string{"out": "v3"}),
	}
	var got []rdb.Ended
	var err error
	f.call(t, func() { got, err = f.st.End(f.ctx, f.s1, 0, batch) })
	pubs := l.collect(t, f.env)
	want := []rdb.Ended{
		{Outcome: rdb.OutcomeLost},
		{Outcome: rdb.OutcomeForwarded},
		{Outcome: rdb.OutcomeFannedOut},
		{Outcome: rdb.OutcomeDone},
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("End = %+v, %v; want %+v", got, err, want)
	}
	kid := func(id string) hash {
		return hash{"d": payload(id), "pr": "r2", "pn": "s2", "pf": "failfast", "pe": "1"}
	}
	f.checkState(t, nil, func(*env) state {
		return state{
			f.s1.Task("r1"): runQueued("s2").with("f:out", "v1"),
			f.s2.Waiting:    list{"r1"},
			f.s1.Task("r2"): runFanned(),
			f.c1.Task("k1"): kid("k1"),
			f.c1.Task("k2"): kid("k2"),
			f.c1.Task("k3"): kid("k3"),
			f.c1.Waiting:    list{"k1", "k2"},
			f.c2.Waiting:    list{"k3"},
			f.s1.Task("r3"): ttl(runEnded(runActive(), "done").with("f:out", "v3"), 60000),
			f.ix:            zset{{"r3", "@now+60000"}, {"r1", "inf"}, {"r2", "inf"}},
			f.s1.Runs:       runs("r1", "r2", "r3"),
			f.s1.Holders:    set{"A"},
			f.s1.Seq:        str("3"),
		}
	})
	checkPubsAnyOrder(t, pubs, []msg{{"{F}:wake:s2", "1"}, {"{F}:wake:c1", "2"}, {"{F}:wake:c2", "1"}})
}

func TestEndBatchOfChildren(t *testing.T) {
	t.Parallel()
	// fanned seeds run r1 fanned out (policy failFast, next stage s2) to k1
	// and k2 in c1, both taken by A (pids 2, 3).
	fanned := func(t *testing.T, f *flowEnv, failFast bool) {
		f.start(t, f.s1, "r1")
		f.takeFrom(t, f.s1, "A", 1, true)
		f.endStage(t, rdb.Done(rdb.KindStage, "A", "1", "r1", nil), "s2", failFast, children[:2]...)
		f.takeFrom(t, f.c1, "A", 2, false)
	}
	child := func(e rdb.Ending) rdb.Ending { e.Run = "r1"; return e }
	// base is the run hash as fanned leaves it.
	base := runQueued("s1").with("s", "children", "kp", "2", "kg", "1", "k:k1", "pending", "kq:k1", "c1",
		"k:k2", "pending", "kq:k2", "c1")
	tests := []struct {
		name     string
		failFast bool
		batch    []rdb.Ending
		want     []rdb.Ended
		state    func(f *flowEnv) state
		pubs     []msg
	}{
		{
			name: "both children done in one call: the last forwards the run, exactly once",
			batch: []rdb.Ending{
				child(rdb.Done(rdb.KindChild, "B", "3", "k2", nil)), // A holds pid 3
				child(rdb.Done(rdb.KindChild, "A", "2", "k1", []byte("rk1"))),
				child(rdb.Done(rdb.KindChild, "A", "3", "k2", []byte("rk2"))),
				child(rdb.Done(rdb.KindChild, "A", "2", "k1", nil)), // ended above
			},
			want: []rdb.Ended{
				{Outcome: rdb.OutcomeLost, Run: rdb.OutcomeLost},
				{Outcome: rdb.OutcomeDone, Run: rdb.OutcomeLost},
				{Outcome: rdb.OutcomeDone, Run: rdb.OutcomeForwarded},
				{Outcome: rdb.OutcomeLost, Run: rdb.OutcomeLost},
			},
			state: func(f *flowEnv) state {
				return state{
					f.s1.Task("r1"): base.without("kp").with("st", "s2", "s", "queued",
						"k:k1", "done", "kr:k1", "rk1", "k:k2", "done", "kr:k2", "rk2"),
					f.s2.Waiting: list{"r1"},
					f.ix:         zset{{"r1", "inf"}},
					f.s1.Runs:    runs("r1"),
					f.s1.Holders: set{"A"},
					f.c1.Holders: set{"A"},
					f.s1.Seq:     str("3"),
				}
			},
			pubs: []msg{{"{F}:wake:s2", "1"}},
		},
		{
			name:     "fail-fast: the first fails the run; its sibling, ended after it in the call, counts nothing",
			failFast: true,
			batch: []rdb.Ending{
				child(rdb.Dead(rdb.KindChild, "A", "2", "k1", "bad")),
				child(rdb.Done(rdb.KindChild, "A", "3", "k2", []byte("rk2"))),
			},
			want: []rdb.Ended{
				{Outcome: rdb.OutcomeDead, Run: rdb.OutcomeDead},
				{Outcome: rdb.OutcomeCancelled, Run: rdb.OutcomeLost},
			},
			state: func(f *flowEnv) state {
				return state{
					f.s1.Task("r1"): ttl(runEnded(base.with("k:k1", "failed", "ke:k1", "bad", "k:k2", "cancelled",
						"kl", "g1 k1 k2"), "failed"), 60000), // (kl kept for RetryRun)
					f.c1.Task("k1"): childOf("k1", "s2", true).with("n", "1", "e", "bad").buried("failed", "A"),
					f.c1.Dead:       zset{{"k1", "@now"}},
					f.ix:            ttl(zset{{"r1", "@now+60000"}}, 60000),
					f.s1.Runs:       runs("r1"),
					f.s1.Holders:    set{"A"},
					f.c1.Holders:    set{"A"},
					f.s1.Seq:        str("3"),
				}
			},
			// k2 still ran when k1 failed the run: its worker is told.
			pubs: []msg{{"{F}:cancel:c1", "k2"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFlowEnv(t)
			fanned(t, f, tc.failFast)
			l := f.listen(t)
			var got []rdb.Ended
			var err error
			f.call(t, func() { got, err = f.st.End(f.ctx, f.c1, 0, tc.batch) })
			pubs := l.collect(t, f.env)
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("End = %+v, %v; want %+v", got, err, tc.want)
			}
			f.checkState(t, nil, stateOf(f, tc.state))
			checkPubs(t, pubs, tc.pubs)
		})
	}
}

// Corrupt data in one item of a batch is buried with its reason; the items
// around it are applied and their wake-ups sent.
func TestEndBatchWithCorruptData(t *testing.T) {
	t.Parallel()
	f := newFlowEnv(t)
	f.start(t, f.s1, "r1")
	f.start(t, f.s1, "r2")
	f.takeFrom(t, f.s1, "A", 2, true)
	f.do(t, "DEL", f.s1.Task("r1"))
	f.do(t, "SET", f.s1.Task("r1"), "garbage")
	l := f.listen(t)
	var got []rdb.Ended
	var err error
	f.call(t, func() {
		got, err = f.st.End(f.ctx, f.s1, 0, []rdb.Ending{
			f.stage(rdb.Done(rdb.KindStage, "A", "1", "r1", nil), "s2", false, nil),
			f.stage(rdb.Done(rdb.KindStage, "A", "2", "r2", nil), "s2", false, nil),
		})
	})
	pubs := l.collect(t, f.env)
	if want := []rdb.Ended{{Outcome: rdb.OutcomeDead}, {Outcome: rdb.OutcomeForwarded}}; err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("End = %+v, %v; want %+v", got, err, want)
	}
	f.checkState(t, nil, func(*env) state {
		return state{
			f.s1.Task("r1"): hash{"raw": "garbage"}.buried("corrupt: task data is a string, not a hash", "A"),
			f.s1.Dead:       zset{{"r1", "@now"}},
			f.s1.Task("r2"): runQueued("s2"),
			f.s2.Waiting:    list{"r2"},
			f.ix:            zset{{"r1", "inf"}, {"r2", "inf"}},
			f.s1.Runs:       runs("r1", "r2"),
			f.s1.Holders:    set{"A"},
			f.s1.Seq:        str("2"),
		}
	})
	checkPubs(t, pubs, []msg{{"{F}:wake:s2", "1"}})
}

// An end can take again in the same call (EndTake): after the ends, the take
// runs exactly as Take would (fenced by the deadline, recorded as held),
// and refills the slots the ends freed. Past the deadline the ends are
// still applied and nothing is taken; asking for none pops nothing.
func TestEndTake(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		take  func(e *env) *rdb.TakeArgs
		want  []string // ids taken
		state func(e *env) state
	}{
		{
			name: "takes up to Max after the ends",
			take: func(e *env) *rdb.TakeArgs { return &rdb.TakeArgs{Worker: "A", Until: math.MaxInt64, Max: 2} },
			want: []string{"t3", "t4"},
			state: func(e *env) state {
				return state{
					e.q.Task("t3"): active("t3", "A", "3"),
					e.q.Task("t4"): active("t4", "A", "4"),
					e.q.Task("t5"): fresh("t5"), e.q.Waiting: list{"t5"},
					e.q.WorkerQueue("A"): hash{"3": "t3", "4": "t4"}, e.q.Holders: set{"A"}, e.q.Seq: str("4"),
				}
			},
		},
		{
			name: "past the deadline: ends applied, nothing taken",
			take: func(e *env) *rdb.TakeArgs { return &rdb.TakeArgs{Worker: "A", Until: 1, Max: 2} },
			state: func(e *env) state {
				return state{
					e.q.Task("t3"): fresh("t3"), e.q.Task("t4"): fresh("t4"), e.q.Task("t5"): fresh("t5"),
					e.q.Waiting: list{"t3", "t4", "t5"}, e.q.Holders: set{"A"}, e.q.Seq: str("2"),
				}
			},
		},
		{
			name: "nothing asked",
			take: func(e *env) *rdb.TakeArgs { return nil },
			state: func(e *env) state {
				return state{
					e.q.Task("t3"): fresh("t3"), e.q.Task("t4"): fresh("t4"), e.q.Task("t5"): fresh("t5"),
					e.q.Waiting: list{"t3", "t4", "t5"}, e.q.Holders: set{"A"}, e.q.Seq: str("2"),
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.enqueue(t, "t1", "t2")
			e.take(t, "A", 2) // pids 1, 2
			e.enqueue(t, "t3", "t4", "t5")
			batch := []rdb.Ending{rdb.Done(rdb.KindTask, "A", "1", "t1", nil), rdb.Done(rdb.KindTask, "A", "2", "t2", nil)}
			var (
				ended []rdb.Ended
				taken []rdb.Taken
				err   error
			)
			e.call(t, func() { ended, taken, err = e.st.EndTake(e.ctx, e.q, 0, batch, tc.take(e)) })
			if err != nil || !reflect.DeepEqual(ended, []rdb.Ended{{Outcome: rdb.OutcomeDone}, {Outcome: rdb.OutcomeDone}}) {
				t.Fatalf("EndTake = %+v, %v; want both done", ended, err)
			}
			var ids []string
			for _, tk := range taken {
				if tk.PID == "" || string(tk.Payload) != payload(tk.ID) || tk.Attempt != 1 {
					t.Errorf("taken %+v: want a pid, its payload and attempt 1", tk)
				}
				ids = append(ids, tk.ID)
			}
			if !reflect.DeepEqual(ids, tc.want) {
				t.Errorf("taken ids = %v, want %v", ids, tc.want)
			}
			e.checkState(t, nil, tc.state)
		})
	}
}

// After a failover the new primary may hand out a pid again (its counter
// lacks the lost takes). A late end of the old taking names the same pid
// and another task: it changes nothing, and the new taking stays owned and
// reachable by the reaper. Simulated: the holding of a's taking is lost and
// the counter set back, so that b's take gets a's pid.
func TestEndOfAReissuedPidIsLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(t, "a", "b")
	got := e.takeFrom(t, e.q, "W", 1, false)
	if len(got) != 1 || got[0].ID != "a" {
		t.Fatalf("take = %+v", got)
	}
	pid := got[0].PID
	e.do(t, "HDEL", e.q.WorkerQueue("W"), pid)
	e.do(t, "DECR", e.q.Seq)
	got = e.takeFrom(t, e.q, "W", 1, false)
	if len(got) != 1 || got[0].ID != "b" || got[0].PID != pid {
		t.Fatalf("second take = %+v, want b under pid %s", got, pid)
	}
	ended, err := e.st.End(e.ctx, e.q, 0, []rdb.Ending{rdb.Done(rdb.KindTask, "W", pid, "a", nil)})
	if err != nil || len(ended) != 1 || ended[0].Outcome != rdb.OutcomeLost {
		t.Fatalf("late end of a under the reissued pid = %+v, %v; want lost", ended, err)
	}
	if id, _ := redis.String(e.do(t, "HGET", e.q.WorkerQueue("W"), pid), nil); id != "b" {
		t.Fatalf("the worker's holding of pid %s = %q, want b (still reachable)", pid, id)
	}
	// The same taking named twice in one call is claimed once.
	ended, err = e.st.End(e.ctx, e.q, 0, []rdb.Ending{rdb.Done(rdb.KindTask, "W", pid, "b", nil), rdb.Done(rdb.KindTask, "W", pid, "b", nil)})
	if err != nil || len(ended) != 2 || ended[0].Outcome != rdb.OutcomeDone || ended[1].Outcome != rdb.OutcomeLost {
		t.Fatalf("end of b, twice in one call = %+v, %v; want done, lost", ended, err)
	}
}
