package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

const (
	benchQueue      = "bench"
	taskType        = "bench"
	enqueueRoutines = 10
	activeKey       = "asynq:{" + benchQueue + "}:active"
)

type bench struct {
	o       *options
	connOpt asynq.RedisConnOpt
	stats   *redis.Client // INFO, FLUSHDB and completion polls
	payload []byte
	rep     *Report
}

// makePayload returns size pseudo-random bytes (the same as the worqr side's).
func makePayload(size int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	p := make([]byte, size)
	for i := range p {
		p[i] = byte(r.UintN(256))
	}
	return p
}

func (b *bench) progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "asynq-bench: "+format+"\n", args...)
}

func (b *bench) fresh(ctx context.Context) error { return b.stats.FlushDB(ctx).Err() }

func (b *bench) snap(ctx context.Context) (snapshot, error) {
	info, err := b.stats.Info(ctx, "commandstats", "cpu", "memory").Result()
	if err != nil {
		return snapshot{}, fmt.Errorf("INFO: %w", err)
	}
	return parseSnapshot(info), nil
}

func newServer(connOpt asynq.RedisConnOpt, concurrency int, poll time.Duration) *asynq.Server {
	return asynq.NewServer(connOpt, asynq.Config{
		Concurrency:       concurrency,
		Queues:            map[string]int{benchQueue: 1},
		TaskCheckInterval: poll, // 0: asynq's default, 1 s
		LogLevel:          asynq.WarnLevel,
	})
}

func newTask(p []byte) *asynq.Task { return asynq.NewTask(taskType, p) }

// enqueueAll enqueues n copies of b.payload one by one from 10 goroutines.
func (b *bench) enqueueAll(ctx context.Context, c *asynq.Client, n int) error {
	var next atomic.Int64
	errs := make(chan error, enqueueRoutines)
	var wg sync.WaitGroup
	for g := 0; g < enqueueRoutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if _, err := c.EnqueueContext(ctx, newTask(b.payload), asynq.Queue(benchQueue)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// warmup loads asynq's scripts into Redis's cache and warms the pools.
func (b *bench) warmup(ctx context.Context) error {
	if err := b.fresh(ctx); err != nil {
		return err
	}
	c := asynq.NewClient(b.connOpt)
	defer c.Close()
	const n = 200
	if err := b.enqueueAll(ctx, c, n); err != nil {
		return err
	}
	var handled atomic.Int64
	all := make(chan struct{})
	srv := newServer(b.connOpt, b.o.concurrency, 0)
	if err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		if handled.Add(1) == n {
			close(all)
		}
		return nil
	})); err != nil {
		return err
	}
	defer srv.Shutdown()
	if err := waitFor(ctx, all, 60*time.Second, func() string { return fmt.Sprintf("%d of %d handled", handled.Load(), n) }); err != nil {
		return err
	}
	_, _, err := b.waitActiveEmpty(ctx)
	return err
}

// waitActiveEmpty polls the active list until the last finished job left it
// (asynq's Done has run) and returns when, and how many LLEN it sent.
func (b *bench) waitActiveEmpty(ctx context.Context) (time.Time, int64, error) {
	var polls int64
	deadline := time.Now().Add(30 * time.Second)
	for {
		polls++
		n, err := b.stats.LLen(ctx, activeKey).Result()
		if err != nil {
			return time.Time{}, polls, err
		}
		if n == 0 {
			return time.Now(), polls, nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, polls, fmt.Errorf("%d jobs still active 30s after their handlers returned", n)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func waitFor(ctx context.Context, c <-chan struct{}, limit time.Duration, progress func() string) error {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("not done after %s: %s", limit, progress())
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// enqueue (a): N single Enqueue calls from 10 goroutines. It returns the
// Redis commands per job.
func (b *bench) enqueue(ctx context.Context) (float64, error) {
	if err := b.fresh(ctx); err != nil {
		return 0, err
	}
	c := asynq.NewClient(b.connOpt)
	defer c.Close()
	// One untimed enqueue: asynq's client adds the queue to its set of
	// queues once per client.
	if _, err := c.EnqueueContext(ctx, newTask(b.payload), asynq.Queue(benchQueue)); err != nil {
		return 0, err
	}
	n := b.o.n
	s0, err := b.snap(ctx)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := b.enqueueAll(ctx, c, n); err != nil {
		return 0, err
	}
	elapsed := time.Since(start)
	s1, err := b.snap(ctx)
	if err != nil {
		return 0, err
	}
	d := cmdDelta(s0, s1, nil)
	perJobCmds := float64(totalCalls(d)) / float64(n)
	b.rep.add("enqueue_jobs_per_s", float64(n)/elapsed.Seconds())
	b.rep.add("cmds_per_job_enqueue", perJobCmds)
	b.rep.add("enqueue_redis_cpu_us_per_job", (s1.redisCPU-s0.redisCPU)*1e6/float64(n))
	b.rep.add("enqueue_client_cpu_us_per_job", (s1.selfCPU-s0.selfCPU)*1e6/float64(n))
	b.rep.add("enqueue_allocs_per_job", float64(s1.mallocs-s0.mallocs)/float64(n))
	b.rep.add("enqueue_alloc_bytes_per_job", float64(s1.allocBytes-s0.allocBytes)/float64(n))
	b.rep.Commands["a. enqueue"] = perJob(d, n)
	b.progress("enqueue: %.0f jobs/s, %.2f commands/job, redis CPU %.1f µs/job, client CPU %.1f µs/job",
		float64(n)/elapsed.Seconds(), perJobCmds, (s1.redisCPU-s0.redisCPU)*1e6/float64(n), (s1.selfCPU-s0.selfCPU)*1e6/float64(n))
	return perJobCmds, nil
}

// drain (b, e, f): pre-enqueue N jobs (untimed; asynq has no batch enqueue,
// so one by one from 10 goroutines; measures the memory per waiting job),
// then time a server from Start until every job's handler returned and the
// job left the active list.
func (b *bench) drain(ctx context.Context, conc int, first bool) (float64, error) {
	o := b.o
	if err := b.fresh(ctx); err != nil {
		return 0, err
	}
	c := asynq.NewClient(b.connOpt)
	defer c.Close()
	m0, err := b.snap(ctx)
	if err != nil {
		return 0, err
	}
	if err := b.enqueueAll(ctx, c, o.n); err != nil {
		return 0, err
	}
	m1, err := b.snap(ctx)
	if err != nil {
		return 0, err
	}
	if first {
		b.rep.add("mem_bytes_per_job", float64(m1.usedMemory-m0.usedMemory)/float64(o.n))
	}

	runtime.GC()
	s0, err := b.snap(ctx)
	if err != nil {
		return 0, err
	}
	var (
		elapsed time.Duration
		s1      snapshot
		polls   int64
	)
	if o.procs == 1 {
		elapsed, s1, polls, err = b.drainInProcess(ctx, conc)
	} else {
		elapsed, s1, polls, err = b.drainProcs(ctx, conc)
	}
	if err != nil {
		return 0, err
	}
	n := float64(o.n)
	d := cmdDelta(s0, s1, map[string]int64{"llen": polls})
	perJobCmds := float64(totalCalls(d)) / n
	key := func(k string) string { return o.drainKey(k, conc) }
	b.rep.add(key("drain_jobs_per_s"), n/elapsed.Seconds())
	b.rep.add(key("cmds_per_job_drain"), perJobCmds)
	b.rep.add(key("redis_cpu_us_per_job"), (s1.redisCPU-s0.redisCPU)*1e6/n)
	b.rep.add(key("client_cpu_us_per_job"), (s1.selfCPU-s0.selfCPU+s1.childCPU-s0.childCPU)*1e6/n)
	b.rep.Commands["b. drain (take + finish)"+o.atC(conc)] = perJob(d, o.n)
	if o.procs == 1 { // the children's allocations are not seen
		b.rep.add(key("drain_allocs_per_job"), float64(s1.mallocs-s0.mallocs)/n)
		b.rep.add(key("drain_alloc_bytes_per_job"), float64(s1.allocBytes-s0.allocBytes)/n)
	}
	b.progress("drain at concurrency %d: %.0f jobs/s, %.2f commands/job, redis CPU %.1f µs/job, client CPU %.1f µs/job, %.0f B/waiting job",
		conc, n/elapsed.Seconds(), perJobCmds, (s1.redisCPU-s0.redisCPU)*1e6/n,
		(s1.selfCPU-s0.selfCPU+s1.childCPU-s0.childCPU)*1e6/n, float64(m1.usedMemory-m0.usedMemory)/n)
	return perJobCmds, nil
}

func drainLimit(n int) time.Duration { return max(2*time.Minute, time.Duration(n)*time.Millisecond) }

func (b *bench) drainInProcess(ctx context.Context, c int) (time.Duration, snapshot, int64, error) {
	n := int64(b.o.n)
	var handled atomic.Int64
	all := make(chan struct{})
	srv := newServer(b.connOpt, c, 0)
	start := time.Now()
	if err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		if handled.Add(1) == n {
			close(all)
		}
		return nil
	})); err != nil {
		return 0, snapshot{}, 0, err
	}
	defer srv.Shutdown()
	if err := waitFor(ctx, all, drainLimit(b.o.n), func() string { return fmt.Sprintf("%d of %d handled", handled.Load(), n) }); err != nil {
		return 0, snapshot{}, 0, err
	}
	end, polls, err := b.waitActiveEmpty(ctx)
	if err != nil {
		return 0, snapshot{}, polls, err
	}
	s1, err := b.snap(ctx)
	return end.Sub(start), s1, polls, err
}

// drainProcs runs -procs child server processes; they report their handler
// counts on stdout; once all jobs were handled the active list is polled.
func (b *bench) drainProcs(ctx context.Context, conc int) (time.Duration, snapshot, int64, error) {
	o := b.o
	exe, err := os.Executable()
	if err != nil {
		return 0, snapshot{}, 0, err
	}
	type update struct {
		child int
		count int64
	}
	updates := make(chan update, 64)
	children := make([]*exec.Cmd, o.procs)
	stdins := make([]io.WriteCloser, o.procs)
	var readers sync.WaitGroup
	start := time.Now()
	for i := range children {
		cmd := exec.CommandContext(ctx, exe, childMode, "-mode", "drain", "-redis-url", o.redisURL,
			"-concurrency", strconv.Itoa(conc))
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return 0, snapshot{}, 0, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return 0, snapshot{}, 0, err
		}
		if err := cmd.Start(); err != nil {
			return 0, snapshot{}, 0, err
		}
		children[i], stdins[i] = cmd, stdin
		readers.Add(1)
		go func(i int) {
			defer readers.Done()
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) == 3 && f[0] == "done" {
					c, _ := strconv.ParseInt(f[1], 10, 64)
					updates <- update{i, c}
				}
			}
		}(i)
	}
	go func() { readers.Wait(); close(updates) }()
	stopAll := func() {
		go func() {
			for range updates {
			}
		}()
		for _, s := range stdins {
			s.Close() // a child shuts down when its stdin closes
		}
		readers.Wait()
		for _, c := range children {
			_ = c.Wait()
		}
	}
	counts := make([]int64, o.procs)
	limit := time.NewTimer(drainLimit(o.n))
	defer limit.Stop()
	for {
		var total int64
		for _, c := range counts {
			total += c
		}
		if total >= int64(o.n) {
			break
		}
		select {
		case u, ok := <-updates:
			if !ok {
				stopAll()
				return 0, snapshot{}, 0, fmt.Errorf("server processes exited after %d of %d jobs", total, o.n)
			}
			counts[u.child] = u.count
		case <-limit.C:
			stopAll()
			return 0, snapshot{}, 0, fmt.Errorf("not done after %s: %d of %d jobs", drainLimit(o.n), total, o.n)
		case <-ctx.Done():
			stopAll()
			return 0, snapshot{}, 0, ctx.Err()
		}
	}
	end, polls, err := b.waitActiveEmpty(ctx)
	if err != nil {
		stopAll()
		return 0, snapshot{}, polls, err
	}
	s1, err := b.snap(ctx)
	stopAll()
	s1.selfCPU = rusageSeconds(syscall.RUSAGE_SELF)
	s1.childCPU = rusageSeconds(syscall.RUSAGE_CHILDREN)
	return end.Sub(start), s1, polls, err
}

// latency (c): enqueue at a fixed rate while an idle server waits; the
// handler compares the time in the payload (taken just before Enqueue) with
// its own start. poll is TaskCheckInterval (0: asynq's default).
func (b *bench) latency(ctx context.Context, prefix string, poll time.Duration) error {
	o := b.o
	if err := b.fresh(ctx); err != nil {
		return err
	}
	c := asynq.NewClient(b.connOpt)
	defer c.Close()
	total := int(float64(o.rate) * o.duration.Seconds())
	lats := make([]time.Duration, total)
	var got, stored, warm atomic.Int64
	allIn := make(chan struct{})
	srv := newServer(b.connOpt, o.concurrency, poll)
	if err := srv.Start(asynq.HandlerFunc(func(_ context.Context, t *asynq.Task) error {
		now := time.Now().UnixNano()
		ts := int64(binary.LittleEndian.Uint64(t.Payload()))
		if ts == 0 {
			warm.Add(1)
			return nil
		}
		i := got.Add(1) - 1
		if i < int64(total) {
			lats[i] = time.Duration(now - ts)
		}
		if stored.Add(1) == int64(total) { // every slot written
			close(allIn)
		}
		return nil
	})); err != nil {
		return err
	}
	defer srv.Shutdown()
	const warmJobs = 20
	zero := make([]byte, o.payload)
	for i := 0; i < warmJobs; i++ {
		if _, err := c.EnqueueContext(ctx, newTask(zero), asynq.Queue(benchQueue)); err != nil {
			return err
		}
	}
	for deadline := time.Now().Add(30 * time.Second); warm.Load() < warmJobs; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			return errors.New("warm-up jobs not handled within 30s")
		}
	}
	if !sleepCtx(ctx, time.Second) {
		return ctx.Err()
	}
	runtime.GC()
	s0, err := b.snap(ctx)
	if err != nil {
		return err
	}
	sent, err := produce(ctx, o, b.payload, func(p []byte) error {
		_, err := c.EnqueueContext(ctx, newTask(p), asynq.Queue(benchQueue))
		return err
	})
	if err != nil {
		return err
	}
	if err := waitFor(ctx, allIn, 30*time.Second, func() string { return fmt.Sprintf("%d of %d jobs handled", got.Load(), total) }); err != nil {
		return err
	}
	s1, err := b.snap(ctx)
	if err != nil {
		return err
	}
	p := recordLatency(b.rep, prefix, lats)
	costPrefix := strings.Replace(prefix, "latency", "lowrate", 1)
	cost := recordLowRate(b.rep, costPrefix, s0, s1, total)
	label := "default TaskCheckInterval"
	if poll > 0 {
		label = "TaskCheckInterval " + poll.String()
	}
	b.progress("latency at %.0f jobs/s (%s): p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, max %.3f ms; per job %.2f commands, redis CPU %.1f µs, client CPU %.1f µs",
		sent, label, p[0], p[1], p[2], p[3], cost[0], cost[1], cost[2])
	return nil
}

// recordLowRate adds, under prefix_*, what the jobs of a latency run cost
// between snapshots s0 and s1: Redis commands, Redis CPU (µs), client CPU
// (µs, this process: producer and server) and heap allocations per job; it
// returns the first three. The command breakdown goes to the report too.
func recordLowRate(rep *Report, prefix string, s0, s1 snapshot, jobs int) [3]float64 {
	d := cmdDelta(s0, s1, nil)
	n := float64(jobs)
	out := [3]float64{float64(totalCalls(d)) / n, (s1.redisCPU - s0.redisCPU) * 1e6 / n, (s1.selfCPU - s0.selfCPU) * 1e6 / n}
	rep.add(prefix+"_cmds_per_job", out[0])
	rep.add(prefix+"_redis_cpu_us_per_job", out[1])
	rep.add(prefix+"_client_cpu_us_per_job", out[2])
	rep.add(prefix+"_allocs_per_job", float64(s1.mallocs-s0.mallocs)/n)
	rep.Commands["c. "+prefix+" (enqueue + take + finish)"] = perJob(d, jobs)
	return out
}

// producers is how many goroutines share produce's schedule: job i is
// enqueued by goroutine i mod producers at start + i/rate, so the offered
// rate holds while an Enqueue takes up to producers/rate (4 ms at 1,000
// jobs/s: several round trips over the -rtt of cmd/worqr-bench).
const producers = 4

// produce calls enqueue rate times a second for the run's duration, each
// with a copy of payload stamped with the call's start (unix nanos, first 8
// bytes). It returns the rate achieved.
func produce(ctx context.Context, o *options, payload []byte, enqueue func([]byte) error) (float64, error) {
	total := int(float64(o.rate) * o.duration.Seconds())
	interval := time.Second / time.Duration(o.rate)
	start := time.Now()
	errs := make(chan error, producers)
	var wg sync.WaitGroup
	for g := 0; g < producers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < total; i += producers {
				if ctx.Err() != nil {
					errs <- ctx.Err()
					return
				}
				if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
					time.Sleep(d)
				}
				p := make([]byte, len(payload))
				copy(p, payload)
				binary.LittleEndian.PutUint64(p, uint64(time.Now().UnixNano()))
				if err := enqueue(p); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(total) / time.Since(start).Seconds(), nil
}

// recovery (g): a child server process takes K jobs and blocks in its
// handler; a peer server in this process (default settings) waits; the child
// is SIGKILLed; asynq's lease expiry, recoverer, retry delay and forwarder
// bring the jobs back and the peer takes them. The wait is capped.
func (b *bench) recovery(ctx context.Context) error {
	o := b.o
	if err := b.fresh(ctx); err != nil {
		return err
	}
	c := asynq.NewClient(b.connOpt)
	defer c.Close()
	k := o.recoveryJobs
	for i := 0; i < k; i++ {
		if _, err := c.EnqueueContext(ctx, newTask(b.payload), asynq.Queue(benchQueue)); err != nil {
			return err
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	child := exec.CommandContext(ctx, exe, childMode, "-mode", "hold", "-redis-url", o.redisURL,
		"-concurrency", strconv.Itoa(k), "-jobs", strconv.Itoa(k))
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe()
	if err != nil {
		return err
	}
	defer stdin.Close()
	stdout, err := child.StdoutPipe()
	if err != nil {
		return err
	}
	if err := child.Start(); err != nil {
		return err
	}
	killed := false
	defer func() {
		if !killed {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
	}()
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "ready" {
				close(ready)
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	if err := waitFor(ctx, ready, 30*time.Second, func() string { return "the child server did not take its jobs" }); err != nil {
		return err
	}

	var (
		killAt         atomic.Int64 // unix nanos
		firstAt, allAt atomic.Int64 // nanos since killAt
		taken          atomic.Int64
		allTaken       = make(chan struct{})
	)
	peer := newServer(b.connOpt, k, 0)
	if err := peer.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		since := time.Now().UnixNano() - killAt.Load()
		firstAt.CompareAndSwap(0, since)
		if taken.Add(1) == int64(k) {
			allAt.Store(since)
			close(allTaken)
		}
		return nil
	})); err != nil {
		return err
	}
	defer peer.Shutdown()
	// Let the peer settle, then kill at a random phase (as the worqr side).
	if !sleepCtx(ctx, 1500*time.Millisecond+rand.N(time.Second)) {
		return ctx.Err()
	}
	if n := taken.Load(); n != 0 {
		return fmt.Errorf("the peer took %d jobs before the kill", n)
	}
	killAt.Store(time.Now().UnixNano())
	if err := child.Process.Kill(); err != nil {
		return err
	}
	killed = true
	_ = child.Wait()
	b.progress("recovery: server killed; waiting up to %s for its %d jobs to be taken again", o.recoveryCap, k)

	// Watch the active list: it empties when the recoverer moved the jobs.
	var releasedAt atomic.Int64
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		for sleepCtx(watchCtx, 100*time.Millisecond) {
			if n, err := b.stats.LLen(watchCtx, activeKey).Result(); err == nil && n == 0 {
				releasedAt.Store(time.Now().UnixNano() - killAt.Load())
				return
			}
		}
	}()

	capped := false
	t := time.NewTimer(o.recoveryCap)
	defer t.Stop()
	select {
	case <-allTaken:
	case <-t.C:
		capped = true
	case <-ctx.Done():
		return ctx.Err()
	}
	stopWatch()
	secs := func(nanos int64) float64 { return time.Duration(nanos).Seconds() }
	add := func(key string, nanos int64) {
		if nanos == 0 {
			b.rep.Capped[key] = true
			b.rep.add(key, o.recoveryCap.Seconds())
			return
		}
		b.rep.add(key, secs(nanos))
	}
	add("recovery_released_s", releasedAt.Load())
	add("recovery_first_s", firstAt.Load())
	if capped {
		add("recovery_all_s", 0)
	} else {
		add("recovery_all_s", allAt.Load())
	}
	b.progress("recovery: released after %.2fs, first taken after %.2fs, all %d after %.2fs (capped: %v)",
		secs(releasedAt.Load()), secs(firstAt.Load()), k, secs(allAt.Load()), capped)
	return nil
}
