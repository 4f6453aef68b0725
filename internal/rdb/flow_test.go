package rdb_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
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
					f.s1.Task("r0"): ttl(runEnded(runQueued("s1").started(), "done").with("ft", "@seed"), 60000),
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
				return after(f, runQueued("s2").started().with("f:out", "v1"),
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
				return after(f, runQueued("s2").started(), f.s2.Waiting, list{"r1"})
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
				return after(f, runQueued("s1").started().with("s", "children", "kp", "1", "kg", "1", "kl", "g1 k3", "k:k3", "pending", "kq:k3", "c2"),
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
				return after(f, runQueued("s1").started().with("s", "scheduled", "n", "1", "e", "boom").tried(1, "retry", "A", "boom"),
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
				return after(f, runActive().with("fs", "failed", "ft", "@now", "n", "1", "e", "bad").buried("failed", "A").
					tried(1, "dead", "A", "bad"),
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
					f.c1.Task("k1"), f.child("k1").started().with("s", "scheduled", "n", "1", "e", "boom").tried(1, "retry", "A", "boom"),
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
					f.c1.Task("k1"), f.child("k1").started().with("n", "1", "e", "bad").buried("failed", "A").tried(1, "dead", "A", "bad"),
					f.c1.Dead, zset{{"k1", "@now"}},
					f.c1.Task("k2"), nil, f.c1.Waiting, nil,
					f.c2.Task("k3"), f.child("k3").started().with("s", "active", "w", "B", "p", "3", "x", "1"),
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
					f.c1.Task("k1"): f.child("k1").started().with("n", "1", "e", "bad").buried("failed", "A").tried(1, "dead", "A", "bad"),
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
					f.c1.Task("k1"), f.child("k1").started().with("n", "1", "e", "bad").buried("failed", "A").tried(1, "dead", "A", "bad"),
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
					f.c1.Task("k1"), f.child("k1").started().with("n", "1", "e", "bad").buried("failed", "A").tried(1, "dead", "A", "bad"),
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
					f.c1.Task("k1"), f.child("k1").started().with("n", "1", "e", "bad").buried("failed", "A").tried(1, "dead", "A", "bad"),
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
					f.c1.Task("k2"), f.child("k2").started().with("s", "active", "w", "B", "p", "3"),
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
					f.c1.Task("k2"): f.child("k2").started().with("n", "1", "e", "bad",
						"s", "dead", "dr", "failed", "dt", "@seed", "dw", "B").tried(1, "dead", "B", "bad"),
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
					f.c1.Task("k1"), f.child("k1").started().buried("corrupt: the data of its run r1 is not a hash", "A"),
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
					f.s1.Runs: runs("r1"),
					f.s1.Task("r1"): ttl(runEnded(runQueued("s1").started(), "cancelled").with("n", "1", "e", "boom").
						tried(1, "retry", "A", "boom"), 60000),
					f.ix:         ttl(zset{{"r1", "@now+60000"}}, 60000),
					f.s1.Holders: set{"A"},
					f.s1.Seq:     str("1"),
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
					f.c1.Task("k1"), f.child("k1").started().with("s", "active", "w", "A", "p", "2", "x", "1"),
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
			f.c1.Task("k1"), f.child("k1").started().with("c", "1", "cw", "A").buried(crashed, "B"),
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
					f.s1.Task("r1"): runQueued("s1").started().with("e", "bad").tried(1, "dead", "A", "bad"),
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
					f.s1.Task("r1"): runQueued("s1").started().with("e", "bad").tried(1, "dead", "A", "bad"),
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
		h, _ := redis.StringMap(f.do(t, "HGETALL", key), nil)
		if _, err := strconv.ParseInt(h["sa"], 10, 64); err != nil {
			t.Errorf("%s: start time %q, want one", key, h["sa"])
		}
		delete(h, "sa")
		if !reflect.DeepEqual(hash(h), want) {
			t.Errorf("%s: %v, want %v", key, h, want)
		}
	}
	r, err := f.st.Run(f.ctx, f.s1, "r1")
	if err != nil || r == nil || r.Meta != `{"traceparent":"00-run"}` {
		t.Fatalf("Run: %+v, %v", r, err)
	}
}

// A take buries at most one flow child, the last it takes: burying a
// child fails its run (fail-fast), and the run's stop reads up to
// STOP_SCAN entries of its children's lists. A crash storm of poison
// children, each from its own run, is buried one per take, the others left
// at the front of the child queue in their order (where their runs' stops
// find them), and a wake-up says they wait. Each of k runs here fans out
// two children to c1; each run's first child crashed its workers. The
// poison children wait first, the others behind them, but for r4's second
// child, right behind r4's first: before, a take buried r4.p and handed
// out r4.q, to run for a run that had failed.
func TestTakeBuriesOneChildPerCall(t *testing.T) {
	t.Parallel()
	const k = 5
	const crashed = "crashed: the task was running on 3 workers that died"
	for _, tagged := range []bool{true, false} {
		t.Run("tagged="+strconv.FormatBool(tagged), func(t *testing.T) {
			f := newFlowEnv(t)
			st := f.st // routes by tag: the take reads before it writes ('m')
			if !tagged {
				st = rdb.NewStore(f.pool, f.ns)
			}
			var poison, rest []string
			for r := 0; r < k; r++ {
				id := "r" + strconv.Itoa(r)
				f.start(t, f.s1, id)
				tk := f.takeFrom(t, f.s1, "A", 1, true)
				cs := []rdb.Child{{ID: id + ".p", Queue: "c1", Payload: []byte("x")}, {ID: id + ".q", Queue: "c1", Payload: []byte("y")}}
				f.endIn(t, f.s1, 0, f.stage(rdb.Done(rdb.KindStage, "A", tk[0].PID, id, nil), "s2", true, nil, cs...))
				f.do(t, "HSET", f.c1.Task(id+".p"), "c", "3")
				poison = append(poison, id+".p")
				rest = append(rest, id+".q")
			}
			// The poison children first, then the others.
			f.do(t, "DEL", f.c1.Waiting)
			f.do(t, "RPUSH", redis.Args{f.c1.Waiting}.AddFlat(poison).Add(rest[k-1]).AddFlat(rest[:k-1])...)
			take := func() []rdb.Taken {
				got, err := st.Take(f.ctx, f.c1, rdb.TakeArgs{Worker: "B", Until: math.MaxInt64, Max: 100, MaxCrashes: 3, Child: true})
				if err != nil {
					t.Fatal(err)
				}
				return got
			}
			var got []rdb.Taken
			cmds := monitored(t, func(args []string) bool {
				return len(args) > 1 && strings.EqualFold(args[0], "PUBLISH") && strings.HasSuffix(args[1], ":c1")
			}, func() { got = take() })
			if len(got) != 1 || got[0].ID != "r0.p" || got[0].Reason != crashed {
				t.Fatalf("first take: %+v, want r0.p buried alone", got)
			}
			// Its run's stop took r0.q out of c1: the take says so (no end
			// of a taking reports that cancel).
			if want := []rdb.QueuedTask{{Queue: "c1", ID: "r0.q"}}; !reflect.DeepEqual(got[0].Stopped, want) {
				t.Errorf("first take: stopped %+v, want %+v", got[0].Stopped, want)
			}
			left, _ := redis.Strings(f.do(t, "LRANGE", f.c1.Waiting, 0, -1), nil)
			// r0's own second child was put back, then stopped with its run.
			want := append(append(append([]string{}, poison[1:]...), rest[k-1]), rest[1:k-1]...)
			if !reflect.DeepEqual(left, want) {
				t.Fatalf("left in c1: %v, want %v", left, want)
			}
			if len(cmds) != 1 || cmds[0][2] != strconv.Itoa(2*k-1) {
				t.Errorf("wake-ups published on c1: %q, want one for the %d tasks put back", cmds, 2*k-1)
			}
			// Each following take buries the next one; then the queue is empty.
			for r := 1; r < k; r++ {
				got = take()
				if len(got) != 1 || got[0].ID != poison[r] || got[0].Reason != crashed {
					t.Fatalf("take %d: %+v, want %s buried alone", r+1, got, poison[r])
				}
				if want := []rdb.QueuedTask{{Queue: "c1", ID: rest[r]}}; !reflect.DeepEqual(got[0].Stopped, want) {
					t.Errorf("take %d: stopped %+v, want %+v", r+1, got[0].Stopped, want)
				}
			}
			if got = take(); len(got) != 0 {
				t.Fatalf("last take: %+v, want nothing", got)
			}
			for r := 0; r < k; r++ {
				id := "r" + strconv.Itoa(r)
				h, _ := redis.StringMap(f.do(t, "HGETALL", f.s1.Task(id)), nil)
				if h["fs"] != "failed" || h["k:"+id+".p"] != "failed" || h["k:"+id+".q"] != "cancelled" {
					t.Errorf("run %s: fs=%s p=%s q=%s", id, h["fs"], h["k:"+id+".p"], h["k:"+id+".q"])
				}
			}
			if n, _ := redis.Int(f.do(t, "ZCARD", f.c1.Dead), nil); n != k {
				t.Errorf("dead children: %d, want %d", n, k)
			}
		})
	}
}

// A child is counted in its run once. A take that buries a child whose
// data is gone counts it as failed in the run its id names only if that
// run still waits for it (child_ended, flow.lua): here r1.a already ended
// done and was counted, and a stale copy of its id (no data left) is
// buried. The run must not count it a second time: not as failed (a
// fail-fast run would fail and stop r1.b), and not in its pending count.
func TestBuriedStaleChildIsNotCountedTwice(t *testing.T) {
	t.Parallel()
	f := newFlowEnv(t)
	f.start(t, f.s1, "r1")
	tk := f.takeFrom(t, f.s1, "A", 1, true)
	f.endIn(t, f.s1, 0, f.stage(rdb.Done(rdb.KindStage, "A", tk[0].PID, "r1", nil), "s2", true, nil,
		rdb.Child{ID: "r1.a", Queue: "c1", Payload: []byte("a")}, rdb.Child{ID: "r1.b", Queue: "c1", Payload: []byte("b")}))
	got := f.takeFrom(t, f.c1, "A", 1, false)
	if len(got) != 1 || got[0].ID != "r1.a" {
		t.Fatalf("took %+v, want r1.a", got)
	}
	end := rdb.Done(rdb.KindChild, "A", got[0].PID, "r1.a", nil)
	end.Run = "r1"
	f.endIn(t, f.c1, 0, end)
	f.do(t, "LPUSH", f.c1.Waiting, "r1.a") // a stale copy of the ended child's id
	buried, err := f.st.Take(f.ctx, f.c1, rdb.TakeArgs{Worker: "B", Until: math.MaxInt64, Max: 1, Child: true})
	if err != nil || len(buried) != 1 || buried[0].ID != "r1.a" || buried[0].PID != "" {
		t.Fatalf("take of the stale id = %+v, %v; want r1.a buried", buried, err)
	}
	h, _ := redis.StringMap(f.do(t, "HGETALL", f.s1.Task("r1")), nil)
	if h["fs"] != "running" || h["k:r1.a"] != "done" || h["k:r1.b"] != "pending" || h["kp"] != "1" {
		t.Fatalf("run r1 after the stale child was buried: fs=%s k:r1.a=%s k:r1.b=%s kp=%s; want running, done, pending, 1",
			h["fs"], h["k:r1.a"], h["k:r1.b"], h["kp"])
	}
	if w, _ := redis.Strings(f.do(t, "LRANGE", f.c1.Waiting, 0, -1), nil); !reflect.DeepEqual(w, []string{"r1.b"}) {
		t.Fatalf("c1 waiting %v, want [r1.b]", w)
	}
}

// A run cancelled while it waits deep in a long stage queue stays there,
// marked (its status cancelled), for the take that reaches it: the take
// hands it out never to be run, and its end drops it. The cancel gave the
// run its retention at once, so a run whose retention ran out before a
// take reached it was taken as an id with no data: buried as "missing"
// into the stage's dead set, an ended run listed dead (and a requeue of it
// ran junk). The run is kept until its taking ends; that end gives it its
// retention.
func TestRunCancelledDeepOutlivesItsWait(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"its end", "the requeue of its dead worker"} {
		t.Run(how, func(t *testing.T) {
			f := newFlowEnv(t)
			f.ref.RetentionMillis = 100
			f.start(t, f.s1, "r1")
			fill := make([]any, 0, 20_001)
			fill = append(fill, f.s1.Waiting)
			for i := 0; i < 20_000; i++ {
				fill = append(fill, "z"+strconv.Itoa(i))
			}
			f.do(t, "RPUSH", fill...)
			f.runCancel(t, "r1")
			// However long the take takes to reach it (past its retention
			// of 100 ms), the run must be there: it has no expiry while it
			// waits.
			if pttl, _ := redis.Int64(f.do(t, "PTTL", f.s1.Task("r1")), nil); pttl != -1 {
				t.Fatalf("the run's PTTL while it waits marked: %d, want no expiry (-1)", pttl)
			}
			f.do(t, "LTRIM", f.s1.Waiting, 0, 0)
			got := f.takeFrom(t, f.s1, "A", 1, true)
			if n, _ := redis.Int(f.do(t, "ZCARD", f.s1.Dead), nil); n != 0 {
				ids, _ := redis.Strings(f.do(t, "ZRANGE", f.s1.Dead, 0, -1), nil)
				t.Fatalf("the stage's dead set holds %v: the cancelled run, buried as missing", ids)
			}
			if len(got) != 1 || got[0].ID != "r1" || !got[0].Cancelled {
				t.Fatalf("took %+v, want r1 handed out not to run", got)
			}
			if how == "its end" {
				if ended := f.endIn(t, f.s1, 0, rdb.NotRun("A", got[0])); ended[0].Outcome != rdb.OutcomeCancelled {
					t.Fatalf("its end: %v, want cancelled", ended[0].Outcome)
				}
			} else if _, _, err := f.st.Requeue(f.ctx, f.s1, []string{"A"}, true); err != nil {
				t.Fatal(err)
			}
			pttl, _ := redis.Int64(f.do(t, "PTTL", f.s1.Task("r1")), nil)
			if pttl <= 0 || pttl > 100 {
				t.Fatalf("the run's PTTL after %s: %d, want its retention (100 ms)", how, pttl)
			}
			if n, _ := redis.Int(f.do(t, "LLEN", f.s1.Waiting), nil); n != 0 {
				t.Fatalf("%d left waiting in the stage, want none", n)
			}
		})
	}
}

// TestRunCancelledDeepKeepsItsState: a run cancelled while it waited deep
// in its stage's list is taken later, not to run, and ended. Once ended, a
// run's task state is its status (RunInfo.TaskState): the take's writes
// (state active) must not outlive it, whether its end comes (NotRun) or
// its worker dies first (the reaper's requeue).
func TestRunCancelledDeepKeepsItsState(t *testing.T) {
	for _, how := range []string{"end", "requeue"} {
		t.Run(how, func(t *testing.T) {
			f := newFlowEnv(t)
			f.start(t, f.s1, "r2")
			f.crowd(t, f.s1.Waiting, stopScan)
			f.runCancel(t, "r2")
			runs := f.takeFrom(t, f.s1, "B", 1, true)
			if len(runs) != 1 || runs[0].ID != "r2" || !runs[0].Cancelled {
				t.Fatalf("took %+v from s1, want r2 not to run", runs)
			}
			if how == "end" {
				f.notRun(t, f.s1, "B", runs)
			} else if _, _, err := f.st.Requeue(f.ctx, f.s1, []string{"B"}, true); err != nil {
				t.Fatal(err)
			}
			s, _ := redis.Strings(f.do(t, "HMGET", f.s1.Task("r2"), rdb.FieldRunStatus, rdb.FieldState, "w", "p"), nil)
			if s[0] != "cancelled" || s[1] != "cancelled" || s[2] != "" || s[3] != "" {
				t.Fatalf("r2: status, state, worker, pid = %q; want cancelled, cancelled and no owner", s)
			}
		})
	}
}

// stopScan is STOP_SCAN (lua/include/flow.lua): how many list entries the
// LREMs that stop one run may pass.
const stopScan = 20000

// crowd pushes n ids of other runs at the back of list.
func (f *flowEnv) crowd(t *testing.T, list string, n int) {
	t.Helper()
	for lo := 0; lo < n; lo += 1000 {
		args := []any{list}
		for i := lo; i < min(lo+1000, n); i++ {
			args = append(args, "other"+strconv.Itoa(i))
		}
		f.do(t, "RPUSH", args...)
	}
}

func (f *flowEnv) llen(t *testing.T, list string) int {
	t.Helper()
	n, err := redis.Int(f.do(t, "LLEN", list), nil)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// notRun ends takings handed out not to be run (Taken.Expired) as a
// worker does, and checks each was cancelled.
func (f *flowEnv) notRun(t *testing.T, q rdb.QueueKeys, w string, got []rdb.Taken) {
	t.Helper()
	var es []rdb.Ending
	for _, g := range got {
		if !g.Expired || !g.Cancelled {
			t.Fatalf("%s was handed out to run (attempt %d): its run was cancelled", g.ID, g.Attempt)
		}
		es = append(es, rdb.NotRun(w, g))
	}
	for i, r := range f.endIn(t, q, 0, es...) {
		if r.Outcome != rdb.OutcomeCancelled {
			t.Fatalf("the end of %s: %v, want cancelled", got[i].ID, r.Outcome)
		}
	}
}

// TestRunStopsAreBounded: cancelling a run LREMed its stage task, or each
// of its pending children, from lists that other runs share: a run
// fanned out to 1,000 children in a child queue of 100,000 held Redis for
// 1.5 s (run_cancel, and the end of a child that fails its run fast).
// Past STOP_SCAN entries of list, the tasks are marked where they wait,
// and the takes that reach them hand them out never to run; their ends
// drop them and leave the ended run as it is.
func TestRunStopsAreBounded(t *testing.T) {
	f := newFlowEnv(t)
	const n = 50
	f.start(t, f.s1, "r1")
	f.takeFrom(t, f.s1, "A", 1, true)
	var cs []rdb.Child
	for i := range n {
		cs = append(cs, rdb.Child{ID: "r1.c" + strconv.Itoa(i), Queue: "c1", Payload: []byte("x")})
	}
	f.endStage(t, rdb.Done(rdb.KindStage, "A", "1", "r1", nil), "s2", true, cs...)
	f.crowd(t, f.c1.Waiting, stopScan)
	// r2 waits in s1 in front of as many other runs.
	f.start(t, f.s1, "r2")
	f.crowd(t, f.s1.Waiting, stopScan)

	f.runCancel(t, "r1")
	f.runCancel(t, "r2")
	if got := f.llen(t, f.c1.Waiting); got != n+stopScan {
		t.Fatalf("child queue: %d entries, want %d: the cancel LREMed past its bound", got, n+stopScan)
	}
	if got := f.llen(t, f.s1.Waiting); got != 1+stopScan {
		t.Fatalf("stage queue: %d entries, want %d: the cancel LREMed past its bound", got, 1+stopScan)
	}
	for _, c := range cs {
		if s, _ := redis.Strings(f.do(t, "HMGET", f.c1.Task(c.ID), rdb.FieldCancel, rdb.FieldState), nil); s[0] != "1" || s[1] != rdb.StateCancelled {
			t.Fatalf("%s: cancel mark and state %q, want 1, cancelled", c.ID, s)
		}
		if s, _ := redis.String(f.do(t, "HGET", f.s1.Task("r1"), "k:"+c.ID), nil); s != "cancelled" {
			t.Fatalf("r1 records %s as %q, want cancelled", c.ID, s)
		}
	}

	// The takes hand them out not to run; their ends drop them.
	kids := f.takeFrom(t, f.c1, "B", n, false)
	f.notRun(t, f.c1, "B", kids)
	for _, c := range cs {
		if k, _ := redis.Int(f.do(t, "EXISTS", f.c1.Task(c.ID)), nil); k != 0 {
			t.Fatalf("%s's hash is left after its end", c.ID)
		}
	}
	runs := f.takeFrom(t, f.s1, "B", 1, true)
	if len(runs) != 1 || runs[0].ID != "r2" {
		t.Fatalf("took %+v from s1, want r2", runs)
	}
	f.notRun(t, f.s1, "B", runs)
	for _, id := range []string{"r1", "r2"} {
		if s, _ := redis.String(f.do(t, "HGET", f.s1.Task(id), rdb.FieldRunStatus), nil); s != "cancelled" {
			t.Fatalf("%s: status %q, want cancelled", id, s)
		}
	}
}

// TestRunRetryForgetsExactlyTheFailedFanOut: RetryRun forgets the records
// of the fan-out that failed the run, and no other. It told them apart by
// the child queues of the children it could see as the failed fan-out's
// (cancelled ones, and the failing child while its dead hash named the
// fan-out), which missed both ways: a done child of the failed fan-out in
// another child queue than the failing one was kept (the stage run again
// saw it as an earlier fan-out's result), and once the failing child's dead
// entry was deleted, with no sibling pending, every child record went,
// earlier stages' results too. The run keeps its failed fan-out's list
// ('kl') until RetryRun reads it.
func TestRunRetryForgetsExactlyTheFailedFanOut(t *testing.T) {
	for _, how := range []string{"sibling done in another queue", "dead child deleted"} {
		t.Run(how, func(t *testing.T) {
			f := newFlowEnv(t)
			c3 := f.k.Queue(rdb.QueueRef{Tag: "F", Name: "c3"})
			f.start(t, f.s1, "r1")
			f.takeFrom(t, f.s1, "A", 1, true)
			f.endStage(t, rdb.Done(rdb.KindStage, "A", "1", "r1", nil), "s2", true,
				rdb.Child{ID: "r1.k1", Queue: "c1", Payload: []byte("p")})
			f.takeFrom(t, f.c1, "A", 1, false)
			e := rdb.Done(rdb.KindChild, "A", "2", "r1.k1", []byte("res1"))
			e.Run = "r1"
			f.endIn(t, f.c1, 0, e)
			if got := f.takeFrom(t, f.s2, "A", 1, true); len(got) != 1 {
				t.Fatalf("s2 took %+v, want r1", got)
			}
			f.endIn(t, f.s2, 0, f.stage(rdb.Done(rdb.KindStage, "A", "3", "r1", nil), "", true, nil,
				rdb.Child{ID: "r1.k2", Queue: "c2", Payload: []byte("p")},
				rdb.Child{ID: "r1.k3", Queue: "c3", Payload: []byte("p")}))
			f.takeFrom(t, c3, "A", 1, false)
			d := rdb.Done(rdb.KindChild, "A", "4", "r1.k3", []byte("res3"))
			d.Run = "r1"
			f.endIn(t, c3, 0, d)
			f.takeFrom(t, f.c2, "A", 1, false)
			d = rdb.Dead(rdb.KindChild, "A", "5", "r1.k2", "boom")
			d.Run = "r1"
			f.endIn(t, f.c2, 0, d)
			if s, _ := redis.String(f.do(t, "HGET", f.s1.Task("r1"), rdb.FieldRunStatus), nil); s != "failed" {
				t.Fatalf("run status %q, want failed", s)
			}
			if how == "dead child deleted" {
				if n, _, err := f.st.DeadIDs(f.ctx, f.c2, rdb.DeadDelete, []string{"r1.k2"}); err != nil || n != 1 {
					t.Fatalf("delete dead r1.k2: %d, %v", n, err)
				}
			}
			if ok, err := f.st.RunRetry(f.ctx, f.s1, "r1"); err != nil || !ok {
				t.Fatalf("RunRetry = %v, %v", ok, err)
			}
			rec, err := f.st.Run(f.ctx, f.s1, "r1")
			if err != nil || rec == nil {
				t.Fatalf("Run = %+v, %v", rec, err)
			}
			var ids []string
			for _, c := range rec.Children {
				ids = append(ids, c.ID+"="+c.Status)
			}
			sort.Strings(ids)
			if len(rec.Children) != 1 || rec.Children[0].ID != "r1.k1" || string(rec.Children[0].Result) != "res1" {
				t.Fatalf("children after the retry: %v; want only s1's r1.k1, done with its result", ids)
			}
			if n, _ := redis.Int(f.do(t, "HEXISTS", f.s1.Task("r1"), "kl"), nil); n != 0 {
				t.Fatalf("the retried run still lists a fan-out ('kl')")
			}
		})
	}
}

// TestRunRetryKeepsEarlierFanOuts: RetryRun forgets the failed fan-out's
// children, and only those. A run whose stage s1 fanned out k1 (done, with
// a result the later stages read as Run.Children) and whose stage s2 then
// failed (for good, or by a fail-fast child of its own fan-out) runs s2
// again with k1's record: dropping every child record lost k1's result.
func TestRunRetryKeepsEarlierFanOuts(t *testing.T) {
	for _, how := range []string{"stage dead", "child failed"} {
		t.Run(how, func(t *testing.T) {
			f := newFlowEnv(t)
			f.start(t, f.s1, "r1")
			f.takeFrom(t, f.s1, "A", 1, true)
			f.endStage(t, rdb.Done(rdb.KindStage, "A", "1", "r1", nil), "s2", true,
				rdb.Child{ID: "r1.k1", Queue: "c1", Payload: []byte("p")})
			f.takeFrom(t, f.c1, "A", 1, false)
			e := rdb.Done(rdb.KindChild, "A", "2", "r1.k1", []byte("res1"))
			e.Run = "r1"
			f.endIn(t, f.c1, 0, e)
			if got := f.takeFrom(t, f.s2, "A", 1, true); len(got) != 1 {
				t.Fatalf("s2 took %+v, want r1", got)
			}
			if how == "stage dead" {
				f.endIn(t, f.s2, 0, f.stage(rdb.Dead(rdb.KindStage, "A", "3", "r1", "down"), "", true, nil))
			} else {
				f.endIn(t, f.s2, 0, f.stage(rdb.Done(rdb.KindStage, "A", "3", "r1", nil), "", true, nil,
					rdb.Child{ID: "r1.k2", Queue: "c2", Payload: []byte("p")},
					rdb.Child{ID: "r1.k3", Queue: "c2", Payload: []byte("p")}))
				f.takeFrom(t, f.c2, "A", 1, false)
				d := rdb.Dead(rdb.KindChild, "A", "4", "r1.k2", "boom")
				d.Run = "r1"
				f.endIn(t, f.c2, 0, d)
			}
			if s, _ := redis.String(f.do(t, "HGET", f.s1.Task("r1"), rdb.FieldRunStatus), nil); s != "failed" {
				t.Fatalf("run status %q, want failed", s)
			}
			if ok, err := f.st.RunRetry(f.ctx, f.s1, "r1"); err != nil || !ok {
				t.Fatalf("RunRetry = %v, %v", ok, err)
			}
			rec, err := f.st.Run(f.ctx, f.s1, "r1")
			if err != nil || rec == nil {
				t.Fatalf("Run = %+v, %v", rec, err)
			}
			if len(rec.Children) != 1 || rec.Children[0].ID != "r1.k1" || rec.Children[0].Status != "done" ||
				string(rec.Children[0].Result) != "res1" || rec.Children[0].Queue != "c1" {
				t.Fatalf("children after the retry: %+v; want only s1's k1, done with its result", rec.Children)
			}
		})
	}
}

// A take of a stage queue hands out at most 4,000 fields of runs in all: a
// run past that (it keeps the records of every child it fanned out) comes
// as its number of fields, and ReadRun reads it in HSCAN steps of 1,000.
// The HGETALL of a run that fanned out 10 x 1,000 children held Redis for
// 19 ms inside the take; a take of 100 runs of 1,000 children, 230 ms.
func TestStageTakeBoundsTheRunsItHandsOut(t *testing.T) {
	f := newFlowEnv(t)
	// r1, r2: 500 children each (1,508 fields); r3: 3,000 (9,008 fields);
	// r4: none.
	for i, n := range []int{500, 500, 3000, 0} {
		id := "r" + strconv.Itoa(i+1)
		f.start(t, f.s1, id)
		f.runWithChildren(t, id, n)
	}
	var got []rdb.Taken
	cmds := runCommands(t, f.ns, func() { got = f.takeFrom(t, f.s1, "A", 4, true) })
	if len(got) != 4 {
		t.Fatalf("took %d runs, want 4", len(got))
	}
	whole := map[string]bool{}
	for _, c := range cmds {
		if strings.EqualFold(c[0], "HGETALL") {
			whole[c[1]] = true
		}
	}
	inlined := 0
	for i, g := range got {
		full, _ := redis.StringMap(f.do(t, "HGETALL", f.s1.Task(g.ID)), nil)
		switch {
		case i == 2:
			// 3,016 fields handed out before it: r3 does not fit.
			if g.RunUnread != len(full) || len(g.Run) != 0 || g.Run == nil || whole[f.s1.Task(g.ID)] {
				t.Errorf("%s: RunUnread %d, %d fields handed out, read whole: %v; want %d unread, none handed out",
					g.ID, g.RunUnread, len(g.Run), whole[f.s1.Task(g.ID)], len(full))
			}
		default:
			if g.RunUnread != 0 || len(g.Run) != len(full) {
				t.Errorf("%s: RunUnread %d, %d of %d fields handed out; want all", g.ID, g.RunUnread, len(g.Run), len(full))
			}
			inlined += len(g.Run)
		}
	}
	if inlined > 4000 {
		t.Errorf("the take handed out %d fields of runs, more than 4,000", inlined)
	}
	// NotRun of such a taking is a stage's.
	if e := rdb.NotRun("A", rdb.Taken{ID: "r3", PID: got[2].PID, Cancelled: true, Run: got[2].Run, RunUnread: got[2].RunUnread}); e.Kind != rdb.KindStage {
		t.Errorf("NotRun of an unread run: kind %v, want a stage's", e.Kind)
	}

	// ReadRun and Run read it in steps of at most 1,000 entries, never
	// whole.
	var m map[string]string
	var rec *rdb.RunRecord
	cmds = runCommands(t, f.ns, func() {
		var err error
		if m, err = f.st.ReadRun(f.ctx, f.s1, "r3"); err != nil {
			t.Fatal(err)
		}
		if rec, err = f.st.Run(f.ctx, f.s1, "r3"); err != nil {
			t.Fatal(err)
		}
		if _, err = f.st.Runs(f.ctx, f.s1, []string{"r3", "r4"}); err != nil {
			t.Fatal(err)
		}
	})
	full, _ := redis.StringMap(f.do(t, "HGETALL", f.s1.Task("r3")), nil)
	if len(m) != len(full) || m["kr:r3.c2999"] != "resr3.c2999" || m["fs"] != "running" {
		t.Errorf("ReadRun: %d fields, want %d", len(m), len(full))
	}
	if rec == nil || len(rec.Children) != 3000 || string(rec.Children[0].Result) == "" {
		t.Errorf("Run: %+v", rec)
	}
	scans := 0
	for _, c := range cmds {
		switch strings.ToUpper(c[0]) {
		case "HSCAN":
			scans++
			if n, err := strconv.Atoi(c[len(c)-1]); len(c) != 5 || !strings.EqualFold(c[3], "COUNT") || err != nil || n < 1 || n > 1000 {
				t.Errorf("%q: want HSCAN key cursor COUNT 1 to 1000", c)
			}
		case "HGETALL", "HKEYS", "HVALS":
			t.Errorf("%q: a run read whole", c[:2])
		}
	}
	// Three reads of 9,008 entries, about 1,000 per step.
	if scans < 3*9 {
		t.Errorf("%d HSCAN steps for three reads of 9,008 entries: want at least 27", scans)
	}
}

// A run whose state is too big to come with its take (by bytes, not only by
// fields) is handed out as its number of fields, and ReadRun reads it in
// steps of about 1 MiB: a run holding 64 fields of 1 MiB came in one reply
// of 64 MiB (hundreds of ms of Redis).
func TestRunStateBoundedByBytes(t *testing.T) {
	f := newFlowEnv(t)
	f.start(t, f.s1, "r1")
	args := []any{f.s1.Task("r1")}
	for i := 0; i < 16; i++ {
		args = append(args, "big"+strconv.Itoa(i), bytes.Repeat([]byte{'z'}, 512<<10))
	}
	for i := 0; i < 200; i++ {
		args = append(args, "small"+strconv.Itoa(i), "v")
	}
	f.do(t, "HSET", args...)
	tk := f.takeFrom(t, f.s1, "A", 1, true)
	if tk[0].RunUnread == 0 {
		t.Fatalf("a run of 8 MiB came with its take (%d fields)", len(tk[0].Run))
	}
	sizes := &replySizes{}
	st := rdb.NewStore(sizedGetter{g: routed{pool: f.pool, t: t, ns: f.ns}, r: sizes}, f.ns)
	m, err := st.ReadRun(f.ctx, f.s1, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if len(m) < 216 || len(m["big15"]) != 512<<10 || m["small199"] != "v" {
		t.Fatalf("ReadRun: %d fields", len(m))
	}
	// HSCAN reads whole buckets of the hash, and a step after small
	// entries may meet several big ones: "about 1 MiB" is typical, not a
	// bound (4 to 5 MiB seen in 2% of runs); never the whole 8 MiB.
	if sizes.max >= 8<<20 {
		t.Fatalf("one HSCAN step read %d bytes of the run (%d steps)", sizes.max, sizes.n)
	}
}

// Runs (the Inspector's listing, FindRuns) reads each run in the same
// steps: its first step read a run holding 300 children's results of 1 MiB
// in one command of 300 MiB (182 ms).
func TestRunsReadBigRunsInSteps(t *testing.T) {
	f := newFlowEnv(t)
	for _, id := range []string{"r1", "r2", "r3"} {
		f.start(t, f.s1, id)
	}
	for _, id := range []string{"r1", "r3"} {
		args := []any{f.s1.Task(id)}
		for i := 0; i < 16; i++ {
			args = append(args, "kr:"+id+".c"+strconv.Itoa(i), bytes.Repeat([]byte{'r'}, 512<<10))
		}
		f.do(t, "HSET", args...)
	}
	sizes := &replySizes{}
	st := rdb.NewStore(sizedGetter{g: routed{pool: f.pool, t: t, ns: f.ns}, r: sizes}, f.ns)
	runs, err := st.Runs(f.ctx, f.s1, []string{"r1", "r2", "gone", "r3"})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 3 || runs[0].ID != "r1" || runs[1].ID != "r2" || runs[2].ID != "r3" {
		t.Fatalf("Runs: %d runs", len(runs))
	}
	for _, id := range []string{"r1", "r3"} {
		full, _ := redis.StringMap(f.do(t, "HGETALL", f.s1.Task(id)), nil)
		m, err := f.st.ReadRun(f.ctx, f.s1, id)
		if err != nil || len(m) != len(full) {
			t.Fatalf("%s: %d fields read, %d stored (%v)", id, len(m), len(full), err)
		}
	}
	if sizes.n == 0 || sizes.max >= 8<<20 { // (see TestRunStateBoundedByBytes)
		t.Fatalf("one HSCAN step of Runs read %d bytes (%d steps)", sizes.max, sizes.n)
	}
}

// replySizes records the biggest HSCAN reply of the connections it hands
// out, sent alone or in a pipeline.
type replySizes struct {
	max, n int
}

type sizedGetter struct {
	g routed
	r *replySizes
}

func (s sizedGetter) GetContext(ctx context.Context) (redis.Conn, error) { return s.g.GetContext(ctx) }

func (s sizedGetter) GetContextForTag(ctx context.Context, tag string) (redis.Conn, error) {
	c, err := s.g.GetContextForTag(ctx, tag)
	if err != nil {
		return nil, err
	}
	return &sizedConn{routedConn: c.(*routedConn), r: s.r}, nil
}

type sizedConn struct {
	*routedConn
	r    *replySizes
	sent []string // commands sent, not received yet
}

func (c *sizedConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	v, err := c.routedConn.DoContext(ctx, cmd, args...)
	c.record(cmd, v, err)
	return v, err
}

func (c *sizedConn) Send(cmd string, args ...any) error {
	c.sent = append(c.sent, cmd)
	return c.routedConn.Send(cmd, args...)
}

func (c *sizedConn) ReceiveContext(ctx context.Context) (any, error) {
	v, err := c.routedConn.ReceiveContext(ctx)
	if len(c.sent) > 0 {
		c.record(c.sent[0], v, err)
		c.sent = c.sent[1:]
	}
	return v, err
}

func (c *sizedConn) record(cmd string, v any, err error) {
	if cmd != "HSCAN" || err != nil {
		return
	}
	size := 0
	if r, _ := redis.Values(v, nil); len(r) == 2 {
		kv, _ := redis.ByteSlices(r[1], nil)
		for _, b := range kv {
			size += len(b)
		}
	}
	c.r.n++
	c.r.max = max(c.r.max, size)
}

// ReadRun steps by bytes (about 1 MiB per HSCAN step), but one big entry
// must not make every later step read a single entry: a run holding the
// records of many children and one big state field (a stage's result of
// 1 MiB) was read one entry per round trip from that field on, thousands
// of round trips, past the handler's timeout on a real network (the
// taking then goes back, no attempt counted, and the same read begins
// again: the run never moves on).
func TestReadRunAfterABigEntryGoesOnInBigSteps(t *testing.T) {
	f := newFlowEnv(t)
	f.start(t, f.s1, "r1")
	const small = 20000
	args := []any{f.s1.Task("r1")}
	for i := 0; i < small; i++ {
		args = append(args, fmt.Sprintf("k:r1.c%05d", i), "pending")
	}
	for i := 0; i < 3; i++ {
		args = append(args, fmt.Sprintf("big%d", i), bytes.Repeat([]byte{'z'}, 1<<20))
	}
	f.do(t, "HSET", args...)
	sizes := &replySizes{}
	st := rdb.NewStore(sizedGetter{g: routed{pool: f.pool, t: t, ns: f.ns}, r: sizes}, f.ns)
	began := time.Now()
	m, err := st.ReadRun(f.ctx, f.s1, "r1")
	took := time.Since(began)
	if err != nil {
		t.Fatal(err)
	}
	if len(m) < small+3 {
		t.Fatalf("ReadRun: %d fields", len(m))
	}
	t.Logf("%d HSCAN steps, the biggest %d KiB, %v", sizes.n, sizes.max>>10, took)
	// 3 MiB and 20,000 entries of a few bytes: a few steps of about 1 MiB
	// and some twenty of 1,000 entries (COUNT's bound), plus the first
	// ones that grow from one entry.
	if sizes.n > 100 {
		t.Errorf("ReadRun took %d HSCAN steps (round trips) for 3 MiB in %d entries", sizes.n, small+3)
	}
	if sizes.max > 4<<20 {
		t.Errorf("one HSCAN step read %d bytes", sizes.max)
	}
}

// indexCommands runs f and returns the commands that named key.
func indexCommands(t *testing.T, key string, f func()) [][]string {
	t.Helper()
	return monitored(t, func(args []string) bool { return slices.Contains(args[1:], key) }, f)
}

// FindRuns reads a run index in pages: no command reads more than 1,000
// of its entries, however many runs it holds (one ZRANGEBYSCORE of the
// whole index held Redis for 3.4 ms per 100,000 runs).
func TestFindRunsIsPaged(t *testing.T) {
	f := newFlowEnv(t)
	now := f.now(t)
	// 1,200 running runs (+inf), 1,000 ended within their retention, 300
	// past it.
	var want []string
	for i := 0; i < 1200; i++ {
		id := fmt.Sprintf("run%05d", i)
		f.do(t, "ZADD", f.ix, "inf", id)
		want = append(want, id)
	}
	for i := 0; i < 1000; i++ {
		id := fmt.Sprintf("ended%05d", i)
		f.do(t, "ZADD", f.ix, now+60000+int64(i), id)
		want = append(want, id)
	}
	for i := 0; i < 300; i++ {
		f.do(t, "ZADD", f.ix, now-1-int64(i), fmt.Sprintf("gone%05d", i))
	}
	var got []string
	cmds := indexCommands(t, f.ix, func() {
		var err error
		got, err = f.st.FindRuns(f.ctx, f.s1, "user", "u1")
		if err != nil {
			t.Fatal(err)
		}
	})
	if len(got) != len(want) {
		t.Fatalf("FindRuns: %d ids, want %d", len(got), len(want))
	}
	seen := map[string]bool{}
	for _, id := range got {
		if seen[id] || strings.HasPrefix(id, "gone") {
			t.Fatalf("FindRuns: %s repeated or past its retention", id)
		}
		seen[id] = true
	}
	// Three pages (the third meets the runs past their retention), each a
	// call of runs_page, whose ZRANGE by rank reads at most 1,000 entries.
	calls, ranges := 0, 0
	for _, c := range cmds {
		switch strings.ToUpper(c[0]) {
		case "FCALL", "EVALSHA":
			calls++
		case "ZRANGE":
			ranges++
			lo, err1 := strconv.Atoi(c[2])
			hi, err2 := strconv.Atoi(c[3])
			if err1 != nil || err2 != nil || hi-lo+1 > 1000 {
				t.Fatalf("FindRuns sent %q: more than 1,000 entries in one command", c)
			}
		case "ZSCORE", "ZREVRANK":
		default:
			t.Fatalf("FindRuns sent %q", c)
		}
	}
	if calls != 3 || ranges != 3 {
		t.Fatalf("FindRuns read the index in %d calls and %d ranges, want 3 pages", calls, ranges)
	}
}

// hookPool hands out connections that call before(cmd, args) ahead of
// each command: a test runs its own commands (on another connection) at
// an exact point of a store's call.
type hookPool struct {
	pool   *redis.Pool
	before func(cmd string, args []any)
}

func (p hookPool) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := p.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return hookConn{Conn: c, before: p.before}, nil
}

type hookConn struct {
	redis.Conn
	before func(cmd string, args []any)
}

func (c hookConn) Do(cmd string, args ...any) (any, error) {
	c.before(cmd, args)
	return c.Conn.Do(cmd, args...)
}

func (c hookConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	c.before(cmd, args)
	if cc, ok := c.Conn.(redis.ConnWithContext); ok {
		return cc.DoContext(ctx, cmd, args...)
	}
	return c.Conn.Do(cmd, args...)
}

func (c hookConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	c.before(cmd, args)
	if cc, ok := c.Conn.(redis.ConnWithTimeout); ok {
		return cc.DoWithTimeout(d, cmd, args...)
	}
	return c.Conn.Do(cmd, args...)
}

// TestFindRunsMissesNoRunThatMovesDown: a run that ends while FindRuns
// pages through its index moves down from ranks already read to ranks
// not read yet. Paging by rank (start += RunPage) then passed over the
// run that moved up into the page read next: a run running for the whole
// read was missing from the answer.
func TestFindRunsMissesNoRunThatMovesDown(t *testing.T) {
	// After the first page (r5 r4), the runs named end.
	for _, ended := range [][]string{{"r5"}, {"r4"}, {"r5", "r4"}, {"r4", "r3"}} {
		t.Run(strings.Join(ended, "+"), func(t *testing.T) { findRunsAcrossEnds(t, ended) })
	}
}

func findRunsAcrossEnds(t *testing.T, ended []string) {
	f := newFlowEnv(t)
	defer func(n int) { rdb.RunPage = n }(rdb.RunPage)
	rdb.RunPage = 2
	// Five running runs (+inf): in the index's order from the top, r5 r4
	// r3 r2 r1.
	for i := 1; i <= 5; i++ {
		f.do(t, "ZADD", f.ix, "inf", fmt.Sprintf("r%d", i))
	}
	pool := &redis.Pool{DialContext: func(ctx context.Context) (redis.Conn, error) {
		return redis.DialURLContext(ctx, srv.URL)
	}}
	defer pool.Close()
	pages := 0
	st := rdb.NewStore(hookPool{pool: pool, before: func(cmd string, args []any) {
		if !strings.EqualFold(cmd, "ZRANGE") && !strings.EqualFold(cmd, "EVALSHA") && !strings.EqualFold(cmd, "FCALL") {
			return
		}
		if len(args) == 0 || fmt.Sprint(args[0]) != f.ix && (len(args) < 3 || fmt.Sprint(args[2]) != f.ix) {
			return
		}
		pages++
		if pages == 2 {
			// Each run that ends is scored with its expiry, below every
			// running run.
			for i, id := range ended {
				f.do(t, "ZADD", f.ix, "XX", f.now(t)+60000+int64(i), id)
			}
		}
	}}, f.ns)
	got, err := st.FindRuns(f.ctx, f.s1, "user", "u1")
	if err != nil {
		t.Fatal(err)
	}
	if pages < 2 {
		t.Fatalf("FindRuns read the index in %d pages, want several (RunPage 2)", pages)
	}
	seen := map[string]int{}
	for _, id := range got {
		seen[id]++
	}
	for i := 1; i <= 5; i++ {
		id := fmt.Sprintf("r%d", i)
		if seen[id] != 1 {
			t.Errorf("FindRuns = %v: %s listed %d times, want once", got, id, seen[id])
		}
	}
}

func (c hookConn) ReceiveContext(ctx context.Context) (any, error) {
	if cc, ok := c.Conn.(redis.ConnWithContext); ok {
		return cc.ReceiveContext(ctx)
	}
	return c.Conn.Receive()
}

func (c hookConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	if cc, ok := c.Conn.(redis.ConnWithTimeout); ok {
		return cc.ReceiveWithTimeout(d)
	}
	return c.Conn.Receive()
}

// FuzzDecodeRun: decoding a run hash read from Redis never panics, keeps
// every "f:" field, and finds one child per "k:" field.
func FuzzDecodeRun(f *testing.F) {
	f.Add("f:userId", "42", "k:c1", "done", "kr:c1", "ok")
	f.Add("k:", "", "kq:", "x", "f:", "")
	f.Add("s", "active", "n", "abc", "ft", "-1")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string) {
		m := map[string]string{k1: v1, k2: v2, k3: v3}
		r := rdb.DecodeRun("r", m)
		if m[rdb.FieldRunStatus] == "" {
			if r != nil {
				t.Fatalf("DecodeRun(%v) without a status: %+v", m, r)
			}
			return
		}
		state, kids := r.State, r.Children
		wantF, wantK := 0, 0
		for k := range m {
			if strings.HasPrefix(k, "f:") {
				wantF++
			}
			if strings.HasPrefix(k, "k:") {
				wantK++
			}
		}
		if len(state) != wantF || len(kids) != wantK {
			t.Fatalf("DecodeRun(%v): %d fields, %d children; want %d, %d", m, len(state), len(kids), wantF, wantK)
		}
	})
}

// A run read in steps while a script writes it (its stage ends between two
// HSCAN steps) is read again: the view never mixes the fields from before
// the write with the status from after it.
func TestReadRunIsNotTornByAWrite(t *testing.T) {
	f := newFlowEnv(t)
	f.start(t, f.s1, "r1")
	args := []any{f.s1.Task("r1")}
	for i := 0; i < 300; i++ { // no longer a compact hash: HSCAN takes steps
		args = append(args, "f:k"+strconv.Itoa(i), strings.Repeat("v", 100))
	}
	f.do(t, "HSET", args...)
	var once atomic.Bool
	hooked := &redistest.HookPool{Pool: f.pool, Done: func(_ redis.Conn, cmd string, _ []any, r any, err error) (any, error) {
		if cmd == "HSCAN" && once.CompareAndSwap(false, true) {
			// The stage ends now: every field and the run's status change
			// together; the step just read holds some of them as before.
			w := []any{f.s1.Task("r1"), rdb.FieldRunStatus, "done", rdb.FieldState, "done"}
			for i := 0; i < 300; i++ {
				w = append(w, "f:k"+strconv.Itoa(i), "new")
			}
			f.do(t, "HSET", w...)
		}
		return r, err
	}}
	m, err := rdb.NewStore(hooked, f.ns).ReadRun(f.ctx, f.s1, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if !once.Load() {
		t.Fatal("no HSCAN step: the test wrote nothing between two")
	}
	old := 0
	for i := 0; i < 300; i++ {
		if m["f:k"+strconv.Itoa(i)] != "new" {
			old++
		}
	}
	if m[rdb.FieldRunStatus] != "done" || old > 0 {
		t.Fatalf("read status %q and %d of 300 fields as before the write; want the run after the write, whole", m[rdb.FieldRunStatus], old)
	}
}

// A run that stopped awaiting a signal (its bound passed, or a RunNow)
// and whose stage then waits for a retry is not woken by that signal:
// the retry keeps its backoff and the signal is kept, not delivered to a
// stage that already ran without it.
func TestSignalDoesNotCutARetryShort(t *testing.T) {
	t.Parallel()
	f := newFlowEnv(t)
	f.start(t, f.s1, "r1")
	got := f.takeFrom(t, f.s1, "A", 1, true)
	e := f.stage(rdb.Done(rdb.KindStage, "A", got[0].PID, "r1", nil), "s2", false, nil)
	e.Stage.SleepMs, e.Stage.Await = 3_600_000, "paid"
	f.endIn(t, f.s1, 0, e)
	if ok, err := f.st.Promote(f.ctx, f.s2, "r1"); err != nil || !ok {
		t.Fatalf("Promote = %v, %v", ok, err)
	}
	if r, err := f.st.Run(f.ctx, f.s2, "r1"); err != nil || r.Awaiting != "" {
		t.Errorf("Run once woken = %+v, %v; want no signal awaited", r, err)
	}
	got = f.takeFrom(t, f.s2, "A", 1, true)
	f.endIn(t, f.s2, 0, rdb.Retry(rdb.KindStage, "A", got[0].PID, "r1", 3_600_000, "boom"))
	out, err := f.st.Signal(f.ctx, f.s2, "r1", "paid", []byte("p"), "", 60_000)
	if err != nil || out != rdb.SignalKept {
		t.Errorf("Signal = %v, %v; want kept (%v): the stage ran already", out, err, rdb.SignalKept)
	}
	if n, err := redis.Int(f.c.Do("ZCARD", f.s2.Scheduled)); err != nil || n != 1 {
		t.Errorf("s2's scheduled set holds %d, %v; want the retry still there", n, err)
	}
	r, err := f.st.Run(f.ctx, f.s2, "r1")
	if err != nil || r.Awaiting != "" {
		t.Errorf("Run = %+v, %v; want no signal awaited", r, err)
	}
}

// Kept signals past their time stop counting against the run's bound:
// a run that was sent MaxKeptSignals names it never awaited still keeps
// a new one once those expired.
func TestSignalKeptExpiredMakeRoom(t *testing.T) {
	t.Parallel()
	f := newFlowEnv(t)
	f.start(t, f.s1, "r1")
	for i := range rdb.MaxKeptSignals {
		if out, err := f.st.Signal(f.ctx, f.s1, "r1", "n"+strconv.Itoa(i), nil, "", 0); err != nil || out != rdb.SignalKept {
			t.Fatalf("Signal n%d = %v, %v; want kept", i, out, err)
		}
	}
	if out, err := f.st.Signal(f.ctx, f.s1, "r1", "late", []byte("p"), "", 60_000); err != nil || out != rdb.SignalKept {
		t.Errorf("Signal after %d expired = %v, %v; want kept", rdb.MaxKeptSignals, out, err)
	}
	for i := range rdb.MaxKeptSignals - 1 {
		if out, err := f.st.Signal(f.ctx, f.s1, "r1", "m"+strconv.Itoa(i), nil, "", 60_000); err != nil || out != rdb.SignalKept {
			t.Fatalf("Signal m%d = %v, %v; want kept", i, out, err)
		}
	}
	if out, err := f.st.Signal(f.ctx, f.s1, "r1", "over", nil, "", 60_000); err != nil || out != rdb.SignalFull {
		t.Errorf("Signal past %d live ones = %v, %v; want full", rdb.MaxKeptSignals, out, err)
	}
}

// A kept signal of any name (colons, spaces, newlines) is taken by the
// stage end that awaits it, and leaves the run's kept names: the run
// then keeps MaxKeptSignals others.
func TestSignalKeptNamesRoundTrip(t *testing.T) {
	t.Parallel()
	f := newFlowEnv(t)
	f.start(t, f.s1, "r1")
	odd := "3:a b\nsp:x "
	for _, name := range []string{odd, "other"} {
		if out, err := f.st.Signal(f.ctx, f.s1, "r1", name, []byte("p "+name), "", 60_000); err != nil || out != rdb.SignalKept {
			t.Fatalf("Signal %q = %v, %v; want kept", name, out, err)
		}
	}
	got := f.takeFrom(t, f.s1, "A", 1, true)
	e := f.stage(rdb.Done(rdb.KindStage, "A", got[0].PID, "r1", nil), "s2", false, nil)
	e.Stage.Await = odd
	f.endIn(t, f.s1, 0, e)
	r, err := f.st.Run(f.ctx, f.s1, "r1")
	if err != nil || r.TaskState != "queued" || r.State[odd] != "p "+odd || r.Awaiting != "" {
		t.Fatalf("Run = %+v, %v; want it queued at s2 with the kept payload", r, err)
	}
	for i := range rdb.MaxKeptSignals - 1 {
		if out, err := f.st.Signal(f.ctx, f.s1, "r1", "n"+strconv.Itoa(i), nil, "", 60_000); err != nil || out != rdb.SignalKept {
			t.Fatalf("Signal n%d = %v, %v; want kept beside other", i, out, err)
		}
	}
	if out, err := f.st.Signal(f.ctx, f.s1, "r1", odd, nil, "", 60_000); err != nil || out != rdb.SignalFull {
		t.Errorf("Signal %q again past %d kept = %v, %v; want full", odd, rdb.MaxKeptSignals, out, err)
	}
}

// A run remembers its last 256 signal ids, no more: the 257th pushes the
// first out of the ring (its field goes), and that first id is taken
// again; the ids still in the ring are refused.
func TestSignalIDsAreARing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := rdb.FlowRef{RetentionMillis: 60_000}
	q := e.st.Queue(rdb.QueueRef{Tag: "sigring", Name: "s1"})
	if _, err := e.st.FlowStart(e.ctx, q, "run1", nil, f); err != nil {
		t.Fatal(err)
	}
	send := func(id string) rdb.SignalOutcome {
		t.Helper()
		out, err := e.st.Signal(e.ctx, q, "run1", "n", nil, id, 60_000)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for i := range 257 {
		if out := send(fmt.Sprintf("id-%d", i)); out != rdb.SignalKept {
			t.Fatalf("signal id-%d = %v, want kept", i, out)
		}
	}
	if out := send("id-256"); out != rdb.SignalTaken {
		t.Errorf("the latest id again = %v, want taken", out)
	}
	if out := send("id-1"); out != rdb.SignalTaken {
		t.Errorf("id-1 (still in the ring) again = %v, want taken", out)
	}
	if n, _ := redis.Int(e.c.Do("HLEN", q.Task("run1"))); n > 600 {
		t.Errorf("the run's hash holds %d fields after 259 signals", n)
	}
	if out := send("id-0"); out != rdb.SignalKept {
		t.Errorf("id-0, out of the ring, again = %v, want kept (taken anew)", out)
	}
}
