package recovery_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/recovery"
	"github.com/worqr/worqr-go/registry"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type env struct {
	ctx  context.Context
	pool *redis.Pool
	ns   string
	k    rdb.Keys
	reg  *registry.Registry
	q    rdb.QueueKeys
}

func newEnv(t *testing.T) *env {
	t.Helper()
	pool := srv.TagCheckedPool(t)
	ns := redistest.Namespace()
	k := rdb.NewKeys(ns)
	return &env{
		ctx: context.Background(), pool: pool, ns: ns, k: k,
		reg: registry.New(pool, k), q: k.Queue(rdb.Standalone("q")),
	}
}

func (e *env) reaper(holder string) *recovery.Reaper {
	return &recovery.Reaper{
		Pool: e.pool, Keys: e.k, Registry: e.reg, Holder: holder,
		Interval: 30 * time.Millisecond, Logger: quiet,
	}
}

func (e *env) conn(t *testing.T) redis.Conn {
	t.Helper()
	c, err := e.pool.GetContext(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (e *env) do(t *testing.T, cmd string, args ...any) any {
	t.Helper()
	c := e.pool.Get()
	defer c.Close()
	v, err := c.Do(cmd, args...)
	if err != nil {
		t.Fatalf("%s %v: %v", cmd, args, err)
	}
	return v
}

func (e *env) strings(t *testing.T, cmd string, args ...any) []string {
	t.Helper()
	v, err := redis.Strings(e.do(t, cmd, args...), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cmd == "SMEMBERS" {
		sort.Strings(v)
	}
	return v
}

func (e *env) waiting(t *testing.T, q rdb.QueueKeys) []string {
	t.Helper()
	return e.strings(t, "LRANGE", q.Waiting, 0, -1)
}

func (e *env) register(t *testing.T, w string, qs ...rdb.QueueRef) {
	t.Helper()
	if len(qs) == 0 {
		qs = []rdb.QueueRef{e.q.Ref}
	}
	if err := e.reg.Register(e.ctx, w, time.Minute, qs); err != nil {
		t.Fatal(err)
	}
}

// kill makes w dead to the cluster, as an expired keepalive would.
func (e *env) kill(t *testing.T, w string) { e.do(t, "DEL", e.k.Keepalive(w)) }

func (e *env) enqueue(t *testing.T, q rdb.QueueKeys, ids ...string) {
	t.Helper()
	ps := make([][]byte, len(ids))
	for i := range ids {
		ps[i] = []byte("p" + ids[i])
	}
	if _, err := rdb.Enqueue(e.ctx, e.conn(t), q, ids, ps, nil); err != nil {
		t.Fatal(err)
	}
}

func (e *env) take(t *testing.T, q rdb.QueueKeys, w string, max int) []rdb.Taken {
	t.Helper()
	got, err := rdb.Take(e.ctx, e.conn(t), q, w, max, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// snapshot reads every key of the namespace with its type and value.
func (e *env) snapshot(t *testing.T) map[string]string {
	t.Helper()
	c := e.conn(t)
	keys, err := redistest.Keys(e.ctx, c, e.ns)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		if k == e.k.ReaperLease() {
			continue
		}
		typ, _ := redis.String(c.Do("TYPE", k))
		var v any
		switch typ {
		case "list":
			v, err = redis.Strings(c.Do("LRANGE", k, 0, -1))
		case "set":
			var m []string
			m, err = redis.Strings(c.Do("SMEMBERS", k))
			sort.Strings(m)
			v = m
		case "hash":
			v, err = redis.StringMap(c.Do("HGETALL", k))
		case "zset":
			v, err = redis.Strings(c.Do("ZRANGE", k, 0, -1, "WITHSCORES"))
		default:
			v, err = redis.String(c.Do("GET", k))
		}
		if err != nil {
			t.Fatal(err)
		}
		out[k] = fmt.Sprintf("%s %v", typ, v)
	}
	return out
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i+1)
	}
	return out
}

func TestPassRequeuesDeadWorkerOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.register(t, "A")
	e.register(t, "B")
	e.enqueue(t, e.q, "t1", "t2", "t3", "t4", "t5")
	e.take(t, e.q, "A", 1) // t1, pid 1
	e.take(t, e.q, "B", 1) // t2, pid 2
	e.take(t, e.q, "A", 1) // t3, pid 3
	e.kill(t, "A")

	var got []recovery.Recovered
	r := e.reaper("r1")
	r.OnRecovered = func(rec recovery.Recovered) { got = append(got, rec) }
	res, err := r.Pass(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []recovery.Recovered{{Queue: "q", Workers: []string{"A"}, Requeued: 2}}
	if !reflect.DeepEqual(res, want) {
		t.Errorf("Pass = %+v, want %+v", res, want)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("OnRecovered got %+v, want %+v", got, want)
	}

	// A's takings are back at the front, oldest first.
	if w := e.waiting(t, e.q); !reflect.DeepEqual(w, []string{"t1", "t3", "t4", "t5"}) {
		t.Errorf("waiting = %v, want [t1 t3 t4 t5]", w)
	}
	// A is forgotten: not a worker, not a holder, no holdings.
	if ws := e.strings(t, "SMEMBERS", e.k.Workers()); !reflect.DeepEqual(ws, []string{"B"}) {
		t.Errorf("Workers = %v, want [B]", ws)
	}
	if hs := e.strings(t, "SMEMBERS", e.q.Holders); !reflect.DeepEqual(hs, []string{"B"}) {
		t.Errorf("holders = %v, want [B]", hs)
	}
	for _, k := range []string{e.q.WorkerQueue("A"), e.q.Proc("1"), e.q.Proc("3")} {
		if e.do(t, "EXISTS", k).(int64) != 0 {
			t.Errorf("%s still exists", k)
		}
	}
	// B, alive, keeps its taking.
	if pids := e.strings(t, "SMEMBERS", e.q.WorkerQueue("B")); !reflect.DeepEqual(pids, []string{"2"}) {
		t.Errorf("B's pids = %v, want [2]", pids)
	}
	if p := e.strings(t, "LRANGE", e.q.Proc("2"), 0, -1); !reflect.DeepEqual(p, []string{"t2"}) {
		t.Errorf("B's processing list = %v, want [t2]", p)
	}
	if s, _ := redis.String(e.do(t, "HGET", e.q.Task("t2"), "s"), nil); s != "active" {
		t.Errorf("B's task state = %q, want active", s)
	}
	// A crash is counted on each requeued task.
	for _, id := range []string{"t1", "t3"} {
		if c, _ := redis.Int(e.do(t, "HGET", e.q.Task(id), "c"), nil); c != 1 {
			t.Errorf("%s crash count = %d, want 1", id, c)
		}
	}

	// A second pass finds nothing and changes nothing.
	before := e.snapshot(t)
	got = nil
	res, err = r.Pass(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 0 || len(got) != 0 {
		t.Errorf("second Pass = %+v (OnRecovered %+v), want nothing", res, got)
	}
	if after := e.snapshot(t); !reflect.DeepEqual(after, before) {
		t.Errorf("second Pass changed Redis:\nbefore %v\nafter  %v", before, after)
	}
}

func TestPassLeavesLiveWorkersAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.register(t, "A")
	e.register(t, "B")
	e.enqueue(t, e.q, "t1", "t2", "t3")
	e.take(t, e.q, "A", 1)
	e.take(t, e.q, "B", 1)
	before := e.snapshot(t)

	res, err := e.reaper("r1").Pass(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 0 {
		t.Errorf("Pass = %+v, want nothing", res)
	}
	if after := e.snapshot(t); !reflect.DeepEqual(after, before) {
		t.Errorf("Pass with only live workers changed Redis:\nbefore %v\nafter  %v", before, after)
	}
}

func TestPassForgetsDeadWorkerWithoutTakings(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.register(t, "A")
	e.register(t, "B")
	e.kill(t, "A")

	res, err := e.reaper("r1").Pass(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 0 {
		t.Errorf("Pass = %+v, want nothing requeued", res)
	}
	if ws := e.strings(t, "SMEMBERS", e.k.Workers()); !reflect.DeepEqual(ws, []string{"B"}) {
		t.Errorf("Workers = %v, want [B]", ws)
	}
}

func TestPassCoversEveryKnownQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	stage := e.k.Queue(rdb.QueueRef{Tag: "flow", Name: "stage"})
	e.register(t, "A", e.q.Ref, stage.Ref)
	e.enqueue(t, e.q, "t1", "t2")
	e.enqueue(t, stage, "s1", "s2")
	e.take(t, e.q, "A", 1)
	e.take(t, stage, "A", 2)
	e.kill(t, "A")

	res, err := e.reaper("r1").Pass(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(res, func(i, j int) bool { return res[i].Queue < res[j].Queue })
	want := []recovery.Recovered{
		{Queue: "q", Workers: []string{"A"}, Requeued: 1},
		{Queue: "stage", Workers: []string{"A"}, Requeued: 2},
	}
	if !reflect.DeepEqual(res, want) {
		t.Errorf("Pass = %+v, want %+v", res, want)
	}
	if w := e.waiting(t, e.q); !reflect.DeepEqual(w, []string{"t1", "t2"}) {
		t.Errorf("q waiting = %v", w)
	}
	if w := e.waiting(t, stage); !reflect.DeepEqual(w, []string{"s1", "s2"}) {
		t.Errorf("stage waiting = %v", w)
	}
}

func TestPassCountsCancelledTakings(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.register(t, "A")
	e.enqueue(t, e.q, "t1", "t2")
	e.take(t, e.q, "A", 2)
	if _, err := rdb.Cancel(e.ctx, e.conn(t), e.q, "t1"); err != nil {
		t.Fatal(err)
	}
	e.kill(t, "A")

	res, err := e.reaper("r1").Pass(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []recovery.Recovered{{Queue: "q", Workers: []string{"A"}, Requeued: 1, Cancelled: 1}}
	if !reflect.DeepEqual(res, want) {
		t.Errorf("Pass = %+v, want %+v", res, want)
	}
	if w := e.waiting(t, e.q); !reflect.DeepEqual(w, []string{"t2"}) {
		t.Errorf("waiting = %v, want [t2]", w)
	}
}

// The orphan race: a worker whose key expired takes a task after a pass
// has already removed it from the registry. The take itself puts it back in
// the queue's holder index, so the next pass still finds the taking.
func TestPassFindsOrphanTaking(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.register(t, "A")
	e.enqueue(t, e.q, "t1", "t2")
	e.take(t, e.q, "A", 1)
	e.kill(t, "A")
	r := e.reaper("r1")

	if _, err := r.Pass(e.ctx); err != nil {
		t.Fatal(err)
	}
	if ws := e.strings(t, "SMEMBERS", e.k.Workers()); len(ws) != 0 {
		t.Fatalf("Workers after the first pass = %v, want none", ws)
	}
	if w := e.waiting(t, e.q); !reflect.DeepEqual(w, []string{"t1", "t2"}) {
		t.Fatalf("waiting after the first pass = %v, want [t1 t2]", w)
	}

	// The zombie takes again, unaware that it is dead.
	got := e.take(t, e.q, "A", 1)
	if len(got) != 1 || got[0].ID != "t1" {
		t.Fatalf("zombie took %+v, want t1", got)
	}

	res, err := r.Pass(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []recovery.Recovered{{Queue: "q", Workers: []string{"A"}, Requeued: 1}}
	if !reflect.DeepEqual(res, want) {
		t.Errorf("next Pass = %+v, want %+v", res, want)
	}
	if w := e.waiting(t, e.q); !reflect.DeepEqual(w, []string{"t1", "t2"}) {
		t.Errorf("waiting = %v, want [t1 t2]", w)
	}
	if hs := e.strings(t, "SMEMBERS", e.q.Holders); len(hs) != 0 {
		t.Errorf("holders = %v, want none", hs)
	}
	if n := e.do(t, "EXISTS", e.q.WorkerQueue("A")).(int64); n != 0 {
		t.Error("the zombie's holdings survived the pass")
	}
}

// runReapers runs the reapers until stop is called, which waits for them.
func runReapers(t *testing.T, rs ...*recovery.Reaper) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.Run(ctx)
		}()
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Error("Reaper.Run did not return after its context was cancelled")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRunTwoReapersRequeueEachTaskOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.register(t, "A")
	tasks := ids("t", 10)
	e.enqueue(t, e.q, tasks...)
	for range tasks {
		e.take(t, e.q, "A", 1)
	}
	e.kill(t, "A")

	var mu sync.Mutex
	var recs []recovery.Recovered
	r1, r2 := e.reaper("r1"), e.reaper("r2")
	for _, r := range []*recovery.Reaper{r1, r2} {
		r.OnRecovered = func(rec recovery.Recovered) {
			mu.Lock()
			recs = append(recs, rec)
			mu.Unlock()
		}
	}
	stop := runReapers(t, r1, r2)
	eventually(t, "the dead worker's tasks are requeued", func() bool {
		return len(e.waiting(t, e.q)) >= len(tasks)
	})
	// Let both reapers run several more intervals: nothing may be added.
	time.Sleep(10 * r1.Interval)
	stop()

	if w := e.waiting(t, e.q); !reflect.DeepEqual(w, tasks) {
		t.Errorf("waiting = %v, want each of %v exactly once, in order", w, tasks)
	}
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, rec := range recs {
		total += rec.Requeued
	}
	if len(recs) != 1 || total != len(tasks) {
		t.Errorf("OnRecovered calls = %+v, want one call requeuing %d", recs, len(tasks))
	}
	if ws := e.strings(t, "SMEMBERS", e.k.Workers()); len(ws) != 0 {
		t.Errorf("Workers = %v, want none", ws)
	}
}

func TestRunPassesOnlyWithTheLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.register(t, "A")
	e.enqueue(t, e.q, "t1")
	e.take(t, e.q, "A", 1)
	e.kill(t, "A")
	e.do(t, "SET", e.k.ReaperLease(), "another-process") // held, no expiry

	r := e.reaper("r1")
	runReapers(t, r)
	time.Sleep(10 * r.Interval)
	if w := e.waiting(t, e.q); len(w) != 0 {
		t.Fatalf("a reaper without the lease requeued %v", w)
	}
	if ws := e.strings(t, "SMEMBERS", e.k.Workers()); !reflect.DeepEqual(ws, []string{"A"}) {
		t.Fatalf("a reaper without the lease forgot workers: Workers = %v", ws)
	}

	e.do(t, "DEL", e.k.ReaperLease())
	eventually(t, "the reaper takes the free lease and requeues", func() bool {
		return reflect.DeepEqual(e.waiting(t, e.q), []string{"t1"})
	})
}

// The documented bound "kill -9 to requeue <= TTL + reaper interval" needs a
// pass at least once per Interval even when a single peer reaps. A zombie
// keeps one taking held (it takes again from inside OnRecovered), so every
// pass recovers exactly one task and OnRecovered counts the passes.
func TestRunLoneReaperPassesEveryInterval(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.register(t, "Z")
	e.enqueue(t, e.q, "t1")
	e.take(t, e.q, "Z", 1)
	e.kill(t, "Z")

	zc := e.conn(t) // used only from OnRecovered, which runs on Run's goroutine
	var mu sync.Mutex
	passes := 0
	r := e.reaper("r1")
	r.Interval = 50 * time.Millisecond
	r.OnRecovered = func(recovery.Recovered) {
		mu.Lock()
		passes++
		mu.Unlock()
		if _, err := rdb.Take(e.ctx, zc, e.q, "Z", 1, 0, false); err != nil {
			t.Error(err)
		}
	}
	const ticks = 20
	stop := runReapers(t, r)
	time.Sleep(ticks*r.Interval + r.Interval/2)
	stop()

	mu.Lock()
	defer mu.Unlock()
	// Allow for a few late ticks; a reaper that passes every other
	// interval gets about half.
	if passes < ticks*3/4 {
		t.Errorf("a lone reaper made %d passes in %d intervals of %v, want about %d (one per interval)",
			passes, ticks, r.Interval, ticks)
	}
}

// enqueueDue enqueues ids into q's scheduled set, due at unix ms due.
func (e *env) enqueueDue(t *testing.T, q rdb.QueueKeys, due int64, ids ...string) {
	t.Helper()
	ps := make([][]byte, len(ids))
	for i := range ids {
		ps[i] = []byte("p" + ids[i])
	}
	if _, err := rdb.Enqueue(e.ctx, e.conn(t), q, ids, ps, &rdb.EnqueueArgs{DueMillis: due}); err != nil {
		t.Fatal(err)
	}
}

// far is a due time in the far future (2100-01-01).
const far = 4102444800000

func TestMoveMovesDueTasksOfEveryKnownQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	stage := e.k.Queue(rdb.QueueRef{Tag: "flow", Name: "stage"})
	unknown := e.k.Queue(rdb.Standalone("unknown"))
	e.register(t, "A", e.q.Ref, stage.Ref)

	// More than two batches in q, due in the reverse of name order.
	n := 2*recovery.MoveBatch + 3
	due := ids("t", n)
	for i, id := range due {
		e.enqueueDue(t, e.q, int64(10000-i), id)
	}
	e.enqueueDue(t, e.q, far, "later")
	e.enqueueDue(t, stage, 1000, "s1", "s2")
	e.enqueueDue(t, unknown, 1000, "u1")
	// An entry older than the queue's dead_age goes with the mover.
	e.do(t, "HSET", e.q.Config, "dead_age", 60000)
	e.do(t, "ZADD", e.q.Dead, 1000, "old")
	e.do(t, "HSET", e.q.Task("old"), "d", "pold", "s", "dead")

	r := e.reaper("r1")
	got, err := r.Move(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got != n+2 {
		t.Errorf("Move = %d, want %d", got, n+2)
	}
	wantQ := make([]string, n)
	for i := range due {
		wantQ[i] = due[n-1-i]
	}
	if w := e.waiting(t, e.q); !reflect.DeepEqual(w, wantQ) {
		t.Errorf("q waiting = %v..., want every due task once, in due order", w[:min(len(w), 5)])
	}
	if w := e.waiting(t, stage); !reflect.DeepEqual(w, []string{"s1", "s2"}) {
		t.Errorf("stage waiting = %v, want [s1 s2]", w)
	}
	if w := e.waiting(t, unknown); len(w) != 0 {
		t.Errorf("a queue no worker serves was moved: %v", w)
	}
	if s := e.strings(t, "ZRANGE", e.q.Scheduled, 0, -1); !reflect.DeepEqual(s, []string{"later"}) {
		t.Errorf("q scheduled = %v, want [later]", s)
	}
	if s, _ := redis.String(e.do(t, "HGET", e.q.Task(due[0]), "s"), nil); s != "queued" {
		t.Errorf("moved task state = %q, want queued", s)
	}
	if e.do(t, "EXISTS", e.q.Dead, e.q.Task("old")).(int64) != 0 {
		t.Error("the dead entry older than dead_age survived the mover")
	}

	// Run twice: nothing more is due, nothing changes.
	before := e.snapshot(t)
	if got, err := r.Move(e.ctx); err != nil || got != 0 {
		t.Errorf("second Move = %d, %v; want 0", got, err)
	}
	if after := e.snapshot(t); !reflect.DeepEqual(after, before) {
		t.Error("a second Move changed Redis")
	}
}

// The lease holder's Run moves due tasks after its pass.
func TestRunMovesDelayedTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.register(t, "A")
	ps := [][]byte{[]byte("pt1")}
	if _, err := rdb.Enqueue(e.ctx, e.conn(t), e.q, []string{"t1"}, ps, &rdb.EnqueueArgs{DelayMillis: 100}); err != nil {
		t.Fatal(err)
	}
	runReapers(t, e.reaper("r1"))
	eventually(t, "the delayed task is moved to its queue", func() bool {
		return reflect.DeepEqual(e.waiting(t, e.q), []string{"t1"})
	})
}
