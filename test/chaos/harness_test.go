package chaos_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
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

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// timings are the worker processes' WORQR_* timings.
type timings struct {
	heartbeat, ttl, reaper, poll time.Duration
}

var (
	// shortTimings notice a dead worker within 1s + 200ms.
	shortTimings = timings{200 * time.Millisecond, time.Second, 200 * time.Millisecond, time.Second}
	// defaultTimings are the library defaults (production).
	defaultTimings = timings{time.Second, 3 * time.Second, time.Second, time.Second}
)

// clusterOpts says how to run one scenario's world.
type clusterOpts struct {
	redisArgs   []string // extra redis-server arguments
	viaProxy    bool     // workers reach Redis through the proxy
	workers     int
	concurrency int
	workTime    time.Duration
	timings     timings
	failFirst   int
	retryDelay  time.Duration
	queue       string
	flow        bool // workers also serve the built-in flow (when the binary has --flow)
}

// cluster is one scenario's world: a private redis-server, optionally a
// proxy in front of it, worker processes, the harness's own client (direct
// to Redis) and the ledger.
type cluster struct {
	t *testing.T
	// ctx ends when the test does: the faults' holds (a freeze, an outage)
	// and the harness's pauses end with it.
	ctx    context.Context
	name   string
	opts   clusterOpts
	srv    *redistest.Server
	proxy  *proxy
	ns     string
	pool   *redis.Pool
	client *worqr.Client
	led    *ledger
	logDir string

	mu           sync.Mutex
	procs        map[int]*proc
	next         int
	faults       map[string]int
	starts       int
	failedStarts int // workers that exited before registering (Redis away)

	redisMu   sync.Mutex // one Redis-level fault at a time
	redisDown []span     // when Redis was away (restarts, outages, refusals)

	enqPaused atomic.Bool
	enqErrors atomic.Int64
	enqErrMu  sync.Mutex
	enqErrMsg []string // the first few
	enqWG     sync.WaitGroup
}

// proc is one worker process.
type proc struct {
	n       int
	cmd     *exec.Cmd
	pid     int
	started time.Time
	exited  chan struct{}
	exitErr error
	ours    atomic.Bool // we killed or stopped it
	frozen  atomic.Bool
	// wasFrozen: the process was SIGSTOPped at some time (its runs may be
	// a zombie's).
	wasFrozen bool
}

func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// newCluster starts Redis (and the proxy) and the harness client; workers
// come with startWorkers.
func newCluster(t *testing.T, name string, o clusterOpts) *cluster {
	t.Helper()
	if o.queue == "" {
		o.queue = "jobs"
	}
	o.flow = o.flow && flowAvailable()
	// Always pass arguments, so that WORQR_TEST_REDIS_URL is never used:
	// the suite kills its server.
	args := append([]string{"--save", ""}, o.redisArgs...)
	// redistest picks a free port, then redis-server binds it: on a busy
	// machine another socket may take it in between. Try again.
	srv, err := redistest.Start(args...)
	for i := 0; err != nil && i < 3 && !strings.Contains(err.Error(), "not found"); i++ {
		t.Logf("starting redis-server failed, trying again: %v", err)
		srv, err = redistest.Start(args...)
	}
	if err != nil {
		t.Fatalf("starting redis-server: %v", err)
	}
	logDir, err := os.MkdirTemp("", "worqr-chaos-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &cluster{
		t: t, ctx: ctx, name: name, opts: o, srv: srv, ns: "chaos",
		led: newLedger(), logDir: logDir,
		procs: map[int]*proc{}, faults: map[string]int{},
	}
	if o.viaProxy {
		c.proxy, err = startProxy(srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
	}
	c.pool = &redis.Pool{
		MaxIdle:     8,
		IdleTimeout: time.Minute,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialURLContext(ctx, srv.URL, redis.DialConnectTimeout(time.Second),
				redis.DialReadTimeout(3*time.Second), redis.DialWriteTimeout(3*time.Second))
		},
		TestOnBorrow: func(rc redis.Conn, _ time.Time) error { return rc.Err() },
	}
	// The harness's client is code under test: on the pool of another
	// client when the suite serves one (redistest.Serve.URL, closed at
	// cleanup), else on c.pool. The checks read Redis through c.pool.
	var conns worqr.ConnGetter = c.pool
	if redistest.Serve.URL != nil {
		conns = redistest.Serve.URL(t, srv.URL)
	}
	c.client, err = worqr.NewClient(conns, &worqr.Config{Namespace: c.ns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.killAll()
		if c.proxy != nil {
			c.proxy.Close()
		}
		c.pool.Close()
		// A test that failed mid-freeze must leave nothing stopped.
		if pid, err := c.redisPID(); err == nil {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
		srv.Stop()
		if t.Failed() || os.Getenv("WORQR_CHAOS_KEEP_LOGS") == "1" {
			t.Logf("worker logs kept in %s", logDir)
		} else {
			os.RemoveAll(logDir)
		}
	})
	t.Cleanup(cancel) // first: what still pauses or holds a fault stops at once
	return c
}

// redisURLForWorkers is where workers dial.
func (c *cluster) redisURLForWorkers() string {
	if c.proxy != nil {
		return c.proxy.URL()
	}
	return c.srv.URL
}

// span is a period of time.
type span struct{ from, to time.Time }

// down records that Redis was away from the workers from from to now.
func (c *cluster) down(from time.Time) {
	c.mu.Lock()
	c.redisDown = append(c.redisDown, span{from, time.Now()})
	c.mu.Unlock()
}

// overlapsDown says whether [from, to] met a period Redis was away.
func (c *cluster) overlapsDown(from, to time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.redisDown {
		if !s.to.Before(from) && !s.from.After(to) {
			return true
		}
	}
	return false
}

func (c *cluster) fault(kind string) {
	c.mu.Lock()
	c.faults[kind]++
	c.mu.Unlock()
}

// startWorker starts one worker process and returns it once it printed its
// registered line, or an error if it exits first or takes too long.
func (c *cluster) startWorker() (*proc, error) {
	o := c.opts
	n := c.newProcNumber()
	args := []string{"worker",
		"--queues", o.queue,
		"--concurrency", strconv.Itoa(o.concurrency),
		"--work-time", o.workTime.String(),
		"--retention", "24h",
		"--grace", "5s",
		"--max-crashes", "-1",
		"--redis-url", c.redisURLForWorkers(),
		"--namespace", c.ns,
	}
	if o.failFirst > 0 {
		args = append(args, "--fail-first", strconv.Itoa(o.failFirst))
	}
	if o.retryDelay > 0 {
		args = append(args, "--retry-delay", o.retryDelay.String())
	}
	if o.flow {
		args = append(args, "--flow")
	}
	cmd := exec.Command(workerBin, args...)
	cmd.Env = append(append(os.Environ(), c.timingEnv()...), "WORQR_LOG_LEVEL=warn")
	return c.launch(n, cmd, "registered ", "worker", func(line string) { c.led.line(n, line, time.Now()) })
}

// newProcNumber numbers a process about to start.
func (c *cluster) newProcNumber() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	c.starts++
	return c.next
}

// timingEnv is the worker timings of the cluster's options, as the
// variables the example binary (and the re-executed test children) read.
func (c *cluster) timingEnv() []string {
	o := c.opts
	return []string{
		"WORQR_HEARTBEAT_INTERVAL=" + o.timings.heartbeat.String(),
		"WORQR_HEARTBEAT_TTL=" + o.timings.ttl.String(),
		"WORQR_REAPER_INTERVAL=" + o.timings.reaper.String(),
		"WORQR_POLL_INTERVAL=" + o.timings.poll.String(),
	}
}

// launch starts cmd as process n of the cluster (its stderr in
// worker-<n>.log, killed if the test dies), hands each line of its stdout
// to onLine (when set), and returns once a line starting with ready came;
// what names the process in errors. A process that exits or stays silent
// for 30 s first is a failed start.
func (c *cluster) launch(n int, cmd *exec.Cmd, ready, what string, onLine func(string)) (*proc, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logf, err := os.Create(filepath.Join(c.logDir, fmt.Sprintf("worker-%d.log", n)))
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	p := &proc{n: n, cmd: cmd, pid: cmd.Process.Pid, started: time.Now(), exited: make(chan struct{})}
	up := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		first := true
		for sc.Scan() {
			line := sc.Text()
			if onLine != nil {
				onLine(line)
			}
			if first && strings.HasPrefix(line, ready) {
				first = false
				close(up)
			}
		}
		p.exitErr = cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	c.mu.Lock()
	c.procs[n] = p
	c.mu.Unlock()
	select {
	case <-up:
		return p, nil
	case <-p.exited:
		c.mu.Lock()
		delete(c.procs, n)
		c.failedStarts++
		c.mu.Unlock()
		return nil, fmt.Errorf("%s %d exited before its %q line: %v", what, n, strings.TrimSpace(ready), p.exitErr)
	case <-time.After(30 * time.Second):
		p.ours.Store(true)
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
		<-p.exited
		return nil, fmt.Errorf("%s %d printed no %q line within 30s", what, n, strings.TrimSpace(ready))
	}
}

// startWorkers starts n workers, retrying failed starts (a worker that
// cannot reach Redis at start exits).
func (c *cluster) startWorkers(n int) {
	c.t.Helper()
	for i := 0; i < n; i++ {
		if err := c.ensureWorker(30 * time.Second); err != nil {
			c.t.Fatal(err)
		}
	}
}

// ensureWorker starts a worker, retrying every 500 ms for up to d.
func (c *cluster) ensureWorker(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		_, err := c.startWorker()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || redistest.Pause(c.ctx, 500*time.Millisecond) != nil {
			return err
		}
	}
}

// live returns the running workers, optionally without the frozen ones.
func (c *cluster) live(withFrozen bool) []*proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*proc
	for _, p := range c.procs {
		if p.alive() && (withFrozen || !p.frozen.Load()) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].n < out[j].n })
	return out
}

// kill SIGKILLs p, waits until it is gone and its stdout is read, and starts
// timing the recovery of every taking it held.
func (c *cluster) kill(p *proc) int {
	p.ours.Store(true)
	at := time.Now()
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
	<-p.exited
	c.fault("kill")
	c.led.killed(p.n, at)
	return c.led.watchHeld(p.n, "kill", at)
}

// freeze SIGSTOPs p for d, then SIGCONTs it, timing the recovery of the
// takings it held.
func (c *cluster) freeze(p *proc, d time.Duration) {
	p.frozen.Store(true)
	c.mu.Lock()
	p.wasFrozen = true
	c.mu.Unlock()
	at := time.Now()
	if err := syscall.Kill(p.pid, syscall.SIGSTOP); err != nil {
		p.frozen.Store(false)
		return
	}
	c.fault("freeze")
	// Lines written before the stop may still be in the pipe.
	_ = redistest.Pause(c.ctx, 100*time.Millisecond)
	c.led.watchHeld(p.n, "freeze", at)
	_ = redistest.Pause(c.ctx, d-100*time.Millisecond)
	_ = syscall.Kill(p.pid, syscall.SIGCONT)
	p.frozen.Store(false)
}

// killAll SIGKILLs every worker (cleanup).
func (c *cluster) killAll() {
	c.mu.Lock()
	procs := make([]*proc, 0, len(c.procs))
	for _, p := range c.procs {
		procs = append(procs, p)
	}
	c.mu.Unlock()
	for _, p := range procs {
		if p.alive() {
			p.ours.Store(true)
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
			_ = syscall.Kill(p.pid, syscall.SIGCONT)
			<-p.exited
		}
	}
}

// stopAll SIGTERMs every worker and waits for them to exit; a worker that
// does not exit in time is killed and reported.
func (c *cluster) stopAll(wait time.Duration) []string {
	var problems []string
	for _, p := range c.live(true) {
		p.ours.Store(true)
		_ = syscall.Kill(p.pid, syscall.SIGCONT)
		_ = syscall.Kill(p.pid, syscall.SIGTERM)
	}
	deadline := time.After(wait)
	for _, p := range c.live(true) {
		select {
		case <-p.exited:
			if p.exitErr != nil {
				problems = append(problems, fmt.Sprintf("worker %d exited with %v on SIGTERM: %s", p.n, p.exitErr, c.logTail(p, 5)))
			}
		case <-deadline:
			problems = append(problems, fmt.Sprintf("worker %d did not exit within %s of SIGTERM", p.n, wait))
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
			<-p.exited
		}
	}
	return problems
}

// unexpectedExits returns the workers that exited without being killed or
// stopped by the harness.
func (c *cluster) unexpectedExits() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, p := range c.procs {
		if !p.alive() && !p.ours.Load() {
			out = append(out, fmt.Sprintf("worker %d (pid %d) exited on its own: %v: %s", p.n, p.pid, p.exitErr, c.logTail(p, 5)))
		}
	}
	sort.Strings(out)
	return out
}

func (c *cluster) logTail(p *proc, n int) string {
	return tail(filepath.Join(c.logDir, fmt.Sprintf("worker-%d.log", p.n)), n)
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// keepWorkers restarts workers until there are n live ones, until ctx ends.
func (c *cluster) keepWorkers(ctx context.Context, n int) {
	for ctx.Err() == nil {
		if len(c.live(true)) < n {
			if _, err := c.startWorker(); err != nil {
				_ = redistest.Pause(ctx, 500*time.Millisecond) // Redis is away: a new worker exits at once
			}
			continue
		}
		_ = redistest.Pause(ctx, 100*time.Millisecond)
	}
}

// over says whether ctx ended or its deadline passed (a socket deadline
// fires a moment before the context says it is done).
func over(ctx context.Context) bool {
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return true
	}
	return ctx.Err() != nil
}

// pace returns the pauses of a fault loop: between lo and hi, but the
// first at most 300 ms, so that a short run sees every kind of fault
// while most of its work is still to do (a queue that drains before the
// first fault came tested little).
func pace(lo, hi time.Duration) func() time.Duration {
	first := true
	return func() time.Duration {
		d := between(lo, hi)
		if first {
			first = false
			d = min(d, 300*time.Millisecond)
		}
		return d
	}
}

func between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rand.Int64N(int64(hi-lo)))
}

// --- enqueueing ---

// enqueue enqueues total tasks at rate per second on queue, in small atomic
// batches, in the background, catching up after Redis was away. Only ids
// whose enqueue returned success are recorded; a failed batch is retried with
// new ids. It returns at once; waitEnqueued waits for the end.
func (c *cluster) enqueue(ctx context.Context, queue string, total int, rate float64) {
	c.enqWG.Add(1)
	go func() {
		defer c.enqWG.Done()
		start := time.Now()
		done := 0
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		payload := bytes.Repeat([]byte("chaos"), cfg.payload/5+1)[:cfg.payload]
		for done < total && ctx.Err() == nil {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if c.enqPaused.Load() {
				start = start.Add(50 * time.Millisecond) // no catching up on a pause
				continue
			}
			due := int(rate*time.Since(start).Seconds()) - done
			for due > 0 && done < total && ctx.Err() == nil {
				n := min(due, total-done, 100)
				ps := make([][]byte, n)
				for i := range ps {
					ps[i] = payload
				}
				ectx, cancel := context.WithTimeout(ctx, 2*time.Second)
				ids, err := c.client.EnqueueBatch(ectx, queue, ps, nil)
				cancel()
				if err != nil {
					if !over(ctx) {
						c.enqError(err)
					}
					_ = redistest.Pause(ctx, 100*time.Millisecond)
					break
				}
				c.led.acked(queue, ids, time.Now())
				done += n
				due -= n
			}
		}
	}()
}

func (c *cluster) waitEnqueued() { c.enqWG.Wait() }

func (c *cluster) enqError(err error) {
	c.enqErrors.Add(1)
	c.enqErrMu.Lock()
	if len(c.enqErrMsg) < 3 {
		c.enqErrMsg = append(c.enqErrMsg, err.Error())
	}
	c.enqErrMu.Unlock()
}

// The built-in flow of cmd/worqr-example (worker --flow, flow --count).
const (
	flowName  = "guild-access"
	flowFirst = "access-check"
)

// flowQueues are the flow's stage queues; childQueues its child queues.
var (
	flowQueues  = map[string]bool{"access-check": true, "update-membership": true, "manage-reward": true, "notify": true}
	childQueues = map[string]bool{"discord": true, "telegram": true}
)

func isFlowQueue(q string) bool  { return flowQueues[q] }
func isChildQueue(q string) bool { return childQueues[q] }

// tagOf returns the hash tag of a queue: its own name, or its flow's.
func tagOf(queue string) string {
	if isFlowQueue(queue) || isChildQueue(queue) {
		return flowName
	}
	return queue
}

// flowAvailable says whether the worker binary serves the built-in flow
// (worker --flow, and the flow subcommand to start runs).
var flowAvailable = sync.OnceValue(func() bool {
	out, _ := exec.Command(workerBin, "worker", "--help").CombinedOutput()
	return strings.Contains(string(out), "-flow")
})

// startRunsNow starts n flow runs at once and returns when they are started.
func (c *cluster) startRunsNow(n int) error {
	cmd := exec.Command(workerBin, "flow", "--count", strconv.Itoa(n),
		"--redis-url", c.srv.URL, "--namespace", c.ns)
	cmd.Env = append(os.Environ(), "WORQR_LOG_LEVEL=error")
	out, err := cmd.Output()
	var ids []string
	for _, line := range strings.Split(string(out), "\n") {
		if id, ok := strings.CutPrefix(line, "started "); ok {
			ids = append(ids, strings.TrimSpace(id))
		}
	}
	c.led.acked(flowFirst, ids, time.Now())
	return err
}

// startRuns starts rate flow runs per second in the background, through the
// example binary's flow subcommand (a batch every half second), until ctx
// ends. Every run it printed as started counts as acknowledged.
func (c *cluster) startRuns(ctx context.Context, rate float64) {
	if !c.opts.flow {
		return
	}
	c.enqWG.Add(1)
	go func() {
		defer c.enqWG.Done()
		start := time.Now()
		done := 0
		for redistest.Pause(ctx, 500*time.Millisecond) == nil {
			if c.enqPaused.Load() {
				start = start.Add(500 * time.Millisecond)
				continue
			}
			n := min(int(rate*time.Since(start).Seconds())-done, 200)
			if n <= 0 {
				continue
			}
			cmd := exec.Command(workerBin, "flow", "--count", strconv.Itoa(n),
				"--redis-url", c.srv.URL, "--namespace", c.ns)
			cmd.Env = append(os.Environ(), "WORQR_LOG_LEVEL=error")
			out, err := cmd.Output()
			var ids []string
			for _, line := range strings.Split(string(out), "\n") {
				if id, ok := strings.CutPrefix(line, "started "); ok {
					ids = append(ids, strings.TrimSpace(id))
				}
			}
			c.led.acked(flowFirst, ids, time.Now())
			done += len(ids)
			if err != nil && !over(ctx) {
				msg := err.Error()
				if ee, ok := err.(*exec.ExitError); ok {
					msg += ": " + strings.TrimSpace(string(ee.Stderr))
				}
				c.enqError(errors.New("flow: " + msg))
			}
		}
	}()
}

// enqueueOne enqueues one task, retrying on errors, and returns its id.
func (c *cluster) enqueueOne(ctx context.Context, queue string) (string, error) {
	for {
		ectx, cancel := context.WithTimeout(ctx, 2*time.Second)
		id, err := c.client.Enqueue(ectx, queue, []byte("probe"), nil)
		cancel()
		if err == nil {
			c.led.acked(queue, []string{id}, time.Now())
			return id, nil
		}
		c.enqError(err)
		if redistest.Pause(ctx, 100*time.Millisecond) != nil {
			return "", err
		}
	}
}

// startChildProc starts one worker process of a scenario: the test binary,
// re-executed with logEnv naming its log file (<name>-<n>.log in the
// cluster's log folder), the cluster's timings and env added. It returns
// once the process logged its registration.
func startChildProc(c *cluster, name, logEnv string, env ...string) error {
	n := c.newProcNumber()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(append(append(os.Environ(), c.timingEnv()...),
		logEnv+"="+filepath.Join(c.logDir, fmt.Sprintf("%s-%d.log", name, n))), env...)
	_, err = c.launch(n, cmd, "registered ", name+" process", nil)
	return err
}

// childProc is what a scenario's worker process starts from: its log file
// (named by the variable logEnv; written unbuffered, so that a line is kept
// through a SIGKILL) and a pool on the Redis the variable redisEnv names.
type childProc struct {
	name      string
	logf      *os.File
	pool      worqr.ConnGetter
	closePool func()
	mu        sync.Mutex
}

// openChild opens a worker process's log and pool; name says whose errors
// it prints (fail). The pool is a redigo one, or the one the suite's other
// client makes (redistest.Serve.Open) when it serves one; either dials
// the address given (a proxy's, for the scenarios that cut workers off).
func openChild(name, logEnv, redisEnv string) (*childProc, error) {
	logf, err := os.OpenFile(os.Getenv(logEnv), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	url := os.Getenv(redisEnv)
	var pool worqr.ConnGetter
	var closePool func()
	if redistest.Serve.Open != nil {
		pool, closePool, err = redistest.Serve.Open(url)
	} else {
		var p *redis.Pool
		if p, err = redisconn.NewPool(url, nil); err == nil {
			pool, closePool = p, func() { p.Close() }
		}
	}
	if err != nil {
		logf.Close()
		return nil, err
	}
	return &childProc{name: name, logf: logf, pool: pool, closePool: closePool}, nil
}

func (c *childProc) close() {
	c.closePool()
	c.logf.Close()
}

// fail prints err as the process's and returns its exit code.
func (c *childProc) fail(err error) int {
	fmt.Fprintln(os.Stderr, c.name+":", err)
	return 1
}

// line writes one log line of words and the unix ns it was written at; an
// empty word is written "-", so that a line keeps its words.
func (c *childProc) line(words ...string) {
	for i, w := range words {
		if w == "" {
			words[i] = "-"
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(c.logf, "%s %d\n", strings.Join(words, " "), time.Now().UnixNano())
}

// envDuration is the duration the variable name holds (0 when unset).
func envDuration(name string) time.Duration {
	d, _ := time.ParseDuration(os.Getenv(name))
	return d
}

// serveUntilTerm starts w, says so on stdout ("registered <pid>", which
// startChildProc waits for), serves until SIGTERM and stops w; it returns
// the process's exit code (fail's for an error).
func serveUntilTerm(w *worqr.Worker, fail func(error) int) int {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	// Start's context is the worker's life, not only its registration.
	if err := w.Start(context.Background()); err != nil {
		return fail(err)
	}
	fmt.Printf("registered %d\n", os.Getpid())
	select {
	case <-sig:
	case <-w.Stopped():
		return fail(fmt.Errorf("the worker stopped on its own"))
	}
	gctx, gcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer gcancel()
	if err := w.Stop(gctx); err != nil {
		return fail(err)
	}
	return 0
}
