//go:build audit

package rdb_test

// Measurements, not tests (the audit build tag keeps them out of make
// test): each loads large data (AUDIT_SCALE scales it, default 1) and
// prints the worst single Redis command of one call, from SLOWLOG (an
// FCALL counts as its whole script), or what a call read. Times are not
// asserted. Run them on a private redis-server with
// go test -tags audit -run TestAudit -v ./internal/rdb
// (-run TestAuditBytes for the last section). They are the figures of
// docs/BENCHMARKS.md: the calls that grew with the data (flows among
// them), the takes of big payloads and of runs with big states ("Takes
// bounded by bytes"), and the calls whose time grows with the bytes they
// read or return, not the count of items (TestAuditBytes...).

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
)

func scale(n int) int {
	if s := os.Getenv("AUDIT_SCALE"); s != "" {
		f, _ := strconv.ParseFloat(s, 64)
		return int(float64(n) * f)
	}
	return n
}

// fill sends gen(i) for i in [0,n) pipelined in batches.
func (e *env) fill(t *testing.T, n int, gen func(i int) []any) {
	t.Helper()
	const batch = 2000
	for lo := 0; lo < n; lo += batch {
		hi := min(lo+batch, n)
		for i := lo; i < hi; i++ {
			cmd := gen(i)
			if err := e.c.Send(cmd[0].(string), cmd[1:]...); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.c.Flush(); err != nil {
			t.Fatal(err)
		}
		for i := lo; i < hi; i++ {
			if _, err := e.c.Receive(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// measure runs f with the slow log recording everything and reports the
// worst command.
func (e *env) measure(t *testing.T, name, size string, f func()) {
	t.Helper()
	e.do(t, "CONFIG", "SET", "slowlog-log-slower-than", 0)
	e.do(t, "CONFIG", "SET", "slowlog-max-len", 100000)
	e.do(t, "SLOWLOG", "RESET")
	f()
	entries, err := redis.Values(e.c.Do("SLOWLOG", "GET", -1))
	if err != nil {
		t.Fatal(err)
	}
	worst, what, n := int64(0), "", 0
	for _, en := range entries {
		v, _ := redis.Values(en, nil)
		us, _ := redis.Int64(v[2], nil)
		args, _ := redis.Strings(v[3], nil)
		if len(args) > 0 && (args[0] == "SLOWLOG" || args[0] == "CONFIG") {
			continue
		}
		n++
		if us > worst {
			worst = us
			if len(args) > 3 {
				args = args[:3]
			}
			what = strings.Join(args, " ")
		}
	}
	e.do(t, "CONFIG", "SET", "slowlog-log-slower-than", 10000)
	line := fmt.Sprintf("AUDIT | %-45s | %-30s | worst %8.2f ms | cmds %d | %s\n", name, size, float64(worst)/1000, n, what)
	fmt.Print(line)
}

// Retained set of n expired entries; one end of a task with retention.
func TestAuditRetainedTrim(t *testing.T) {
	e := newEnv(t)
	n := scale(1000000)
	past := e.now(t) - 1000
	e.fill(t, n, func(i int) []any { return []any{"ZADD", e.q.Retained, past - int64(i%1000), "old" + strconv.Itoa(i)} })
	e.do(t, "PEXPIRE", e.q.Retained, 3600000)
	e.enqueue(t, "a")
	e.take(t, "A", 1)
	e.measure(t, "end (done, retention) trims retained set", fmt.Sprintf("%d expired entries", n), func() {
		e.endTask(t, 60000, rdb.Done(rdb.KindTask, "A", "1", "a", nil))
	})
}

// Fail-fast: a child of a run with 1000 pending children fails; the child
// queue also holds m other runs' children.
func TestAuditFailFast(t *testing.T) {
	f := newFlowEnv(t)
	other := scale(100000)
	f.fill(t, other, func(i int) []any { return []any{"RPUSH", f.c1.Waiting, "o" + strconv.Itoa(i)} })
	f.start(t, f.s1, "r1")
	f.takeFrom(t, f.s1, "A", 1, true)
	var cs []rdb.Child
	for i := 0; i < 1000; i++ {
		cs = append(cs, rdb.Child{ID: "r1.c" + strconv.Itoa(i), Queue: "c1", Payload: []byte("x")})
	}
	f.endStage(t, rdb.Done(rdb.KindStage, "A", "1", "r1", nil), "s2", true, cs...)
	// take one child (the first pushed is behind the others in c1: take
	// from a fresh list instead: move r1.c0 to the front).
	f.do(t, "LREM", f.c1.Waiting, 1, "r1.c0")
	f.do(t, "LPUSH", f.c1.Waiting, "r1.c0")
	tk := f.takeFrom(t, f.c1, "B", 1, false)
	e := rdb.Dead(rdb.KindChild, "B", tk[0].PID, tk[0].ID, "boom")
	e.Run = "r1"
	f.measure(t, "end (child dead, fail-fast) cancels children", fmt.Sprintf("999 pending, child queue %d", other+999), func() {
		f.endIn(t, f.c1, 0, e)
	})
}

// CancelRun of a run fanned out to 1000 children in a long child queue.
func TestAuditRunCancelChildren(t *testing.T) {
	f := newFlowEnv(t)
	other := scale(100000)
	f.fill(t, other, func(i int) []any { return []any{"RPUSH", f.c1.Waiting, "o" + strconv.Itoa(i)} })
	f.start(t, f.s1, "r1")
	f.takeFrom(t, f.s1, "A", 1, true)
	var cs []rdb.Child
	for i := 0; i < 1000; i++ {
		cs = append(cs, rdb.Child{ID: "r1.c" + strconv.Itoa(i), Queue: "c1", Payload: []byte("x")})
	}
	f.endStage(t, rdb.Done(rdb.KindStage, "A", "1", "r1", nil), "s2", true, cs...)
	f.measure(t, "run_cancel (CancelRun) of a fanned-out run", fmt.Sprintf("1000 pending, child queue %d", other+1000), func() {
		f.runCancel(t, "r1")
	})
}

// Same with the child queue holding only the run's own children.
func TestAuditRunCancelChildrenOwn(t *testing.T) {
	f := newFlowEnv(t)
	f.start(t, f.s1, "r1")
	f.takeFrom(t, f.s1, "A", 1, true)
	var cs []rdb.Child
	for i := 0; i < 1000; i++ {
		cs = append(cs, rdb.Child{ID: "r1.c" + strconv.Itoa(i), Queue: "c1", Payload: []byte("x")})
	}
	f.endStage(t, rdb.Done(rdb.KindStage, "A", "1", "r1", nil), "s2", true, cs...)
	f.measure(t, "run_cancel (CancelRun) of a fanned-out run", "1000 pending, child queue 1000", func() {
		f.runCancel(t, "r1")
	})
}

// CancelRun of a run waiting at the back of a long stage queue.
func TestAuditRunCancelQueued(t *testing.T) {
	f := newFlowEnv(t)
	n := scale(1000000)
	f.fill(t, n, func(i int) []any { return []any{"RPUSH", f.s1.Waiting, "o" + strconv.Itoa(i)} })
	f.start(t, f.s1, "r1")
	f.measure(t, "run_cancel (CancelRun) of a waiting run", fmt.Sprintf("stage queue %d", n+1), func() {
		f.runCancel(t, "r1")
	})
}

// FindRuns of a property value with many runs.
func TestAuditFindRuns(t *testing.T) {
	f := newFlowEnv(t)
	n := scale(100000)
	f.fill(t, n, func(i int) []any { return []any{"ZADD", f.ix, "inf", "run" + strconv.Itoa(i)} })
	f.measure(t, "FindRuns (index read)", fmt.Sprintf("%d runs of one value", n), func() {
		if _, err := f.st.FindRuns(f.ctx, f.s1, "user", "u1"); err != nil {
			t.Fatal(err)
		}
	})
}

// A run fanned out k times (1000 children each): its hash, read by the
// stage take and Run.
func TestAuditBigRunHash(t *testing.T) {
	f := newFlowEnv(t)
	f.start(t, f.s1, "r1")
	k := 10
	var args []any
	args = append(args, f.s1.Task("r1"))
	for i := 0; i < 1000*k; i++ {
		c := "r1.c" + strconv.Itoa(i)
		args = append(args, "k:"+c, "done", "kq:"+c, "c1", "kr:"+c, "result-"+c)
	}
	f.do(t, "HSET", args...)
	f.measure(t, "Run read (HGETALL run)", fmt.Sprintf("%d children over %d fan-outs", 1000*k, k), func() {
		if _, err := f.st.Run(f.ctx, f.s1, "r1"); err != nil {
			t.Fatal(err)
		}
	})
	f.measure(t, "take of a stage (HGETALL run)", fmt.Sprintf("%d children over %d fan-outs", 1000*k, k), func() {
		f.takeFrom(t, f.s1, "A", 1, true)
	})
}

// A keyed task merged into many times.
func TestAuditMerge(t *testing.T) {
	e := newEnv(t)
	n := scale(100000)
	e.keyed(t, "k", "h", "p0", "")
	e.keyed(t, "k", "tail", "p1", "")
	e.setCfg(t, e.q, "merge", "1")
	var ents []rdb.Entry
	for i := 0; i < n; i++ {
		ents = append(ents, rdb.Entry{Score: float64(i), Payload: []byte("payload-" + strconv.Itoa(i))})
	}
	e.do(t, "HSET", e.q.Task("tail"), rdb.FieldPayload, rdb.EncodeEnvelope("k", ents))
	e.measure(t, "enqueue_key merging into a waiting tail", fmt.Sprintf("tail holding %d payloads", n), func() {
		r := e.keyed(t, "k", "new", "another", "")
		fmt.Printf("merge reply %+v\n", r)
	})
}

// DeleteNamespace with a big dead set.
func TestAuditDeleteNamespace(t *testing.T) {
	e := newEnv(t)
	n := scale(1000000)
	e.fill(t, n, func(i int) []any { return []any{"ZADD", e.q.Dead, i, "d" + strconv.Itoa(i)} })
	e.measure(t, "DeleteNamespace", fmt.Sprintf("dead set of %d (ids only)", n), func() {
		// A plain store: its scan names the namespace's pattern on any
		// tag's connection, which the test's routed store refuses.
		if _, err := rdb.NewStore(e.pool, e.ns).DeleteNamespace(e.ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// Dead set: DeadOldest requeue / delete chunks of BulkStep.
func TestAuditDeadAll(t *testing.T) {
	e := newEnv(t)
	n := scale(1000000)
	e.fill(t, n, func(i int) []any { return []any{"ZADD", e.q.Dead, i, "d" + strconv.Itoa(i)} })
	e.fill(t, 2000, func(i int) []any {
		return []any{"HSET", e.q.Task("d" + strconv.Itoa(i)), "d", "x", "s", "dead", "n", 3}
	})
	e.measure(t, "dead requeue oldest (1 chunk)", fmt.Sprintf("dead set %d", n), func() {
		if _, err := e.st.DeadOldest(e.ctx, e.q, rdb.DeadRequeue, rdb.BulkStep, "", ""); err != nil {
			t.Fatal(err)
		}
	})
	e.measure(t, "dead delete oldest (1 chunk)", fmt.Sprintf("dead set %d", n), func() {
		if _, err := e.st.DeadOldest(e.ctx, e.q, rdb.DeadDelete, rdb.BulkStep, "", ""); err != nil {
			t.Fatal(err)
		}
	})
	e.measure(t, "Inspector dead page (offset 500k)", fmt.Sprintf("dead set %d", n), func() {
		if _, err := e.st.Dead(e.ctx, e.q, n/2, 100); err != nil {
			t.Fatal(err)
		}
	})
	// Over the cap: a bury trims.
	e.setCfg(t, e.q, "dead_max", 1000)
	e.do(t, "DEL", e.q.Waiting)
	e.enqueue(t, "z")
	tk := e.takeFrom(t, e.q, "A", 1, false)
	e.measure(t, "end (dead) over dead_max", fmt.Sprintf("dead set %d, cap 1000", n-2000), func() {
		e.endTask(t, 0, rdb.Dead(rdb.KindTask, "A", tk[0].PID, "z", "x"))
	})
}

// Move with a huge scheduled set, and an age trim of the dead set.
func TestAuditMove(t *testing.T) {
	e := newEnv(t)
	n := scale(1000000)
	now := e.now(t)
	e.fill(t, n, func(i int) []any { return []any{"ZADD", e.q.Scheduled, now - 1000, "s" + strconv.Itoa(i)} })
	e.measure(t, "move (one batch)", fmt.Sprintf("%d due", n), func() {
		if _, err := e.st.Move(e.ctx, e.q, 500); err != nil {
			t.Fatal(err)
		}
	})
}

// Bulk: cancel all waiting, one chunk, of a 1M waiting list of packed tasks.
func TestAuditBulk(t *testing.T) {
	e := newEnv(t)
	n := scale(1000000)
	e.fill(t, n, func(i int) []any { return []any{"RPUSH", e.q.Waiting, fmt.Sprintf("w%07d", i)} })
	e.fill(t, n, func(i int) []any {
		id := fmt.Sprintf("w%07d", i)
		k, fl := e.q.Packed(id)
		return []any{"HSET", k, fl, "payload"}
	})
	e.setCfg(t, e.q, "retention", 60000)
	e.measure(t, "bulk cancel waiting (1 chunk)", fmt.Sprintf("waiting %d packed", n), func() {
		if _, err := e.st.BulkLevel(e.ctx, e.q, rdb.PlaceWaiting, 0, rdb.BulkCancel); err != nil {
			t.Fatal(err)
		}
	})
	e.measure(t, "cancel deep task", fmt.Sprintf("waiting %d packed", n), func() {
		if _, err := e.st.Cancel(e.ctx, e.q, fmt.Sprintf("w%07d", n/2)); err != nil {
			t.Fatal(err)
		}
	})
	e.measure(t, "Waiting page (offset n/2)", fmt.Sprintf("waiting %d", n), func() {
		if _, err := e.st.Waiting(e.ctx, e.q, n/2, 100); err != nil {
			t.Fatal(err)
		}
	})
	e.measure(t, "Stats", fmt.Sprintf("waiting %d", n), func() {
		if _, err := e.st.Stats(e.ctx, []rdb.QueueKeys{e.q}); err != nil {
			t.Fatal(err)
		}
	})
}

// Known queues: many of them.
func TestAuditKnownQueues(t *testing.T) {
	e := newEnv(t)
	n := scale(100000)
	e.fill(t, n, func(i int) []any { return []any{"SADD", e.k.KnownQueues(), "queue-" + strconv.Itoa(i)} })
	e.measure(t, "KnownQueues (SSCAN)", fmt.Sprintf("%d queues", n), func() {
		if _, err := e.st.KnownQueues(e.ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// Rate log trim after a burst.
func TestAuditRateLog(t *testing.T) {
	e := newEnv(t)
	n := scale(100000)
	now := e.now(t)
	e.setCfg(t, e.q, "rate", n, "period", 3600000)
	e.fill(t, n, func(i int) []any { return []any{"ZADD", e.q.RateLog(), now - 3600000 - 10, "p" + strconv.Itoa(i)} })
	e.enqueue(t, "a")
	e.measure(t, "take (rate limited) trims rate log", fmt.Sprintf("%d starts aged out", n), func() {
		if _, _, err := e.st.TakeWait(e.ctx, e.q, rdb.TakeArgs{Worker: "A", Until: math.MaxInt64, Max: 1, Limited: true}); err != nil {
			t.Fatal(err)
		}
	})
}

// One call enqueueing n tasks of one key, all merging.
func TestAuditMergeBatch(t *testing.T) {
	e := newEnv(t)
	n := scale(1000)
	e.keyed(t, "k", "h", "p0", "")
	e.setCfg(t, e.q, "merge", "1")
	ids := make([]string, n)
	ps := make([][]byte, n)
	for i := range ids {
		ids[i] = "m" + strconv.Itoa(i)
		ps[i] = []byte("payload-" + strconv.Itoa(i))
	}
	e.measure(t, "enqueue_key of n tasks of one key, merging", fmt.Sprintf("%d tasks in one call", n), func() {
		if _, err := e.st.EnqueueKey(e.ctx, e.q, "k", ids, ps, nil, nil); err != nil {
			t.Fatal(err)
		}
	})
}

// Calls of flows that grew with the data.

// fanOutRun starts run id in s1, takes it (as w) and fans it out to n
// children in c1; it returns the children's ids.
func (f *flowEnv) fanOutRun(t *testing.T, id, w string, n int, failFast bool) []string {
	t.Helper()
	f.start(t, f.s1, id)
	tk := f.takeFrom(t, f.s1, w, 1, true)
	var cs []rdb.Child
	var ids []string
	for i := 0; i < n; i++ {
		c := id + ".c" + strconv.Itoa(i)
		cs = append(cs, rdb.Child{ID: c, Queue: "c1", Payload: []byte("x")})
		ids = append(ids, c)
	}
	f.endIn(t, f.s1, 0, f.stage(rdb.Done(rdb.KindStage, w, tk[0].PID, id, nil), "s2", failFast, nil, cs...))
	return ids
}

// One end call failing one child in each of k runs (fail-fast),
// each run fanned out to 1,000 children.
func TestAuditFailFastOfManyRuns(t *testing.T) {
	for _, k := range []int{1, 10, 100} {
		f := newFlowEnv(t)
		var es []rdb.Ending
		for r := 0; r < k; r++ {
			id := "r" + strconv.Itoa(r)
			f.fanOutRun(t, id, "A", 1000, true)
		}
		// Each run's first child is taken (the c1 list holds them run
		// after run: take them by moving the first child of each run to
		// the front).
		for r := k - 1; r >= 0; r-- {
			c := "r" + strconv.Itoa(r) + ".c0"
			f.do(t, "LREM", f.c1.Waiting, 1, c)
			f.do(t, "LPUSH", f.c1.Waiting, c)
		}
		tk := f.takeFrom(t, f.c1, "B", k, false)
		for _, x := range tk {
			e := rdb.Dead(rdb.KindChild, "B", x.PID, x.ID, "boom")
			e.Run = x.Parent
			es = append(es, e)
		}
		f.measure(t, "end call failing children of k runs (fail-fast)", fmt.Sprintf("k=%d runs x 1,000 children", k), func() {
			f.endIn(t, f.c1, 0, es...)
		})
	}
}

// Fail-fast of a run whose 10th fan-out is pending (9 earlier
// fan-outs of 1,000 children recorded in its hash).
func TestAuditFailFastAfterManyFanOuts(t *testing.T) {
	f := newFlowEnv(t)
	var args []any
	args = append(args, f.s1.Task("r1"))
	f.start(t, f.s1, "r1")
	for i := 0; i < 9000; i++ {
		c := "r1.old" + strconv.Itoa(i)
		args = append(args, "k:"+c, "done", "kq:"+c, "c2", "kr:"+c, "result-"+c)
	}
	f.do(t, "HSET", args...)
	tk := f.takeFrom(t, f.s1, "A", 1, true)
	var cs []rdb.Child
	for i := 0; i < 1000; i++ {
		cs = append(cs, rdb.Child{ID: "r1.c" + strconv.Itoa(i), Queue: "c1", Payload: []byte("x")})
	}
	f.endIn(t, f.s1, 0, f.stage(rdb.Done(rdb.KindStage, "A", tk[0].PID, "r1", nil), "s2", true, nil, cs...))
	c := f.takeFrom(t, f.c1, "B", 1, false)
	e := rdb.Dead(rdb.KindChild, "B", c[0].PID, c[0].ID, "boom")
	e.Run = "r1"
	f.measure(t, "end (child dead, fail-fast), 9 earlier fan-outs", "1,000 pending + 9,000 earlier", func() {
		f.endIn(t, f.c1, 0, e)
	})
}

// bigRun writes k x 1,000 children's fields into run id's hash.
func (f *flowEnv) bigRun(t *testing.T, id string, k int) {
	var args []any
	args = append(args, f.s1.Task(id))
	for i := 0; i < 1000*k; i++ {
		c := id + ".c" + strconv.Itoa(i)
		args = append(args, "k:"+c, "done", "kq:"+c, "c1", "kr:"+c, "result-"+c)
	}
	f.do(t, "HSET", args...)
}

// The take of a stage whose run fanned out 10 x 1,000 children.
func TestAuditStageTakeOfABigRun(t *testing.T) {
	f := newFlowEnv(t)
	f.start(t, f.s1, "r1")
	f.bigRun(t, "r1", 10)
	var got []rdb.Taken
	f.measure(t, "take of a stage + its run read", "run of 10 x 1,000 children", func() {
		got = f.takeFrom(t, f.s1, "A", 1, true)
		got = readRuns(t, f, got)
	})
	if len(got) != 1 || len(got[0].Run) < 30000 {
		t.Fatalf("run of %d fields", len(got[0].Run))
	}
	f.measure(t, "Store.Run of that run", "run of 10 x 1,000 children", func() {
		r, err := f.st.Run(f.ctx, f.s1, "r1")
		if err != nil || len(r.Children) != 10000 {
			t.Fatal(err)
		}
	})
}

// A take of 100 stage runs of 1 x 1,000 children each.
func TestAuditStageTakeOfManyRuns(t *testing.T) {
	f := newFlowEnv(t)
	for r := 0; r < 100; r++ {
		id := "r" + strconv.Itoa(r)
		f.start(t, f.s1, id)
		f.bigRun(t, id, 1)
	}
	var got []rdb.Taken
	f.measure(t, "take of 100 stage runs + their reads", "100 runs of 1,000 children", func() {
		got = f.takeFrom(t, f.s1, "A", 100, true)
		got = readRuns(t, f, got)
	})
	for _, g := range got {
		if len(g.Run) < 3000 {
			t.Fatalf("run of %d fields", len(g.Run))
		}
	}
}

// FindRuns of a value with 100,000 and 1,000,000 runs.
func TestAuditFindRunsUpToAMillion(t *testing.T) {
	for _, n := range []int{100000, 1000000} {
		f := newFlowEnv(t)
		f.fill(t, n, func(i int) []any { return []any{"ZADD", f.ix, "inf", "run" + strconv.Itoa(i)} })
		f.measure(t, "FindRuns (index read)", fmt.Sprintf("%d runs of one value", n), func() {
			ids, err := f.st.FindRuns(f.ctx, f.s1, "user", "u1")
			if err != nil || len(ids) != n {
				t.Fatal(len(ids), err)
			}
		})
		f.do(t, "DEL", f.ix)
	}
}

// Takes of big payloads and of runs with big states: docs/BENCHMARKS.md,
// "Takes bounded by bytes".

// readRuns reads the runs of got handed out as RunUnread with
// Store.ReadRun, as the worker does.
func readRuns(t *testing.T, f *flowEnv, got []rdb.Taken) []rdb.Taken {
	for i, g := range got {
		if g.RunUnread > 0 {
			m, err := f.st.ReadRun(f.ctx, f.s1, g.ID)
			if err != nil {
				t.Fatal(err)
			}
			got[i].Run = m
		}
	}
	return got
}

// Takes of n tasks of 1 MiB until none is left.
func TestAuditTakesOfBigPayloads(t *testing.T) {
	for _, n := range []int{10, 50, 200} {
		e := newEnv(t)
		p := bytes.Repeat([]byte("x"), 1<<20)
		for i := 0; i < n; i++ {
			if _, err := e.st.Enqueue(e.ctx, e.q, []string{fmt.Sprintf("t%d", i)}, [][]byte{p}, nil); err != nil {
				t.Fatal(err)
			}
		}
		e.measure(t, "takes of 1 MiB tasks until none is left", fmt.Sprintf("n=%d, Max=n", n), func() {
			for left := n; left > 0; {
				got, err := e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: n, MaxCrashes: 5})
				if err != nil || len(got) == 0 {
					t.Fatal(err, len(got))
				}
				left -= len(got)
			}
		})
	}
}

// The take of a run holding 64 fields of 1 MiB, and its ReadRun.
func TestAuditTakeOfABigRunState(t *testing.T) {
	f := newFlowEnv(t)
	f.start(t, f.s1, "r1")
	var args []any
	args = append(args, f.s1.Task("r1"))
	for i := 0; i < 64; i++ {
		args = append(args, fmt.Sprintf("big%d", i), bytes.Repeat([]byte("y"), 1<<20))
	}
	f.do(t, "HSET", args...)
	f.measure(t, "take of a run holding 64 x 1 MiB, and ReadRun", "", func() {
		tk := f.takeFrom(t, f.s1, "A", 1, true)
		if tk[0].RunUnread == 0 {
			t.Fatal("the run came inline")
		}
		m, err := f.st.ReadRun(f.ctx, f.s1, "r1")
		if err != nil || len(m) < 64 {
			t.Fatal(err, len(m))
		}
	})
}

// The HSCAN steps (COUNT 1) of a hash of 64 fields of 1 MiB, and the time
// of each.
func TestAuditHScanOfBigFields(t *testing.T) {
	f := newFlowEnv(t)
	var args []any
	args = append(args, "big")
	for i := 0; i < 64; i++ {
		args = append(args, fmt.Sprintf("big%d", i), bytes.Repeat([]byte("y"), 1<<20))
	}
	f.do(t, "HSET", args...)
	f.do(t, "CONFIG", "SET", "slowlog-log-slower-than", 0)
	f.do(t, "SLOWLOG", "RESET")
	cur := "0"
	for {
		r, err := redis.Values(f.c.Do("HSCAN", "big", cur, "COUNT", 1))
		if err != nil {
			t.Fatal(err)
		}
		cur, _ = redis.String(r[0], nil)
		kv, _ := redis.Strings(r[1], nil)
		t.Logf("cursor %s: %d entries", cur, len(kv)/2)
		if cur == "0" {
			break
		}
	}
	es, _ := redis.Values(f.c.Do("SLOWLOG", "GET", 100))
	for _, e := range es {
		v, _ := redis.Values(e, nil)
		us, _ := redis.Int64(v[2], nil)
		t.Logf("%d us", us)
	}
}

// Calls whose time grows with the bytes they read or return (not the
// count of items).

const mib = 1 << 20

// big returns n bytes of c.
func big(n int, c string) string { return strings.Repeat(c, n) }

// Bulk cancel (CancelAll) of loaded (packed) tasks of 1 MiB: the cancel
// makes each task's hash from its packed field, in the script.
func TestAuditBytesBulkCancelPacked(t *testing.T) {
	e := newEnv(t)
	n := scale(250)
	p := big(mib, "p")
	e.fill(t, n, func(i int) []any { return []any{"RPUSH", e.q.Waiting, fmt.Sprintf("w%07d", i)} })
	e.fill(t, n, func(i int) []any {
		k, fl := e.q.Packed(fmt.Sprintf("w%07d", i))
		return []any{"HSET", k, fl, p}
	})
	e.measure(t, "bulk cancel waiting (1 chunk), packed", fmt.Sprintf("%d packed tasks of 1 MiB", n), func() {
		if _, err := e.st.BulkLevel(e.ctx, e.q, rdb.PlaceWaiting, 0, rdb.BulkCancel); err != nil {
			t.Fatal(err)
		}
	})
}

// Bulk delete of plain tasks of 1 MiB (frees).
func TestAuditBytesBulkDelete(t *testing.T) {
	e := newEnv(t)
	n := scale(250)
	p := big(mib, "p")
	e.fill(t, n, func(i int) []any { return []any{"RPUSH", e.q.Waiting, "w" + strconv.Itoa(i)} })
	e.fill(t, n, func(i int) []any { return []any{"HSET", e.q.Task("w" + strconv.Itoa(i)), "d", p, "s", "queued"} })
	e.measure(t, "bulk delete waiting (1 chunk)", fmt.Sprintf("%d tasks of 1 MiB", n), func() {
		if _, err := e.st.BulkLevel(e.ctx, e.q, rdb.PlaceWaiting, 0, rdb.BulkDelete); err != nil {
			t.Fatal(err)
		}
	})
}

// Dead requeue (RequeueAllDead) on a merging ordered queue: each dead
// task of one key merges into the key's waiting tail.
func TestAuditBytesDeadRequeueMerge(t *testing.T) {
	e := newEnv(t)
	n := scale(250)
	e.setCfg(t, e.q, "merge", "1")
	e.fill(t, n, func(i int) []any {
		env := rdb.EncodeEnvelope("k", []rdb.Entry{{Score: float64(i), Payload: []byte(big(mib-8, "x") + fmt.Sprintf("%08d", i))}})
		return []any{"HSET", e.q.Task("d" + strconv.Itoa(i)), "d", env, "s", "dead", "ok", "k"}
	})
	e.fill(t, n, func(i int) []any { return []any{"ZADD", e.q.Dead, i, "d" + strconv.Itoa(i)} })
	e.measure(t, "dead requeue oldest (1 chunk), merging", fmt.Sprintf("%d dead of one key, 1 MiB", n), func() {
		if _, err := e.st.DeadOldest(e.ctx, e.q, rdb.DeadRequeue, rdb.BulkStep, "", ""); err != nil {
			t.Fatal(err)
		}
	})
}

// Dead delete of tasks of 1 MiB.
func TestAuditBytesDeadDelete(t *testing.T) {
	e := newEnv(t)
	n := scale(250)
	p := big(mib, "p")
	e.fill(t, n, func(i int) []any { return []any{"HSET", e.q.Task("d" + strconv.Itoa(i)), "d", p, "r", p, "s", "dead"} })
	e.fill(t, n, func(i int) []any { return []any{"ZADD", e.q.Dead, i, "d" + strconv.Itoa(i)} })
	e.measure(t, "dead delete oldest (1 chunk)", fmt.Sprintf("%d dead of 2 MiB", n), func() {
		if _, err := e.st.DeadOldest(e.ctx, e.q, rdb.DeadDelete, rdb.BulkStep, "", ""); err != nil {
			t.Fatal(err)
		}
	})
}

// A page of the Inspector's tasks: 100 tasks with a payload and a result of
// 1 MiB each (pipelined HMGETs).
func TestAuditBytesTaskPage(t *testing.T) {
	e := newEnv(t)
	n := 100
	p := big(mib, "p")
	var ids []string
	e.fill(t, n, func(i int) []any {
		ids = append(ids, "t"+strconv.Itoa(i))
		return []any{"HSET", e.q.Task("t" + strconv.Itoa(i)), "d", p, "r", p, "s", "done"}
	})
	e.measure(t, "Store.Tasks page", fmt.Sprintf("%d tasks of 1+1 MiB", n), func() {
		if _, err := e.st.Tasks(e.ctx, e.q, ids); err != nil {
			t.Fatal(err)
		}
	})
}

// Store.Runs (Inspector.Runs, FindRuns): runs of big state.
func TestAuditBytesRuns(t *testing.T) {
	f := newFlowEnv(t)
	p := big(mib, "s")
	for _, c := range []struct{ runs, fields int }{{100, 1}, {10, 4}, {2, 30}} {
		var ids []string
		f.fill(t, c.runs, func(i int) []any {
			id := fmt.Sprintf("r%d-%d", c.fields, i)
			ids = append(ids, id)
			args := []any{"HSET", f.s1.Task(id), "fs", "running", "st", "s1", "s", "queued", "d", ""}
			for j := 0; j < c.fields; j++ {
				args = append(args, "f:big"+strconv.Itoa(j), p)
			}
			return args
		})
		f.measure(t, "Store.Runs", fmt.Sprintf("%d runs, %d MiB state each", c.runs, c.fields), func() {
			if rs, err := f.st.Runs(f.ctx, f.s1, ids); err != nil || len(rs) != c.runs {
				t.Fatal(len(rs), err)
			}
		})
	}
	// A run whose children returned results of 1 MiB (kr:).
	k := scale(300)
	args := []any{f.s1.Task("rk"), "fs", "running", "st", "s2", "s", "queued", "d", ""}
	for i := 0; i < k; i++ {
		c := "rk.c" + strconv.Itoa(i)
		args = append(args, "k:"+c, "done", "kq:"+c, "c1", "kr:"+c, p)
	}
	f.do(t, "HSET", args...)
	f.measure(t, "Store.Runs", fmt.Sprintf("1 run, %d children results of 1 MiB", k), func() {
		if rs, err := f.st.Runs(f.ctx, f.s1, []string{"rk"}); err != nil || len(rs) != 1 {
			t.Fatal(err)
		}
	})
}

// run_retry of a failed run read whole (no 'kl', not in a dead set).
func TestAuditBytesRunRetryWhole(t *testing.T) {
	f := newFlowEnv(t)
	p := big(mib, "s")
	k := scale(20)
	args := []any{f.s1.Task("rw"), "fs", "failed", "st", "s1", "s", "dead", "d", "", "kg", "1"}
	for i := 0; i < k; i++ {
		c := "rw.c" + strconv.Itoa(i)
		args = append(args, "k:"+c, "done", "kq:"+c, "c1", "kr:"+c, p)
	}
	f.do(t, "HSET", args...)
	f.measure(t, "run_retry (HGETALL run)", fmt.Sprintf("%d children results of 1 MiB", k), func() {
		if ok, err := f.st.RunRetry(f.ctx, f.s1, "rw"); err != nil || !ok {
			t.Fatal(ok, err)
		}
	})
}

// Every call of a whole requeue of the dead set of a merging queue.
func TestAuditBytesDeadRequeueMergeAll(t *testing.T) {
	e := newEnv(t)
	n := scale(250)
	e.setCfg(t, e.q, "merge", "1")
	e.fill(t, n, func(i int) []any {
		env := rdb.EncodeEnvelope("k", []rdb.Entry{{Score: float64(i), Payload: []byte(big(mib-8, "x") + fmt.Sprintf("%08d", i))}})
		return []any{"HSET", e.q.Task("d" + strconv.Itoa(i)), "d", env, "s", "dead", "ok", "k"}
	})
	e.fill(t, n, func(i int) []any { return []any{"ZADD", e.q.Dead, i, "d" + strconv.Itoa(i)} })
	e.measure(t, "dead requeue oldest (all chunks), merging", fmt.Sprintf("%d dead of one key, 1 MiB", n), func() {
		for calls := 0; calls < 10*n && e.do(t, "ZCARD", e.q.Dead) != int64(0); calls++ {
			if _, err := e.st.DeadOldest(e.ctx, e.q, rdb.DeadRequeue, rdb.BulkStep, "", ""); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// An enqueue of 1 MiB merging into a key's waiting tail of m MiB.
func TestAuditBytesEnqueueMerge(t *testing.T) {
	for m := 1; m <= 3; m++ {
		e := newEnv(t)
		e.setCfg(t, e.q, "merge", "1")
		e.keyed(t, "k", "h", "p0", "")
		var ents []rdb.Entry
		for i := 0; i < m; i++ {
			ents = append(ents, rdb.Entry{Score: float64(i), Payload: []byte(big(mib-8, "x") + fmt.Sprintf("%08d", i))})
		}
		e.keyed(t, "k", "tail", "p1", "")
		e.do(t, "HSET", e.q.Task("tail"), rdb.FieldPayload, rdb.EncodeEnvelope("k", ents))
		p := big(mib, "y")
		e.measure(t, "enqueue_key of 1 MiB merging into the tail", fmt.Sprintf("tail of %d MiB", m), func() {
			if _, err := e.st.EnqueueKey(e.ctx, e.q, "k", []string{"new"}, [][]byte{[]byte(p)}, nil, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// measureDist runs f with the slow log recording everything and prints the
// distribution of the durations of commands whose name contains match.
func (e *env) measureDist(t *testing.T, name, match string, f func()) {
	t.Helper()
	e.do(t, "CONFIG", "SET", "slowlog-log-slower-than", 0)
	e.do(t, "CONFIG", "SET", "slowlog-max-len", 100000)
	e.do(t, "SLOWLOG", "RESET")
	f()
	entries := e.do(t, "SLOWLOG", "GET", -1).([]any)
	var us []int64
	for _, en := range entries {
		v := en.([]any)
		args := v[3].([]any)
		s := ""
		for _, a := range args[:min(2, len(args))] {
			s += string(a.([]byte)) + " "
		}
		if strings.Contains(s, match) {
			us = append(us, v[2].(int64))
		}
	}
	e.do(t, "CONFIG", "SET", "slowlog-log-slower-than", 10000)
	sort.Slice(us, func(i, j int) bool { return us[i] < us[j] })
	if len(us) == 0 {
		fmt.Printf("AUDIT | %s: none\n", name)
		return
	}
	q := func(f float64) float64 { return float64(us[int(f*float64(len(us)-1))]) / 1000 }
	fmt.Printf("AUDIT | %-45s | %d calls | p50 %.2f p90 %.2f p99 %.2f max %.2f ms\n", name, len(us), q(.5), q(.9), q(.99), q(1))
}

func TestAuditBytesDeadRequeueMergeDist(t *testing.T) {
	e := newEnv(t)
	n := scale(250)
	e.setCfg(t, e.q, "merge", "1")
	e.fill(t, n, func(i int) []any {
		b := make([]byte, mib)
		rand.Read(b)
		env := rdb.EncodeEnvelope("k", []rdb.Entry{{Score: float64(i), Payload: b}})
		return []any{"HSET", e.q.Task("d" + strconv.Itoa(i)), "d", env, "s", "dead", "ok", "k"}
	})
	e.fill(t, n, func(i int) []any { return []any{"ZADD", e.q.Dead, i, "d" + strconv.Itoa(i)} })
	e.measureDist(t, "dead requeue calls, merging 1 MiB", "_dead", func() {
		for calls := 0; calls < 10*n && e.do(t, "ZCARD", e.q.Dead) != int64(0); calls++ {
			if _, err := e.st.DeadOldest(e.ctx, e.q, rdb.DeadRequeue, rdb.BulkStep, "", ""); err != nil {
				t.Fatal(err)
			}
		}
	})
}
