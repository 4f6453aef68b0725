package chaos_test

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
)

// result is what one scenario measured.
type result struct {
	name     string
	ran      time.Duration
	timings  timings
	acked    int // tasks whose enqueue returned success
	unacked  int // tasks taken that no successful enqueue returned (a failed enqueue Redis applied anyway)
	runs     int // flow runs started (acknowledged)
	children int // flow children seen
	workers  int // worker processes started

	endedStdout    int            // a done/dead/cancelled line
	endedRedisOnly map[string]int // no line, but Redis holds it as ended (by state)
	endKinds       map[string]int

	lost   []string // evidence, one per task
	double []string // evidence

	reRuns     int // handler runs beyond the first that were not retries
	keepalives int // keepalive_lost lines: worker ids that died while their process lived
	reRunTasks int
	retries    int
	lostLines  int

	faults      map[string]int
	recovery    map[string][]time.Duration
	notRetaken  map[string]int // held takings that ended without a retake
	unrecovered []string

	leftovers []string
	notes     []string
	problems  []string // unexpected exits, bad lines, failed stops
	extra     []string // scenario-specific figures
}

// finish stops the faults' aftermath, drains the run, stops the workers and
// measures everything. The enqueuers must be done or cancelled.
func (c *cluster) finish(started time.Time, drain time.Duration) *result {
	c.t.Helper()
	c.waitEnqueued()
	for _, p := range c.live(true) {
		if p.frozen.Load() {
			_ = syscall.Kill(p.pid, syscall.SIGCONT)
			p.frozen.Store(false)
		}
	}
	for len(c.live(true)) < c.opts.workers {
		if err := c.ensureWorker(30 * time.Second); err != nil {
			c.t.Errorf("%s: cannot start a worker to drain: %v", c.name, err)
			break
		}
	}
	ran := time.Since(started)
	// Stuck tasks stay stuck: stop waiting once nothing ended for a while
	// (longer than any recovery: TTL + reaper interval + the 5s backoff cap).
	open := c.waitDrained(drain, 2*(c.opts.timings.ttl+c.opts.timings.reaper)+10*time.Second)
	// Let the reapers forget the killed workers (holder indexes, registry):
	// a dead worker is forgotten within TTL + one reaper interval.
	tm := c.opts.timings
	_ = redistest.Pause(c.ctx, tm.ttl+2*tm.reaper+500*time.Millisecond)

	r := &result{
		name: c.name, ran: ran, timings: tm,
		endedRedisOnly: map[string]int{}, endKinds: map[string]int{},
		faults: map[string]int{}, notRetaken: map[string]int{},
		recovery: map[string][]time.Duration{},
	}
	r.problems = append(r.problems, c.unexpectedExits()...)
	// Evidence of what is still open, while its holders still run.
	before := map[string]string{}
	for id := range open {
		before[id] = c.evidence(id, c.queueOf(id))
	}
	r.problems = append(r.problems, c.stopAll(15*time.Second)...)

	// Stopping may have ended or put back what was open: look again.
	if len(open) > 0 {
		un := c.led.unended()
		_, o, err := c.redisEnded(un)
		if err != nil {
			r.problems = append(r.problems, "reading Redis: "+err.Error())
		} else {
			for id, st := range o {
				if _, was := open[id]; !was {
					open[id] = st
				}
			}
		}
		for id := range open {
			ev := c.evidence(id, c.queueOf(id))
			if b, ok := before[id]; ok {
				ev = "before the workers stopped: " + b + "\n    after they stopped: " + ev
			}
			r.lost = append(r.lost, ev)
		}
		sort.Strings(r.lost)
	}
	var err error
	r.leftovers, r.notes, err = c.leftovers()
	if err != nil {
		r.problems = append(r.problems, "scanning leftovers: "+err.Error())
	}

	// Everything that ended without a line: ask Redis how.
	needRedis := map[string]string{}
	c.led.mu.Lock()
	for id, t := range c.led.tasks {
		if !t.acked && len(t.takes) == 0 {
			continue // an id only seen in an end line (cannot happen) or a retry line
		}
		switch {
		case t.acked && isFlowQueue(t.queue):
			r.runs++
		case t.acked:
			r.acked++
		case isChildQueue(t.queue):
			r.children++
		default:
			r.unacked++
		}
		if len(t.ends) > 0 {
			r.endedStdout++
			r.endKinds[t.ends[0].kind]++
		} else if _, isOpen := open[id]; !isOpen {
			needRedis[id] = t.queue
		}
		if len(t.ends) > 1 {
			var ls []string
			for _, e := range t.ends {
				ls = append(ls, fmt.Sprintf("worker %d: %s %s %s", e.proc, e.kind, e.queue, id))
			}
			r.double = append(r.double, strings.Join(ls, "; "))
		}
		if n := t.reRuns(); n > 0 {
			r.reRuns += n
			r.reRunTasks++
		}
		r.retries += t.retryCount()
		r.lostLines += t.losts
	}
	for k, es := range c.led.stageAccepts {
		if len(es) > 1 {
			var ls []string
			for _, e := range es {
				ls = append(ls, fmt.Sprintf("worker %d: %s %s", e.proc, e.kind, k))
			}
			r.double = append(r.double, strings.Join(ls, "; "))
		}
	}
	samples := map[string][]sample{}
	for kind, s := range c.led.samples {
		samples[kind] = append([]sample(nil), s...)
	}
	watches := map[string][]watch{}
	for id, ws := range c.led.watches {
		watches[id] = append([]watch(nil), ws...)
	}
	r.problems = append(r.problems, c.led.badLines...)
	r.keepalives = c.led.kinds["keepalive_lost"]
	c.led.mu.Unlock()
	sort.Strings(r.double)

	// A recovery that overlapped a period Redis was away waited for Redis,
	// not for the protocol: its own histogram.
	for kind, ss := range samples {
		for _, x := range ss {
			k := kind
			if c.overlapsDown(x.at, x.at.Add(x.d)) {
				k = kind + ", Redis away meanwhile"
			}
			r.recovery[k] = append(r.recovery[k], x.d)
		}
	}
	ended, _, err := c.redisEnded(needRedis)
	if err != nil {
		r.problems = append(r.problems, "reading Redis: "+err.Error())
	}
	for _, st := range ended {
		r.endedRedisOnly[st]++
	}
	for id, ws := range watches {
		_, isOpen := open[id]
		for _, w := range ws {
			if isOpen {
				r.unrecovered = append(r.unrecovered, fmt.Sprintf("%s of worker %d held %s (pid %s) and it was never taken again", w.kind, w.proc, id, w.pid))
			} else {
				r.notRetaken[w.kind]++
			}
		}
	}
	c.mu.Lock()
	for k, v := range c.faults {
		r.faults[k] = v
	}
	if c.proxy != nil {
		if n := c.proxy.cut.Load(); n > 0 {
			r.faults["connections_cut"] = int(n)
		}
		if n := c.proxy.refused.Load(); n > 0 {
			r.faults["connections_refused"] = int(n)
		}
		if n := c.proxy.dropped.Load(); n > 0 {
			r.faults["replies_dropped"] = int(n)
		}
	}
	r.workers = c.starts
	if c.failedStarts > 0 {
		r.extra = append(r.extra, fmt.Sprintf("worker starts that failed (Redis away at start, retried): %d", c.failedStarts))
	}
	c.mu.Unlock()
	if n := c.enqErrors.Load(); n > 0 {
		c.enqErrMu.Lock()
		r.extra = append(r.extra, fmt.Sprintf("enqueue calls that failed and were retried: %d (%s)", n, strings.Join(c.enqErrMsg, "; ")))
		c.enqErrMu.Unlock()
	}
	return r
}

func (c *cluster) queueOf(id string) string {
	c.led.mu.Lock()
	defer c.led.mu.Unlock()
	if t := c.led.tasks[id]; t != nil {
		return t.queue
	}
	return c.opts.queue
}

// check fails the test for every broken promise.
func (r *result) check(c *cluster) {
	t := c.t
	t.Helper()
	if len(r.lost) > 0 {
		t.Errorf("%s: %d task(s) LOST (no accepted end in any line nor in Redis); first ones:\n  %s",
			r.name, len(r.lost), strings.Join(first(r.lost, 10), "\n  "))
	}
	if len(r.double) > 0 {
		t.Errorf("%s: %d task(s) ACCEPTED TWICE:\n  %s", r.name, len(r.double), strings.Join(first(r.double, 10), "\n  "))
	}
	if len(r.leftovers) > 0 {
		t.Errorf("%s: %d key(s) LEFT OVER after the run drained:\n  %s", r.name, len(r.leftovers), strings.Join(first(r.leftovers, 20), "\n  "))
	}
	if len(r.problems) > 0 {
		t.Errorf("%s: problems:\n  %s", r.name, strings.Join(first(r.problems, 20), "\n  "))
	}
	if r.acked == 0 {
		t.Errorf("%s: nothing was enqueued", r.name)
	}
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("... and %d more", len(s)-n))
	}
	return s
}

// String renders the figures.
func (r *result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "=== chaos %s: ran %s (+ drain), worker timings heartbeat %s / TTL %s / reaper %s / poll %s\n",
		r.name, r.ran.Round(time.Second), r.timings.heartbeat, r.timings.ttl, r.timings.reaper, r.timings.poll)
	fmt.Fprintf(&b, "  tasks: %d enqueued (acknowledged)", r.acked)
	if r.unacked > 0 {
		fmt.Fprintf(&b, " + %d applied by enqueues that reported an error", r.unacked)
	}
	if r.runs > 0 {
		fmt.Fprintf(&b, " + %d flow runs (4 stages each) with %d children", r.runs, r.children)
	}
	fmt.Fprintf(&b, "; worker processes started: %d\n", r.workers)
	fmt.Fprintf(&b, "  ended: %d with a line (%s)", r.endedStdout, kv(r.endKinds))
	if len(r.endedRedisOnly) > 0 {
		fmt.Fprintf(&b, ", %d by Redis only (%s)", sum(r.endedRedisOnly), kv(r.endedRedisOnly))
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  lost = %d, double-accepted = %d, leftovers = %d\n", len(r.lost), len(r.double), len(r.leftovers))
	fmt.Fprintf(&b, "  re-runs: %d (on %d tasks); retries (failed attempts): %d; refused finishes (lost lines): %d; keepalives lost by live workers: %d\n",
		r.reRuns, r.reRunTasks, r.retries, r.lostLines, r.keepalives)
	fmt.Fprintf(&b, "  faults: %s\n", kv(r.faults))
	kinds := make([]string, 0, len(r.recovery))
	for k := range r.recovery {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(&b, "  recovery after %s (fault to task taken again): %s", k, histogram(r.recovery[k]))
		if n := r.notRetaken[k]; n > 0 {
			fmt.Fprintf(&b, "; %d more held takings needed none (Redis had accepted their finish before the worker died, or their cancel ended them)", n)
		}
		b.WriteString("\n")
	}
	for _, e := range r.extra {
		fmt.Fprintf(&b, "  %s\n", e)
	}
	for _, n := range r.notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	for _, u := range first(r.unrecovered, 5) {
		fmt.Fprintf(&b, "  UNRECOVERED: %s\n", u)
	}
	return b.String()
}

func kv(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// histogram renders n, p50, p99 and max of samples.
func histogram(s []time.Duration) string {
	if len(s) == 0 {
		return "no samples"
	}
	s = append([]time.Duration(nil), s...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	pct := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return s[max(i, 0)]
	}
	return fmt.Sprintf("n=%d p50=%s p99=%s max=%s", len(s),
		pct(0.50).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}

// publish logs the figures and appends them to WORQR_CHAOS_REPORT.
func publish(c interface{ Log(...any) }, text string) {
	c.Log("\n" + text)
	if cfg.report == "" {
		return
	}
	f, err := os.OpenFile(cfg.report, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprint(f, text)
}
