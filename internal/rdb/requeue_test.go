package rdb_test

import (
	"slices"
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
)

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
