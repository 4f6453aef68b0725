package chaos_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// fairChildEnv, when set, makes the test binary a fair-queue worker process
// (fairChild) instead of running the tests: the value is the file its
// handlers and events log to.
const fairChildEnv = "WORQR_CHAOS_FAIR_LOG"

const fairQueue = "fair"

// fairPolicy is the fair queue's policy, set by the harness before its
// first keyed enqueue and stored again by every worker process as it starts
// (QueueConfig.Keys): each key runs at most 2 tasks at once unless its own
// limits say otherwise.
var fairPolicy = worqr.KeyPolicy{Fair: true, PerKey: worqr.KeyLimits{Limits: worqr.Limits{Concurrency: 2}}}

// The keys with limits of their own (Client.SetKeyLimits): fairWide runs up
// to 4 tasks at once, twice the turn of the others; fairRated 2 at once and
// at most fairRatedLimits.Rate starts in any window of its Period.
const (
	fairWide  = "k0"
	fairRated = "k1"
)

var (
	fairWideLimits  = worqr.KeyLimits{Weight: 2, Limits: worqr.Limits{Concurrency: 4}}
	fairRatedLimits = worqr.KeyLimits{Limits: worqr.Limits{Concurrency: 2, Rate: 5, Period: 200 * time.Millisecond}}
)

// fairLimit is key's Concurrency.
func fairLimit(key string) int {
	switch key {
	case fairWide:
		return fairWideLimits.Concurrency
	case fairRated:
		return fairRatedLimits.Concurrency
	}
	return fairPolicy.PerKey.Concurrency
}

// fairScenario sizes one run of TestChaosFair.
type fairScenario struct {
	keys    int
	upfront int           // tasks of each key enqueued once the workers run
	perSec  float64       // then tasks of each key enqueued per second on average, in bursts...
	burst   int           // ...of this many (fairRated: half as many bursts)
	run     time.Duration // ...for this long, under the faults
	drain   time.Duration // the longest wait for the queue to drain after run
	procs   int           // worker processes
	conc    int           // QueueConfig.Concurrency of each
}

// TestChaosFair: a fair queue (8 keys; each runs at most 2 tasks at once,
// but k0 up to 4 with twice the turn, and k1 starts at most 5 in any
// 200 ms) served by four worker processes (the test binary re-executed, 12
// slots each: more than the keys' limits add up to, so that the limits,
// not the slots, hold the keys back) that reach Redis through the proxy,
// which loses the reply to one request in 100 (the request ran), while the
// process with the most handler runs going (busiest) is SIGKILLed every
// 0.5–1.2 s and replaced and a random one is
// SIGSTOPped past its keepalive TTL (1.5 s, TTL 1 s) every 1–2.5 s. Each
// key gets a backlog once the processes run, then bursts of tasks while
// the faults go on: each key is held by its limit for a while, runs dry,
// and comes back in turn. Each handler (20–60 ms: long enough for a key's
// runs to overlap, and for kills to cut them) logs its start and end, and
// each process its sessions and accepted ends (EventDone), to the
// process's file.
//
// Checked from outside (fairCheck): no task lost (a run of it ended, and
// Redis holds it as done); no end accepted twice (two done lines for one
// task); for each key, at no moment do more runs of the key overlap than
// its Concurrency, counted from the handlers' lines, not from worqr's
// counters (fairCheck says which runs are left out: a zombie's); k1's
// starts (TaskInfo.StartedAt, Redis's clock) never exceed its rate; after
// the processes stop no key holds a running count or a task.
//
// Short mode (about 6 s): a backlog of 50 tasks per key, then bursts of
// 20 for 3 s, 35 tasks a second per key on average (near what a key's
// limit lets it run): about 1,100 tasks. Long mode (make chaos): 200, then
// bursts of 30, 30 a second per key, for WORQR_CHAOS_DURATION (10 min:
// about 140,000 tasks).
func TestChaosFair(t *testing.T) {
	needMode(t, "short", "long")
	t.Parallel()
	s := fairScenario{keys: 8, upfront: 50, perSec: 35, burst: 20, run: 3 * time.Second, drain: 40 * time.Second, procs: 4, conc: 12}
	if cfg.mode == "long" {
		s.upfront, s.perSec, s.burst, s.run, s.drain = 200, 30, 30, cfg.duration, 5*time.Minute
	}
	chaosFair(t, "fair-"+cfg.mode, s)
}

func chaosFair(t *testing.T, name string, s fairScenario) {
	c := newCluster(t, name, clusterOpts{viaProxy: true, timings: shortTimings})
	ctx := context.Background()
	// Fair before the first keyed enqueue: one enqueued while the queue is
	// not fair would wait as an ordered task.
	if err := c.client.SetKeyPolicy(ctx, fairQueue, fairPolicy); err != nil {
		t.Fatal(err)
	}
	if err := c.client.SetKeyLimits(ctx, fairQueue, fairWide, fairWideLimits); err != nil {
		t.Fatal(err)
	}
	if err := c.client.SetKeyLimits(ctx, fairQueue, fairRated, fairRatedLimits); err != nil {
		t.Fatal(err)
	}
	keyOf := map[string]string{} // task id -> key, of every enqueue that returned success
	var emu sync.Mutex
	enqueue := func(key string, n int) error {
		ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		ps := make([][]byte, n)
		for i := range ps {
			ps[i] = []byte(key)
		}
		ids, err := c.client.EnqueueBatch(ectx, fairQueue, ps, &worqr.EnqueueOpts{Key: key})
		if err != nil {
			return err
		}
		emu.Lock()
		for _, id := range ids {
			keyOf[id] = key
		}
		emu.Unlock()
		return nil
	}
	keys := make([]string, s.keys)
	for k := range keys {
		keys[k] = fmt.Sprintf("k%d", k)
	}

	killedAt := map[int]time.Time{} // proc n -> when killed
	frozen := map[int][]span{}      // proc n -> its freezes, from before the SIGSTOP to after the SIGCONT
	var kmu sync.Mutex
	start := func() error {
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := startFairProc(c, s.conc)
			if err == nil {
				return nil
			}
			// A lost reply can fail a registration: the process exits.
			if time.Now().After(deadline) || redistest.Pause(c.ctx, 300*time.Millisecond) != nil {
				return err
			}
		}
	}
	c.proxy.DropReplies(0.01)
	// Every process up before the backlog: one alone would run it on its
	// slots, fewer than the keys' limits.
	errs := make(chan error, s.procs)
	for i := 0; i < s.procs; i++ {
		go func() { errs <- start() }()
	}
	for i := 0; i < s.procs; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for done := 0; done < s.upfront; done += 10 { // key by key interleaved
		for _, key := range keys {
			if err := enqueue(key, min(10, s.upfront-done)); err != nil {
				t.Fatal(err)
			}
		}
	}
	started := time.Now()
	in, err := worqr.NewInspector(c.pool, &worqr.Config{Namespace: c.ns})
	if err != nil {
		t.Fatal(err)
	}
	// The rest of the tasks, in bursts, while the faults run.
	var enqErr error
	enqDone := make(chan struct{})
	go func() {
		defer close(enqDone)
		const tick = 50 * time.Millisecond
		chance := s.perSec * tick.Seconds() / float64(s.burst) // of a burst per key per tick
		for redistest.Pause(c.ctx, tick) == nil && time.Since(started) < s.run {
			for _, key := range keys {
				p := chance
				if key == fairRated {
					p *= 0.5 // below its rate on average: its backlog drains
				}
				if rand.Float64() < p {
					if err := enqueue(key, s.burst); err != nil {
						enqErr = err
						return
					}
				}
			}
		}
	}()
	drained := func() bool {
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		st, err := in.Queue(qctx, fairQueue)
		return err == nil && st.Waiting+st.Scheduled+st.Active+st.Dead+st.Keys == 0
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var f faults
	f.run(fctx, func(ctx context.Context) {
		next := pace(500*time.Millisecond, 1200*time.Millisecond)
		for redistest.Pause(ctx, next()) == nil {
			if l := c.live(false); len(l) > 0 {
				p := busiest(c, l)
				c.kill(p) // returns once p is gone: a run cut by it ends before now
				kmu.Lock()
				killedAt[p.n] = time.Now()
				kmu.Unlock()
			}
			if err := start(); err != nil {
				t.Errorf("replacing a killed process: %v", err)
				return
			}
		}
	})
	f.run(fctx, func(ctx context.Context) {
		next := pace(time.Second, 2500*time.Millisecond)
		for redistest.Pause(ctx, next()) == nil {
			if l := c.live(false); len(l) > 1 {
				p := l[rand.IntN(len(l))]
				from := time.Now()
				c.freeze(p, 1500*time.Millisecond)
				kmu.Lock()
				frozen[p.n] = append(frozen[p.n], span{from, time.Now()})
				kmu.Unlock()
			}
		}
	})
	if cfg.mode == "long" {
		f.run(fctx, func(ctx context.Context) {
			for redistest.Pause(ctx, 30*time.Second) == nil {
				emu.Lock()
				n := len(keyOf)
				emu.Unlock()
				t.Logf("%s: %s: %d enqueued, %d processes live, faults %v",
					name, time.Since(started).Round(time.Second), n, len(c.live(true)), c.faultCounts())
			}
		})
	}
	<-enqDone
	if enqErr != nil {
		t.Fatalf("enqueueing: %v", enqErr)
	}
	dctx, dcancel := context.WithTimeout(c.ctx, s.drain)
	defer dcancel()
	if redistest.Poll(dctx, drained) != nil { // the children log to files: Redis says when it is over
		t.Errorf("the fair queue did not drain within %s of the last enqueue", s.drain)
	}
	ran := time.Since(started)
	cancel()
	faultsBeforeDrain := c.faultCounts()
	f.wait()
	c.proxy.DropReplies(0)
	dropped := c.proxy.dropped.Load()
	for _, p := range c.stopAll(15 * time.Second) {
		t.Error(p)
	}
	for _, p := range c.unexpectedExits() {
		t.Error(p)
	}
	if !drained() {
		t.Errorf("tasks left in the fair queue after the processes stopped")
	}
	if faultsBeforeDrain["kill"] == 0 || faultsBeforeDrain["freeze"] == 0 || dropped == 0 {
		t.Errorf("not every fault happened before the queue drained: %v, %d replies dropped: the run tested little",
			faultsBeforeDrain, dropped)
	}
	// No slot leaked: every key's running count came back to 0.
	var leaked []string
	for cursor, first := uint64(0), true; first || cursor != 0; first = false {
		ks, next, _, err := in.Keys(ctx, fairQueue, cursor, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range ks {
			if k.Running != 0 || k.Behind != 0 {
				leaked = append(leaked, fmt.Sprintf("%s (running %d, waiting %d)", k.Key, k.Running, k.Behind))
			}
		}
		cursor = next
	}
	if len(leaked) > 0 {
		t.Errorf("keys left with a count after the processes stopped: %v", leaked)
	}

	// What Redis holds of every task: its state and its latest start.
	redisTasks := map[string]*worqr.TaskInfo{}
	for off := 0; ; off += 1000 {
		ts, _, err := in.Tasks(ctx, fairQueue, worqr.StateDone, off, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, ti := range ts {
			redisTasks[ti.ID] = ti
		}
		if len(ts) < 1000 {
			break
		}
	}

	// Every process's lines.
	c.mu.Lock()
	all := make([]*proc, 0, len(c.procs))
	for _, p := range c.procs {
		all = append(all, p)
	}
	c.mu.Unlock()
	var logs []fairLog
	for _, p := range all {
		l, err := readFairLog(filepath.Join(c.logDir, fmt.Sprintf("fair-%d.log", p.n)), p.n)
		if err != nil {
			t.Fatal(err)
		}
		kmu.Lock()
		l.killed, l.freezes = killedAt[p.n], frozen[p.n]
		kmu.Unlock()
		logs = append(logs, l)
	}
	fig, problems := fairCheck(keyOf, keys, logs, redisTasks)
	for i, p := range problems {
		if i == 10 {
			t.Errorf("... and %d more", len(problems)-10)
			break
		}
		t.Error(p)
	}
	if fig.cut == 0 {
		t.Errorf("no kill cut a run: the run tested little")
	}
	if fig.maxOverlap[fairWide] <= fairPolicy.PerKey.Concurrency {
		t.Errorf("%s never ran more than %d tasks at once: its own limit (%d) was not tested",
			fairWide, fairPolicy.PerKey.Concurrency, fairWideLimits.Concurrency)
	}
	if fig.rateWindows == 0 {
		t.Errorf("%s never started %d tasks within %s: its rate was not tested", fairRated, fairRatedLimits.Rate, fairRatedLimits.Period)
	}
	var per, perAll []string
	for _, key := range keys {
		per = append(per, fmt.Sprintf("%s %d/%d", key, fig.maxOverlap[key], fairLimit(key)))
		perAll = append(perAll, fmt.Sprintf("%s %d", key, fig.maxOverlapAll[key]))
	}
	c.mu.Lock()
	starts := c.starts - c.failedStarts
	c.mu.Unlock()
	publish(t, fmt.Sprintf("=== chaos %s: %d keys, %d tasks done in %s through %v and %d lost replies, %d processes;\n"+
		"  %d runs (%d more than tasks, %d cut by a kill), %d left out of the overlap count (%d of frozen sessions, %d of other lost keepalives);\n"+
		"  %d tasks ended with no done line (Redis had their end);\n"+
		"  most runs of a key at once / its limit: %s;\n"+
		"  the same counting the runs left out too: %s;\n"+
		"  %s: fewest ms between a start and the %dth after it: %d (period %s; %d windows at the rate)\n",
		name, len(keys), len(keyOf), ran.Round(100*time.Millisecond), faultsBeforeDrain, dropped, starts,
		fig.runs, fig.runs-len(keyOf), fig.cut, fig.zombie+fig.lostKA, fig.zombie, fig.lostKA,
		fig.noDoneLine, strings.Join(per, ", "), strings.Join(perAll, ", "),
		fairRated, fairRatedLimits.Rate, fig.minRateGap.Milliseconds(), fairRatedLimits.Period, fig.rateWindows))
}

// busiest picks the process to kill among live ones l: one that has the
// most handler runs going, as its log says (starts without their end),
// so that a kill cuts runs (a process the keys' limits left idle, say a
// replacement just started, would cut none); at random among the busiest.
func busiest(c *cluster, l []*proc) *proc {
	var best []*proc
	most := -1
	for _, p := range l {
		b, err := os.ReadFile(filepath.Join(c.logDir, fmt.Sprintf("fair-%d.log", p.n)))
		if err != nil {
			continue
		}
		n := 0
		for _, line := range strings.Split(string(b), "\n") {
			switch {
			case strings.HasPrefix(line, "start "):
				n++
			case strings.HasPrefix(line, "end "):
				n--
			}
		}
		switch {
		case n > most:
			best, most = []*proc{p}, n
		case n == most:
			best = append(best, p)
		}
	}
	if len(best) == 0 {
		return l[rand.IntN(len(l))]
	}
	return best[rand.IntN(len(best))]
}

// fairRun is one run of a handler, as its process logged it.
type fairRun struct {
	id, key, session, pid string
	proc                  int
	start, end            time.Time
	cut                   bool // no end line: end is when the process was killed
}

func (r fairRun) String() string {
	s := fmt.Sprintf("%s (%s) pid %s by process %d session %s from %s to %s", r.id, r.key, r.pid, r.proc, r.session,
		r.start.Format("15:04:05.000000"), r.end.Format("15:04:05.000000"))
	if r.cut {
		s += " (killed)"
	}
	return s
}

// fairLog is what one process logged, and the faults it got.
type fairLog struct {
	proc       int
	runs       []fairRun
	registered map[string]time.Time // session (worker id) -> when it registered
	lostKA     map[string]time.Time // session -> when the process saw its keepalive lost
	done       []string             // ids of its done lines
	others     []string             // lines that must not come (retry, dead)
	killed     time.Time            // zero: never killed
	freezes    []span
}

// readFairLog reads one process's log (see fairChild).
func readFairLog(path string, n int) (fairLog, error) {
	l := fairLog{proc: n, registered: map[string]time.Time{}, lostKA: map[string]time.Time{}}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return l, nil
	}
	if err != nil {
		return l, err
	}
	defer f.Close()
	open := map[string]int{} // pid -> index in runs of the run not yet ended
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			continue // a line cut by a kill
		}
		ns, err := strconv.ParseInt(fs[len(fs)-1], 10, 64)
		if err != nil || len(fs[len(fs)-1]) < 19 {
			continue // a unix ns time has 19 digits: not cut
		}
		at := time.Unix(0, ns)
		switch {
		case fs[0] == "registered" && len(fs) == 3:
			l.registered[fs[1]] = at
		case fs[0] == "keepalive_lost" && len(fs) == 3:
			l.lostKA[fs[1]] = at
		case fs[0] == "start" && len(fs) == 6:
			open[fs[4]] = len(l.runs)
			l.runs = append(l.runs, fairRun{id: fs[1], key: fs[2], session: fs[3], pid: fs[4], proc: n, start: at})
		case fs[0] == "end" && len(fs) == 6:
			if i, ok := open[fs[4]]; ok {
				l.runs[i].end = at
				delete(open, fs[4])
			}
		case fs[0] == "done" && len(fs) == 4:
			l.done = append(l.done, fs[1])
		case fs[0] == "retry" || fs[0] == "dead":
			l.others = append(l.others, fmt.Sprintf("process %d: %s", n, sc.Text()))
		}
	}
	return l, sc.Err()
}

// fairFigures is what fairCheck counted.
type fairFigures struct {
	runs, cut      int
	zombie, lostKA int // runs left out of the overlap count
	noDoneLine     int
	maxOverlap     map[string]int
	maxOverlapAll  map[string]int // the same counting the runs left out too
	minRateGap     time.Duration  // fairRated: the shortest time from a start to the Rate-th after it
	rateWindows    int            // fairRated: starts whose Rate-th successor came within 2 periods
}

// fairCheck returns the figures of a run, and what in it breaks the fair
// queue's promises: a task of keyOf lost (no run of it ended, or Redis
// does not hold it as done: redisTasks are the done tasks Redis retained),
// an end accepted twice (two done lines for one task, across every
// process), more runs of a key at once than its Concurrency, more starts of
// fairRated in a window of its Period than its Rate.
//
// The overlap is counted over the runs of live sessions. A run cut by a
// kill lasts until the kill (the killed process's slots come back only
// once the reaper finds it dead, after its TTL). Left out:
//   - a run of a session (worker id) that a freeze made a zombie, if it
//     ended after the SIGSTOP (the whole run, its part before the SIGSTOP
//     too): past the TTL the reaper gives the session's
//     slots to other processes while its handler is stopped mid-run, or
//     has not started yet (its take's reply read after the SIGCONT). Its
//     runs that ended before the freeze count. A session registered after
//     the SIGCONT is a new one, and counts;
//   - every run of a session whose keepalive was lost for another reason
//     (a keepalive_lost line, no freeze): when its keepalive expired is not
//     known, so neither is when its slots went.
//
// The rate is checked on Redis's clock: each task's StartedAt is its last
// start (earlier starts of it, lost to a crash, are not known), so the
// starts checked are a subset of the key's, which the rate bounds too.
func fairCheck(keyOf map[string]string, keys []string, logs []fairLog, redisTasks map[string]*worqr.TaskInfo) (fairFigures, []string) {
	fig := fairFigures{maxOverlap: map[string]int{}, maxOverlapAll: map[string]int{}}
	var problems []string
	doneLines := map[string]int{}
	ended := map[string]bool{}
	byKey := map[string][]fairRun{}
	allByKey := map[string][]fairRun{} // with the runs left out
	for _, l := range logs {
		problems = append(problems, l.others...)
		for _, id := range l.done {
			doneLines[id]++
		}
		for _, r := range l.runs {
			fig.runs++
			if _, ok := keyOf[r.id]; !ok {
				problems = append(problems, fmt.Sprintf("a run of a task never enqueued: %s", r))
				continue
			}
			if r.end.IsZero() {
				if l.killed.IsZero() {
					problems = append(problems, fmt.Sprintf("run %s has no end and its process was not killed", r))
					continue
				}
				r.end, r.cut = l.killed, true
				fig.cut++
			} else {
				ended[r.id] = true
			}
			allByKey[r.key] = append(allByKey[r.key], r)
			reg, known := l.registered[r.session]
			switch {
			case !known:
				problems = append(problems, fmt.Sprintf("run %s: its session has no registered line", r))
				continue
			case zombieRun(r, reg, l.freezes):
				fig.zombie++
				continue
			}
			if at, lost := l.lostKA[r.session]; lost && !frozenLoss(reg, at, l.freezes) {
				fig.lostKA++
				continue
			}
			byKey[r.key] = append(byKey[r.key], r)
		}
	}
	var lost, double []string
	for id, key := range keyOf {
		ti := redisTasks[id]
		switch {
		case !ended[id]:
			lost = append(lost, fmt.Sprintf("%s (%s): no run of it ended", id, key))
		case ti == nil || ti.State != worqr.StateDone:
			lost = append(lost, fmt.Sprintf("%s (%s): Redis does not hold it as done", id, key))
		case ti.Key != key:
			problems = append(problems, fmt.Sprintf("%s: enqueued with key %s, Redis says %s", id, key, ti.Key))
		}
		switch n := doneLines[id]; {
		case n > 1:
			double = append(double, fmt.Sprintf("%s (%s): %d done lines", id, key, n))
		case n == 0:
			fig.noDoneLine++
		}
	}
	sort.Strings(lost)
	sort.Strings(double)
	if len(lost) > 0 {
		problems = append(problems, fmt.Sprintf("%d task(s) LOST, first: %s", len(lost), strings.Join(first(lost, 5), "; ")))
	}
	if len(double) > 0 {
		problems = append(problems, fmt.Sprintf("%d task(s) ACCEPTED TWICE, first: %s", len(double), strings.Join(first(double, 5), "; ")))
	}
	for _, key := range keys {
		most, over := maxOverlap(byKey[key], fairLimit(key))
		fig.maxOverlap[key] = most
		fig.maxOverlapAll[key], _ = maxOverlap(allByKey[key], len(allByKey[key]))
		if over != nil {
			problems = append(problems, fmt.Sprintf("%s: %d runs at once (its limit is %d): %s",
				key, len(over), fairLimit(key), strings.Join(fairRunStrings(over), "; ")))
		}
	}
	// The rate: in any window of Period (a start counts in the window
	// (t-Period, t] of the take at t), at most Rate starts.
	var at []time.Time
	for id, key := range keyOf {
		if ti := redisTasks[id]; key == fairRated && ti != nil && !ti.StartedAt.IsZero() {
			at = append(at, ti.StartedAt)
		}
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	rate, period := fairRatedLimits.Rate, fairRatedLimits.Period
	fig.minRateGap = -1
	for i := 0; i+rate < len(at); i++ {
		gap := at[i+rate].Sub(at[i])
		if fig.minRateGap < 0 || gap < fig.minRateGap {
			fig.minRateGap = gap
		}
		if gap < 2*period {
			fig.rateWindows++
		}
		if gap < period {
			problems = append(problems, fmt.Sprintf("%s: %d starts within %s (rate %d per %s), from %s",
				fairRated, rate+1, gap, rate, period, at[i].Format("15:04:05.000")))
		}
	}
	return fig, problems
}

// zombieRun says whether run r, of a session registered at reg, ended after
// the start of a freeze of its process that the session lived through (it
// registered before the SIGCONT).
func zombieRun(r fairRun, reg time.Time, freezes []span) bool {
	for _, f := range freezes {
		if reg.Before(f.to) && r.end.After(f.from) {
			return true
		}
	}
	return false
}

// frozenLoss says whether a session registered at reg whose process saw
// its keepalive lost at lost lived through a freeze before that: the freeze
// explains the loss.
func frozenLoss(reg, lost time.Time, freezes []span) bool {
	for _, f := range freezes {
		if reg.Before(f.to) && lost.After(f.from) {
			return true
		}
	}
	return false
}

// maxOverlap returns the most runs of rs that overlap at one moment, and,
// when that is more than limit, the runs overlapping at the first moment
// it was. A run that ends when another starts does not overlap it (the
// end line is written before the end is sent, so a slot it frees is
// taken after).
func maxOverlap(rs []fairRun, limit int) (int, []fairRun) {
	type edge struct {
		at    time.Time
		start bool
		i     int
	}
	es := make([]edge, 0, 2*len(rs))
	for i, r := range rs {
		es = append(es, edge{r.start, true, i}, edge{r.end, false, i})
	}
	sort.Slice(es, func(i, j int) bool {
		if !es[i].at.Equal(es[j].at) {
			return es[i].at.Before(es[j].at)
		}
		return !es[i].start && es[j].start // ends first
	})
	running := map[int]bool{}
	most := 0
	var over []fairRun
	for _, e := range es {
		if !e.start {
			delete(running, e.i)
			continue
		}
		running[e.i] = true
		most = max(most, len(running))
		if len(running) > limit && over == nil {
			for i := range running {
				over = append(over, rs[i])
			}
			sort.Slice(over, func(i, j int) bool { return over[i].start.Before(over[j].start) })
		}
	}
	return most, over
}

func fairRunStrings(rs []fairRun) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.String()
	}
	return out
}

// startFairProc starts one fair-queue worker process (the test binary,
// re-executed) with conc slots and returns once it registered.
func startFairProc(c *cluster, conc int) error {
	return startChildProc(c, "fair", fairChildEnv, "WORQR_CHAOS_FAIR_REDIS="+c.redisURLForWorkers(),
		"WORQR_CHAOS_FAIR_NS="+c.ns, "WORQR_CHAOS_FAIR_CONCURRENCY="+strconv.Itoa(conc))
}

// fairChild is the fair-queue worker process: it serves the fair queue
// until SIGTERM and returns the exit code. It logs to the file named by
// fairChildEnv, unbuffered (a line written is kept through a SIGKILL),
// each line ending with the unix ns it was written at:
//
//	registered <worker id> <ns>        a session began (EventRegistered)
//	keepalive_lost <worker id> <ns>    it ended (EventKeepaliveLost)
//	start <task id> <key> <worker id> <pid> <ns>   a handler run began
//	end <task id> <key> <worker id> <pid> <ns>     it returned nil
//	done <task id> <pid> <ns>          Redis accepted the end (EventDone)
//	lost <task id> <pid> <ns>          the end was refused (EventLost)
//	retry|dead <task id> <ns>          (never: the handlers do not fail)
func fairChild() int {
	c, err := openChild("fair child", fairChildEnv, "WORQR_CHAOS_FAIR_REDIS")
	if err != nil {
		fmt.Fprintln(os.Stderr, "fair child:", err)
		return 1
	}
	defer c.close()
	fail, env, pool, logLine := c.fail, envDuration, c.pool, c.line
	handler := worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
		logLine("start", t.ID, t.Key, t.WorkerID(), t.PID())
		time.Sleep(between(20*time.Millisecond, 60*time.Millisecond))
		logLine("end", t.ID, t.Key, t.WorkerID(), t.PID())
		return nil
	})
	conc, _ := strconv.Atoi(os.Getenv("WORQR_CHAOS_FAIR_CONCURRENCY"))
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{
		Config:            worqr.Config{Namespace: os.Getenv("WORQR_CHAOS_FAIR_NS")},
		HeartbeatInterval: env("WORQR_HEARTBEAT_INTERVAL"),
		HeartbeatTTL:      env("WORQR_HEARTBEAT_TTL"),
		ReaperInterval:    env("WORQR_REAPER_INTERVAL"),
		PollInterval:      env("WORQR_POLL_INTERVAL"),
		Queues: map[string]worqr.QueueConfig{fairQueue: {
			Handler: handler, Concurrency: conc, MaxCrashes: -1, Keys: fairPolicy,
			Retention: time.Hour, // the harness reads every done task
		}},
		OnEvent: func(e worqr.Event) {
			switch e.Kind {
			case worqr.EventRegistered, worqr.EventKeepaliveLost:
				logLine(string(e.Kind), e.WorkerID)
			case worqr.EventDone, worqr.EventLost:
				logLine(string(e.Kind), e.TaskID, e.PID)
			case worqr.EventRetry, worqr.EventDead:
				logLine(string(e.Kind), e.TaskID)
			}
		},
	})
	if err != nil {
		return fail(err)
	}
	return serveUntilTerm(w, fail)
}
