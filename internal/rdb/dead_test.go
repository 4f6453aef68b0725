package rdb_test

import (
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
)

func TestDead(t *testing.T) {
	t.Parallel()
	// dead3 seeds d1, d2, d3 dead at times 1000, 2000, 3000 and w1 waiting.
	dead3 := func(t *testing.T, e *env) {
		e.enqueue(t, "w1")
		e.seedDead(t, e.q, "d1", 1000)
		e.seedDead(t, e.q, "d2", 2000)
		e.seedDead(t, e.q, "d3", 3000)
	}
	// requeued is a dead seed requeued: counters, death record and unique
	// key gone, the last error kept.
	requeued := func(id string) hash { return queued(id).with("e", "boom") }
	tests := []struct {
		name  string
		seed  func(t *testing.T, e *env)
		op    rdb.DeadOp
		ids   []string // nil: the oldest n
		n     int
		want  int
		state func(e *env) state
		pubs  []msg
	}{
		{
			name: "requeue ids: counters reset, pushed to the back in the given order, one wake-up",
			seed: dead3,
			op:   rdb.DeadRequeue, ids: []string{"d3", "d2"},
			want: 2,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"w1", "d3", "d2"},
					e.q.Task("w1"): fresh("w1"),
					e.q.Task("d1"): deadSeed("d1", "1000"),
					e.q.Task("d2"): requeued("d2"),
					e.q.Task("d3"): requeued("d3"),
					e.q.Dead:       zset{{"d1", "1000"}},
				}
			},
			pubs: []msg{{"wake", "2"}},
		},
		{
			name: "requeue ids: ids not in the dead set are left alone and not counted",
			seed: dead3,
			op:   rdb.DeadRequeue, ids: []string{"w1", "nope", "d1"},
			want: 1,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"w1", "d1"},
					e.q.Task("w1"): fresh("w1"),
					e.q.Task("d1"): requeued("d1"),
					e.q.Task("d2"): deadSeed("d2", "2000"),
					e.q.Task("d3"): deadSeed("d3", "3000"),
					e.q.Dead:       zset{{"d2", "2000"}, {"d3", "3000"}},
				}
			},
			pubs: []msg{{"wake", "1"}},
		},
		{
			name: "requeue a failed flow run: it runs again, its finish time gone, indexed as running for good",
			seed: func(t *testing.T, e *env) {
				e.seedDead(t, e.q, "r1", 1000)
				e.do(t, "HSET", e.q.Task("r1"), "fs", "failed", "st", "q", "ft", "1000",
					"fi", "user", "f:user", "u2", "i:user", "u1")
				e.do(t, "ZADD", e.q.IndexKey("user", "u1"), 61000, "r1", 2000, "r0")
				e.do(t, "PEXPIRE", e.q.IndexKey("user", "u1"), 60000)
			},
			op: rdb.DeadRequeue, ids: []string{"r1"},
			want: 1,
			state: func(e *env) state {
				return state{
					e.q.Waiting: list{"r1"},
					e.q.Task("r1"): requeued("r1").with("fs", "running", "st", "q",
						"fi", "user", "f:user", "u2", "i:user", "u1"),
					e.q.IndexKey("user", "u1"): zset{{"r0", "2000"}, {"r1", "inf"}},
				}
			},
			pubs: []msg{{"wake", "1"}},
		},
		{
			name: "run twice (requeue): the second finds nothing dead, changes nothing",
			seed: func(t *testing.T, e *env) {
				dead3(t, e)
				if _, _, err := e.st.DeadIDs(e.ctx, e.q, rdb.DeadRequeue, []string{"d3", "d2"}); err != nil {
					t.Fatal(err)
				}
			},
			op: rdb.DeadRequeue, ids: []string{"d3", "d2"},
		},
		{
			name: "delete ids: entries and hashes gone, no wake-up",
			seed: dead3,
			op:   rdb.DeadDelete, ids: []string{"d1", "d3", "w1"},
			want: 2,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"w1"},
					e.q.Task("w1"): fresh("w1"),
					e.q.Task("d2"): deadSeed("d2", "2000"),
					e.q.Dead:       zset{{"d2", "2000"}},
				}
			},
		},
		{
			name: "run twice (delete): changes nothing",
			seed: func(t *testing.T, e *env) {
				dead3(t, e)
				if _, _, err := e.st.DeadIDs(e.ctx, e.q, rdb.DeadDelete, []string{"d1"}); err != nil {
					t.Fatal(err)
				}
			},
			op: rdb.DeadDelete, ids: []string{"d1"},
		},
		{
			name: "requeue the oldest n, oldest first",
			seed: dead3,
			op:   rdb.DeadRequeue, n: 2,
			want: 2,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"w1", "d1", "d2"},
					e.q.Task("w1"): fresh("w1"),
					e.q.Task("d1"): requeued("d1"),
					e.q.Task("d2"): requeued("d2"),
					e.q.Task("d3"): deadSeed("d3", "3000"),
					e.q.Dead:       zset{{"d3", "3000"}},
				}
			},
			pubs: []msg{{"wake", "2"}},
		},
		{
			name: "delete the oldest n, more than there are: all gone",
			seed: dead3,
			op:   rdb.DeadDelete, n: 10,
			want: 3,
			state: func(e *env) state {
				return state{e.q.Waiting: list{"w1"}, e.q.Task("w1"): fresh("w1")}
			},
		},
		{
			name: "requeue the oldest 0: nothing (not every entry)",
			seed: dead3,
			op:   rdb.DeadRequeue, n: 0,
		},
		{
			name: "delete the oldest -1: nothing (not all but the newest)",
			seed: dead3,
			op:   rdb.DeadDelete, n: -1,
		},
		{
			name: "oldest n of an empty dead set: nothing",
			seed: func(t *testing.T, e *env) { e.enqueue(t, "w1") },
			op:   rdb.DeadRequeue, n: 5,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			tc.seed(t, e)
			before := e.dump(t)
			l := e.listen(t)
			var got int
			var err error
			e.call(t, func() {
				if tc.ids != nil {
					got, _, err = e.st.DeadIDs(e.ctx, e.q, tc.op, tc.ids)
				} else {
					var p rdb.DeadPass
					p, err = e.st.DeadOldest(e.ctx, e.q, tc.op, tc.n, "", "")
					got = p.Handled
				}
			})
			pubs := l.collect(t, e)
			if err != nil {
				t.Fatalf("dead %s: %v", tc.op, err)
			}
			if got != tc.want {
				t.Errorf("dead %s = %d, want %d", tc.op, got, tc.want)
			}
			e.checkState(t, before, tc.state)
			checkPubs(t, pubs, tc.pubs)
		})
	}
}
