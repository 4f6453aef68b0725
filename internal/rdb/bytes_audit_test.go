//go:build audit

package rdb_test

// Measurements of the audit of calls whose time grows with the bytes they
// read or return (not the count of items): see slowcalls_audit_test.go.
// go test -tags audit -run TestAuditBytes -v ./internal/rdb

import (
	"fmt"
	"math/rand"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
)

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
