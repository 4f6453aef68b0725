package cluster_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/rdb/cluster"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// While a master is down (from its death to its replica's promotion, about
// 3 s with the test cluster's 1.5 s node timeout) the whole cluster answers
// CLUSTERDOWN (cluster-require-full-coverage yes, the default): the workers'
// heartbeat TTL (5 s) outlasts it, so their sessions survive.
//
// TestClusterChaos runs worker processes (cmd/worqr-example worker, on
// WORQR_REDIS_CLUSTER) on a cluster of 3 masters with a replica each, three
// queues on three masters, tasks enqueued throughout, and in turn:
//
//	(a) SIGKILLs a worker process (the reaper of the others puts its
//	    takings back, as on one Redis);
//	(b) SIGKILLs the master of one queue (not the registry's): its replica
//	    is promoted, the workers carry on;
//	(c) moves the slot of another queue to another master in small batches
//	    while tasks flow, so that clients meet ASK (a key already moved)
//	    and MOVED (after the move).
//
// Then it checks: every acknowledged task finished, except those whose
// enqueue the killed master acknowledged and never replicated (counted and
// reported, with the finishes lost the same way, whose tasks ran again);
// no task ran twice at once in live workers, except where the first run
// was told its taking was lost; the harness's client met ASK and MOVED.
func TestClusterChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode")
	}
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Skip(redistest.ClusterHint)
	}
	bin := buildExample(t)
	rc, err := redistest.StartClusterWithReplicas(3)
	if err != nil {
		t.Fatalf("starting the cluster with replicas: %v", err)
	}
	t.Cleanup(rc.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // phases (a)-(c), then up to 90 s of drain
	defer cancel()

	masters, err := rc.Masters(ctx)
	if err != nil || len(masters) != 3 {
		t.Fatalf("masters: %v, %v", masters, err)
	}
	nodeOf := func(tag string) *redistest.Server {
		n, err := rc.NodeOf(ctx, cluster.TagSlot(tag))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Three queues, one per master; the one to kill is not the registry's
	// master (a worker whose registry is away loses its keepalive: the
	// suite in test/chaos covers that on one Redis).
	regNode := nodeOf(rdb.RegistryTag)
	byNode := map[*redistest.Server]string{}
	for i := 0; len(byNode) < 3 && i < 1000; i++ {
		q := "cq" + strconv.Itoa(i)
		if n := nodeOf(q); byNode[n] == "" {
			byNode[n] = q
		}
	}
	var killQ, moveQ, regQ string
	for n, q := range byNode {
		switch {
		case n == regNode:
			regQ = q
		case killQ == "":
			killQ = q
		default:
			moveQ = q
		}
	}
	queues := []string{regQ, killQ, moveQ}
	ns := redistest.Namespace()

	cp, err := cluster.New(ctx, cluster.Options{Seeds: rc.Addrs(), NewPool: func(addr string) *redis.Pool {
		return &redis.Pool{MaxIdle: 16, IdleTimeout: time.Minute, DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", addr, redis.DialConnectTimeout(time.Second),
				redis.DialReadTimeout(3*time.Second), redis.DialWriteTimeout(3*time.Second))
		}}
	}, RetryFor: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	client, err := worqr.NewClient(cp, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(cp, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}

	led := &chaosLedger{tasks: map[string]*chaosTask{}, procs: map[int]*workerProc{}}
	seeds := strings.Join(rc.Addrs(), ",")
	start := func() *workerProc {
		t.Helper()
		p, err := led.start(bin, seeds, ns, queues, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for i := 0; i < 3; i++ {
		start()
	}
	t.Cleanup(led.killAll)

	// Tasks flow on the three queues, about 150 a second.
	enqCtx, stopEnq := context.WithCancel(ctx)
	var enqWG sync.WaitGroup
	var enqErrs atomic.Int64
	for _, q := range queues {
		enqWG.Add(1)
		go func() {
			defer enqWG.Done()
			for i := 0; enqCtx.Err() == nil; i++ {
				ectx, c := context.WithTimeout(enqCtx, 5*time.Second)
				id, err := client.Enqueue(ectx, q, []byte("c"), nil)
				c()
				if err != nil {
					enqErrs.Add(1)
				} else {
					led.acked(q, id)
				}
				sleepFor(enqCtx, 20*time.Millisecond)
			}
		}()
	}
	waitAcked := func(n int) {
		t.Helper()
		redistest.WaitFor(t, 20*time.Second, fmt.Sprintf("%d tasks acknowledged", n), func() bool { return led.ackCount() >= n })
	}

	// (a) A worker process killed while it holds takings.
	waitAcked(150)
	var victim *workerProc
	redistest.WaitFor(t, 10*time.Second, "a worker holding takings", func() bool {
		victim = led.busiest()
		return victim != nil && led.heldBy(victim) > 0
	})
	held := led.heldBy(victim)
	led.kill(victim)
	start()
	t.Logf("(a) worker %d SIGKILLed holding about %d takings; a new one started", victim.n, held)

	// (b) The master of killQ killed: its replica takes over.
	waitAcked(300)
	// A burst of enqueues on killQ (4 writers, no pause) from 300 ms before
	// the kill until the promotion: writes in flight when the master dies.
	doomed := nodeOf(killQ)
	burstCtx, stopBurst := context.WithCancel(ctx)
	var burstWG sync.WaitGroup
	for i := 0; i < 4; i++ {
		burstWG.Add(1)
		go func() {
			defer burstWG.Done()
			for burstCtx.Err() == nil {
				ectx, c := context.WithTimeout(burstCtx, 5*time.Second)
				id, err := client.Enqueue(ectx, killQ, []byte("b"), nil)
				c()
				if err == nil {
					led.acked(killQ, id)
				} else {
					sleepFor(burstCtx, 20*time.Millisecond)
				}
			}
		}()
	}
	sleepFor(ctx, 300*time.Millisecond)
	killAt := time.Now()
	promoted, took, err := rc.KillMaster(ctx, doomed)
	stopBurst()
	burstWG.Wait()
	if err != nil {
		t.Fatalf("killing master %s: %v", doomed.Addr, err)
	}
	promotedAt := killAt.Add(took)
	t.Logf("(b) master %s of %s SIGKILLed; replica %s promoted after %v", doomed.Addr, killQ, promoted.Addr, took.Round(time.Millisecond))
	afterFailover := led.ackCount()
	redistest.WaitFor(t, 15*time.Second, "tasks of "+killQ+" done after the failover", func() bool {
		return led.doneSince(killQ, time.Now().Add(-time.Second)) > 0 && led.ackCount() > afterFailover+50
	})

	// (c) The slot of moveQ moves while its tasks flow; the harness reads
	// recent tasks throughout (single-key reads: ASK for a moved hash).
	var to *redistest.Server
	ms, err := rc.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	from := nodeOf(moveQ)
	for _, m := range ms {
		if m != from {
			to = m
			break
		}
	}
	movedBefore, askBefore, _, _ := cp.Redirections()
	readCtx, stopRead := context.WithCancel(ctx)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		for readCtx.Err() == nil {
			for _, id := range led.recent(moveQ, 20) {
				rctx, c := context.WithTimeout(readCtx, 3*time.Second)
				_, _ = in.Task(rctx, moveQ, id)
				c()
			}
			sleepFor(readCtx, 5*time.Millisecond)
		}
	}()
	mst, err := rc.MoveTagSlot(ctx, cluster.TagSlot(moveQ), to, redistest.MoveOpts{Batch: 5, Pause: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("moving the slot of %s: %v", moveQ, err)
	}
	waitAcked(led.ackCount() + 60) // work goes on after the move
	stopRead()
	<-readDone
	moved, ask, tryagain, down := cp.Redirections()
	t.Logf("(c) slot of %s moved %s -> %s: %d keys in %d batches, %v; the harness's client followed %d MOVED, %d ASK, %d TRYAGAIN, %d CLUSTERDOWN in all",
		moveQ, from.Addr, to.Addr, mst.Keys, mst.Batches, mst.Duration.Round(time.Millisecond), moved, ask, tryagain, down)
	if ask == askBefore || moved == movedBefore {
		t.Errorf("the move met %d ASK and %d MOVED: want both", ask-askBefore, moved-movedBefore)
	}

	stopEnq()
	enqWG.Wait()

	// Everything acknowledged finishes, except enqueues lost with the
	// killed master.
	// A loaded machine drains the burst of (b) slowly: the wait goes on
	// while tasks keep ending, and fails after 25 s without one.
	lostEnq := map[string]bool{}
	var open []string
	fewest, progress, stalled := -1, time.Now(), false
	drained := poll(90*time.Second, func() bool {
		open = led.notDone()
		if len(open) == 0 {
			return true
		}
		if fewest < 0 || len(open) < fewest {
			fewest, progress = len(open), time.Now()
		} else if time.Since(progress) > 25*time.Second {
			stalled = true
			return true
		}
		lostEnq = map[string]bool{}
		for _, id := range open {
			q := led.queueOf(id)
			rctx, c := context.WithTimeout(ctx, 3*time.Second)
			rec, err := in.Task(rctx, q, id)
			c()
			switch {
			case errors.Is(err, worqr.ErrTaskNotFound) && q == killQ && led.ackedBefore(id, promotedAt) && !led.everTaken(id):
				// Acknowledged by the dead master, never replicated: until
				// the replica's promotion only the old master accepted
				// writes (one may answer after killAt, as SIGKILL lands).
				lostEnq[id] = true
			case err == nil && rec != nil && rec.State == rdb.StateDone && led.lastRunKilled(id):
				// Ended in Redis by a worker killed before it printed
				// its done line.
				led.doneUnseen(id)
			}
		}
		return len(lostEnq) == len(open)
	}) && !stalled
	if !drained {
		var lines []string
		for _, id := range open[:min(10, len(open))] {
			q := led.queueOf(id)
			rec, err := in.Task(ctx, q, id)
			state := "gone"
			if rec != nil {
				state = fmt.Sprintf("%s worker=%s pid=%s crashes=%d", rec.State, rec.WorkerID, rec.PID, rec.Crashes)
			}
			lines = append(lines, fmt.Sprintf("%s/%s acked %s: %s (%v); runs %s", q, id,
				led.ackTime(id).Format("15:04:05.000"), state, err, led.runs(id)))
		}
		t.Fatalf("%d acknowledged tasks not done (%d lost enqueues), none ended for 25 s or 90 s passed since the enqueues stopped (kill at %s):\n%s",
			len(open), len(lostEnq), killAt.Format("15:04:05.000"), strings.Join(lines, "\n"))
	}
	lostFin := led.finishedTwice(killQ, killAt)
	overlaps, lostOverlaps := led.overlaps()
	total := led.ackCount()
	t.Logf("acknowledged %d tasks (%d enqueue errors retried); lost to the failover (async replication): %d acknowledged enqueues, %d acknowledged finishes (their tasks ran again)",
		total, enqErrs.Load(), len(lostEnq), len(lostFin))
	t.Logf("runs overlapping a run told its taking was lost (a take the dead master acknowledged, not replicated): %d %v; lines: %d lost, %d recovered, %d keepalive_lost",
		len(lostOverlaps), lostOverlaps[:min(3, len(lostOverlaps))], led.count("lost"), led.count("recovered"), led.count("keepalive_lost"))
	if len(overlaps) > 0 {
		t.Errorf("%d tasks ran twice at once in live workers: %v", len(overlaps), overlaps[:min(5, len(overlaps))])
	}
	if led.count("recovered") == 0 {
		t.Error("no worker reported recovering the killed worker's takings")
	}
	for _, p := range led.live() {
		if p.exitedOnItsOwn() {
			t.Errorf("worker %d exited: %s", p.n, tail(p.log, 5))
		}
	}
	if rep := os.Getenv("WORQR_CHAOS_REPORT"); rep != "" {
		if f, err := os.OpenFile(rep, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintf(f, "cluster chaos: %d tasks (%d acked in the 300 ms before the kill), failover %v, lost enqueues %d, lost finishes %d, retaken after a lost take %d, move %d keys %v, ASK %d MOVED %d TRYAGAIN %d\n",
				total, led.ackedBetween(killQ, killAt.Add(-300*time.Millisecond), killAt), took.Round(time.Millisecond), len(lostEnq), len(lostFin), len(lostOverlaps), mst.Keys, mst.Duration.Round(time.Millisecond), ask, moved, tryagain)
			f.Close()
		}
	}
	led.stopAll(t)
}

func sleepFor(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

var (
	exampleOnce sync.Once
	exampleBin  string
	exampleErr  error
)

// buildExample builds cmd/worqr-example once per test binary, with the
// go build -overlay file WORQR_EXAMPLE_OVERLAY names when it is set
// (contrib/goredis/suite sets it: the workers then run on go-redis).
func buildExample(t *testing.T) string {
	t.Helper()
	exampleOnce.Do(func() {
		dir, err := os.MkdirTemp("", "worqr-cluster-bin-")
		if err != nil {
			exampleErr = err
			return
		}
		exampleBin = filepath.Join(dir, "worqr-example")
		args := []string{"build", "-o", exampleBin}
		if ov := os.Getenv("WORQR_EXAMPLE_OVERLAY"); ov != "" {
			args = append(args, "-overlay", ov)
		}
		args = append(args, "github.com/worqr/worqr-go/cmd/worqr-example")
		out, err := exec.Command("go", args...).CombinedOutput()
		if err != nil {
			exampleErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if exampleErr != nil {
		t.Fatal(exampleErr)
	}
	return exampleBin
}

// chaosLedger is what the harness saw: acknowledged tasks and every line
// the worker processes printed, stamped when read.
type chaosLedger struct {
	mu     sync.Mutex
	tasks  map[string]*chaosTask
	order  map[string][]string // queue -> ids in ack order
	acks   int
	procs  map[int]*workerProc
	next   int
	counts map[string]int
}

type chaosTask struct {
	id, queue string
	ackAt     time.Time
	acked     bool
	runs      []*chaosRun
}

type chaosRun struct {
	proc     *workerProc
	pid      string
	from, to time.Time // to zero: still running
	end      string    // done, retry, lost, killed
}

type workerProc struct {
	n       int
	cmd     *exec.Cmd
	log     string
	exited  chan struct{}
	ours    atomic.Bool
	killed  time.Time
	waitErr error
}

func (p *workerProc) exitedOnItsOwn() bool {
	select {
	case <-p.exited:
		return !p.ours.Load()
	default:
		return false
	}
}

func (l *chaosLedger) start(bin, seeds, ns string, queues []string, dir string) (*workerProc, error) {
	l.mu.Lock()
	l.next++
	n := l.next
	l.mu.Unlock()
	cmd := exec.Command(bin, "worker", "--queues", strings.Join(queues, ","), "--concurrency", "4",
		"--work-time", "50ms", "--retention", "24h", "--grace", "3s", "--max-crashes", "-1", "--namespace", ns)
	cmd.Env = append(os.Environ(), "WORQR_REDIS_URL=", "WORQR_REDIS_CLUSTER="+seeds, "WORQR_LOG_LEVEL=warn",
		"WORQR_HEARTBEAT_INTERVAL=500ms", "WORQR_HEARTBEAT_TTL=5s", "WORQR_REAPER_INTERVAL=200ms", "WORQR_POLL_INTERVAL=500ms")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &workerProc{n: n, cmd: cmd, log: filepath.Join(dir, fmt.Sprintf("worker-%d.log", n)), exited: make(chan struct{})}
	logf, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	up := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		first := true
		for sc.Scan() {
			line := sc.Text()
			l.line(p, line, time.Now())
			if first && strings.HasPrefix(line, "registered ") {
				first = false
				close(up)
			}
		}
		p.waitErr = cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	l.mu.Lock()
	l.procs[n] = p
	l.mu.Unlock()
	select {
	case <-up:
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("worker %d exited before registering: %v: %s", n, p.waitErr, tail(p.log, 5))
	case <-time.After(20 * time.Second):
		p.ours.Store(true)
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("worker %d did not register within 20s: %s", n, tail(p.log, 5))
	}
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func (l *chaosLedger) task(id, queue string) *chaosTask {
	tk := l.tasks[id]
	if tk == nil {
		tk = &chaosTask{id: id, queue: queue}
		l.tasks[id] = tk
	}
	return tk
}

func (l *chaosLedger) acked(queue, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	tk := l.task(id, queue)
	tk.acked, tk.ackAt = true, time.Now()
	if l.order == nil {
		l.order = map[string][]string{}
	}
	l.order[queue] = append(l.order[queue], id)
	l.acks++
}

// line records one line of worker p (see cmd/worqr-example/lines.go).
func (l *chaosLedger) line(p *workerProc, line string, at time.Time) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.counts == nil {
		l.counts = map[string]int{}
	}
	l.counts[f[0]]++
	switch f[0] {
	case "took":
		if len(f) >= 4 {
			tk := l.task(f[2], f[1])
			tk.runs = append(tk.runs, &chaosRun{proc: p, pid: f[3], from: at})
		}
	case "done", "lost", "retry", "dead", "cancelled":
		if len(f) < 3 {
			return
		}
		tk := l.task(f[2], f[1])
		pid := ""
		if len(f) >= 4 {
			pid = f[3]
		}
		for i := len(tk.runs) - 1; i >= 0; i-- {
			r := tk.runs[i]
			if r.proc == p && r.to.IsZero() && (pid == "" || r.pid == pid) {
				r.to, r.end = at, f[0]
				break
			}
		}
	}
}

func (l *chaosLedger) count(kind string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[kind]
}

func (l *chaosLedger) ackCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acks
}

// busiest returns the live worker holding the most takings.
func (l *chaosLedger) busiest() *workerProc {
	var best *workerProc
	bestN := -1
	for _, p := range l.live() {
		if n := l.heldBy(p); n > bestN {
			best, bestN = p, n
		}
	}
	return best
}

func (l *chaosLedger) heldBy(p *workerProc) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, tk := range l.tasks {
		for _, r := range tk.runs {
			if r.proc == p && r.to.IsZero() {
				n++
			}
		}
	}
	return n
}

func (l *chaosLedger) live() []*workerProc {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*workerProc
	for _, p := range l.procs {
		select {
		case <-p.exited:
		default:
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].n < out[j].n })
	return out
}

// kill SIGKILLs p; its open runs end then.
func (l *chaosLedger) kill(p *workerProc) {
	p.ours.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	l.mu.Lock()
	defer l.mu.Unlock()
	p.killed = time.Now()
	for _, tk := range l.tasks {
		for _, r := range tk.runs {
			if r.proc == p && r.to.IsZero() {
				r.to, r.end = p.killed, "killed"
			}
		}
	}
}

func (l *chaosLedger) killAll() {
	for _, p := range l.live() {
		p.ours.Store(true)
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	}
}

// stopAll SIGTERMs the workers and waits for them.
func (l *chaosLedger) stopAll(t *testing.T) {
	for _, p := range l.live() {
		p.ours.Store(true)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range l.live() {
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			t.Errorf("worker %d did not stop within 10s of SIGTERM", p.n)
			_ = p.cmd.Process.Kill()
		}
	}
}

// recent returns the last n ids acknowledged on queue.
func (l *chaosLedger) recent(queue string, n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := l.order[queue]
	return append([]string(nil), ids[max(0, len(ids)-n):]...)
}

// doneSince counts the tasks of queue with a done line after at.
func (l *chaosLedger) doneSince(queue string, at time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, tk := range l.tasks {
		if tk.queue != queue {
			continue
		}
		for _, r := range tk.runs {
			if r.end == "done" && r.to.After(at) {
				n++
				break
			}
		}
	}
	return n
}

// notDone returns the acknowledged tasks without a done line.
func (l *chaosLedger) notDone() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for id, tk := range l.tasks {
		if !tk.acked {
			continue
		}
		done := false
		for _, r := range tk.runs {
			done = done || r.end == "done"
		}
		if !done {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

func (l *chaosLedger) queueOf(id string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tasks[id].queue
}

func (l *chaosLedger) ackedBefore(id string, at time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tasks[id].ackAt.Before(at)
}

func (l *chaosLedger) everTaken(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.tasks[id].runs) > 0
}

// finishedTwice returns the tasks of queue that a worker finished (done,
// its end acknowledged) before at and that ran again after: the end was
// acknowledged by the master killed at at and never reached its replica.
func (l *chaosLedger) finishedTwice(queue string, at time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for id, tk := range l.tasks {
		if tk.queue != queue {
			continue
		}
		doneBefore, again := false, false
		for _, r := range tk.runs {
			if r.end == "done" && r.to.Before(at) {
				doneBefore = true
			} else if doneBefore && r.from.After(at) {
				again = true
			}
		}
		if again {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// overlaps returns the tasks with two runs at once in different takings
// where neither run was told its taking was lost nor cut by a kill (and
// counts the overlaps that involve a lost run).
func (l *chaosLedger) overlaps() (bad, withLost []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	for id, tk := range l.tasks {
		for i, a := range tk.runs {
			for _, b := range tk.runs[i+1:] {
				if a.pid == b.pid {
					continue
				}
				aTo, bTo := a.to, b.to
				if aTo.IsZero() {
					aTo = now
				}
				if bTo.IsZero() {
					bTo = now
				}
				if !a.from.Before(bTo) || !b.from.Before(aTo) {
					continue
				}
				desc := fmt.Sprintf("%s: w%s/%s %s..%s and w%s/%s %s..%s", id,
					strconv.Itoa(a.proc.n), a.pid, a.from.Format("15:04:05.000"), aTo.Format("15:04:05.000"),
					strconv.Itoa(b.proc.n), b.pid, b.from.Format("15:04:05.000"), bTo.Format("15:04:05.000"))
				if a.end == "lost" || b.end == "lost" {
					withLost = append(withLost, desc+" (one told lost)")
					continue
				}
				bad = append(bad, desc)
			}
		}
	}
	sort.Strings(bad)
	return bad, withLost
}

func (l *chaosLedger) lastRunKilled(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	rs := l.tasks[id].runs
	return len(rs) > 0 && rs[len(rs)-1].end == "killed"
}

// doneUnseen marks the last run of id done (its process died before it
// printed the line).
func (l *chaosLedger) doneUnseen(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rs := l.tasks[id].runs
	rs[len(rs)-1].end = "done"
}

func (l *chaosLedger) ackTime(id string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tasks[id].ackAt
}

func (l *chaosLedger) runs(id string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.tasks[id].runs {
		out = append(out, fmt.Sprintf("[w%d %s %s..%s %s]", r.proc.n, r.pid, r.from.Format("15:04:05.000"), r.to.Format("15:04:05.000"), r.end))
	}
	return strings.Join(out, " ")
}

func (l *chaosLedger) ackedBetween(queue string, from, to time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, tk := range l.tasks {
		if tk.queue == queue && tk.acked && !tk.ackAt.Before(from) && tk.ackAt.Before(to) {
			n++
		}
	}
	return n
}
