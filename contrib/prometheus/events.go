package prometheus

import (
	"container/list"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/worqr/worqr-go/worqr"
)

// ErrRunning is returned by Run while another Run of the same Collector is
// following the events.
var ErrRunning = errors.New("worqr/prometheus: Run is already running")

// Run follows the events of every process of the namespace
// (worqr.Inspector.Follow) and updates the event-driven metrics until ctx
// ends; then it returns nil. Events published while it is not running (or
// resubscribing after a connection failure) are not counted: these metrics
// start at zero when Run starts and are best effort, as the events are.
// Call it once per Collector (a second concurrent call returns ErrRunning),
// typically in its own goroutine:
//
//	go c.Run(ctx)
func (c *Collector) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	return c.in.Follow(ctx, c.observe)
}

// endings are the event kinds that end a taking: the outcome label of
// messaging_client_consumed_messages_total and
// messaging_process_duration_seconds.
var endings = map[worqr.EventKind]bool{
	worqr.EventDone:      true,
	worqr.EventRetry:     true,
	worqr.EventDead:      true,
	worqr.EventCancelled: true,
	worqr.EventGivenBack: true,
	worqr.EventLost:      true,
	worqr.EventForwarded: true,
	worqr.EventFannedOut: true,
	worqr.EventExpired:   true,
}

const (
	opSend    = "send"
	opProcess = "process"
)

// seconds is d in seconds, 0 when negative (the clocks of two processes
// disagree).
func seconds(d time.Duration) float64 {
	return max(d, 0).Seconds()
}

// observe updates the metrics with one event.
func (c *Collector) observe(e worqr.Event) {
	c.events.WithLabelValues(string(e.Kind)).Inc()
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	t := &c.t
	if e.Kind == worqr.EventKeepaliveLost && e.WorkerID != "" {
		// Its id is dead for good (it never comes back): what names it
		// from now on is about its death, not heard from it.
		t.gone.put(e.WorkerID, start{}, now)
	}
	if e.WorkerID != "" && !t.gone.has(e.WorkerID, now) && !slices.Contains(e.DeadWorkers, e.WorkerID) {
		t.workers.put(e.WorkerID, start{at: e.At}, now)
	}
	switch {
	case e.Kind == worqr.EventEnqueued:
		n := e.Count
		if n <= 0 {
			n = 1
		}
		c.sent.WithLabelValues(e.Queue, opSend).Add(float64(n))
		if e.TaskID == "" {
			return
		}
		if s, ok := t.early.take(e.TaskID); ok { // its start came first
			c.wait.WithLabelValues(s.queue).Observe(seconds(s.at.Sub(e.At)))
			return
		}
		t.enqueued.put(e.TaskID, start{at: e.At, queue: e.Queue}, now)

	case e.Kind == worqr.EventStarted:
		t.started.put(takingKey(e), start{at: e.At, queue: e.Queue, worker: e.WorkerID}, now)
		if en, ok := t.enqueued.take(e.TaskID); ok {
			if !en.again {
				c.wait.WithLabelValues(e.Queue).Observe(seconds(e.At.Sub(en.at)))
			}
		} else {
			t.early.put(e.TaskID, start{at: e.At, queue: e.Queue}, now)
		}

	case e.Kind == worqr.EventCancelled && e.WorkerID == "":
		// A client removed a waiting task: it will never start.
		t.enqueued.take(e.TaskID)

	case endings[e.Kind]:
		outcome := string(e.Kind)
		c.consumed.WithLabelValues(e.Queue, opProcess, outcome).Inc()
		if e.PID == "" { // buried by the take: it never ran
			return
		}
		if e.Kind == worqr.EventExpired { // past its deadline: it never starts
			t.enqueued.take(e.TaskID)
			return
		}
		if s, ok := t.started.take(takingKey(e)); ok {
			c.process.WithLabelValues(e.Queue, opProcess, outcome).Observe(seconds(e.At.Sub(s.at)))
		}
		switch e.Kind {
		case worqr.EventRetry, worqr.EventGivenBack, worqr.EventLost:
			// It will start again: that start is not a first one.
			t.enqueued.put(e.TaskID, start{at: e.At, queue: e.Queue, again: true}, now)
		}

	case e.Kind == worqr.EventRecovered:
		c.recoveredT.WithLabelValues(e.Queue).Add(float64(e.Count))
		c.recoveries.WithLabelValues(e.Queue).Inc()
		for _, w := range e.DeadWorkers {
			if last, ok := t.workers.take(w); ok {
				c.recoveryDelay.Observe(seconds(e.At.Sub(last.at)))
			}
			// The takings a reaper ended as cancelled name it, and so may
			// its recovery in another queue: no event heard from it.
			t.gone.put(w, start{}, now)
			// Its takings were requeued: they will never end.
			t.started.removeIf(func(s start) bool { return s.worker == w })
		}

	case e.Kind == worqr.EventDropped:
		c.dropped.Add(float64(e.Count))
	}
}

// takingKey identifies one taking: a task id and the taking's pid.
func takingKey(e worqr.Event) string {
	return e.TaskID + "\x00" + e.PID
}

// start is what a tracker remembers of an event.
type start struct {
	at     time.Time // the event's time (its process's clock)
	queue  string
	worker string
	again  bool // in enqueued: the task ended an attempt, its next start is no first start
}

// trackers are the bounded maps Run pairs events with.
type trackers struct {
	enqueued *tracker // task id -> its enqueue (or its last attempt's end), until it starts
	early    *tracker // task id -> a start that came before its enqueue
	started  *tracker // task id + pid -> its start, until it ends
	workers  *tracker // worker id -> its last event
	// gone holds the worker ids found dead (recovered, or their keepalive
	// lost), for ReorderWindow: later events naming one are about its
	// death (a reaper's cancelled takings), not heard from it. Not
	// reported among the tracked maps.
	gone *tracker
}

func newTrackers(o Options, evicted *prometheus.CounterVec) trackers {
	mk := func(name string, ttl time.Duration) *tracker {
		return &tracker{max: o.MaxTracked, ttl: ttl, evicted: evicted.WithLabelValues(name),
			ll: list.New(), m: map[string]*list.Element{}}
	}
	return trackers{
		enqueued: mk("enqueued", 0),
		early:    mk("early_start", o.ReorderWindow),
		started:  mk("started", 0),
		workers:  mk("worker", 0),
		gone: &tracker{max: o.MaxTracked, ttl: o.ReorderWindow, evicted: prometheus.NewCounter(prometheus.CounterOpts{Name: "unreported"}),
			ll: list.New(), m: map[string]*list.Element{}},
	}
}

// tracker is a map bounded in size (and optionally in age): the oldest
// entries go first. Entries pushed out by the size bound are counted in
// worqr_collector_evicted_total; entries older than ttl expire uncounted.
type tracker struct {
	max     int
	ttl     time.Duration // 0: no age limit
	evicted prometheus.Counter
	ll      *list.List // of *item, oldest first
	m       map[string]*list.Element
}

type item struct {
	key   string
	added time.Time // wall clock of the collector
	v     start
}

// put sets key to v (as the newest entry), then evicts what is too many or
// too old.
func (t *tracker) put(key string, v start, now time.Time) {
	if el, ok := t.m[key]; ok {
		t.ll.Remove(el)
	}
	t.m[key] = t.ll.PushBack(&item{key: key, added: now, v: v})
	if t.ttl > 0 {
		for el := t.ll.Front(); el != nil && now.Sub(el.Value.(*item).added) > t.ttl; el = t.ll.Front() {
			t.remove(el)
		}
	}
	for t.ll.Len() > t.max {
		t.remove(t.ll.Front())
		t.evicted.Inc()
	}
}

func (t *tracker) remove(el *list.Element) {
	t.ll.Remove(el)
	delete(t.m, el.Value.(*item).key)
}

// take removes key and returns its value.
func (t *tracker) take(key string) (start, bool) {
	el, ok := t.m[key]
	if !ok {
		return start{}, false
	}
	t.ll.Remove(el)
	delete(t.m, key)
	return el.Value.(*item).v, true
}

// removeIf removes (without counting an eviction) every entry matching f.
func (t *tracker) removeIf(f func(start) bool) {
	for el := t.ll.Front(); el != nil; {
		next := el.Next()
		if f(el.Value.(*item).v) {
			t.remove(el)
		}
		el = next
	}
}

func (t *tracker) len() int { return t.ll.Len() }

// has reports whether key is held and, at now, not past ttl.
func (t *tracker) has(key string, now time.Time) bool {
	el, ok := t.m[key]
	return ok && (t.ttl <= 0 || now.Sub(el.Value.(*item).added) <= t.ttl)
}
