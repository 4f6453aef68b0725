package rdb_test

import (
	"math"
	"reflect"
	"sort"
	"strconv"
	"testing"

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
			e.q.Task("b1"): queued("b1").started().with("pri", "1", "c", "1", "cw", "A"),
			e.q.Task("b2"): queued("b2").started().with("pri", "1"),
			e.q.Task("b3"): fresh("b3").with("pri", "1"),
			e.q.Task("b4"): fresh("b4").with("pri", "1"),
			e.q.Task("c1"): queued("c1").started().with("pri", "2", "c", "1", "cw", "A"),
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

// A task's priority field is read again whenever the task goes back to a
// waiting list (give back, a dead worker's requeue, the mover, a dead
// task's requeue), and the list is named from it. A field that is not a
// level 1..MaxLevel (a hand edit, a writer of another version: "x",
// "12", "-1", "1.5") named a list no take reads and no count or listing
// sees: the task was out of every worker's reach, for good, and the queue
// looked empty. Such a field counts as level 0, as a task enqueued without
// a priority.
func TestBadPriorityFieldGoesToLevelZero(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := []string{"back", "crash", "moved", "dead"}
	e.enqueueAt(t, 2, ids...)
	got, _ := e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "A", Max: 4, Levels: 2})
	if !reflect.DeepEqual(takenIDs(got), ids) {
		t.Fatalf("take = %v", takenIDs(got))
	}
	pid := map[string]string{}
	for _, x := range got {
		pid[x.ID] = x.PID
	}
	for id, bad := range map[string]string{"back": "x", "crash": "12", "moved": "-1", "dead": "1.5"} {
		e.do(t, "HSET", e.q.Task(id), "pri", bad)
	}
	e.giveBack(t, "A", pid["back"], "back")
	e.endTask(t, 0, rdb.Retry(rdb.KindTask, "A", pid["moved"], "moved", 0, "again"))
	e.endTask(t, 0, rdb.Dead(rdb.KindTask, "A", pid["dead"], "dead", "x"))
	e.requeue(t, true, "A") // "crash"
	if n, err := e.st.Move(e.ctx, e.q, 100); err != nil || n != 1 {
		t.Fatalf("Move = %d, %v", n, err)
	}
	if _, _, err := e.st.DeadIDs(e.ctx, e.q, rdb.DeadRequeue, []string{"dead"}); err != nil {
		t.Fatal(err)
	}

	if n, err := e.st.Len(e.ctx, e.q); err != nil || n != 4 {
		t.Errorf("Len = %d, %v; want the 4 tasks waiting", n, err)
	}
	again, _ := e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "B", Max: 10, Levels: rdb.MaxLevel})
	back := takenIDs(again)
	sort.Strings(back)
	want := append([]string(nil), ids...)
	sort.Strings(want)
	if !reflect.DeepEqual(back, want) {
		t.Errorf("a take of every level got %v, want %v: the others wait in lists no take reads", back, want)
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

// The rate limit counts starts. A task the take finds past its deadline
// (handed out with attempt 0, to be ended as expired) or cancelled where it
// waited (attempt -1) is never started, yet each was logged as a start: a
// backlog of expired tasks used up the rate, and a live task behind them
// waited a whole period per Rate of them (here a minute, for a rate of 2
// per minute, with two expired tasks ahead). They are not logged now.
func TestTakingsNeverRunAreNotRateStarts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := e.st.SetLimits(e.ctx, e.q, rdb.Limits{Rate: 2, PeriodMs: 60000}); err != nil {
		t.Fatal(err)
	}
	e.enqueueTo(t, e.q, &rdb.EnqueueArgs{DeadlineMs: 1}, "late")
	e.enqueue(t, "gone", "live")
	// Marked where it waits, as a cancel marks a task deep in a long list.
	e.do(t, "HSET", e.q.Task("gone"), "x", "1", "s", "cancelled")
	got, wait := e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "A", Max: 2, Limited: true})
	if len(got) != 2 || got[0].ID != "late" || !got[0].Expired || !got[1].Cancelled {
		t.Fatalf("take = %+v, want the expired task and the cancelled one", got)
	}
	if wait != 0 {
		t.Errorf("take of two tasks not to run: wait %d ms, want none (the rate is not used)", wait)
	}
	e.endTask(t, 0, rdb.Expire("A", got[0].PID, got[0].ID))
	e.endTask(t, 0, rdb.Ending{Kind: rdb.KindTask, Worker: "A", PID: got[1].PID, ID: got[1].ID, Ask: rdb.AskCancel})
	if n, _ := redis.Int(e.c.Do("ZCARD", e.q.RateLog())); n != 0 {
		t.Errorf("rate log holds %d starts, want none: nothing was run", n)
	}
	got, wait = e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "A", Max: 2, Limited: true})
	if !reflect.DeepEqual(takenIDs(got), []string{"live"}) {
		t.Errorf("take = %v (wait %d ms), want [live]: the tasks never run used up the rate", takenIDs(got), wait)
	}
	if wait != 0 {
		t.Errorf("take of [live] with one start left: wait %d ms, want none", wait)
	}

	// A take that finds fewer tasks than the rate has left does not use
	// it up either: no wait (the worker would hold off a task enqueued
	// right after for the rest of the period, or until its next poll).
	e.enqueue(t, "next")
	got, wait = e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "A", Max: 1, Limited: true})
	if !reflect.DeepEqual(takenIDs(got), []string{"next"}) || wait < 59000 {
		t.Errorf("take = %v, wait %d ms; want [next] and the period's wait: the rate is used up", takenIDs(got), wait)
	}
	e.do(t, "DEL", e.q.RateLog())
	got, wait = e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "A", Max: 2, Limited: true})
	if len(got) != 0 || wait != 0 {
		t.Errorf("take of an empty queue with the whole rate left = %v, wait %d ms; want nothing and no wait", takenIDs(got), wait)
	}
}
