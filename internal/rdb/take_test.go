package rdb_test

import (
	"math"
	"reflect"
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
)

// tk is a first attempt at task id (payload "p"+id) as taking pid.
func tk(id, pid string) taken {
	return taken{ID: id, PID: pid, Payload: payload(id), Attempt: 1}
}

func TestTake(t *testing.T) {
	t.Parallel()
	const (
		missing = "missing: no task data for this id"
		noD     = "corrupt: task data has no payload"
		nan     = "corrupt: attempt or crash count is not a number"
		neg     = "corrupt: attempt or crash count is negative"
	)
	tests := []struct {
		name       string
		seed       func(t *testing.T, e *env)
		w          string
		max        int
		maxCrashes int
		stage      bool
		want       []taken
		state      func(e *env) state
	}{
		{
			name: "takes at most max from the front, in FIFO order",
			seed: func(t *testing.T, e *env) { e.enqueue(t, "t1", "t2", "t3") },
			w:    "A", max: 2,
			want: []taken{tk("t1", "1"), tk("t2", "2")},
			state: func(e *env) state {
				return state{
					e.q.Waiting:          list{"t3"},
					e.q.Task("t1"):       active("t1", "A", "1"),
					e.q.Task("t2"):       active("t2", "A", "2"),
					e.q.Task("t3"):       fresh("t3"),
					e.q.WorkerQueue("A"): hash{"1": "t1", "2": "t2"},
					e.q.Holders:          set{"A"},
					e.q.Seq:              str("2"),
				}
			},
		},
		{
			name: "max larger than the queue takes everything",
			seed: func(t *testing.T, e *env) { e.enqueue(t, "t1", "t2") },
			w:    "A", max: 10,
			want: []taken{tk("t1", "1"), tk("t2", "2")},
			state: func(e *env) state {
				return state{
					e.q.Task("t1"):       active("t1", "A", "1"),
					e.q.Task("t2"):       active("t2", "A", "2"),
					e.q.WorkerQueue("A"): hash{"1": "t1", "2": "t2"},
					e.q.Holders:          set{"A"},
					e.q.Seq:              str("2"),
				}
			},
		},
		{
			name:  "empty queue: nothing taken, nothing written",
			w:     "A",
			max:   3,
			want:  []taken{},
			state: func(e *env) state { return state{} },
		},
		{
			name: "empty payload is a task, not a missing hash",
			seed: func(t *testing.T, e *env) {
				if _, err := e.st.Enqueue(e.ctx, e.q, []string{"t1"}, [][]byte{{}}, nil); err != nil {
					t.Fatal(err)
				}
			},
			w: "A", max: 1,
			want: []taken{{ID: "t1", PID: "1", Attempt: 1}},
			state: func(e *env) state {
				return state{
					e.q.Task("t1"):       hash{"d": "", "s": "active", "w": "A", "p": "1"},
					e.q.WorkerQueue("A"): hash{"1": "t1"},
					e.q.Holders:          set{"A"},
					e.q.Seq:              str("1"),
				}
			},
		},
		{
			name: "failed attempts so far: attempt = n + 1, n itself unchanged",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.do(t, "HSET", e.q.Task("t1"), "n", "2", "e", "boom")
			},
			w: "A", max: 1,
			want: []taken{{ID: "t1", PID: "1", Payload: "pt1", Attempt: 3}},
			state: func(e *env) state {
				return state{
					e.q.Task("t1"):       active("t1", "A", "1").with("n", "2", "e", "boom"),
					e.q.WorkerQueue("A"): hash{"1": "t1"},
					e.q.Holders:          set{"A"},
					e.q.Seq:              str("1"),
				}
			},
		},
		{
			name: "given back: not a failed attempt, the attempt stays 1",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
				e.giveBack(t, "A", "1", "t1")
			},
			w: "B", max: 1,
			want: []taken{tk("t1", "2")},
			state: func(e *env) state {
				return state{
					e.q.Task("t1"):       active("t1", "B", "2"),
					e.q.WorkerQueue("B"): hash{"2": "t1"},
					e.q.Holders:          set{"A", "B"},
					e.q.Seq:              str("2"),
				}
			},
		},
		{
			// Two workers that died (a crash counts once per dead worker:
			// TestRequeueCountsACrashOncePerDeadWorker).
			name: "requeued after crashes, below the limit: crashes reported, attempt stays 1",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
				e.requeue(t, true, "A")
				e.take(t, "B", 1)
				e.requeue(t, true, "B")
			},
			w: "C", max: 1, maxCrashes: 3,
			want: []taken{{ID: "t1", PID: "3", Payload: "pt1", Attempt: 1, Crashes: 2}},
			state: func(e *env) state {
				return state{
					e.q.Task("t1"):       active("t1", "C", "3").with("c", "2", "cw", "B"),
					e.q.WorkerQueue("C"): hash{"3": "t1"},
					e.q.Holders:          set{"C"},
					e.q.Seq:              str("3"),
				}
			},
		},
		{
			name: "max crashes 0 is no limit",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.do(t, "HSET", e.q.Task("t1"), "c", "50")
			},
			w: "A", max: 1, maxCrashes: 0,
			want: []taken{{ID: "t1", PID: "1", Payload: "pt1", Attempt: 1, Crashes: 50}},
			state: func(e *env) state {
				return state{
					e.q.Task("t1"):       active("t1", "A", "1").with("c", "50"),
					e.q.WorkerQueue("A"): hash{"1": "t1"},
					e.q.Holders:          set{"A"},
					e.q.Seq:              str("1"),
				}
			},
		},
		{
			name: "per-task overrides handed out",
			seed: func(t *testing.T, e *env) {
				e.enqueueTo(t, e.q, &rdb.EnqueueArgs{MaxAttempts: 7, TimeoutMs: 1500}, "t1")
			},
			w: "A", max: 1,
			want: []taken{{ID: "t1", PID: "1", Payload: "pt1", Attempt: 1, MaxAttempts: 7, TimeoutMs: 1500}},
			state: func(e *env) state {
				return state{
					e.q.Task("t1"):       active("t1", "A", "1").with("ma", "7", "to", "1500"),
					e.q.WorkerQueue("A"): hash{"1": "t1"},
					e.q.Holders:          set{"A"},
					e.q.Seq:              str("1"),
				}
			},
		},
		{
			name: "flow child: its run id handed out as the parent",
			seed: func(t *testing.T, e *env) {
				e.do(t, "HSET", e.q.Task("k1"), "d", "pk1", "pr", "r1")
				e.do(t, "RPUSH", e.q.Waiting, "k1")
			},
			w: "A", max: 1,
			want: []taken{{ID: "k1", PID: "1", Payload: "pk1", Attempt: 1, Parent: "r1"}},
			state: func(e *env) state {
				return state{
					e.q.Task("k1"):       active("k1", "A", "1").with("pr", "r1"),
					e.q.WorkerQueue("A"): hash{"1": "k1"},
					e.q.Holders:          set{"A"},
					e.q.Seq:              str("1"),
				}
			},
		},
		{
			name: "stage queue: the run's whole hash handed out, as taken",
			seed: func(t *testing.T, e *env) {
				ref := rdb.FlowRef{RetentionMillis: 60000, IndexBy: []string{"user"}}
				if _, err := e.st.FlowStart(e.ctx, e.q, "r1", map[string]string{"user": "u1"}, ref); err != nil {
					t.Fatal(err)
				}
			},
			w: "A", max: 1, stage: true,
			want: []taken{{ID: "r1", PID: "1", Attempt: 1, Run: hash{"d": "", "st": "q", "fs": "running",
				"s": "active", "w": "A", "p": "1", "f:user": "u1", "fr": "60000", "fi": "user", "i:user": "u1"}}},
			state: func(e *env) state {
				return state{
					e.q.Task("r1"): hash{"d": "", "st": "q", "fs": "running", "s": "active", "w": "A", "p": "1",
						"f:user": "u1", "fr": "60000", "fi": "user", "i:user": "u1"},
					e.q.IndexKey("user", "u1"): zset{{"r1", "inf"}},
					e.q.Runs:                   runs("r1"),
					e.q.WorkerQueue("A"):       hash{"1": "r1"},
					e.q.Holders:                set{"A"},
					e.q.Seq:                    str("1"),
				}
			},
		},
		{
			name: "holder index gets every taking worker",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2")
				e.take(t, "A", 1)
			},
			w: "B", max: 1,
			want: []taken{tk("t2", "2")},
			state: func(e *env) state {
				return state{
					e.q.Task("t1"):       active("t1", "A", "1"),
					e.q.Task("t2"):       active("t2", "B", "2"),
					e.q.WorkerQueue("A"): hash{"1": "t1"},
					e.q.WorkerQueue("B"): hash{"2": "t2"},
					e.q.Holders:          set{"A", "B"},
					e.q.Seq:              str("2"),
				}
			},
		},
		// Bad data: buried with a reason, never handed out, never looping.
		{
			name: "missing task hash: buried (pid \"\", reason), the others taken around it",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2", "t3")
				e.do(t, "DEL", e.q.Task("t2"))
			},
			w: "A", max: 3,
			want: []taken{tk("t1", "1"), {ID: "t2", Reason: missing}, tk("t3", "3")},
			state: func(e *env) state {
				return state{
					e.q.Task("t1"):       active("t1", "A", "1"),
					e.q.Task("t2"):       hash{}.buried(missing, "A"),
					e.q.Task("t3"):       active("t3", "A", "3"),
					e.q.Dead:             zset{{"t2", "@now"}},
					e.q.WorkerQueue("A"): hash{"1": "t1", "3": "t3"},
					e.q.Holders:          set{"A"},
					e.q.Seq:              str("3"),
				}
			},
		},
		{
			name: "only bad tasks: buried, no holding recorded, the worker not indexed",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.do(t, "DEL", e.q.Task("t1"))
			},
			w: "A", max: 1,
			want: []taken{{ID: "t1", Reason: missing}},
			state: func(e *env) state {
				return state{
					e.q.Task("t1"): hash{}.buried(missing, "A"),
					e.q.Dead:       zset{{"t1", "@now"}},
					e.q.Seq:        str("1"),
				}
			},
		},
		{
			name: "task data is a string: buried, the string kept in a hash of its own",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.do(t, "SET", e.q.Task("t1"), "garbage")
			},
			w: "A", max: 1,
			want: []taken{{ID: "t1", Reason: "corrupt: task data is a string, not a hash"}},
			state: func(e *env) state {
				return state{
					e.q.Task("t1"): hash{"raw": "garbage"}.buried("corrupt: task data is a string, not a hash", "A"),
					e.q.Dead:       zset{{"t1", "@now"}},
					e.q.Seq:        str("1"),
				}
			},
		},
		{
			name: "task data is a list: buried, replaced by a hash",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.do(t, "DEL", e.q.Task("t1"))
				e.do(t, "RPUSH", e.q.Task("t1"), "x")
			},
			w: "A", max: 1,
			want: []taken{{ID: "t1", Reason: "corrupt: task data is a list, not a hash"}},
			state: func(e *env) state {
				return state{
					e.q.Task("t1"): hash{"raw": ""}.buried("corrupt: task data is a list, not a hash", "A"),
					e.q.Dead:       zset{{"t1", "@now"}},
					e.q.Seq:        str("1"),
				}
			},
		},
		{
			name: "no payload field: buried",
			seed: func(t *testing.T, e *env) {
				e.do(t, "HSET", e.q.Task("t1"), "n", "1")
				e.do(t, "RPUSH", e.q.Waiting, "t1")
			},
			w: "A", max: 1,
			want: []taken{{ID: "t1", Reason: noD}},
			state: func(e *env) state {
				return state{
					e.q.Task("t1"): hash{"n": "1"}.buried(noD, "A"),
					e.q.Dead:       zset{{"t1", "@now"}},
					e.q.Seq:        str("1"),
				}
			},
		},
		{
			name: "attempt count not a number: buried",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.do(t, "HSET", e.q.Task("t1"), "n", "two")
			},
			w: "A", max: 1,
			want: []taken{{ID: "t1", Reason: nan}},
			state: func(e *env) state {
				return state{
					e.q.Task("t1"): fresh("t1").with("n", "two").buried(nan, "A"),
					e.q.Dead:       zset{{"t1", "@now"}},
					e.q.Seq:        str("1"),
				}
			},
		},
		{
			name: "attempt count negative (the mark of a task not to run): buried",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.do(t, "HSET", e.q.Task("t1"), "n", "-2")
			},
			w: "A", max: 1,
			want: []taken{{ID: "t1", Reason: neg}},
			state: func(e *env) state {
				return state{
					e.q.Task("t1"): fresh("t1").with("n", "-2").buried(neg, "A"),
					e.q.Dead:       zset{{"t1", "@now"}},
					e.q.Seq:        str("1"),
				}
			},
		},
		{
			name: "crash count not a number: buried",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.do(t, "HSET", e.q.Task("t1"), "c", "1x")
			},
			w: "A", max: 1,
			want: []taken{{ID: "t1", Reason: nan}},
			state: func(e *env) state {
				return state{
					e.q.Task("t1"): fresh("t1").with("c", "1x").buried(nan, "A"),
					e.q.Dead:       zset{{"t1", "@now"}},
					e.q.Seq:        str("1"),
				}
			},
		},
		{
			name: "crashed max-crashes workers: buried, its unique key released, the next task taken",
			seed: func(t *testing.T, e *env) {
				e.enqueueUnique(t, "t1", "k")
				e.enqueue(t, "t2")
				e.do(t, "HSET", e.q.Task("t1"), "c", "3")
			},
			w: "A", max: 2, maxCrashes: 3,
			want: []taken{{ID: "t1", Reason: "crashed: the task was running on 3 workers that died"}, tk("t2", "2")},
			state: func(e *env) state {
				return state{
					e.q.Task("t1"): fresh("t1").with("u", uniqueKey(e.q, "k"), "c", "3").
						buried("crashed: the task was running on 3 workers that died", "A"),
					e.q.Task("t2"):       active("t2", "A", "2"),
					e.q.Dead:             zset{{"t1", "@now"}},
					e.q.WorkerQueue("A"): hash{"2": "t2"},
					e.q.Holders:          set{"A"},
					e.q.Seq:              str("2"),
				}
			},
		},
		{
			name: "burying applies the dead set's count cap",
			seed: func(t *testing.T, e *env) {
				e.setCfg(t, e.q, "dead_max", 1)
				e.seedDead(t, e.q, "d1", e.now(t))
				e.enqueue(t, "t1")
				e.do(t, "HSET", e.q.Task("t1"), "c", "1")
			},
			w: "A", max: 1, maxCrashes: 1,
			want: []taken{{ID: "t1", Reason: "crashed: the task was running on 1 workers that died"}},
			state: func(e *env) state {
				return state{
					e.q.Config: hash{"dead_max": "1"},
					e.q.Task("t1"): fresh("t1").with("c", "1").
						buried("crashed: the task was running on 1 workers that died", "A"),
					e.q.Dead: zset{{"t1", "@now"}},
					e.q.Seq:  str("1"),
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			if tc.seed != nil {
				tc.seed(t, e)
			}
			before := e.dump(t)
			l := e.listen(t)
			var res []rdb.Taken
			var err error
			e.call(t, func() {
				res, err = e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: tc.w, Until: math.MaxInt64, Max: tc.max, MaxCrashes: tc.maxCrashes, Stage: tc.stage})
			})
			pubs := l.collect(t, e)
			if err != nil {
				t.Fatalf("Take: %v", err)
			}
			got := takenOf(res)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Take = %+v, want %+v", got, tc.want)
			}
			e.checkState(t, before, tc.state)
			checkPubs(t, pubs, nil)
		})
	}
}
