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

// orderedChildEnv, when set, makes the test binary an ordered-queue worker
// process (orderedChild) instead of running the tests: the value is the file
// its handlers log to.
const orderedChildEnv = "WORQR_CHAOS_ORDERED_LOG"

const orderedQueue = "ordered"

// TestChaosOrdered: an ordered queue (EnqueueOpts.Key) served by four worker
// processes (the test binary re-executed) while a random one is SIGKILLed
// every 0.5–1.2 s and replaced and one is SIGSTOPped past its keepalive TTL
// (1.5 s) every 1–2.5 s. Each handler logs its start and end to its process's file.
// Checked from outside: every task ran to its end; no two runs of one key by
// processes never frozen overlap in time (a run cut by a kill lasts until
// the kill); for each key, the first start of each task comes after the end
// of a run of the key's previous task.
func TestChaosOrdered(t *testing.T) {
	needMode(t, "short")
	t.Parallel()
	chaosOrdered(t, "ordered", 0)
}

// TestChaosOrderedBatches is TestChaosOrdered with batches per key: each
// process serves the queue with a BatchHandler and KeyBatch 4, running a
// batch's tasks one after the other (each logged as a run). The same checks
// hold, and some batch must have held more than one task.
func TestChaosOrderedBatches(t *testing.T) {
	needMode(t, "short")
	t.Parallel()
	chaosOrdered(t, "ordered-batches", 4)
}

// chaosOrdered runs the ordered scenario; batch > 0: batches of that size.
func chaosOrdered(t *testing.T, name string, batch int) {
	const keys, perKey, procs = 40, 25, 4
	c := newCluster(t, name, clusterOpts{timings: shortTimings})
	ctx := context.Background()
	// Enqueue every task before any worker runs, key by key interleaved.
	for seq := 0; seq < perKey; seq++ {
		for k := 0; k < keys; k++ {
			key := fmt.Sprintf("k%02d", k)
			if _, err := c.client.Enqueue(ctx, orderedQueue, []byte(fmt.Sprintf("%s %d", key, seq)),
				&worqr.EnqueueOpts{Key: key}); err != nil {
				t.Fatal(err)
			}
		}
	}
	killedAt := map[int]time.Time{} // proc n -> when killed
	var kmu sync.Mutex
	start := func() {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := startOrderedProc(c, batch)
			if err == nil {
				return
			}
			if time.Now().After(deadline) || redistest.Pause(c.ctx, 300*time.Millisecond) != nil {
				t.Fatal(err)
			}
		}
	}
	// The queue waits paused while the processes start, one after the
	// other (seconds on a busy machine): the first would drain it alone,
	// before any fault. It resumes once the faults run.
	in, err := worqr.NewInspector(c.pool, &worqr.Config{Namespace: c.ns})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Pause(ctx, orderedQueue); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < procs; i++ {
		start()
	}
	drained := func() bool {
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		st, err := in.Queue(qctx, orderedQueue)
		return err == nil && st.Waiting+st.Scheduled+st.Active+st.Dead+st.Keys == 0
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var f faults
	f.run(fctx, func(ctx context.Context) {
		next := pace(500*time.Millisecond, 1200*time.Millisecond)
		for redistest.Pause(ctx, next()) == nil {
			if l := c.live(false); len(l) > 0 {
				p := l[rand.IntN(len(l))]
				c.kill(p) // returns once p is gone: a run cut by it ends before now
				kmu.Lock()
				killedAt[p.n] = time.Now()
				kmu.Unlock()
			}
			start()
		}
	})
	f.run(fctx, func(ctx context.Context) {
		next := pace(time.Second, 2500*time.Millisecond)
		for redistest.Pause(ctx, next()) == nil {
			if l := c.live(false); len(l) > 1 {
				c.freeze(l[rand.IntN(len(l))], 1500*time.Millisecond)
			}
		}
	})
	if err := in.Resume(ctx, orderedQueue); err != nil {
		t.Fatal(err)
	}
	dctx, dcancel := context.WithTimeout(c.ctx, 40*time.Second)
	defer dcancel()
	if redistest.Poll(dctx, drained) != nil { // the children log to files: Redis says when it is over
		t.Fatalf("the ordered queue did not drain within 40s")
	}
	cancel()
	faultsBeforeDrain := c.faultCounts()
	f.wait()
	for _, p := range c.stopAll(15 * time.Second) {
		t.Error(p)
	}
	for _, p := range c.unexpectedExits() {
		t.Error(p)
	}
	if !drained() {
		t.Errorf("tasks left in the ordered queue after the processes stopped")
	}
	if faultsBeforeDrain["kill"] == 0 || faultsBeforeDrain["freeze"] == 0 {
		t.Errorf("not every fault happened before the queue drained: %v: the run tested little", faultsBeforeDrain)
	}

	// Read every process's runs.
	c.mu.Lock()
	all := make([]*proc, 0, len(c.procs))
	for _, p := range c.procs {
		all = append(all, p)
	}
	c.mu.Unlock()
	var runs []orderedRun
	biggest := 0 // the largest batch
	for _, p := range all {
		rs, big, err := readOrderedRuns(filepath.Join(c.logDir, fmt.Sprintf("ordered-%d.log", p.n)), p.n)
		if err != nil {
			t.Fatal(err)
		}
		biggest = max(biggest, big)
		kmu.Lock()
		k, killed := killedAt[p.n]
		kmu.Unlock()
		for i := range rs {
			rs[i].zombie = p.wasFrozen
			if rs[i].end.IsZero() {
				if !killed {
					t.Errorf("process %d: run of %s %d has no end and the process was not killed", p.n, rs[i].key, rs[i].seq)
					continue
				}
				rs[i].end = k // cut by the kill
				rs[i].cut = true
			}
		}
		runs = append(runs, rs...)
	}
	problems := checkOrdered(runs, keys, perKey)
	for i, p := range problems {
		if i == 10 {
			t.Errorf("... and %d more", len(problems)-10)
			break
		}
		t.Error(p)
	}
	cut := 0
	for _, r := range runs {
		if r.cut {
			cut++
		}
	}
	if cut == 0 {
		t.Errorf("no kill cut a run: the run tested little")
	}
	if batch > 1 && biggest < 2 {
		t.Errorf("no batch held more than one task: the run tested little")
	}
	what := "ordered"
	if batch > 0 {
		what = fmt.Sprintf("ordered, batches of up to %d (largest seen %d)", batch, biggest)
	}
	publish(t, fmt.Sprintf("%s: %d keys x %d tasks done through %v; %d runs (%d more than tasks, %d cut by a kill)",
		what, keys, perKey, faultsBeforeDrain, len(runs), len(runs)-keys*perKey, cut))
}

// orderedRun is one run of a handler, as its process logged it.
type orderedRun struct {
	key        string
	seq        int
	proc       int
	start, end time.Time
	cut        bool // no end line: end is when the process was killed
	zombie     bool // by a process that was frozen at some time
}

func (r orderedRun) String() string {
	s := fmt.Sprintf("%s %d by process %d from %s to %s", r.key, r.seq, r.proc,
		r.start.Format("15:04:05.000000"), r.end.Format("15:04:05.000000"))
	if r.cut {
		s += " (killed)"
	}
	return s
}

// readOrderedRuns reads the start and end lines of one process's log, and
// the size of the largest batch its "batch" lines announce.
func readOrderedRuns(path string, n int) (runs []orderedRun, biggest int, err error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	open := map[string]int{} // "key seq" -> index in runs of the run not yet ended
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 5 {
			continue // a line cut by a kill
		}
		seq, err1 := strconv.Atoi(fs[2])
		ns, err2 := strconv.ParseInt(fs[4], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		at := time.Unix(0, ns)
		id := fs[1] + " " + fs[2]
		switch fs[0] {
		case "batch": // "batch <key> <size> <pid> <ns>"
			biggest = max(biggest, seq)
		case "start":
			open[id] = len(runs)
			runs = append(runs, orderedRun{key: fs[1], seq: seq, proc: n, start: at})
		case "end":
			if i, ok := open[id]; ok {
				runs[i].end = at
				delete(open, id)
			}
		}
	}
	return runs, biggest, sc.Err()
}

// checkOrdered returns what breaks the ordered queue's promises in runs.
func checkOrdered(runs []orderedRun, keys, perKey int) []string {
	var problems []string
	byKey := map[string][]orderedRun{}
	for _, r := range runs {
		byKey[r.key] = append(byKey[r.key], r)
	}
	for k := 0; k < keys; k++ {
		key := fmt.Sprintf("k%02d", k)
		rs := byKey[key]
		sort.Slice(rs, func(i, j int) bool { return rs[i].start.Before(rs[j].start) })
		// Every task ended at least once.
		firstStart := make([]time.Time, perKey)
		ends := make([][]time.Time, perKey)
		for _, r := range rs {
			if r.seq < 0 || r.seq >= perKey {
				problems = append(problems, fmt.Sprintf("unknown task %s", r))
				continue
			}
			if firstStart[r.seq].IsZero() {
				firstStart[r.seq] = r.start
			}
			if !r.cut {
				ends[r.seq] = append(ends[r.seq], r.end)
			}
		}
		for seq := 0; seq < perKey; seq++ {
			if len(ends[seq]) == 0 {
				problems = append(problems, fmt.Sprintf("%s %d never ran to its end", key, seq))
				continue
			}
			// The first start of seq comes after the end of a run of seq-1.
			if seq > 0 && len(ends[seq-1]) > 0 {
				ok := false
				for _, e := range ends[seq-1] {
					ok = ok || !e.After(firstStart[seq])
				}
				if !ok {
					problems = append(problems, fmt.Sprintf("%s %d started at %s, before any run of %d ended",
						key, seq, firstStart[seq].Format("15:04:05.000000"), seq-1))
				}
			}
		}
		// No two runs of the key by processes never frozen overlap.
		var live []orderedRun
		for _, r := range rs {
			if !r.zombie {
				live = append(live, r)
			}
		}
		for i := 1; i < len(live); i++ {
			for j := 0; j < i; j++ {
				if live[i].start.Before(live[j].end) {
					problems = append(problems, fmt.Sprintf("%s: overlapping runs: %s and %s", key, live[j], live[i]))
				}
			}
		}
	}
	return problems
}

// startOrderedProc starts one ordered-queue worker process (the test binary,
// re-executed) and returns once it registered.
func startOrderedProc(c *cluster, batch int) error {
	return startChildProc(c, "ordered", orderedChildEnv, "WORQR_CHAOS_ORDERED_REDIS="+c.redisURLForWorkers(),
		"WORQR_CHAOS_ORDERED_NS="+c.ns, "WORQR_CHAOS_ORDERED_BATCH="+strconv.Itoa(batch))
}

// orderedChild is the ordered-queue worker process: it serves the ordered
// queue until SIGTERM, each run logging "start <key> <seq> <pid> <unix ns>"
// and "end ..." lines to the file named by orderedChildEnv (unbuffered, so
// a line written is kept through a SIGKILL), and returns the exit code.
func orderedChild() int {
	c, err := openChild("ordered child", orderedChildEnv, "WORQR_CHAOS_ORDERED_REDIS")
	if err != nil {
		fmt.Fprintln(os.Stderr, "ordered child:", err)
		return 1
	}
	defer c.close()
	fail, env, pool, logf := c.fail, envDuration, c.pool, c.logf
	pid := os.Getpid()
	var wmu sync.Mutex
	logLine := func(kind string, payload []byte) {
		wmu.Lock()
		defer wmu.Unlock()
		fmt.Fprintf(logf, "%s %s %d %d\n", kind, payload, pid, time.Now().UnixNano())
	}
	handler := worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
		logLine("start", t.Payload)
		time.Sleep(between(20*time.Millisecond, 50*time.Millisecond))
		logLine("end", t.Payload)
		return nil
	})
	qc := worqr.QueueConfig{Handler: handler, Concurrency: 2, MaxCrashes: -1}
	if n, _ := strconv.Atoi(os.Getenv("WORQR_CHAOS_ORDERED_BATCH")); n > 0 {
		// A batch's tasks run one after the other, each logged as a run.
		qc.Handler, qc.KeyBatch = nil, n
		qc.BatchHandler = worqr.BatchHandlerFunc(func(ctx context.Context, b *worqr.Batch) error {
			logLine("batch", []byte(fmt.Sprintf("%s %d", b.Key, len(b.Tasks))))
			for _, t := range b.Tasks {
				if err := handler(ctx, t); err != nil {
					return err
				}
			}
			return nil
		})
	}
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{
		Config:            worqr.Config{Namespace: os.Getenv("WORQR_CHAOS_ORDERED_NS")},
		HeartbeatInterval: env("WORQR_HEARTBEAT_INTERVAL"),
		HeartbeatTTL:      env("WORQR_HEARTBEAT_TTL"),
		ReaperInterval:    env("WORQR_REAPER_INTERVAL"),
		PollInterval:      env("WORQR_POLL_INTERVAL"),
		Queues:            map[string]worqr.QueueConfig{orderedQueue: qc},
	})
	if err != nil {
		return fail(err)
	}
	return serveUntilTerm(w, fail)
}
