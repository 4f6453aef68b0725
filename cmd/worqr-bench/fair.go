package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/worqr/worqr-go/worqr"
)

// Workload j (fair): a fair queue (KeyPolicy.Fair) where one key holds a
// backlog of -fair-n tasks (EnqueueBatch before the timed part) while
// -fair-keys small keys each enqueue one task a second, drained by one
// worker of the first -concurrency and a no-op handler. Four runs per
// repetition, each on a fresh queue:
//
//   - plain: a plain queue with the same backlog and the same arrivals,
//     without keys: the throughput, commands, CPU and memory the fair
//     queue is held against (its small tasks wait behind the backlog);
//   - plain without read-ahead: the same with QueueConfig.ReadAhead -1,
//     as a fair queue's worker takes (a task taken ahead would hold its
//     key's turn): what of the difference is the read-ahead's;
//   - alone: the fair queue with the small keys' arrivals only, for
//     -fair-duration: their enqueue-to-start latency with the big key
//     absent, and their Redis commands and CPU per task (and, first, the
//     memory of one waiting task per key);
//   - big: the fair queue with the backlog and the arrivals.
//
// The timed part of plain and big runs from Worker.Start until the
// backlog's last task starts: tasks/s, Redis commands and Redis CPU per
// task over it (every task started in it, the backlog's and the small
// keys', and every command sent, the small keys' enqueues too). Latency is
// every small task's, from its enqueue call to its handler's start,
// including those still waiting when the backlog ran out. Like i, j is
// worqr's alone (asynq has no fair queues).

type fairMode int

const (
	fairPlain fairMode = iota
	fairPlainNoAhead
	fairAlone
	fairBig
)

func (m fairMode) String() string {
	return [...]string{"plain queue", "plain queue without read-ahead", "small keys alone", "big key + small keys"}[m]
}

// fairResult is what one run of workload j measured.
type fairResult struct {
	lats        []time.Duration // the small tasks' enqueue to start
	tasks       int             // tasks started in the timed part
	elapsed     time.Duration   // the timed part
	s0, s1      snapshot        // around the timed part
	memPerTask  float64         // used_memory delta per task of the untimed enqueue
	arrivalRate float64         // small tasks enqueued per second
}

func fairNote(o *options) string {
	return fmt.Sprintf("j. fair: a backlog of %s tasks of one key (EnqueueBatch, untimed) while %s other keys each enqueue one task a second, "+
		"drained by one worker of concurrency %d, against the same on a plain queue (no keys) and against the small keys alone for %s; "+
		"timed from Worker.Start to the backlog's last start; commands and CPU over that window include the small keys' enqueues",
		thousands(int64(o.fairN)), thousands(int64(o.fairKeys)), o.concurrency, o.fairDuration)
}

// fair runs workload j once.
func (b *bench) fair(ctx context.Context) error {
	var res [4]fairResult
	for _, m := range []fairMode{fairPlain, fairPlainNoAhead, fairAlone, fairBig} {
		r, err := b.fairRun(ctx, m)
		if err != nil {
			return fmt.Errorf("%s: %w", m, err)
		}
		res[m] = r
		p := latencyMs(r.lats)
		if m == fairAlone {
			b.progress("fair, %s: %.0f tasks/s offered, p50 %.3f ms, p99 %.3f ms, %.2f commands/task, redis CPU %.1f µs/task; %.0f B/waiting task (one per key)",
				m, r.arrivalRate, p[0], p[1], r.cmdsPerTask(), r.redisCPUPerTask(), r.memPerTask)
			continue
		}
		b.progress("fair, %s: %.0f tasks/s, %.2f commands/task, redis CPU %.1f µs/task, client CPU %.1f µs/task, %.0f B/waiting task; small tasks p50 %.3f ms, p99 %.3f ms",
			m, float64(r.tasks)/r.elapsed.Seconds(), r.cmdsPerTask(), r.redisCPUPerTask(), r.clientCPUPerTask(), r.memPerTask, p[0], p[1])
	}
	pl, pn, al, bg := res[fairPlain], res[fairPlainNoAhead], res[fairAlone], res[fairBig]
	pp, ap, bp := latencyMs(pl.lats), latencyMs(al.lats), latencyMs(bg.lats)
	add := b.rep.add
	add("fair_plain_p50_ms", pp[0])
	add("fair_plain_p99_ms", pp[1])
	add("fair_alone_p50_ms", ap[0])
	add("fair_alone_p99_ms", ap[1])
	add("fair_big_p50_ms", bp[0])
	add("fair_big_p99_ms", bp[1])
	add("fair_p99_ratio", bp[1]/ap[1])
	ptp, btp := float64(pl.tasks)/pl.elapsed.Seconds(), float64(bg.tasks)/bg.elapsed.Seconds()
	add("fair_plain_tasks_per_s", ptp)
	add("fair_big_tasks_per_s", btp)
	add("fair_tput_ratio", btp/ptp)
	ntp := float64(pn.tasks) / pn.elapsed.Seconds()
	add("fair_plain_noahead_tasks_per_s", ntp)
	add("fair_noahead_tput_ratio", btp/ntp)
	add("fair_alone_cmds_per_task", al.cmdsPerTask())
	add("fair_alone_redis_cpu_us_per_task", al.redisCPUPerTask())
	add("fair_plain_cmds_per_task", pl.cmdsPerTask())
	add("fair_big_cmds_per_task", bg.cmdsPerTask())
	add("fair_extra_cmds_per_task", bg.cmdsPerTask()-pl.cmdsPerTask())
	add("fair_plain_redis_cpu_us_per_task", pl.redisCPUPerTask())
	add("fair_big_redis_cpu_us_per_task", bg.redisCPUPerTask())
	add("fair_plain_client_cpu_us_per_task", pl.clientCPUPerTask())
	add("fair_big_client_cpu_us_per_task", bg.clientCPUPerTask())
	add("fair_plain_mem_bytes_per_task", pl.memPerTask)
	add("fair_big_mem_bytes_per_task", bg.memPerTask)
	add("fair_keys_mem_bytes_per_task", al.memPerTask)
	b.rep.Commands["j. fair: plain queue (take + end + the arrivals' enqueues)"] = perJob(cmdDelta(pl.s0, pl.s1), pl.tasks)
	b.rep.Commands["j. fair: big key + small keys (take + end + the arrivals' enqueues)"] = perJob(cmdDelta(bg.s0, bg.s1), bg.tasks)
	b.rep.Commands["j. fair: small keys alone (enqueue + take + end)"] = perJob(cmdDelta(al.s0, al.s1), al.tasks)
	return nil
}

func (r fairResult) cmdsPerTask() float64 {
	return float64(totalCalls(cmdDelta(r.s0, r.s1))) / float64(r.tasks)
}

func (r fairResult) redisCPUPerTask() float64 {
	return (r.s1.redisCPU - r.s0.redisCPU) * 1e6 / float64(r.tasks)
}

// clientCPUPerTask is this process's: the worker's and the arrivals'.
func (r fairResult) clientCPUPerTask() float64 {
	return (r.s1.selfCPU - r.s0.selfCPU) * 1e6 / float64(r.tasks)
}

// latencyMs returns the p50 and p99 of lats in ms (sorting lats).
func latencyMs(lats []time.Duration) [2]float64 {
	if len(lats) == 0 {
		return [2]float64{}
	}
	slices.Sort(lats)
	return [2]float64{ms(percentile(lats, .5)), ms(percentile(lats, .99))}
}

// fairRun runs one of workload j's runs on a fresh queue.
func (b *bench) fairRun(ctx context.Context, mode fairMode) (fairResult, error) {
	o := b.o
	var res fairResult
	ns, err := b.fresh(ctx)
	if err != nil {
		return res, err
	}
	client, err := worqr.NewClient(b.pool, &worqr.Config{Namespace: ns, Logger: b.log})
	if err != nil {
		return res, err
	}
	var pol worqr.KeyPolicy
	if mode == fairAlone || mode == fairBig {
		pol.Fair = true
		if err := client.SetKeyPolicy(ctx, benchQueue, pol); err != nil {
			return res, err
		}
	}
	// The untimed tasks, stamped 0: the backlog (plain, big), or one task
	// per small key (alone), which the worker runs before the arrivals
	// start.
	untimed := o.fairN
	if mode == fairAlone {
		untimed = o.fairKeys
	}
	zero := make([]byte, o.payload)
	m0, err := b.settled(ctx)
	if err != nil {
		return res, err
	}
	switch mode {
	case fairAlone:
		for k := range o.fairKeys {
			if _, err := client.Enqueue(ctx, benchQueue, zero, &worqr.EnqueueOpts{Key: smallKey(k)}); err != nil {
				return res, err
			}
		}
	default:
		var opts *worqr.EnqueueOpts
		if mode == fairBig {
			opts = &worqr.EnqueueOpts{Key: "big"}
		}
		for i := 0; i < o.fairN; i += batchSize {
			if _, err := client.EnqueueBatch(ctx, benchQueue, repeat(zero, min(batchSize, o.fairN-i)), opts); err != nil {
				return res, err
			}
		}
	}
	m1, err := b.snap(ctx)
	if err != nil {
		return res, err
	}
	// Without the clients' buffers, which Redis shrinks as they idle: over
	// the 1,000 tasks of the small keys they would outweigh the tasks.
	res.memPerTask = float64(m1.usedMemory-m1.clientMem-(m0.usedMemory-m0.clientMem)) / float64(untimed)

	var (
		started, untimedDone, smallDone atomic.Int64
		mu                              sync.Mutex
		lats                            = make([]time.Duration, 0, 1024)
		endAt                           time.Time
		inWindow                        int
		windowEnd                       = make(chan struct{})
		closeWindow                     sync.Once
	)
	readAhead := 0 // the default: Concurrency, where the queue reads ahead
	if mode == fairPlainNoAhead {
		readAhead = -1
	}
	w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{
		Config: b.config(ns),
		Queues: map[string]worqr.QueueConfig{benchQueue: {
			Concurrency: o.concurrency,
			Keys:        pol,
			ReadAhead:   readAhead,
			Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
				now := time.Now()
				n := started.Add(1)
				ts := int64(binary.LittleEndian.Uint64(t.Payload))
				if ts == 0 {
					if untimedDone.Add(1) == int64(untimed) {
						closeWindow.Do(func() {
							endAt, inWindow = now, int(n)
							close(windowEnd)
						})
					}
					return nil
				}
				mu.Lock()
				lats = append(lats, now.Sub(time.Unix(0, ts)))
				mu.Unlock()
				smallDone.Add(1)
				return nil
			}),
		}},
	})
	if err != nil {
		return res, err
	}
	runtime.GC() // the enqueue's garbage is not the run's cost
	if res.s0, err = b.snap(ctx); err != nil {
		return res, err
	}
	start := time.Now()
	if err := w.Start(ctx); err != nil {
		return res, err
	}
	defer stopWorker(w)
	enqueue := func(i int, p []byte) error {
		var opts *worqr.EnqueueOpts
		if pol.Fair {
			opts = &worqr.EnqueueOpts{Key: smallKey(i % o.fairKeys)}
		}
		_, err := client.Enqueue(ctx, benchQueue, p, opts)
		return err
	}
	progress := func() string {
		return fmt.Sprintf("%d of %d untimed tasks started, %d small ones", untimedDone.Load(), untimed, smallDone.Load())
	}
	var sent int
	if mode == fairAlone {
		if err := waitFor(ctx, windowEnd, drainLimit(untimed), progress); err != nil {
			return res, err
		}
		// The costs of the small keys alone: from here to their last start.
		if res.s0, err = b.snap(ctx); err != nil {
			return res, err
		}
		stop := make(chan struct{})
		t := time.AfterFunc(o.fairDuration, func() { close(stop) })
		defer t.Stop()
		t0 := time.Now()
		if sent, err = arrivals(ctx, o.fairKeys, stop, b.payload, enqueue); err != nil {
			return res, err
		}
		res.arrivalRate = float64(sent) / time.Since(t0).Seconds()
	} else {
		type result struct {
			n   int
			err error
		}
		done := make(chan result, 1)
		t0 := time.Now()
		go func() {
			n, err := arrivals(ctx, o.fairKeys, windowEnd, b.payload, enqueue)
			done <- result{n, err}
		}()
		err := waitFor(ctx, windowEnd, drainLimit(o.fairN), progress)
		if err == nil {
			res.s1, err = b.snap(ctx)
		}
		if err != nil {
			closeWindow.Do(func() { close(windowEnd) }) // stops the arrivals
			<-done
			return res, err
		}
		r := <-done
		if r.err != nil {
			return res, r.err
		}
		sent = r.n
		res.tasks, res.elapsed = inWindow, endAt.Sub(start)
		res.arrivalRate = float64(sent) / time.Since(t0).Seconds()
	}
	// Every small task's latency counts, those the backlog's end left
	// waiting too.
	if err := pollUntil(ctx, func() bool { return smallDone.Load() >= int64(sent) }, time.Minute, progress); err != nil {
		return res, err
	}
	if mode == fairAlone {
		if res.s1, err = b.snap(ctx); err != nil {
			return res, err
		}
		res.tasks = sent
	}
	mu.Lock()
	res.lats = append([]time.Duration(nil), lats...)
	mu.Unlock()
	if len(res.lats) != sent {
		return res, fmt.Errorf("%d small tasks started, %d enqueued", len(res.lats), sent)
	}
	return res, nil
}

// settled returns a snapshot once Redis's memory less its clients' has
// stopped moving: after a run, Redis frees some of what it held (beyond its
// keys) over its next second or two of cron, which would otherwise count
// against the next run's tasks. It waits at most 5 s.
func (b *bench) settled(ctx context.Context) (snapshot, error) {
	prev, err := b.snap(ctx)
	if err != nil {
		return prev, err
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if !sleepCtx(ctx, 500*time.Millisecond) {
			return prev, ctx.Err()
		}
		s, err := b.snap(ctx)
		if err != nil {
			return s, err
		}
		if d := s.usedMemory - s.clientMem - (prev.usedMemory - prev.clientMem); d > -1024 && d < 1024 {
			return s, nil
		}
		prev = s
	}
	return prev, nil
}

// pollUntil checks cond every millisecond until it holds, for at most limit.
func pollUntil(ctx context.Context, cond func() bool, limit time.Duration, progress func() string) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %s: %s", limit, progress())
		}
		if !sleepCtx(ctx, time.Millisecond) {
			return ctx.Err()
		}
	}
	return nil
}

func smallKey(k int) string { return "k-" + strconv.Itoa(k) }

// arrivals enqueues rate tasks a second until stop is closed: task i by
// goroutine i mod producers at start + i/rate (so task i goes to small key
// i mod rate, one a second each), each a copy of payload stamped with its
// call's start (unix nanos, first 8 bytes). It returns how many it
// enqueued.
func arrivals(ctx context.Context, rate int, stop <-chan struct{}, payload []byte, enqueue func(int, []byte) error) (int, error) {
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	var sent atomic.Int64
	errs := make(chan error, producers)
	var wg sync.WaitGroup
	for g := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTimer(0)
			defer t.Stop()
			for i := g; ; i += producers {
				if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
					t.Reset(d)
					select {
					case <-t.C:
					case <-stop:
						return
					case <-ctx.Done():
						errs <- ctx.Err()
						return
					}
				}
				select {
				case <-stop:
					return
				default:
				}
				p := make([]byte, len(payload))
				copy(p, payload)
				binary.LittleEndian.PutUint64(p, uint64(time.Now().UnixNano()))
				if err := enqueue(i, p); err != nil {
					errs <- err
					return
				}
				sent.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return int(sent.Load()), nil
}

// fairRows are the lines of workload j.
func fairRows(o *options, jobs, msf, f2, f1, bytes func(float64) string) []row {
	ratio := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) + "x" }
	k := thousands(int64(o.fairKeys))
	return []row{
		{key: "fair_alone_p50_ms", label: "j. fair: " + k + " small keys alone, enqueue -> start p50 (ms)", format: msf},
		{key: "fair_alone_p99_ms", label: "j. fair: " + k + " small keys alone, enqueue -> start p99 (ms)", format: msf},
		{key: "fair_big_p50_ms", label: "j. fair: small keys beside the big key's backlog, p50 (ms)", format: msf},
		{key: "fair_big_p99_ms", label: "j. fair: small keys beside the big key's backlog, p99 (ms)", format: msf},
		{key: "fair_p99_ratio", label: "j. fair: small keys' p99 with / without the big key", format: ratio},
		{key: "fair_plain_p50_ms", label: "j. plain queue: the same small tasks behind the backlog, p50 (ms)", format: msf},
		{key: "fair_plain_p99_ms", label: "j. plain queue: the same small tasks behind the backlog, p99 (ms)", format: msf},
		{key: "fair_big_tasks_per_s", label: "j. fair queue, backlog + small keys (tasks/s)", higher: true, format: jobs},
		{key: "fair_plain_tasks_per_s", label: "j. plain queue, same tasks (tasks/s)", higher: true, format: jobs},
		{key: "fair_tput_ratio", label: "j. throughput, fair / plain", higher: true, format: ratio},
		{key: "fair_plain_noahead_tasks_per_s", label: "j. plain queue without read-ahead (ReadAhead -1) (tasks/s)", higher: true, format: jobs},
		{key: "fair_noahead_tput_ratio", label: "j. throughput, fair / plain without read-ahead", higher: true, format: ratio},
		{key: "fair_big_cmds_per_task", label: "j. fair: Redis commands per task", format: f2},
		{key: "fair_plain_cmds_per_task", label: "j. plain: Redis commands per task", format: f2},
		{key: "fair_extra_cmds_per_task", label: "j. fair: extra Redis commands per task", format: f2},
		{key: "fair_big_redis_cpu_us_per_task", label: "j. fair: Redis CPU per task (µs)", format: f1},
		{key: "fair_plain_redis_cpu_us_per_task", label: "j. plain: Redis CPU per task (µs)", format: f1},
		{key: "fair_big_client_cpu_us_per_task", label: "j. fair: client CPU per task, worker + arrivals (µs)", format: f1},
		{key: "fair_plain_client_cpu_us_per_task", label: "j. plain: client CPU per task, worker + arrivals (µs)", format: f1},
		{key: "fair_alone_cmds_per_task", label: "j. fair, small keys alone: Redis commands per task (enqueue + take + end)", format: f2},
		{key: "fair_alone_redis_cpu_us_per_task", label: "j. fair, small keys alone: Redis CPU per task (µs)", format: f1},
		{key: "fair_big_mem_bytes_per_task", label: "j. fair: Redis memory per waiting task, one key's backlog (bytes)", format: bytes},
		{key: "fair_keys_mem_bytes_per_task", label: "j. fair: Redis memory per waiting task, one per key (bytes)", format: bytes},
		{key: "fair_plain_mem_bytes_per_task", label: "j. plain: Redis memory per waiting task (bytes)", format: bytes},
	}
}
