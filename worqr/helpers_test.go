package worqr_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/internal/seam"
	"github.com/worqr/worqr-go/worqr"
)

// The helpers shared by this package's test files: a checked constructor
// of each long-lived type, a worker started for a test and stopped at its
// end, the one polling wait (wait), the remote bundle, and the small
// builders several files use (batches, big payloads, a hand-off env).

// newInspector returns an Inspector on pool with cfg (in most tests, the
// config of the Client whose tasks it reads), and fails t if it cannot.
func newInspector(t testing.TB, pool worqr.ConnGetter, cfg *worqr.Config) *worqr.Inspector {
	t.Helper()
	in, err := worqr.NewInspector(redistest.Served(t, pool), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// queueLen returns how many tasks wait in queue (Inspector.Queue's
// Waiting), and fails t if it cannot read it.
func queueLen(t testing.TB, in *worqr.Inspector, queue string) int {
	t.Helper()
	qi, err := in.Queue(context.Background(), queue)
	if err != nil {
		t.Fatal(err)
	}
	return int(qi.Waiting)
}

// startWorker starts a worker for the test and stops it at the end.
func startWorker(t *testing.T, ctx context.Context, pool worqr.ConnGetter, cfg *worqr.WorkerConfig) *worqr.Worker {
	t.Helper()
	w, err := worqr.NewWorker(redistest.Served(t, pool), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})
	return w
}

// wait polls cond every 10ms until it holds or d passes.
func wait(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !redistest.Within(d, cond) {
		t.Fatalf("timed out after %s waiting for %s", d, what)
	}
}

// within returns the next value of ch, or fails t after 10 s waiting for
// what.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out after 10s waiting for %s", what)
	}
	var zero T
	return zero
}

// Fast timings for the limit tests: a dead worker's takings are requeued
// within about 700ms.
func fastTimings(ns string) worqr.WorkerConfig {
	return worqr.WorkerConfig{Config: worqr.Config{Namespace: ns}, HeartbeatInterval: 100 * time.Millisecond,
		HeartbeatTTL: 500 * time.Millisecond, ReaperInterval: 100 * time.Millisecond, PollInterval: 200 * time.Millisecond}
}

// waitHistory polls queue's history (the last 3 minutes, summed) until
// ok accepts it, or fails the test after 20 s.
func waitHistory(t *testing.T, in *worqr.Inspector, queue string, ok func(worqr.Throughput) bool) worqr.Throughput {
	t.Helper()
	var sum worqr.Throughput
	wait(t, 20*time.Second, "the history of "+queue+" to match", func() bool {
		h, err := in.History(context.Background(), queue, 3)
		if err != nil {
			t.Fatal(err)
		}
		sum = worqr.Throughput{}
		for _, m := range h {
			sum.Enqueued += m.Enqueued
			sum.Done += m.Done
			sum.Retried += m.Retried
			sum.Dead += m.Dead
			sum.Cancelled += m.Cancelled
			sum.Expired += m.Expired
			sum.Recovered += m.Recovered
		}
		return ok(sum)
	})
	return sum
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// bundle is what a test of this package starts from (see setup): each
// test states only what differs.
type bundle struct {
	t      *testing.T
	pool   *redis.Pool
	ns     string       // a namespace of the test's own
	cfg    worqr.Config // Namespace: ns; the config of client and in
	client *worqr.Client
	in     *worqr.Inspector
	events *eventRecorder // what workers started by startWorker emit
}

// setup gives t a pool on the test server, a fresh namespace, a client and
// an inspector on it and an event recorder; it fails t if one cannot be
// made, and closes the pool at the end of t.
func setup(t *testing.T) *bundle {
	t.Helper()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	b := &bundle{t: t, pool: pool, ns: redistest.Namespace(), events: newEventRecorder()}
	b.cfg = worqr.Config{Namespace: b.ns}
	b.client = newClient(t, pool, &b.cfg)
	b.in = newInspector(t, pool, &b.cfg)
	return b
}

// startWorker starts a worker with cfg on the bundle's pool (in its
// namespace when cfg names none; its events recorded in b.events when cfg
// has no OnEvent), fails the test if it cannot, and stops it at the end of
// the test.
func (b *bundle) startWorker(cfg worqr.WorkerConfig) *worqr.Worker {
	b.t.Helper()
	if cfg.Namespace == "" {
		cfg.Namespace = b.ns
	}
	if cfg.OnEvent == nil {
		cfg.OnEvent = b.events.record
	}
	return startWorker(b.t, context.Background(), b.pool, &cfg)
}

// eventRecorder keeps the events given to record (a worker's OnEvent), in
// order, and wakes who waits for one.
type eventRecorder struct {
	mu   sync.Mutex
	evs  []worqr.Event
	more chan struct{} // closed, and replaced, at each event
}

func newEventRecorder() *eventRecorder { return &eventRecorder{more: make(chan struct{})} }

func (r *eventRecorder) record(e worqr.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, e)
	close(r.more)
	r.more = make(chan struct{})
}

// waitFor returns the first event recorded for which match holds, waiting
// up to d for it, and fails t if none comes.
// all returns the events recorded so far.
func (r *eventRecorder) all() []worqr.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]worqr.Event(nil), r.evs...)
}

func (r *eventRecorder) waitFor(t testing.TB, d time.Duration, what string, match func(worqr.Event) bool) worqr.Event {
	t.Helper()
	timeout := time.After(d)
	for seen := 0; ; {
		r.mu.Lock()
		evs, more := r.evs[seen:], r.more
		r.mu.Unlock()
		for _, e := range evs {
			if match(e) {
				return e
			}
		}
		seen += len(evs)
		select {
		case <-more:
		case <-timeout:
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
	}
}

// newClient returns a Client on pool with cfg, and fails t if it cannot.
func newClient(t testing.TB, pool worqr.ConnGetter, cfg *worqr.Config) *worqr.Client {
	t.Helper()
	c, err := worqr.NewClient(redistest.Served(t, pool), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waited is what a wait started by waiting returned.
type waited[T any] struct {
	v   T
	err error
}

// waiting runs wait in the background under a manual clock (returned: only
// the test moves it) and returns once wait read what it waits for a first
// time (the HLEN of Store.Tasks through pool, or the HSCAN that reads a run) without
// returning: from then on, only an event or the clock can wake it.
func waiting[T any](ctx context.Context, t *testing.T, pool *cmdPool, wait func(context.Context) (T, error)) (*seam.ManualClock, <-chan waited[T]) {
	t.Helper()
	clock := seam.NewManualClock(time.Now())
	out := make(chan waited[T], 1)
	read := func() int { return pool.count("HLEN") + pool.count("HSCAN") }
	reads := read()
	go func() {
		v, err := wait(seam.WithHeartbeatClock(ctx, clock))
		out <- waited[T]{v, err}
	}()
	for read() == reads {
		select {
		case w := <-out:
			t.Fatalf("the wait returned (%v, %v) before what it waits for ended", w.v, w.err)
		case <-ctx.Done():
			t.Fatal("the wait never read what it waits for")
		case <-time.After(time.Millisecond):
		}
	}
	return clock, out
}

// batchPayloads returns n small payloads: an EnqueueBatch of them is split
// into steps of 250 tasks (packed), sixteen on the wire at once.
func batchPayloads(n int) [][]byte {
	ps := make([][]byte, n)
	for i := range ps {
		ps[i] = []byte(strconv.Itoa(i))
	}
	return ps
}

// checkBatchError checks what a *BatchError says against the queue: the
// first Enqueued payloads are in, in order, and none after them (the
// promise of BatchError: of the rest, at most the step that failed, and
// here it is known).
func checkBatchError(t *testing.T, in *worqr.Inspector, queue string, ps [][]byte, ids []string, err error) {
	t.Helper()
	var be *worqr.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("EnqueueBatch: %v; want a *BatchError", err)
	}
	if len(ids) != be.Enqueued {
		t.Fatalf("%d ids returned, BatchError.Enqueued %d", len(ids), be.Enqueued)
	}
	n := queueLen(t, in, queue)
	if n != be.Enqueued {
		t.Fatalf("%d tasks in the queue, BatchError says %d of %d enqueued (%v): a retry of the rest, as the error advises, enqueues %d twice",
			n, be.Enqueued, be.Total, be.Err, n-be.Enqueued)
	}
	if n == 0 {
		return
	}
	infos, _, perr := in.Tasks(context.Background(), queue, worqr.StateQueued, 0, n)
	if perr != nil {
		t.Fatal(perr)
	}
	for i, info := range infos {
		if string(info.Payload) != string(ps[i]) {
			t.Fatalf("task %d of the queue has payload %q, want %q (the first payloads, in order)", i, info.Payload, ps[i])
		}
	}
}

// oneCallBatch is an EnqueueBatch that goes in one call of script.
type oneCallBatch struct {
	name, script string
	opts         *worqr.EnqueueOpts
}

func oneCallBatches() []oneCallBatch {
	return []oneCallBatch{
		{"payloads only", "enqueue_hand", nil},
		{"with a deadline", "enqueue", &worqr.EnqueueOpts{Deadline: time.Now().Add(time.Hour)}},
	}
}

// bigCalls is a pool on base that records the biggest command sent with
// Do (by the bytes of its arguments) and holds the first two commands of at
// least size bytes (a group's calls in flight) until hold is closed, so
// that the calls behind them queue up in their group. held counts the
// arguments of size bytes or more of the commands it holds (the items of
// the held group calls).
type bigCalls struct {
	*redistest.HookPool
	calls, biggest atomic.Int64
	held           atomic.Int64
	hold           chan struct{}
}

func newBigCalls(base *redis.Pool, size int) *bigCalls {
	p := &bigCalls{hold: make(chan struct{})}
	p.HookPool = &redistest.HookPool{Pool: base, Done: func(c redis.Conn, cmd string, args []any, r any, err error) (any, error) {
		b, big := 0, 0
		for _, a := range args {
			n := 0
			switch v := a.(type) {
			case []byte:
				n = len(v)
			case string:
				n = len(v)
			}
			b += n
			if n >= size {
				big++
			}
		}
		if b < size {
			return r, err
		}
		for {
			old := p.biggest.Load()
			if int64(b) <= old || p.biggest.CompareAndSwap(old, int64(b)) {
				break
			}
		}
		if p.calls.Add(1) <= 2 {
			p.held.Add(int64(big))
			<-p.hold
		}
		return r, err
	}}
	return p
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// handEnv is a pool on the test server, a connection, a config of a new
// namespace and the keys of its queue "q" (all closed after the test).
func handEnv(t *testing.T) (*redis.Pool, redis.Conn, worqr.Config, rdb.QueueKeys) {
	t.Helper()
	pool := srv.Pool()
	c := pool.Get()
	t.Cleanup(func() { c.Close(); pool.Close() })
	cfg := worqr.Config{Namespace: redistest.Namespace()}
	return pool, c, cfg, rdb.NewKeys(cfg.Namespace).Queue(rdb.Standalone("q"))
}
