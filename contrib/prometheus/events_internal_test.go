package prometheus

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/worqr/worqr-go/worqr"
)

// Unit tests of the event pairing, with synthetic events (no Redis: the
// Inspector is only used by Collect and Run).

// hist returns the sample count and sum of one histogram series.
func hist(t *testing.T, o prometheus.Observer) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := o.(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

var t0 = time.UnixMilli(1_700_000_000_000)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestStartBeforeEnqueue(t *testing.T) {
	c := NewCollector(nil, nil)
	// The worker's batch arrives before the client's.
	c.observe(worqr.Event{Kind: worqr.EventStarted, At: at(500), Queue: "q", TaskID: "a", PID: "1", WorkerID: "w"})
	c.observe(worqr.Event{Kind: worqr.EventEnqueued, At: at(100), Queue: "q", TaskID: "a", Count: 1})
	if n, sum := hist(t, c.wait.WithLabelValues("q")); n != 1 || sum != 0.4 {
		t.Errorf("wait: %d samples summing to %v, want 1 of 0.4s", n, sum)
	}
	if c.t.early.len() != 0 || c.t.enqueued.len() != 0 {
		t.Errorf("early %d, enqueued %d entries left, want none", c.t.early.len(), c.t.enqueued.len())
	}
}

func TestClockSkewIsClampedAndRetriesAreNoFirstStart(t *testing.T) {
	c := NewCollector(nil, nil)
	c.observe(worqr.Event{Kind: worqr.EventEnqueued, At: at(900), Queue: "q", TaskID: "a", Count: 1})
	c.observe(worqr.Event{Kind: worqr.EventStarted, At: at(800), Queue: "q", TaskID: "a", PID: "1", WorkerID: "w"})
	c.observe(worqr.Event{Kind: worqr.EventRetry, At: at(1800), Queue: "q", TaskID: "a", PID: "1", WorkerID: "w"})
	c.observe(worqr.Event{Kind: worqr.EventStarted, At: at(5000), Queue: "q", TaskID: "a", PID: "2", WorkerID: "w"})
	c.observe(worqr.Event{Kind: worqr.EventDone, At: at(5250), Queue: "q", TaskID: "a", PID: "2", WorkerID: "w"})
	if n, sum := hist(t, c.wait.WithLabelValues("q")); n != 1 || sum != 0 {
		t.Errorf("wait: %d samples summing to %v, want 1 of 0 (clamped)", n, sum)
	}
	if n, sum := hist(t, c.process.WithLabelValues("q", opProcess, "retry")); n != 1 || sum != 1 {
		t.Errorf("retry duration: %d samples summing to %v, want 1 of 1s", n, sum)
	}
	if n, sum := hist(t, c.process.WithLabelValues("q", opProcess, "done")); n != 1 || sum != 0.25 {
		t.Errorf("done duration: %d samples summing to %v, want 1 of 0.25s", n, sum)
	}
	if c.t.early.len() != 0 || c.t.enqueued.len() != 0 || c.t.started.len() != 0 {
		t.Errorf("entries left: early %d, enqueued %d, started %d", c.t.early.len(), c.t.enqueued.len(), c.t.started.len())
	}
}

func TestBuriedAndClientCancel(t *testing.T) {
	c := NewCollector(nil, nil)
	c.observe(worqr.Event{Kind: worqr.EventEnqueued, At: at(0), Queue: "q", TaskID: "a", Count: 1})
	c.observe(worqr.Event{Kind: worqr.EventCancelled, At: at(10), Queue: "q", TaskID: "a"}) // a client's
	c.observe(worqr.Event{Kind: worqr.EventDead, At: at(20), Queue: "q", TaskID: "b", WorkerID: "w"})
	if v := testutil.ToFloat64(c.consumed.WithLabelValues("q", opProcess, "cancelled")); v != 0 {
		t.Errorf("a client's cancel counted as consumed: %v", v)
	}
	if v := testutil.ToFloat64(c.consumed.WithLabelValues("q", opProcess, "dead")); v != 1 {
		t.Errorf("consumed dead = %v, want 1", v)
	}
	if n := testutil.CollectAndCount(c.process); n != 0 {
		t.Errorf("%d duration series for takings that never ran", n)
	}
	if c.t.enqueued.len() != 0 {
		t.Errorf("the cancelled task is still tracked")
	}
}

func TestTrackersAreBounded(t *testing.T) {
	c := NewCollector(nil, &Options{MaxTracked: 3, ReorderWindow: time.Minute})
	now := t0
	c.now = func() time.Time { return now }
	for i, id := range []string{"a", "b", "c", "d", "e"} {
		c.observe(worqr.Event{Kind: worqr.EventStarted, At: at(i), Queue: "q", TaskID: id, PID: "1", WorkerID: "w"})
	}
	if n := c.t.started.len(); n != 3 {
		t.Errorf("%d started entries, want 3", n)
	}
	if v := testutil.ToFloat64(c.evicted.WithLabelValues("started")); v != 2 {
		t.Errorf("evicted started = %v, want 2", v)
	}
	// The oldest went first: a and b end without a duration.
	for _, id := range []string{"a", "e"} {
		c.observe(worqr.Event{Kind: worqr.EventDone, At: at(100), Queue: "q", TaskID: id, PID: "1", WorkerID: "w"})
	}
	if n, _ := hist(t, c.process.WithLabelValues("q", opProcess, "done")); n != 1 {
		t.Errorf("%d durations, want 1 (e's; a was evicted)", n)
	}
	// Early starts expire after the reorder window, uncounted.
	if n := c.t.early.len(); n != 3 {
		t.Fatalf("%d early entries, want 3", n)
	}
	evicted := testutil.ToFloat64(c.evicted.WithLabelValues("early_start"))
	now = now.Add(2 * time.Minute)
	c.observe(worqr.Event{Kind: worqr.EventStarted, At: at(200), Queue: "q", TaskID: "f", PID: "1", WorkerID: "w"})
	if n := c.t.early.len(); n != 1 {
		t.Errorf("%d early entries after the window, want 1", n)
	}
	if v := testutil.ToFloat64(c.evicted.WithLabelValues("early_start")); v != evicted {
		t.Errorf("expiries counted as evictions: %v -> %v", evicted, v)
	}
}

func TestRecoveryDelay(t *testing.T) {
	c := NewCollector(nil, nil)
	c.observe(worqr.Event{Kind: worqr.EventStarted, At: at(0), Queue: "q", TaskID: "a", PID: "1", WorkerID: "dead"})
	c.observe(worqr.Event{Kind: worqr.EventStarted, At: at(0), Queue: "q", TaskID: "b", PID: "1", WorkerID: "live"})
	c.observe(worqr.Event{Kind: worqr.EventRecovered, At: at(4000), Queue: "q", WorkerID: "live", Count: 1,
		DeadWorkers: []string{"dead", "unknown"}})
	c.observe(worqr.Event{Kind: worqr.EventRecovered, At: at(4000), Queue: "r", WorkerID: "live", Count: 2,
		DeadWorkers: []string{"dead"}})
	if n, sum := hist(t, c.recoveryDelay); n != 1 || sum != 4 {
		t.Errorf("recovery delay: %d samples summing to %v, want one of 4s", n, sum)
	}
	if v := testutil.ToFloat64(c.recoveredT.WithLabelValues("r")); v != 2 {
		t.Errorf("recovered tasks of r = %v, want 2", v)
	}
	if v := testutil.ToFloat64(c.recoveries.WithLabelValues("q")); v != 1 {
		t.Errorf("recoveries of q = %v, want 1", v)
	}
	if _, ok := c.t.started.m["a\x001"]; ok || c.t.started.len() != 1 {
		t.Errorf("the dead worker's start is still tracked (%d entries)", c.t.started.len())
	}
	c.observe(worqr.Event{Kind: worqr.EventDropped, At: at(5000), Count: 7})
	if v := testutil.ToFloat64(c.dropped); v != 7 {
		t.Errorf("dropped = %v, want 7", v)
	}
}

// Events a worker's death causes name it (its keepalive found lost, the
// takings a reaper ended as cancelled, a worker's recovery of its own lost
// id): none is an event heard from it. Counted as one, a recovery of its
// own id observed a delay of 0 (its EventRecovered names it as the
// worker), and a reaper's recovery of its takings of a second queue
// observed the time since the cancelled events of the first.
func TestRecoveryDelayCountsOnlyWhatTheWorkerDidBeforeItDied(t *testing.T) {
	c := NewCollector(nil, nil)
	// A worker that finds its own keepalive lost puts back what its id
	// held: the cancelled takings first, then the recovery, both naming it.
	c.observe(worqr.Event{Kind: worqr.EventStarted, At: at(0), Queue: "q", TaskID: "a", PID: "1", WorkerID: "self"})
	c.observe(worqr.Event{Kind: worqr.EventKeepaliveLost, At: at(3000), WorkerID: "self"})
	c.observe(worqr.Event{Kind: worqr.EventCancelled, At: at(3005), Queue: "q", TaskID: "b", PID: "2", WorkerID: "self"})
	c.observe(worqr.Event{Kind: worqr.EventRecovered, At: at(3005), Queue: "q", WorkerID: "self", Count: 1,
		DeadWorkers: []string{"self"}})
	if n, sum := hist(t, c.recoveryDelay); n != 1 || sum != 3.005 {
		t.Errorf("recovery of its own id: %d samples summing to %v, want one of 3.005s (since its last start)", n, sum)
	}
	// A reaper recovers a dead worker's takings of two queues; in the
	// first, one was cancelled (reported naming the dead worker).
	c.observe(worqr.Event{Kind: worqr.EventStarted, At: at(10000), Queue: "q", TaskID: "c", PID: "3", WorkerID: "dead"})
	c.observe(worqr.Event{Kind: worqr.EventRecovered, At: at(14000), Queue: "q", WorkerID: "reaper", Count: 1,
		DeadWorkers: []string{"dead"}})
	c.observe(worqr.Event{Kind: worqr.EventCancelled, At: at(14000), Queue: "q", TaskID: "d", PID: "4", WorkerID: "dead"})
	c.observe(worqr.Event{Kind: worqr.EventRecovered, At: at(14001), Queue: "r", WorkerID: "reaper", Count: 1,
		DeadWorkers: []string{"dead"}})
	if n, sum := hist(t, c.recoveryDelay); n != 2 || sum != 3.005+4 {
		t.Errorf("after a reaper's recovery of two queues: %d samples summing to %v, want two (3.005s and 4s)", n, sum)
	}
	for _, w := range []string{"self", "dead"} {
		if _, ok := c.t.workers.m[w]; ok {
			t.Errorf("recovered worker %s is still tracked", w)
		}
	}
}
