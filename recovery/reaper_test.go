package recovery_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
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
	st   *rdb.Store // seeds Redis state as workers and clients would
	reg  *registry.Registry
	q    rdb.QueueKeys
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvOn(t, srv)
}

// newEnvOn is newEnv on server s.
func newEnvOn(t *testing.T, s *redistest.Server) *env {
	t.Helper()
	pool := s.TagCheckedPool(t)
	ns := redistest.Namespace()
	reg, err := registry.New(pool, ns)
	if err != nil {
		t.Fatal(err)
	}
	st := rdb.NewStore(pool, ns)
	return &env{
		ctx: context.Background(), pool: pool, ns: ns, k: rdb.NewKeys(ns), st: st,
		reg: reg, q: st.Queue(standalone("q")),
	}
}

func standalone(name string) registry.Queue { return registry.Queue{Tag: name, Name: name} }

// reaper returns a reaper of the test's namespace; edit changes its Config
// before New.
func (e *env) reaper(t *testing.T, holder string, edit ...func(*recovery.Config)) *recovery.Reaper {
	t.Helper()
	cfg := &recovery.Config{Namespace: e.ns, Interval: 30 * time.Millisecond, Holder: holder, Logger: quiet}
	for _, f := range edit {
		f(cfg)
	}
	r, err := recovery.New(e.pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
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

func (e *env) register(t *testing.T, w string, qs ...registry.Queue) {
	t.Helper()
	if len(qs) == 0 {
		qs = []registry.Queue{e.q.Ref}
	}
	if _, err := e.reg.Register(e.ctx, w, time.Minute, "host", 1, qs); err != nil {
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
	if _, err := e.st.Enqueue(e.ctx, q, ids, ps, nil); err != nil {
		t.Fatal(err)
	}
}

func (e *env) take(t *testing.T, q rdb.QueueKeys, w string, max int) []rdb.Taken {
	t.Helper()
	got, err := e.st.Take(e.ctx, q, rdb.TakeArgs{Worker: w, Until: math.MaxInt64, Max: max})
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
	r := e.reaper(t, "r1", func(c *recovery.Config) {
		c.OnRecovered = func(rec recovery.Recovered) { got = append(got, rec) }
	})
	res, err := r.Pass(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []recovery.Recovered{{Queue: e.q.Ref, Workers: []string{"A"}, Requeued: 2}}
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
	for _, k := range []string{e.q.WorkerQueue("A")} {
		if e.do(t, "EXISTS", k).(int64) != 0 {
			t.Errorf("%s still exists", k)
		}
	}
	// B, alive, keeps its taking.
	if held := e.strings(t, "HGETALL", e.q.WorkerQueue("B")); !reflect.DeepEqual(held, []string{"2", "t2"}) {
		t.Errorf("B's holdings = %v, want pid 2 -> t2", held)
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

	res, err := e.reaper(t, "r1").Pass(e.ctx)
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

	res, err := e.reaper(t, "r1").Pass(e.ctx)
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
	stage := e.k.Queue(registry.Queue{Tag: "flow", Name: "stage"})
	e.register(t, "A", e.q.Ref, stage.Ref)
	e.enqueue(t, e.q, "t1", "t2")
	e.enqueue(t, stage, "s1", "s2")
	e.take(t, e.q, "A", 1)
	e.take(t, stage, "A", 2)
	e.kill(t, "A")

	res, err := e.reaper(t, "r1").Pass(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(res, func(i, j int) bool { return res[i].Queue.Name < res[j].Queue.Name })
	want := []recovery.Recovered{
		{Queue: e.q.Ref, Workers: []string{"A"}, Requeued: 1},
		{Queue: stage.Ref, Workers: []string{"A"}, Requeued: 2},
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

func TestPassReportsCancelledTakings(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.register(t, "A")
	e.enqueue(t, e.q, "t1", "t2")
	taken := e.take(t, e.q, "A", 2)
	if _, err := e.st.Cancel(e.ctx, e.q, "t1"); err != nil {
		t.Fatal(err)
	}
	e.kill(t, "A")

	res, err := e.reaper(t, "r1").Pass(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []recovery.Recovered{{Queue: e.q.Ref, Workers: []string{"A"}, Requeued: 1,
		Cancelled: []recovery.Cancelled{{TaskID: "t1", PID: taken[0].PID, Worker: "A"}}}}
	if !reflect.DeepEqual(res, want) {
		t.Errorf("Pass = %+v, want %+v", res, want)
	}
	if w := e.waiting(t, e.q); !reflect.DeepEqual(w, []string{"t2"}) {
		t.Errorf("waiting = %v, want [t2]", w)
	}
}

// The zombie race: a worker whose keepalive expired takes again after a pass
// requeued its takings and forgot it. Redis refuses that take (its deadline,
// computed as a Session does, has passed), so nothing can be held under a
// forgotten id.
func TestZombieTakeAfterPassIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const ttl = 100 * time.Millisecond
	at, err := e.reg.Register(e.ctx, "A", ttl, "host", 1, []registry.Queue{e.q.Ref})
	if err != nil {
		t.Fatal(err)
	}
	until := at.Add(ttl - ttl/10).UnixMilli() // as heartbeat.Session.Until
	e.enqueue(t, e.q, "t1", "t2")
	take := func() ([]rdb.Taken, error) {
		return e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: "A", Until: until, Max: 1})
	}
	if got, err := take(); err != nil || len(got) != 1 {
		t.Fatalf("take before the deadline = %+v, %v; want t1", got, err)
	}
	// The keepalive expires on Redis's clock (it cannot be injected).
	redistest.WaitFor(t, 5*time.Second, "A's keepalive to expire", func() bool {
		return e.do(t, "EXISTS", e.k.Keepalive("A")).(int64) == 0
	})
	r := e.reaper(t, "r1")
	res, err := r.Pass(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []recovery.Recovered{{Queue: e.q.Ref, Workers: []string{"A"}, Requeued: 1}}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("Pass = %+v, want %+v", res, want)
	}
	if ws := e.strings(t, "SMEMBERS", e.k.Workers()); len(ws) != 0 {
		t.Fatalf("Workers after the pass = %v, want none", ws)
	}
	before := e.snapshot(t)

	// The zombie takes again, unaware that it is dead.
	got, err := take()
	if !errors.Is(err, rdb.ErrExpired) || len(got) != 0 {
		t.Fatalf("zombie's take = %+v, %v; want rdb.ErrExpired and nothing", got, err)
	}
	if after := e.snapshot(t); !reflect.DeepEqual(before, after) {
		t.Errorf("a refused take changed Redis:\nbefore %v\nafter  %v", before, after)
	}
	if w := e.waiting(t, e.q); !reflect.DeepEqual(w, []string{"t1", "t2"}) {
		t.Errorf("waiting = %v, want [t1 t2]", w)
	}
}

// Sweep finds holdings a pass cannot reach (a holder that is not
// registered, as a hand edit or an older version leaves), requeues them, and
// leaves live and registered holders alone.
func TestSweepRequeuesUnregisteredHolders(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	other := e.st.Queue(standalone("other"))
	e.register(t, "A", e.q.Ref, other.Ref)
	e.enqueue(t, e.q, "a1", "z1", "z2")
	e.enqueue(t, other, "o1")
	e.take(t, e.q, "A", 1)
	e.take(t, e.q, "Z", 2) // Z never registered
	e.take(t, other, "A", 1)
	if err := e.st.AddKnownQueues(e.ctx, []rdb.QueueRef{e.q.Ref, other.Ref}); err != nil {
		t.Fatal(err)
	}
	r := e.reaper(t, "r1")
	if res, err := r.Pass(e.ctx); err != nil || len(res) != 0 {
		t.Fatalf("Pass = %+v, %v; want nothing (A lives, Z is not registered)", res, err)
	}
	res, err := r.Sweep(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []recovery.Recovered{{Queue: e.q.Ref, Workers: []string{"Z"}, Requeued: 2}}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("Sweep = %+v, want %+v", res, want)
	}
	if w := e.waiting(t, e.q); !reflect.DeepEqual(w, []string{"z1", "z2"}) {
		t.Errorf("waiting = %v, want [z1 z2]", w)
	}
	if hs := e.strings(t, "SMEMBERS", e.q.Holders); !reflect.DeepEqual(hs, []string{"A"}) {
		t.Errorf("holders = %v, want [A]", hs)
	}
	if res, err := r.Sweep(e.ctx); err != nil || len(res) != 0 {
		t.Errorf("second Sweep = %+v, %v; want nothing", res, err)
	}
}

// A pass costs in proportion to the dead workers and their queues, not to the
// queues ever served: with 300 known queues and nobody dead it sends two
// commands; one dead worker of one queue adds its description, one requeue
// and the forget.
func TestPassCostFollowsDeadWorkers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var refs []rdb.QueueRef
	for i := range 300 {
		refs = append(refs, standalone(fmt.Sprintf("q%d", i)))
	}
	if err := e.st.AddKnownQueues(e.ctx, refs); err != nil {
		t.Fatal(err)
	}
	e.register(t, "live", refs...)
	e.register(t, "A")
	e.enqueue(t, e.q, "t1")
	e.take(t, e.q, "A", 1)
	fp := &faultyPool{pool: e.pool}
	r, err := recovery.New(fp, &recovery.Config{Namespace: e.ns, Interval: time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}

	if res, err := r.Pass(e.ctx); err != nil || len(res) != 0 {
		t.Fatalf("Pass = %+v, %v; want nothing", res, err)
	}
	if by, n := fp.takeSent(); n > 2 {
		t.Errorf("a pass with nobody dead sent %d commands (%v), want 2 (SMEMBERS, MGET)", n, by)
	}

	// The first requeue through this pool may load the script (NOSCRIPT,
	// then EVAL): a cost paid once per server, not per pass.
	if _, _, err := rdb.NewStore(fp, e.ns).Requeue(e.ctx, e.q, []string{"nobody"}, true); err != nil {
		t.Fatal(err)
	}
	fp.takeSent()

	e.kill(t, "A")
	res, err := r.Pass(e.ctx)
	if err != nil || len(res) != 1 || res[0].Requeued != 1 {
		t.Fatalf("Pass = %+v, %v; want t1 requeued", res, err)
	}
	// SMEMBERS, MGET, HGET, EVALSHA, SREM + DEL.
	if by, n := fp.takeSent(); n > 6 {
		t.Errorf("a pass with one dead worker of one queue sent %d commands (%v), want at most 6", n, by)
	}
}

// A dead worker whose description is missing (forgotten by hand, or written
// by an older version) is looked for in every known queue.
func TestPassWithoutDescriptionSearchesKnownQueues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	other := e.st.Queue(standalone("other"))
	e.register(t, "A", e.q.Ref)
	e.enqueue(t, other, "o1")
	e.take(t, other, "A", 1) // not among A's registered queues
	e.do(t, "DEL", e.k.WorkerInfo("A"))
	if err := e.st.AddKnownQueues(e.ctx, []rdb.QueueRef{e.q.Ref, other.Ref}); err != nil {
		t.Fatal(err)
	}
	e.kill(t, "A")
	res, err := e.reaper(t, "r1").Pass(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []recovery.Recovered{{Queue: other.Ref, Workers: []string{"A"}, Requeued: 1}}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("Pass = %+v, want %+v", res, want)
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

// tickCounter counts the ticks a reaper's Run handled (its OnTick test
// signal).
type tickCounter struct {
	ch chan bool
}

// countTicks sets r's OnTick; set it before r runs.
func countTicks(r *recovery.Reaper) *tickCounter {
	c := &tickCounter{ch: make(chan bool, 1000)}
	r.OnTick(func(leased bool) { c.ch <- leased })
	return c
}

// wait waits until the reaper handled n more ticks, and returns on how
// many of them it held the lease.
func (c *tickCounter) wait(t *testing.T, n int) (leased int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for i := 0; i < n; i++ {
		select {
		case l := <-c.ch:
			if l {
				leased++
			}
		case <-timeout:
			t.Fatalf("the reaper handled %d of %d ticks in 10s", i, n)
		}
	}
	return leased
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
	recovered := make(chan struct{}, 100)
	const interval = 30 * time.Millisecond
	record := func(c *recovery.Config) {
		c.Interval = interval
		c.OnRecovered = func(rec recovery.Recovered) {
			mu.Lock()
			recs = append(recs, rec)
			mu.Unlock()
			recovered <- struct{}{}
		}
	}
	r1, r2 := e.reaper(t, "r1", record), e.reaper(t, "r2", record)
	t1, t2 := countTicks(r1), countTicks(r2)
	stop := runReapers(t, r1, r2)
	select {
	case <-recovered:
	case <-time.After(5 * time.Second):
		t.Fatal("neither reaper requeued the dead worker's tasks within 5s")
	}
	// Let both reapers handle several more ticks: nothing may be added.
	t1.wait(t, 5)
	t2.wait(t, 5)
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

	const interval = 30 * time.Millisecond
	r := e.reaper(t, "r1", func(c *recovery.Config) { c.Interval = interval })
	ticks := countTicks(r)
	runReapers(t, r)
	if leased := ticks.wait(t, 10); leased != 0 {
		t.Fatalf("a reaper held a lease another process holds on %d of 10 ticks", leased)
	}
	if w := e.waiting(t, e.q); len(w) != 0 {
		t.Fatalf("a reaper without the lease requeued %v", w)
	}
	if ws := e.strings(t, "SMEMBERS", e.k.Workers()); !reflect.DeepEqual(ws, []string{"A"}) {
		t.Fatalf("a reaper without the lease forgot workers: Workers = %v", ws)
	}

	e.do(t, "DEL", e.k.ReaperLease())
	// A tick reports the lease after its pass: the first leased one has
	// requeued.
	for i := 0; ticks.wait(t, 1) == 0; i++ {
		if i == 100 {
			t.Fatal("the reaper did not take the free lease within 100 ticks")
		}
	}
	if w := e.waiting(t, e.q); !reflect.DeepEqual(w, []string{"t1"}) {
		t.Fatalf("waiting after the first pass with the lease = %v, want [t1]", w)
	}
}

// The documented bound "kill -9 to requeue <= TTL + reaper interval" needs a
// pass at least once per Interval even when a single peer reaps. A zombie
// keeps one taking held (it takes again from inside OnRecovered), so every
// pass recovers exactly one task and OnRecovered counts the passes.
func TestRunLoneReaperPassesEveryInterval(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(t, e.q, "t1")
	var (
		mu     sync.Mutex
		passes int
	)
	// kill registers a fresh worker, lets it take t1 and kills it: the
	// next pass recovers exactly one task.
	kill := func(n int) {
		w := fmt.Sprintf("Z%d", n)
		if _, err := e.reg.Register(e.ctx, w, time.Minute, "host", 1, []registry.Queue{e.q.Ref}); err != nil {
			t.Error(err)
			return
		}
		if _, err := e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: w, Until: math.MaxInt64, Max: 1}); err != nil {
			t.Error(err)
		}
		c := e.pool.Get()
		defer c.Close()
		if _, err := c.Do("DEL", e.k.Keepalive(w)); err != nil {
			t.Error(err)
		}
	}
	kill(0)
	// Passes run on Redis's clock (the lease's TTL), so no clock is
	// injected; each pass here costs a few round trips (kill), which on a
	// loaded machine took most of a 50 ms interval (14 passes of 20 once):
	// the interval is long beside a pass.
	const interval = 150 * time.Millisecond
	r := e.reaper(t, "r1", func(c *recovery.Config) {
		c.Interval = interval
		c.OnRecovered = func(recovery.Recovered) {
			mu.Lock()
			passes++
			n := passes
			mu.Unlock()
			kill(n)
		}
	})
	const ticks = 20
	tc := countTicks(r)
	stop := runReapers(t, r)
	leased := tc.wait(t, ticks)
	stop()

	mu.Lock()
	defer mu.Unlock()
	// Allow for a few late ticks; a reaper that passes every other
	// interval gets about half.
	if passes < ticks*3/4 || leased < ticks*3/4 {
		t.Errorf("a lone reaper held the lease on %d of %d ticks of %v and made %d passes, want about %d (one per interval)",
			leased, ticks, interval, passes, ticks)
	}
}

// enqueueDue enqueues ids into q's scheduled set, due at unix ms due.
func (e *env) enqueueDue(t *testing.T, q rdb.QueueKeys, due int64, ids ...string) {
	t.Helper()
	ps := make([][]byte, len(ids))
	for i := range ids {
		ps[i] = []byte("p" + ids[i])
	}
	if _, err := e.st.Enqueue(e.ctx, q, ids, ps, &rdb.EnqueueArgs{DueMillis: due}); err != nil {
		t.Fatal(err)
	}
}

// far is a due time in the far future (2100-01-01).
const far = 4102444800000

func TestMoveMovesDueTasksOfEveryKnownQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	stage := e.k.Queue(registry.Queue{Tag: "flow", Name: "stage"})
	unknown := e.k.Queue(standalone("unknown"))
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

	r := e.reaper(t, "r1")
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

// countPool passes calls to pool and counts the connections taken: each
// call of the mover (or round trip of its pipelined calls) takes one.
type countPool struct {
	pool *redis.Pool
	n    atomic.Int64
}

func (p *countPool) GetContext(ctx context.Context) (redis.Conn, error) {
	p.n.Add(1)
	return p.pool.GetContext(ctx)
}

func TestMoveOfManyQueues(t *testing.T) {
	t.Parallel()
	const queues = 40
	// setUp registers the queues in a namespace of s.
	setUp := func(t *testing.T, s *redistest.Server) (*env, []rdb.QueueKeys) {
		e := newEnvOn(t, s)
		var qs []rdb.QueueKeys
		var refs []registry.Queue
		for i := range queues {
			q := e.st.Queue(standalone(fmt.Sprintf("mq%02d", i)))
			qs, refs = append(qs, q), append(refs, q.Ref)
		}
		e.register(t, "A", refs...)
		return e, qs
	}
	moveAll := func(t *testing.T, e *env) (int, int64) {
		t.Helper()
		cp := &countPool{pool: e.pool}
		r, err := recovery.New(cp, &recovery.Config{Namespace: e.ns, Interval: time.Second, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		n, err := r.Move(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n, cp.n.Load()
	}
	e, qs := setUp(t, srv)

	t.Run("several queues share a round trip", func(t *testing.T) {
		for i, q := range qs {
			e.enqueueDue(t, q, 1000, fmt.Sprintf("a%02d", i))
		}
		n, calls := moveAll(t, e)
		if n != queues {
			t.Errorf("Move = %d, want %d", n, queues)
		}
		for i, q := range qs {
			if w := e.waiting(t, q); !reflect.DeepEqual(w, []string{fmt.Sprintf("a%02d", i)}) {
				t.Errorf("%s waiting = %v, want its due task", q.Ref.Name, w)
			}
		}
		// The known queues' read, then the moves, 16 queues a round trip.
		if want := int64(1 + (queues+15)/16); calls > want {
			t.Errorf("Move took %d connections for %d queues, want at most %d", calls, queues, want)
		}
	})

	// A pipelined call deletes a share of one call's dead entries
	// (rdb.TrimDead/16): a queue whose call deleted its share goes on
	// alone, as one that moved its share does.
	t.Run("a queue whose dead set aged out goes on alone", func(t *testing.T) {
		const old = 100
		for _, q := range qs[:3] {
			e.do(t, "HSET", q.Config, "dead_age", 60000)
			for j := range old {
				id := fmt.Sprintf("old%03d", j)
				e.do(t, "ZADD", q.Dead, 1000+j, id)
				e.do(t, "HSET", q.Task(id), "d", "p"+id, "s", "dead")
			}
		}
		moveAll(t, e)
		for _, q := range qs[:3] {
			if n := e.do(t, "ZCARD", q.Dead).(int64); n != 0 {
				t.Errorf("%s keeps %d of its %d aged-out dead entries after a move", q.Ref.Name, n, old)
			}
		}
	})

	// On a server of its own: on the package's, the parallel tests' calls
	// load the library again between the flush and the mover's calls, and
	// then none is refused (the test passed in 2 runs of 10 with the
	// calls refused not run again).
	t.Run("calls refused for a flushed script are run again", func(t *testing.T) {
		own, err := redistest.Start()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(own.Stop)
		e, qs := setUp(t, own)
		for i, q := range qs {
			e.enqueueDue(t, q, 1000, fmt.Sprintf("b%02d", i))
		}
		e.do(t, "FUNCTION", "FLUSH")
		e.do(t, "SCRIPT", "FLUSH")
		if n, _ := moveAll(t, e); n != queues {
			t.Errorf("Move = %d after the scripts were flushed, want %d", n, queues)
		}
		for i, q := range qs {
			if w := e.waiting(t, q); !reflect.DeepEqual(w, []string{fmt.Sprintf("b%02d", i)}) {
				t.Errorf("%s waiting = %v, want its due task", q.Ref.Name, w)
			}
		}
	})
}

// The lease holder's Run moves due tasks (beside its passes).
func TestRunMovesDelayedTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.register(t, "A")
	ps := [][]byte{[]byte("pt1")}
	if _, err := e.st.Enqueue(e.ctx, e.q, []string{"t1"}, ps, &rdb.EnqueueArgs{DelayMillis: 100}); err != nil {
		t.Fatal(err)
	}
	runReapers(t, e.reaper(t, "r1"))
	// The move runs beside the passes and reports only its failures.
	redistest.WaitFor(t, 5*time.Second, "the delayed task to be moved to its queue", func() bool {
		return reflect.DeepEqual(e.waiting(t, e.q), []string{"t1"})
	})
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	pool := srv.TagCheckedPool(t)
	for _, tc := range []struct {
		name string
		pool recovery.ConnGetter
		cfg  *recovery.Config
		want string // every word must be in the error
	}{
		{"nil pool", nil, &recovery.Config{Namespace: "ns", Interval: time.Second}, "pool is nil"},
		{"nil config", pool, nil, "Config is nil"},
		{"no namespace", pool, &recovery.Config{Interval: time.Second}, "Config.Namespace"},
		{"zero interval", pool, &recovery.Config{Namespace: "ns"}, "Config.Interval (0s) must be at least 10ms"},
		{"interval under the minimum", pool, &recovery.Config{Namespace: "ns", Interval: recovery.MinInterval - time.Millisecond},
			"Config.Interval (9ms) must be at least 10ms"},
		{"negative interval", pool, &recovery.Config{Namespace: "ns", Interval: -time.Second}, "Config.Interval (-1s)"},
	} {
		r, err := recovery.New(tc.pool, tc.cfg)
		if err == nil || !strings.HasPrefix(err.Error(), "recovery: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, %v; want an error containing %q", tc.name, r, err, tc.want)
		}
	}
	if _, err := recovery.New(pool, &recovery.Config{Namespace: "ns", Interval: recovery.MinInterval}); err != nil {
		t.Errorf("New with Interval = MinInterval: %v", err)
	}
}

// New works on a copy: changing the Config afterwards changes nothing.
func TestNewCopiesConfig(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.register(t, "A")
	e.enqueue(t, e.q, "t1")
	e.take(t, e.q, "A", 1)
	e.kill(t, "A")

	var got []recovery.Recovered
	cfg := &recovery.Config{Namespace: e.ns, Interval: time.Second, Logger: quiet,
		OnRecovered: func(rec recovery.Recovered) { got = append(got, rec) }}
	r, err := recovery.New(e.pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Namespace = "elsewhere"
	cfg.OnRecovered = nil
	if _, err := r.Pass(e.ctx); err != nil {
		t.Fatal(err)
	}
	if want := []recovery.Recovered{{Queue: e.q.Ref, Workers: []string{"A"}, Requeued: 1}}; !reflect.DeepEqual(got, want) {
		t.Errorf("OnRecovered got %+v, want %+v (the Config as it was given to New)", got, want)
	}
}

// errInjected is the connection error a faultyPool hands out.
var errInjected = errors.New("injected: connection reset by peer")

// faultyPool passes calls to pool, except that GetContext fails while down
// is set, and every command named in failCmds fails with errInjected. It
// counts the commands sent through it.
type faultyPool struct {
	pool     *redis.Pool
	mu       sync.Mutex
	down     bool
	failCmds map[string]bool
	// failCall, when set, fails each command it accepts (counted in
	// sent either way).
	failCall func(cmd string, args []any) bool
	sent     map[string]int
}

// takeSent returns the commands sent since the last call, by name, and their
// total.
func (p *faultyPool) takeSent() (map[string]int, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out, n := p.sent, 0
	for _, c := range out {
		n += c
	}
	p.sent = nil
	return out, n
}

func (p *faultyPool) setDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
}

func (p *faultyPool) fails(cmd string, args ...any) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd = strings.ToUpper(cmd)
	if p.sent == nil {
		p.sent = map[string]int{}
	}
	p.sent[cmd]++
	return p.failCmds[cmd] || p.failCall != nil && p.failCall(cmd, args)
}

func (p *faultyPool) GetContext(ctx context.Context) (redis.Conn, error) {
	p.mu.Lock()
	down := p.down
	p.mu.Unlock()
	if down {
		return nil, errInjected
	}
	c, err := p.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return &faultyConn{Conn: c, p: p}, nil
}

type faultyConn struct {
	redis.Conn
	p *faultyPool
}

func (c *faultyConn) Do(cmd string, args ...any) (any, error) {
	if c.p.fails(cmd, args...) {
		return nil, errInjected
	}
	return c.Conn.Do(cmd, args...)
}

func (c *faultyConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	if c.p.fails(cmd, args...) {
		return nil, errInjected
	}
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

func (c *faultyConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	if c.p.fails(cmd, args...) {
		return nil, errInjected
	}
	return redis.DoWithTimeout(c.Conn, d, cmd, args...)
}

func (c *faultyConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

func (c *faultyConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

func (c *faultyConn) Send(cmd string, args ...any) error {
	if c.p.fails(cmd, args...) {
		return errInjected
	}
	return c.Conn.Send(cmd, args...)
}

// A requeue that fails after some of its calls (one per RequeueChunk
// takings) reports what those calls did, the takings they ended as
// cancelled in particular: no later pass can find them (they left the dead
// worker's holdings), so their events come from this report or never.
func TestPassReportsWhatAFailedRequeueDid(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.register(t, "A")
	n := rdb.RequeueChunk + 1
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("t%d", i)
	}
	e.enqueue(t, e.q, ids...)
	for held := 0; held < n; {
		held += len(e.take(t, e.q, "A", n-held))
	}
	for _, id := range ids {
		if _, err := e.st.Cancel(e.ctx, e.q, id); err != nil {
			t.Fatal(err)
		}
	}
	e.kill(t, "A")
	requeues := 0
	fp := &faultyPool{pool: e.pool, failCall: func(cmd string, args []any) bool {
		if (cmd == "FCALL" || cmd == "EVALSHA") && len(args) > 0 && strings.Contains(fmt.Sprint(args[0]), "requeue") {
			requeues++
			return requeues == 2
		}
		return false
	}}
	var reported []recovery.Recovered
	r, err := recovery.New(fp, &recovery.Config{Namespace: e.ns, Interval: time.Second, Logger: quiet,
		OnRecovered: func(rc recovery.Recovered) { reported = append(reported, rc) }})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Pass(e.ctx)
	if err == nil || requeues != 2 {
		t.Fatalf("Pass = %v (requeue calls %d), want the second requeue call's error", err, requeues)
	}
	if len(res) != 1 || len(reported) != 1 || len(reported[0].Cancelled) != rdb.RequeueChunk || reported[0].Requeued != 0 {
		t.Fatalf("Pass returned %d, reported %+v; want the first call's %d cancelled takings", len(res), reported, rdb.RequeueChunk)
	}
}

func TestPassAndMoveReturnPoolErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.register(t, "A")
	e.enqueue(t, e.q, "t1")
	e.take(t, e.q, "A", 1)
	e.kill(t, "A")

	fp := &faultyPool{pool: e.pool, down: true}
	r, err := recovery.New(fp, &recovery.Config{Namespace: e.ns, Interval: time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	before := e.snapshot(t)
	if res, err := r.Pass(e.ctx); !errors.Is(err, errInjected) || len(res) != 0 {
		t.Errorf("Pass with Redis unreachable = %+v, %v; want nothing and the pool's error", res, err)
	}
	if n, err := r.Move(e.ctx); !errors.Is(err, errInjected) || n != 0 {
		t.Errorf("Move with Redis unreachable = %d, %v; want 0 and the pool's error", n, err)
	}
	if after := e.snapshot(t); !reflect.DeepEqual(after, before) {
		t.Errorf("failed calls changed Redis:\nbefore %v\nafter  %v", before, after)
	}

	// Once Redis is back, the next pass does the work.
	fp.setDown(false)
	res, err := r.Pass(e.ctx)
	if want := []recovery.Recovered{{Queue: e.q.Ref, Workers: []string{"A"}, Requeued: 1}}; err != nil || !reflect.DeepEqual(res, want) {
		t.Errorf("Pass after the outage = %+v, %v; want %+v", res, err, want)
	}
}

// Failures of the background loop reach OnError, named by step, and the loop
// goes on at the next interval.
func TestRunReportsFailuresToOnError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		fp     func(*redis.Pool) *faultyPool
		prefix string
	}{
		{
			name:   "lease",
			fp:     func(p *redis.Pool) *faultyPool { return &faultyPool{pool: p, down: true} },
			prefix: "recovery: lease: ",
		},
		{
			// The lease (SET) goes through; the pass's first read
			// (SMEMBERS of the workers) fails, so does the mover's.
			name: "pass",
			fp: func(p *redis.Pool) *faultyPool {
				return &faultyPool{pool: p, failCmds: map[string]bool{"SMEMBERS": true}}
			},
			prefix: "recovery: pass: ",
		},
		{
			name: "move",
			fp: func(p *redis.Pool) *faultyPool {
				return &faultyPool{pool: p, failCmds: map[string]bool{"FCALL": true, "EVALSHA": true}}
			},
			prefix: "recovery: move: move q: ",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.register(t, "A")
			// A due task, so the mover has a script to run.
			e.enqueueDue(t, e.q, 1000, "t1")
			errs := make(chan error, 100)
			r, err := recovery.New(tc.fp(e.pool), &recovery.Config{
				Namespace: e.ns, Interval: 20 * time.Millisecond, Logger: quiet,
				OnError: func(err error) {
					select {
					case errs <- err:
					default:
					}
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			runReapers(t, r)
			matched := 0
			deadline := time.After(5 * time.Second)
			for matched < 2 {
				select {
				case err := <-errs:
					if !errors.Is(err, errInjected) {
						t.Fatalf("OnError got %v, want the injected error wrapped", err)
					}
					if strings.HasPrefix(err.Error(), tc.prefix) {
						matched++
					}
				case <-deadline:
					t.Fatalf("OnError got %d errors starting %q within 5s, want a failure at two intervals", matched, tc.prefix)
				}
			}
		})
	}
}

// Two movers racing over the same due tasks move each exactly once.
func TestMoveTwoMoversMoveEachTaskOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.register(t, "A")
	n := 3*recovery.MoveBatch + 7
	due := ids("t", n)
	for i, id := range due {
		e.enqueueDue(t, e.q, int64(1000+i), id)
	}
	r1, r2 := e.reaper(t, "r1"), e.reaper(t, "r2")

	var wg sync.WaitGroup
	moved := make([]int, 2)
	for i, r := range []*recovery.Reaper{r1, r2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each mover runs twice: the second run of either finds nothing.
			for range 2 {
				m, err := r.Move(e.ctx)
				if err != nil {
					t.Error(err)
				}
				moved[i] += m
			}
		}()
	}
	wg.Wait()

	if moved[0]+moved[1] != n {
		t.Errorf("movers moved %d + %d tasks, want %d in all", moved[0], moved[1], n)
	}
	if w := e.waiting(t, e.q); !reflect.DeepEqual(w, due) {
		t.Errorf("waiting has %d ids, want each of the %d due tasks once, in due order", len(w), n)
	}
	if s := e.strings(t, "ZRANGE", e.q.Scheduled, 0, -1); len(s) != 0 {
		t.Errorf("scheduled still holds %d ids", len(s))
	}
}

// A queue whose move fails (here its scheduled set is not a sorted set: a
// hand edit, a key of another program) must not stop the mover for the
// other queues: Move went through the known queues in order and returned
// at the first error, so every pass stopped there, and the delayed tasks
// and retries of every queue after it were never moved (every reaper reads
// the queues in the same order). Move goes on with the others and reports
// the failure.
func TestMoveGoesPastAQueueThatFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var refs []registry.Queue
	for i := 0; i < 12; i++ {
		refs = append(refs, standalone(fmt.Sprintf("m%02d", i)))
	}
	e.register(t, "A", refs...)
	known, err := e.st.KnownQueues(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(known) != len(refs) {
		t.Fatalf("known queues = %v, want the %d registered", known, len(refs))
	}
	// The first queue the mover reads is the broken one.
	broken := e.st.Queue(known[0])
	e.do(t, "SET", broken.Scheduled, "not a sorted set")
	var fine []rdb.QueueKeys
	for _, q := range known[1:] {
		qk := e.st.Queue(q)
		fine = append(fine, qk)
		e.enqueueDue(t, qk, 1000, "t-"+q.Name)
	}

	n, err := e.reaper(t, "r1").Move(e.ctx)
	if err == nil || !strings.Contains(err.Error(), known[0].Member()) {
		t.Errorf("Move error = %v, want the broken queue's (%s)", err, known[0].Member())
	}
	if n != len(fine) {
		t.Errorf("Move = %d, want %d: one queue's failure stopped the mover for the queues after it", n, len(fine))
	}
	for _, qk := range fine {
		if w := e.waiting(t, qk); !reflect.DeepEqual(w, []string{"t-" + qk.Ref.Name}) {
			t.Errorf("%s waiting = %v, want its due task", qk.Ref.Name, w)
		}
	}
}

// hangPool passes calls to pool, but its first call of the script named
// script (move when "") never gets a reply: it waits until its context
// ends, as a call on a connection that went silent does (a partition that
// drops packets, a virtual IP moved to another host: no reset comes, TCP
// retransmits for about 15 minutes). Every other call, on other
// connections, is answered.
type hangPool struct {
	pool    *redis.Pool
	script  string
	hung    atomic.Bool
	hanging chan struct{} // closed when the hung call starts waiting
}

func (p *hangPool) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := p.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return &hangConn{Conn: c, p: p}, nil
}

type hangConn struct {
	redis.Conn
	p *hangPool
	// sentHung: a pipelined call that gets no reply was sent: the next
	// receive hangs.
	sentHung bool
}

// hangs reports whether the call of cmd is the one that gets no reply.
func (c *hangConn) hangs(cmd string, args []any) bool {
	script := c.p.script
	if script == "" {
		script = "move"
	}
	return cmd == "FCALL" && len(args) > 0 && strings.HasSuffix(fmt.Sprint(args[0]), "_"+script) && c.p.hung.CompareAndSwap(false, true)
}

// hang reports whether the call hung (its context ended).
func (c *hangConn) hang(ctx context.Context, cmd string, args []any) error {
	if !c.hangs(cmd, args) {
		return nil
	}
	return c.wait(ctx)
}

// wait waits for the reply that never comes, until ctx ends.
func (c *hangConn) wait(ctx context.Context) error {
	close(c.p.hanging)
	<-ctx.Done()
	return fmt.Errorf("read: i/o timeout (no reply: %w)", ctx.Err())
}

// Send marks a pipelined call that gets no reply: the calls of a round
// trip share its fate.
func (c *hangConn) Send(cmd string, args ...any) error {
	if c.hangs(cmd, args) {
		c.sentHung = true
	}
	return c.Conn.Send(cmd, args...)
}

func (c *hangConn) Do(cmd string, args ...any) (any, error) {
	if err := c.hang(context.Background(), cmd, args); err != nil {
		return nil, err
	}
	return c.Conn.Do(cmd, args...)
}

func (c *hangConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	if err := c.hang(ctx, cmd, args); err != nil {
		return nil, err
	}
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

func (c *hangConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := c.hang(ctx, cmd, args); err != nil {
		return nil, err
	}
	return redis.DoWithTimeout(c.Conn, d, cmd, args...)
}

func (c *hangConn) ReceiveContext(ctx context.Context) (any, error) {
	if c.sentHung {
		c.sentHung = false
		return nil, c.wait(ctx)
	}
	return redis.ReceiveContext(c.Conn, ctx)
}

func (c *hangConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

// One move call that never gets its reply stopped every move of the lease
// holder: Run moves one at a time, the call carried Run's context (no
// deadline), and the holder kept the lease, its passes and leases going on
// other connections. No delayed task or retry became due in any queue
// until TCP gave up on the connection (about 15 minutes). Each call of the
// mover is bounded, so the next move goes on.
func TestMoveCallThatGetsNoReplyDoesNotStopTheMover(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.register(t, "A")
	e.enqueueDue(t, e.q, 1000, "d1")

	runHung(t, e, "move")
	// The hung call's bound is 300 ms here: the due task is moved soon
	// after, by a later move of the same reaper.
	waitWaiting(t, e, "d1", "due long ago, not moved within 5 s of a move call that got no reply")
}

// hungInterval is the reaper's interval of the hung-call tests.
const hungInterval = 30 * time.Millisecond

// runHung runs a reaper of e, its calls bounded to 300 ms, whose first
// call of script gets no reply, until that call hangs.
func runHung(t *testing.T, e *env, script string) {
	t.Helper()
	hp := &hangPool{pool: e.pool, script: script, hanging: make(chan struct{})}
	r, err := recovery.New(hp, &recovery.Config{Namespace: e.ns, Interval: hungInterval, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	r.SetCallTimeout(300 * time.Millisecond)
	runReapers(t, r)
	select {
	case <-hp.hanging:
	case <-time.After(5 * time.Second):
		t.Fatalf("the reaper never called %s", script)
	}
}

// waitWaiting waits up to 5 s until id alone waits in e's queue.
func waitWaiting(t *testing.T, e *env, id, what string) {
	t.Helper()
	// The move runs beside the passes and reports only its failures.
	redistest.Eventually(t, 5*time.Second, func() string {
		if w := e.waiting(t, e.q); !reflect.DeepEqual(w, []string{id}) {
			return fmt.Sprintf("%s, %s: waiting = %v, scheduled = %v", id, what, w, e.strings(t, "ZRANGE", e.q.Scheduled, 0, -1))
		}
		return ""
	})
}

// One call of a recovery pass that never gets its reply stopped every
// later pass of the reaper: Run waits for its pass, which carried Run's
// context (no deadline), and a lone reaper (one process, or the peer that
// keeps the lease) recovered nothing more until TCP gave up on the
// connection. Each call of a pass is bounded: the next pass requeues.
func TestPassCallThatGetsNoReplyDoesNotStopRecovery(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(t, e.q, "t1")
	if _, err := e.reg.Register(e.ctx, "Z", time.Minute, "host", 1, []registry.Queue{e.q.Ref}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: "Z", Until: math.MaxInt64, Max: 1}); err != nil {
		t.Fatal(err)
	}
	c := e.pool.Get()
	defer c.Close()
	if _, err := c.Do("DEL", e.k.Keepalive("Z")); err != nil { // Z died holding t1
		t.Fatal(err)
	}

	runHung(t, e, "requeue")
	waitWaiting(t, e, "t1", "held by a dead worker, not requeued within 5 s of a requeue call that got no reply")
}

// A queue whose requeue fails (here its parked-workers key is not a hash:
// a hand edit, a key of another program) must not keep a dead worker's
// takings in its other queues from being offered again: Pass went through
// the worker's queues in order and returned at the first error, without
// forgetting the worker, so every pass failed at the same queue and the
// takings in the queues after it stayed held for good (a limited queue
// lost those slots for good too). Pass requeues the others, reports the
// failure, and keeps the worker registered for the queue that failed.
func TestPassGoesPastAQueueThatFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	broken := e.st.Queue(standalone("broken"))
	var fine []rdb.QueueKeys
	refs := []registry.Queue{broken.Ref}
	for _, name := range []string{"fine1", "fine2"} {
		qk := e.st.Queue(standalone(name))
		fine = append(fine, qk)
		refs = append(refs, qk.Ref)
	}
	e.register(t, "A", refs...)
	for _, qk := range append([]rdb.QueueKeys{broken}, fine...) {
		e.enqueue(t, qk, "t-"+qk.Ref.Name)
		if got := e.take(t, qk, "A", 1); len(got) != 1 {
			t.Fatalf("take from %s = %v", qk.Ref.Name, got)
		}
	}
	e.kill(t, "A")
	e.do(t, "SET", broken.Park, "not a hash")

	r := e.reaper(t, "r1")
	res, err := r.Pass(e.ctx)
	if err == nil || !strings.Contains(err.Error(), broken.Ref.Member()) {
		t.Errorf("Pass error = %v, want the broken queue's (%s)", err, broken.Ref.Member())
	}
	for _, qk := range fine {
		if w := e.waiting(t, qk); !reflect.DeepEqual(w, []string{"t-" + qk.Ref.Name}) {
			t.Errorf("%s waiting = %v, want the dead worker's taking back: one queue's failure kept it held", qk.Ref.Name, w)
		}
	}
	if len(res) != len(fine) {
		t.Errorf("Pass returned %+v, want the %d queues requeued", res, len(fine))
	}
	if ws := e.strings(t, "SMEMBERS", e.k.Workers()); !reflect.DeepEqual(ws, []string{"A"}) {
		t.Errorf("workers = %v: A, whose takings in %s are still held, was forgotten", ws, broken.Ref.Name)
	}

	// Mended, the next pass requeues the rest and forgets the worker.
	e.do(t, "DEL", broken.Park)
	if _, err := r.Pass(e.ctx); err != nil {
		t.Fatal(err)
	}
	if w := e.waiting(t, broken); !reflect.DeepEqual(w, []string{"t-broken"}) {
		t.Errorf("broken waiting = %v after the mend, want its taking back", w)
	}
	if ws := e.strings(t, "SMEMBERS", e.k.Workers()); len(ws) != 0 {
		t.Errorf("workers = %v after the last requeue, want none", ws)
	}
}

// A known queue whose holder index is not a set (a hand edit, a key of
// another program) failed the whole Sweep: the orphaned takings of every
// other queue stayed held at every sweep. Sweep goes past it and reports
// it.
func TestSweepGoesPastABrokenHolderIndex(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	broken := e.st.Queue(standalone("broken"))
	e.enqueue(t, e.q, "z1")
	e.take(t, e.q, "Z", 1) // Z never registered
	if err := e.st.AddKnownQueues(e.ctx, []rdb.QueueRef{broken.Ref, e.q.Ref}); err != nil {
		t.Fatal(err)
	}
	e.do(t, "SET", broken.Holders, "not a set")
	r := e.reaper(t, "r1")
	res, err := r.Sweep(e.ctx)
	if err == nil || !strings.Contains(err.Error(), broken.Ref.Member()) {
		t.Errorf("Sweep error = %v, want the broken queue's (%s)", err, broken.Ref.Member())
	}
	want := []recovery.Recovered{{Queue: e.q.Ref, Workers: []string{"Z"}, Requeued: 1}}
	if !reflect.DeepEqual(res, want) {
		t.Errorf("Sweep = %+v, want %+v: one queue's broken index kept the others' orphans held", res, want)
	}
	if w := e.waiting(t, e.q); !reflect.DeepEqual(w, []string{"z1"}) {
		t.Errorf("waiting = %v, want [z1]", w)
	}
}

// stallPool passes calls to pool, but a call of the move script waits until
// release is closed (or its context ends): a mover that takes long, as one
// that runs a script per known queue does with tens of thousands of them
// (10,000 queues: 0.8 s a move on this machine; 100,000: about 8 s).
type stallPool struct {
	pool    *redis.Pool
	moving  chan struct{} // gets a value when a move call starts waiting
	release chan struct{}
	ended   chan struct{} // closed when the first move call stops waiting
	once    sync.Once
}

func (p *stallPool) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := p.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return &stallConn{Conn: c, p: p}, nil
}

type stallConn struct {
	redis.Conn
	p *stallPool
}

func (c *stallConn) stall(ctx context.Context, cmd string, args []any) {
	if cmd != "FCALL" || len(args) == 0 || !strings.HasSuffix(fmt.Sprint(args[0]), "_move") {
		return
	}
	select {
	case c.p.moving <- struct{}{}:
	default:
	}
	select {
	case <-c.p.release:
	case <-ctx.Done():
	}
	c.p.once.Do(func() { close(c.p.ended) })
}

func (c *stallConn) Do(cmd string, args ...any) (any, error) {
	c.stall(context.Background(), cmd, args)
	return c.Conn.Do(cmd, args...)
}

func (c *stallConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	c.stall(ctx, cmd, args)
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

func (c *stallConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	c.stall(ctx, cmd, args)
	return redis.DoWithTimeout(c.Conn, d, cmd, args...)
}

// Send stalls a pipelined move call (the calls of its round trip wait
// with it).
func (c *stallConn) Send(cmd string, args ...any) error {
	c.stall(context.Background(), cmd, args)
	return c.Conn.Send(cmd, args...)
}

func (c *stallConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

func (c *stallConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

// The documented bound, kill -9 to requeue within TTL + one reaper
// interval, needs a pass every interval. Run made the pass, the sweep and
// the move one after the other, so a move that outlasts the interval (one
// script call per known queue, every interval) delayed every pass by as
// long: the takings of a dead worker waited for the mover. Here the move
// stalls until the test ends, and a worker dies meanwhile.
func TestRunPassesWhileAMoveIsSlow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.register(t, "A")
	e.enqueue(t, e.q, "t1")
	e.take(t, e.q, "A", 1)
	e.enqueueDue(t, e.q, 1000, "d1") // something for the mover to do

	sp := &stallPool{pool: e.pool, moving: make(chan struct{}, 1), release: make(chan struct{}), ended: make(chan struct{})}
	defer close(sp.release)
	const interval = 30 * time.Millisecond
	r, err := recovery.New(sp, &recovery.Config{Namespace: e.ns, Interval: interval, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ticks := countTicks(r)
	runReapers(t, r)
	select {
	case <-sp.moving:
	case <-time.After(5 * time.Second):
		t.Fatal("the reaper never moved")
	}

	e.kill(t, "A")
	for len(ticks.ch) > 0 { // ticks handled before the kill
		<-ticks.ch
	}
	// A tick is reported after its pass. A Run that waits for the stalled
	// move handles its next tick only once the move call gave up (after
	// CallTimeout, 5 s).
	for i := 0; !slices.Contains(e.waiting(t, e.q), "t1"); i++ {
		if i == 20 {
			t.Fatalf("t1 of dead worker A not requeued within %d ticks while a move ran: waiting = %v",
				20, e.waiting(t, e.q))
		}
		ticks.wait(t, 1)
	}
	select {
	case <-sp.ended:
		t.Fatal("t1 of dead worker A was requeued only after the stalled move call ended")
	default:
	}
	if w := e.waiting(t, e.q); !reflect.DeepEqual(w, []string{"t1"}) {
		t.Fatalf("waiting = %v while a move ran, want [t1]", w)
	}
}

// Sweep requeues the holdings of a holder that is neither registered nor
// alive. A holder whose keepalive lives but whose registration is gone (a
// failover of the registry's master lost it on a Redis Cluster) is alive:
// it puts back what it holds itself, and runs it meanwhile. Sweep must leave
// its takings alone (two owners otherwise).
func TestSweepLeavesAnUnregisteredLiveHolderAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(t, e.q, "l1", "z1")
	e.take(t, e.q, "L", 1) // L lives, unregistered
	e.take(t, e.q, "Z", 1) // Z is dead, unregistered
	e.do(t, "SET", e.k.Keepalive("L"), "RUN", "PX", 60_000)
	if err := e.st.AddKnownQueues(e.ctx, []rdb.QueueRef{e.q.Ref}); err != nil {
		t.Fatal(err)
	}
	res, err := e.reaper(t, "r1").Sweep(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || !reflect.DeepEqual(res[0].Workers, []string{"Z"}) || res[0].Requeued != 1 {
		t.Fatalf("Sweep = %+v, want Z's one taking requeued, L's left", res)
	}
	if w := e.waiting(t, e.q); !reflect.DeepEqual(w, []string{"z1"}) {
		t.Errorf("waiting = %v, want [z1]: the live holder's taking stays held", w)
	}
	if h := e.strings(t, "HVALS", e.q.WorkerQueue("L")); !reflect.DeepEqual(h, []string{"l1"}) {
		t.Errorf("L holds %v, want [l1]", h)
	}
	if hs := e.strings(t, "SMEMBERS", e.q.Holders); !reflect.DeepEqual(hs, []string{"L"}) {
		t.Errorf("holders = %v, want [L]", hs)
	}
}
