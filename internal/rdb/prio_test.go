package rdb_test

import (
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
)

// Priority levels within a queue: each level > 0 has its own list,
// recorded in the queue's config ('prio'); a take told the levels takes the
// highest level first, FIFO within a level; everything that puts a task back
// puts it at the front of its own level.

func (e *env) enqueueAt(t *testing.T, level int, ids ...string) {
	t.Helper()
	if level > 0 {
		if _, err := e.st.MarkLevel(e.ctx, e.q, level); err != nil {
			t.Fatal(err)
		}
	}
	e.enqueueTo(t, e.q, &rdb.EnqueueArgs{Priority: level}, ids...)
}

func TestTakeByLevel(t *testing.T) {
	t.Parallel()
	for _, tagged := range []bool{true, false} {
		t.Run("tagged="+strconv.FormatBool(tagged), func(t *testing.T) {
			e := newEnv(t)
			st := e.st // routes by tag: the take reads before it writes ('m')
			if !tagged {
				st = rdb.NewStore(e.pool, e.ns)
			}
			e.enqueueAt(t, 0, "a1", "a2")
			e.enqueueAt(t, 2, "c1")
			e.enqueueAt(t, 1, "b1", "b2")
			if n, err := e.st.MarkLevel(e.ctx, e.q, 1); err != nil || n != 2 {
				t.Fatalf("MarkLevel(1) = %d, %v; want 2 (never lowered)", n, err)
			}
			if n, err := e.st.Len(e.ctx, e.q); err != nil || n != 5 {
				t.Fatalf("Len = %d, %v; want 5", n, err)
			}
			sp, err := e.st.Waiting(e.ctx, e.q, 1, 3)
			if err != nil || sp.Total != 5 || !reflect.DeepEqual(sp.IDs, []string{"b1", "b2", "a1"}) {
				t.Fatalf("Waiting(1, 3) = %+v, %v", sp, err)
			}
			// A take that does not know the levels takes level 0 only.
			got, _ := e.takeArgs(t, st, rdb.TakeArgs{Worker: "A", Max: 1})
			if !reflect.DeepEqual(takenIDs(got), []string{"a1"}) {
				t.Fatalf("plain take = %v, want [a1]", takenIDs(got))
			}
			got, _ = e.takeArgs(t, st, rdb.TakeArgs{Worker: "A", Max: 2, Levels: 2})
			if !reflect.DeepEqual(takenIDs(got), []string{"c1", "b1"}) {
				t.Fatalf("take 2 = %v, want [c1 b1]", takenIDs(got))
			}
			got, _ = e.takeArgs(t, st, rdb.TakeArgs{Worker: "A", Max: 10, Levels: 2})
			if !reflect.DeepEqual(takenIDs(got), []string{"b2", "a2"}) {
				t.Fatalf("take 10 = %v, want [b2 a2]", takenIDs(got))
			}
			e.checkState(t, nil, func(e *env) state {
				return state{
					e.q.Task("a1"):       active("a1", "A", "1"),
					e.q.Task("a2"):       active("a2", "A", "5"),
					e.q.Task("b1"):       active("b1", "A", "3").with("pri", "1"),
					e.q.Task("b2"):       active("b2", "A", "4").with("pri", "1"),
					e.q.Task("c1"):       active("c1", "A", "2").with("pri", "2"),
					e.q.WorkerQueue("A"): hash{"1": "a1", "2": "c1", "3": "b1", "4": "b2", "5": "a2"},
					e.q.Holders:          set{"A"},
					e.q.Seq:              str("5"),
					e.q.Config:           hash{"prio": "2"},
				}
			})
		})
	}
}

// The rule: a task put back (give back, release, a stopped or dead worker's
// requeue) goes to the front of its own level: before every task of its
// level, after the waiting tasks of higher levels.
func TestPutBackToFrontOfLevel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueueAt(t, 1, "b1", "b2", "b3")
	e.enqueueAt(t, 2, "c1")
	e.enqueueAt(t, 0, "a1", "a2")
	got, _ := e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "A", Max: 3, Levels: 2}) // c1, b1, b2
	if !reflect.DeepEqual(takenIDs(got), []string{"c1", "b1", "b2"}) {
		t.Fatalf("take = %v", takenIDs(got))
	}
	e.enqueueAt(t, 1, "b4")
	e.giveBack(t, "A", "3", "b2")
	e.requeue(t, true, "A") // c1 and b1 (a dead worker)
	e.checkState(t, nil, func(e *env) state {
		return state{
			e.q.Task("a1"): fresh("a1"),
			e.q.Task("a2"): fresh("a2"),
			e.q.Task("b1"): queued("b1").with("pri", "1", "c", "1", "cw", "A"),
			e.q.Task("b2"): queued("b2").with("pri", "1"),
			e.q.Task("b3"): fresh("b3").with("pri", "1"),
			e.q.Task("b4"): fresh("b4").with("pri", "1"),
			e.q.Task("c1"): queued("c1").with("pri", "2", "c", "1", "cw", "A"),
			e.q.Level(2):   list{"c1"},
			e.q.Level(1):   list{"b1", "b2", "b3", "b4"},
			e.q.Waiting:    list{"a1", "a2"},
			e.q.Seq:        str("3"),
			e.q.Config:     hash{"prio": "2"},
		}
	})
	// Cancel finds a waiting task in its level's list.
	if r, err := e.st.Cancel(e.ctx, e.q, "b3"); err != nil || r != rdb.CancelRemoved {
		t.Fatalf("Cancel = %v, %v", r, err)
	}
	if got := e.do(t, "LRANGE", e.q.Level(1), 0, -1); !reflect.DeepEqual(got, []any{[]byte("b1"), []byte("b2"), []byte("b4")}) {
		t.Fatalf("level 1 after cancel = %q", got)
	}
}

func TestMoveAndDeadKeepLevel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.st.MarkLevel(e.ctx, e.q, 3); err != nil {
		t.Fatal(err)
	}
	e.enqueueTo(t, e.q, &rdb.EnqueueArgs{Priority: 3, DueMillis: 1}, "d3")
	e.enqueueTo(t, e.q, &rdb.EnqueueArgs{DueMillis: 1}, "d0")
	if n, err := e.st.Move(e.ctx, e.q, 100); err != nil || n != 2 {
		t.Fatalf("Move = %d, %v", n, err)
	}
	got, _ := e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "A", Max: 2, Levels: 3})
	if !reflect.DeepEqual(takenIDs(got), []string{"d3", "d0"}) {
		t.Fatalf("take = %v", takenIDs(got))
	}
	e.endTask(t, 0, rdb.Dead(rdb.KindTask, "A", got[0].PID, "d3", "x"))
	if _, _, err := e.st.DeadIDs(e.ctx, e.q, rdb.DeadRequeue, []string{"d3"}); err != nil {
		t.Fatal(err)
	}
	if got := e.do(t, "LRANGE", e.q.Level(3), 0, -1); !reflect.DeepEqual(got, []any{[]byte("d3")}) {
		t.Fatalf("level 3 after dead requeue = %q", got)
	}
	if n, err := e.st.BulkLevel(e.ctx, e.q, rdb.PlaceWaiting, 3, rdb.BulkDelete); err != nil || n != 1 {
		t.Fatalf("BulkLevel = %d, %v", n, err)
	}
}

// Global limits: the take starts no more than the queue's stored limits
// allow, counting running takings from every worker's holdings.

func TestTakeConcurrencyLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(t, "t1", "t2", "t3", "t4", "t5")
	if err := e.st.SetLimits(e.ctx, e.q, rdb.Limits{Conc: 3}); err != nil {
		t.Fatal(err)
	}
	got, wait := e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "A", Max: 2, Limited: true})
	if len(got) != 2 || wait != 0 {
		t.Fatalf("A takes %v, wait %d; want 2, 0", takenIDs(got), wait)
	}
	got, wait = e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "B", Max: 5, Limited: true})
	if !reflect.DeepEqual(takenIDs(got), []string{"t3"}) || wait != rdb.WaitWake {
		t.Fatalf("B takes %v, wait %d; want [t3], -1", takenIDs(got), wait)
	}
	got, wait = e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "B", Max: 5, Limited: true})
	if len(got) != 0 || wait != rdb.WaitWake {
		t.Fatalf("B takes %v, wait %d at the limit; want nothing, -1", takenIDs(got), wait)
	}
	// An end frees its slot, and announces it (the queue is limited).
	l := e.listen(t)
	_, taken, wait2, err := e.st.EndTakeWait(e.ctx, e.q, 0,
		[]rdb.Ending{rdb.Done(rdb.KindTask, "A", "1", "t1", nil)}, &rdb.TakeArgs{Worker: "A", Limited: true})
	if err != nil || len(taken) != 0 || wait2 != 0 {
		t.Fatalf("EndTakeWait = %v, %d, %v", taken, wait2, err)
	}
	checkPubs(t, l.collect(t, e), []msg{{"wake", "1"}})
	got, _ = e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "B", Max: 5, Limited: true})
	if !reflect.DeepEqual(takenIDs(got), []string{"t4"}) {
		t.Fatalf("B takes %v after an end; want [t4]", takenIDs(got))
	}
	// A dies: its requeue frees its slot (nothing to decrement, nothing to
	// leak); its late end (a zombie's) changes nothing.
	e.requeue(t, true, "A")
	got, _ = e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "B", Max: 5, Limited: true})
	if !reflect.DeepEqual(takenIDs(got), []string{"t2"}) {
		t.Fatalf("B takes %v after A's requeue; want [t2]", takenIDs(got))
	}
	out, err := e.st.End(e.ctx, e.q, 0, []rdb.Ending{rdb.Done(rdb.KindTask, "A", "2", "t2", nil)})
	if err != nil || out[0].Outcome != rdb.OutcomeLost {
		t.Fatalf("zombie end = %+v, %v; want lost", out, err)
	}
	got, wait = e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "C", Max: 5, Limited: true})
	if len(got) != 0 || wait != rdb.WaitWake {
		t.Fatalf("C takes %v, wait %d with B holding 3; want nothing, -1", takenIDs(got), wait)
	}
	// The end that takes again fills the slot it frees, within the limit.
	_, taken, _, err = e.st.EndTakeWait(e.ctx, e.q, 0,
		[]rdb.Ending{rdb.Done(rdb.KindTask, "B", "3", "t3", nil)}, &rdb.TakeArgs{Worker: "B", Max: 1, Until: math.MaxInt64, Limited: true})
	if err != nil || !reflect.DeepEqual(takenIDs(taken), []string{"t5"}) {
		t.Fatalf("end and take again = %v, %v; want [t5]", takenIDs(taken), err)
	}
	// A release (B's take reply was lost: it runs none of them) frees B's
	// slots as well.
	if n, _, err := e.st.Release(e.ctx, e.q, "B", nil); err != nil || n != 3 {
		t.Fatalf("Release = %d, %v; want 3", n, err)
	}
	got, _ = e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "C", Max: 5, Limited: true})
	if len(got) != 3 {
		t.Fatalf("C takes %v after B's release; want 3", takenIDs(got))
	}
	// Without the flag, the take does not look (the plain take).
	e.enqueue(t, "t6")
	got, _ = e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "C", Max: 5})
	if !reflect.DeepEqual(takenIDs(got), []string{"t6"}) {
		t.Fatalf("plain take = %v; want [t6]", takenIDs(got))
	}
}

func TestTakeRateLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(t, "t1", "t2", "t3", "t4", "t5", "t6")
	if err := e.st.SetLimits(e.ctx, e.q, rdb.Limits{Rate: 3, PeriodMs: 1000}); err != nil {
		t.Fatal(err)
	}
	// Two starts inside the window, one that left it (Redis clock).
	now := e.now(t)
	e.do(t, "ZADD", e.q.RateLog(), now-1500, "old", now-900, "x1", now-800, "x2")
	got, wait := e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "A", Max: 5, Limited: true})
	if !reflect.DeepEqual(takenIDs(got), []string{"t1"}) || wait < 1 || wait > 100+50 {
		t.Fatalf("take = %v, wait %d; want [t1] and about 100 ms", takenIDs(got), wait)
	}
	got, wait = e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "B", Max: 5, Limited: true})
	if len(got) != 0 || wait < 1 || wait > 150 {
		t.Fatalf("take at the limit = %v, wait %d; want nothing and about 100 ms", takenIDs(got), wait)
	}
	n, err := redis.Int(e.c.Do("ZCARD", e.q.RateLog()))
	if err != nil || n != 3 {
		t.Fatalf("rate log holds %d, %v; want 3 (the old start trimmed)", n, err)
	}
	if pttl, _ := redis.Int(e.c.Do("PTTL", e.q.RateLog())); pttl <= 0 || pttl > 1000 {
		t.Fatalf("rate log PTTL %d, want (0, 1000]", pttl)
	}
	// The window moves on: the starts in it age out (seeded older).
	e.do(t, "DEL", e.q.RateLog())
	e.do(t, "ZADD", e.q.RateLog(), now-5000, "y")
	got, wait = e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "B", Max: 2, Limited: true})
	if len(got) != 2 || wait != 0 {
		t.Fatalf("take = %v, wait %d; want 2 and no wait", takenIDs(got), wait)
	}
	got, wait = e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "B", Max: 5, Limited: true})
	if len(got) != 1 || wait < 900 || wait > 1000 {
		t.Fatalf("take = %v, wait %d; want 1 and about a period", takenIDs(got), wait)
	}
	l, err := e.st.ReadLimits(e.ctx, e.q)
	if err != nil || l != (rdb.Limits{Rate: 3, PeriodMs: 1000}) {
		t.Fatalf("ReadLimits = %+v, %v", l, err)
	}
	fl, err := e.st.Flags(e.ctx, []rdb.QueueKeys{e.q})
	if err != nil || fl[0] != (rdb.QueueFlags{Limited: true}) {
		t.Fatalf("Flags = %+v, %v", fl, err)
	}
	if err := e.st.SetLimits(e.ctx, e.q, rdb.Limits{}); err != nil {
		t.Fatal(err)
	}
	fl, _ = e.st.Flags(e.ctx, []rdb.QueueKeys{e.q})
	if fl[0].Limited {
		t.Fatalf("Flags after removing the limits = %+v", fl[0])
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
			e.q.Task("t1"): fresh("t1").with("s", "scheduled", "e", "quota"),
			e.q.Scheduled:  zset{{"t1", "@now+2000"}},
			e.q.Holders:    set{"A"},
			e.q.Seq:        str("1"),
		}
	})
}

// scriptCommands counts, through MONITOR, the commands each script call of
// the namespace ran inside Redis (the call itself not included).
func scriptCommands(t *testing.T, a *keyAuditor, f func()) map[string]int {
	t.Helper()
	a.calls() // drain
	f()
	marker := "count-" + a.ns
	if _, err := a.keys.Do("ECHO", marker); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	cur := ""
	for {
		r, err := redis.String(redis.ReceiveWithTimeout(a.mon, 5*time.Second))
		if err != nil {
			t.Fatalf("MONITOR: %v", err)
		}
		args := monitorArgs(r)
		if len(args) == 0 {
			continue
		}
		if strings.Contains(r, "[0 lua]") {
			if cur != "" {
				out[cur]++
			}
			continue
		}
		cur = ""
		cmd := strings.ToUpper(args[0])
		if cmd == "ECHO" && len(args) == 2 && args[1] == marker {
			return out
		}
		if (cmd == "FCALL" || cmd == "EVALSHA" || cmd == "EVAL") && len(args) >= 4 && strings.HasPrefix(args[3], a.ns+":") {
			cur = args[1]
			if parts := strings.SplitN(cur, "_", 3); cmd == "FCALL" && len(parts) == 3 {
				cur = parts[2]
			}
		}
	}
}

// TestPlainHotPathCommands pins the commands a plain queue's take and end
// run (no levels, no limits): what priorities and limits must not change.
// Take of k: TIME, LPOP, INCRBY, HSET (wq), SADD, and per task HMGET, HSET;
// end of a done task: HDEL (ownership), HMGET, DEL.
func TestPlainHotPathCommandsByMonitor(t *testing.T) {
	e := newEnv(t)
	st := rdb.NewStore(e.pool, e.ns) // a plain pool: no cluster-safe reads
	a := newKeyAuditor(t, e.ns)
	e.enqueue(t, "t1", "t2", "t3", "t4")
	var got []rdb.Taken
	n := scriptCommands(t, a, func() {
		var err error
		got, err = st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: "A", Until: math.MaxInt64, Max: 3})
		if err != nil {
			t.Fatal(err)
		}
	})
	if n["take"] != 5+2*3 {
		t.Errorf("take of 3 ran %d commands, want %d", n["take"], 5+2*3)
	}
	n = scriptCommands(t, a, func() {
		es := make([]rdb.Ending, len(got))
		for i, g := range got {
			es[i] = rdb.Done(rdb.KindTask, "A", g.PID, g.ID, nil)
		}
		if _, err := st.End(e.ctx, e.q, 0, es); err != nil {
			t.Fatal(err)
		}
	})
	// One HMGET and one HDEL of the worker's holdings for all three (the
	// ownership check, own_all), then HMGET and DEL of each task.
	if n["end"] != 2+2*3 {
		t.Errorf("end of 3 ran %d commands, want %d", n["end"], 2+2*3)
	}
	n = scriptCommands(t, a, func() {
		if _, err := e.st.Enqueue(e.ctx, e.q, []string{"t5"}, [][]byte{[]byte("p")}, nil); err != nil {
			t.Fatal(err)
		}
	})
	if n["enqueue_hand"] != 4 {
		t.Errorf("enqueue of 1 ran %d commands, want 4 (HRANDFIELD of the parked workers, HSET, RPUSH, PUBLISH)", n["enqueue_hand"])
	}
	n = scriptCommands(t, a, func() {
		if _, err := e.st.Enqueue(e.ctx, e.q, []string{"t6", "t7"}, [][]byte{[]byte("p"), []byte("p")}, nil); err != nil {
			t.Fatal(err)
		}
	})
	if n["enqueue_hand"] != 5 {
		t.Errorf("enqueue of 2 ran %d commands, want 5 (HRANDFIELD of the parked workers, 2 HSET, RPUSH, PUBLISH)", n["enqueue_hand"])
	}
}

// TestRateLogTrimIsBounded: the starts of a rate log leave its window in
// bulk (a burst, then an idle queue), and one ZREMRANGEBYSCORE trimmed
// them all in the take that came next: 17 ms of Redis for 100,000. A take
// trims at most 1,000 (RATE_TRIM in lua/include/take.lua) and counts only
// the starts within the window; the next takes trim the rest.
func TestRateLogTrimIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const trim, old = 1000, 2500
	e.enqueue(t, "t1", "t2", "t3", "t4")
	if err := e.st.SetLimits(e.ctx, e.q, rdb.Limits{Rate: 3, PeriodMs: 60000}); err != nil {
		t.Fatal(err)
	}
	now := e.now(t)
	args := []any{e.q.RateLog()}
	for i := range old {
		args = append(args, now-60000-int64(i), "old"+strconv.Itoa(i))
	}
	args = append(args, now-1000, "x1") // one start within the window
	e.do(t, "ZADD", args...)
	card := func() int {
		t.Helper()
		n, err := redis.Int(e.c.Do("ZCARD", e.q.RateLog()))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Two starts left of 3: the starts out of the window do not count.
	got, wait := e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "A", Max: 5, Limited: true})
	if len(got) != 2 || wait < 58000 || wait > 59000 {
		t.Fatalf("take = %v, wait %d; want 2 tasks and about 59 s (x1 leaves the window)", takenIDs(got), wait)
	}
	if n := card(); n != old-trim+1+2 {
		t.Fatalf("rate log holds %d, want %d: at most %d trimmed per take", n, old-trim+1+2, trim)
	}
	got, wait = e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "A", Max: 5, Limited: true})
	if len(got) != 0 || wait < 58000 || wait > 59000 {
		t.Fatalf("take at the limit = %v, wait %d; want nothing and about 59 s", takenIDs(got), wait)
	}
	e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "A", Max: 5, Limited: true})
	if n := card(); n != 3 {
		t.Fatalf("rate log holds %d after three takes, want the 3 starts of the window", n)
	}
}

// Promote (RunNow) puts a scheduled task at the back of its own level's
// list, as move does when it is due: a task of level 2 behind the level 2
// task already waiting, and one of level 0 in the queue's list.
func TestPromoteToItsLevel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueueAt(t, 2, "w2")
	far := e.now(t) + 3_600_000
	e.enqueueTo(t, e.q, &rdb.EnqueueArgs{Priority: 2, DueMillis: far}, "later2")
	e.enqueueTo(t, e.q, &rdb.EnqueueArgs{DueMillis: far}, "later0")
	for _, id := range []string{"later2", "later0"} {
		if ok, err := e.st.Promote(e.ctx, e.q, id); err != nil || !ok {
			t.Fatalf("Promote(%s) = %v, %v; want true", id, ok, err)
		}
	}
	if got := e.strs(t, "LRANGE", e.q.Level(2), 0, -1); !reflect.DeepEqual(got, []string{"w2", "later2"}) {
		t.Errorf("level 2 list: %v, want [w2 later2]", got)
	}
	if got := e.waitingIDs(t); !reflect.DeepEqual(got, []string{"later0"}) {
		t.Errorf("level 0 list: %v, want [later0]", got)
	}
	if ok, err := e.st.Promote(e.ctx, e.q, "later2"); err != nil || ok {
		t.Errorf("Promote of a task that waits = %v, %v; want false", ok, err)
	}
}
