//go:build audit

package rdb_test

// The measurements of docs/BENCHMARKS.md, "Calls that grew with the data":
// each test loads large data (AUDIT_SCALE scales it, default 1) and
// prints the worst single Redis command of one call, from SLOWLOG (an
// FCALL counts as its whole script). Run with
// go test -tags audit -run TestAudit -v ./internal/rdb
// on a private redis-server; times are not asserted.

import (
	"fmt"
	"math"
	"os"
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
