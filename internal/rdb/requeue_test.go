package rdb_test

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
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
					e.q.Task("t1"): queued("t1").started().with("c", "1", "cw", "A"),
					e.q.Task("t2"): queued("t2").started().with("c", "1", "cw", "A"),
					e.q.Task("t3"): queued("t3").started().with("c", "1", "cw", "A"),
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
					e.q.Task("t1"): queued("t1").started().with("c", "1", "cw", "A"),
					e.q.Task("t2"): queued("t2").started().with("c", "1", "cw", "A"),
					e.q.Task("t3"): queued("t3").started().with("c", "1", "cw", "A"),
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
					e.q.Task("t1"): queued("t1").started().with("c", "1", "cw", "A"),
					e.q.Task("t2"): queued("t2").started().with("c", "1", "cw", "B"),
					e.q.Task("t3"): queued("t3").started().with("c", "1", "cw", "A"),
					e.q.Task("t4"): queued("t4").started().with("c", "1", "cw", "B"),
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
					e.q.Task("t1"):       queued("t1").started().with("c", "1", "cw", "A"),
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
					e.q.Task("t1"): queued("t1").started(),
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
					e.q.Task("t1"): queued("t1").started().with("c", "2", "cw", "B", "n", "1"),
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
					e.q.Task("t2"): queued("t2").started().with("c", "1", "cw", "A"),
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
					e.q.Task("t1"): ttl(ran("t1").with("s", "cancelled", "x", "1", "ft", "@now"), 60000),
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
						"ft": "@seed", "fr": "60000", "fi": ""}.started(), 60000),
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
						"ft": "@seed", "fr": "60000", "fi": ""}.started(), 60000),
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
					e.q.Task("t2"): queued("t2").started().with("c", "1", "cw", "A"),
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

// A worker whose keepalive expired may still take (a zombie) before it
// notices; if it takes back its own requeued task, the next requeue must not
// count that worker's death a second time. The crash count is what buries a
// task after MaxCrashes, so counting twice would bury a task that crashed
// one worker.
func TestRequeueCountsACrashOncePerDeadWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(t, "t1")
	check := func(step string, crashes, crashedOn string) {
		t.Helper()
		got, err := redis.Strings(e.c.Do("HMGET", e.q.Task("t1"), rdb.FieldCrashes, rdb.FieldCrashedOn))
		if err != nil {
			t.Fatal(err)
		}
		if got[0] != crashes || got[1] != crashedOn {
			t.Errorf("%s: c = %q, cw = %q; want %q, %q", step, got[0], got[1], crashes, crashedOn)
		}
	}
	takeCrashes := func(w string, want int) {
		t.Helper()
		got := e.takeFrom(t, e.q, w, 1, false)
		if len(got) != 1 || got[0].ID != "t1" || got[0].Crashes != want {
			t.Fatalf("take by %s = %+v, want t1 with %d crashes", w, got, want)
		}
	}

	takeCrashes("w1", 0)
	e.requeue(t, true, "w1")
	check("w1 died", "1", "w1")

	takeCrashes("w1", 1) // the zombie takes its own requeued task again
	e.requeue(t, true, "w1")
	check("the zombie w1 requeued again", "1", "w1")

	takeCrashes("w2", 1)
	e.requeue(t, true, "w2")
	check("w2 died", "2", "w2")

	takeCrashes("w2", 2) // and w2's zombie
	e.requeue(t, false, "w2")
	check("w2 requeued as stopped", "2", "w2")

	takeCrashes("w3", 2)
	e.checkState(t, nil, func(e *env) state {
		return state{
			e.q.Task("t1"):        active("t1", "w3", "5").with("c", "2", "cw", "w2"),
			e.q.WorkerQueue("w3"): hash{"5": "t1"},
			e.q.Holders:           set{"w3"},
			e.q.Seq:               str("5"),
		}
	})
}

// scriptCounter counts the script calls (FCALL, EVALSHA or EVAL) sent through it.
type scriptCounter struct {
	pool  *redis.Pool
	calls atomic.Int64
}

func (p *scriptCounter) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := p.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: c, p: p}, nil
}

type countingConn struct {
	redis.Conn
	p *scriptCounter
}

func (c countingConn) note(cmd string) {
	if cmd = strings.ToUpper(cmd); strings.HasPrefix(cmd, "EVAL") || cmd == "FCALL" {
		c.p.calls.Add(1)
	}
}

func (c countingConn) Do(cmd string, args ...any) (any, error) {
	c.note(cmd)
	return c.Conn.Do(cmd, args...)
}

func (c countingConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	c.note(cmd)
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

func (c countingConn) Send(cmd string, args ...any) error {
	c.note(cmd)
	return c.Conn.Send(cmd, args...)
}

func (c countingConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

// A worker holding more takings than one requeue call may handle is
// requeued in chunks of RequeueChunk, each a script call of its own (no call
// holds Redis for the whole set), and every taking comes back exactly once:
// in each chunk oldest first, and each chunk in front of the one before.
func TestRequeueRunsInChunks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := srv.TagCheckedPool(t)
	ns := redistest.Namespace()
	st := rdb.NewStore(pool, ns)
	q := st.Queue(rdb.Standalone("big"))
	const n = 2*rdb.RequeueChunk + 500
	ids := make([]string, n)
	payloads := make([][]byte, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("t%05d", i)
		payloads[i] = []byte("p")
	}
	if _, _, err := st.EnqueueBatch(ctx, q, ids, payloads, &rdb.EnqueueArgs{}); err != nil {
		t.Fatal(err)
	}
	for held := 0; held < n; {
		got, err := st.Take(ctx, q, rdb.TakeArgs{Worker: "A", Until: math.MaxInt64, Max: rdb.MaxTake})
		if err != nil {
			t.Fatal(err)
		}
		held += len(got)
	}
	// B holds one taking too, so a chunk boundary falls between workers.
	if _, err := st.Enqueue(ctx, q, []string{"b"}, [][]byte{[]byte("p")}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Take(ctx, q, rdb.TakeArgs{Worker: "B", Until: math.MaxInt64, Max: 1}); err != nil {
		t.Fatal(err)
	}

	counter := &scriptCounter{pool: pool}
	counted := rdb.NewStore(counter, ns)
	// Load the scripts first (a fresh server has neither the library nor
	// the script).
	if _, _, err := counted.Requeue(ctx, q, []string{"nobody"}, true); err != nil {
		t.Fatal(err)
	}
	counter.calls.Store(0)
	requeued, cancelled, err := counted.Requeue(ctx, q, []string{"A", "B"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if requeued != n+1 || len(cancelled) != 0 {
		t.Fatalf("Requeue = %d requeued, cancelled %v; want %d, none", requeued, cancelled, n+1)
	}
	if got, want := counter.calls.Load(), int64(n/rdb.RequeueChunk+1); got != want {
		t.Errorf("Requeue made %d script calls for %d takings, want %d (chunks of %d)", got, n+1, want, rdb.RequeueChunk)
	}
	c := pool.Get()
	defer c.Close()
	waiting, err := redis.Strings(c.Do("LRANGE", q.Waiting, 0, -1))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, id := range waiting {
		seen[id]++
	}
	if len(waiting) != n+1 || len(seen) != n+1 || seen["b"] != 1 {
		t.Fatalf("waiting holds %d ids (%d distinct), want each of the %d once", len(waiting), len(seen), n+1)
	}
	// Within each chunk the order is the order of taking. The first
	// chunk put back is now at the back, the last one at the front.
	for end := len(waiting); end > 0; end -= rdb.RequeueChunk {
		chunk := waiting[max(end-rdb.RequeueChunk, 0):end]
		for i := 1; i < len(chunk); i++ {
			if chunk[i-1] > chunk[i] && chunk[i] != "b" && chunk[i-1] != "b" {
				t.Fatalf("chunk ending at %d out of order: %q before %q", end, chunk[i-1], chunk[i])
			}
		}
	}
	for _, key := range []string{q.Holders, q.WorkerQueue("A"), q.WorkerQueue("B")} {
		if n, _ := redis.Int(c.Do("EXISTS", key)); n != 0 {
			t.Errorf("%s survived the requeue", key)
		}
	}
	if again, _, err := st.Requeue(ctx, q, []string{"A", "B"}, true); err != nil || again != 0 {
		t.Errorf("second Requeue = %d, %v; want 0", again, err)
	}
}

// After a failover a worker checks, in the release's one call, which of
// the pids its handlers run the new primary still holds: a take that the
// old primary acknowledged and never passed on is missing there.
func TestReleaseCheckReportsMissing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(t, "a", "b", "c", "d")
	got := e.takeFrom(t, e.q, "W", 3, false)
	if len(got) != 3 {
		t.Fatalf("took %d, want 3", len(got))
	}
	// got[1]'s take "was lost": the holdings no longer list it. got[2]
	// is held but not run (its take reply was lost): put back.
	e.do(t, "HDEL", e.q.WorkerQueue("W"), got[1].PID)
	known := []string{got[0].PID, got[1].PID, "999999"}
	for run := 0; run < 2; run++ {
		r, err := e.st.ReleaseCheck(e.ctx, e.q, "W", known)
		if err != nil {
			t.Fatal(err)
		}
		wantBack := 1
		if run == 1 {
			wantBack = 0 // idempotent
		}
		if r.Requeued != wantBack || len(r.Cancelled) != 0 {
			t.Errorf("run %d: requeued %d cancelled %v, want %d and none", run, r.Requeued, r.Cancelled, wantBack)
		}
		if want := []string{got[1].PID, "999999"}; !reflect.DeepEqual(r.Missing, want) {
			t.Errorf("run %d: missing %v, want %v", run, r.Missing, want)
		}
	}
	if w := e.waitingIDs(t); !reflect.DeepEqual(w, []string{"c", "d"}) {
		t.Errorf("waiting %v, want [c d] (the unknown taking back at the front)", w)
	}
	if held := e.strs(t, "HKEYS", e.q.WorkerQueue("W")); !reflect.DeepEqual(held, []string{got[0].PID}) {
		t.Errorf("W holds %v, want only %s", held, got[0].PID)
	}
	// Nothing known, nothing held: nothing missing.
	r, err := e.st.ReleaseCheck(e.ctx, e.q, "V", nil)
	if err != nil || r.Requeued != 0 || r.Missing != nil {
		t.Errorf("empty: %+v %v", r, err)
	}
}

// A taking the worker did not know of whose cancel was asked meanwhile is
// ended as cancelled, not put back, and the release names it (its end,
// which would have reported it, never comes).
func TestReleaseNamesCancelled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(t, "a", "b", "c")
	got := e.takeFrom(t, e.q, "W", 2, false)
	if len(got) != 2 {
		t.Fatalf("took %d, want 2", len(got))
	}
	e.cancel(t, "b")
	r, err := e.st.ReleaseCheck(e.ctx, e.q, "W", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []rdb.Cancelled{{ID: "b", PID: got[1].PID, Worker: "W"}}; r.Requeued != 1 || !reflect.DeepEqual(r.Cancelled, want) {
		t.Errorf("released %+v, want a requeued and b cancelled", r)
	}
	if w := e.waitingIDs(t); !reflect.DeepEqual(w, []string{"a", "c"}) {
		t.Errorf("waiting %v, want [a c]", w)
	}
}
