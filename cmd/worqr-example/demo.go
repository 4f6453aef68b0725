package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"
	"github.com/rs/xid"

	"github.com/worqr/worqr-go/worqr"
)

const demoHead = `Usage: worqr-example [demo] [flags]

Runs a short demo of worqr and exits 0 when every check passed:
  1. enqueue a batch of tasks, plus one more task that is cancelled while it
     waits (it must never run);
  2. start a child worker process (this binary's worker subcommand) that takes
     a few tasks and sits on them;
  3. start three in-process workers, which do the rest;
  4. kill the child with SIGKILL: once its keepalive expires (WORQR_HEARTBEAT_TTL)
     a peer's reaper (WORQR_REAPER_INTERVAL) puts its tasks back at the front,
     and a peer completes them (each counted as having crashed once);
  5. run three runs of the built-in flow guild-access through the in-process
     workers (access-check -> update-membership -> manage-reward, fanned out
     to the child queues discord and telegram -> notify) and print each run's
     state: its stages' fields and each child's status and result;
  6. print a summary.
Without --redis-url / WORQR_REDIS_URL it runs on an embedded in-process Redis
(miniredis). On a real Redis it uses a fresh namespace demo-<id> and deletes
its keys at the end, so it never meets other workers.
`

// Demo shape.
const (
	demoQueue       = "demo"
	demoTasks       = 30
	demoChildSlots  = 4
	demoWorkers     = 3
	demoWorkerSlots = 2
	demoWorkTime    = 100 * time.Millisecond
	demoChildWork   = time.Minute // the child holds its tasks until killed
	clockStep       = 100 * time.Millisecond
)

func runDemo(ctx context.Context, args []string, io stdio) error {
	fs := newFlagSet("demo")
	var c common
	c.register(fs, io.getenv, false)
	if err := parse(fs, args, io.out, demoHead, "\nEnvironment:\n"+envHelp(false, true)); err != nil {
		return err
	}
	if err := c.check(false); err != nil {
		return err
	}
	tm, err := readTimings(io.getenv)
	if err != nil {
		return err
	}
	rep, err := readReplication(io.getenv)
	if err != nil {
		return err
	}
	if rep.Replicas > 0 && c.redisURL == "" {
		return usagef("%s: the embedded Redis has no replicas to wait for: unset it, or give the demo a Redis with replicas (%s)", envReplicas, envRedisURL)
	}
	zl, log, err := newLogger(io.err, io.getenv)
	if err != nil {
		return err
	}
	defer zl.Sync() //nolint:errcheck // stderr

	ctx, stopSignals := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stopSignals()
	eff := tm.orDefaults()
	// Generous: the demo takes about TTL + reaper interval + 2s.
	limit := 30*time.Second + 3*(eff.HeartbeatTTL+eff.ReaperInterval)
	ctx, cancel := context.WithTimeoutCause(ctx, limit, fmt.Errorf("demo took longer than %s", limit))
	defer cancel()

	d := &demo{
		io: io, log: log, out: &lineWriter{w: io.out}, start: time.Now(), tm: tm, rep: rep,
		changed: make(chan struct{}),
		runs:    map[string][]handlerRun{},
		done:    map[string]string{},
	}
	d.say("worqr demo")
	url := c.redisURL
	if url == "" {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			return fmt.Errorf("embedded Redis: %w", err)
		}
		defer m.Close()
		d.say("no %s: using an embedded in-process Redis (miniredis)", envRedisURL)
		d.say("miniredis listens on %s; its clock is moved forward every %s so keepalives expire in real time", m.Addr(), clockStep)
		stopClock := runClock(m, clockStep)
		defer stopClock()
		url = "redis://" + m.Addr()
	} else {
		d.say("using Redis at %s", redacted(url))
		d.real = true
	}
	d.url = url
	d.ns = "demo-" + xid.New().String()
	d.say("namespace %s; keepalive TTL %s, heartbeat %s, reaper every %s",
		d.ns, eff.HeartbeatTTL, eff.HeartbeatInterval, eff.ReaperInterval)

	pool, err := newPool(url, c.poolOptions())
	if err != nil {
		return err
	}
	d.pool = pool
	defer d.pool.Close()
	if err := ping(ctx, d.pool, d.ns, redacted(url)); err != nil {
		return err
	}
	if d.real {
		defer d.cleanup()
	}
	err = d.run(ctx)
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w (%v)", err, context.Cause(ctx))
	}
	return err
}

// runClock moves miniredis's clock forward by the real time elapsed, every
// step: miniredis never expires keys on its own. The returned func stops it.
func runClock(m *miniredis.Miniredis, step time.Duration) func() {
	stop := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(step)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				m.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	return func() {
		close(stop)
		<-stopped
	}
}

type handlerRun struct {
	worker  string
	crashes int
}

type demo struct {
	io    stdio
	log   *slog.Logger
	out   *lineWriter
	start time.Time
	tm    timings
	rep   replication // the child worker reads it from the environment too
	url   string
	ns    string
	real  bool
	pool  *redis.Pool

	mu          sync.Mutex
	changed     chan struct{} // closed and replaced on every change
	runs        map[string][]handlerRun
	done        map[string]string // task id -> in-process worker that finished it
	doneTwice   []string
	recovered   int
	recoveredBy []string
	deadWorkers []string
	anomalies   []string
	childID     string
	childTook   []string
	childDone   []string
	childGone   bool           // its stdout closed
	flowEnds    map[string]int // "<queue> <id>" -> accepted ends of a flow stage or child
}

// say prints one line of the story on stdout.
func (d *demo) say(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	_ = d.out.line(fmt.Sprintf("[%5.2fs]", time.Since(d.start).Seconds()), msg)
}

// update changes the state under the lock and wakes the waiters.
func (d *demo) update(f func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f()
	close(d.changed)
	d.changed = make(chan struct{})
}

// waitFor blocks until cond (run under the lock) holds.
func (d *demo) waitFor(ctx context.Context, what string, cond func() bool) error {
	for {
		d.mu.Lock()
		ok, ch := cond(), d.changed
		d.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("gave up waiting for %s", what)
		}
	}
}

func (d *demo) run(ctx context.Context) error {
	ccfg := worqr.Config{Namespace: d.ns, Logger: d.log}
	d.rep.apply(&ccfg)
	client, err := worqr.NewClient(d.pool, &ccfg)
	if err != nil {
		return err
	}
	in, err := worqr.NewInspector(d.pool, &ccfg)
	if err != nil {
		return err
	}

	// 1. A batch, and one task cancelled while it waits.
	payloads := make([][]byte, demoTasks)
	for i := range payloads {
		payloads[i] = []byte("task " + strconv.Itoa(i+1))
	}
	ids, err := client.EnqueueBatch(ctx, demoQueue, payloads, nil)
	if err != nil {
		return err
	}
	d.say("enqueued %d tasks on queue %q in one atomic batch (%s ... %s)", len(ids), demoQueue, ids[0], ids[len(ids)-1])
	extra, err := client.Enqueue(ctx, demoQueue, []byte("never runs"), nil)
	if err != nil {
		return err
	}
	st, err := client.Cancel(ctx, demoQueue, extra)
	if err != nil {
		return err
	}
	if st != worqr.CancelRemoved {
		return fmt.Errorf("cancel of waiting task %s: got %s, want %s", extra, st, worqr.CancelRemoved)
	}
	if _, err := in.Task(ctx, demoQueue, extra); !errors.Is(err, worqr.ErrTaskNotFound) {
		return fmt.Errorf("cancelled task %s: Task() = %v, want ErrTaskNotFound", extra, err)
	}
	d.say("enqueued task %s and cancelled it while it waited: %s, no worker will ever get it", extra, st)

	// 2. A child worker process that takes a few tasks and sits on them.
	child, err := d.startChild(ctx)
	if err != nil {
		return err
	}
	defer child.kill()
	if err := d.waitFor(ctx, "the child worker to take its tasks", func() bool {
		return d.childGone || d.childID != "" && len(d.childTook) == demoChildSlots
	}); err != nil {
		return err
	}
	d.mu.Lock()
	childID, held, gone := d.childID, append([]string(nil), d.childTook...), d.childGone
	d.mu.Unlock()
	if gone {
		return errors.New("the child worker exited before taking its tasks (its log is above)")
	}
	d.say("child process %d registered as worker %s and holds %d tasks: %s",
		child.cmd.Process.Pid, childID, len(held), strings.Join(held, " "))

	// 3. Three in-process workers do the rest.
	workers := make([]*worqr.Worker, 0, demoWorkers)
	defer func() { d.stopWorkers(workers) }()
	for i := 1; i <= demoWorkers; i++ {
		w, err := d.newWorker(fmt.Sprintf("w%d", i))
		if err != nil {
			return err
		}
		if err := w.Start(ctx); err != nil {
			return err
		}
		workers = append(workers, w)
	}
	d.say("started %d in-process workers with %d handlers each (%s per task)", demoWorkers, demoWorkerSlots, demoWorkTime)
	rest := demoTasks - demoChildSlots
	if err := d.waitFor(ctx, "the in-process workers to finish the free tasks", func() bool {
		return len(d.done) >= rest
	}); err != nil {
		return err
	}
	d.say("in-process workers finished the %d tasks the child does not hold; %d wait for the child", rest, len(held))

	// 4. kill -9 the child while it holds its tasks.
	if err := child.sigkill(); err != nil {
		return err
	}
	killedAt := time.Now()
	d.say("sent SIGKILL to child process %d; its keepalive expires within %s, then a peer's reaper requeues its tasks",
		child.cmd.Process.Pid, d.tm.orDefaults().HeartbeatTTL)
	if err := d.waitFor(ctx, "a peer to recover the killed child's tasks", func() bool {
		return d.recovered >= len(held)
	}); err != nil {
		return err
	}
	d.mu.Lock()
	by, dead := strings.Join(d.recoveredBy, ","), strings.Join(d.deadWorkers, ",")
	d.mu.Unlock()
	d.say("%s's reaper recovered %d tasks of queue %q from dead worker %s, %.1fs after the kill",
		by, len(held), demoQueue, dead, time.Since(killedAt).Seconds())
	if err := d.waitFor(ctx, "every task to be done", func() bool {
		return len(d.done) >= demoTasks
	}); err != nil {
		return err
	}
	var lines []string
	d.mu.Lock()
	for _, id := range held {
		crashes := 0
		if r := d.runs[id]; len(r) > 0 {
			crashes = r[len(r)-1].crashes
		}
		lines = append(lines, fmt.Sprintf("task %s, held by the killed child, done by %s after %d crash", id, d.done[id], crashes))
	}
	d.mu.Unlock()
	for _, l := range lines {
		d.say("%s", l)
	}

	// 5. A few runs of the built-in flow, with a fan-out.
	if err := d.runFlows(ctx, client, in); err != nil {
		return err
	}

	// 6. Stop, check, sum up.
	d.stopWorkers(workers)
	workers = nil
	q, err := in.Queue(ctx, demoQueue)
	if err != nil {
		return err
	}
	if err := d.check(ids, held, extra, childID, int(q.Waiting)); err != nil {
		return err
	}
	if left, err := in.Workers(ctx); err == nil {
		d.say("workers still registered after stop: %d", len(left))
	}
	d.report(held)
	return nil
}

// check verifies what the demo claims.
func (d *demo) check(ids, held []string, extra, childID string, waiting int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	for _, id := range ids {
		if d.done[id] == "" {
			bad("task %s was never done", id)
		}
	}
	if len(d.doneTwice) > 0 {
		bad("tasks finished twice: %v", d.doneTwice)
	}
	if len(d.childDone) > 0 {
		bad("the child finished tasks before it was killed: %v", d.childDone)
	}
	for _, id := range held {
		r := d.runs[id]
		if len(r) == 0 || r[len(r)-1].crashes != 1 {
			bad("task %s held by the child: runs %v, want a last run after 1 crash", id, r)
		}
	}
	if d.recovered != len(held) {
		bad("recovered %d tasks, want %d", d.recovered, len(held))
	}
	found := false
	for _, w := range d.deadWorkers {
		found = found || w == childID
	}
	if !found {
		bad("dead workers recovered %v, want the child %s among them", d.deadWorkers, childID)
	}
	if _, ran := d.runs[extra]; ran {
		bad("cancelled task %s ran", extra)
	}
	for _, id := range d.childTook {
		if id == extra {
			bad("cancelled task %s was taken by the child", extra)
		}
	}
	if waiting != 0 {
		bad("%d tasks still wait in %q", waiting, demoQueue)
	}
	if len(d.anomalies) > 0 {
		d.log.Warn("demo: unexpected events", "events", d.anomalies)
	}
	if len(problems) > 0 {
		return fmt.Errorf("demo checks failed:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

func (d *demo) report(held []string) {
	d.mu.Lock()
	per := map[string]int{}
	for _, w := range d.done {
		per[w]++
	}
	var names []string
	for w := range per {
		names = append(names, w)
	}
	sort.Strings(names)
	var parts []string
	for _, w := range names {
		parts = append(parts, fmt.Sprintf("%s %d", w, per[w]))
	}
	done := len(d.done)
	d.mu.Unlock()
	d.say("tasks done per in-process worker: %s", strings.Join(parts, ", "))
	d.say("summary: enqueued %d, done %d, recovered %d, cancelled 1, elapsed %.1fs",
		demoTasks+1, done, len(held), time.Since(d.start).Seconds())
}

// newWorker returns an in-process worker of the demo queue, named for the
// story.
func (d *demo) newWorker(name string) (*worqr.Worker, error) {
	handler := worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
		d.update(func() { d.runs[t.ID] = append(d.runs[t.ID], handlerRun{worker: name, crashes: t.Crashes}) })
		timer := time.NewTimer(demoWorkTime)
		defer timer.Stop()
		select {
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	cfg := worqr.WorkerConfig{
		Config: worqr.Config{Namespace: d.ns, Logger: d.log.With("worker", name)},
		Queues: map[string]worqr.QueueConfig{
			demoQueue: {Handler: handler, Concurrency: demoWorkerSlots},
		},
		Flows:   []*worqr.Flow{newAccessFlow(demoFlowOpts())},
		OnEvent: func(e worqr.Event) { d.onEvent(name, e) },
	}
	d.tm.apply(&cfg)
	d.rep.apply(&cfg.Config)
	w, err := worqr.NewWorker(d.pool, &cfg)
	if err != nil {
		return nil, workerConfigError(err)
	}
	return w, nil
}

func (d *demo) onEvent(name string, e worqr.Event) {
	if isAccessFlowQueue(e.Queue) {
		d.flowEvent(e)
		logEvent(d.log.With("worker", name), e)
		return
	}
	switch e.Kind {
	case worqr.EventDone:
		d.update(func() {
			if d.done[e.TaskID] != "" {
				d.doneTwice = append(d.doneTwice, e.TaskID)
			}
			d.done[e.TaskID] = name
		})
	case worqr.EventRecovered:
		d.update(func() {
			d.recovered += e.Count
			d.recoveredBy = append(d.recoveredBy, name)
			d.deadWorkers = append(d.deadWorkers, e.DeadWorkers...)
		})
	case worqr.EventLost, worqr.EventKeepaliveLost, worqr.EventCancelled, worqr.EventDead:
		d.update(func() {
			d.anomalies = append(d.anomalies, fmt.Sprintf("%s %s %s", name, e.Kind, e.TaskID))
		})
	}
	logEvent(d.log.With("worker", name), e)
}

func (d *demo) stopWorkers(ws []*worqr.Worker) {
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := w.Stop(ctx); err != nil {
				d.log.Warn("demo: worker stop", "err", err)
			}
		}()
	}
	wg.Wait()
}

// cleanup deletes the demo's keys from a real Redis.
func (d *demo) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	in, err := worqr.NewInspector(d.pool, &worqr.Config{Namespace: d.ns})
	if err != nil {
		d.log.Warn("demo: cleanup", "err", err)
		return
	}
	deleted, err := in.DeleteNamespace(ctx)
	if err != nil {
		d.log.Warn("demo: cleanup", "err", err)
		return
	}
	d.say("deleted the %d keys of namespace %s", deleted, d.ns)
}

// child is the worker process the demo kills.
type child struct {
	cmd    *exec.Cmd
	read   chan struct{} // closed when its stdout is drained
	killed bool
}

func (d *demo) startChild(ctx context.Context) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this binary to start a child worker: %w", err)
	}
	cmd := exec.CommandContext(ctx, exe, "worker",
		"--redis-url", d.url, "--namespace", d.ns, "--queues", demoQueue,
		"--concurrency", strconv.Itoa(demoChildSlots), "--work-time", demoChildWork.String(),
		"--grace", "1s")
	cmd.Stderr = d.io.err
	setDeathSignal(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting child worker: %w", err)
	}
	ch := &child{cmd: cmd, read: make(chan struct{})}
	go func() {
		defer close(ch.read)
		defer d.update(func() { d.childGone = true })
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 0 {
				continue
			}
			switch {
			case f[0] == lineRegistered && len(f) == 2:
				d.update(func() { d.childID = f[1] })
			case f[0] == lineTook && len(f) >= 5:
				d.update(func() { d.childTook = append(d.childTook, f[2]) })
			case f[0] == lineDone && len(f) >= 3:
				d.update(func() { d.childDone = append(d.childDone, f[2]) })
			}
		}
	}()
	return ch, nil
}

// sigkill kills the child with SIGKILL and reaps it.
func (c *child) sigkill() error {
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill -9 child: %w", err)
	}
	c.killed = true
	<-c.read
	err := c.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return nil
		}
	}
	return fmt.Errorf("child worker: want death by SIGKILL, got %v", err)
}

// kill makes sure the child is gone (on the demo's error paths).
func (c *child) kill() {
	if c.killed {
		return
	}
	c.killed = true
	_ = c.cmd.Process.Kill()
	<-c.read
	_ = c.cmd.Wait()
}
