package rdb_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"
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
					e.q.Task("t1"):       hash{"d": "", "s": "active", "w": "A", "p": "1", "sa": "@now"},
					e.q.WorkerQueue("A"): hash{"1": "t1"},
					e.q.Holders:          set{"A"},
					e.q.Seq:              str("1"),
				}
			},
		},
		{
			name: "a task with metadata: handed out with its payload, the hash unchanged but for the taking",
			seed: func(t *testing.T, e *env) {
				e.enqueueTo(t, e.q, &rdb.EnqueueArgs{Meta: `{"traceparent":"00-x"}`}, "t1")
				e.enqueue(t, "t2")
			},
			w: "A", max: 2,
			want: []taken{{ID: "t1", PID: "1", Payload: "pt1", Attempt: 1, Meta: `{"traceparent":"00-x"}`}, tk("t2", "2")},
			state: func(e *env) state {
				return state{
					e.q.Task("t1"):       active("t1", "A", "1").with("mt", `{"traceparent":"00-x"}`),
					e.q.Task("t2"):       active("t2", "A", "2"),
					e.q.WorkerQueue("A"): hash{"1": "t1", "2": "t2"},
					e.q.Holders:          set{"A"},
					e.q.Seq:              str("2"),
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
				"s": "active", "w": "A", "p": "1", "f:user": "u1", "fr": "60000", "fi": "user", "i:user": "u1", "sa": "@now"}}},
			state: func(e *env) state {
				return state{
					e.q.Task("r1"): hash{"d": "", "st": "q", "fs": "running", "s": "active", "w": "A", "p": "1",
						"f:user": "u1", "fr": "60000", "fi": "user", "i:user": "u1", "sa": "@now"},
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
			for i := range got {
				if got[i].Run != nil && i < len(tc.want) {
					got[i].Run = e.settle(got[i].Run, tc.want[i].Run).(hash) // the start time: "@now"
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Take = %+v, want %+v", got, tc.want)
			}
			e.checkState(t, before, tc.state)
			checkPubs(t, pubs, nil)
		})
	}
}

// A take at its worker's deadline, not only after it, is refused and
// changes nothing (take.lua: the keepalive was set to live at least until
// the deadline, not past it). The deadline is the Redis time read just
// before the take: on a local server most takes run within that same
// millisecond (the boundary), and the rest after it; each must be refused.
func TestTakeAtTheDeadlineIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(t, "a")
	for i := 0; i < 200; i++ {
		until := e.now(t)
		got, err := e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: "W", Until: until, Max: 1})
		if !errors.Is(err, rdb.ErrExpired) || len(got) != 0 {
			t.Fatalf("take %d with the deadline at Redis's now (%d) = %+v, %v; want rdb.ErrExpired and nothing", i, until, got, err)
		}
	}
	if ids := e.waitingIDs(t); len(ids) != 1 || ids[0] != "a" {
		t.Fatalf("waiting %v, want [a]", ids)
	}
	if n, _ := redis.Int(e.c.Do("EXISTS", e.q.WorkerQueue("W"), e.q.Holders)); n != 0 {
		t.Fatalf("a refused take recorded a taking or a holder (%d keys)", n)
	}
}

// A task taken past its deadline is handed out marked expired (attempt 0);
// its end with Expire records it as expired, kept for its own retention.
func TestDeadlineExpiresAtTake(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueueTo(t, e.q, &rdb.EnqueueArgs{DeadlineMs: 1, RetentionMs: 30000}, "late")
	e.enqueueTo(t, e.q, &rdb.EnqueueArgs{DeadlineMs: far}, "ok")
	got := e.takeFrom(t, e.q, "A", 2, false)
	if len(got) != 2 || !got[0].Expired || got[0].Attempt != 0 || got[1].Expired || got[1].Attempt != 1 {
		t.Fatalf("take: %+v", got)
	}
	before := e.dump(t)
	var ended []rdb.Ended
	e.call(t, func() {
		var err error
		ended, err = e.st.End(e.ctx, e.q, 0, []rdb.Ending{
			rdb.Expire("A", got[0].PID, "late"),
			rdb.Expire("A", got[1].PID, "ok"), // not past: the end refuses to expire it
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	if ended[0].Outcome != rdb.OutcomeExpired || ended[1].Outcome != rdb.OutcomeRequeued {
		t.Fatalf("outcomes %v, %v; want expired, requeued", ended[0].Outcome, ended[1].Outcome)
	}
	e.checkState(t, before, func(e *env) state {
		return state{
			e.q.Task("late"): ttl(hash{"d": "plate", "dl": "1", "rt": "30000", "s": "expired", "ft": "@now"}.started(), 30000),
			e.q.Retained:     ttl(zset{{"late", "@now+30000"}}, 30000),
			e.q.Task("ok"):   hash{"d": "pok", "dl": fmt.Sprint(far), "s": "queued"}.started(),
			e.q.Waiting:      list{"ok"},
			e.q.Holders:      set{"A"},
			e.q.Seq:          str("2"),
		}
	})
	// Run again: the takings are gone, nothing changes.
	before = e.dump(t)
	again, err := e.st.End(e.ctx, e.q, 0, []rdb.Ending{rdb.Expire("A", got[0].PID, "late")})
	if err != nil || again[0].Outcome != rdb.OutcomeLost {
		t.Fatalf("second end: %+v %v", again, err)
	}
	e.checkState(t, before, nil)
}

// A take hands out at most about 1 MiB of payloads, the first task whatever
// its size: the tasks past it go back to the front of the queue, in their
// order, with a wake-up for the takes that follow (a take of 50 tasks of
// 1 MiB held Redis for 90 ms).
func TestTakeBoundedByBytes(t *testing.T) {
	e := newEnv(t)
	ids := []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6"}
	sizes := []int{400 << 10, 400 << 10, 400 << 10, 400 << 10, 400 << 10, 10, 2 << 20}
	for i, id := range ids {
		if _, err := e.st.Enqueue(e.ctx, e.q, []string{id}, [][]byte{bytes.Repeat([]byte{'x'}, sizes[i])}, nil); err != nil {
			t.Fatal(err)
		}
	}
	l := e.listen(t)

	take := func(want ...string) {
		t.Helper()
		got, err := e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 100, MaxCrashes: 5})
		if err != nil {
			t.Fatal(err)
		}
		var gotIDs []string
		for _, tk := range got {
			gotIDs = append(gotIDs, tk.ID)
			if tk.PID == "" {
				t.Fatalf("%s was buried: %s", tk.ID, tk.Payload)
			}
		}
		if fmt.Sprint(gotIDs) != fmt.Sprint(want) {
			t.Fatalf("take: got %v, want %v", gotIDs, want)
		}
	}
	// 800 KiB, and the third would pass 1 MiB: its size is asked
	// (HSTRLEN), its payload not read.
	before := commandCalls(t, e.c, "hmget")
	take("t0", "t1")
	if read := commandCalls(t, e.c, "hmget") - before; read != 2 {
		t.Errorf("the take read %d task hashes to hand out 2 tasks: the one past the bound was read in vain", read)
	}
	if w, err := redis.Strings(e.c.Do("LRANGE", e.q.Waiting, 0, -1)); err != nil || fmt.Sprint(w) != "[t2 t3 t4 t5 t6]" {
		t.Fatalf("waiting after the first take: %v, %v", w, err)
	}
	checkPubs(t, l.collect(t, e), []msg{{"wake", "5"}})
	take("t2", "t3")
	take("t4", "t5")
	take("t6") // 2 MiB: alone, but handed out
	take()
	// Every taking is held by W, once.
	if n, err := redis.Int(e.c.Do("HLEN", e.q.WorkerQueue("W"))); err != nil || n != len(ids) {
		t.Fatalf("holdings: %d, %v", n, err)
	}
}

// Loaded tasks wait packed, with no hash of their own: their size is asked
// from their packed field before they are read.
func TestTakeOfPackedTasksBoundedByBytes(t *testing.T) {
	e := newEnv(t)
	ids := make([]string, 12)
	ps := make([][]byte, 12)
	for i := range ids {
		ids[i] = fmt.Sprintf("dc39abcdefgh%08d", i)
		ps[i] = bytes.Repeat([]byte{'p'}, 400<<10)
	}
	// 4.7 MiB: several steps, written packed.
	if n, _, err := e.st.EnqueueBatch(e.ctx, e.q, ids, ps, nil); err != nil || n != len(ids) {
		t.Fatalf("EnqueueBatch: %d, %v", n, err)
	}
	if k, f := e.q.Packed(ids[2]); e.do(t, "HEXISTS", k, f) != int64(1) {
		t.Fatalf("the tasks were not written packed")
	}
	before := commandCalls(t, e.c, "hget")
	got, err := e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 100, MaxCrashes: 5})
	if err != nil || fmt.Sprint(takenIDs(got)) != fmt.Sprint(ids[:2]) {
		t.Fatalf("take: %v, %v; want %v", takenIDs(got), err, ids[:2])
	}
	if read := commandCalls(t, e.c, "hget") - before; read != 2 {
		t.Errorf("the take read %d packed payloads (HGET) to hand out 2: the one past the bound was read in vain", read)
	}
}

// A key batch's tasks behind its head count too: those past the bound stay
// at the front of their key's list, and come with the next head.
func TestKeyBatchBoundedByBytes(t *testing.T) {
	e := newEnv(t)
	for i := 0; i < 6; i++ {
		id := "k" + strconv.Itoa(i)
		e.keyed(t, "A", id, strings.Repeat("y", 300<<10), "")
	}
	// The head and two behind it: 900 KiB; a third would pass 1 MiB.
	first := e.takeBatch(t, "W", 10, 10)
	if got := takenIDs(first); fmt.Sprint(got) != "[k0 k1 k2]" {
		t.Fatalf("first batch: %v", got)
	}
	if l := e.list(t, "A"); fmt.Sprint(l) != "[k3 k4 k5]" {
		t.Fatalf("A's list %v, want [k3 k4 k5]: those cut stay at its front", l)
	}
	// Ended, the key moves up: its next head comes with the rest.
	e.endIn(t, e.q, 60_000, batchOf(rdb.Done(rdb.KindTask, "W", first[0].PID, "k0", nil), first))
	if got := takenIDs(e.takeBatch(t, "W", 10, 10)); fmt.Sprint(got) != "[k3 k4 k5]" {
		t.Fatalf("second batch: %v", got)
	}
}
