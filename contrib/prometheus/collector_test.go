package prometheus_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	worqrprom "github.com/worqr/worqr-go/contrib/prometheus"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// register returns a registry holding a new collector on in.
func register(t *testing.T, in *worqr.Inspector, opts *worqrprom.Options) (*worqrprom.Collector, *prometheus.Registry) {
	t.Helper()
	c := worqrprom.NewCollector(in, opts)
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	return c, reg
}

// run starts c.Run until the end of the test, and waits until it follows
// the namespace's events (an Inspector's Resume of an unknown queue is seen).
func (e *env) run(c *worqrprom.Collector, reg prometheus.Gatherer) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				e.t.Errorf("Run returned %v, want nil", err)
			}
		case <-time.After(5 * time.Second):
			e.t.Error("Run did not return within 5s of its context's end")
		}
	})
	redistest.Eventually(e.t, 10*time.Second, func() string {
		if err := e.in.Resume(context.Background(), "probe"); err != nil {
			return err.Error()
		}
		if s, ok := find(e.t, reg, "worqr_events_total", "kind", "resumed"); !ok || s.value < 1 {
			return "the collector sees no event"
		}
		return ""
	})
	if err := c.Run(ctx); !errors.Is(err, worqrprom.ErrRunning) {
		e.t.Fatalf("a second Run returned %v, want ErrRunning", err)
	}
}

// want compares a gathered value.
type want struct {
	name string
	kv   []string
	v    float64
}

// mismatch scrapes g once and describes the first value of ws it does not
// hold ("" when all match).
func mismatch(t *testing.T, g prometheus.Gatherer, ws []want) string {
	t.Helper()
	mfs := gather(t, g)
	for _, w := range ws {
		s, ok := lookup(mfs, w.name, w.kv...)
		if !ok {
			return fmt.Sprintf("%s%v: absent, want %v", w.name, w.kv, w.v)
		}
		got := s.value
		if strings.HasSuffix(w.name, "_seconds") {
			got = s.count
		}
		if got != w.v {
			return fmt.Sprintf("%s%v = %v, want %v", w.name, w.kv, got, w.v)
		}
	}
	return ""
}

func TestQueueGauges(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	release := make(chan struct{})
	e.worker(map[string]worqr.QueueConfig{
		"busy": {Concurrency: 1, Handler: worqr.HandlerFunc(func(ctx context.Context, _ *worqr.Task) error {
			<-release
			return nil
		})},
		"broken": {Concurrency: 2, MaxAttempts: 1, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
			return errors.New("boom")
		})},
	})
	t.Cleanup(func() { close(release) }) // before the worker's Stop
	e.enqueue("busy", nil)
	e.enqueue("broken", nil)
	e.enqueue("broken", nil)
	for range 3 {
		e.enqueue("waiting", nil)
	}
	e.enqueue("later", &worqr.EnqueueOpts{Delay: time.Hour})
	e.enqueue("later", &worqr.EnqueueOpts{Delay: time.Hour})
	e.enqueue("held", nil)
	if err := e.in.Pause(ctx, "held"); err != nil {
		t.Fatal(err)
	}

	c, reg := register(t, e.in, nil)
	ws := []want{
		{"worqr_queue_active", []string{"queue", "busy"}, 1},
		{"worqr_queue_waiting", []string{"queue", "busy"}, 0},
		{"worqr_queue_dead", []string{"queue", "broken"}, 2},
		{"worqr_queue_waiting", []string{"queue", "waiting"}, 3},
		{"worqr_queue_scheduled", []string{"queue", "later"}, 2},
		{"worqr_queue_waiting", []string{"queue", "later"}, 0},
		{"worqr_queue_paused", []string{"queue", "held"}, 1},
		{"worqr_queue_paused", []string{"queue", "waiting"}, 0},
		{"worqr_queue_waiting", []string{"queue", "held"}, 1},
		{"worqr_queue_latency_seconds", []string{"queue", "later"}, 0},
		{"worqr_workers_registered", nil, 1},
		{"worqr_workers_alive", nil, 1},
		{"worqr_up", nil, 1},
	}
	redistest.Eventually(t, 10*time.Second, func() string {
		if m := mismatch(t, reg, ws); m != "" {
			return m
		}
		// Task ids carry their enqueue time to the second: within two
		// seconds the oldest waiting task is at least a second old.
		if s, ok := find(t, reg, "worqr_queue_latency_seconds", "queue", "waiting"); !ok || s.value < 1 || s.value > 60 {
			return fmt.Sprintf("latency of waiting = %v (present %v), want between 1s and 60s", s.value, ok)
		}
		return ""
	})
	if n := testutil.CollectAndCount(c, "worqr_queue_waiting"); n != 5 {
		t.Errorf("%d worqr_queue_waiting series, want 5 (busy, broken, waiting, later, held)", n)
	}
	if _, ok := find(t, reg, "worqr_scrape_errors_total"); ok {
		t.Error("worqr_scrape_errors_total present after scrapes that read Redis")
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP worqr_queue_dead Tasks in the queue's dead set.
# TYPE worqr_queue_dead gauge
worqr_queue_dead{queue="broken"} 2
worqr_queue_dead{queue="busy"} 0
worqr_queue_dead{queue="held"} 0
worqr_queue_dead{queue="later"} 0
worqr_queue_dead{queue="waiting"} 0
`), "worqr_queue_dead"); err != nil {
		t.Error(err)
	}
}

// A handler that hangs on the head of a key: worqr_queue_behind counts the
// tasks waiting behind it (worqr_queue_waiting shows 0), and
// worqr_queue_oldest_active_seconds grows from its start; both are 0 for a
// queue with nothing behind and nothing running.
func TestStuckWorkGauges(t *testing.T) {
	e := setup(t)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	e.worker(map[string]worqr.QueueConfig{
		"orders": {Concurrency: 1, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
			started <- struct{}{}
			<-release
			return nil
		})},
	})
	t.Cleanup(func() { close(release) }) // before the worker's Stop
	for range 3 {
		e.enqueue("orders", &worqr.EnqueueOpts{Key: "customer-7"})
	}
	e.enqueue("idle", nil)
	<-started
	_, reg := register(t, e.in, nil)
	ws := []want{
		{"worqr_queue_waiting", []string{"queue", "orders"}, 0},
		{"worqr_queue_behind", []string{"queue", "orders"}, 2},
		{"worqr_queue_active", []string{"queue", "orders"}, 1},
		{"worqr_queue_behind", []string{"queue", "idle"}, 0},
	}
	var first float64
	redistest.Eventually(t, 10*time.Second, func() string {
		if m := mismatch(t, reg, ws); m != "" {
			return m
		}
		s, ok := find(t, reg, "worqr_queue_oldest_active_seconds", "queue", "orders")
		if !ok || s.value <= 0 {
			return fmt.Sprintf("oldest active of orders = %v (present %v), want > 0", s.value, ok)
		}
		first = s.value
		return ""
	})
	if s, ok := find(t, reg, "worqr_queue_oldest_active_seconds", "queue", "idle"); !ok || s.value != 0 {
		t.Errorf("oldest active of idle = %v (present %v), want 0", s.value, ok)
	}
	// It grows while the handler hangs.
	redistest.Eventually(t, 10*time.Second, func() string {
		if s, _ := find(t, reg, "worqr_queue_oldest_active_seconds", "queue", "orders"); s.value <= first {
			return fmt.Sprintf("oldest active of orders = %v, not past %v", s.value, first)
		}
		return ""
	})
}

// A fair queue: worqr_queue_waiting counts the tasks in its keys' lists,
// worqr_queue_keys its keys with tasks waiting (one series per queue), and
// worqr_queue_latency_seconds the age of the oldest of them; a queue
// without keys shows 0 keys.
func TestFairQueueGauges(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	if err := e.client.SetKeyPolicy(ctx, "tenants", worqr.KeyPolicy{Fair: true}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"acme", "beta", "acme"} {
		e.enqueue("tenants", &worqr.EnqueueOpts{Key: k})
	}
	e.enqueue("plain", nil)
	_, reg := register(t, e.in, nil)
	ws := []want{
		{"worqr_queue_waiting", []string{"queue", "tenants"}, 3},
		{"worqr_queue_keys", []string{"queue", "tenants"}, 2},
		{"worqr_queue_keys", []string{"queue", "plain"}, 0},
	}
	redistest.Eventually(t, 10*time.Second, func() string { return mismatch(t, reg, ws) })
	redistest.Eventually(t, 10*time.Second, func() string {
		if s, ok := find(t, reg, "worqr_queue_latency_seconds", "queue", "tenants"); !ok || s.value < 0.02 {
			return fmt.Sprintf("worqr_queue_latency_seconds of the fair queue: %+v (found %v), want it to grow past 0.02", s, ok)
		}
		return ""
	})
}

func TestScrapeErrorWhenRedisIsDown(t *testing.T) {
	t.Parallel()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	pool, err := redisconn.NewPool(fmt.Sprintf("redis://127.0.0.1:%d", port), &redisconn.Options{ConnectTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: "down"})
	if err != nil {
		t.Fatal(err)
	}
	c, reg := register(t, in, &worqrprom.Options{ScrapeTimeout: 2 * time.Second, Logger: quiet})
	for i := 1; i <= 2; i++ {
		if m := mismatch(t, reg, []want{ // find fails the test if Gather fails
			{"worqr_up", nil, 0},
			{"worqr_scrape_errors_total", []string{"source", "queues"}, float64(i)},
			{"worqr_scrape_errors_total", []string{"source", "workers"}, float64(i)},
		}); m != "" {
			t.Fatalf("scrape %d: %s", i, m)
		}
	}
	for _, name := range []string{"worqr_queue_waiting", "worqr_workers_alive", "worqr_workers_registered"} {
		if n := testutil.CollectAndCount(c, name); n != 0 {
			t.Errorf("%d %s series while Redis is down, want none", n, name)
		}
	}
}

func TestScrapeTimeout(t *testing.T) {
	t.Parallel()
	// A server that accepts connections and never answers.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	pool, err := redisconn.NewPool("redis://"+l.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: "hang"})
	if err != nil {
		t.Fatal(err)
	}
	_, reg := register(t, in, &worqrprom.Options{ScrapeTimeout: 300 * time.Millisecond, Logger: quiet})
	type result struct {
		mfs []*dto.MetricFamily
		err error
	}
	done := make(chan result, 1)
	go func() {
		mfs, err := reg.Gather()
		done <- result{mfs, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if s, ok := lookup(r.mfs, "worqr_up"); !ok || s.value != 0 {
			t.Errorf("worqr_up = %v (present %v), want 0", s.value, ok)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the scrape took over 3s with ScrapeTimeout 300ms")
	}
}

func TestEventMetrics(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	c, reg := register(t, e.in, nil)
	e.run(c, reg)

	e.worker(map[string]worqr.QueueConfig{
		"ok": {Concurrency: 2, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
			time.Sleep(30 * time.Millisecond)
			return nil
		})},
		"fail": {Concurrency: 2, MaxAttempts: 2,
			Backoff: func(int, error) time.Duration { return 10 * time.Millisecond },
			Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return errors.New("boom") })},
	})
	for range 3 {
		e.enqueue("ok", nil)
	}
	if _, err := e.client.EnqueueBatch(ctx, "ok", [][]byte{{1}, {2}, {3}, {4}}, nil); err != nil {
		t.Fatal(err)
	}
	e.enqueue("fail", nil)
	e.enqueue("fail", nil)
	id := e.enqueue("idle", nil) // nobody serves it: cancelled while waiting
	if st, err := e.client.Cancel(ctx, "idle", id); err != nil || st != worqr.CancelRemoved {
		t.Fatalf("Cancel = %v, %v", st, err)
	}

	proc := func(q, outcome string) []string {
		return []string{"queue", q, "messaging_operation_name", "process", "outcome", outcome}
	}
	ws := []want{
		{"messaging_client_sent_messages_total", []string{"queue", "ok", "messaging_operation_name", "send"}, 7},
		{"messaging_client_sent_messages_total", []string{"queue", "fail"}, 2},
		{"messaging_client_sent_messages_total", []string{"queue", "idle"}, 1},
		{"messaging_client_consumed_messages_total", proc("ok", "done"), 7},
		{"messaging_client_consumed_messages_total", proc("fail", "retry"), 2},
		{"messaging_client_consumed_messages_total", proc("fail", "dead"), 2},
		{"messaging_process_duration_seconds", proc("ok", "done"), 7},
		{"messaging_process_duration_seconds", proc("fail", "retry"), 2},
		{"messaging_process_duration_seconds", proc("fail", "dead"), 2},
		{"worqr_task_wait_seconds", []string{"queue", "ok"}, 3},   // single enqueues only
		{"worqr_task_wait_seconds", []string{"queue", "fail"}, 2}, // first starts only
		{"worqr_events_total", []string{"kind", "started"}, 11},
		{"worqr_collector_tracked", []string{"map", "started"}, 0},
		{"worqr_collector_tracked", []string{"map", "enqueued"}, 0}, // the cancelled one too
		// the batch's starts: a batch's enqueue event carries no task ids
		{"worqr_collector_tracked", []string{"map", "early_start"}, 4},
	}
	redistest.Eventually(t, 15*time.Second, func() string { return mismatch(t, reg, ws) })

	if s, _ := find(t, reg, "messaging_process_duration_seconds", proc("ok", "done")...); s.sum < 7*0.025 {
		t.Errorf("handler durations of ok sum to %.3fs, want at least 7 x 30ms", s.sum)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP messaging_client_consumed_messages_total Takings ended by workers (OTel messaging.client.consumed.messages), by queue and outcome.
# TYPE messaging_client_consumed_messages_total counter
messaging_client_consumed_messages_total{messaging_operation_name="process",messaging_system="worqr",outcome="dead",queue="fail"} 2
messaging_client_consumed_messages_total{messaging_operation_name="process",messaging_system="worqr",outcome="retry",queue="fail"} 2
messaging_client_consumed_messages_total{messaging_operation_name="process",messaging_system="worqr",outcome="done",queue="ok"} 7
`), "messaging_client_consumed_messages_total"); err != nil {
		t.Error(err)
	}
	for _, name := range []string{"worqr_recoveries_total", "worqr_recovered_tasks_total", "worqr_events_dropped_total"} {
		if s, ok := find(t, reg, name); ok && s.value != 0 {
			t.Errorf("%s = %v without a recovery or a drop", name, s.value)
		}
	}
}

func TestRecoveryMetrics(t *testing.T) {
	e := setup(t)
	c, reg := register(t, e.in, nil)
	e.run(c, reg)

	// A worker process takes the task and is killed while running it.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+redisURL+" "+e.ns+" crash")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	e.enqueue("crash", nil)
	redistest.Eventually(t, 10*time.Second, func() string {
		return mismatch(t, reg, []want{{"worqr_collector_tracked", []string{"map", "started"}, 1}})
	})
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	// A peer's reaper requeues it; the peer then runs it.
	e.worker(map[string]worqr.QueueConfig{"crash": {Concurrency: 1, Handler: worqr.HandlerFunc(
		func(context.Context, *worqr.Task) error { return nil })}})
	redistest.Eventually(t, 15*time.Second, func() string {
		return mismatch(t, reg, []want{
			{"worqr_recovered_tasks_total", []string{"queue", "crash"}, 1},
			{"worqr_recoveries_total", []string{"queue", "crash"}, 1},
			{"worqr_recovery_delay_seconds", nil, 1},
			{"messaging_client_consumed_messages_total", []string{"queue", "crash", "outcome", "done"}, 1},
			{"messaging_process_duration_seconds", []string{"queue", "crash", "outcome", "done"}, 1},
			{"worqr_task_wait_seconds", []string{"queue", "crash"}, 1}, // the restart is no first start
			// the dead worker's start was dropped, the peer's ended
			{"worqr_collector_tracked", []string{"map", "started"}, 0},
		})
	})
	// The child's keepalive (TTL 500ms) outlived it by at least 400ms.
	if s, _ := find(t, reg, "worqr_recovery_delay_seconds"); s.sum < 0.4 {
		t.Errorf("recovery delay %.3fs, want at least 0.4s", s.sum)
	}
}

// freePort returns a loopback port nothing listens on (now).
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// One label names the queue on every metric, so that the gauges read at
// scrape time and the counters and histograms of the events join by it
// (rate(messaging_client_sent_messages_total[5m]) / worqr_queue_waiting):
// the messaging_* metrics named it messaging_destination_name, the
// worqr_* ones queue.
func TestOneLabelNamesTheQueue(t *testing.T) {
	e := setup(t)
	c, reg := register(t, e.in, nil)
	e.run(c, reg)
	e.worker(map[string]worqr.QueueConfig{"labelled": {Concurrency: 1,
		Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil })}})
	e.enqueue("labelled", nil)
	families := []string{"worqr_queue_waiting", "worqr_task_wait_seconds", "messaging_client_sent_messages_total",
		"messaging_client_consumed_messages_total", "messaging_process_duration_seconds"}
	redistest.Eventually(t, 15*time.Second, func() string {
		mfs := gather(t, reg)
		for _, name := range families {
			found := false
			for _, mf := range mfs {
				found = found || mf.GetName() == name && len(mf.GetMetric()) > 0
			}
			if !found {
				return name + " has no series yet"
			}
		}
		return ""
	})
	seen := map[string]bool{}
	var wrong []string
	for _, mf := range gather(t, reg) {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetValue() != "labelled" {
					continue
				}
				if lp.GetName() != "queue" {
					wrong = append(wrong, mf.GetName()+"{"+lp.GetName()+"}")
				} else {
					seen[mf.GetName()] = true
				}
			}
		}
	}
	if len(wrong) > 0 {
		sort.Strings(wrong)
		t.Errorf("the queue is labelled other than queue on %s", strings.Join(wrong, ", "))
	}
	for _, name := range families {
		if !seen[name] {
			t.Errorf("%s does not name the queue with the label queue", name)
		}
	}
}

// seriesOf returns the families that have a series labelled queue=name.
func seriesOf(t *testing.T, reg prometheus.Gatherer, name string) []string {
	t.Helper()
	var out []string
	for _, mf := range gather(t, reg) {
		for _, m := range mf.GetMetric() {
			if hasLabels(m, []string{"queue", name}) {
				out = append(out, mf.GetName())
				break
			}
		}
	}
	return out
}

// A queue removed with Inspector.RemoveQueue stops being exported: its
// gauges (read from the known queues) and the series its events made
// (counters and histograms kept by Run) are gone from the next scrape on;
// another queue's stay.
func TestRemovedQueueIsNotExported(t *testing.T) {
	e := setup(t)
	c, reg := register(t, e.in, nil)
	e.run(c, reg)
	ok := worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil })
	w := e.worker(map[string]worqr.QueueConfig{"gone": {Concurrency: 1, Handler: ok}, "kept": {Concurrency: 1, Handler: ok}})
	e.enqueue("gone", nil)
	e.enqueue("kept", nil)
	families := []string{"worqr_queue_waiting", "worqr_task_wait_seconds", "messaging_client_sent_messages_total",
		"messaging_client_consumed_messages_total", "messaging_process_duration_seconds"}
	redistest.Eventually(t, 15*time.Second, func() string {
		for _, q := range []string{"gone", "kept"} {
			if got := strings.Join(seriesOf(t, reg, q), " "); len(seriesOf(t, reg, q)) < len(families) {
				return q + " has only the series " + got
			}
		}
		return ""
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.in.RemoveQueue(context.Background(), "gone", nil); err != nil {
		t.Fatal(err)
	}
	if got := seriesOf(t, reg, "gone"); len(got) > 0 {
		t.Errorf("the removed queue is still exported in %v", got)
	}
	if got := seriesOf(t, reg, "kept"); len(got) < len(families) {
		t.Errorf("the other queue lost series: it has %v", got)
	}
}
