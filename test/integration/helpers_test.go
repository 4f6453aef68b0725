package integration_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/rs/xid"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/internal/seam"
	"github.com/worqr/worqr-go/recovery"
	"github.com/worqr/worqr-go/registry"
	"github.com/worqr/worqr-go/worqr"
)

// Short timings for in-process workers: a dead worker is noticed within
// 500ms + 100ms.
const (
	fastHeartbeatInterval = 100 * time.Millisecond
	fastHeartbeatTTL      = 500 * time.Millisecond
	fastReaperInterval    = 100 * time.Millisecond
	fastPollInterval      = 200 * time.Millisecond

	// neverPoll is a PollInterval so long that only the startup poll and
	// pub/sub wake-ups can make a worker take.
	neverPoll = time.Hour
)

// env is one spec's world: its own namespace, its own pool (whose
// connections check that every script call's KEYS share one hash tag), the
// pool the code under test runs on (served), a client, the protocol store
// for hand-driven workers and direct access to the keys.
type env struct {
	ns   string
	pool *redis.Pool
	// served is pool as the workers, clients and inspectors get it (see
	// served); the spec's own checks and hand-driven workers use pool.
	served worqr.ConnGetter
	keys   rdb.Keys
	st     *rdb.Store
	client *worqr.Client
	in     *worqr.Inspector
	logger *slog.Logger
	reg    *registry.Registry
}

func newEnv() *env {
	GinkgoHelper()
	e := &env{ns: redistest.Namespace()}
	e.pool = srv.TagCheckedPool(newTagWatch())
	e.served = served(e.pool)
	e.keys = rdb.NewKeys(e.ns)
	e.st = rdb.NewStore(e.pool, e.ns)
	e.logger = slog.New(slog.NewTextHandler(GinkgoWriter, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var err error
	e.reg, err = registry.New(e.pool, e.ns)
	Expect(err).NotTo(HaveOccurred())
	e.client, err = worqr.NewClient(e.served, &worqr.Config{Namespace: e.ns, Logger: e.logger})
	Expect(err).NotTo(HaveOccurred())
	e.in, err = worqr.NewInspector(e.served, &worqr.Config{Namespace: e.ns, Logger: e.logger})
	Expect(err).NotTo(HaveOccurred())
	return e
}

// tagWatch is the redistest.TB of the tag-checked pools: script calls run on
// library goroutines, where Ginkgo's Fail cannot be called, so violations are
// collected and asserted when the spec ends.
type tagWatch struct {
	mu   sync.Mutex
	errs []string
}

func newTagWatch() *tagWatch {
	t := &tagWatch{}
	// Registered first, so it runs last, after the workers have stopped.
	DeferCleanup(func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		Expect(t.errs).To(BeEmpty(), "script calls whose KEYS span several hash tags")
	})
	return t
}

func (t *tagWatch) Helper() {}
func (t *tagWatch) Errorf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.errs = append(t.errs, fmt.Sprintf(format, args...))
}
func (t *tagWatch) Fatalf(format string, args ...any) { t.Errorf(format, args...) }
func (t *tagWatch) Cleanup(f func())                  { DeferCleanup(f) }

// newPool returns another pool (separate connections) on the suite's server.
func newPool() *redis.Pool {
	p := srv.Pool()
	DeferCleanup(p.Close)
	return p
}

// served returns the pool workers, clients and inspectors run on in place
// of pool (redistest.Served): pool itself, or under contrib/goredis/suite a
// go-redis client on the suite's server when pool is one of srv's (a pool
// with faults stays as it is). The go-redis client is closed when the spec
// ends.
func served(pool worqr.ConnGetter) worqr.ConnGetter {
	return redistest.Served(GinkgoT(), pool)
}

func bg() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

func (e *env) qk(queue string) rdb.QueueKeys { return e.keys.Queue(rdb.Standalone(queue)) }

// do runs one Redis command on a pooled connection.
func (e *env) do(cmd string, args ...any) (any, error) {
	ctx, cancel := bg()
	defer cancel()
	c, err := e.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return redis.DoContext(c, ctx, cmd, args...)
}

// waiting returns the queue's waiting ids, front first.
func (e *env) waiting(queue string) []string {
	GinkgoHelper()
	ids, err := redis.Strings(e.do("LRANGE", e.qk(queue).Waiting, 0, -1))
	Expect(err).NotTo(HaveOccurred())
	return ids
}

func (e *env) smembers(key string) []string {
	GinkgoHelper()
	m, err := redis.Strings(e.do("SMEMBERS", key))
	Expect(err).NotTo(HaveOccurred())
	sort.Strings(m)
	return m
}

// hkeys returns the sorted fields of hash key.
func (e *env) hkeys(key string) []string {
	GinkgoHelper()
	m, err := redis.Strings(e.do("HKEYS", key))
	Expect(err).NotTo(HaveOccurred())
	sort.Strings(m)
	return m
}

func (e *env) exists(key string) bool {
	GinkgoHelper()
	n, err := redis.Int(e.do("EXISTS", key))
	Expect(err).NotTo(HaveOccurred())
	return n == 1
}

// allKeys returns every key of the namespace, sorted.
func (e *env) allKeys() []string {
	GinkgoHelper()
	ctx, cancel := bg()
	defer cancel()
	c, err := e.pool.GetContext(ctx)
	Expect(err).NotTo(HaveOccurred())
	defer c.Close()
	keys, err := redistest.Keys(ctx, c, e.ns)
	Expect(err).NotTo(HaveOccurred())
	sort.Strings(keys)
	return keys
}

// keysWith returns the namespace's keys that contain part.
func (e *env) keysWith(part string) []string {
	GinkgoHelper()
	var out []string
	for _, k := range e.allKeys() {
		if strings.Contains(k, part) {
			out = append(out, k)
		}
	}
	return out
}

// snapshot renders every key of the namespace (but the reaper lease and
// the throughput history, which live reapers and event publishers rewrite on
// their own schedule) with its type and content.
func (e *env) snapshot() map[string]string {
	GinkgoHelper()
	out := map[string]string{}
	for _, k := range e.allKeys() {
		if k == e.keys.ReaperLease() || strings.HasPrefix(k, strings.TrimSuffix(e.keys.History(0), "0")) {
			continue
		}
		typ, err := redis.String(e.do("TYPE", k))
		Expect(err).NotTo(HaveOccurred())
		var val any
		switch typ {
		case "string":
			val, err = redis.String(e.do("GET", k))
		case "list":
			val, err = redis.Strings(e.do("LRANGE", k, 0, -1))
		case "set":
			var m []string
			m, err = redis.Strings(e.do("SMEMBERS", k))
			sort.Strings(m)
			val = m
		case "hash":
			var m map[string]string
			m, err = redis.StringMap(e.do("HGETALL", k))
			val = m
		case "zset":
			val, err = redis.Strings(e.do("ZRANGE", k, 0, -1, "WITHSCORES"))
		case "none":
			continue // expired between SCAN and TYPE
		default:
			val = "?"
		}
		Expect(err).NotTo(HaveOccurred())
		out[k] = fmt.Sprintf("%s %v", typ, val)
	}
	return out
}

// reaper returns a reaper on pool for the spec's namespace, for direct passes.
func (e *env) reaper(pool *redis.Pool) *recovery.Reaper {
	GinkgoHelper()
	if pool == nil {
		pool = e.pool
	}
	r, err := recovery.New(pool, &recovery.Config{
		Namespace: e.ns, Interval: time.Second, Holder: "spec-" + xid.New().String(), Logger: e.logger,
	})
	Expect(err).NotTo(HaveOccurred())
	return r
}

// pass runs one recovery pass and returns the total requeued.
func (e *env) pass() int {
	GinkgoHelper()
	ctx, cancel := bg()
	defer cancel()
	recs, err := e.reaper(nil).Pass(ctx)
	Expect(err).NotTo(HaveOccurred())
	n := 0
	for _, r := range recs {
		n += r.Requeued
	}
	return n
}

// register lists a worker id the spec drives by hand (e.take, e.finish),
// alive for ttl, serving queues.
func (e *env) register(ttl time.Duration, queues ...string) string {
	GinkgoHelper()
	refs := make([]rdb.QueueRef, len(queues))
	for i, q := range queues {
		refs[i] = rdb.Standalone(q)
	}
	return e.registerRefs(ttl, refs)
}

func (e *env) registerRefs(ttl time.Duration, refs []rdb.QueueRef) string {
	GinkgoHelper()
	id, _ := e.registerUntil(ttl, refs)
	return id
}

// registerUntil registers a hand-driven worker and returns its id and its
// deadline (unix ms, Redis time), computed as heartbeat.Session.Until is.
func (e *env) registerUntil(ttl time.Duration, refs []rdb.QueueRef) (string, int64) {
	GinkgoHelper()
	ctx, cancel := bg()
	defer cancel()
	id := "manual-" + xid.New().String()
	at, err := e.reg.Register(ctx, id, ttl, "spec", os.Getpid(), refs)
	Expect(err).NotTo(HaveOccurred())
	return id, at.Add(ttl - ttl/10).UnixMilli()
}

// kill makes a hand-driven worker dead to the cluster: its keepalive is gone.
func (e *env) kill(id string) {
	GinkgoHelper()
	_, err := e.do("DEL", e.keys.Keepalive(id))
	Expect(err).NotTo(HaveOccurred())
}

// take takes up to n tasks of queue for hand-driven worker w.
func (e *env) take(w, queue string, n int) []rdb.Taken {
	GinkgoHelper()
	ctx, cancel := bg()
	defer cancel()
	got, err := e.st.Take(ctx, e.qk(queue), rdb.TakeArgs{Worker: w, Until: math.MaxInt64, Max: n})
	Expect(err).NotTo(HaveOccurred())
	return got
}

// end ends one hand-driven taking of qk through st (e.st when nil), the way
// a worker ends every taking, with no retention. A refused end (the worker
// no longer owns the taking) is rdb.ErrLost, as worqr reports it.
func (e *env) end(st *rdb.Store, qk rdb.QueueKeys, en rdb.Ending) (rdb.Ended, error) {
	if st == nil {
		st = e.st
	}
	ctx, cancel := bg()
	defer cancel()
	got, err := st.End(ctx, qk, 0, []rdb.Ending{en})
	if err != nil {
		return rdb.Ended{}, err
	}
	if got[0].Outcome == rdb.OutcomeLost {
		return got[0], rdb.ErrLost
	}
	return got[0], nil
}

// giveBack gives back hand-driven worker w's taking pid of task id.
func (e *env) giveBack(w, queue, pid, id string) (rdb.Outcome, error) {
	got, err := e.end(nil, e.qk(queue), rdb.GiveBack(rdb.KindTask, w, pid, id))
	return got.Outcome, err
}

// finish finishes hand-driven worker w's taking pid of task id as done.
func (e *env) finish(w, queue, pid, id string) (rdb.Outcome, error) {
	got, err := e.end(nil, e.qk(queue), rdb.Done(rdb.KindTask, w, pid, id, nil))
	return got.Outcome, err
}

func (e *env) enqueue(queue string, payload string) string {
	GinkgoHelper()
	ctx, cancel := bg()
	defer cancel()
	id, err := e.client.Enqueue(ctx, queue, []byte(payload), nil)
	Expect(err).NotTo(HaveOccurred())
	return id
}

func (e *env) enqueueN(queue string, n int) []string {
	GinkgoHelper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = e.enqueue(queue, fmt.Sprintf("task-%d", i))
	}
	return ids
}

// workerConfig returns a config with the suite's short timings.
func (e *env) workerConfig(queues map[string]worqr.QueueConfig, rec *recorder) *worqr.WorkerConfig {
	cfg := &worqr.WorkerConfig{
		Config:            worqr.Config{Namespace: e.ns, Logger: e.logger},
		Queues:            queues,
		HeartbeatInterval: fastHeartbeatInterval,
		HeartbeatTTL:      fastHeartbeatTTL,
		ReaperInterval:    fastReaperInterval,
		PollInterval:      fastPollInterval,
	}
	if rec != nil {
		cfg.OnEvent = rec.on
	}
	return cfg
}

// start builds and starts a worker on pool (e.pool when nil) and stops it
// when the spec ends.
func (e *env) start(pool *redis.Pool, cfg *worqr.WorkerConfig) *worqr.Worker {
	GinkgoHelper()
	return e.startCtx(context.Background(), pool, cfg)
}

// startWithClock starts a worker whose keepalive runs on clock (see
// heartClock) and stops it when the spec ends.
func (e *env) startWithClock(pool *redis.Pool, cfg *worqr.WorkerConfig, clock *heartClock) *worqr.Worker {
	GinkgoHelper()
	return e.startCtx(seam.WithHeartbeatClock(context.Background(), clock.ManualClock), pool, cfg)
}

// startCtx starts a worker with ctx given to Start: the worker stops when
// ctx ends, so ctx must outlive the worker's use in the spec.
func (e *env) startCtx(ctx context.Context, pool *redis.Pool, cfg *worqr.WorkerConfig) *worqr.Worker {
	GinkgoHelper()
	var conns worqr.ConnGetter = e.served
	if pool != nil {
		conns = served(pool)
	}
	w, err := worqr.NewWorker(conns, cfg)
	Expect(err).NotTo(HaveOccurred())
	Expect(w.Start(ctx)).To(Succeed())
	DeferCleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return w
}

// heartClock is the keepalive clock of one in-process worker (given to
// Start through the test seam). It keeps time like the system clock, one
// interval per interval of real time, until freeze: from then on the
// worker's keepalive is never renewed, as if its process were frozen, while
// everything else in it runs. thaw moves the clock by jump at once (the time
// the process was "frozen") and lets it run again.
type heartClock struct {
	*seam.ManualClock
	mu     sync.Mutex
	frozen bool
}

func newHeartClock(interval time.Duration) *heartClock {
	c := &heartClock{ManualClock: seam.NewManualClock(time.Now())}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			c.mu.Lock()
			if !c.frozen {
				c.Advance(interval)
			}
			c.mu.Unlock()
		}
	}()
	DeferCleanup(func() { close(done) })
	return c
}

// freeze stops the clock: once it returns, no beat is sent any more.
func (c *heartClock) freeze() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen = true
}

// thaw moves the clock by jump and lets it run again.
func (c *heartClock) thaw(jump time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen = false
	c.Advance(jump)
}

// numsub is the number of subscribers of a channel.
func (e *env) numsub(channel string) int {
	GinkgoHelper()
	v, err := redis.Values(e.do("PUBSUB", "NUMSUB", channel))
	Expect(err).NotTo(HaveOccurred())
	n, err := redis.Int(v[1], nil)
	Expect(err).NotTo(HaveOccurred())
	return n
}

// recorder collects a worker's events.
type recorder struct {
	mu     sync.Mutex
	events []worqr.Event
}

// on records e, but for EventStarted (one per run): the specs check how runs
// end; the live-events specs check the starts.
func (r *recorder) on(e worqr.Event) {
	if e.Kind == worqr.EventStarted {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) all() []worqr.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]worqr.Event(nil), r.events...)
}

// kinds returns the kinds of the events about task id, in order.
func (r *recorder) kinds(id string) []worqr.EventKind {
	var out []worqr.EventKind
	for _, e := range r.all() {
		if e.TaskID == id {
			out = append(out, e.Kind)
		}
	}
	return out
}

func (r *recorder) count(kind worqr.EventKind) int {
	n := 0
	for _, e := range r.all() {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// trail records the order in which handlers saw tasks.
type trail struct {
	mu    sync.Mutex
	items []string
}

func (l *trail) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.items = append(l.items, s)
}

func (l *trail) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.items...)
}

// gate is a channel closed once, by the spec or at cleanup, so that a
// blocked handler never outlives its spec.
type gate struct {
	once sync.Once
	ch   chan struct{}
}

func newGate() *gate {
	g := &gate{ch: make(chan struct{})}
	DeferCleanup(g.open)
	return g
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// recordingHandler logs each task id it sees and returns nil at once.
func recordingHandler(l *trail) worqr.Handler {
	return worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
		l.add(t.ID)
		return nil
	})
}

func one(h worqr.Handler, concurrency int) worqr.QueueConfig {
	return worqr.QueueConfig{Handler: h, Concurrency: concurrency}
}

// holdUntilDone is a handler that reports each task it starts on started,
// runs until its context ends, and reports the context's cause on causes.
func holdUntilDone(started chan<- string, causes chan<- error) worqr.Handler {
	return worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
		started <- t.ID
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	})
}
