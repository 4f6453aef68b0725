// Package prometheus exports the state and the activity of a worqr namespace
// as Prometheus metrics.
//
// It is a module of its own (github.com/worqr/worqr-go/contrib/prometheus),
// so an application that uses worqr without it never inherits the Prometheus
// client. A [Collector] does two things:
//
//   - at every scrape it reads the current counts through a worqr.Inspector
//     (tasks waiting, behind their key's head, scheduled, active and dead per
//     queue, the keys with tasks of an ordered or fair queue, pauses, the
//     age of the oldest waiting task and of the oldest active one, workers
//     registered and alive); when Redis
//     cannot be read within Options.ScrapeTimeout it reports worqr_up 0 and
//     counts the failure instead of failing the scrape;
//   - [Collector.Run] follows the live events of every process of the
//     namespace (worqr.Inspector.Follow) and keeps counters and histograms:
//     tasks enqueued and processed by outcome, handler duration, wait from
//     enqueue to start, recoveries.
//
// Metric names follow the OpenTelemetry messaging semantic conventions
// translated to Prometheus where they fit (messaging_client_sent_messages_total,
// messaging_client_consumed_messages_total, messaging_process_duration_seconds);
// the others are prefixed worqr_. Every metric of a queue names it with the
// label queue, so that all of them join by it. README.md (in this
// directory) lists them all.
package prometheus

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/worqr/worqr-go/worqr"
)

// Options tune a Collector. A nil *Options means all defaults, and so does
// a zero or negative ScrapeTimeout, MaxTracked or ReorderWindow for that
// field (NewCollector returns no error).
type Options struct {
	// ScrapeTimeout bounds the Redis reads of one scrape. Default 5s.
	ScrapeTimeout time.Duration
	// MaxTracked bounds each of the maps Run keeps to pair events (tasks
	// enqueued and not yet started, takings started and not yet ended):
	// beyond it the oldest entry is evicted (counted in
	// worqr_collector_evicted_total). Default 100,000.
	MaxTracked int
	// ReorderWindow is how long Run keeps a start whose enqueue event has
	// not arrived yet (events of different processes arrive in batches, in
	// any order between processes). Default 1 minute.
	ReorderWindow time.Duration
	// ProcessBuckets, WaitBuckets and RecoveryBuckets are the bucket upper
	// bounds (seconds) of messaging_process_duration_seconds,
	// worqr_task_wait_seconds and worqr_recovery_delay_seconds. Defaults:
	// DefaultProcessBuckets, DefaultWaitBuckets, DefaultRecoveryBuckets.
	ProcessBuckets, WaitBuckets, RecoveryBuckets []float64
	// ConstLabels are added to every metric, for example
	// {"namespace": "billing"} to register collectors of several namespaces
	// in one registry.
	ConstLabels prometheus.Labels
	// Logger receives scrape failures (once per outage). Default
	// slog.Default().
	Logger *slog.Logger
}

// DefaultProcessBuckets are the OpenTelemetry messaging.process.duration
// advisory buckets, extended to 15 minutes for long handlers.
var DefaultProcessBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60, 300, 900}

// DefaultWaitBuckets span 10 ms to 1 hour.
var DefaultWaitBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 1800, 3600}

// DefaultRecoveryBuckets span 1 second to 30 minutes.
var DefaultRecoveryBuckets = []float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800}

func (o *Options) withDefaults() Options {
	var out Options
	if o != nil {
		out = *o
	}
	if out.ScrapeTimeout <= 0 {
		out.ScrapeTimeout = 5 * time.Second
	}
	if out.MaxTracked <= 0 {
		out.MaxTracked = 100_000
	}
	if out.ReorderWindow <= 0 {
		out.ReorderWindow = time.Minute
	}
	if len(out.ProcessBuckets) == 0 {
		out.ProcessBuckets = DefaultProcessBuckets
	}
	if len(out.WaitBuckets) == 0 {
		out.WaitBuckets = DefaultWaitBuckets
	}
	if len(out.RecoveryBuckets) == 0 {
		out.RecoveryBuckets = DefaultRecoveryBuckets
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out
}

// messagingSystem is the messaging_system label of the messaging_* metrics.
const messagingSystem = "worqr"

// Collector is a prometheus.Collector for one worqr namespace. Register it,
// and call Run for the event-driven metrics. It is safe for concurrent use.
type Collector struct {
	in   *worqr.Inspector
	opts Options

	// read at scrape time
	waiting, behind, keys, scheduled, active, oldestActive, dead *prometheus.Desc
	retained, paused, latency                                    *prometheus.Desc
	workersRegistered, workersAlive, up, scrapeDuration, tracked *prometheus.Desc
	scrapeErrors                                                 *prometheus.CounterVec

	// kept by Run
	sent          *prometheus.CounterVec   // messaging_client_sent_messages_total
	consumed      *prometheus.CounterVec   // messaging_client_consumed_messages_total
	process       *prometheus.HistogramVec // messaging_process_duration_seconds
	wait          *prometheus.HistogramVec // worqr_task_wait_seconds
	recoveredT    *prometheus.CounterVec   // worqr_recovered_tasks_total
	recoveries    *prometheus.CounterVec   // worqr_recoveries_total
	recoveryDelay prometheus.Histogram     // worqr_recovery_delay_seconds
	events        *prometheus.CounterVec   // worqr_events_total
	dropped       prometheus.Counter       // worqr_events_dropped_total
	evicted       *prometheus.CounterVec   // worqr_collector_evicted_total

	running atomic.Bool
	mu      sync.Mutex // guards the trackers
	t       trackers
	now     func() time.Time // wall clock of the trackers' ages

	failMu  sync.Mutex
	failing bool // the last scrape failed (logged once per outage)

	listedMu sync.Mutex
	listed   map[string]bool // the queues the last scrape that read them listed
}

// NewCollector returns a collector reading through in. It reads nothing
// until it is scraped; call Run to follow the events.
func NewCollector(in *worqr.Inspector, opts *Options) *Collector {
	o := opts.withDefaults()
	cl := o.ConstLabels
	msg := prometheus.Labels{"messaging_system": messagingSystem}
	for k, v := range cl {
		msg[k] = v
	}
	q := []string{"queue"}
	desc := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, cl)
	}
	c := &Collector{
		in:   in,
		opts: o,
		now:  time.Now,

		waiting: desc("worqr_queue_waiting", "Tasks waiting in the queue, ready to be taken.", q),
		behind: desc("worqr_queue_behind",
			"Tasks of an ordered queue waiting behind their key's head (worqr_queue_waiting counts only heads).", q),
		keys: desc("worqr_queue_keys",
			"Keys with tasks: of an ordered queue, keys with a head; of a fair queue, keys with tasks waiting (in turn, or held by their limits).", q),
		scheduled: desc("worqr_queue_scheduled", "Tasks scheduled for later (delayed, or waiting for a retry).", q),
		active:    desc("worqr_queue_active", "Tasks held by workers (running).", q),
		oldestActive: desc("worqr_queue_oldest_active_seconds",
			"How long the oldest active task has been running (0 when none is active): grows while a handler hangs.", q),
		dead:     desc("worqr_queue_dead", "Tasks in the queue's dead set.", q),
		retained: desc("worqr_queue_retained", "Ended tasks kept for the queue's Retention.", q),
		paused:   desc("worqr_queue_paused", "1 when the queue is paused, else 0.", q),
		latency: desc("worqr_queue_latency_seconds",
			"Age of the oldest waiting task: the task at the front of the queue (0 when none waits; with priority levels, the front of level 0); of a fair queue, the oldest front of its tasks without a key and of its first 100 keys in turn.", q),
		workersRegistered: desc("worqr_workers_registered", "Workers in the registry, alive or not yet reaped.", nil),
		workersAlive:      desc("worqr_workers_alive", "Registered workers whose keepalive is current.", nil),
		up: desc("worqr_up",
			"1 when the last scrape read Redis, 0 when a read failed (the gauges of what could not be read, worqr_queue_* or worqr_workers_*, are then absent).", nil),
		scrapeDuration: desc("worqr_scrape_duration_seconds", "How long the scrape's Redis reads took.", nil),
		tracked: desc("worqr_collector_tracked",
			"Entries in the collector's bounded maps, waiting for the event they pair with (enqueued, started, early_start, worker).", []string{"map"}),
		scrapeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "worqr_scrape_errors_total", ConstLabels: cl,
			Help: "Scrapes whose Redis reads failed or timed out, by what was read (queues, workers).",
		}, []string{"source"}),

		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "messaging_client_sent_messages_total", ConstLabels: msg,
			Help: "Tasks enqueued (OTel messaging.client.sent.messages), by queue.",
		}, []string{"queue", "messaging_operation_name"}),
		consumed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "messaging_client_consumed_messages_total", ConstLabels: msg,
			Help: "Takings ended by workers (OTel messaging.client.consumed.messages), by queue and outcome.",
		}, []string{"queue", "messaging_operation_name", "outcome"}),
		process: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "messaging_process_duration_seconds", ConstLabels: msg, Buckets: o.ProcessBuckets,
			Help: "Handler duration, from a taking's start to its end (OTel messaging.process.duration), by queue and outcome.",
		}, []string{"queue", "messaging_operation_name", "outcome"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "worqr_task_wait_seconds", ConstLabels: cl, Buckets: o.WaitBuckets,
			Help: "Time from a task's enqueue to its first start (single enqueues only; includes any Delay), by queue.",
		}, q),
		recoveredT: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "worqr_recovered_tasks_total", ConstLabels: cl,
			Help: "Tasks of dead workers requeued by reapers, by queue.",
		}, q),
		recoveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "worqr_recoveries_total", ConstLabels: cl,
			Help: "Recovery events: reaper passes that requeued a dead worker's takings, by queue.",
		}, q),
		recoveryDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "worqr_recovery_delay_seconds", ConstLabels: cl, Buckets: o.RecoveryBuckets,
			Help: "For each recovered worker heard from before: time from its last event to its recovery (an upper bound of the detection delay).",
		}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "worqr_events_total", ConstLabels: cl,
			Help: "Events received from the namespace's processes, by kind.",
		}, []string{"kind"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "worqr_events_dropped_total", ConstLabels: cl,
			Help: "Events a process could not buffer and did not publish (the event-driven metrics miss them).",
		}),
		evicted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "worqr_collector_evicted_total", ConstLabels: cl,
			Help: "Entries evicted unmatched from the collector's bounded maps (enqueued, started, early_start, worker).",
		}, []string{"map"}),
	}
	c.t = newTrackers(o, c.evicted)
	return c
}

func (c *Collector) descs() []*prometheus.Desc {
	return []*prometheus.Desc{c.waiting, c.behind, c.keys, c.scheduled, c.active, c.oldestActive, c.dead, c.retained, c.paused, c.latency,
		c.workersRegistered, c.workersAlive, c.up, c.scrapeDuration, c.tracked}
}

func (c *Collector) vecs() []prometheus.Collector {
	return []prometheus.Collector{c.scrapeErrors, c.sent, c.consumed, c.process, c.wait, c.recoveredT,
		c.recoveries, c.recoveryDelay, c.events, c.dropped, c.evicted}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs() {
		ch <- d
	}
	for _, v := range c.vecs() {
		v.Describe(ch)
	}
}

// Collect implements prometheus.Collector: it reads the queues and the
// workers through the Inspector (at most Options.ScrapeTimeout), then
// reports the event-driven metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.ScrapeTimeout)
	defer cancel()
	start := time.Now()
	var (
		queues  []worqr.QueueInfo
		workers []worqr.WorkerInfo
		qerr    error
		werr    error
		wg      sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		workers, werr = c.in.Workers(ctx)
	}()
	queues, qerr = c.in.Queues(ctx)
	wg.Wait()
	elapsed := time.Since(start)

	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	if qerr == nil {
		c.forgetRemoved(queues)
		for _, q := range queues {
			gauge(c.waiting, float64(q.Waiting), q.Name)
			gauge(c.behind, float64(q.Behind), q.Name)
			gauge(c.keys, float64(q.Keys), q.Name)
			gauge(c.scheduled, float64(q.Scheduled), q.Name)
			gauge(c.active, float64(q.Active), q.Name)
			gauge(c.oldestActive, q.OldestActive.Seconds(), q.Name)
			gauge(c.dead, float64(q.Dead), q.Name)
			gauge(c.retained, float64(q.Retained), q.Name)
			gauge(c.paused, b2f(q.Paused), q.Name)
			gauge(c.latency, q.Latency.Seconds(), q.Name)
		}
	} else {
		c.scrapeErrors.WithLabelValues("queues").Inc()
	}
	if werr == nil {
		alive := 0
		for _, w := range workers {
			if w.Alive {
				alive++
			}
		}
		gauge(c.workersRegistered, float64(len(workers)))
		gauge(c.workersAlive, float64(alive))
	} else {
		c.scrapeErrors.WithLabelValues("workers").Inc()
	}
	err := errors.Join(qerr, werr)
	c.logScrape(err)
	gauge(c.up, b2f(err == nil))
	gauge(c.scrapeDuration, elapsed.Seconds())
	c.mu.Lock()
	sizes := map[string]int{"enqueued": c.t.enqueued.len(), "started": c.t.started.len(),
		"early_start": c.t.early.len(), "worker": c.t.workers.len()}
	c.mu.Unlock()
	for name, n := range sizes {
		gauge(c.tracked, float64(n), name)
	}
	for _, v := range c.vecs() {
		v.Collect(ch)
	}
}

// forgetRemoved deletes the series of the event-driven metrics of every
// queue the last scrape listed and queues does not (removed with
// Inspector.RemoveQueue), so that a removed queue's label values stop
// being exported. Only a queue seen listed before is forgotten: one whose
// first events arrive as a scrape reads the queues keeps them.
func (c *Collector) forgetRemoved(queues []worqr.QueueInfo) {
	now := make(map[string]bool, len(queues))
	for _, q := range queues {
		now[q.Name] = true
	}
	c.listedMu.Lock()
	prev := c.listed
	c.listed = now
	c.listedMu.Unlock()
	for name := range prev {
		if now[name] {
			continue
		}
		l := prometheus.Labels{"queue": name}
		for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
			c.sent, c.consumed, c.process, c.wait, c.recoveredT, c.recoveries} {
			v.DeletePartialMatch(l)
		}
	}
}

// logScrape logs the first failure of an outage and the recovery.
func (c *Collector) logScrape(err error) {
	c.failMu.Lock()
	defer c.failMu.Unlock()
	switch {
	case err != nil && !c.failing:
		c.failing = true
		c.opts.Logger.Warn("worqr/prometheus: scrape cannot read Redis (worqr_up 0 until it can)", "err", err)
	case err == nil && c.failing:
		c.failing = false
		c.opts.Logger.Info("worqr/prometheus: scrape reads Redis again")
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
