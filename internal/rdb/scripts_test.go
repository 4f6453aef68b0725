package rdb_test

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
)

// Every table below seeds Redis, snapshots it, runs one wrapper, then checks
// the wrapper's result, the whole namespace (state: nil means "nothing
// changed") and every message published on the namespace's channels (pubs:
// nil means "none").

// errAny stands for "some error" in tables.
var errAny = errors.New("any error")

func checkErr(t *testing.T, what string, err, want error) {
	t.Helper()
	switch {
	case want == errAny && err == nil:
		t.Errorf("%s: no error, want one", what)
	case want != errAny && !errors.Is(err, want):
		t.Errorf("%s: err = %v, want %v", what, err, want)
	}
}

func TestEnqueue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		seed       func(t *testing.T, e *env)
		ids        []string
		payloads   []string
		args       func(e *env) *rdb.EnqueueArgs
		wantHolder string
		wantErr    error
		state      func(e *env) state
		pubs       []msg
	}{
		{
			name:     "into an empty queue: one wake-up with the count",
			ids:      []string{"t1", "t2"},
			payloads: []string{"pt1", "pt2"},
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t1", "t2"},
					e.q.Task("t1"): fresh("t1"),
					e.q.Task("t2"): fresh("t2"),
				}
			},
			pubs: []msg{{"wake", "2"}},
		},
		{
			name:     "behind waiting tasks",
			seed:     func(t *testing.T, e *env) { e.enqueue(t, "t1") },
			ids:      []string{"t2", "t3", "t4"},
			payloads: []string{"pt2", "pt3", "pt4"},
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t1", "t2", "t3", "t4"},
					e.q.Task("t1"): fresh("t1"),
					e.q.Task("t2"): fresh("t2"),
					e.q.Task("t3"): fresh("t3"),
					e.q.Task("t4"): fresh("t4"),
				}
			},
			pubs: []msg{{"wake", "3"}},
		},
		{
			name:     "payload bytes kept as they are, empty included",
			ids:      []string{"t1", "t2"},
			payloads: []string{"\x00\xff{x}:\n", ""},
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t1", "t2"},
					e.q.Task("t1"): hash{"d": "\x00\xff{x}:\n"},
					e.q.Task("t2"): hash{"d": ""},
				}
			},
			pubs: []msg{{"wake", "2"}},
		},
		{
			name:     "ids and payloads of different lengths: error, nothing written",
			seed:     func(t *testing.T, e *env) { e.enqueue(t, "t1") },
			ids:      []string{"t2", "t3"},
			payloads: []string{"pt2"},
			wantErr:  errAny,
		},
		{
			name:     "per-task overrides: max attempts and timeout on the hash",
			ids:      []string{"t1"},
			payloads: []string{"pt1"},
			args:     func(*env) *rdb.EnqueueArgs { return &rdb.EnqueueArgs{MaxAttempts: 3, TimeoutMs: 1500} },
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t1"},
					e.q.Task("t1"): fresh("t1").with("ma", "3", "to", "1500"),
				}
			},
			pubs: []msg{{"wake", "1"}},
		},
		{
			name:     "unique key free: locked for its TTL, holding the id, named on the hash",
			ids:      []string{"t1"},
			payloads: []string{"pt1"},
			args: func(e *env) *rdb.EnqueueArgs {
				return &rdb.EnqueueArgs{UniqueKey: "k", UniqueTTL: 60000}
			},
			state: func(e *env) state {
				return state{
					e.q.Waiting:         list{"t1"},
					e.q.Task("t1"):      fresh("t1").with("u", uniqueKey(e.q, "k")),
					uniqueKey(e.q, "k"): ttl(str("t1"), 60000),
				}
			},
			pubs: []msg{{"wake", "1"}},
		},
		{
			name:     "unique key held: duplicate, the holder returned, nothing written",
			seed:     func(t *testing.T, e *env) { e.enqueueUnique(t, "t1", "k") },
			ids:      []string{"t2"},
			payloads: []string{"pt2"},
			args: func(e *env) *rdb.EnqueueArgs {
				return &rdb.EnqueueArgs{UniqueKey: "k", UniqueTTL: 90000}
			},
			wantHolder: "t1", wantErr: rdb.ErrDuplicate,
		},
		{
			name:     "run twice (same unique task again): the second is a duplicate of the first",
			seed:     func(t *testing.T, e *env) { e.enqueueUnique(t, "t1", "k") },
			ids:      []string{"t1"},
			payloads: []string{"other"},
			args: func(e *env) *rdb.EnqueueArgs {
				return &rdb.EnqueueArgs{UniqueKey: "k", UniqueTTL: 60000}
			},
			wantHolder: "t1", wantErr: rdb.ErrDuplicate,
		},
		{
			name: "unique key released by the holder's finish: enqueued again",
			seed: func(t *testing.T, e *env) {
				e.enqueueUnique(t, "t1", "k")
				e.take(t, "A", 1)
				e.finish(t, "A", "1", "t1")
			},
			ids:      []string{"t2"},
			payloads: []string{"pt2"},
			args: func(e *env) *rdb.EnqueueArgs {
				return &rdb.EnqueueArgs{UniqueKey: "k", UniqueTTL: 60000}
			},
			state: func(e *env) state {
				return state{
					e.q.Waiting:         list{"t2"},
					e.q.Task("t2"):      fresh("t2").with("u", uniqueKey(e.q, "k")),
					uniqueKey(e.q, "k"): ttl(str("t2"), 60000),
					e.q.Holders:         set{"A"},
					e.q.Seq:             str("1"),
				}
			},
			pubs: []msg{{"wake", "1"}},
		},
		{
			name:     "delayed: scheduled at Redis time + delay, not queued, no wake-up",
			seed:     func(t *testing.T, e *env) { e.enqueue(t, "t0") },
			ids:      []string{"t2", "t1"},
			payloads: []string{"pt2", "pt1"},
			args:     func(*env) *rdb.EnqueueArgs { return &rdb.EnqueueArgs{DelayMillis: 5000} },
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t0"},
					e.q.Task("t0"): fresh("t0"),
					e.q.Task("t1"): fresh("t1").with("s", "scheduled"),
					e.q.Task("t2"): fresh("t2").with("s", "scheduled"),
					// Same score: Redis orders members by name.
					e.q.Scheduled: zset{{"t1", "@now+5000"}, {"t2", "@now+5000"}},
				}
			},
		},
		{
			name:     "due at a given time: scheduled at that time, in due order among others",
			seed:     func(t *testing.T, e *env) { e.enqueueDue(t, far, "t0") },
			ids:      []string{"t1"},
			payloads: []string{"pt1"},
			args:     func(*env) *rdb.EnqueueArgs { return &rdb.EnqueueArgs{DueMillis: 2000000000000} },
			state: func(e *env) state {
				return state{
					e.q.Task("t0"): fresh("t0").with("s", "scheduled"),
					e.q.Task("t1"): fresh("t1").with("s", "scheduled"),
					e.q.Scheduled:  zset{{"t1", "2000000000000"}, {"t0", fmt.Sprint(far)}},
				}
			},
		},
		{
			name:     "delayed, unique, with overrides: everything recorded",
			ids:      []string{"t1"},
			payloads: []string{"pt1"},
			args: func(e *env) *rdb.EnqueueArgs {
				return &rdb.EnqueueArgs{DelayMillis: 60000, UniqueKey: "k", UniqueTTL: 120000,
					MaxAttempts: 1, TimeoutMs: 20}
			},
			state: func(e *env) state {
				return state{
					e.q.Task("t1"): fresh("t1").with("s", "scheduled", "u", uniqueKey(e.q, "k"),
						"ma", "1", "to", "20"),
					e.q.Scheduled:       zset{{"t1", "@now+60000"}},
					uniqueKey(e.q, "k"): ttl(str("t1"), 120000),
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
			ps := make([][]byte, len(tc.payloads))
			for i, p := range tc.payloads {
				ps[i] = []byte(p)
			}
			var args *rdb.EnqueueArgs
			if tc.args != nil {
				args = tc.args(e)
			}
			var holder string
			var err error
			e.call(t, func() { holder, err = e.st.Enqueue(e.ctx, e.q, tc.ids, ps, args) })
			pubs := l.collect(t, e)
			checkErr(t, "Enqueue", err, tc.wantErr)
			if holder != tc.wantHolder {
				t.Errorf("Enqueue holder = %q, want %q", holder, tc.wantHolder)
			}
			e.checkState(t, before, tc.state)
			checkPubs(t, pubs, tc.pubs)
		})
	}
}

// The script pushes ids in chunks of 1000 because Lua's unpack cannot take
// more than about 8000 values at once: order must survive the chunk
// boundaries, and a batch past unpack's limit must still work.
func TestEnqueueLargeBatchKeepsOrder(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2500, 10001} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.enqueue(t, "head")
			ids := make([]string, n)
			ps := make([][]byte, n)
			want := state{e.q.Task("head"): fresh("head")}
			for i := range ids {
				ids[i] = fmt.Sprintf("t%05d", i)
				ps[i] = []byte(payload(ids[i]))
				want[e.q.Task(ids[i])] = fresh(ids[i])
			}
			want[e.q.Waiting] = append(list{"head"}, ids...)
			l := e.listen(t)
			if _, err := e.st.Enqueue(e.ctx, e.q, ids, ps, nil); err != nil {
				t.Fatal(err)
			}
			checkPubs(t, l.collect(t, e), []msg{{"wake", fmt.Sprint(n)}})
			e.checkState(t, nil, func(*env) state { return want })
		})
	}
}

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

// TestEndTask is the end script for the takings of a stand-alone queue,
// one taking per call (TestEndBatch mixes them in one call).
func TestEndTask(t *testing.T) {
	t.Parallel()
	done := func(w, pid, id string) rdb.Ending { return rdb.Done(rdb.KindTask, w, pid, id, nil) }
	doneWith := func(result string) func(w, pid, id string) rdb.Ending {
		return func(w, pid, id string) rdb.Ending { return rdb.Done(rdb.KindTask, w, pid, id, []byte(result)) }
	}
	retry := func(w, pid, id string) rdb.Ending { return rdb.Retry(rdb.KindTask, w, pid, id, 5000, "boom") }
	dead := func(w, pid, id string) rdb.Ending { return rdb.Dead(rdb.KindTask, w, pid, id, "bad") }
	// taken1 seeds one task, t1, taken by A as pid 1.
	taken1 := func(t *testing.T, e *env) {
		e.enqueue(t, "t1")
		e.take(t, "A", 1)
	}
	tests := []struct {
		name       string
		seed       func(t *testing.T, e *env)
		w, pid, id string
		end        func(w, pid, id string) rdb.Ending
		retention  int64 // how long the queue keeps ended tasks (ms)
		want       rdb.Outcome
		state      func(e *env) state
	}{
		{
			name: "owner: done, the worker's other takings kept",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2", "t3")
				e.take(t, "A", 2)
			},
			w: "A", pid: "1", id: "t1", end: done,
			want: rdb.OutcomeDone,
			state: func(e *env) state {
				return state{
					e.q.Waiting:          list{"t3"},
					e.q.Task("t2"):       active("t2", "A", "2"),
					e.q.Task("t3"):       fresh("t3"),
					e.q.WorkerQueue("A"): hash{"2": "t2"},
					e.q.Holders:          set{"A"},
					e.q.Seq:              str("2"),
				}
			},
		},
		{
			name: "owner of its last taking: done, the worker's set goes",
			seed: taken1,
			w:    "A", pid: "1", id: "t1", end: done,
			want: rdb.OutcomeDone,
			state: func(e *env) state {
				return state{e.q.Holders: set{"A"}, e.q.Seq: str("1")}
			},
		},
		{
			// The old API's empty mode defaulted to done; the ending's
			// constructors leave nothing to default but the result.
			name: "done with a nil result: done, no result recorded",
			seed: taken1,
			w:    "A", pid: "1", id: "t1", end: func(w, pid, id string) rdb.Ending {
				return rdb.Done(rdb.KindTask, w, pid, id, nil)
			},
			want: rdb.OutcomeDone,
			state: func(e *env) state {
				return state{e.q.Holders: set{"A"}, e.q.Seq: str("1")}
			},
		},
		{
			name: "done with retention: kept as done with the result and finish time, expiring",
			seed: taken1,
			w:    "A", pid: "1", id: "t1",
			end: doneWith("out\x00"), retention: 60000,
			want: rdb.OutcomeDone,
			state: func(e *env) state {
				return state{
					e.q.Task("t1"): ttl(fresh("t1").with("s", "done", "ft", "@now", "r", "out\x00"), 60000),
					e.q.Retained:   ttl(zset{{"t1", "@now+60000"}}, 60000),
					e.q.Holders:    set{"A"},
					e.q.Seq:        str("1"),
				}
			},
		},
		{
			name: "done with retention, no result: no result field",
			seed: taken1,
			w:    "A", pid: "1", id: "t1",
			end: done, retention: 60000,
			want: rdb.OutcomeDone,
			state: func(e *env) state {
				return state{
					e.q.Task("t1"): ttl(fresh("t1").with("s", "done", "ft", "@now"), 60000),
					e.q.Retained:   ttl(zset{{"t1", "@now+60000"}}, 60000),
					e.q.Holders:    set{"A"},
					e.q.Seq:        str("1"),
				}
			},
		},
		{
			name: "done: its unique key released",
			seed: func(t *testing.T, e *env) {
				e.enqueueUnique(t, "t1", "k")
				e.take(t, "A", 1)
			},
			w: "A", pid: "1", id: "t1", end: done,
			want: rdb.OutcomeDone,
			state: func(e *env) state {
				return state{e.q.Holders: set{"A"}, e.q.Seq: str("1")}
			},
		},
		{
			name: "done: a unique key another task holds now is left alone",
			seed: func(t *testing.T, e *env) {
				e.enqueueUnique(t, "t1", "k")
				e.take(t, "A", 1)
				e.do(t, "SET", uniqueKey(e.q, "k"), "t9", "PX", 60000)
			},
			w: "A", pid: "1", id: "t1", end: done,
			want: rdb.OutcomeDone,
			state: func(e *env) state {
				return state{
					uniqueKey(e.q, "k"): ttl(str("t9"), 60000),
					e.q.Holders:         set{"A"},
					e.q.Seq:             str("1"),
				}
			},
		},
		{
			name: "cancel asked while it ran: cancelled, its unique key released",
			seed: func(t *testing.T, e *env) {
				e.enqueueUnique(t, "t1", "k")
				e.take(t, "A", 1)
				e.cancel(t, "t1")
			},
			w: "A", pid: "1", id: "t1", end: done,
			want: rdb.OutcomeCancelled,
			state: func(e *env) state {
				return state{e.q.Holders: set{"A"}, e.q.Seq: str("1")}
			},
		},
		{
			name: "cancel asked, with retention: kept as cancelled, expiring",
			seed: func(t *testing.T, e *env) {
				taken1(t, e)
				e.cancel(t, "t1")
			},
			w: "A", pid: "1", id: "t1",
			end: doneWith("ignored"), retention: 60000,
			want: rdb.OutcomeCancelled,
			state: func(e *env) state {
				return state{
					e.q.Task("t1"): ttl(fresh("t1").with("s", "cancelled", "x", "1", "ft", "@now"), 60000),
					e.q.Retained:   ttl(zset{{"t1", "@now+60000"}}, 60000),
					e.q.Holders:    set{"A"},
					e.q.Seq:        str("1"),
				}
			},
		},
		{
			name: "cancel asked wins over a retry: cancelled, nothing scheduled",
			seed: func(t *testing.T, e *env) {
				taken1(t, e)
				e.cancel(t, "t1")
			},
			w: "A", pid: "1", id: "t1", end: retry,
			want: rdb.OutcomeCancelled,
			state: func(e *env) state {
				return state{e.q.Holders: set{"A"}, e.q.Seq: str("1")}
			},
		},
		{
			name: "cancel asked wins over dead: cancelled, nothing buried",
			seed: func(t *testing.T, e *env) {
				taken1(t, e)
				e.cancel(t, "t1")
			},
			w: "A", pid: "1", id: "t1", end: dead,
			want: rdb.OutcomeCancelled,
			state: func(e *env) state {
				return state{e.q.Holders: set{"A"}, e.q.Seq: str("1")}
			},
		},
		{
			name: "retry: a failed attempt counted, scheduled at Redis time + delay, unique key kept",
			seed: func(t *testing.T, e *env) {
				e.enqueueUnique(t, "t1", "k")
				e.take(t, "A", 1)
			},
			w: "A", pid: "1", id: "t1", end: retry,
			want: rdb.OutcomeRetry,
			state: func(e *env) state {
				return state{
					e.q.Task("t1"):      fresh("t1").with("u", uniqueKey(e.q, "k"), "s", "scheduled", "n", "1", "e", "boom"),
					e.q.Scheduled:       zset{{"t1", "@now+5000"}},
					uniqueKey(e.q, "k"): ttl(str("t1"), 60000),
					e.q.Holders:         set{"A"},
					e.q.Seq:             str("1"),
				}
			},
		},
		{
			name: "retry again: n incremented, the last error replaces the previous one, due order kept",
			seed: func(t *testing.T, e *env) {
				e.enqueueDue(t, far, "t0")
				taken1(t, e)
				e.do(t, "HSET", e.q.Task("t1"), "n", "2", "e", "old")
			},
			w: "A", pid: "1", id: "t1", end: retry,
			want: rdb.OutcomeRetry,
			state: func(e *env) state {
				return state{
					e.q.Task("t0"): fresh("t0").with("s", "scheduled"),
					e.q.Task("t1"): fresh("t1").with("s", "scheduled", "n", "3", "e", "boom"),
					e.q.Scheduled:  zset{{"t1", "@now+5000"}, {"t0", fmt.Sprint(far)}},
					e.q.Holders:    set{"A"},
					e.q.Seq:        str("1"),
				}
			},
		},
		{
			name: "dead: buried with reason, error, time and worker; its unique key released",
			seed: func(t *testing.T, e *env) {
				e.enqueueUnique(t, "t1", "k")
				e.take(t, "A", 1)
			},
			w: "A", pid: "1", id: "t1", end: dead,
			want: rdb.OutcomeDead,
			state: func(e *env) state {
				return state{
					e.q.Task("t1"): fresh("t1").with("u", uniqueKey(e.q, "k"), "n", "1", "e", "bad").
						buried("failed", "A"),
					e.q.Dead:    zset{{"t1", "@now"}},
					e.q.Holders: set{"A"},
					e.q.Seq:     str("1"),
				}
			},
		},
		{
			name: "dead, retention asked: a dead task never expires",
			seed: taken1,
			w:    "A", pid: "1", id: "t1",
			end: dead, retention: 60000,
			want: rdb.OutcomeDead,
			state: func(e *env) state {
				return state{
					e.q.Task("t1"): fresh("t1").with("n", "1", "e", "bad").buried("failed", "A"),
					e.q.Dead:       zset{{"t1", "@now"}},
					e.q.Holders:    set{"A"},
					e.q.Seq:        str("1"),
				}
			},
		},
		{
			name: "dead, the hash had an expiry (an id reused within a retention): kept for good",
			seed: func(t *testing.T, e *env) {
				taken1(t, e)
				e.do(t, "PEXPIRE", e.q.Task("t1"), 600000)
			},
			w: "A", pid: "1", id: "t1", end: dead,
			want: rdb.OutcomeDead,
			state: func(e *env) state {
				return state{
					e.q.Task("t1"): fresh("t1").with("n", "1", "e", "bad").buried("failed", "A"),
					e.q.Dead:       zset{{"t1", "@now"}},
					e.q.Holders:    set{"A"},
					e.q.Seq:        str("1"),
				}
			},
		},
		{
			name: "dead past dead_max: the oldest entries and their hashes trimmed",
			seed: func(t *testing.T, e *env) {
				e.setCfg(t, e.q, "dead_max", 2)
				now := e.now(t)
				e.seedDead(t, e.q, "d1", now-2000)
				e.seedDead(t, e.q, "d2", now-1000)
				taken1(t, e)
			},
			w: "A", pid: "1", id: "t1", end: dead,
			want: rdb.OutcomeDead,
			state: func(e *env) state {
				return state{
					e.q.Config:     hash{"dead_max": "2"},
					e.q.Task("d2"): deadSeed("d2", "@seed-1000"),
					e.q.Task("t1"): fresh("t1").with("n", "1", "e", "bad").buried("failed", "A"),
					e.q.Dead:       zset{{"d2", "@seed-1000"}, {"t1", "@now"}},
					e.q.Holders:    set{"A"},
					e.q.Seq:        str("1"),
				}
			},
		},
		{
			name: "dead: entries older than dead_age trimmed with their hashes",
			seed: func(t *testing.T, e *env) {
				e.setCfg(t, e.q, "dead_age", 60000)
				now := e.now(t)
				e.seedDead(t, e.q, "d1", now-120000)
				e.seedDead(t, e.q, "d2", now-1000)
				taken1(t, e)
			},
			w: "A", pid: "1", id: "t1", end: dead,
			want: rdb.OutcomeDead,
			state: func(e *env) state {
				return state{
					e.q.Config:     hash{"dead_age": "60000"},
					e.q.Task("d2"): deadSeed("d2", "@seed-1000"),
					e.q.Task("t1"): fresh("t1").with("n", "1", "e", "bad").buried("failed", "A"),
					e.q.Dead:       zset{{"d2", "@seed-1000"}, {"t1", "@now"}},
					e.q.Holders:    set{"A"},
					e.q.Seq:        str("1"),
				}
			},
		},
		{
			name: "dead, no config hash: the default age (90 days) applies",
			seed: func(t *testing.T, e *env) {
				now := e.now(t)
				e.seedDead(t, e.q, "d1", now-91*24*3600*1000)
				e.seedDead(t, e.q, "d2", now-89*24*3600*1000)
				taken1(t, e)
			},
			w: "A", pid: "1", id: "t1", end: dead,
			want: rdb.OutcomeDead,
			state: func(e *env) state {
				return state{
					e.q.Task("d2"): deadSeed("d2", "@seed-7689600000"),
					e.q.Task("t1"): fresh("t1").with("n", "1", "e", "bad").buried("failed", "A"),
					e.q.Dead:       zset{{"d2", "@seed-7689600000"}, {"t1", "@now"}},
					e.q.Holders:    set{"A"},
					e.q.Seq:        str("1"),
				}
			},
		},
		{
			// Corrupt data must not abort the script after the taking was
			// released: the id would be nowhere (invariant 1).
			name: "task data not a hash: buried with the reason, what it held kept in 'raw'",
			seed: func(t *testing.T, e *env) {
				taken1(t, e)
				e.do(t, "SET", e.q.Task("t1"), "garbage")
			},
			w: "A", pid: "1", id: "t1", end: done,
			want: rdb.OutcomeDead,
			state: func(e *env) state {
				return state{
					e.q.Task("t1"): hash{"raw": "garbage"}.buried("corrupt: task data is a string, not a hash", "A"),
					e.q.Dead:       zset{{"t1", "@now"}},
					e.q.Holders:    set{"A"},
					e.q.Seq:        str("1"),
				}
			},
		},
		{
			name: "not the owner (another worker's pid): lost, nothing changed",
			seed: taken1,
			w:    "B", pid: "1", id: "t1", end: done,
			want: rdb.OutcomeLost,
		},
		{
			name: "not the owner, retry: lost, nothing scheduled",
			seed: taken1,
			w:    "B", pid: "1", id: "t1", end: retry,
			want: rdb.OutcomeLost,
		},
		{
			name: "not the owner, dead: lost, nothing buried",
			seed: taken1,
			w:    "B", pid: "1", id: "t1", end: dead,
			want: rdb.OutcomeLost,
		},
		{
			name: "not the owner (stale pid, the taking was requeued): lost, nothing changed",
			seed: func(t *testing.T, e *env) {
				taken1(t, e)
				e.requeue(t, true, "A")
			},
			w: "A", pid: "1", id: "t1", end: done,
			want: rdb.OutcomeLost,
		},
		{
			name: "not the owner (stale pid, the task was taken again by the same worker): lost, nothing changed",
			seed: func(t *testing.T, e *env) {
				taken1(t, e)
				e.requeue(t, true, "A")
				e.take(t, "A", 1)
			},
			w: "A", pid: "1", id: "t1", end: dead,
			want: rdb.OutcomeLost,
		},
		{
			name: "run twice (done): the second call is lost and changes nothing",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2")
				e.take(t, "A", 2)
				e.finish(t, "A", "1", "t1")
			},
			w: "A", pid: "1", id: "t1", end: done,
			want: rdb.OutcomeLost,
		},
		{
			name: "run twice (retry): the second call is lost, n not counted again",
			seed: func(t *testing.T, e *env) {
				taken1(t, e)
				e.endTask(t, 0, retry("A", "1", "t1"))
			},
			w: "A", pid: "1", id: "t1", end: retry,
			want: rdb.OutcomeLost,
		},
		{
			name: "run twice (dead): the second call is lost, nothing buried again",
			seed: func(t *testing.T, e *env) {
				taken1(t, e)
				e.endTask(t, 0, dead("A", "1", "t1"))
			},
			w: "A", pid: "1", id: "t1", end: dead,
			want: rdb.OutcomeLost,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			tc.seed(t, e)
			before := e.dump(t)
			l := e.listen(t)
			var got []rdb.Ended
			var err error
			e.call(t, func() { got, err = e.st.End(e.ctx, e.q, tc.retention, []rdb.Ending{tc.end(tc.w, tc.pid, tc.id)}) })
			pubs := l.collect(t, e)
			if want := []rdb.Ended{{Outcome: tc.want}}; err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("End = %+v, %v; want %+v", got, err, want)
			}
			e.checkState(t, before, tc.state)
			checkPubs(t, pubs, nil)
		})
	}
}

// TestEndGiveBack is the end script's give back: the taking goes back to the
// front of its queue, nothing counted.
func TestEndGiveBack(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		seed       func(t *testing.T, e *env)
		kind       rdb.Kind // "": a task
		w, pid, id string
		want       rdb.Outcome
		state      func(e *env) state
		pubs       []msg
	}{
		{
			name: "owner: back at the front, with a wake-up",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2", "t3")
				e.take(t, "A", 1)
			},
			w: "A", pid: "1", id: "t1",
			want: rdb.OutcomeRequeued,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t1", "t2", "t3"},
					e.q.Task("t1"): queued("t1"),
					e.q.Task("t2"): fresh("t2"),
					e.q.Task("t3"): fresh("t3"),
					e.q.Holders:    set{"A"},
					e.q.Seq:        str("1"),
				}
			},
			pubs: []msg{{"wake", "1"}},
		},
		{
			name: "owner: the worker's other takings kept, counters and unique key untouched",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.enqueueUnique(t, "t2", "k")
				e.take(t, "A", 2)
				e.do(t, "HSET", e.q.Task("t2"), "n", "1", "c", "2")
			},
			w: "A", pid: "2", id: "t2",
			want: rdb.OutcomeRequeued,
			state: func(e *env) state {
				return state{
					e.q.Waiting:          list{"t2"},
					e.q.Task("t1"):       active("t1", "A", "1"),
					e.q.Task("t2"):       queued("t2").with("n", "1", "c", "2", "u", uniqueKey(e.q, "k")),
					uniqueKey(e.q, "k"):  ttl(str("t2"), 60000),
					e.q.WorkerQueue("A"): hash{"1": "t1"},
					e.q.Holders:          set{"A"},
					e.q.Seq:              str("2"),
				}
			},
			pubs: []msg{{"wake", "1"}},
		},
		{
			name: "cancel asked while it ran: ended, not requeued, its unique key released",
			seed: func(t *testing.T, e *env) {
				e.enqueueUnique(t, "t1", "k")
				e.enqueue(t, "t2")
				e.take(t, "A", 1)
				e.cancel(t, "t1")
			},
			w: "A", pid: "1", id: "t1",
			want: rdb.OutcomeCancelled,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t2"},
					e.q.Task("t2"): fresh("t2"),
					e.q.Holders:    set{"A"},
					e.q.Seq:        str("1"),
				}
			},
		},
		{
			name: "cancel asked, retention in the queue's config: kept as cancelled, expiring",
			seed: func(t *testing.T, e *env) {
				e.setCfg(t, e.q, "retention", 60000)
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
				e.cancel(t, "t1")
			},
			w: "A", pid: "1", id: "t1",
			want: rdb.OutcomeCancelled,
			state: func(e *env) state {
				return state{
					e.q.Config:     hash{"retention": "60000"},
					e.q.Task("t1"): ttl(fresh("t1").with("s", "cancelled", "x", "1", "ft", "@now"), 60000),
					e.q.Retained:   ttl(zset{{"t1", "@now+60000"}}, 60000),
					e.q.Holders:    set{"A"},
					e.q.Seq:        str("1"),
				}
			},
		},
		{
			// As requeue does: a stage handler that gives back its run
			// after the run was cancelled must not queue the run again
			// (end_run removed the run's cancel mark, so only fs tells).
			name: "a flow run cancelled while its stage ran: not put back, left as it is",
			seed: func(t *testing.T, e *env) {
				e.startRun(t, "r1")
				e.takeFrom(t, e.q, "A", 1, true)
				if _, err := e.st.RunCancel(e.ctx, e.q, "r1", rdb.FlowRef{RetentionMillis: 60000}); err != nil {
					t.Fatal(err)
				}
			},
			kind: rdb.KindStage, w: "A", pid: "1", id: "r1",
			want: rdb.OutcomeCancelled,
			state: func(e *env) state {
				return state{
					e.q.Task("r1"): ttl(hash{"d": "", "st": "q", "fs": "cancelled", "s": "cancelled",
						"ft": "@seed", "fr": "60000", "fi": ""}, 60000),
					e.q.Holders: set{"A"},
					e.q.Runs:    runs("r1"),
					e.q.Seq:     str("1"),
				}
			},
		},
		{
			// As requeue does: corrupt data must not abort the script after
			// the taking was released (the id would be nowhere); the id goes
			// back and the take buries it with the reason.
			name: "task data not a hash: the id back at the front as it is, with a wake-up",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2")
				e.take(t, "A", 1)
				e.do(t, "SET", e.q.Task("t1"), "garbage")
			},
			w: "A", pid: "1", id: "t1",
			want: rdb.OutcomeRequeued,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t1", "t2"},
					e.q.Task("t1"): str("garbage"),
					e.q.Task("t2"): fresh("t2"),
					e.q.Holders:    set{"A"},
					e.q.Seq:        str("1"),
				}
			},
			pubs: []msg{{"wake", "1"}},
		},
		{
			name: "not the owner (another worker's pid): lost, nothing changed",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2")
				e.take(t, "A", 1)
			},
			w: "B", pid: "1", id: "t1",
			want: rdb.OutcomeLost,
		},
		{
			name: "not the owner (stale pid, the taking was requeued): lost, nothing changed",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2")
				e.take(t, "A", 1)
				e.requeue(t, true, "A")
			},
			w: "A", pid: "1", id: "t1",
			want: rdb.OutcomeLost,
		},
		{
			name: "run twice: the second call is lost and pushes nothing",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2")
				e.take(t, "A", 1)
				e.giveBack(t, "A", "1", "t1")
			},
			w: "A", pid: "1", id: "t1",
			want: rdb.OutcomeLost,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			tc.seed(t, e)
			before := e.dump(t)
			l := e.listen(t)
			kind := tc.kind
			if kind == "" {
				kind = rdb.KindTask
			}
			var got []rdb.Ended
			var err error
			e.call(t, func() { got, err = e.st.End(e.ctx, e.q, 0, []rdb.Ending{rdb.GiveBack(kind, tc.w, tc.pid, tc.id)}) })
			pubs := l.collect(t, e)
			if want := []rdb.Ended{{Outcome: tc.want}}; err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("End = %+v, %v; want %+v", got, err, want)
			}
			e.checkState(t, before, tc.state)
			checkPubs(t, pubs, tc.pubs)
		})
	}
}

func TestRequeue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		seed          func(t *testing.T, e *env)
		workers       []string
		crashed       bool
		wantRequeued  int
		wantCancelled []string
		state         func(e *env) state
		pubs          []msg
	}{
		{
			name: "takings land at the front in taking order, ahead of waiting tasks",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2", "t3", "t4", "t5")
				e.take(t, "A", 1)
				e.take(t, "A", 1)
				e.take(t, "A", 1)
			},
			workers: []string{"A"}, crashed: true,
			wantRequeued: 3,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t1", "t2", "t3", "t4", "t5"},
					e.q.Task("t1"): queued("t1").with("c", "1", "cw", "A"),
					e.q.Task("t2"): queued("t2").with("c", "1", "cw", "A"),
					e.q.Task("t3"): queued("t3").with("c", "1", "cw", "A"),
					e.q.Task("t4"): fresh("t4"),
					e.q.Task("t5"): fresh("t5"),
					e.q.Seq:        str("3"),
				}
			},
			pubs: []msg{{"wake", "3"}},
		},
		{
			name: "pids are ordered as numbers (9 before 10)",
			seed: func(t *testing.T, e *env) {
				e.do(t, "SET", e.q.Seq, 8)
				e.enqueue(t, "t1", "t2", "t3")
				e.take(t, "A", 3)
			},
			workers: []string{"A"}, crashed: true,
			wantRequeued: 3,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t1", "t2", "t3"},
					e.q.Task("t1"): queued("t1").with("c", "1", "cw", "A"),
					e.q.Task("t2"): queued("t2").with("c", "1", "cw", "A"),
					e.q.Task("t3"): queued("t3").with("c", "1", "cw", "A"),
					e.q.Seq:        str("11"),
				}
			},
			pubs: []msg{{"wake", "3"}},
		},
		{
			name: "two dead workers in one call, takings interleaved",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2", "t3", "t4", "t5")
				e.take(t, "A", 1)
				e.take(t, "B", 1)
				e.take(t, "A", 1)
				e.take(t, "B", 1)
			},
			workers: []string{"A", "B"}, crashed: true,
			wantRequeued: 4,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t1", "t2", "t3", "t4", "t5"},
					e.q.Task("t1"): queued("t1").with("c", "1", "cw", "A"),
					e.q.Task("t2"): queued("t2").with("c", "1", "cw", "B"),
					e.q.Task("t3"): queued("t3").with("c", "1", "cw", "A"),
					e.q.Task("t4"): queued("t4").with("c", "1", "cw", "B"),
					e.q.Task("t5"): fresh("t5"),
					e.q.Seq:        str("4"),
				}
			},
			pubs: []msg{{"wake", "4"}},
		},
		{
			name: "only the named workers: a live worker's takings untouched",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2", "t3")
				e.take(t, "A", 1)
				e.take(t, "C", 1)
			},
			workers: []string{"A"}, crashed: true,
			wantRequeued: 1,
			state: func(e *env) state {
				return state{
					e.q.Waiting:          list{"t1", "t3"},
					e.q.Task("t1"):       queued("t1").with("c", "1", "cw", "A"),
					e.q.Task("t2"):       active("t2", "C", "2"),
					e.q.Task("t3"):       fresh("t3"),
					e.q.WorkerQueue("C"): hash{"2": "t2"},
					e.q.Holders:          set{"C"},
					e.q.Seq:              str("2"),
				}
			},
			pubs: []msg{{"wake", "1"}},
		},
		{
			name: "stopped, not crashed: no crash counted",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
			},
			workers: []string{"A"}, crashed: false,
			wantRequeued: 1,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t1"},
					e.q.Task("t1"): queued("t1"),
					e.q.Seq:        str("1"),
				}
			},
			pubs: []msg{{"wake", "1"}},
		},
		{
			name: "crash counter adds up over crashes, failed attempts untouched",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
				e.requeue(t, true, "A")
				e.take(t, "B", 1)
				e.do(t, "HSET", e.q.Task("t1"), "n", "1")
			},
			workers: []string{"B"}, crashed: true,
			wantRequeued: 1,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t1"},
					e.q.Task("t1"): queued("t1").with("c", "2", "cw", "B", "n", "1"),
					e.q.Seq:        str("2"),
				}
			},
			pubs: []msg{{"wake", "1"}},
		},
		{
			name: "cancel asked: ended, not requeued, its unique key released",
			seed: func(t *testing.T, e *env) {
				e.enqueueUnique(t, "t1", "k")
				e.enqueue(t, "t2", "t3")
				e.take(t, "A", 2)
				e.cancel(t, "t1")
			},
			workers: []string{"A"}, crashed: true,
			wantRequeued: 1, wantCancelled: []string{"t1"},
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t2", "t3"},
					e.q.Task("t2"): queued("t2").with("c", "1", "cw", "A"),
					e.q.Task("t3"): fresh("t3"),
					e.q.Seq:        str("2"),
				}
			},
			pubs: []msg{{"wake", "1"}},
		},
		{
			name: "cancel asked, retention in the queue's config: kept as cancelled, expiring; no wake-up",
			seed: func(t *testing.T, e *env) {
				e.setCfg(t, e.q, "retention", 60000)
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
				e.cancel(t, "t1")
			},
			workers: []string{"A"}, crashed: true,
			wantCancelled: []string{"t1"},
			state: func(e *env) state {
				return state{
					e.q.Config:     hash{"retention": "60000"},
					e.q.Task("t1"): ttl(fresh("t1").with("s", "cancelled", "x", "1", "ft", "@now"), 60000),
					e.q.Retained:   ttl(zset{{"t1", "@now+60000"}}, 60000),
					e.q.Seq:        str("1"),
				}
			},
		},
		{
			name: "a flow run that ended while its stage ran: left as it is, the taking forgotten",
			seed: func(t *testing.T, e *env) {
				e.startRun(t, "r1")
				e.takeFrom(t, e.q, "A", 1, true)
				if _, err := e.st.RunCancel(e.ctx, e.q, "r1", rdb.FlowRef{RetentionMillis: 60000}); err != nil {
					t.Fatal(err)
				}
			},
			workers: []string{"A"}, crashed: true,
			state: func(e *env) state {
				return state{
					e.q.Task("r1"): ttl(hash{"d": "", "st": "q", "fs": "cancelled", "s": "cancelled",
						"ft": "@seed", "fr": "60000", "fi": ""}, 60000),
					e.q.Runs: runs("r1"),
					e.q.Seq:  str("1"),
				}
			},
		},
		{
			// What a taking of an ended run looks like (s, w, p written by
			// take): the run ended, so it is not queued again.
			name: "an ended flow run held as active: not requeued, its taking fields removed",
			seed: func(t *testing.T, e *env) {
				e.startRun(t, "r1")
				e.takeFrom(t, e.q, "A", 1, true)
				if _, err := e.st.RunCancel(e.ctx, e.q, "r1", rdb.FlowRef{RetentionMillis: 60000}); err != nil {
					t.Fatal(err)
				}
				e.do(t, "HSET", e.q.Task("r1"), "s", "active", "w", "A", "p", "1")
			},
			workers: []string{"A"}, crashed: true,
			state: func(e *env) state {
				return state{
					e.q.Task("r1"): ttl(hash{"d": "", "st": "q", "fs": "cancelled", "s": "active",
						"ft": "@seed", "fr": "60000", "fi": ""}, 60000),
					e.q.Runs: runs("r1"),
					e.q.Seq:  str("1"),
				}
			},
		},
		{
			name: "task data not a hash: the id requeued in its place (the take buries it), the others as usual",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2", "t3")
				e.take(t, "A", 2)
				e.do(t, "SET", e.q.Task("t1"), "garbage")
			},
			workers: []string{"A"}, crashed: true,
			wantRequeued: 2,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t1", "t2", "t3"},
					e.q.Task("t1"): str("garbage"),
					e.q.Task("t2"): queued("t2").with("c", "1", "cw", "A"),
					e.q.Task("t3"): fresh("t3"),
					e.q.Seq:        str("2"),
				}
			},
			pubs: []msg{{"wake", "2"}},
		},
		{
			name: "missing task hash: the taking is forgotten, nothing pushed",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
				e.do(t, "DEL", e.q.Task("t1"))
			},
			workers: []string{"A"}, crashed: true,
			state: func(e *env) state { return state{e.q.Seq: str("1")} },
		},
		{
			name:    "worker holding nothing leaves the holder index",
			seed:    func(t *testing.T, e *env) { e.do(t, "SADD", e.q.Holders, "A", "C") },
			workers: []string{"A"}, crashed: true,
			state: func(e *env) state { return state{e.q.Holders: set{"C"}} },
		},
		{
			name: "run twice: the second run finds nothing and changes nothing",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2", "t3")
				e.take(t, "A", 2)
				e.requeue(t, true, "A")
			},
			workers: []string{"A"}, crashed: true,
		},
		{
			name:    "no workers: nothing to do",
			seed:    func(t *testing.T, e *env) { e.enqueue(t, "t1"); e.take(t, "A", 1) },
			workers: nil, crashed: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			tc.seed(t, e)
			before := e.dump(t)
			l := e.listen(t)
			var n int
			var cs []rdb.Cancelled
			var err error
			e.call(t, func() { n, cs, err = e.st.Requeue(e.ctx, e.q, tc.workers, tc.crashed) })
			var cancelled []string
			for _, c := range cs {
				if c.Worker != "A" || c.PID == "" {
					t.Errorf("cancelled taking %+v: want its pid and worker A", c)
				}
				cancelled = append(cancelled, c.ID)
			}
			pubs := l.collect(t, e)
			if err != nil {
				t.Fatalf("Requeue: %v", err)
			}
			if n != tc.wantRequeued || !slices.Equal(cancelled, tc.wantCancelled) {
				t.Errorf("Requeue = %d requeued, cancelled %v; want %d, %v", n, cancelled, tc.wantRequeued, tc.wantCancelled)
			}
			e.checkState(t, before, tc.state)
			checkPubs(t, pubs, tc.pubs)
		})
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		seed  func(t *testing.T, e *env)
		id    string
		want  rdb.CancelResult
		state func(e *env) state
		pubs  []msg
	}{
		{
			name: "waiting task: removed, hash gone",
			seed: func(t *testing.T, e *env) { e.enqueue(t, "t1", "t2", "t3") },
			id:   "t2",
			want: rdb.CancelRemoved,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t1", "t3"},
					e.q.Task("t1"): fresh("t1"),
					e.q.Task("t3"): fresh("t3"),
				}
			},
		},
		{
			name: "waiting task: its unique key released",
			seed: func(t *testing.T, e *env) { e.enqueueUnique(t, "t1", "k") },
			id:   "t1",
			want: rdb.CancelRemoved,
			state: func(e *env) state {
				return state{}
			},
		},
		{
			name: "waiting task, retention in the queue's config: kept as cancelled, expiring",
			seed: func(t *testing.T, e *env) {
				e.setCfg(t, e.q, "retention", 60000)
				e.enqueue(t, "t1")
			},
			id:   "t1",
			want: rdb.CancelRemoved,
			state: func(e *env) state {
				return state{
					e.q.Config:     hash{"retention": "60000"},
					e.q.Task("t1"): ttl(fresh("t1").with("s", "cancelled", "ft", "@now"), 60000),
					e.q.Retained:   ttl(zset{{"t1", "@now+60000"}}, 60000),
				}
			},
		},
		{
			name: "given-back task waiting again: removed",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
				e.giveBack(t, "A", "1", "t1")
			},
			id:   "t1",
			want: rdb.CancelRemoved,
			state: func(e *env) state {
				return state{e.q.Holders: set{"A"}, e.q.Seq: str("1")}
			},
		},
		{
			name: "scheduled task: taken out of the scheduled set, ended",
			seed: func(t *testing.T, e *env) {
				e.enqueueDue(t, far, "t1", "t2")
			},
			id:   "t1",
			want: rdb.CancelRemoved,
			state: func(e *env) state {
				return state{
					e.q.Task("t2"): fresh("t2").with("s", "scheduled"),
					e.q.Scheduled:  zset{{"t2", fmt.Sprint(far)}},
				}
			},
		},
		{
			name: "scheduled for a retry, unique, with retention: kept as cancelled, unique key released",
			seed: func(t *testing.T, e *env) {
				e.setCfg(t, e.q, "retention", 60000)
				e.enqueueUnique(t, "t1", "k")
				e.take(t, "A", 1)
				e.endTask(t, 0, rdb.Retry(rdb.KindTask, "A", "1", "t1", 60000, "boom"))
			},
			id:   "t1",
			want: rdb.CancelRemoved,
			state: func(e *env) state {
				return state{
					e.q.Config: hash{"retention": "60000"},
					e.q.Task("t1"): ttl(fresh("t1").with("s", "cancelled", "ft", "@now", "n", "1", "e", "boom",
						"u", uniqueKey(e.q, "k")), 60000),
					e.q.Retained: ttl(zset{{"t1", "@now+60000"}}, 60000),
					e.q.Holders:  set{"A"},
					e.q.Seq:      str("1"),
				}
			},
		},
		{
			name: "running task: marked, owner told on the cancel channel",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2")
				e.take(t, "A", 1)
			},
			id:   "t1",
			want: rdb.CancelRequested,
			state: func(e *env) state {
				return state{
					e.q.Waiting:          list{"t2"},
					e.q.Task("t1"):       active("t1", "A", "1").with("x", "1"),
					e.q.Task("t2"):       fresh("t2"),
					e.q.WorkerQueue("A"): hash{"1": "t1"},
					e.q.Holders:          set{"A"},
					e.q.Seq:              str("1"),
				}
			},
			pubs: []msg{{"cancel", "t1"}},
		},
		{
			name: "flow run: refused, nothing changed",
			seed: func(t *testing.T, e *env) {
				e.startRun(t, "r1")
			},
			id:   "r1",
			want: rdb.CancelRefused,
		},
		{
			name: "flow child: refused, nothing changed",
			seed: func(t *testing.T, e *env) {
				e.do(t, "HSET", e.q.Task("k1"), "d", "pk1", "pr", "r1")
				e.do(t, "RPUSH", e.q.Waiting, "k1")
			},
			id:   "k1",
			want: rdb.CancelRefused,
		},
		{
			name: "unknown id: no-op",
			seed: func(t *testing.T, e *env) { e.enqueue(t, "t1") },
			id:   "nope",
			want: rdb.CancelNoop,
		},
		{
			name: "task data not a hash: no-op",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.do(t, "SET", e.q.Task("t1"), "garbage")
			},
			id:   "t1",
			want: rdb.CancelNoop,
		},
		{
			name: "finished task kept for the retention: no-op",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
				e.endTask(t, 60000, rdb.Done(rdb.KindTask, "A", "1", "t1", nil))
			},
			id:   "t1",
			want: rdb.CancelNoop,
		},
		{
			name: "dead task: no-op",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
				e.endTask(t, 0, rdb.Dead(rdb.KindTask, "A", "1", "t1", "bad"))
			},
			id:   "t1",
			want: rdb.CancelNoop,
		},
		{
			name: "cancel a running task twice: the second is a no-op",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
				e.cancel(t, "t1")
			},
			id:   "t1",
			want: rdb.CancelNoop,
		},
		{
			name: "cancel a waiting task twice: the second is a no-op",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2")
				e.cancel(t, "t1")
			},
			id:   "t1",
			want: rdb.CancelNoop,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			tc.seed(t, e)
			before := e.dump(t)
			l := e.listen(t)
			var got rdb.CancelResult
			var err error
			e.call(t, func() { got, err = e.st.Cancel(e.ctx, e.q, tc.id) })
			pubs := l.collect(t, e)
			if err != nil {
				t.Fatalf("Cancel: %v", err)
			}
			if got != tc.want {
				t.Errorf("Cancel = %v, want %v", got, tc.want)
			}
			e.checkState(t, before, tc.state)
			checkPubs(t, pubs, tc.pubs)
		})
	}
}

func TestRegister(t *testing.T) {
	t.Parallel()
	register := func(t *testing.T, e *env, w string, ttl int64, qs ...rdb.QueueRef) {
		t.Helper()
		if _, err := e.st.Register(e.ctx, w, ttl, "host-"+w, 100, qs); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		seed    func(t *testing.T, e *env)
		w       string
		ttl     int64
		queues  []rdb.QueueRef
		wantErr error
		state   func(e *env) state
	}{
		{
			name:   "new worker: keepalive with TTL, listed, queues known",
			w:      "A",
			ttl:    60000,
			queues: []rdb.QueueRef{rdb.Standalone("emails"), {Tag: "flow", Name: "s1"}},
			state: func(e *env) state {
				return state{
					e.k.Keepalive("A"): ttl(str("RUN"), 60000),
					e.k.Workers():      set{"A"},
					e.k.KnownQueues():  set{"emails", "flow/s1"},
					e.k.WorkerInfo("A"): hash{"host": "host-A", "pid": "4242", "start": "@now", "ttl": "60000",
						"queues": "emails,flow/s1"},
				}
			},
		},
		{
			name: "no queues: none recorded",
			w:    "A",
			ttl:  60000,
			state: func(e *env) state {
				return state{
					e.k.Keepalive("A"):  ttl(str("RUN"), 60000),
					e.k.Workers():       set{"A"},
					e.k.WorkerInfo("A"): hash{"host": "host-A", "pid": "4242", "start": "@now", "ttl": "60000", "queues": ""},
				}
			},
		},
		{
			name:   "second worker joins the first",
			seed:   func(t *testing.T, e *env) { register(t, e, "B", 120000, rdb.Standalone("a")) },
			w:      "A",
			ttl:    60000,
			queues: []rdb.QueueRef{rdb.Standalone("a"), rdb.Standalone("b")},
			state: func(e *env) state {
				return state{
					e.k.Keepalive("A"): ttl(str("RUN"), 60000),
					e.k.Keepalive("B"): ttl(str("RUN"), 120000),
					e.k.Workers():      set{"A", "B"},
					e.k.KnownQueues():  set{"a", "b"},
					e.k.WorkerInfo("A"): hash{"host": "host-A", "pid": "4242", "start": "@now", "ttl": "60000",
						"queues": "a,b"},
					e.k.WorkerInfo("B"): hash{"host": "host-B", "pid": "100", "start": "@seed", "ttl": "120000",
						"queues": "a"},
				}
			},
		},
		{
			name:    "same id again: fails, nothing changed, TTL not extended",
			seed:    func(t *testing.T, e *env) { register(t, e, "A", 60000, rdb.Standalone("a")) },
			w:       "A",
			ttl:     120000,
			queues:  []rdb.QueueRef{rdb.Standalone("b")},
			wantErr: rdb.ErrIDInUse,
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
			var err error
			e.call(t, func() { _, err = e.st.Register(e.ctx, tc.w, tc.ttl, "host-"+tc.w, 4242, tc.queues) })
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("Register: %v", err)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("Register: err = %v, want %v", err, tc.wantErr)
			case tc.wantErr != nil && !strings.Contains(err.Error(), tc.w):
				t.Errorf("Register: err = %v, does not name the worker %s", err, tc.w)
			}
			e.checkState(t, before, tc.state)
		})
	}
}
