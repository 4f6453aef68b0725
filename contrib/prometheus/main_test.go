package prometheus_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/redisconn"

	"github.com/gomodule/redigo/redis"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/xid"

	"github.com/worqr/worqr-go/worqr"
)

// The tests run against a real redis-server: TestMain starts a private one
// (or uses WORQR_TEST_REDIS_URL), with internal/redistest.
var redisURL string

// childEnv, when set ("<redis url> <namespace> <queue>"), makes the test
// binary a worker process that takes tasks of queue and never finishes
// them, until it is killed (see TestRecoveryMetrics).
const childEnv = "WORQR_PROM_TEST_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(child(spec))
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	srv, err := redistest.Start() // or the server WORQR_TEST_REDIS_URL names
	if err != nil {
		fmt.Fprintln(os.Stderr, "redis:", err)
		return 2
	}
	defer srv.Stop()
	redisURL = srv.URL
	// The examples read the server's address as a program would.
	os.Setenv("WORQR_REDIS_URL", srv.URL)
	return m.Run()
}

// child serves one queue with a handler that blocks until the process is
// killed.
func child(spec string) int {
	f := strings.Fields(spec)
	if len(f) != 3 {
		fmt.Fprintln(os.Stderr, "bad", childEnv, spec)
		return 2
	}
	pool, err := redisconn.NewPool(f[0], nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{
		Config:            worqr.Config{Namespace: f[1], EventInterval: 20 * time.Millisecond},
		HeartbeatInterval: 100 * time.Millisecond, HeartbeatTTL: 500 * time.Millisecond,
		DisableReaper: true,
		Queues: map[string]worqr.QueueConfig{f[2]: {Concurrency: 1, Handler: worqr.HandlerFunc(
			func(ctx context.Context, _ *worqr.Task) error { select {} })}},
	})
	if err == nil {
		err = w.Start(context.Background())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	select {}
}

// env is one test's namespace, with a client and an inspector on it.
type env struct {
	t      *testing.T
	ns     string
	pool   *redis.Pool
	cfg    worqr.Config
	client *worqr.Client
	in     *worqr.Inspector
}

func setup(t *testing.T) *env {
	t.Helper()
	t.Parallel()
	pool, err := redisconn.NewPool(redisURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	ns := "promtest-" + xid.New().String()
	cfg := worqr.Config{Namespace: ns, EventInterval: 20 * time.Millisecond}
	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = in.DeleteNamespace(context.Background()) })
	return &env{t: t, ns: ns, pool: pool, cfg: cfg, client: client, in: in}
}

// worker starts a worker of the namespace on queues; it is stopped at the
// end of the test.
func (e *env) worker(queues map[string]worqr.QueueConfig) *worqr.Worker {
	e.t.Helper()
	w, err := worqr.NewWorker(e.pool, &worqr.WorkerConfig{Config: e.cfg, Queues: queues,
		HeartbeatInterval: 100 * time.Millisecond, HeartbeatTTL: 500 * time.Millisecond,
		ReaperInterval: 100 * time.Millisecond, PollInterval: 100 * time.Millisecond})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return w
}

func (e *env) enqueue(queue string, opts *worqr.EnqueueOpts) string {
	e.t.Helper()
	id, err := e.client.Enqueue(context.Background(), queue, []byte("x"), opts)
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

// sample is one series of a gathered family: its value (gauge, counter),
// or its sample count and sum (histogram).
type sample struct {
	value, count, sum float64
}

// find gathers g (one scrape) and returns the series of family name whose
// labels include the pairs kv ("queue", "a", ...).
func find(t *testing.T, g prometheus.Gatherer, name string, kv ...string) (sample, bool) {
	t.Helper()
	return lookup(gather(t, g), name, kv...)
}

func gather(t *testing.T, g prometheus.Gatherer) []*dto.MetricFamily {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	return mfs
}

// lookup is find in gathered families.
func lookup(mfs []*dto.MetricFamily, name string, kv ...string) (sample, bool) {
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabels(m, kv) {
				continue
			}
			switch {
			case m.Gauge != nil:
				return sample{value: m.GetGauge().GetValue()}, true
			case m.Counter != nil:
				return sample{value: m.GetCounter().GetValue()}, true
			case m.Histogram != nil:
				h := m.GetHistogram()
				return sample{count: float64(h.GetSampleCount()), sum: h.GetSampleSum()}, true
			}
		}
	}
	return sample{}, false
}

func hasLabels(m *dto.Metric, kv []string) bool {
	for i := 0; i+1 < len(kv); i += 2 {
		ok := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == kv[i] && lp.GetValue() == kv[i+1] {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}
