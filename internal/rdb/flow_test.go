package rdb_test

import (
	"math"
	"reflect"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
)

// child is childOf as fanOut fanned out.
func (f *flowEnv) child(id string) hash { return childOf(id, f.next, f.failFast) }

// fannedOut is the state fanOut leaves.
func (f *flowEnv) fannedOut() state {
	return state{
		f.s1.Runs:             runs("r1"),
		f.s1.Task("r1"):       runFanned(),
		f.ix:                  zset{{"r1", "inf"}},
		f.s1.Holders:          set{"A"},
		f.s1.Seq:              str("2"),
		f.c1.Task("k1"):       f.child("k1").with("s", "active", "w", "A", "p", "2"),
		f.c1.Task("k2"):       f.child("k2"),
		f.c1.Task("k3"):       f.child("k3"),
		f.c1.Waiting:          list{"k2"},
		f.c2.Waiting:          list{"k3"},
		f.c1.Holders:          set{"A"},
		f.c1.WorkerQueue("A"): hash{"2": "k1"},
	}
}

func TestFlowStart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		seed   func(t *testing.T, f *flowEnv)
		id     string
		fields map[string]string // the run's initial state
		ref    *rdb.FlowRef      // nil: flowEnv's (one minute, by user)
		want   bool
		state  func(f *flowEnv) state
		pubs   []msg
	}{
		{
			name: "new run: created with its retention and indexed properties, indexed as running (+inf), " +
				"queued in the first stage, one wake-up",
			id: "r1", fields: map[string]string{"user": "u1", "plan": "gold"},
			want: true,
			state: func(f *flowEnv) state {
				return state{
					f.s1.Runs:       unordered{{"r1", "@now"}},
					f.s1.Task("r1"): runQueued("s1").with("f:plan", "gold"),
					f.ix:            zset{{"r1", "inf"}},
					f.s1.Waiting:    list{"r1"},
				}
			},
			pubs: []msg{{"{F}:wake:s1", "1"}},
		},
		{
			name: "several indexed properties: stored comma-separated, the run in each index",
			id:   "r1", fields: map[string]string{"user": "u1", "plan": "gold"},
			ref:  &rdb.FlowRef{RetentionMillis: 5000, IndexBy: []string{"user", "plan"}},
			want: true,
			state: func(f *flowEnv) state {
				return state{
					f.s1.Runs: unordered{{"r1", "@now"}},
					f.s1.Task("r1"): runQueued("s1").with("f:plan", "gold", "fr", "5000", "fi", "user,plan",
						"i:plan", "gold"),
					f.ix:                          zset{{"r1", "inf"}},
					f.s1.IndexKey("plan", "gold"): zset{{"r1", "inf"}},
					f.s1.Waiting:                  list{"r1"},
				}
			},
			pubs: []msg{{"{F}:wake:s1", "1"}},
		},
		{
			name: "an indexed property the fields do not hold: no value kept for it, no index",
			id:   "r1", fields: map[string]string{"plan": "gold"},
			want: true,
			state: func(f *flowEnv) state {
				return state{
					f.s1.Runs:       unordered{{"r1", "@now"}},
					f.s1.Task("r1"): runQueued("s1").without("f:user", "i:user").with("f:plan", "gold"),
					f.s1.Waiting:    list{"r1"},
				}
			},
			pubs: []msg{{"{F}:wake:s1", "1"}},
		},
		{
			name: "behind waiting runs; no index, no fields, zero retention, no indexed property",
			seed: func(t *testing.T, f *flowEnv) { f.start(t, f.s1, "r0") },
			id:   "r1", ref: &rdb.FlowRef{},
			want: true,
			state: func(f *flowEnv) state {
				return state{
					f.s1.Runs:       unordered{{"r0", "@seed"}, {"r1", "@now"}},
					f.s1.Task("r0"): runQueued("s1"),
					f.s1.Task("r1"): hash{"d": "", "st": "s1", "fs": "running", "s": "queued", "fr": "0", "fi": ""},
					f.ix:            zset{{"r0", "inf"}},
					f.s1.Waiting:    list{"r0", "r1"},
				}
			},
			pubs: []msg{{"{F}:wake:s1", "1"}},
		},
		{
			name: "an index whose runs had all ended stops expiring",
			seed: func(t *testing.T, f *flowEnv) {
				f.start(t, f.s1, "r0")
				f.takeFrom(t, f.s1, "A", 1, true)
				f.endStage(t, rdb.Done(rdb.KindStage, "A", "1", "r0", nil), "", false)
			},
			id: "r1", fields: map[string]string{"user": "u1"},
			want: true,
			state: func(f *flowEnv) state {
				return state{
					f.s1.Runs:       unordered{{"r0", "@seed"}, {"r1", "@now"}},
					f.s1.Task("r0"): ttl(runEnded(runQueued("s1"), "done").with("ft", "@seed"), 60000),
					f.s1.Task("r1"): runQueued("s1"),
					f.ix:            zset{{"r0", "@seed+60000"}, {"r1", "inf"}},
					f.s1.Waiting:    list{"r1"},
					f.s1.Holders:    set{"A"},
					f.s1.Seq:        str("1"),
				}
			},
			pubs: []msg{{"{F}:wake:s1", "1"}},
		},
		{
			name: "same id twice: false, nothing changed, no wake-up",
			seed: func(t *testing.T, f *flowEnv) { f.start(t, f.s1, "r1") },
			id:   "r1", fields: map[string]string{"user": "u2"},
			ref:  &rdb.FlowRef{RetentionMillis: 1000, IndexBy: []string{"user"}},
			want: false,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFlowEnv(t)
			if tc.seed != nil {
				tc.seed(t, f)
			}
			ref := f.ref
			if tc.ref != nil {
				ref = *tc.ref
			}
			before := f.dump(t)
			l := f.listen(t)
			var got bool
			var err error
			f.call(t, func() { got, err = f.st.FlowStart(f.ctx, f.s1, tc.id, tc.fields, ref) })
			pubs := l.collect(t, f.env)
			if err != nil || got != tc.want {
				t.Errorf("FlowStart = %v, %v; want %v", got, err, tc.want)
			}
			f.checkState(t, before, stateOf(f, tc.state))
			checkPubs(t, pubs, tc.pubs)
		})
	}
}

// TestEndStage is the end script for the takings of a flow's stage queue.
func TestEndStage(t *testing.T) {
	t.Parallel()
	done := func(w, pid string) rdb.Ending { return rdb.Done(rdb.KindStage, w, pid, "r1", nil) }
	retry := func(w, pid string) rdb.Ending { return rdb.Retry(rdb.KindStage, w, pid, "r1", 5000, "boom") }
	dead := func(w, pid string) rdb.Ending { return rdb.Dead(rdb.KindStage, w, pid, "r1", "bad") }
	// taken seeds run r1 taken by A in s1 as pid 1.
	taken := func(t *testing.T, f *flowEnv) {
		f.start(t, f.s1, "r1")
		f.takeFrom(t, f.s1, "A", 1, true)
	}
	// after is the state taken leaves, the taking released, with the run
	// hash and more keys.
	after := func(f *flowEnv, run any, kv ...any) state {
		return state{
			f.s1.Runs:       runs("r1"),
			f.s1.Task("r1"): run,
			f.ix:            zset{{"r1", "inf"}},
			f.s1.Holders:    set{"A"},
			f.s1.Seq:        str("1"),
		}.with(kv...)
	}
	tests := []struct {
		name       string
		seed       func(t *testing.T, f *flowEnv)
		w, pid     string
		end        func(w, pid string) rdb.Ending
		next       string
		fields     map[string]string
		children   []rdb.Child
		failFast   bool
		want       rdb.Outcome
		state      func(f *flowEnv) state
		pubs       []msg
		pubsUnordr bool
	}{
		{
			name: "done, no children: fields merged, forwarded to the back of the next stage, one wake-up",
			seed: func(t *testing.T, f *flowEnv) {
				f.start(t, f.s2, "r0")
				taken(t, f)
			},
			w: "A", pid: "1", end: done, next: "s2", fields: map[string]string{"out": "v1", "user": "u1"},
			want: rdb.OutcomeForwarded,
			state: func(f *flowEnv) state {
				return after(f, runQueued("s2").with("f:out", "v1"),
					f.s2.Task("r0"), runQueued("s2"),
					f.s1.Runs, runs("r0", "r1"),
					f.s2.Waiting, list{"r0", "r1"},
					f.ix, zset{{"r0", "inf"}, {"r1", "inf"}})
			},
			pubs: []msg{{"{F}:wake:s2", "1"}},
		},
		{
			name: "forwarded: the stage's attempt, crash and error fields cleared",
			seed: func(t *testing.T, f *flowEnv) {
				taken(t, f)
				f.do(t, "HSET", f.s1.Task("r1"), "n", "2", "c", "1", "e", "boom")
			},
			w: "A", pid: "1", end: done, next: "s2",
			want: rdb.OutcomeForwarded,
			state: func(f *flowEnv) state {
				return after(f, runQueued("s2"), f.s2.Waiting, list{"r1"})
			},
			pubs: []msg{{"{F}:wake:s2", "1"}},
		},
		{
			name: "last stage: the run ends done, kept for the retention, its index entry expiring with it",
			seed: taken,
			w:    "A", pid: "1", end: done, next: "", fields: map[string]string{"out": "v1"},
			want: rdb.OutcomeDone,
			state: func(f *flowEnv) state {
				return after(f, ttl(runEnded(runActive(), "done").with("f:out", "v1"), 60000),
					f.ix, ttl(zset{{"r1", "@now+60000"}}, 60000))
			},
		},
		{
			// The index entry is found by the value the run started with,
			// not by the field a stage rewrote, or it would stay +inf.
			name: "last stage, the indexed field rewritten by a stage: the entry of the start value expires",
			seed: func(t *testing.T, f *flowEnv) {
				taken(t, f)
				f.do(t, "HSET", f.s1.Task("r1"), "f:user", "u2")
			},
			w: "A", pid: "1", end: done, next: "", fields: map[string]string{"user": "u3"},
			want: rdb.OutcomeDone,
			state: func(f *flowEnv) state {
				return after(f, ttl(runEnded(runActive(), "done").with("f:user", "u3"), 60000),
					f.ix, ttl(zset{{"r1", "@now+60000"}}, 60000))
			},
		},
		{
			name: "last stage, another run of the index still running: the index does not expire",
			seed: func(t *testing.T, f *flowEnv) {
				taken(t, f)
				f.start(t, f.s1, "r0")
			},
			w: "A", pid: "1", end: done, next: "",
			want: rdb.OutcomeDone,
			state: func(f *flowEnv) state {
				return after(f, ttl(runEnded(runActive(), "done"), 60000),
					f.s1.Task("r0"), runQueued("s1"),
					f.s1.Runs, runs("r0", "r1"),
					f.s1.Waiting, list{"r0"},
					f.ix, zset{{"r1", "@now+60000"}, {"r0", "inf"}})
			},
		},
		{
			name: "fan-out: child hashes created (with the run's next stage and the fail-fast policy) and queued, " +
				"recorded pending in the run, one wake-up per queue",
			seed: taken,
			w:    "A", pid: "1", end: done, next: "s2", fields: map[string]string{"out": "v1"}, children: children,
			failFast: true,
			want:     rdb.OutcomeFannedOut,
			state: func(f *flowEnv) state {
				return after(f, runFanned().with("f:out", "v1"),
					f.c1.Task("k1"), childOf("k1", "s2", true),
					f.c1.Task("k2"), childOf("k2", "s2", true),
					f.c1.Task("k3"), childOf("k3", "s2", true),
					f.c1.Waiting, list{"k1", "k2"},
					f.c2.Waiting, list{"k3"})
			},
			pubs:       []msg{{"{F}:wake:c1", "2"}, {"{F}:wake:c2", "1"}},
			pubsUnordr: true,
		},
		{
			name: "fan-out after the last stage, continue policy: the stage's attempt fields cleared, " +
				"children behind waiting ones",
			seed: func(t *testing.T, f *flowEnv) {
				taken(t, f)
				f.do(t, "HSET", f.s1.Task("r1"), "n", "1", "e", "boom")
				f.do(t, "RPUSH", f.c2.Waiting, "k0")
			},
			w: "A", pid: "1", end: done, next: "", children: children[2:],
			want: rdb.OutcomeFannedOut,
			state: func(f *flowEnv) state {
				return after(f, runQueued("s1").with("s", "children", "kp", "1", "kg", "1", "kl", "g1 k3", "k:k3", "pending", "kq:k3", "c2"),
					f.c1.Task("k3"), childOf("k3", "", false),
					f.c2.Waiting, list{"k0", "k3"})
			},
			pubs: []msg{{"{F}:wake:c2", "1"}},
		},
		{
			name: "retry: a failed attempt counted, scheduled in the stage, the run still running",
			seed: taken,
			w:    "A", pid: "1", end: retry,
			next: "s2", fields: map[string]string{"out": "ignored"}, children: children,
			want: rdb.OutcomeRetry,
			state: func(f *flowEnv) state {
				return after(f, runQueued("s1").with("s", "scheduled", "n", "1", "e", "boom"),
					f.s1.Scheduled, zset{{"r1", "@now+5000"}})
			},
		},
		{
			name: "dead: the run fails, buried in the stage's dead set, its index entry expiring",
			seed: taken,
			w:    "A", pid: "1", end: dead,
			next: "s2", fields: map[string]string{"out": "ignored"}, children: children,
			want: rdb.OutcomeDead,
			state: func(f *flowEnv) state {
				return after(f, runActive().with("fs", "failed", "ft", "@now", "n", "1", "e", "bad").buried("failed", "A"),
					f.s1.Dead, zset{{"r1", "@now"}},
					f.ix, ttl(zset{{"r1", "@now+60000"}}, 60000))
			},
		},
		{
			name: "cancelled run: nothing changes but the taking is released",
			seed: func(t *testing.T, f *flowEnv) {
				taken(t, f)
				f.runCancel(t, "r1")
			},
			w: "A", pid: "1", end: done, next: "s2", fields: map[string]string{"out": "v1"}, children: children,
			want: rdb.OutcomeCancelled,
			state: func(f *flowEnv) state {
				return after(f, ttl(runEnded(runActive(), "cancelled").with("ft", "@seed"), 60000),
					f.ix, ttl(zset{{"r1", "@seed+60000"}}, 60000))
			},
		},
		{
			name: "cancelled run, dead mode: still nothing buried",
			seed: func(t *testing.T, f *flowEnv) {
				taken(t, f)
				f.runCancel(t, "r1")
			},
			w: "A", pid: "1", end: dead, next: "s2",
			want: rdb.OutcomeCancelled,
			state: func(f *flowEnv) state {
				return after(f, ttl(runEnded(runActive(), "cancelled").with("ft", "@seed"), 60000),
					f.ix, ttl(zset{{"r1", "@seed+60000"}}, 60000))
			},
		},
		{
			// What a later taking of an ended run looks like (w, p written
			// by take): finishing it removes them and changes nothing else.
			name: "ended run held by this taking: the taking's fields removed, nothing else changes",
			seed: func(t *testing.T, f *flowEnv) {
				taken(t, f)
				f.runCancel(t, "r1")
				f.do(t, "HSET", f.s1.Task("r1"), "w", "A", "p", "1")
			},
			w: "A", pid: "1", end: done, next: "s2", children: children,
			want: rdb.OutcomeCancelled,
			state: func(f *flowEnv) state {
				return after(f, ttl(runEnded(runActive(), "cancelled").with("ft", "@seed"), 60000),
					f.ix, ttl(zset{{"r1", "@seed+60000"}}, 60000))
			},
		},
		{
			name: "cancel mark on the running run: it ends cancelled",
			seed: func(t *testing.T, f *flowEnv) {
				taken(t, f)
				f.do(t, "HSET", f.s1.Task("r1"), "x", "1")
			},
			w: "A", pid: "1", end: done, next: "s2", children: children,
			want: rdb.OutcomeCancelled,
			state: func(f *flowEnv) state {
				return after(f, ttl(runEnded(runActive(), "cancelled"), 60000),
					f.ix, ttl(zset{{"r1", "@now+60000"}}, 60000))
			},
		},
		{
			// As for a task: corrupt data must not abort the script once
			// the taking was released (the run would be nowhere, and the
			// rest of a batch not applied).
			name: "run data not a hash: buried with the reason, what it held kept in 'raw'",
			seed: func(t *testing.T, f *flowEnv) {
				taken(t, f)
				f.do(t, "DEL", f.s1.Task("r1"))
				f.do(t, "SET", f.s1.Task("r1"), "garbage")
			},
			w: "A", pid: "1", end: done, next: "s2", children: children,
			want: rdb.OutcomeDead,
			state: func(f *flowEnv) state {
				return after(f, hash{"raw": "garbage"}.buried("corrupt: task data is a string, not a hash", "A"),
					f.s1.Dead, zset{{"r1", "@now"}})
			},
		},
		{
			name: "not the owner: lost, nothing changed",
			seed: taken,
			w:    "B", pid: "1", end: done, next: "s2", fields: map[string]string{"out": "v1"}, children: children,
			want: rdb.OutcomeLost,
		},
		{
			name: "not the owner (stale pid, requeued): lost, nothing changed",
			seed: func(t *testing.T, f *flowEnv) {
				taken(t, f)
				if _, _, err := f.st.Requeue(f.ctx, f.s1, []string{"A"}, true); err != nil {
					t.Fatal(err)
				}
			},
			w: "A", pid: "1", end: dead, next: "s2",
			want: rdb.OutcomeLost,
		},
		{
			name: "run twice (forwarded): lost, not forwarded again",
			seed: func(t *testing.T, f *flowEnv) {
				taken(t, f)
				f.endStage(t, rdb.Done(rdb.KindStage, "A", "1", "r1", nil), "s2", false)
			},
			w: "A", pid: "1", end: done, next: "s2",
			want: rdb.OutcomeLost,
		},
		{
			name: "run twice (fanned out): lost, no second set of children",
			seed: func(t *testing.T, f *flowEnv) {
				taken(t, f)
				f.endStage(t, rdb.Done(rdb.KindStage, "A", "1", "r1", nil), "s2", true, children...)
			},
			w: "A", pid: "1", end: done, next: "s2", children: children,
			want: rdb.OutcomeLost,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFlowEnv(t)
			tc.seed(t, f)
			before := f.dump(t)
			l := f.listen(t)
			end := f.stage(tc.end(tc.w, tc.pid), tc.next, tc.failFast, tc.fields, tc.children...)
			var got []rdb.Ended
			var err error
			f.call(t, func() { got, err = f.st.End(f.ctx, f.s1, 0, []rdb.Ending{end}) })
			pubs := l.collect(t, f.env)
			if want := []rdb.Ended{{Outcome: tc.want}}; err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("End = %+v, %v; want %+v", got, err, want)
			}
			f.checkState(t, before, stateOf(f, tc.state))
			if tc.pubsUnordr {
				checkPubsAnyOrder(t, pubs, tc.pubs)
			} else {
				checkPubs(t, pubs, tc.pubs)
			}
		})
	}
}

// TestEndChild is the end script for the takings of a flow's child queue.
func TestEndChild(t *testing.T) {
	t.Parallel()
	done := func(w, pid, id string) rdb.Ending { return rdb.Done(rdb.KindChild, w, pid, id, nil) }
	doneWith := func(result string) func(w, pid, id string) rdb.Ending {
		return func(w, pid, id string) rdb.Ending { return rdb.Done(rdb.KindChild, w, pid, id, []byte(result)) }
	}
	dead := func(w, pid, id string) rdb.Ending { return rdb.Dead(rdb.KindChild, w, pid, id, "bad") }
	// fannedOutTo seeds fanOut towards next with the given policy.
	fannedOutTo := func(next string, failFast bool) func(t *testing.T, f *flowEnv) {
		return func(t *testing.T, f *flowEnv) { f.fanOut(t, next, failFast) }
	}
	// siblingsDone seeds fanOut with k2 and k3 finished done by A (pids 3, 4).
	siblingsDone := func(next string, failFast bool) func(t *testing.T, f *flowEnv) {
		return func(t *testing.T, f *flowEnv) {
			f.fanOut(t, next, failFast)
			f.takeFrom(t, f.c1, "A", 1, false)
			f.takeFrom(t, f.c2, "A", 1, false)
			f.endChild(t, f.c1, rdb.Done(rdb.KindChild, "A", "3", "k2", []byte("rk2")))
			f.endChild(t, f.c2, rdb.Done(rdb.KindChild, "A", "4", "k3", nil))
		}
	}
	// siblingsDoneState is the state siblingsDone leaves, k1's taking
	// released.
	siblingsDoneState := func(f *flowEnv) state {
		return f.fannedOut().with(
			f.s1.Task("r1"), runFanned().with("k:k2", "done", "kr:k2", "rk2", "k:k3", "done", "kp", "1"),
			f.c1.Task("k1"), nil, f.c1.Task("k2"), nil, f.c1.Task("k3"), nil,
			f.c1.Waiting, nil, f.c2.Waiting, nil,
			f.c1.WorkerQueue("A"), nil,
			f.c2.Holders, set{"A"},
			f.s1.Seq, str("4"))
	}
	// k1Released is fannedOut with k1's taking released and its hash gone.
	k1Released := func(f *flowEnv, kv ...any) state {
		return f.fannedOut().with(f.c1.Task("k1"), nil, f.c1.WorkerQueue("A"), nil).with(kv...)
	}
	tests := []struct {
		name   string
		seed   func(t *testing.T, f *flowEnv)
		w, pid string
		id     string
		end    func(w, pid, id string) rdb.Ending
		want   [2]rdb.Outcome // the child's outcome, the run's
		// stopped are the waiting siblings its end took out (fail-fast).
		stopped []rdb.QueuedTask
		state   func(f *flowEnv) state
		pubs    []msg
	}{
		{
			name: "done, not the last: result recorded, the run waits for the others",
			seed: fannedOutTo("s2", true),
			w:    "A", pid: "2", id: "k1",
			end:  doneWith("rk1"),
			want: [2]rdb.Outcome{rdb.OutcomeDone, 0},
			state: func(f *flowEnv) state {
				return k1Released(f, f.s1.Task("r1"), runFanned().with("k:k1", "done", "kr:k1", "rk1", "kp", "2"))
			},
		},
		{
			name: "done without a result: no result field",
			seed: fannedOutTo("s2", false),
			w:    "A", pid: "2", id: "k1", end: done,
			want: [2]rdb.Outcome{rdb.OutcomeDone, 0},
			state: func(f *flowEnv) state {
				return k1Released(f, f.s1.Task("r1"), runFanned().with("k:k1", "done", "kp", "2"))
			},
		},
		{
			name: "the last child done: the run forwarded to the next stage stored on the child, in the same step",
			seed: siblingsDone("s2", true),
			w:    "A", pid: "2", id: "k1",
			end:  doneWith("rk1"),
			want: [2]rdb.Outcome{rdb.OutcomeDone, rdb.OutcomeForwarded},
			state: func(f *flowEnv) state {
				return siblingsDoneState(f).with(
					f.s1.Task("r1"), runFanned().without("kp", "kl").with("st", "s2", "s", "queued",
						"k:k1", "done", "kr:k1", "rk1", "k:k2", "done", "kr:k2", "rk2", "k:k3", "done"),
					f.s2.Waiting, list{"r1"})
			},
			pubs: []msg{{"{F}:wake:s2", "1"}},
		},
		{
			name: "the last child done after the last stage: the run ends done, kept for the run's retention",
			seed: siblingsDone("", false),
			w:    "A", pid: "2", id: "k1", end: done,
			want: [2]rdb.Outcome{rdb.OutcomeDone, rdb.OutcomeDone},
			state: func(f *flowEnv) state {
				return siblingsDoneState(f).with(
					f.s1.Task("r1"), ttl(runEnded(runFanned(), "done").with(
						"k:k1", "done", "k:k2", "done", "kr:k2", "rk2", "k:k3", "done", "kp", "0"), 60000),
					f.ix, ttl(zset{{"r1", "@now+60000"}}, 60000))
			},
		},
		{
			name: "retry: the child scheduled in its queue, the run waits",
			seed: fannedOutTo("s2", true),
			w:    "A", pid: "2", id: "k1",
			end:  func(w, pid, id string) rdb.Ending { return rdb.Retry(rdb.KindChild, w, pid, id, 5000, "boom") },
			want: [2]rdb.Outcome{rdb.OutcomeRetry, 0},
			state: func(f *flowEnv) state {
				return k1Released(f,
					f.c1.Task("k1"), f.child("k1").with("s", "scheduled", "n", "1", "e", "boom"),
					f.c1.Scheduled, zset{{"k1", "@now+5000"}})
			},
		},
		{
			name: "fail-fast, dead child: buried, the run fails, pending children removed or told to stop",
			seed: func(t *testing.T, f *flowEnv) {
				f.fanOut(t, "s2", true)
				f.takeFrom(t, f.c2, "B", 1, false) // k3, pid 3
			},
			w: "A", pid: "2", id: "k1", end: dead,
			want:    [2]rdb.Outcome{rdb.OutcomeDead, rdb.OutcomeDead},
			stopped: []rdb.QueuedTask{{Queue: "c1", ID: "k2"}},
			state: func(f *flowEnv) state {
				return k1Released(f,
					f.s1.Task("r1"), ttl(runEnded(runFanned(), "failed").with("k:k1", "failed", "ke:k1", "bad",
						"k:k2", "cancelled", "k:k3", "cancelled"), 60000),
					f.ix, ttl(zset{{"r1", "@now+60000"}}, 60000),
					f.c1.Task("k1"), f.child("k1").with("n", "1", "e", "bad").buried("failed", "A"),
					f.c1.Dead, zset{{"k1", "@now"}},
					f.c1.Task("k2"), nil, f.c1.Waiting, nil,
					f.c2.Task("k3"), f.child("k3").with("s", "active", "w", "B", "p", "3", "x", "1"),
					f.c2.Waiting, nil,
					f.c2.WorkerQueue("B"), hash{"3": "k3"},
					f.c2.Holders, set{"B"},
					f.s1.Seq, str("3"))
			},
			pubs: []msg{{"{F}:cancel:c2", "k3"}},
		},
		{
			name: "fail-fast: a done sibling stays done, a scheduled one is taken out",
			seed: func(t *testing.T, f *flowEnv) {
				f.fanOut(t, "s2", true)
				f.takeFrom(t, f.c1, "A", 1, false) // k2, pid 3
				f.takeFrom(t, f.c2, "A", 1, false) // k3, pid 4
				f.endChild(t, f.c1, rdb.Done(rdb.KindChild, "A", "3", "k2", nil))
				f.endChild(t, f.c2, rdb.Retry(rdb.KindChild, "A", "4", "k3", 60000, ""))
			},
			w: "A", pid: "2", id: "k1", end: dead,
			want:    [2]rdb.Outcome{rdb.OutcomeDead, rdb.OutcomeDead},
			stopped: []rdb.QueuedTask{{Queue: "c2", ID: "k3"}},
			state: func(f *flowEnv) state {
				return state{
					f.s1.Runs: runs("r1"),
					f.s1.Task("r1"): ttl(runEnded(runFanned(), "failed").with("k:k1", "failed", "ke:k1", "bad",
						"k:k2", "done", "k:k3", "cancelled", "kp", "2"), 60000),
					f.ix:            ttl(zset{{"r1", "@now+60000"}}, 60000),
					f.c1.Task("k1"): f.child("k1").with("n", "1", "e", "bad").buried("failed", "A"),
					f.c1.Dead:       zset{{"k1", "@now"}},
					f.s1.Holders:    set{"A"},
					f.c1.Holders:    set{"A"},
					f.c2.Holders:    set{"A"},
					f.s1.Seq:        str("4"),
				}
			},
		},
		{
			name: "continue, dead child, not the last: error recorded, the run goes on",
			seed: fannedOutTo("s2", false),
			w:    "A", pid: "2", id: "k1", end: dead,
			want: [2]rdb.Outcome{rdb.OutcomeDead, 0},
			state: func(f *flowEnv) state {
				return k1Released(f,
					f.s1.Task("r1"), runFanned().with("k:k1", "failed", "ke:k1", "bad", "kp", "2"),
					f.c1.Task("k1"), f.child("k1").with("n", "1", "e", "bad").buried("failed", "A"),
					f.c1.Dead, zset{{"k1", "@now"}})
			},
		},
		{
			name: "continue, dead child, the last: the run forwarded",
			seed: siblingsDone("s2", false),
			w:    "A", pid: "2", id: "k1", end: dead,
			want: [2]rdb.Outcome{rdb.OutcomeDead, rdb.OutcomeForwarded},
			state: func(f *flowEnv) state {
				return siblingsDoneState(f).with(
					f.s1.Task("r1"), runFanned().without("kp", "kl").with("st", "s2", "s", "queued",
						"k:k1", "failed", "ke:k1", "bad", "k:k2", "done", "kr:k2", "rk2", "k:k3", "done"),
					f.s2.Waiting, list{"r1"},
					f.c1.Task("k1"), f.child("k1").with("n", "1", "e", "bad").buried("failed", "A"),
					f.c1.Dead, zset{{"k1", "@now"}})
			},
			pubs: []msg{{"{F}:wake:s2", "1"}},
		},
		{
			name: "continue, dead child, the last after the last stage: the run ends done",
			seed: siblingsDone("", false),
			w:    "A", pid: "2", id: "k1", end: dead,
			want: [2]rdb.Outcome{rdb.OutcomeDead, rdb.OutcomeDone},
			state: func(f *flowEnv) state {
				return siblingsDoneState(f).with(
					f.s1.Task("r1"), ttl(runEnded(runFanned(), "done").with("k:k1", "failed", "ke:k1", "bad",
						"k:k2", "done", "kr:k2", "rk2", "k:k3", "done", "kp", "0"), 60000),
					f.ix, ttl(zset{{"r1", "@now+60000"}}, 60000),
					f.c1.Task("k1"), f.child("k1").with("n", "1", "e", "bad").buried("failed", "A"),
					f.c1.Dead, zset{{"k1", "@now"}})
			},
		},
		{
			name: "cancel mark on the child: counted as failed with error \"cancelled\"",
			seed: func(t *testing.T, f *flowEnv) {
				f.fanOut(t, "s2", false)
				f.do(t, "HSET", f.c1.Task("k1"), "x", "1")
			},
			w: "A", pid: "2", id: "k1", end: done,
			want: [2]rdb.Outcome{rdb.OutcomeCancelled, 0},
			state: func(f *flowEnv) state {
				return k1Released(f,
					f.s1.Task("r1"), runFanned().with("k:k1", "failed", "ke:k1", "cancelled", "kp", "2"))
			},
		},
		{
			name: "a child requeued from the dead set while its run waits for the others (continue) counts again when it ends",
			seed: func(t *testing.T, f *flowEnv) {
				f.fanOut(t, "s2", false)
				f.endChild(t, f.c1, rdb.Dead(rdb.KindChild, "A", "2", "k1", "bad"))
				if n, _, err := f.st.DeadIDs(f.ctx, f.c1, rdb.DeadRequeue, []string{"k1"}); err != nil || n != 1 {
					t.Fatalf("DeadIDs = %d, %v", n, err)
				}
				f.takeFrom(t, f.c1, "B", 2, false) // k2 pid 3, k1 pid 4
			},
			w: "B", pid: "4", id: "k1", end: done,
			want: [2]rdb.Outcome{rdb.OutcomeDone, 0},
			state: func(f *flowEnv) state {
				return k1Released(f,
					f.s1.Task("r1"), runFanned().with("k:k1", "done", "kp", "2"),
					f.c1.Task("k2"), f.child("k2").with("s", "active", "w", "B", "p", "3"),
					f.c1.Waiting, nil,
					f.c1.WorkerQueue("B"), hash{"3": "k2"},
					f.c1.Holders, set{"A", "B"},
					f.s1.Seq, str("4"))
			},
		},
		{
			name: "child of a cancelled run: the child ends, nothing else changes",
			seed: func(t *testing.T, f *flowEnv) {
				f.fanOut(t, "s2", true)
				f.runCancel(t, "r1")
			},
			w: "A", pid: "2", id: "k1", end: doneWith("rk1"),
			want: [2]rdb.Outcome{rdb.OutcomeCancelled, 0},
			state: func(f *flowEnv) state {
				return state{
					f.s1.Runs: runs("r1"),
					f.s1.Task("r1"): ttl(runEnded(runFanned(), "cancelled").with("ft", "@seed",
						"k:k1", "cancelled", "k:k2", "cancelled", "k:k3", "cancelled"), 60000),
					f.ix:         ttl(zset{{"r1", "@seed+60000"}}, 60000),
					f.s1.Holders: set{"A"},
					f.c1.Holders: set{"A"},
					f.s1.Seq:     str("2"),
				}
			},
		},
		{
			name: "child of a failed run, dead mode: the child ends, not buried",
			seed: func(t *testing.T, f *flowEnv) {
				f.fanOut(t, "s2", true)
				f.takeFrom(t, f.c1, "B", 1, false) // k2, pid 3
				f.endChild(t, f.c1, rdb.Dead(rdb.KindChild, "B", "3", "k2", "bad"))
			},
			w: "A", pid: "2", id: "k1", end: dead,
			want: [2]rdb.Outcome{rdb.OutcomeCancelled, 0},
			state: func(f *flowEnv) state {
				return state{
					f.s1.Runs: runs("r1"),
					f.s1.Task("r1"): ttl(runEnded(runFanned(), "failed").with("ft", "@seed",
						"k:k1", "cancelled", "k:k2", "failed", "ke:k2", "bad", "k:k3", "cancelled"), 60000),
					f.ix: ttl(zset{{"r1", "@seed+60000"}}, 60000),
					f.c1.Task("k2"): f.child("k2").with("n", "1", "e", "bad",
						"s", "dead", "dr", "failed", "dt", "@seed", "dw", "B"),
					f.c1.Dead:    zset{{"k2", "@seed"}},
					f.s1.Holders: set{"A"},
					f.c1.Holders: set{"A", "B"},
					f.s1.Seq:     str("3"),
				}
			},
		},
		{
			name: "child data not a hash: buried with the reason, the run unchanged",
			seed: func(t *testing.T, f *flowEnv) {
				f.fanOut(t, "s2", true)
				f.do(t, "DEL", f.c1.Task("k1"))
				f.do(t, "SET", f.c1.Task("k1"), "garbage")
			},
			w: "A", pid: "2", id: "k1", end: done,
			want: [2]rdb.Outcome{rdb.OutcomeDead, 0},
			state: func(f *flowEnv) state {
				return k1Released(f,
					f.c1.Task("k1"), hash{"raw": "garbage"}.buried("corrupt: task data is a string, not a hash", "A"),
					f.c1.Dead, zset{{"k1", "@now"}})
			},
		},
		{
			name: "its run's data not a hash: the child buried with the reason, the run left as it is",
			seed: func(t *testing.T, f *flowEnv) {
				f.fanOut(t, "s2", true)
				f.do(t, "DEL", f.s1.Task("r1"))
				f.do(t, "SET", f.s1.Task("r1"), "garbage")
			},
			w: "A", pid: "2", id: "k1", end: done,
			want: [2]rdb.Outcome{rdb.OutcomeDead, 0},
			state: func(f *flowEnv) state {
				return k1Released(f,
					f.s1.Task("r1"), str("garbage"),
					f.c1.Task("k1"), f.child("k1").buried("corrupt: the data of its run r1 is not a hash", "A"),
					f.c1.Dead, zset{{"k1", "@now"}})
			},
		},
		{
			name: "not the owner: lost, nothing changed",
			seed: fannedOutTo("s2", true),
			w:    "B", pid: "2", id: "k1", end: done,
			want: [2]rdb.Outcome{rdb.OutcomeLost, 0},
		},
		{
			name: "run twice: the second finish is lost and counts nothing",
			seed: func(t *testing.T, f *flowEnv) {
				f.fanOut(t, "s2", true)
				f.endChild(t, f.c1, rdb.Done(rdb.KindChild, "A", "2", "k1", nil))
			},
			w: "A", pid: "2", id: "k1", end: done,
			want: [2]rdb.Outcome{rdb.OutcomeLost, 0},
		},
		{
			name: "run twice, the last child: the run is not forwarded twice",
			seed: func(t *testing.T, f *flowEnv) {
				siblingsDone("s2", true)(t, f)
				f.endChild(t, f.c1, rdb.Done(rdb.KindChild, "A", "2", "k1", nil))
			},
			w: "A", pid: "2", id: "k1", end: done,
			want: [2]rdb.Outcome{rdb.OutcomeLost, 0},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFlowEnv(t)
			tc.seed(t, f)
			before := f.dump(t)
			l := f.listen(t)
			end := tc.end(tc.w, tc.pid, tc.id)
			end.Run = "r1"
			var got []rdb.Ended
			var err error
			f.call(t, func() { got, err = f.st.End(f.ctx, f.c1, 0, []rdb.Ending{end}) })
			pubs := l.collect(t, f.env)
			if want := []rdb.Ended{{Outcome: tc.want[0], Run: tc.want[1], Stopped: tc.stopped}}; err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("End = %+v, %v; want %+v", got, err, want)
			}
			f.checkState(t, before, stateOf(f, tc.state))
			checkPubs(t, pubs, tc.pubs)
		})
	}
}

func TestRunCancel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		seed  func(t *testing.T, f *flowEnv)
		id    string
		want  bool
		state func(f *flowEnv) state
		pubs  []msg
	}{
		{
			name: "queued in a stage: taken out of the queue, the run ends cancelled for the retention",
			seed: func(t *testing.T, f *flowEnv) {
				f.start(t, f.s1, "r0")
				f.start(t, f.s1, "r1")
				f.start(t, f.s1, "r2")
			},
			id: "r1", want: true,
			state: func(f *flowEnv) state {
				return state{
					f.s1.Runs:       runs("r0", "r1", "r2"),
					f.s1.Task("r0"): runQueued("s1"),
					f.s1.Task("r1"): ttl(runEnded(runQueued("s1"), "cancelled"), 60000),
					f.s1.Task("r2"): runQueued("s1"),
					f.s1.Waiting:    list{"r0", "r2"},
					f.ix:            zset{{"r1", "@now+60000"}, {"r0", "inf"}, {"r2", "inf"}},
				}
			},
		},
		{
			name: "scheduled for a stage retry: taken out of the scheduled set",
			seed: func(t *testing.T, f *flowEnv) {
				f.start(t, f.s1, "r1")
				f.takeFrom(t, f.s1, "A", 1, true)
				f.endStage(t, rdb.Retry(rdb.KindStage, "A", "1", "r1", 60000, "boom"), "s2", false)
			},
			id: "r1", want: true,
			state: func(f *flowEnv) state {
				return state{
					f.s1.Runs:       runs("r1"),
					f.s1.Task("r1"): ttl(runEnded(runQueued("s1"), "cancelled").with("n", "1", "e", "boom"), 60000),
					f.ix:            ttl(zset{{"r1", "@now+60000"}}, 60000),
					f.s1.Holders:    set{"A"},
					f.s1.Seq:        str("1"),
				}
			},
		},
		{
			name: "running stage: its worker told on the stage's cancel channel, the taking left to it",
			seed: func(t *testing.T, f *flowEnv) {
				f.start(t, f.s1, "r1")
				f.takeFrom(t, f.s1, "A", 1, true)
			},
			id: "r1", want: true,
			state: func(f *flowEnv) state {
				return state{
					f.s1.Runs:             runs("r1"),
					f.s1.Task("r1"):       ttl(runEnded(runActive(), "cancelled"), 60000),
					f.ix:                  ttl(zset{{"r1", "@now+60000"}}, 60000),
					f.s1.WorkerQueue("A"): hash{"1": "r1"},
					f.s1.Holders:          set{"A"},
					f.s1.Seq:              str("1"),
				}
			},
			pubs: []msg{{"{F}:cancel:s1", "r1"}},
		},
		{
			name: "children: waiting ones removed, running ones marked and told, done ones kept",
			seed: func(t *testing.T, f *flowEnv) {
				f.fanOut(t, "s2", true)            // k1 running on A, pid 2
				f.takeFrom(t, f.c1, "A", 1, false) // k2, pid 3
				f.endChild(t, f.c1, rdb.Done(rdb.KindChild, "A", "3", "k2", nil))
			},
			id: "r1", want: true,
			state: func(f *flowEnv) state {
				return f.fannedOut().with(
					f.s1.Task("r1"), ttl(runEnded(runFanned(), "cancelled").with(
						"k:k1", "cancelled", "k:k2", "done", "k:k3", "cancelled", "kp", "2"), 60000),
					f.ix, ttl(zset{{"r1", "@now+60000"}}, 60000),
					f.c1.Task("k1"), f.child("k1").with("s", "active", "w", "A", "p", "2", "x", "1"),
					f.c1.Task("k2"), nil, f.c1.Task("k3"), nil,
					f.c1.Waiting, nil, f.c2.Waiting, nil,
					f.s1.Seq, str("3"))
			},
			pubs: []msg{{"{F}:cancel:c1", "k1"}},
		},
		{
			name: "run twice: the second finds it ended, false, nothing changed",
			seed: func(t *testing.T, f *flowEnv) {
				f.start(t, f.s1, "r1")
				f.runCancel(t, "r1")
			},
			id: "r1", want: false,
		},
		{
			name: "done run: false, nothing changed",
			seed: func(t *testing.T, f *flowEnv) {
				f.start(t, f.s1, "r1")
				f.takeFrom(t, f.s1, "A", 1, true)
				f.endStage(t, rdb.Done(rdb.KindStage, "A", "1", "r1", nil), "", false)
			},
			id: "r1", want: false,
		},
		{
			name: "failed run, in the dead set: false, nothing changed",
			seed: func(t *testing.T, f *flowEnv) {
				f.start(t, f.s1, "r1")
				f.takeFrom(t, f.s1, "A", 1, true)
				f.endStage(t, rdb.Dead(rdb.KindStage, "A", "1", "r1", "bad"), "s2", false)
			},
			id: "r1", want: false,
		},
		{
			name: "unknown run: false, nothing changed",
			seed: func(t *testing.T, f *flowEnv) { f.start(t, f.s1, "r0") },
			id:   "r1", want: false,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFlowEnv(t)
			tc.seed(t, f)
			before := f.dump(t)
			l := f.listen(t)
			var got bool
			var err error
			f.call(t, func() {
				var r rdb.RunStop
				r, err = f.st.RunCancel(f.ctx, f.s1, tc.id, f.ref)
				got = r.Cancelled
			})
			pubs := l.collect(t, f.env)
			if err != nil || got != tc.want {
				t.Errorf("RunCancel = %v, %v; want %v", got, err, tc.want)
			}
			f.checkState(t, before, stateOf(f, tc.state))
			checkPubs(t, pubs, tc.pubs)
		})
	}
}

// A flow run or child that Take buries (it crashed MaxCrashes workers, or
// its data is bad) must not leave its run waiting for ever: a buried run
// ends failed (its index entries expiring with the run's retention), and a
// buried child counts as failed in its run, by the policy stored on it.

func TestTakeBuryingAFlowRunEndsIt(t *testing.T) {
	t.Parallel()
	const (
		crashed = "crashed: the task was running on 3 workers that died"
		nan     = "corrupt: attempt or crash count is not a number"
	)
	tests := []struct {
		name  string
		seed  func(t *testing.T, f *flowEnv)
		want  []taken
		state func(f *flowEnv) state
	}{
		{
			name: "crashed max-crashes workers: buried, the run failed, its index entry expiring with the run",
			seed: func(t *testing.T, f *flowEnv) {
				f.start(t, f.s1, "r1")
				f.do(t, "HSET", f.s1.Task("r1"), "c", "3")
			},
			want: []taken{{ID: "r1", Reason: crashed}},
			state: func(f *flowEnv) state {
				return state{
					f.s1.Runs:       runs("r1"),
					f.s1.Task("r1"): runQueued("s1").with("c", "3", "fs", "failed", "ft", "@now").buried(crashed, "A"),
					f.s1.Dead:       zset{{"r1", "@now"}},
					f.ix:            ttl(zset{{"r1", "@now+60000"}}, 60000),
					f.s1.Seq:        str("1"),
				}
			},
		},
		{
			name: "bad data, another run of the index running: the run failed, the index does not expire",
			seed: func(t *testing.T, f *flowEnv) {
				f.start(t, f.s1, "r1")
				f.start(t, f.s1, "r0")
				f.do(t, "HSET", f.s1.Task("r1"), "n", "x")
			},
			want: []taken{{ID: "r1", Reason: nan}},
			state: func(f *flowEnv) state {
				return state{
					f.s1.Runs:       runs("r0", "r1"),
					f.s1.Task("r1"): runQueued("s1").with("n", "x", "fs", "failed", "ft", "@now").buried(nan, "A"),
					f.s1.Task("r0"): runQueued("s1"),
					f.s1.Waiting:    list{"r0"},
					f.s1.Dead:       zset{{"r1", "@now"}},
					f.ix:            zset{{"r1", "@now+60000"}, {"r0", "inf"}},
					f.s1.Seq:        str("1"),
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFlowEnv(t)
			tc.seed(t, f)
			before := f.dump(t)
			l := f.listen(t)
			var res []rdb.Taken
			var err error
			f.call(t, func() {
				res, err = f.st.Take(f.ctx, f.s1, rdb.TakeArgs{Worker: "A", Until: math.MaxInt64, Max: 1, MaxCrashes: 3, Stage: true})
			})
			pubs := l.collect(t, f.env)
			if got := takenOf(res); err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Take = %+v, %v; want %+v", got, err, tc.want)
			}
			f.checkState(t, before, stateOf(f, tc.state))
			checkPubs(t, pubs, nil)
		})
	}
}

func TestTakeBuryingAFlowChildCountsItInItsRun(t *testing.T) {
	t.Parallel()
	const crashed = "crashed: the task was running on 1 workers that died"
	// crashedOnce seeds fanOut towards next with the given policy, then A
	// dies: k1 back at the front of c1, one crash counted. With MaxCrashes 1
	// the next take buries it.
	crashedOnce := func(next string, failFast bool) func(t *testing.T, f *flowEnv) {
		return func(t *testing.T, f *flowEnv) {
			f.fanOut(t, next, failFast)
			if _, _, err := f.st.Requeue(f.ctx, f.c1, []string{"A"}, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	// siblingsDone is crashedOnce with k2 and k3 finished done by A first
	// (pids 3, 4): k1 is the last pending child.
	siblingsDone := func(next string, failFast bool) func(t *testing.T, f *flowEnv) {
		return func(t *testing.T, f *flowEnv) {
			f.fanOut(t, next, failFast)
			f.takeFrom(t, f.c1, "A", 1, false)
			f.takeFrom(t, f.c2, "A", 1, false)
			f.endChild(t, f.c1, rdb.Done(rdb.KindChild, "A", "3", "k2", []byte("rk2")))
			f.endChild(t, f.c2, rdb.Done(rdb.KindChild, "A", "4", "k3", nil))
			if _, _, err := f.st.Requeue(f.ctx, f.c1, []string{"A"}, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	// k1Buried is fannedOut with k1 buried by B's take (pid seq) and more
	// keys.
	k1Buried := func(f *flowEnv, seq string, kv ...any) state {
		return f.fannedOut().with(
			f.c1.Task("k1"), f.child("k1").with("c", "1", "cw", "A").buried(crashed, "B"),
			f.c1.Dead, zset{{"k1", "@now"}},
			f.c1.WorkerQueue("A"), nil, f.c1.Holders, nil,
			f.s1.Seq, str(seq)).with(kv...)
	}
	tests := []struct {
		name  string
		seed  func(t *testing.T, f *flowEnv)
		state func(f *flowEnv) state
		pubs  []msg
	}{
		{
			name: "fail-fast: counted as failed with the reason, the run fails, pending children removed",
			seed: crashedOnce("s2", true),
			state: func(f *flowEnv) state {
				return k1Buried(f, "3",
					f.s1.Task("r1"), ttl(runEnded(runFanned(), "failed").with("k:k1", "failed", "ke:k1", crashed,
						"k:k2", "cancelled", "k:k3", "cancelled"), 60000),
					f.ix, ttl(zset{{"r1", "@now+60000"}}, 60000),
					f.c1.Task("k2"), nil, f.c1.Task("k3"), nil,
					f.c1.Waiting, nil, f.c2.Waiting, nil)
			},
		},
		{
			name: "continue, not the last: counted as failed with the reason, the run waits for the others",
			seed: crashedOnce("s2", false),
			state: func(f *flowEnv) state {
				return k1Buried(f, "3",
					f.s1.Task("r1"), runFanned().with("k:k1", "failed", "ke:k1", crashed, "kp", "2"))
			},
		},
		{
			name: "continue, the last: the run forwarded to the next stage",
			seed: siblingsDone("s2", false),
			state: func(f *flowEnv) state {
				return k1Buried(f, "5",
					f.s1.Task("r1"), runFanned().without("kp", "kl").with("st", "s2", "s", "queued",
						"k:k1", "failed", "ke:k1", crashed, "k:k2", "done", "kr:k2", "rk2", "k:k3", "done"),
					f.s2.Waiting, list{"r1"},
					f.c1.Task("k2"), nil, f.c1.Task("k3"), nil,
					f.c1.Waiting, nil, f.c2.Waiting, nil,
					f.c2.Holders, set{"A"})
			},
			pubs: []msg{{"{F}:wake:s2", "1"}},
		},
		{
			name: "continue, the last after the last stage: the run ends done",
			seed: siblingsDone("", false),
			state: func(f *flowEnv) state {
				return k1Buried(f, "5",
					f.s1.Task("r1"), ttl(runEnded(runFanned(), "done").with("k:k1", "failed", "ke:k1", crashed,
						"k:k2", "done", "kr:k2", "rk2", "k:k3", "done", "kp", "0"), 60000),
					f.ix, ttl(zset{{"r1", "@now+60000"}}, 60000),
					f.c1.Task("k2"), nil, f.c1.Task("k3"), nil,
					f.c1.Waiting, nil, f.c2.Waiting, nil,
					f.c2.Holders, set{"A"})
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFlowEnv(t)
			tc.seed(t, f)
			before := f.dump(t)
			l := f.listen(t)
			var res []rdb.Taken
			var err error
			f.call(t, func() {
				res, err = f.st.Take(f.ctx, f.c1, rdb.TakeArgs{Worker: "B", Until: math.MaxInt64, Max: 1, MaxCrashes: 1})
			})
			pubs := l.collect(t, f.env)
			if got, want := takenOf(res), []taken{{ID: "k1", Reason: crashed}}; err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("Take = %+v, %v; want %+v", got, err, want)
			}
			f.checkState(t, before, stateOf(f, tc.state))
			checkPubs(t, pubs, tc.pubs)
		})
	}
}

// A failed run requeued from its stage's dead set runs again: its index
// entries must say so (score +inf, index key not expiring), or FindRuns
// loses the running run once the failed run's retention passes.
func TestDeadRequeueOfAFailedRunIndexesItAsRunning(t *testing.T) {
	t.Parallel()
	// failed seeds run r1 failed by its stage (dead mode), in s1's dead set.
	failed := func(t *testing.T, f *flowEnv) {
		f.start(t, f.s1, "r1")
		f.takeFrom(t, f.s1, "A", 1, true)
		f.endStage(t, rdb.Dead(rdb.KindStage, "A", "1", "r1", "bad"), "s2", false)
	}
	tests := []struct {
		name   string
		seed   func(t *testing.T, f *flowEnv)
		oldest bool // DeadOldest(1) instead of DeadIDs(r1)
		state  func(f *flowEnv) state
	}{
		{
			name: "by id: running again, the death record and finish time gone, the index entry +inf for good",
			seed: failed,
			state: func(f *flowEnv) state {
				return state{
					f.s1.Runs:       runs("r1"),
					f.s1.Task("r1"): runQueued("s1").with("e", "bad"),
					f.ix:            zset{{"r1", "inf"}},
					f.s1.Waiting:    list{"r1"},
					f.s1.Holders:    set{"A"},
					f.s1.Seq:        str("1"),
				}
			},
		},
		{
			name: "the oldest: the same",
			seed: failed, oldest: true,
			state: func(f *flowEnv) state {
				return state{
					f.s1.Runs:       runs("r1"),
					f.s1.Task("r1"): runQueued("s1").with("e", "bad"),
					f.ix:            zset{{"r1", "inf"}},
					f.s1.Waiting:    list{"r1"},
					f.s1.Holders:    set{"A"},
					f.s1.Seq:        str("1"),
				}
			},
		},
		{
			name: "a run Take buried: running again, its crash count reset, indexed as running",
			seed: func(t *testing.T, f *flowEnv) {
				f.start(t, f.s1, "r1")
				f.do(t, "HSET", f.s1.Task("r1"), "c", "3")
				if _, err := f.st.Take(f.ctx, f.s1, rdb.TakeArgs{Worker: "A", Until: math.MaxInt64, Max: 1, MaxCrashes: 3, Stage: true}); err != nil {
					t.Fatal(err)
				}
			},
			state: func(f *flowEnv) state {
				return state{
					f.s1.Runs:       runs("r1"),
					f.s1.Task("r1"): runQueued("s1"),
					f.ix:            zset{{"r1", "inf"}},
					f.s1.Waiting:    list{"r1"},
					f.s1.Seq:        str("1"),
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFlowEnv(t)
			tc.seed(t, f)
			before := f.dump(t)
			l := f.listen(t)
			var n int
			var err error
			f.call(t, func() {
				if tc.oldest {
					var p rdb.DeadPass
					p, err = f.st.DeadOldest(f.ctx, f.s1, rdb.DeadRequeue, 1, "", "")
					n = p.Handled
				} else {
					n, _, err = f.st.DeadIDs(f.ctx, f.s1, rdb.DeadRequeue, []string{"r1"})
				}
			})
			pubs := l.collect(t, f.env)
			if err != nil || n != 1 {
				t.Errorf("dead requeue = %d, %v; want 1", n, err)
			}
			f.checkState(t, before, stateOf(f, tc.state))
			checkPubs(t, pubs, []msg{{"{F}:wake:s1", "1"}})
		})
	}
}

// A child whose data is gone or is not a hash has no parent field left: the
// take that buries it finds its run from its id (a fan-out names children
// <run id>.<suffix>) and counts it failed there, so the run fails (fail-fast)
// instead of waiting forever for it. Taken from a plain queue, an id of that
// shape changes no run.
func TestTakeBuryingAChildWithoutDataCountsItInItsRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		corrupt func(t *testing.T, f *flowEnv, key string)
		reason  string
	}{
		{"gone", func(t *testing.T, f *flowEnv, key string) { f.do(t, "DEL", key) }, "missing: no task data for this id"},
		{"not a hash", func(t *testing.T, f *flowEnv, key string) {
			f.do(t, "DEL", key)
			f.do(t, "SET", key, "junk")
		}, "corrupt: task data is a string, not a hash"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, child := range []bool{true, false} {
				f := newFlowEnv(t)
				f.start(t, f.s1, "r1")
				f.takeFrom(t, f.s1, "A", 1, true)
				kids := []rdb.Child{{ID: "r1.x1", Queue: "c1", Payload: []byte("p1")}, {ID: "r1.x2", Queue: "c1", Payload: []byte("p2")}}
				f.endStage(t, rdb.Done(rdb.KindStage, "A", "1", "r1", nil), "s2", true, kids...)
				tc.corrupt(t, f, f.c1.Task("r1.x1"))

				got, err := f.st.Take(f.ctx, f.c1, rdb.TakeArgs{Worker: "B", Until: math.MaxInt64, Max: 1, Child: child})
				if err != nil || len(got) != 1 || got[0].PID != "" || got[0].Reason != tc.reason {
					t.Fatalf("Take(child %v) = %+v, %v; want r1.x1 buried: %s", child, got, err, tc.reason)
				}
				run, err := f.st.Run(f.ctx, f.s1, "r1")
				if err != nil {
					t.Fatal(err)
				}
				if !child {
					if run.Status != "running" {
						t.Errorf("taken from a plain queue, the run became %q", run.Status)
					}
					continue
				}
				if run.Status != "failed" {
					t.Errorf("run status = %q, want failed (its child was buried)", run.Status)
				}
				if c := f.do(t, "HGET", f.s1.Task("r1"), "k:r1.x1"); c == nil || string(c.([]byte)) != "failed" {
					t.Errorf("k:r1.x1 = %v, want failed", c)
				}
				if n := f.do(t, "EXISTS", f.c1.Task("r1.x2")).(int64); n != 0 {
					t.Error("the sibling r1.x2 was not cancelled with its failed run")
				}
			}
		})
	}
}

// Metadata given at the start of a run travels with the run to its stage
// takes; a child's, given at its fan-out, to the child's takes. Both are
// opaque strings, stored only when not empty.
func TestFlowMeta(t *testing.T) {
	f := newFlowEnv(t)
	t.Parallel()
	ok, err := f.st.FlowStartMeta(f.ctx, f.s1, "r1", map[string]string{"user": "u1"}, `{"traceparent":"00-run"}`, f.ref)
	if err != nil || !ok {
		t.Fatalf("FlowStartMeta: %v, %v", ok, err)
	}
	got := f.takeFrom(t, f.s1, "A", 1, true)
	if len(got) != 1 || got[0].Run[rdb.FieldMeta] != `{"traceparent":"00-run"}` {
		t.Fatalf("stage take: %+v, want the run's hash with its metadata", got)
	}
	if r := rdb.DecodeRun("r1", got[0].Run); r == nil || r.Meta != `{"traceparent":"00-run"}` || r.State["user"] != "u1" {
		t.Fatalf("DecodeRun: %+v", r)
	}
	f.endStage(t, rdb.Done(rdb.KindStage, "A", got[0].PID, "r1", nil), "s2", true,
		rdb.Child{ID: "k1", Queue: "c1", Payload: []byte("pk1"), Meta: "m1"},
		rdb.Child{ID: "k2", Queue: "c1", Payload: []byte("pk2")})
	kids, err := f.st.Take(f.ctx, f.c1, rdb.TakeArgs{Worker: "A", Until: math.MaxInt64, Max: 2, Child: true})
	if err != nil || len(kids) != 2 {
		t.Fatalf("child take: %+v, %v", kids, err)
	}
	for i, want := range []struct{ id, payload, meta string }{{"k1", "pk1", "m1"}, {"k2", "pk2", ""}} {
		k := kids[i]
		if k.ID != want.id || string(k.Payload) != want.payload || k.Meta != want.meta || k.Parent != "r1" || k.PID == "" {
			t.Errorf("child %d: %+v, want id %s payload %s meta %q of run r1", i, k, want.id, want.payload, want.meta)
		}
	}
	// Stored only when given: k2's hash has no metadata field.
	for i, want := range []hash{
		childOf("k1", "s2", true).with("s", "active", "w", "A", "p", kids[0].PID, "mt", "m1"),
		childOf("k2", "s2", true).with("s", "active", "w", "A", "p", kids[1].PID),
	} {
		key := f.c1.Task(kids[i].ID)
		if h, _ := redis.StringMap(f.do(t, "HGETALL", key), nil); !reflect.DeepEqual(hash(h), want) {
			t.Errorf("%s: %v, want %v", key, h, want)
		}
	}
	r, err := f.st.Run(f.ctx, f.s1, "r1")
	if err != nil || r == nil || r.Meta != `{"traceparent":"00-run"}` {
		t.Fatalf("Run: %+v, %v", r, err)
	}
}
