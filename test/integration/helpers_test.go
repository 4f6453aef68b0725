package integration_test

import (
	"context"
	"fmt"
	"log/slog"
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
// connections check that every script call's KEYS share one hash tag), a
// client and direct access to the keys.
type env struct {
	ns     string
	pool   *redis.Pool
	keys   rdb.Keys
	client *worqr.Client
	logger *slog.Logger
	reg    *registry.Registry
}

func newEnv() *env {
	GinkgoHelper()
	e := &env{ns: redistest.Namespace()}
	e.pool = srv.TagCheckedPool(newTagWatch())
	e.keys = rdb.NewKeys(e.ns)
	e.reg = registry.New(e.pool, e.keys)
	e.logger = slog.New(slog.NewTextHandler(GinkgoWriter, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var err error
	e.client, err = worqr.NewClient(e.pool, &worqr.Config{Namespace: e.ns, Logger: e.logger})
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

// snapshot renders every key of the namespace (but the reaper lease, which
// live reapers rewrite on their own schedule) with its type and content.
func (e *env) snapshot() map[string]string {
	GinkgoHelper()
	out := map[string]string{}
	for _, k := range e.allKeys() {
		if k == e.keys.ReaperLease() {
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
	if pool == nil {
		pool = e.pool
	}
	return &recovery.Reaper{
		Pool: pool, Keys: e.keys, Registry: registry.New(pool, e.keys),
		Holder: "spec-" + xid.New().String(), Interval: time.Second, Logger: e.logger,
	}
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

// register lists a worker id the spec drives by hand (rdb.Take, rdb.Finish),
// alive for ttl, serving queues.
func (e *env) register(ttl time.Duration, queues ...string) string {
	GinkgoHelper()
	ctx, cancel := bg()
	defer cancel()
	id := "manual-" + xid.New().String()
	refs := make([]rdb.QueueRef, len(queues))
	for i, q := range queues {
		refs[i] = rdb.Standalone(q)
	}
	Expect(e.reg.Register(ctx, id, ttl, refs)).To(Succeed())
	return id
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
	c, err := e.pool.GetContext(ctx)
	Expect(err).NotTo(HaveOccurred())
	defer c.Close()
	got, err := rdb.Take(ctx, c, e.qk(queue), w, n, 0, false)
	Expect(err).NotTo(HaveOccurred())
	return got
}

// giveBack gives back hand-driven worker w's taking pid of task id.
func (e *env) giveBack(w, queue, pid, id string) (rdb.Outcome, error) {
	ctx, cancel := bg()
	defer cancel()
	c, err := e.pool.GetContext(ctx)
	if err != nil {
		return rdb.OutcomeLost, err
	}
	defer c.Close()
	return rdb.GiveBack(ctx, c, e.qk(queue), w, pid, id)
}

// finish finishes hand-driven worker w's taking pid of task id.
func (e *env) finish(w, queue, pid, id string) (rdb.Outcome, error) {
	ctx, cancel := bg()
	defer cancel()
	c, err := e.pool.GetContext(ctx)
	if err != nil {
		return rdb.OutcomeLost, err
	}
	defer c.Close()
	return rdb.Finish(ctx, c, e.qk(queue), w, pid, id, rdb.FinishArgs{})
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
	if pool == nil {
		pool = e.pool
	}
	w, err := worqr.NewWorker(pool, cfg)
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := bg()
	defer cancel()
	Expect(w.Start(ctx)).To(Succeed())
	DeferCleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return w
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

func (r *recorder) on(e worqr.Event) {
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
