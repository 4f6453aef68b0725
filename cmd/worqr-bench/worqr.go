package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/xid"

	"github.com/worqr/worqr-go/worqr"
)

const (
	benchQueue      = "bench"
	enqueueRoutines = 10
	batchSize       = 1000 // EnqueueBatch size of the untimed pre-enqueue
)

// bench runs the worqr workloads.
type bench struct {
	o       *options
	url     string
	pool    *redis.Pool
	stats   redis.Conn // INFO and FLUSHDB only, outside the pool
	log     *slog.Logger
	payload []byte
	rep     *Report

	profiled bool // -cpuprofile was written
}

func newBench(ctx context.Context, o *options, url string, stats redis.Conn) (*bench, error) {
	b := &bench{
		o: o, url: url, stats: stats, log: newLogger(),
		pool: &redis.Pool{
			MaxIdle:     4 * (slices.Max(o.concurrencies) + enqueueRoutines),
			IdleTimeout: time.Minute,
			DialContext: func(ctx context.Context) (redis.Conn, error) {
				return redis.DialURLContext(ctx, url)
			},
		},
		payload: makePayload(o.payload),
		rep:     newReport("worqr", "this tree"),
	}
	if err := b.warmup(ctx); err != nil {
		b.close()
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	return b, nil
}

func (b *bench) close() { b.pool.Close() }

// makePayload returns size pseudo-random bytes (the same on every run).
func makePayload(size int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	p := make([]byte, size)
	for i := range p {
		p[i] = byte(r.UintN(256))
	}
	return p
}

// fresh empties the database and returns a namespace no run used.
func (b *bench) fresh(ctx context.Context) (string, error) {
	if _, err := redis.DoContext(b.stats, ctx, "FLUSHDB"); err != nil {
		return "", err
	}
	return "bench-" + xid.New().String(), nil
}

func (b *bench) snap(ctx context.Context) (snapshot, error) { return takeSnapshot(ctx, b.stats) }

func (b *bench) config(ns string) worqr.Config {
	return worqr.Config{Namespace: ns, Logger: b.log}
}

// warmup loads every hot-path script into Redis's cache and fills the
// connection pool, so that no timed run pays for a NOSCRIPT fallback.
func (b *bench) warmup(ctx context.Context) error {
	ns, err := b.fresh(ctx)
	if err != nil {
		return err
	}
	client, err := worqr.NewClient(b.pool, &worqr.Config{Namespace: ns, Logger: b.log})
	if err != nil {
		return err
	}
	const n = 200
	for i := 0; i < n/2; i++ {
		if _, err := client.Enqueue(ctx, benchQueue, b.payload, nil); err != nil {
			return err
		}
	}
	if _, err := client.EnqueueBatch(ctx, benchQueue, repeat(b.payload, n/2), nil); err != nil {
		return err
	}
	var done atomic.Int64
	finished := make(chan struct{})
	w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{
		Config: b.config(ns),
		Queues: map[string]worqr.QueueConfig{benchQueue: {Concurrency: b.o.concurrency, Handler: noop}},
		OnEvent: func(e worqr.Event) {
			if e.Kind == worqr.EventDone && done.Add(1) == n {
				close(finished)
			}
		},
	})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer stopWorker(w)
	return waitFor(ctx, finished, 30*time.Second, func() string { return fmt.Sprintf("%d of %d done", done.Load(), n) })
}

var noop = worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil })

func repeat(p []byte, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = p
	}
	return out
}

func stopWorker(w *worqr.Worker) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = w.Stop(ctx)
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

func (b *bench) progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "worqr-bench: worqr "+format+"\n", args...)
}

// runRep runs repetition rep of the selected workloads.
func (b *bench) runRep(ctx context.Context, rep int) error {
	o := b.o
	enq, drain := -1.0, -1.0
	if o.run.needEnqueue() {
		v, err := b.enqueue(ctx, rep == 0 && o.cpuprofile != "" && o.profile == "a")
		if err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
		enq = v
	}
	if o.run.needDrain() {
		for i, c := range o.concurrencies {
			v, err := b.drain(ctx, c, i == 0, rep == 0 && i == 0 && o.cpuprofile != "" && o.profile == "b")
			if err != nil {
				return fmt.Errorf("drain at concurrency %d: %w", c, err)
			}
			if i == 0 {
				drain = v
			}
		}
	}
	if enq >= 0 && drain >= 0 {
		b.rep.add("cmds_per_job", enq+drain)
	}
	if o.run.latency {
		if err := b.latency(ctx, rep == 0 && o.cpuprofile != "" && o.profile == "c"); err != nil {
			return fmt.Errorf("latency: %w", err)
		}
	}
	if o.run.recovery {
		if err := b.recovery(ctx); err != nil {
			return fmt.Errorf("recovery: %w", err)
		}
	}
	if o.run.bulk {
		if err := b.bulk(ctx, rep == 0 && o.cpuprofile != "" && o.profile == "h"); err != nil {
			return fmt.Errorf("bulk: %w", err)
		}
	}
	if o.run.load {
		if err := b.load(ctx); err != nil {
			return fmt.Errorf("load: %w", err)
		}
	}
	if o.run.ordered {
		if err := b.ordered(ctx); err != nil {
			return fmt.Errorf("ordered: %w", err)
		}
	}
	if o.run.fair {
		if err := b.fair(ctx); err != nil {
			return fmt.Errorf("fair: %w", err)
		}
	}
	return nil
}

// report returns what the repetitions measured.
func (b *bench) report() *Report {
	if b.o.procs > 1 {
		b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("drain ran in %d child processes of %d handlers each; their CPU is in the client CPU", b.o.procs, b.o.concurrency))
	}
	return b.rep
}

// enqueue (a): N single Enqueue calls from 10 goroutines. It returns the
// Redis commands per job.
func (b *bench) enqueue(ctx context.Context, profile bool) (float64, error) {
	ns, err := b.fresh(ctx)
	if err != nil {
		return 0, err
	}
	client, err := worqr.NewClient(b.pool, &worqr.Config{Namespace: ns, Logger: b.log})
	if err != nil {
		return 0, err
	}
	n := b.o.n
	s0, err := b.snap(ctx)
	if err != nil {
		return 0, err
	}
	var next atomic.Int64
	errs := make(chan error, enqueueRoutines)
	var wg sync.WaitGroup
	stopProfile := func() {}
	if profile {
		if stopProfile, err = b.startProfile(); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	for g := 0; g < enqueueRoutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if _, err := client.Enqueue(ctx, benchQueue, b.payload, nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	stopProfile()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	s1, err := b.snap(ctx)
	if err != nil {
		return 0, err
	}
	d := cmdDelta(s0, s1)
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

// drain (b, e, f): pre-enqueue N jobs in batches (untimed; measures the
// memory per waiting job when first), then time a worker of concurrency c
// from Start to the Nth finish Redis accepted. It returns the Redis commands
// per job of the drain.
func (b *bench) drain(ctx context.Context, c int, first, profile bool) (float64, error) {
	o := b.o
	ns, err := b.fresh(ctx)
	if err != nil {
		return 0, err
	}
	client, err := worqr.NewClient(b.pool, &worqr.Config{Namespace: ns, Logger: b.log})
	if err != nil {
		return 0, err
	}
	m0, err := b.snap(ctx)
	if err != nil {
		return 0, err
	}
	for i := 0; i < o.n; i += batchSize {
		if _, err := client.EnqueueBatch(ctx, benchQueue, repeat(b.payload, min(batchSize, o.n-i)), nil); err != nil {
			return 0, err
		}
	}
	m1, err := b.snap(ctx)
	if err != nil {
		return 0, err
	}
	if first {
		b.rep.add("mem_bytes_per_job", float64(m1.usedMemory-m0.usedMemory)/float64(o.n))
	}

	runtime.GC() // the pre-enqueue's garbage is not the drain's cost
	s0, err := b.snap(ctx)
	if err != nil {
		return 0, err
	}
	var (
		elapsed time.Duration
		s1      snapshot
	)
	if o.procs == 1 {
		elapsed, s1, err = b.drainInProcess(ctx, ns, c, profile)
	} else {
		elapsed, s1, err = b.drainProcs(ctx, ns, c)
	}
	if err != nil {
		return 0, err
	}
	n := float64(o.n)
	d := cmdDelta(s0, s1)
	perJobCmds := float64(totalCalls(d)) / n
	key := func(k string) string { return o.drainKey(k, c) }
	b.rep.add(key("drain_jobs_per_s"), n/elapsed.Seconds())
	b.rep.add(key("cmds_per_job_drain"), perJobCmds)
	b.rep.add(key("redis_cpu_us_per_job"), (s1.redisCPU-s0.redisCPU)*1e6/n)
	b.rep.add(key("client_cpu_us_per_job"), (s1.selfCPU-s0.selfCPU+s1.childCPU-s0.childCPU)*1e6/n)
	b.rep.Commands["b. drain (take + finish)"+o.atC(c)] = perJob(d, o.n)
	if o.procs == 1 { // the children's allocations are not seen
		b.rep.add(key("drain_allocs_per_job"), float64(s1.mallocs-s0.mallocs)/n)
		b.rep.add(key("drain_alloc_bytes_per_job"), float64(s1.allocBytes-s0.allocBytes)/n)
	}
	takes := d["lpop"].Calls
	b.progress("drain at concurrency %d: %.0f jobs/s, %.2f commands/job, %d takes (%.1f jobs per take), redis CPU %.1f µs/job, client CPU %.1f µs/job, %.0f B/waiting job",
		c, n/elapsed.Seconds(), perJobCmds, takes, n/float64(max(takes, 1)),
		(s1.redisCPU-s0.redisCPU)*1e6/n, (s1.selfCPU-s0.selfCPU+s1.childCPU-s0.childCPU)*1e6/n,
		float64(m1.usedMemory-m0.usedMemory)/n)
	return perJobCmds, nil
}

// drainInProcess runs one worker in this process and returns the time from
// Start to the Nth EventDone and a snapshot taken right then.
func (b *bench) drainInProcess(ctx context.Context, ns string, c int, profile bool) (time.Duration, snapshot, error) {
	n := int64(b.o.n)
	var handled, done atomic.Int64
	finished := make(chan struct{})
	var end time.Time
	w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{
		Config: b.config(ns),
		Queues: map[string]worqr.QueueConfig{benchQueue: {
			Concurrency: c,
			Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
				handled.Add(1)
				return nil
			}),
		}},
		OnEvent: func(e worqr.Event) {
			if e.Kind == worqr.EventDone && done.Add(1) == n {
				end = time.Now()
				close(finished)
			}
		},
	})
	if err != nil {
		return 0, snapshot{}, err
	}
	stopProfile := func() {}
	if profile {
		if stopProfile, err = b.startProfile(); err != nil {
			return 0, snapshot{}, err
		}
	}
	start := time.Now()
	if err := w.Start(ctx); err != nil {
		stopProfile()
		return 0, snapshot{}, err
	}
	defer stopWorker(w)
	err = waitFor(ctx, finished, drainLimit(b.o.n), func() string {
		return fmt.Sprintf("%d handled, %d done of %d", handled.Load(), done.Load(), n)
	})
	stopProfile()
	if err != nil {
		return 0, snapshot{}, err
	}
	s1, err := b.snap(ctx)
	if err != nil {
		return 0, snapshot{}, err
	}
	if h := handled.Load(); h != n {
		return 0, snapshot{}, fmt.Errorf("%d handler runs for %d jobs", h, n)
	}
	return end.Sub(start), s1, nil
}

// startProfile starts the CPU profile of -cpuprofile; the returned function
// stops it.
func (b *bench) startProfile() (func(), error) {
	if b.profiled {
		return func() {}, nil
	}
	b.profiled = true
	f, err := os.Create(b.o.cpuprofile)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	// With -memprofile, the allocation profile at the start and at the end
	// of the same window: go tool pprof -base FILE.base FILE shows what the
	// window allocated.
	writeAllocs := func(path string) {
		if path == "" {
			return
		}
		runtime.GC() // the profile is as of the last GC
		if mf, err := os.Create(path); err == nil {
			_ = pprof.Lookup("allocs").WriteTo(mf, 0)
			mf.Close()
		}
	}
	if b.o.memprofile != "" {
		writeAllocs(b.o.memprofile + ".base")
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		fmt.Fprintf(os.Stderr, "worqr-bench: CPU profile written to %s\n", b.o.cpuprofile)
		if b.o.memprofile != "" {
			writeAllocs(b.o.memprofile)
			fmt.Fprintf(os.Stderr, "worqr-bench: allocation profiles written to %s.base and %s (go tool pprof -sample_index=alloc_objects -base %s.base %s)\n",
				b.o.memprofile, b.o.memprofile, b.o.memprofile, b.o.memprofile)
		}
	}, nil
}

func drainLimit(n int) time.Duration { return max(2*time.Minute, time.Duration(n)*time.Millisecond) }

// drainProcs runs -procs child worker processes and returns the time from
// their start to the Nth finish any of them reported, with a snapshot whose
// client CPU includes the children (after they exited).
func (b *bench) drainProcs(ctx context.Context, ns string, c int) (time.Duration, snapshot, error) {
	o := b.o
	exe, err := os.Executable()
	if err != nil {
		return 0, snapshot{}, err
	}
	type update struct {
		child int
		count int64
		last  int64 // unix nanos of the child's latest finish
	}
	updates := make(chan update, 64)
	children := make([]*exec.Cmd, o.procs)
	stdins := make([]io.WriteCloser, o.procs)
	var readers sync.WaitGroup
	start := time.Now()
	for i := range children {
		cmd := exec.CommandContext(ctx, exe, childMode, "-mode", "drain", "-redis-url", b.url,
			"-namespace", ns, "-queue", benchQueue, "-concurrency", strconv.Itoa(c))
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return 0, snapshot{}, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return 0, snapshot{}, err
		}
		if err := cmd.Start(); err != nil {
			return 0, snapshot{}, err
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
					t, _ := strconv.ParseInt(f[2], 10, 64)
					updates <- update{i, c, t}
				}
			}
		}(i)
	}
	go func() { readers.Wait(); close(updates) }()
	stopAll := func() {
		go func() {
			for range updates { // late progress lines: keep the readers unblocked
			}
		}()
		for _, s := range stdins {
			s.Close() // a child stops gracefully when its stdin closes
		}
		readers.Wait() // each sees EOF once its child exited
		for _, c := range children {
			_ = c.Wait()
		}
	}
	counts := make([]int64, o.procs)
	lasts := make([]int64, o.procs)
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
				return 0, snapshot{}, fmt.Errorf("worker processes exited after %d of %d jobs", total, o.n)
			}
			counts[u.child], lasts[u.child] = u.count, u.last
		case <-limit.C:
			stopAll()
			return 0, snapshot{}, fmt.Errorf("not done after %s: %d of %d jobs", drainLimit(o.n), total, o.n)
		case <-ctx.Done():
			stopAll()
			return 0, snapshot{}, ctx.Err()
		}
	}
	s1, err := b.snap(ctx)
	if err != nil {
		stopAll()
		return 0, snapshot{}, err
	}
	stopAll()
	s1.selfCPU = rusageSeconds(syscall.RUSAGE_SELF)
	s1.childCPU = rusageSeconds(syscall.RUSAGE_CHILDREN)
	end := time.Unix(0, slices.Max(lasts))
	return end.Sub(start), s1, nil
}

// latency (c): enqueue at a fixed rate while an idle worker waits; the
// handler compares the time in the payload (taken just before Enqueue) with
// its own start. Over the same window (first enqueue to last handler start)
// it measures what a job costs at that low rate: Redis commands, Redis CPU
// and this process's CPU (producer and worker) per job.
func (b *bench) latency(ctx context.Context, profile bool) error {
	o := b.o
	ns, err := b.fresh(ctx)
	if err != nil {
		return err
	}
	client, err := worqr.NewClient(b.pool, &worqr.Config{Namespace: ns, Logger: b.log})
	if err != nil {
		return err
	}
	total := int(float64(o.rate) * o.duration.Seconds())
	lats := make([]time.Duration, total)
	var got, stored, warm atomic.Int64
	allIn := make(chan struct{})
	w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{
		Config: b.config(ns),
		Queues: map[string]worqr.QueueConfig{benchQueue: {
			Concurrency: o.concurrency,
			Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
				now := time.Now().UnixNano()
				ts := int64(binary.LittleEndian.Uint64(t.Payload))
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
			}),
		}},
	})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer stopWorker(w)
	// Warm up with jobs stamped 0, then let the worker go idle.
	const warmJobs = 20
	zero := make([]byte, o.payload)
	for i := 0; i < warmJobs; i++ {
		if _, err := client.Enqueue(ctx, benchQueue, zero, nil); err != nil {
			return err
		}
	}
	for deadline := time.Now().Add(10 * time.Second); warm.Load() < warmJobs; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			return errors.New("warm-up jobs not handled within 10s")
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
	stopProfile := func() {}
	if profile {
		if stopProfile, err = b.startProfile(); err != nil {
			return err
		}
	}
	sent, err := produce(ctx, o, b.payload, func(p []byte) error {
		_, err := client.Enqueue(ctx, benchQueue, p, nil)
		return err
	})
	if err != nil {
		stopProfile()
		return err
	}
	err = waitFor(ctx, allIn, 30*time.Second, func() string { return fmt.Sprintf("%d of %d jobs handled", got.Load(), total) })
	stopProfile()
	if err != nil {
		return err
	}
	s1, err := b.snap(ctx)
	if err != nil {
		return err
	}
	p := recordLatency(b.rep, "latency", lats)
	c := recordLowRate(b.rep, "lowrate", s0, s1, total)
	b.progress("latency at %.0f jobs/s: p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, max %.3f ms; per job %.2f commands, redis CPU %.1f µs, client CPU %.1f µs",
		sent, p[0], p[1], p[2], p[3], c[0], c[1], c[2])
	return nil
}

// recordLowRate adds, under prefix_*, what the jobs of a latency run cost
// between snapshots s0 and s1: Redis commands, Redis CPU (µs), client CPU
// (µs, this process) and heap allocations per job; it returns the first
// three. The command breakdown goes to the report too.
func recordLowRate(rep *Report, prefix string, s0, s1 snapshot, jobs int) [3]float64 {
	d := cmdDelta(s0, s1)
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

// recordLatency adds the p50, p90, p99 and max of lats (in ms) under
// prefix_p50_ms and so on, and returns them.
func recordLatency(rep *Report, prefix string, lats []time.Duration) [4]float64 {
	slices.Sort(lats)
	out := [4]float64{ms(percentile(lats, .5)), ms(percentile(lats, .9)), ms(percentile(lats, .99)), ms(lats[len(lats)-1])}
	for i, p := range []string{"p50", "p90", "p99", "max"} {
		rep.add(prefix+"_"+p+"_ms", out[i])
	}
	return out
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

// recovery (g): a child worker process takes K jobs and blocks in its
// handler; a peer in this process (default timings) waits; the child is
// SIGKILLed; the peer's reaper requeues the jobs and the peer takes them.
func (b *bench) recovery(ctx context.Context) error {
	o := b.o
	ns, err := b.fresh(ctx)
	if err != nil {
		return err
	}
	client, err := worqr.NewClient(b.pool, &worqr.Config{Namespace: ns, Logger: b.log})
	if err != nil {
		return err
	}
	k := o.recoveryJobs
	if _, err := client.EnqueueBatch(ctx, benchQueue, repeat(b.payload, k), nil); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	child := exec.CommandContext(ctx, exe, childMode, "-mode", "hold", "-redis-url", b.url,
		"-namespace", ns, "-queue", benchQueue, "-concurrency", strconv.Itoa(k), "-jobs", strconv.Itoa(k))
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe() // the child also exits when this closes
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
	if err := waitFor(ctx, ready, 30*time.Second, func() string { return "the child worker did not take its jobs" }); err != nil {
		return err
	}

	var (
		killAt, releasedAt atomic.Int64 // unix nanos
		firstAt, allAt     atomic.Int64 // nanos since killAt
		taken              atomic.Int64
		allTaken           = make(chan struct{})
	)
	peer, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{
		Config: b.config(ns),
		Queues: map[string]worqr.QueueConfig{benchQueue: {
			Concurrency: k,
			Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
				since := time.Now().UnixNano() - killAt.Load()
				firstAt.CompareAndSwap(0, since)
				if taken.Add(1) == int64(k) {
					allAt.Store(since)
					close(allTaken)
				}
				return nil
			}),
		}},
		OnEvent: func(e worqr.Event) {
			if e.Kind == worqr.EventRecovered {
				releasedAt.CompareAndSwap(0, time.Now().UnixNano())
			}
		},
	})
	if err != nil {
		return err
	}
	if err := peer.Start(ctx); err != nil {
		return err
	}
	defer stopWorker(peer)
	// Let the peer settle, then kill at a random phase of its reaper's
	// ticker (the child's heartbeat phase is random already).
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
	secs := func(nanos int64) float64 { return time.Duration(nanos).Seconds() }
	addCapped := func(key string, nanos int64) {
		if nanos == 0 { // not seen within the cap
			b.rep.Capped[key] = true
			b.rep.add(key, o.recoveryCap.Seconds())
			return
		}
		b.rep.add(key, secs(nanos))
	}
	var released int64
	if r := releasedAt.Load(); r != 0 {
		released = r - killAt.Load()
	}
	addCapped("recovery_released_s", released)
	addCapped("recovery_first_s", firstAt.Load())
	if capped {
		addCapped("recovery_all_s", 0)
	} else {
		addCapped("recovery_all_s", allAt.Load())
	}
	b.progress("recovery: released after %.2fs, first taken after %.2fs, all %d after %.2fs (capped: %v)",
		secs(released), secs(firstAt.Load()), k, secs(allAt.Load()), capped)
	return nil
}
