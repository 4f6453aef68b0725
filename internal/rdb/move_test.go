package rdb_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
)

func TestMove(t *testing.T) {
	t.Parallel()
	// due3 seeds three tasks due long ago, out of name order (b, c, a), one
	// due in the far future, and one waiting task.
	due3 := func(t *testing.T, e *env) {
		e.enqueue(t, "w1")
		e.enqueueDue(t, 3000, "a")
		e.enqueueDue(t, 1000, "b")
		e.enqueueDue(t, 2000, "c")
		e.enqueueDue(t, far, "f")
	}
	tests := []struct {
		name  string
		seed  func(t *testing.T, e *env)
		batch int
		want  int
		state func(e *env) state
		pubs  []msg
	}{
		{
			name:  "only due tasks move, to the back, in due order, one wake-up",
			seed:  due3,
			batch: 100,
			want:  3,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"w1", "b", "c", "a"},
					e.q.Task("w1"): fresh("w1"),
					e.q.Task("a"):  queued("a"),
					e.q.Task("b"):  queued("b"),
					e.q.Task("c"):  queued("c"),
					e.q.Task("f"):  fresh("f").with("s", "scheduled"),
					e.q.Scheduled:  zset{{"f", fmt.Sprint(far)}},
				}
			},
			pubs: []msg{{"wake", "3"}},
		},
		{
			name:  "batch limit: the earliest due move first",
			seed:  due3,
			batch: 2,
			want:  2,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"w1", "b", "c"},
					e.q.Task("w1"): fresh("w1"),
					e.q.Task("a"):  fresh("a").with("s", "scheduled"),
					e.q.Task("b"):  queued("b"),
					e.q.Task("c"):  queued("c"),
					e.q.Task("f"):  fresh("f").with("s", "scheduled"),
					e.q.Scheduled:  zset{{"a", "3000"}, {"f", fmt.Sprint(far)}},
				}
			},
			pubs: []msg{{"wake", "2"}},
		},
		{
			name: "a retry due now (delay 0) moves, keeping its failure record",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
				e.endTask(t, 0, rdb.Retry(rdb.KindTask, "A", "1", "t1", 0, "boom"))
			},
			batch: 100,
			want:  1,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t1"},
					e.q.Task("t1"): queued("t1").started().with("n", "1", "e", "boom").tried(1, "retry", "A", "boom"),
					e.q.Holders:    set{"A"},
					e.q.Seq:        str("1"),
				}
			},
			pubs: []msg{{"wake", "1"}},
		},
		{
			// A key of the wrong type must not abort the batch after the
			// ZREM: every due id is moved, the take buries the bad ones.
			name:  "task data not a hash among the due ids: every id moved, the bad data left for the take",
			batch: 100,
			seed: func(t *testing.T, e *env) {
				due3(t, e)
				e.do(t, "SET", e.q.Task("c"), "garbage")
				e.do(t, "DEL", e.q.Task("a"))
				e.do(t, "RPUSH", e.q.Task("a"), "x")
			},
			want: 3,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"w1", "b", "c", "a"},
					e.q.Task("w1"): fresh("w1"),
					e.q.Task("a"):  list{"x"},
					e.q.Task("b"):  queued("b"),
					e.q.Task("c"):  str("garbage"),
					e.q.Task("f"):  fresh("f").with("s", "scheduled"),
					e.q.Scheduled:  zset{{"f", fmt.Sprint(far)}},
				}
			},
			pubs: []msg{{"wake", "3"}},
		},
		{
			name: "delayed by Redis time, not due yet: nothing moves",
			seed: func(t *testing.T, e *env) {
				e.enqueueTo(t, e.q, &rdb.EnqueueArgs{DelayMillis: 60000}, "t1")
			},
			batch: 100,
		},
		{
			name:  "nothing scheduled: nothing moves",
			seed:  func(t *testing.T, e *env) { e.enqueue(t, "w1") },
			batch: 100,
		},
		{
			name: "run twice: the second run moves nothing",
			seed: func(t *testing.T, e *env) {
				due3(t, e)
				if _, err := e.st.Move(e.ctx, e.q, 100); err != nil {
					t.Fatal(err)
				}
			},
			batch: 100,
		},
		{
			name: "dead set trimmed by dead_age, hashes included, even with nothing to move",
			seed: func(t *testing.T, e *env) {
				e.setCfg(t, e.q, "dead_age", 60000)
				now := e.now(t)
				e.seedDead(t, e.q, "d1", now-120000)
				e.seedDead(t, e.q, "d2", now-1000)
			},
			batch: 100,
			state: func(e *env) state {
				return state{
					e.q.Config:     hash{"dead_age": "60000"},
					e.q.Task("d2"): deadSeed("d2", "@seed-1000"),
					e.q.Dead:       zset{{"d2", "@seed-1000"}},
				}
			},
		},
		{
			name: "dead set trimmed to dead_max, oldest first",
			seed: func(t *testing.T, e *env) {
				e.setCfg(t, e.q, "dead_max", 1)
				now := e.now(t)
				e.seedDead(t, e.q, "d1", now-2000)
				e.seedDead(t, e.q, "d2", now-1000)
			},
			batch: 100,
			state: func(e *env) state {
				return state{
					e.q.Config:     hash{"dead_max": "1"},
					e.q.Task("d2"): deadSeed("d2", "@seed-1000"),
					e.q.Dead:       zset{{"d2", "@seed-1000"}},
				}
			},
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
			e.call(t, func() { got, err = e.st.Move(e.ctx, e.q, tc.batch) })
			pubs := l.collect(t, e)
			if err != nil {
				t.Fatalf("Move: %v", err)
			}
			if got != tc.want {
				t.Errorf("Move = %d, want %d", got, tc.want)
			}
			e.checkState(t, before, tc.state)
			checkPubs(t, pubs, tc.pubs)
		})
	}
}

// Many movers at once (every peer's reaper may run one) must move each due
// task exactly once, and, each batch being atomic, keep the due order.
func TestMoveConcurrentMovesEachTaskOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n, movers, batch = 5000, 10, 50
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("t%04d", i)
	}
	e.enqueueDue(t, 1000, ids...)
	l := e.listen(t)

	var wg sync.WaitGroup
	counts := make([]int, movers)
	errs := make([]error, movers)
	for m := 0; m < movers; m++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k, err := e.st.Move(e.ctx, e.q, batch)
				if err != nil {
					errs[m] = err
					return
				}
				counts[m] += k
				if k == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	total := 0
	for m := range counts {
		if errs[m] != nil {
			t.Fatalf("mover %d: %v", m, errs[m])
		}
		total += counts[m]
	}
	if total != n {
		t.Errorf("movers moved %d in all, want %d", total, n)
	}
	woken := 0
	for _, p := range l.collect(t, e) {
		var k int
		if _, err := fmt.Sscan(p.Data, &k); err != nil || p.Channel != "wake" {
			t.Fatalf("unexpected message %v", p)
		}
		woken += k
	}
	if woken != n {
		t.Errorf("wake-ups announced %d tasks, want %d", woken, n)
	}
	want := state{e.q.Waiting: list(ids)}
	for _, id := range ids {
		want[e.q.Task(id)] = queued(id)
	}
	e.checkState(t, nil, func(*env) state { return want })
}

func TestMoveEach(t *testing.T) {
	t.Parallel()
	// Redis runs the calls of one round trip back to back: MoveEach's
	// calls share the bounds of one call alone. With a trim of
	// TrimDead/16 each, 16 calls delete at most TrimDead old dead entries
	// in all (each call deleted TrimDead of them, 16 times one call's
	// work, 8,000 deletions and about 35 ms of Redis for a round trip
	// when 16 queues' dead sets aged out together); a call that reached
	// its move batch or its trim says more may be left.
	t.Run("a round trip's calls share one call's bounds", func(t *testing.T) {
		t.Parallel()
		testMoveEachBounds(t)
	})
	// A call refused unrun is run again alone on a connection of its own
	// (for its tag: on a cluster, another node's): the round trip's
	// connection is given back first, so that a pool of one connection
	// (MaxActive, or every other connection busy) does not fail it.
	t.Run("a refused call runs again with the round trip's connection given back", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		// Functions denied: the round trip's FCALLs are refused (NOPERM),
		// then run again as scripts.
		pool := noFunctionsPool(t, 1)
		ns := redistest.Namespace()
		st := rdb.NewStore(pool, ns)
		qs := []rdb.QueueKeys{st.Queue(rdb.Standalone("r1")), st.Queue(rdb.Standalone("r2"))}
		for _, q := range qs {
			if _, err := st.Enqueue(ctx, q, []string{"t1"}, [][]byte{[]byte("p")}, &rdb.EnqueueArgs{DueMillis: 1000}); err != nil {
				t.Fatal(err)
			}
		}
		// A fresh store tries functions first.
		moved, _, errs := rdb.NewStore(pool, ns).MoveEach(ctx, qs, 5, rdb.TrimDead/16)
		for i, q := range qs {
			if errs[i] != nil || moved[i] != 1 {
				t.Errorf("%s: moved %d, %v; want its due task", q.Ref.Name, moved[i], errs[i])
			}
		}
	})
}

func testMoveEachBounds(t *testing.T) {
	e := newEnv(t)
	const calls, batch, trim, old = 16, 5, rdb.TrimDead / 16, 40
	var qs []rdb.QueueKeys
	for i := range calls {
		// One tag: the calls share a connection on any pool.
		qs = append(qs, e.st.Queue(rdb.QueueRef{Tag: "f", Name: fmt.Sprintf("s%02d", i)}))
	}
	now := e.now(t)
	for i, q := range qs {
		if i == 0 {
			continue // nothing to do
		}
		e.setCfg(t, q, "dead_age", 60000)
		dead := old // aged out: more than the call's trim
		switch i {
		case 1:
			dead = 1
		case 2:
			dead = 0
		}
		for j := range dead {
			e.seedDead(t, q, fmt.Sprintf("d%02d", j), now-120000)
		}
		due := 1
		if i == 2 {
			due = batch // the call's whole batch
		}
		for j := range due {
			e.enqueueTo(t, q, &rdb.EnqueueArgs{DueMillis: 1000}, fmt.Sprintf("t%02d", j))
		}
	}
	deadLeft := func() (n int) {
		for _, q := range qs {
			k, err := redis.Int(e.c.Do("ZCARD", q.Dead))
			if err != nil {
				t.Fatal(err)
			}
			n += k
		}
		return n
	}
	before := deadLeft()

	ns, more, errs := e.st.MoveEach(e.ctx, qs, batch, trim)
	for i := range qs {
		if errs[i] != nil {
			t.Fatalf("%s: %v", qs[i].Ref.Name, errs[i])
		}
	}
	if got := before - deadLeft(); got > rdb.TrimDead {
		t.Errorf("one round trip deleted %d dead entries, want at most %d (one call's bound)", got, rdb.TrimDead)
	}
	for i, q := range qs {
		wantN, wantMore := 1, true
		switch i {
		case 0:
			wantN, wantMore = 0, false
		case 1:
			wantMore = false // its one dead entry deleted, its one due task moved
		case 2:
			wantN = batch
		}
		if ns[i] != wantN || more[i] != wantMore {
			t.Errorf("%s: moved %d, more %v; want %d, %v", q.Ref.Name, ns[i], more[i], wantN, wantMore)
		}
	}
	if k, _ := redis.Int(e.c.Do("ZCARD", qs[1].Dead)); k != 0 {
		t.Errorf("%s keeps %d aged-out dead entries, want none", qs[1].Ref.Name, k)
	}

	// Alone, a call deletes up to TrimDead of each kind and says nothing
	// more.
	for _, q := range qs[3:] {
		if _, err := e.st.Move(e.ctx, q, batch); err != nil {
			t.Fatal(err)
		}
	}
	if n := deadLeft(); n != 0 {
		t.Errorf("%d aged-out dead entries left after a Move of each queue, want none", n)
	}
}
