package rdb_test

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
)

// attemptsOf reads task id of e.q and returns its history, failing the
// test when it is gone.
func (e *env) attemptsOf(t *testing.T, id string) []rdb.Attempt {
	t.Helper()
	r, err := e.st.Task(e.ctx, e.q, id)
	if err != nil || r == nil {
		t.Fatalf("Task(%s) = %+v, %v", id, r, err)
	}
	return r.Attempts
}

// historyFields returns the fields of task id's hash that hold its history
// (h0 .. h9).
func (e *env) historyFields(t *testing.T, id string) []string {
	t.Helper()
	var out []string
	for _, f := range e.strs(t, "HKEYS", e.q.Task(id)) {
		if len(f) == 2 && f[0] == 'h' && f[1] >= '0' && f[1] <= '9' {
			out = append(out, f)
		}
	}
	return out
}

// failOnce takes task id (the only one waiting) as worker w and ends the
// attempt with ask (retry, due at once, or dead) and err; it returns the
// taking.
func (e *env) failOnce(t *testing.T, id, w string, ask rdb.Ask, err string) rdb.Taken {
	t.Helper()
	got := e.takeFrom(t, e.q, w, 1, false)
	if len(got) != 1 || got[0].ID != id {
		t.Fatalf("took %+v, want %s", got, id)
	}
	end := rdb.Retry(rdb.KindTask, w, got[0].PID, id, 0, err)
	if ask == rdb.AskDead {
		end = rdb.Dead(rdb.KindTask, w, got[0].PID, id, err)
	}
	e.endTask(t, 0, end)
	if ask == rdb.AskRetry {
		if n, err := e.st.Move(e.ctx, e.q, 10); err != nil || n != 1 {
			t.Fatalf("Move = %d, %v; want the retry moved", n, err)
		}
	}
	return got[0]
}

// A task's failed attempts are kept in its own hash, the last
// rdb.HistoryMax of them, each written by the end that records the
// failure, in the same script call.
func TestAttemptHistory(t *testing.T) {
	t.Parallel()

	t.Run("each failed attempt is kept with its number, start, end, outcome, worker and error", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.enqueue(t, "t1")
		e.failOnce(t, "t1", "A", rdb.AskRetry, "first: boom")
		started := e.now(t)
		e.takeFrom(t, e.q, "B", 1, false)
		taken := e.now(t)
		e.call(t, func() { e.endTask(t, 0, rdb.Dead(rdb.KindTask, "B", "2", "t1", "second: bad")) })
		got := e.attemptsOf(t, "t1")
		if len(got) != 2 {
			t.Fatalf("history %+v, want 2 attempts", got)
		}
		first, second := got[0], got[1]
		if first.Number != 1 || first.Outcome != "retry" || first.Worker != "A" || first.Error != "first: boom" {
			t.Errorf("first attempt %+v, want 1, retry, A, first: boom", first)
		}
		if second.Number != 2 || second.Outcome != "dead" || second.Worker != "B" || second.Error != "second: bad" {
			t.Errorf("second attempt %+v, want 2, dead, B, second: bad", second)
		}
		if second.StartedAt < started || second.StartedAt > taken {
			t.Errorf("second attempt started at %d, want its take's time, in [%d, %d]", second.StartedAt, started, taken)
		}
		if second.EndedAt < e.t0 || second.EndedAt > e.t1 {
			t.Errorf("second attempt ended at %d, want its end's time, in [%d, %d]", second.EndedAt, e.t0, e.t1)
		}
		if first.StartedAt == 0 || first.StartedAt > first.EndedAt || first.EndedAt > second.StartedAt {
			t.Errorf("first attempt %d..%d, second from %d: want them in order", first.StartedAt, first.EndedAt, second.StartedAt)
		}
	})

	t.Run(fmt.Sprintf("keeps the last %d attempts, oldest first, in as many fields", rdb.HistoryMax), func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.enqueue(t, "t1")
		const n = rdb.HistoryMax + 3
		for i := 1; i <= n; i++ {
			e.failOnce(t, "t1", "A", rdb.AskRetry, fmt.Sprintf("err %d", i))
		}
		got := e.attemptsOf(t, "t1")
		if len(got) != rdb.HistoryMax {
			t.Fatalf("history of %d attempts, want %d", len(got), rdb.HistoryMax)
		}
		for i, a := range got {
			if want := n - rdb.HistoryMax + 1 + i; a.Number != want || a.Error != fmt.Sprintf("err %d", want) {
				t.Errorf("attempt %d: %+v, want attempt %d", i, a, want)
			}
		}
		if fs := e.historyFields(t, "t1"); len(fs) != rdb.HistoryMax {
			t.Errorf("history fields %v, want %d", fs, rdb.HistoryMax)
		}
	})

	t.Run("an end retried after its reply was lost is lost and adds no attempt", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.enqueue(t, "t1")
		got := e.takeFrom(t, e.q, "A", 1, false)
		end := rdb.Retry(rdb.KindTask, "A", got[0].PID, "t1", 60000, "boom")
		e.endTask(t, 0, end)
		before := e.dump(t)
		again, err := e.st.End(e.ctx, e.q, 0, []rdb.Ending{end})
		if err != nil || again[0].Outcome != rdb.OutcomeLost {
			t.Errorf("the end again: %+v, %v; want lost", again, err)
		}
		e.checkState(t, before, nil)
		if a := e.attemptsOf(t, "t1"); len(a) != 1 {
			t.Errorf("history %+v, want the one attempt", a)
		}
	})

	t.Run("a rate-limited end is no failed attempt", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.enqueue(t, "t1")
		got := e.takeFrom(t, e.q, "A", 1, false)
		e.endTask(t, 0, rdb.Later(rdb.KindTask, "A", got[0].PID, "t1", 1000, "quota"))
		if a := e.attemptsOf(t, "t1"); len(a) != 0 {
			t.Errorf("history %+v, want none", a)
		}
	})

	t.Run("a dead task requeued keeps its history and numbers its attempts again", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.enqueue(t, "t1")
		e.failOnce(t, "t1", "A", rdb.AskDead, "bad")
		if _, _, err := e.st.DeadIDs(e.ctx, e.q, rdb.DeadRequeue, []string{"t1"}); err != nil {
			t.Fatal(err)
		}
		e.failOnce(t, "t1", "A", rdb.AskRetry, "again")
		got := e.attemptsOf(t, "t1")
		if len(got) != 2 || got[0].Outcome != "dead" || got[1].Number != 1 || got[1].Error != "again" {
			t.Errorf("history %+v, want the dead attempt, then attempt 1 again", got)
		}
	})

	t.Run("the history lives in the task's hash: retention expires it, and it has no key of its own", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.enqueue(t, "t1")
		e.failOnce(t, "t1", "A", rdb.AskRetry, "boom")
		got := e.takeFrom(t, e.q, "A", 1, false)
		e.endTask(t, 60000, rdb.Done(rdb.KindTask, "A", got[0].PID, "t1", nil))
		r, err := e.st.Task(e.ctx, e.q, "t1")
		if err != nil || r == nil || r.State != rdb.StateDone || len(r.Attempts) != 1 {
			t.Fatalf("Task = %+v, %v; want done, its failed attempt kept", r, err)
		}
		if ms, _ := redis.Int64(e.do(t, "PTTL", e.q.Task("t1")), nil); ms <= 0 || ms > 60000 {
			t.Errorf("the task's hash expires in %d ms, want the retention", ms)
		}
		for _, k := range e.strs(t, "KEYS", e.ns+"*") {
			// (After the namespace, which may hold "t1" itself.)
			if strings.Contains(strings.TrimPrefix(k, e.ns), "t1") && k != e.q.Task("t1") {
				t.Errorf("key %s names the task: want its history in its hash", k)
			}
		}
	})

	t.Run("a batch's retry is a failed attempt of every member", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		for _, id := range []string{"a1", "a2"} {
			e.keyed(t, "A", id, id, "")
		}
		got := e.takeBatch(t, "W", 1, 2)
		if len(got) != 2 {
			t.Fatalf("took %+v, want a batch of 2", got)
		}
		e.endTask(t, 0, batchOf(rdb.Retry(rdb.KindTask, "W", got[0].PID, "a1", 60000, "boom"), got))
		for _, id := range []string{"a1", "a2"} {
			a := e.attemptsOf(t, id)
			if len(a) != 1 || a[0].Number != 1 || a[0].Outcome != "retry" || a[0].Worker != "W" || a[0].Error != "boom" || a[0].StartedAt == 0 {
				t.Errorf("%s: history %+v, want attempt 1, retry by W: boom", id, a)
			}
		}
	})

	t.Run("an error of any bytes is kept as it is", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.enqueue(t, "t1")
		msg := "quote \" backslash \\ slash / newline \n tab \t nul \x00 é 日本"
		e.failOnce(t, "t1", "A", rdb.AskRetry, msg)
		if a := e.attemptsOf(t, "t1"); len(a) != 1 || a[0].Error != msg {
			t.Errorf("history %+v, want the error %q", a, msg)
		}
	})
}

// What a task's hash keeps for the Inspector: when its latest taking was
// handed out, when a task of an id of the caller's was enqueued, its
// priority.
func TestTaskRecordTimes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueueTo(t, e.q, &rdb.EnqueueArgs{Priority: 3}, "p1")
	before := e.now(t)
	if _, err := e.st.Enqueue(e.ctx, e.q, []string{"mine"}, [][]byte{[]byte("p")},
		&rdb.EnqueueArgs{IDLockTTL: 60000, Digest: "x"}); err != nil {
		t.Fatal(err)
	}
	after := e.now(t)
	r, err := e.st.Task(e.ctx, e.q, "mine")
	if err != nil || r == nil {
		t.Fatal(r, err)
	}
	if r.EnqueuedAt < before || r.EnqueuedAt > after {
		t.Errorf("an id of the caller's: enqueued at %d, want the enqueue's time in [%d, %d]", r.EnqueuedAt, before, after)
	}
	if r.StartedAt != 0 {
		t.Errorf("never taken: started at %d, want 0", r.StartedAt)
	}
	if r, _ := e.st.Task(e.ctx, e.q, "p1"); r == nil || r.Priority != 3 || r.EnqueuedAt != 0 {
		t.Errorf("Task(p1) = %+v, want priority 3, no enqueue time kept (its id has it)", r)
	}
	before = e.now(t)
	got, err := e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: "A", Until: math.MaxInt64, Max: 2, Levels: 3})
	if err != nil || len(got) != 2 {
		t.Fatal(got, err)
	}
	after = e.now(t)
	for _, id := range []string{"p1", "mine"} {
		r, _ := e.st.Task(e.ctx, e.q, id)
		if r == nil || r.StartedAt < before || r.StartedAt > after {
			t.Errorf("Task(%s) = %+v, want started at its take's time in [%d, %d]", id, r, before, after)
		}
	}
	// Handed to a parked worker by the enqueue: taken, with its start.
	until := e.now(t) + 60_000
	if got, err := e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: "P", Until: until, Max: 1, Park: 1}); err != nil || len(got) != 0 {
		t.Fatal(got, err)
	}
	before = e.now(t)
	e.enqueue(t, "handed")
	after = e.now(t)
	if r, _ := e.st.Task(e.ctx, e.q, "handed"); r == nil || r.WorkerID != "P" || r.StartedAt < before || r.StartedAt > after {
		t.Errorf("Task(handed) = %+v, want held by P, started at its hand-off in [%d, %d]", r, before, after)
	}
	// A listing (Tasks) reads no history.
	e.endTask(t, 0, rdb.Retry(rdb.KindTask, "A", got[0].PID, got[0].ID, 60000, "boom"))
	rs, err := e.st.Tasks(e.ctx, e.q, []string{got[0].ID})
	if err != nil || len(rs) != 1 || rs[0].Attempts != nil || rs[0].Failures != 1 {
		t.Errorf("Tasks = %+v, %v; want the record without its history", rs, err)
	}
	if r, _ := e.st.Task(e.ctx, e.q, got[0].ID); r == nil || !reflect.DeepEqual(len(r.Attempts), 1) {
		t.Errorf("Task = %+v, want its one failed attempt", r)
	}
}

// The bytes a failed attempt adds to its task: one history field (its
// JSON: the error, the worker and about 75 bytes) once, until the history
// is full; then each attempt replaces the oldest. Logged, and bounded: a
// failure with a 100-byte error adds at most 300 bytes. (The first one
// also turns a small hash into a hash table, as an error of over 64 bytes
// always did: hash-max-listpack-value.)
func TestHistoryBytesPerAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(t, "t1")
	usage := func() int64 {
		t.Helper()
		n, err := redis.Int64(e.do(t, "MEMORY", "USAGE", e.q.Task("t1"), "SAMPLES", "0"), nil)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	e.takeFrom(t, e.q, "A", 1, false) // the start time in place
	e.giveBack(t, "A", "1", "t1")
	first := usage()
	e.failOnce(t, "t1", "worker-0123456789abcdef", rdb.AskRetry, "boom")
	t.Logf("the first failed attempt (error \"boom\"): %d bytes (the hash becomes a hash table)", usage()-first)
	var per []int64
	for i := range 3 {
		before := usage()
		e.failOnce(t, "t1", "worker-0123456789abcdef", rdb.AskRetry, strings.Repeat(string(rune('a'+i)), 100))
		per = append(per, usage()-before)
	}
	t.Logf("bytes per failed attempt (100-byte error, 23-byte worker id): %v", per)
	// One step may also grow the hash's table (Redis doubles it as fields
	// are added, whenever their count reaches a power of two): the entry's
	// cost is the median step; a step with the table's growth stays under
	// twice the bound.
	sorted := slices.Clone(per)
	slices.Sort(sorted)
	if m := sorted[len(sorted)/2]; m <= 100 || m > 300 {
		t.Errorf("a failed attempt added %d bytes (median of %v), want the entry's (over 100, at most 300)", m, per)
	}
	for _, n := range per {
		if n <= 100 || n > 600 {
			t.Errorf("a failed attempt added %d bytes (of %v), want over 100 and, with a table's growth, at most 600", n, per)
		}
	}
	for range rdb.HistoryMax {
		e.failOnce(t, "t1", "worker-0123456789abcdef", rdb.AskRetry, strings.Repeat("z", 100))
	}
	before := usage()
	e.failOnce(t, "t1", "worker-0123456789abcdef", rdb.AskRetry, strings.Repeat("y", 100))
	if d := usage() - before; d > 8 {
		t.Errorf("a failed attempt with the history full added %d bytes, want none (it replaces the oldest)", d)
	}
}
