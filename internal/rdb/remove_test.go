package rdb_test

import (
	"fmt"
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
)

// DropQueue deletes the keys of a queue that holds nothing: its config,
// rate log, park hash, holder index and empty worker-queue hashes, a
// retained set whose entries are all past their time, and (forced) an
// indexed consumer's progress; the tag's taking counter stays. A queue
// that holds anything keeps every key, and the reply says what is left.
// Each row runs twice: a repeat changes nothing more.
func TestDropQueue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		forced bool
		seed   func(t *testing.T, e *env)
		left   *rdb.QueueLeft // nil: dropped
		keep   func(e *env) state
	}{
		{name: "config, rate log, park hash, an empty holder: deleted, seq kept", seed: func(t *testing.T, e *env) {
			e.enqueue(t, "a")
			e.take(t, "A", 1)
			e.finish(t, "A", "1", "a")
			e.setCfg(t, e.q, "retention", 0, "paused", "1", "rate", 5, "period", 1000)
			e.do(t, "ZADD", e.q.RateLog(), 1, "1")
			e.do(t, "HSET", e.q.Park, "B", "1|1")
			e.do(t, "SADD", e.q.Holders, "A")
		}, keep: func(e *env) state { return state{e.q.Seq: str("1")} }},
		{name: "retained entries all past their time: deleted", seed: func(t *testing.T, e *env) {
			e.do(t, "ZADD", e.q.Retained, 1, "old")
		}, keep: func(e *env) state { return state{} }},
		{name: "a waiting task of level 3: kept", seed: func(t *testing.T, e *env) {
			e.do(t, "RPUSH", e.q.Level(3), "a")
			e.setCfg(t, e.q, "prio", 3)
		}, left: &rdb.QueueLeft{Waiting: 1}},
		{name: "a scheduled task: kept", seed: func(t *testing.T, e *env) {
			e.enqueueDue(t, far, "a")
		}, left: &rdb.QueueLeft{Scheduled: 1}},
		{name: "a held task: kept", seed: func(t *testing.T, e *env) {
			e.enqueue(t, "a", "b")
			e.take(t, "A", 2)
		}, left: &rdb.QueueLeft{Held: 2}},
		{name: "a dead task: kept", seed: func(t *testing.T, e *env) {
			e.seedDead(t, e.q, "a", 1000)
		}, left: &rdb.QueueLeft{Dead: 1}},
		{name: "a retained task: kept", seed: func(t *testing.T, e *env) {
			e.do(t, "ZADD", e.q.Retained, far, "a")
		}, left: &rdb.QueueLeft{Retained: 1}},
		{name: "a key with tasks: kept", seed: func(t *testing.T, e *env) {
			e.do(t, "HSET", e.q.KeyHeads, "k", "a")
		}, left: &rdb.QueueLeft{Keys: 1}},
		{name: "a fair queue's tasks in its keys' lists: kept", seed: func(t *testing.T, e *env) {
			e.setCfg(t, e.q, "fair", "1")
			e.fairEnq(t, "A", "a1", "a2")
			e.fairEnq(t, "B", "b1")
		}, left: &rdb.QueueLeft{Waiting: 3}},
		{name: "a fair queue emptied: its ring and states deleted", seed: func(t *testing.T, e *env) {
			e.setCfg(t, e.q, "fair", "1")
			e.fairEnq(t, "A", "a1", "a2")
			e.fairEnq(t, "B", "b1")
			if err := e.st.SetKeyLimits(e.ctx, e.q, "A", rdb.KeyLimits{Weight: 2}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.st.BulkFair(e.ctx, e.q, []string{"A", "B"}, rdb.BulkDelete); err != nil {
				t.Fatal(err)
			}
		}, keep: func(e *env) state { return state{} }},
		{name: "a consumer's progress: kept", seed: func(t *testing.T, e *env) {
			c := e.k.Consumer("q")
			e.do(t, "HSET", c.State, "processed", 7, "next", 9)
			e.do(t, "SADD", c.Done, 8)
		}, left: &rdb.QueueLeft{Progress: true}},
		{name: "a consumer's progress, forced: deleted", forced: true, seed: func(t *testing.T, e *env) {
			c := e.k.Consumer("q")
			e.do(t, "HSET", c.State, "processed", 7, "next", 9)
			e.do(t, "SADD", c.Done, 8)
		}, keep: func(e *env) state { return state{} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			tc.seed(t, e)
			before := e.dump(t)
			for run := 1; run <= 2; run++ {
				var (
					ok   bool
					left rdb.QueueLeft
					err  error
				)
				e.call(t, func() { _, ok, left, err = e.st.DropQueue(e.ctx, e.q, tc.forced) })
				if err != nil {
					t.Fatalf("run %d: DropQueue: %v", run, err)
				}
				if tc.left != nil {
					if ok || left != *tc.left {
						t.Errorf("run %d: DropQueue = %v, %+v; want kept with %+v", run, ok, left, *tc.left)
					}
					e.checkState(t, before, nil)
					continue
				}
				if !ok {
					t.Errorf("run %d: DropQueue kept the queue, left %+v", run, left)
				}
				e.checkState(t, nil, tc.keep)
			}
		})
	}
}

// DeleteRetained deletes the retained set BulkStep entries per call, with
// the hashes of ended tasks; an id enqueued again since keeps its hash.
func TestDeleteRetained(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 600
	for _, id := range ids("r", 0, n) {
		e.do(t, "HSET", e.q.Task(id), "d", payload(id), "s", "done")
		e.do(t, "ZADD", e.q.Retained, far, id)
	}
	e.enqueue(t, "again")
	e.do(t, "ZADD", e.q.Retained, 1, "again")
	var calls []int
	e.call(t, func() {
		for {
			k, err := e.st.DeleteRetained(e.ctx, e.q)
			if err != nil {
				t.Fatalf("DeleteRetained: %v", err)
			}
			calls = append(calls, k)
			if k < rdb.BulkStep {
				return
			}
		}
	})
	if fmt.Sprint(calls) != "[250 250 101]" {
		t.Errorf("DeleteRetained calls removed %v, want [250 250 101]", calls)
	}
	e.checkState(t, nil, func(e *env) state {
		return state{e.q.Task("again"): fresh("again"), e.q.Waiting: list{"again"}}
	})
}

// ForgetQueue removes the queue from the known queues and its counters
// from the minutes of history, leaving the other queues' alone; twice is
// once.
func TestForgetQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do(t, "SADD", e.k.KnownQueues(), "q", "other", "f/q")
	e.do(t, "HSET", e.k.History(100), "q|done", 3, "other|done", 2, "f/q|done", 1)
	e.do(t, "HSET", e.k.History(220), "q|enqueued", 1)
	e.do(t, "HSET", e.k.History(221), "q|enqueued", 1) // past the range
	for run := 1; run <= 2; run++ {
		e.call(t, func() {
			if err := e.st.ForgetQueue(e.ctx, rdb.Standalone("q"), 100, 220, []string{"enqueued", "done"}); err != nil {
				t.Fatalf("ForgetQueue: %v", err)
			}
		})
		e.checkState(t, nil, func(e *env) state {
			return state{
				e.k.KnownQueues(): set{"f/q", "other"},
				e.k.History(100):  hash{"other|done": "2", "f/q|done": "1"},
				e.k.History(221):  hash{"q|enqueued": "1"},
			}
		})
	}
}
