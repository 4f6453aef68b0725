package chaos_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/worqr/worqr-go/worqr"
)

// ledger is everything the harness learned from outside the workers: the
// tasks it enqueued (acknowledged only), and every line every worker process
// printed, stamped with the time the harness read it.
type ledger struct {
	mu sync.Mutex

	tasks   map[string]*taskRec
	procs   map[int]*procRec
	watches map[string][]watch
	samples map[string][]sample // recovery times by fault kind

	// orphaned watches: held tasks that were never taken again.
	tookTimes []time.Time // arrival of every took line, in order
	lines     int
	kinds     map[string]int
	badLines  []string

	// stageAccepts counts accepted stage ends (forwarded, fanned_out) by
	// queue and id: more than one is a double acceptance.
	stageAccepts map[string][]endRec

	// killedAt is when the harness SIGKILLed each worker process it killed.
	killedAt map[int]time.Time

	// changed is closed (and replaced) at each line and acknowledgement
	// recorded: what await waits on.
	changed chan struct{}
}

type taskRec struct {
	id, queue string
	acked     bool
	ackAt     time.Time
	takes     []takeRec
	ends      []endRec       // done, dead, cancelled
	retries   map[string]int // by queue: failed attempts
	losts     int
	cancels   []cancelRec // the harness's Client.Cancel calls, in order
}

// cancelRec is one Client.Cancel of a task by the harness.
type cancelRec struct {
	status worqr.CancelStatus
	err    error
	asked  time.Time // the call began
	at     time.Time // it returned
}

type takeRec struct {
	proc    int
	queue   string
	pid     string // "-" for a flow stage (its handler does not see the pid)
	attempt int
	at      time.Time
}

type endRec struct {
	proc  int
	kind  string
	queue string
	at    time.Time
}

// procRec is one worker process's view: its worker ids and its takings
// without an outcome line yet (by task id, newest last).
type procRec struct {
	ids  []string
	open map[string][]string // task id -> pids
}

// sample is one recovery: a fault at at, the task taken again d later.
type sample struct {
	at time.Time
	d  time.Duration
}

// watch waits for the next taking of a task a fault took away.
type watch struct {
	kind  string // kill, freeze
	at    time.Time
	queue string
	pid   string
	proc  int
}

// retakes says whether a taking (queue, pid) at time at is the next taking of
// what w lost.
func (w watch) retakes(queue, pid string, at time.Time) bool {
	return queue == w.queue && at.After(w.at) && (pid != w.pid || pid == "-")
}

func newLedger() *ledger {
	return &ledger{
		tasks:        map[string]*taskRec{},
		procs:        map[int]*procRec{},
		watches:      map[string][]watch{},
		samples:      map[string][]sample{},
		kinds:        map[string]int{},
		stageAccepts: map[string][]endRec{},
		killedAt:     map[int]time.Time{},
		changed:      make(chan struct{}),
	}
}

// notify wakes the awaits. Called with l.mu held.
func (l *ledger) notify() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// await checks cond at once and after each line or acknowledgement the
// ledger records, until cond holds (true) or ctx ends (false). cond may
// call the ledger's methods.
func (l *ledger) await(ctx context.Context, cond func() bool) bool {
	for {
		l.mu.Lock()
		changed := l.changed // before cond: a record in between closes it
		l.mu.Unlock()
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		}
	}
}

func (l *ledger) task(id string) *taskRec {
	t := l.tasks[id]
	if t == nil {
		t = &taskRec{id: id, retries: map[string]int{}}
		l.tasks[id] = t
	}
	return t
}

func (l *ledger) proc(n int) *procRec {
	p := l.procs[n]
	if p == nil {
		p = &procRec{open: map[string][]string{}}
		l.procs[n] = p
	}
	return p
}

// acked records ids whose enqueue returned success.
func (l *ledger) acked(queue string, ids []string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	defer l.notify()
	for _, id := range ids {
		t := l.task(id)
		t.queue, t.acked, t.ackAt = queue, true, at
	}
}

// cancelled records a Client.Cancel of task id by the harness.
func (l *ledger) cancelled(id string, r cancelRec) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.task(id)
	t.cancels = append(t.cancels, r)
}

// killed records that process n was SIGKILLed at at.
func (l *ledger) killed(n int, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.killedAt[n] = at
}

// closeOpen ends process n's open taking of id: the one with pid, or the
// newest when pid is "" (done, retry... lines carry no pid; the newest taking
// is the one that can still succeed). A lost line names a pid a stage's took
// line did not ("-"): it closes the oldest, the one of the dead session.
func (p *procRec) closeOpen(id, pid string) {
	pids := p.open[id]
	if len(pids) == 0 {
		return
	}
	i := len(pids) - 1
	if pid != "" {
		i = 0
		for j, x := range pids {
			if x == pid {
				i = j
			}
		}
	}
	pids = append(pids[:i], pids[i+1:]...)
	if len(pids) == 0 {
		delete(p.open, id)
	} else {
		p.open[id] = pids
	}
}

// line records one stdout line of process n.
func (l *ledger) line(n int, text string, at time.Time) {
	f := strings.Fields(text)
	l.mu.Lock()
	defer l.mu.Unlock()
	defer l.notify()
	l.lines++
	bad := func() {
		if len(l.badLines) < 20 {
			l.badLines = append(l.badLines, fmt.Sprintf("worker %d: %q", n, text))
		}
	}
	if len(f) == 0 {
		bad()
		return
	}
	l.kinds[f[0]]++
	p := l.proc(n)
	switch f[0] {
	case "registered":
		if len(f) != 2 {
			bad()
			return
		}
		p.ids = append(p.ids, f[1])
	case "took":
		if len(f) != 6 {
			bad()
			return
		}
		att, _ := strconv.Atoi(f[4])
		t := l.task(f[2])
		if t.queue == "" {
			t.queue = f[1]
		}
		t.takes = append(t.takes, takeRec{proc: n, queue: f[1], pid: f[3], attempt: att, at: at})
		p.open[f[2]] = append(p.open[f[2]], f[3])
		l.tookTimes = append(l.tookTimes, at)
		l.resolve(t, f[1], f[3], at)
	case "done", "dead", "cancelled":
		if len(f) < 3 {
			bad()
			return
		}
		t := l.task(f[2])
		if t.queue == "" {
			t.queue = f[1]
		}
		t.ends = append(t.ends, endRec{proc: n, kind: f[0], queue: f[1], at: at})
		p.closeOpen(f[2], "")
	case "forwarded", "fanned_out":
		if len(f) < 3 {
			bad()
			return
		}
		k := f[1] + " " + f[2]
		l.stageAccepts[k] = append(l.stageAccepts[k], endRec{proc: n, kind: f[0], queue: f[1], at: at})
		p.closeOpen(f[2], "")
	case "retry":
		if len(f) < 3 {
			bad()
			return
		}
		l.task(f[2]).retries[f[1]]++
		p.closeOpen(f[2], "")
	case "lost":
		if len(f) != 4 {
			bad()
			return
		}
		l.task(f[2]).losts++
		p.closeOpen(f[2], f[3])
	case "keepalive_lost", "recovered":
	default:
		bad()
	}
}

// watchHeld starts timing, for each taking process n held when a fault of
// kind hit it at time at, how long until its task is taken again.
func (l *ledger) watchHeld(n int, kind string, at time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	count := 0
	for id, pids := range l.proc(n).open {
		queue := ""
		if t := l.tasks[id]; t != nil && len(t.takes) > 0 {
			for _, tk := range t.takes {
				if tk.proc == n {
					queue = tk.queue
				}
			}
		}
		for _, pid := range pids {
			w := watch{kind: kind, at: at, queue: queue, pid: pid, proc: n}
			count++
			// Taken again already (the fault was noticed late)?
			if d, ok := retakenAfter(l.tasks[id], w); ok {
				l.samples[kind] = append(l.samples[kind], sample{at, d})
				continue
			}
			l.watches[id] = append(l.watches[id], w)
		}
	}
	return count
}

func retakenAfter(t *taskRec, w watch) (time.Duration, bool) {
	if t == nil {
		return 0, false
	}
	for _, tk := range t.takes {
		if w.retakes(tk.queue, tk.pid, tk.at) {
			return tk.at.Sub(w.at), true
		}
	}
	return 0, false
}

// resolve closes the watches of t that a new taking (queue, pid, at) answers.
func (l *ledger) resolve(t *taskRec, queue, pid string, at time.Time) {
	ws := l.watches[t.id]
	if len(ws) == 0 {
		return
	}
	kept := ws[:0]
	for _, w := range ws {
		if w.retakes(queue, pid, at) {
			l.samples[w.kind] = append(l.samples[w.kind], sample{w.at, at.Sub(w.at)})
			continue
		}
		kept = append(kept, w)
	}
	if len(kept) == 0 {
		delete(l.watches, t.id)
	} else {
		l.watches[t.id] = kept
	}
}

// firstTookAfter returns the arrival of the first took line after t.
func (l *ledger) firstTookAfter(t time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := sort.Search(len(l.tookTimes), func(i int) bool { return l.tookTimes[i].After(t) })
	if i == len(l.tookTimes) {
		return time.Time{}, false
	}
	return l.tookTimes[i], true
}

// tookAt returns when task id was first taken, if it was.
func (l *ledger) tookAt(id string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tasks[id]
	if t == nil || len(t.takes) == 0 {
		return time.Time{}, false
	}
	return t.takes[0].at, true
}

// unended returns the ids (with their queues) that must reach an end and
// have no final line yet: every acknowledged id and every id a worker took.
func (l *ledger) unended() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]string{}
	for id, t := range l.tasks {
		if (t.acked || len(t.takes) > 0) && len(t.ends) == 0 {
			out[id] = t.queue
		}
	}
	return out
}

// counts returns the number of acknowledged tasks and of tasks with a final
// end line.
func (l *ledger) counts() (acked, ended int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range l.tasks {
		if t.acked {
			acked++
		}
		if len(t.ends) > 0 {
			ended++
		}
	}
	return acked, ended
}

// kindCount returns how many lines of kind the workers printed.
func (l *ledger) kindCount(kind string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.kinds[kind]
}

// reRuns returns how many runs of t's handlers were neither its first run in
// a queue nor a retry after a failed attempt: runs again after a crash or a
// lost keepalive.
func (t *taskRec) reRuns() int {
	byQueue := map[string]int{}
	for _, tk := range t.takes {
		byQueue[tk.queue]++
	}
	n := 0
	for q, takes := range byQueue {
		n += max(0, takes-1-t.retries[q])
	}
	return n
}

func (t *taskRec) retryCount() int {
	n := 0
	for _, r := range t.retries {
		n += r
	}
	return n
}
