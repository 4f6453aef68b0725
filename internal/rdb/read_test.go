package rdb_test

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
)

// Stats counts each queue's tasks by place, for queues of several tags in
// one call, in the order asked.
func TestStats(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	qa := e.k.Queue(rdb.Standalone("a"))
	s1 := e.k.Queue(rdb.QueueRef{Tag: "F", Name: "s1"})
	c1 := e.k.Queue(rdb.QueueRef{Tag: "F", Name: "c1"})

	// a: six tasks; A takes two, B two; A's end one done (retained) and
	// one dead; two still wait; two scheduled; paused.
	e.enqueueTo(t, qa, nil, "a1", "a2", "a3", "a4", "a5", "a6")
	e.takeFrom(t, qa, "A", 2, false)
	e.takeFrom(t, qa, "B", 2, false)
	e.endIn(t, qa, 60000, rdb.Done(rdb.KindTask, "A", "1", "a1", nil), rdb.Dead(rdb.KindTask, "A", "2", "a2", "bad"))
	e.enqueueTo(t, qa, &rdb.EnqueueArgs{DueMillis: far}, "a7", "a8")
	if err := e.st.SetPaused(e.ctx, qa, true); err != nil {
		t.Fatal(err)
	}
	// F/s1: two runs, the first taken by A.
	for _, id := range []string{"r1", "r2"} {
		if ok, err := e.st.FlowStart(e.ctx, s1, id, nil, rdb.FlowRef{RetentionMillis: 60000}); err != nil || !ok {
			t.Fatalf("FlowStart: %v, %v", ok, err)
		}
	}
	e.takeFrom(t, s1, "A", 1, true)
	// F/c1: one task waiting, paused, then resumed and paused again.
	e.enqueueTo(t, c1, nil, "k1")
	for _, on := range []bool{true, false, true} {
		if err := e.st.SetPaused(e.ctx, c1, on); err != nil {
			t.Fatal(err)
		}
	}
	// F/s2: nothing at all.
	s2 := e.k.Queue(rdb.QueueRef{Tag: "F", Name: "s2"})

	qs := []rdb.QueueKeys{s1, qa, c1, s2}
	got, err := e.st.Stats(e.ctx, qs)
	if err != nil {
		t.Fatal(err)
	}
	// The takings started while seeding (TestStatsOldestActive checks
	// their age): at most the Redis time since the test began, 0 for the
	// queues without one.
	ran := e.now(t) - e.start
	for i := range got {
		if a := got[i].OldestActiveMs; a < 0 || a > ran || (got[i].Active == 0 && a != 0) {
			t.Errorf("Stats[%d].OldestActiveMs = %d with %d active; want in [0, %d]", i, a, got[i].Active, ran)
		}
		got[i].OldestActiveMs = 0
	}
	want := []rdb.QueueStat{
		{Waiting: 1, Active: 1, Head: "r2"},
		{Waiting: 2, Scheduled: 2, Active: 2, Dead: 1, Retained: 1, Paused: true, Head: "a5"},
		{Waiting: 1, Paused: true, Head: "k1"},
		{},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Stats =\n%+v\nwant\n%+v", got, want)
	}
	flags, err := e.st.Flags(e.ctx, qs)
	if err != nil {
		t.Fatal(err)
	}
	paused := make([]bool, len(flags))
	for i, f := range flags {
		paused[i] = f.Paused
	}
	if !reflect.DeepEqual(paused, []bool{false, true, true, false}) {
		t.Errorf("Flags' Paused = %v; want [false true true false]", paused)
	}
}

// An entry of a retained set whose time has passed names a task whose hash
// has expired; it stays in the set until an ending trims it (at most
// RETAIN_TRIM per script call, and only when some task ends), or as long
// as the set lives on (a task with a longer retention of its own keeps it).
// Stats (Inspector.Queues, `worqr stats`, the dashboard, the Prometheus
// gauge) counted them with ZCARD, and Retained (Inspector.Tasks of the
// ended states) gave that count as its total and listed their ids: after a
// burst of a million endings, a quiet queue showed a million retained
// tasks, none of them readable, until a thousand more endings. Only the
// entries not yet past their time count (Redis's clock).
func TestRetainedCountsOnlyTasksStillKept(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Three entries whose retention ended a second ago (their hashes gone),
	// as a burst of endings leaves them once their time passes.
	for i := range 3 {
		e.do(t, "ZADD", e.q.Retained, e.start-1000-int64(i), fmt.Sprintf("gone%d", i))
	}
	// One task that ended just now, kept a minute. (Its ending trims what
	// it may: write the expired entries again after it, as an ending of
	// another call would leave them when over RETAIN_TRIM were due.)
	e.enqueue(t, "kept")
	got := e.takeFrom(t, e.q, "A", 1, false)
	e.endIn(t, e.q, 60000, rdb.Done(rdb.KindTask, "A", got[0].PID, "kept", nil))
	for i := range 3 {
		e.do(t, "ZADD", e.q.Retained, e.start-1000-int64(i), fmt.Sprintf("gone%d", i))
	}

	st, err := e.st.Stats(e.ctx, []rdb.QueueKeys{e.q})
	if err != nil {
		t.Fatal(err)
	}
	if st[0].Retained != 1 {
		t.Errorf("Stats Retained = %d, want 1 (the entries past their time name no task)", st[0].Retained)
	}
	sp, err := e.st.Retained(e.ctx, e.q, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if want := (rdb.Span{IDs: []string{"kept"}, Total: 1}); !reflect.DeepEqual(sp, want) {
		t.Errorf("Retained = %+v, want %+v", sp, want)
	}
}

// Store.Tasks (the listings of a queue, the task page) reads the fields of
// a record, not whole hashes: a run waiting in a stage queue keeps the
// records of every child it fanned out (r1 here, 3,000), and the listing
// of a page of such runs read each whole. A hash with none of a record's
// fields (corrupt) is still listed, as before.
func TestTasksReadsNoRunWhole(t *testing.T) {
	f := newFlowEnv(t)
	f.start(t, f.s1, "r1")
	f.runWithChildren(t, "r1", 3000)
	f.do(t, "HSET", f.s1.Task("odd"), "raw", "x")
	var got []*rdb.TaskRecord
	cmds := runCommands(t, f.ns, func() {
		var err error
		got, err = f.st.Tasks(f.ctx, f.s1, []string{"r1", "odd", "gone"})
		if err != nil {
			t.Error(err)
		}
	})
	for _, c := range cmds {
		switch strings.ToUpper(c[0]) {
		case "HGETALL", "HKEYS", "HVALS", "HSCAN":
			t.Errorf("Tasks read a hash whole: %q", c[:2])
		}
	}
	if len(got) != 2 || got[0].ID != "r1" || got[0].RunStatus != "running" || got[0].State != rdb.StateQueued || got[1].ID != "odd" {
		t.Fatalf("Tasks = %+v, want r1 (a running run, queued) and odd", got)
	}
}

// FuzzDecodeTask: a task hash read from Redis, however corrupt, decodes
// without panicking; the payload and the error text come back unchanged.
func FuzzDecodeTask(f *testing.F) {
	f.Add("dc0tj79ksdue97si2fng", "payload", "active", "3", "x", "boom", "1700000000000")
	f.Add("not-an-xid", "", "", "-1", "", "", "abc")
	f.Add("", "\x00\xff", "dead", "99999999999999999999", "1", "", "-5")
	f.Fuzz(func(t *testing.T, id, d, s, n, x, e, ft string) {
		info := rdb.DecodeTask(id, map[string]string{"d": d, "s": s, "n": n, "c": n, "x": x, "e": e, "ft": ft, "dt": ft})
		if string(info.Payload) != d || info.LastError != e || info.ID != id {
			t.Fatalf("DecodeTask changed what it read: %+v", info)
		}
		if s == "" && info.State != rdb.StateQueued || s != "" && info.State != s {
			t.Fatalf("state %q read as %q", s, info.State)
		}
	})
}

// Stats finds each queue's oldest taking still held: the lowest pid of all
// its holders' holdings (pids count takings in take order) whose task
// still names that pid, and gives how long ago it started (its F_STARTED,
// Redis time).
func TestStatsOldestActive(t *testing.T) {
	t.Parallel()
	// oldest reads e.q's OldestActiveMs and fails t unless it is the age
	// of a start at unix ms started, read between before and now.
	check := func(t *testing.T, e *env, started int64, active int64) {
		t.Helper()
		before := e.now(t)
		st, err := e.st.Stats(e.ctx, []rdb.QueueKeys{e.q})
		if err != nil {
			t.Fatal(err)
		}
		after := e.now(t)
		got := st[0].OldestActiveMs
		if started == 0 {
			if got != 0 {
				t.Errorf("OldestActiveMs = %d, want 0", got)
			}
		} else if got < before-started || got > after-started {
			t.Errorf("OldestActiveMs = %d, want in [%d, %d]", got, before-started, after-started)
		}
		if st[0].Active != active {
			t.Errorf("Active = %d, want %d", st[0].Active, active)
		}
	}
	t.Run("none held", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.enqueue(t, "t1")
		check(t, e, 0, 0)
	})
	t.Run("the lowest pid of every holder", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.enqueue(t, "t1", "t2", "t3", "t4")
		e.take(t, "B", 1) // t1, pid 1
		e.take(t, "A", 2) // t2, t3
		e.take(t, "B", 1) // t4
		old := e.now(t) - 60_000
		e.do(t, "HSET", e.q.Task("t1"), rdb.FieldStarted, old)
		e.do(t, "HSET", e.q.Task("t2"), rdb.FieldStarted, old+30_000)
		check(t, e, old, 4)
		// t1 ends: t2 (A's) is the oldest.
		e.finish(t, "B", "1", "t1")
		check(t, e, old+30_000, 3)
	})
	t.Run("a taking whose task no longer names it, or has no start, is skipped", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.enqueue(t, "t1", "t2", "t3")
		e.take(t, "A", 3)
		old := e.now(t) - 60_000
		// t1 ended and was taken again elsewhere between the reads (its
		// hash names another pid); t2 was taken by a version that did not
		// record starts.
		e.do(t, "HSET", e.q.Task("t1"), rdb.FieldStarted, old-1000, rdb.FieldPID, "99")
		e.do(t, "HDEL", e.q.Task("t2"), rdb.FieldStarted)
		e.do(t, "HSET", e.q.Task("t3"), rdb.FieldStarted, old)
		check(t, e, old, 3)
	})
	t.Run("holdings read in several steps", func(t *testing.T) {
		t.Parallel()
		// One worker holds 6,000 takings, more than Stats reads whole
		// (holdReadWhole) and than one HSCAN step reads (about
		// holdScanCount buckets): the oldest must be found in whichever
		// step it comes. The takings below pid p are dropped from the
		// holdings in turn, so that each p is the oldest once, with a start
		// of its own (10 ms a pid, an hour ago).
		e := newEnv(t)
		const n = 6000
		ids := make([]string, n)
		ps := make([][]byte, n)
		for i := range ids {
			ids[i], ps[i] = fmt.Sprintf("t%04d", i+1), []byte("p")
		}
		if _, _, err := e.st.EnqueueBatch(e.ctx, e.q, ids, ps, nil); err != nil {
			t.Fatal(err)
		}
		for range n / 1000 {
			e.take(t, "A", 1000)
		}
		base := e.now(t) - 3_600_000
		dropped := 0
		for p := 1; p <= 1001; p += 100 {
			e.do(t, "HSET", e.q.Task(ids[p-1]), rdb.FieldStarted, base+int64(p)*10)
			for ; dropped < p-1; dropped++ {
				e.do(t, "HDEL", e.q.WorkerQueue("A"), strconv.Itoa(dropped+1))
			}
			check(t, e, base+int64(p)*10, int64(n-dropped))
		}
	})
}
