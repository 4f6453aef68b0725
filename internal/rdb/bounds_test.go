package rdb_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
)

// The cost of one call: the limits of bounds.go and the trims, scans and
// steps the scripts keep so that no call holds Redis for more than a few
// milliseconds, and the fixed count of commands of the hot path. Each test
// fails when a call does more work than its bound, whatever it returns.
// Those that count the server's commands or lazy frees are not parallel.

// retainTrim is RETAIN_TRIM (lua/include/finalize.lua): the most expired
// entries of retained sets one script call trims.
const retainTrim = 1000

// TestRetainedTrimIsBounded: the entries of a retained set expire in bulk
// (tasks that ended in a burst, then a quiet queue), and the ending that
// came next trimmed them all in one ZREMRANGEBYSCORE: half a second of
// Redis for a million. An ending trims at most retainTrim of them per
// script call, oldest first, however many tasks the call ends; the calls
// after it trim the rest.
func TestRetainedTrimIsBounded(t *testing.T) {
	e := newEnv(t)
	const expired = 2*retainTrim + 500
	args := []any{e.q.Retained}
	for i := range expired {
		args = append(args, e.start-1000-int64(i), fmt.Sprintf("old%04d", i)) // old2499 expired first
	}
	e.do(t, "ZADD", args...)
	card := func() int {
		t.Helper()
		n, err := redis.Int(e.do(t, "ZCARD", e.q.Retained), nil)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	listed := func(id string) bool {
		t.Helper()
		return e.do(t, "ZSCORE", e.q.Retained, id) != nil
	}

	// One call ending two tasks.
	e.enqueue(t, "a", "b")
	got := e.takeFrom(t, e.q, "A", 2, false)
	e.endIn(t, e.q, 60000, rdb.Done(rdb.KindTask, "A", got[0].PID, "a", nil), rdb.Done(rdb.KindTask, "A", got[1].PID, "b", nil))
	if n := card(); n != expired-retainTrim+2 {
		t.Fatalf("after one call ending 2 tasks: %d entries, want %d (%d expired trimmed)", n, expired-retainTrim+2, retainTrim)
	}
	if listed(fmt.Sprintf("old%04d", expired-1)) || !listed(fmt.Sprintf("old%04d", expired-retainTrim-1)) {
		t.Fatal("the call did not trim the oldest entries first")
	}

	// The next endings trim the rest, retainTrim each.
	left := expired - retainTrim
	for i := 0; left > 0; i++ {
		id := fmt.Sprintf("n%d", i)
		e.enqueue(t, id)
		got := e.takeFrom(t, e.q, "A", 1, false)
		e.endTask(t, 60000, rdb.Done(rdb.KindTask, "A", got[0].PID, id, nil))
		left = max(left-retainTrim, 0)
		if n := card(); n != left+2+i+1 {
			t.Fatalf("after call %d: %d entries, want %d", i+2, n, left+2+i+1)
		}
	}
	for _, id := range []string{"a", "b", "n0", "n1"} {
		if !listed(id) {
			t.Fatalf("%s is not listed", id)
		}
	}
}

// indexTrim is INDEX_TRIM (lua/include/flow.lua): the most entries of runs
// past their retention one script call drops from the run indexes.
const indexTrim = 1000

// TestRunIndexTrimIsBounded: the entries of a run index expire in bulk
// (runs of one value that ended in a burst), and every start and end of a
// run of that value drops them, INDEX_TRIM at most; but per run, so an end
// call of 64 stage takings (a worker's group commit) dropped 64,000 in one
// call (about 40 ms of Redis). As the retained sets' trims
// (TestRetainedTrimIsBounded), a script call drops at most INDEX_TRIM,
// however many runs it ends; the calls after it drop the rest.
func TestRunIndexTrimIsBounded(t *testing.T) {
	f := newFlowEnv(t)
	for _, id := range []string{"r1", "r2", "r3"} {
		f.start(t, f.s1, id)
	}
	const expired = 2*indexTrim + 500
	args := []any{f.ix}
	for i := range expired {
		args = append(args, f.env.start-1000-int64(i), fmt.Sprintf("old%04d", i)) // old2499 expired first
	}
	f.do(t, "ZADD", args...)
	card := func() int {
		t.Helper()
		n, err := redis.Int(f.do(t, "ZCARD", f.ix), nil)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	// One call ending three runs (their last stage done).
	got := f.takeFrom(t, f.s1, "A", 3, true)
	if len(got) != 3 {
		t.Fatalf("took %d runs, want 3", len(got))
	}
	es := make([]rdb.Ending, len(got))
	for i, g := range got {
		es[i] = f.stage(rdb.Done(rdb.KindStage, "A", g.PID, g.ID, nil), "", true, nil)
	}
	f.endIn(t, f.s1, 0, es...)
	if n := card(); n != expired-indexTrim+3 {
		t.Fatalf("after one call ending 3 runs: %d entries, want %d (%d expired dropped, the 3 runs kept)", n, expired-indexTrim+3, indexTrim)
	}
	if f.do(t, "ZSCORE", f.ix, fmt.Sprintf("old%04d", expired-1)) != nil {
		t.Fatal("the call did not drop the oldest entries first")
	}

	// The next calls drop the rest, INDEX_TRIM each.
	f.start(t, f.s1, "r4")
	if n := card(); n != expired-2*indexTrim+4 {
		t.Fatalf("after a start: %d entries, want %d", n, expired-2*indexTrim+4)
	}
	f.start(t, f.s1, "r5")
	if n := card(); n != 5 {
		t.Fatalf("after another start: %d entries, want the 5 runs", n)
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

// requeueRecorder records, for each requeue script call sent through it,
// how many keys it declared and how many takings it put back.
type requeueRecorder struct {
	pool  *redis.Pool
	mu    sync.Mutex
	keys  []int
	moved []int
}

func (p *requeueRecorder) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := p.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return recordingConn{Conn: c, p: p}, nil
}

type recordingConn struct {
	redis.Conn
	p *requeueRecorder
}

func (c recordingConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	r, err := redis.DoContext(c.Conn, ctx, cmd, args...)
	if strings.ToUpper(cmd) == "FCALL" && len(args) > 1 && strings.HasSuffix(fmt.Sprint(args[0]), "_requeue") && err == nil {
		n, _ := strconv.Atoi(fmt.Sprint(args[1]))
		vs, _ := redis.Values(r, nil)
		moved := 0
		if len(vs) > 0 {
			moved, _ = redis.Int(vs[0], nil)
		}
		c.p.mu.Lock()
		c.p.keys = append(c.p.keys, n)
		c.p.moved = append(c.p.moved, moved)
		c.p.mu.Unlock()
	}
	return r, err
}

func (c recordingConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

// No requeue script call may hold Redis for more than a few milliseconds
// (the rule of this package's limits): a call costs about ten commands per
// taking it puts back, as a BulkStep's task does, and two per worker it
// names, emptied or not. A call put back up to 1,000 takings (7 to 15 ms
// measured) and named every dead worker of the queue (1,000 dead workers:
// 3 ms a call before any taking moved, in every one of its calls).
func TestRequeueCallsStayShort(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := srv.TagCheckedPool(t)
	ns := redistest.Namespace()
	st := rdb.NewStore(pool, ns)
	q := st.Queue(rdb.Standalone("short"))
	const held, dead = 1000, 1000
	ids := make([]string, held+dead)
	payloads := make([][]byte, len(ids))
	for i := range ids {
		ids[i] = fmt.Sprintf("t%05d", i)
		payloads[i] = []byte("p")
	}
	for lo := 0; lo < len(ids); lo += rdb.MaxEnqueueChunk {
		hi := min(lo+rdb.MaxEnqueueChunk, len(ids))
		if _, _, err := st.EnqueueBatch(ctx, q, ids[lo:hi], payloads[lo:hi], &rdb.EnqueueArgs{}); err != nil {
			t.Fatal(err)
		}
	}
	// A holds 1,000 takings; 1,000 other workers one each.
	for n := 0; n < held; {
		got, err := st.Take(ctx, q, rdb.TakeArgs{Worker: "A", Until: math.MaxInt64, Max: held - n})
		if err != nil {
			t.Fatal(err)
		}
		n += len(got)
	}
	workers := []string{"A"}
	for i := range dead {
		w := fmt.Sprintf("w%04d", i)
		if _, err := st.Take(ctx, q, rdb.TakeArgs{Worker: w, Until: math.MaxInt64, Max: 1}); err != nil {
			t.Fatal(err)
		}
		workers = append(workers, w)
	}

	rec := &requeueRecorder{pool: pool}
	requeued, _, err := rdb.NewStore(rec, ns).Requeue(ctx, q, workers, true)
	if err != nil {
		t.Fatal(err)
	}
	if requeued != held+dead {
		t.Fatalf("Requeue put back %d, want %d", requeued, held+dead)
	}
	const maxTakings, maxWorkers = 250, 100
	for i := range rec.keys {
		if named := rec.keys[i] - 5; named > maxWorkers || rec.moved[i] > maxTakings {
			t.Errorf("requeue call %d of %d named %d workers and put back %d takings; want at most %d and %d",
				i+1, len(rec.keys), named, rec.moved[i], maxWorkers, maxTakings)
		}
	}
}

// A key batch stops at the take's byte bound (TAKE_BYTES), and the tasks
// behind its head past the bound must not even be read: the take read
// every one of up to KeyBatch-1 (999) payloads into the script and only
// then cut the batch, so a key holding 40 tasks of 300 KiB cost the take
// 12 MiB of reads for the 900 KiB it handed out (1,000 of 1 MiB: about a
// GiB, seconds of Redis). Not parallel: the counts are the server's.
func TestKeyBatchReadsNoFollowerPastTheBound(t *testing.T) {
	e := newEnv(t)
	const n = 40
	for i := 0; i < n; i++ {
		e.keyed(t, "A", "k"+strconv.Itoa(i), strings.Repeat("y", 300<<10), "")
	}
	before := commandCalls(t, e.c, "hmget")
	first := e.takeBatch(t, "W", 10, 100)
	read := commandCalls(t, e.c, "hmget") - before
	if got := takenIDs(first); fmt.Sprint(got) != "[k0 k1 k2]" {
		t.Fatalf("first batch: %v", got)
	}
	// The head's HMGET and those of the two taken behind it: the next
	// one's size is asked (HSTRLEN) before its payload would be read.
	if read > 3 {
		t.Errorf("the take read %d task hashes (HMGET) to hand out 3 tasks of 300 KiB: "+
			"the tasks behind the byte bound were read in vain", read)
	}
	if l := e.list(t, "A"); len(l) != n-3 || l[0] != "k3" {
		t.Fatalf("A's list %v: those cut stay at its front", l)
	}
}

// commandsOn runs f and returns the commands whose first key is key.
func commandsOn(t *testing.T, key string, f func()) [][]string {
	t.Helper()
	return monitored(t, func(args []string) bool { return len(args) > 1 && args[1] == key }, f)
}

// A fail-fast child's end stops the pending children of its run's latest
// fan-out only, reading them from the fan-out's list ('kl'): the records
// of earlier fan-outs, which a run keeps, are not read (the HGETALL of a
// run in its 10th fan-out of 1,000 held Redis for 24 ms), and no command
// reads more fields than the fan-out has children (twice: status, queue).
//
// A list that is not the latest fan-out's (a worker of an earlier version
// fanned out again without writing one: 'kl' names the fan-out number it
// was written for) is not taken for it: the run is read whole.
func TestFailFastReadsOnlyTheLatestFanOut(t *testing.T) {
	for _, mode := range []string{"listed", "old", "stale"} {
		old := mode != "listed"
		f := newFlowEnv(t)
		f.start(t, f.s1, "r1")
		// 2,000 children of earlier fan-outs, recorded in the run.
		args := []any{f.s1.Task("r1")}
		for i := 0; i < 2000; i++ {
			c := "r1.old" + strconv.Itoa(i)
			args = append(args, "k:"+c, "done", "kq:"+c, "c2", "kr:"+c, "res")
		}
		f.do(t, "HSET", args...)
		tk := f.takeFrom(t, f.s1, "A", 1, true)
		f.endIn(t, f.s1, 0, f.stage(rdb.Done(rdb.KindStage, "A", tk[0].PID, "r1", nil), "s2", true, nil, children...))
		if got, _ := redis.String(f.do(t, "HGET", f.s1.Task("r1"), "kl"), nil); got != "g1 k1 k2 k3" {
			t.Fatalf("the fan-out's list: %q, want \"k1 k2 k3\"", got)
		}
		staleKl := "g0 r1.old0 r1.old1"
		switch mode {
		case "old":
			// A run fanned out before the list existed: read whole, as then.
			f.do(t, "HDEL", f.s1.Task("r1"), "kl")
		case "stale":
			// An earlier fan-out's list, left by a fan-out that wrote none.
			f.do(t, "HSET", f.s1.Task("r1"), "kl", staleKl)
		}
		c := f.takeFrom(t, f.c1, "B", 1, false)
		e := rdb.Dead(rdb.KindChild, "B", c[0].PID, c[0].ID, "boom")
		cmds := commandsOn(t, f.s1.Task("r1"), func() { f.endChild(t, f.c1, e) })
		whole := false
		for _, cmd := range cmds {
			switch strings.ToUpper(cmd[0]) {
			case "HGETALL", "HKEYS", "HVALS", "HSCAN":
				whole = true
			case "HMGET":
				if n := len(cmd) - 2; n > len(children) {
					t.Errorf("old=%v: %q reads %d fields of the run, more than its fan-out's %d children", old, cmd[:3], n, len(children))
				}
			}
		}
		if whole != old {
			t.Errorf("old=%v: the run's hash read whole: %v (commands %q)", old, whole, cmds)
		}
		h, _ := redis.StringMap(f.do(t, "HGETALL", f.s1.Task("r1")), nil)
		if h["fs"] != "failed" || h["k:k1"] != "failed" || h["k:k2"] != "cancelled" || h["k:k3"] != "cancelled" {
			t.Errorf("old=%v: run after the fail-fast: fs=%s k1=%s k2=%s k3=%s", old, h["fs"], h["k:k1"], h["k:k2"], h["k:k3"])
		}
		// (The failed run keeps its fan-out's list for RetryRun.)
		wantKl := map[string]string{"listed": "g1 k1 k2 k3", "old": "", "stale": staleKl}[mode]
		if h["k:r1.old7"] != "done" || h["kr:r1.old7"] != "res" || h["kl"] != wantKl {
			t.Errorf("old=%v: earlier fan-outs' records changed, or the list not kept: %q %q %q", old, h["k:r1.old7"], h["kr:r1.old7"], h["kl"])
		}
		if n, _ := redis.Int(f.do(t, "EXISTS", f.c1.Task("k2"), f.c2.Task("k3")), nil); n != 0 {
			t.Errorf("old=%v: %d stopped children's hashes left", old, n)
		}
	}
}

// lazyFreed reads the server's count of values freed by its background
// thread (INFO memory, lazyfreed_objects).
func (e *env) lazyFreed(t *testing.T) int {
	t.Helper()
	info, err := redis.String(e.do(t, "INFO", "memory"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "lazyfreed_objects:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("INFO memory has no lazyfreed_objects")
	return 0
}

// waitLazyFreed waits until the server's background thread has freed at
// least n values more than before, and fails the test after about 2 s.
// The thread counts what it freed once it has; a DEL never moves the
// count.
func (e *env) waitLazyFreed(t *testing.T, before, n int, what string) {
	t.Helper()
	// Nothing signals the background thread's progress but the count.
	redistest.Eventually(t, 2*time.Second, func() string {
		if got := e.lazyFreed(t); got < before+n {
			return fmt.Sprintf("%s: freed by the call itself, not aside (lazyfreed_objects %d, want %d)", what, got, before+n)
		}
		return ""
	})
}

// TestDeleteNamespaceFreesLargeValuesAside: a namespace holds values of
// any size (a dead set of a million ids), and DEL frees a value before it
// returns: about 120 ms of Redis for that dead set. DeleteNamespace
// unlinks: a large value is freed by Redis's background thread, so the
// call's cost is per key, not per element.
func TestDeleteNamespaceFreesLargeValuesAside(t *testing.T) {
	e := newEnv(t)
	args := []any{e.q.Dead}
	for i := range 1000 { // over Redis's lazyfree threshold (64 elements)
		args = append(args, i, "d"+strconv.Itoa(i))
	}
	e.do(t, "ZADD", args...)
	e.enqueue(t, "a")
	before := e.lazyFreed(t)
	// A plain store: the scan names the namespace's pattern on any tag's
	// connection, which the test's routed store refuses.
	n, err := rdb.NewStore(e.pool, e.ns).DeleteNamespace(e.ctx)
	if err != nil || n != 3 { // the dead set, a's hash, the waiting list
		t.Fatalf("DeleteNamespace: %d, %v; want 3 keys", n, err)
	}
	e.waitLazyFreed(t, before, 1, "the dead set of 1,000")
	if left, _ := redis.Int(e.do(t, "EXISTS", e.q.Dead), nil); left != 0 {
		t.Fatal("the dead set is still there")
	}
}

// seedWideDead puts id into the dead set with a hash of n child records,
// as a flow run whose stage went dead after fan-outs keeps them (4 fields
// per child: k:, kq:, kr:, ke:).
func (e *env) seedWideDead(t *testing.T, id string, at int64, n int) {
	t.Helper()
	args := []any{e.q.Task(id), rdb.FieldPayload, "", rdb.FieldState, "dead", rdb.FieldRunStatus, "failed"}
	for i := range n {
		c := "c" + strconv.Itoa(i)
		args = append(args, "k:"+c, "done", "kq:"+c, "kid", "kr:"+c, "result of "+c, "ke:"+c, "")
	}
	e.do(t, "HSET", args...)
	e.do(t, "ZADD", e.q.Dead, at, id)
}

// The hashes a dead set holds can be wide: a flow run whose stage went
// dead keeps the record of every child it fanned out before (10 fan-outs
// of 1,000 children are 40,000 fields), and its payload and result, the
// bytes a dead call weighs, are empty. DEL frees such a hash field by
// field before it returns (40,000 fields held Redis for about 10 ms on a
// loaded machine, 120,000 for 56 ms), and one delete call may take 250 of
// them: a DeleteAllDead of a stage's dead set, or a trim at its caps, held
// Redis for seconds. They are unlinked: Redis frees a value of more than
// 64 elements in its background thread.
func TestDeadWideHashesAreFreedAside(t *testing.T) {
	t.Run("delete", func(t *testing.T) {
		e := newEnv(t)
		e.seedWideDead(t, "r1", 1, 1000)
		e.seedWideDead(t, "r2", 2, 1000)
		before := e.lazyFreed(t)
		p, err := e.st.DeadOldest(e.ctx, e.q, rdb.DeadDelete, rdb.BulkStep, "", "")
		if err != nil || p.Handled != 2 {
			t.Fatalf("DeadOldest delete: %+v, %v; want 2 deleted", p, err)
		}
		e.waitLazyFreed(t, before, 2, "the 2 dead hashes deleted")
	})
	t.Run("trim", func(t *testing.T) {
		e := newEnv(t)
		e.setCfg(t, e.q, "dead_max", 1)
		e.seedWideDead(t, "r1", 1, 1000)
		e.enqueue(t, "a")
		e.take(t, "A", 1)
		before := e.lazyFreed(t)
		e.endTask(t, 0, rdb.Dead(rdb.KindTask, "A", "1", "a", "boom"))
		if n := e.do(t, "EXISTS", e.q.Task("r1")); n != int64(0) {
			t.Fatalf("the dead set's cap of 1 left the oldest entry")
		}
		e.waitLazyFreed(t, before, 1, "the dead hash trimmed at the cap")
	})
}

// The plain hot path of a queue that uses none of the optional features
// (unique keys, deadlines, per-task retention, priorities...) costs a fixed
// number of Redis commands, those run inside the scripts included: a
// feature must not add one to it. Not parallel: the counts are the
// server's.
func TestPlainHotPathCommands(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	defer pool.Close()
	c := pool.Get()
	defer c.Close()
	st := rdb.NewStore(pool, redistest.Namespace())
	q := st.Queue(rdb.Standalone("hot"))
	// Warm up: the library loaded, every connection made.
	if _, err := st.Enqueue(ctx, q, []string{"w"}, [][]byte{[]byte("p")}, nil); err != nil {
		t.Fatal(err)
	}
	got, err := st.Take(ctx, q, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 1})
	if err != nil || len(got) != 1 {
		t.Fatal(got, err)
	}
	if _, err := st.End(ctx, q, 0, []rdb.Ending{rdb.Done(rdb.KindTask, "W", got[0].PID, "w", nil)}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		retention int64
		enqueue   int64
		take      int64
		end       int64
	}{
		// enqueue: FCALL, HRANDFIELD (no worker parked), HSET, RPUSH,
		// PUBLISH; take: FCALL, TIME, LPOP,
		// HMGET, INCRBY, HSET (task), HSET (wq), SADD; end: FCALL, HMGET
		// and HDEL of the holdings (ownership: the pid must still map to
		// the task's id), HMGET, DEL (or, kept: HSET, HDEL, PEXPIRE, ZADD,
		// ZREMRANGEBYSCORE, PEXPIRE, and TIME).
		{"no retention", 0, 5, 8, 5},
		{"queue retention", 60000, 5, 8, 11},
	} {
		before := commandCount(t, c)
		if _, err := st.Enqueue(ctx, q, []string{"a" + tc.name}, [][]byte{[]byte("p")}, nil); err != nil {
			t.Fatal(err)
		}
		enq := commandCount(t, c) - before
		before = commandCount(t, c)
		got, err := st.Take(ctx, q, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 1})
		if err != nil || len(got) != 1 {
			t.Fatal(got, err)
		}
		take := commandCount(t, c) - before
		before = commandCount(t, c)
		if _, err := st.End(ctx, q, tc.retention, []rdb.Ending{rdb.Done(rdb.KindTask, "W", got[0].PID, got[0].ID, nil)}); err != nil {
			t.Fatal(err)
		}
		end := commandCount(t, c) - before
		t.Logf("%s: enqueue %d, take %d, end %d commands", tc.name, enq, take, end)
		if enq != tc.enqueue || take != tc.take || end != tc.end {
			t.Errorf("%s: enqueue %d, take %d, end %d commands; want %d, %d, %d", tc.name, enq, take, end, tc.enqueue, tc.take, tc.end)
		}
	}
	// A hand-off to a parked worker: the enqueue is FCALL, HRANDFIELD,
	// LLEN (nothing waits), TIME, HLEN (the worker's holdings), INCRBY (the
	// pid), HSET (the task, taken), HSET (the holdings), PUBLISH; no take
	// follows.
	if got, err := st.Take(ctx, q, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 2, Park: 2}); err != nil || len(got) != 0 {
		t.Fatal(got, err)
	}
	before := commandCount(t, c)
	if _, err := st.Enqueue(ctx, q, []string{"handed"}, [][]byte{[]byte("p")}, nil); err != nil {
		t.Fatal(err)
	}
	if n := commandCount(t, c) - before; n != 9 {
		t.Errorf("enqueue handed to a parked worker: %d commands, want 9", n)
	}
	if n, _ := redis.Int(c.Do("HLEN", q.WorkerQueue("W"))); n != 1 {
		t.Errorf("the parked worker holds %d takings, want 1", n)
	}
}

// Metadata costs no command: a take of a flow child that has metadata runs
// as many commands as one of a child without (the field rides in the HMGET
// the take makes anyway). Not parallel: the counts are the server's.
func TestChildMetaCommands(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	defer pool.Close()
	c := pool.Get()
	defer c.Close()
	st := rdb.NewStore(pool, redistest.Namespace())
	s1 := st.Queue(rdb.QueueRef{Tag: "F", Name: "s1"})
	c1 := st.Queue(rdb.QueueRef{Tag: "F", Name: "c1"})
	ref := rdb.FlowRef{RetentionMillis: 60000}
	if ok, err := st.FlowStartMeta(ctx, s1, "r1", nil, "m", ref); err != nil || !ok {
		t.Fatal(ok, err)
	}
	got, err := st.Take(ctx, s1, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 1, Stage: true})
	if err != nil || len(got) != 1 {
		t.Fatal(got, err)
	}
	e := rdb.Done(rdb.KindStage, "W", got[0].PID, "r1", nil)
	e.Stage = &rdb.StageEnd{RunRetentionMs: 60000, Children: []rdb.Child{
		{ID: "r1.a", Queue: "c1", Payload: []byte("p"), Meta: `{"traceparent":"00-x"}`},
		{ID: "r1.b", Queue: "c1", Payload: []byte("p")},
	}}
	if _, err := st.End(ctx, s1, 0, []rdb.Ending{e}); err != nil {
		t.Fatal(err)
	}
	var counts []int64
	for _, want := range []string{`{"traceparent":"00-x"}`, ""} {
		before := commandCount(t, c)
		got, err := st.Take(ctx, c1, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 1, Child: true})
		if err != nil || len(got) != 1 || got[0].Meta != want || string(got[0].Payload) != "p" {
			t.Fatalf("child take: %+v, %v; want meta %q", got, err, want)
		}
		counts = append(counts, commandCount(t, c)-before)
	}
	t.Logf("child take: %d commands with metadata, %d without", counts[0], counts[1])
	if counts[0] != counts[1] {
		t.Errorf("child take: %d commands with metadata, %d without; want the same", counts[0], counts[1])
	}
}

// Metadata costs no command on a plain queue either: a take of a task
// enqueued with metadata runs as many commands as one of a task without
// (the field rides in the HMGET that reads the payload). Not parallel:
// the counts are the server's.
func TestTaskMetaCommands(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	defer pool.Close()
	c := pool.Get()
	defer c.Close()
	st := rdb.NewStore(pool, redistest.Namespace())
	q := st.Queue(rdb.Standalone("q"))
	const meta = `{"traceparent":"00-x"}`
	if _, err := st.Enqueue(ctx, q, []string{"t1"}, [][]byte{[]byte("p")}, &rdb.EnqueueArgs{Meta: meta}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Enqueue(ctx, q, []string{"t2"}, [][]byte{[]byte("p")}, nil); err != nil {
		t.Fatal(err)
	}
	var counts []int64
	for _, want := range []string{meta, ""} {
		before := commandCount(t, c)
		got, err := st.Take(ctx, q, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 1})
		if err != nil || len(got) != 1 || got[0].Meta != want || string(got[0].Payload) != "p" {
			t.Fatalf("take: %+v, %v; want meta %q", got, err, want)
		}
		counts = append(counts, commandCount(t, c)-before)
	}
	t.Logf("take: %d commands with metadata, %d without", counts[0], counts[1])
	if counts[0] != counts[1] {
		t.Errorf("take: %d commands with metadata, %d without; want the same", counts[0], counts[1])
	}
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

// TestPlainHotPathCommandsByMonitor pins the commands a plain queue's take
// and end run (no levels, no limits): what priorities and limits must not
// change.
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
