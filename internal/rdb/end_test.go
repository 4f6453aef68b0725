package rdb_test

import (
	"fmt"
	"math"
	"reflect"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
)

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
					e.q.Task("t1"): ttl(ran("t1").with("s", "done", "ft", "@now", "r", "out\x00"), 60000),
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
					e.q.Task("t1"): ttl(ran("t1").with("s", "done", "ft", "@now"), 60000),
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
					e.q.Task("t1"): ttl(ran("t1").with("s", "cancelled", "x", "1", "ft", "@now"), 60000),
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
					e.q.Task("t1"):      ran("t1").with("u", uniqueKey(e.q, "k"), "s", "scheduled", "n", "1", "e", "boom").tried(1, "retry", "A", "boom"),
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
					e.q.Task("t1"): ran("t1").with("s", "scheduled", "n", "3", "e", "boom").tried(3, "retry", "A", "boom"),
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
					e.q.Task("t1"): ran("t1").with("u", uniqueKey(e.q, "k"), "n", "1", "e", "bad").
						buried("failed", "A").tried(1, "dead", "A", "bad"),
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
					e.q.Task("t1"): ran("t1").with("n", "1", "e", "bad").buried("failed", "A").tried(1, "dead", "A", "bad"),
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
					e.q.Task("t1"): ran("t1").with("n", "1", "e", "bad").buried("failed", "A").tried(1, "dead", "A", "bad"),
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
					e.q.Task("t1"): ran("t1").with("n", "1", "e", "bad").buried("failed", "A").tried(1, "dead", "A", "bad"),
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
					e.q.Task("t1"): ran("t1").with("n", "1", "e", "bad").buried("failed", "A").tried(1, "dead", "A", "bad"),
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
					e.q.Task("t1"): ran("t1").with("n", "1", "e", "bad").buried("failed", "A").tried(1, "dead", "A", "bad"),
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
					e.q.Task("t1"): queued("t1").started(),
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
					e.q.Task("t2"):       queued("t2").started().with("n", "1", "c", "2", "u", uniqueKey(e.q, "k")),
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
					e.q.Task("t1"): ttl(ran("t1").with("s", "cancelled", "x", "1", "ft", "@now"), 60000),
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
						"ft": "@seed", "fr": "60000", "fi": ""}.started(), 60000),
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
			e.q.Task("t1"):       ttl(ran("t1").with("s", "done", "ft", "@now", "r", "r1"), 60000),
			e.q.Task("t2"):       ran("t2").with("s", "scheduled", "n", "1", "e", "boom").tried(1, "retry", "A", "boom"),
			e.q.Scheduled:        zset{{"t2", "@now+5000"}},
			e.q.Task("t3"):       ran("t3").with("n", "1", "e", "bad").buried("failed", "A").tried(1, "dead", "A", "bad"),
			e.q.Dead:             zset{{"t3", "@now"}},
			e.q.Task("t4"):       queued("t4").started(),
			e.q.Waiting:          list{"t4"},
			e.q.Task("t5"):       active("t5", "A", "5"), // the lost item: untouched
			e.q.WorkerQueue("A"): hash{"5": "t5"},
			e.q.Task("t6"):       ttl(ran("t6").with("s", "cancelled", "x", "1", "ft", "@now"), 60000),
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
			f.s1.Task("r1"): runQueued("s2").started().with("f:out", "v1"),
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
					f.s1.Task("r1"): base.without("kp").started().with("st", "s2", "s", "queued",
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
					f.s1.Task("r1"): ttl(runEnded(base.started().with("k:k1", "failed", "ke:k1", "bad", "k:k2", "cancelled",
						"kl", "g1 k1 k2"), "failed"), 60000), // (kl kept for RetryRun)
					f.c1.Task("k1"): childOf("k1", "s2", true).started().with("n", "1", "e", "bad").buried("failed", "A").
						tried(1, "dead", "A", "bad"),
					f.c1.Dead:    zset{{"k1", "@now"}},
					f.ix:         ttl(zset{{"r1", "@now+60000"}}, 60000),
					f.s1.Runs:    runs("r1"),
					f.s1.Holders: set{"A"},
					f.c1.Holders: set{"A"},
					f.s1.Seq:     str("3"),
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
			f.s1.Task("r2"): runQueued("s2").started(),
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

// A batch of one key is owned only if every member's pid still maps to that
// member's id (own_every). After a failover the new primary may hand out the
// batch's pids again, to another key's batch: a late end of the old batch
// must be lost, and the new batch stay owned and reachable by the reaper.
// Simulated: the holdings of a's batch are lost and the counter set back.
func TestEndOfABatchWithReissuedPidsIsLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, id := range []string{"a1", "a2", "a3"} {
		e.keyed(t, "A", id, id, "")
	}
	for _, id := range []string{"b1", "b2", "b3"} {
		e.keyed(t, "B", id, id, "")
	}
	old := e.takeBatch(t, "W", 1, 3)
	if want := []string{"a1", "a2", "a3"}; !reflect.DeepEqual(takenIDs(old), want) {
		t.Fatalf("took %v, want %v", takenIDs(old), want)
	}
	for _, g := range old {
		e.do(t, "HDEL", e.q.WorkerQueue("W"), g.PID)
	}
	e.do(t, "DECRBY", e.q.Seq, len(old))
	got := e.takeBatch(t, "W", 1, 3)
	if want := []string{"b1", "b2", "b3"}; !reflect.DeepEqual(takenIDs(got), want) {
		t.Fatalf("second take %v, want %v", takenIDs(got), want)
	}
	for i := range got {
		if got[i].PID != old[i].PID {
			t.Fatalf("second take's pids %v, want a's pids reissued", got)
		}
	}
	ended, err := e.st.End(e.ctx, e.q, 0, []rdb.Ending{batchOf(rdb.Done(rdb.KindTask, "W", old[0].PID, "a1", nil), old)})
	if err != nil || len(ended) != 1 || ended[0].Outcome != rdb.OutcomeLost {
		t.Fatalf("late end of a's batch under reissued pids = %+v, %v; want lost", ended, err)
	}
	held, err := redis.StringMap(e.c.Do("HGETALL", e.q.WorkerQueue("W")))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range got {
		if held[g.PID] != g.ID {
			t.Fatalf("W's holdings %v, want pid %s -> %s (still reachable)", held, g.PID, g.ID)
		}
	}
}

// The ask cancel ends a taking the take found marked: cancelled, even if
// the mark went away since (a hand edit: the cancel already set the state
// and released the unique lock); a task without it that ends expired is
// unaffected.
func TestEndAskCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(t, "a", "b")
	got := e.takeFrom(t, e.q, "W", 2, false)
	if len(got) != 2 {
		t.Fatalf("took %d, want 2", len(got))
	}
	e.do(t, "HSET", e.q.Task("b"), "x", "1")
	unmarked := rdb.NotRun("W", rdb.Taken{ID: "a", PID: got[0].PID, Cancelled: true})
	marked := rdb.NotRun("W", rdb.Taken{ID: "b", PID: got[1].PID, Cancelled: true})
	ended := e.endIn(t, e.q, 0, unmarked, marked)
	if ended[0].Outcome != rdb.OutcomeCancelled || ended[1].Outcome != rdb.OutcomeCancelled {
		t.Fatalf("ends %v %v, want cancelled twice", ended[0].Outcome, ended[1].Outcome)
	}
	if w := e.waitingIDs(t); len(w) != 0 {
		t.Errorf("waiting %v, want nothing", w)
	}
}

// A rate-limited end (ask later) schedules the task without counting a
// failed attempt.
func TestEndLater(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(t, "t1")
	e.take(t, "A", 1)
	e.call(t, func() { e.endTask(t, 0, rdb.Later(rdb.KindTask, "A", "1", "t1", 2000, "quota")) })
	e.checkState(t, nil, func(e *env) state {
		return state{
			e.q.Task("t1"): ran("t1").with("s", "scheduled", "e", "quota"),
			e.q.Scheduled:  zset{{"t1", "@now+2000"}},
			e.q.Holders:    set{"A"},
			e.q.Seq:        str("1"),
		}
	})
}

// On a queue without retention, a done task that carries a result is kept
// for a day, so that its result can be read; one without a result, and a
// cancelled one, are deleted at once.
func TestResultIsKeptWithoutRetention(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(t, "with")
	e.enqueue(t, "without")
	got := e.takeFrom(t, e.q, "A", 2, false)
	before := e.dump(t)
	e.call(t, func() {
		e.endIn(t, e.q, 0,
			rdb.Done(rdb.KindTask, "A", got[0].PID, "with", []byte("r")),
			rdb.Done(rdb.KindTask, "A", got[1].PID, "without", nil))
	})
	e.checkState(t, before, func(e *env) state {
		return state{
			e.q.Task("with"): ttl(hash{"d": "pwith", "s": "done", "ft": "@now", "r": "r"}.started(), 86400000),
			e.q.Retained:     ttl(zset{{"with", "@now+86400000"}}, 86400000),
			e.q.Holders:      set{"A"},
			e.q.Seq:          str("2"),
		}
	})
}

// A task's own retention wins over the queue's, longer or shorter, and the
// retained set lives as long as its latest entry.
func TestTaskRetentionOverridesTheQueues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueueTo(t, e.q, &rdb.EnqueueArgs{RetentionMs: 120000}, "long")
	e.enqueueTo(t, e.q, &rdb.EnqueueArgs{RetentionMs: 5000}, "short")
	e.enqueue(t, "plain")
	got := e.takeFrom(t, e.q, "A", 3, false)
	before := e.dump(t)
	e.call(t, func() {
		e.endIn(t, e.q, 60000,
			rdb.Done(rdb.KindTask, "A", got[0].PID, "long", nil),
			rdb.Done(rdb.KindTask, "A", got[1].PID, "short", nil),
			rdb.Done(rdb.KindTask, "A", got[2].PID, "plain", nil))
	})
	e.checkState(t, before, func(e *env) state {
		return state{
			e.q.Task("long"):  ttl(hash{"d": "plong", "rt": "120000", "s": "done", "ft": "@now"}.started(), 120000),
			e.q.Task("short"): ttl(hash{"d": "pshort", "rt": "5000", "s": "done", "ft": "@now"}.started(), 5000),
			e.q.Task("plain"): ttl(hash{"d": "pplain", "s": "done", "ft": "@now"}.started(), 60000),
			// Scored by expiry; the set's TTL is that of its queue-retention
			// entry, the last added (see finalize).
			e.q.Retained: ttl(zset{{"short", "@now+5000"}, {"plain", "@now+60000"}, {"long", "@now+120000"}}, 60000),
			e.q.Holders:  set{"A"},
			e.q.Seq:      str("3"),
		}
	})
	// A queue without retention keeps a task that asks for it.
	e.enqueueTo(t, e.q, &rdb.EnqueueArgs{RetentionMs: 30000}, "kept")
	got = e.takeFrom(t, e.q, "A", 1, false)
	e.endTask(t, 0, rdb.Done(rdb.KindTask, "A", got[0].PID, "kept", []byte("r")))
	if r, err := e.st.Task(e.ctx, e.q, "kept"); err != nil || r == nil || r.State != rdb.StateDone || r.RetentionMs != 30000 || string(r.Result) != "r" {
		t.Fatalf("kept: %+v %v", r, err)
	}
}
