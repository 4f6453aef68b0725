package main

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/worqr"
)

// Workload h (bulk): one Client.EnqueueBatch of -bulk-n payloads into a
// fresh queue, timed from the call to its return, while a live worker on
// another queue renews a short keepalive. Redis splits nothing: the library
// cuts the batch into script calls of rdb.EnqueueStep tasks (enqueue_packed:
// plain payloads, written packed), and
// the question is both how fast the whole batch goes and how long the
// longest of those calls holds Redis.
//
// How long one call holds Redis comes from SLOWLOG with a threshold of 0:
// Redis times every top-level command it executes (microseconds, the
// command's own execution, Lua included, without reading the request or
// writing the reply) and keeps the last slowlog-max-len of them. That is
// what blocks every other client, per call, exactly. LATENCY monitoring
// would give the same events only above a threshold of at least 1 ms, with
// millisecond resolution and one maximum per second, so no p99. A PING
// prober on a connection of its own adds what a client sees: the longest
// round trip while the batch runs (Redis busy, plus both processes sharing
// the machine's cores).

const (
	bulkQueue     = "bulk"
	bulkLiveQueue = "bulk-live"
	bulkTTL       = 300 * time.Millisecond
	bulkBeat      = 100 * time.Millisecond
	// probeEvery is the pause between the prober's PINGs.
	probeEvery = time.Millisecond
	// bulkCallLimitMs is the bound on one Redis call: a few milliseconds.
	bulkCallLimitMs = 5.0
)

// bulkNote says what the h rows are.
func bulkNote(o *options) string {
	return fmt.Sprintf("h. bulk: one Client.EnqueueBatch of %d payloads of %d B into a fresh queue, timed from the call to its return "+
		"(ids made, the library's chunked script calls, every reply read); asynq has no batch enqueue, so its column is empty. "+
		"Redis time per call from SLOWLOG (threshold 0: every top-level command's execution, Lua included, in µs); "+
		"meanwhile an idle worker on another queue renews a keepalive of TTL %s every %s (losses counted from EventKeepaliveLost) "+
		"and a prober PINGs Redis every %s on a connection of its own", o.bulkN, o.payload, bulkTTL, bulkBeat, probeEvery)
}

// bulk runs workload h once.
func (b *bench) bulk(ctx context.Context, profile bool) error {
	payloads := repeat(b.payload, b.o.bulkN)
	return b.measureBulk(ctx, profile, bulkRun{
		// A batch of plain payloads larger than one step is written packed.
		key: "bulk", script: "enqueue_packed", n: b.o.bulkN, what: "h. bulk EnqueueBatch",
		op: func(ctx context.Context, client *worqr.Client, _ string) error {
			ids, err := client.EnqueueBatch(ctx, bulkQueue, payloads, nil)
			if err == nil && len(ids) != len(payloads) {
				err = fmt.Errorf("%d ids for %d payloads", len(ids), len(payloads))
			}
			return err
		},
		waiting: b.o.bulkN,
	})
}

// bulkRun is one bulk operation measured by measureBulk.
type bulkRun struct {
	key    string // prefix of the report's keys
	script string // the script whose calls are timed
	n      int    // tasks
	what   string // its label in the command counts
	op     func(ctx context.Context, client *worqr.Client, ns string) error
	// waiting is how many tasks the queue must hold afterwards (-1: not
	// checked, workers drain it).
	waiting int
	// slowlog is how many of the last commands SLOWLOG keeps (0: slowlogLen).
	// Its entries live in Redis's memory, so a run that measures memory
	// keeps few: the percentiles are then of the last calls only, and the
	// maximum of every call comes from the latency monitor.
	slowlog int
}

// measureBulk times run.op on a fresh namespace while a live worker on
// another queue renews a short keepalive, a prober PINGs Redis and samples
// its memory, and SLOWLOG times every script call.
func (b *bench) measureBulk(ctx context.Context, profile bool, run bulkRun) error {
	ns, err := b.fresh(ctx)
	if err != nil {
		return err
	}
	client, err := worqr.NewClient(b.pool, &worqr.Config{Namespace: ns, Logger: b.log})
	if err != nil {
		return err
	}
	in, err := worqr.NewInspector(b.pool, &worqr.Config{Namespace: ns, Logger: b.log})
	if err != nil {
		return err
	}

	// The live worker: idle on another queue, keepalive TTL 300 ms renewed
	// every 100 ms. It must not lose it while the batch runs.
	var lost, failed atomic.Int64
	w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{
		Config:            b.config(ns),
		Queues:            map[string]worqr.QueueConfig{bulkLiveQueue: {Concurrency: 1, Handler: noop}},
		HeartbeatTTL:      bulkTTL,
		HeartbeatInterval: bulkBeat,
		OnEvent: func(e worqr.Event) {
			switch e.Kind {
			case worqr.EventKeepaliveLost:
				lost.Add(1)
			case worqr.EventError:
				failed.Add(1)
			}
		},
	})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	workerStopped := false
	defer func() {
		if !workerStopped {
			stopWorker(w)
		}
	}()
	if !sleepCtx(ctx, 3*bulkTTL) { // a few beats before the batch
		return ctx.Err()
	}

	restore, err := startSlowlogN(ctx, b.stats, cmp.Or(run.slowlog, slowlogLen))
	if err != nil {
		return err
	}
	defer restore()
	restoreLatency, err := startLatency(ctx, b.stats)
	if err != nil {
		return err
	}
	defer restoreLatency()
	probe, err := startProber(ctx, b.url)
	if err != nil {
		return err
	}
	runtime.GC()
	s0, err := b.snap(ctx)
	if err != nil {
		probe.stop()
		return err
	}
	stopProfile := func() {}
	if profile {
		if stopProfile, err = b.startProfile(); err != nil {
			probe.stop()
			return err
		}
	}
	start := time.Now()
	err = run.op(ctx, client, ns)
	elapsed := time.Since(start)
	stopProfile()
	pings := probe.stop()
	if err != nil {
		return err
	}
	s1, err := b.snap(ctx)
	if err != nil {
		return err
	}
	mark, err := slowlogMark(ctx, b.stats)
	if err != nil {
		return err
	}
	longest, err := latencyMax(ctx, b.stats)
	if err != nil {
		return err
	}
	restoreLatency()
	// A keepalive lost at the end of the batch is reported up to a TTL
	// later: wait that long, then stop the worker before reading the slow
	// log (a SLOWLOG GET of thousands of entries holds Redis for tens of
	// milliseconds itself).
	if !sleepCtx(ctx, 2*bulkTTL) {
		return ctx.Err()
	}
	stopWorker(w)
	workerStopped = true
	all, err := slowlogEntries(ctx, b.stats, scriptNames())
	if err != nil {
		return err
	}
	restore()
	var entries []slowEntry // those of the batch
	for _, e := range all {
		if e.id <= mark {
			entries = append(entries, e)
		}
	}
	qi, err := in.Queue(ctx, bulkQueue)
	if err != nil {
		return err
	}
	waiting := int(qi.Waiting)

	var calls, others []time.Duration
	var slowest slowEntry
	for _, e := range entries {
		d := time.Duration(e.usec) * time.Microsecond
		if e.name == "fcall "+run.script || e.name == "evalsha "+run.script {
			calls = append(calls, d)
			continue
		}
		others = append(others, d)
		if e.usec > slowest.usec {
			slowest = e
		}
	}
	slices.Sort(calls)
	slices.Sort(others)
	n := float64(run.n)
	tps := n / elapsed.Seconds()
	redisCPU := (s1.redisCPU - s0.redisCPU) * 1e6 / n
	clientCPU := (s1.selfCPU - s0.selfCPU) * 1e6 / n
	d := cmdDelta(s0, s1)
	r := b.rep
	k := run.key + "_"
	r.add(k+"tasks_per_s", tps)
	r.add(k+"redis_cpu_us_per_task", redisCPU)
	r.add(k+"client_cpu_us_per_task", clientCPU)
	r.add(k+"allocs_per_task", float64(s1.mallocs-s0.mallocs)/n)
	r.add(k+"cmds_per_task", float64(totalCalls(d))/n)
	r.add(k+"keepalive_lost", float64(lost.Load()))
	grown := float64(probe.peakMemory-probe.baseMemory) / (1 << 20)
	r.add(k+"peak_mem_mb", grown)
	r.add(k+"latency_max_ms", longest)
	r.Commands[run.what] = perJob(d, run.n)
	if len(calls) > 0 {
		r.add(k+"call_max_ms", ms(calls[len(calls)-1]))
		r.add(k+"call_p99_ms", ms(percentile(calls, .99)))
		r.add(k+"call_p50_ms", ms(percentile(calls, .5)))
	}
	if len(others) > 0 {
		r.add(k+"other_max_ms", ms(others[len(others)-1]))
	}
	if len(pings) > 0 {
		r.add(k+"ping_p99_ms", ms(percentile(pings, .99)))
		r.add(k+"ping_max_ms", ms(pings[len(pings)-1]))
	}
	b.progress("%s: %d tasks in %s: %.0f tasks/s; redis CPU %.2f µs/task, client CPU %.2f µs/task; "+
		"%d %s calls, Redis time per call p50 %.2f ms, p99 %.2f ms, max %.2f ms; longest other command %.2f ms (%s); "+
		"longest command (latency monitor) %.0f ms; PING p99 %.2f ms, max %.2f ms (%d pings); Redis used memory peak %.0f MiB over its start; keepalive lost %d times, %d worker errors; %d waiting",
		run.what, run.n, elapsed.Round(time.Millisecond), tps, redisCPU, clientCPU,
		len(calls), run.script, ms(percentile(calls, .5)), ms(percentile(calls, .99)), ms(last(calls)),
		ms(last(others)), slowest.name, longest, ms(percentile(pings, .99)), ms(last(pings)), len(pings),
		grown, lost.Load(), failed.Load(), waiting)
	if len(calls) == 0 && run.slowlog == 0 {
		return fmt.Errorf("no %s script call in SLOWLOG (%d entries)", run.script, len(entries))
	}
	if run.waiting >= 0 && waiting != run.waiting {
		return fmt.Errorf("%d tasks waiting after %s of %d", waiting, run.what, run.waiting)
	}
	return nil
}

func last(xs []time.Duration) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	return xs[len(xs)-1]
}

// prober PINGs Redis on a connection of its own every probeEvery and keeps
// each round trip.
type prober struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	rtts   []time.Duration
	// baseMemory is the first used_memory seen and peakMemory the highest
	// (INFO memory every memoryEvery).
	baseMemory, peakMemory int64
}

// memoryEvery is the pause between the prober's memory samples.
const memoryEvery = 20 * time.Millisecond

func startProber(ctx context.Context, url string) (*prober, error) {
	c, err := redis.DialURLContext(ctx, url)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &prober{cancel: cancel, rtts: make([]time.Duration, 0, 1<<14)}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer c.Close()
		var sampled time.Time
		for ctx.Err() == nil {
			t := time.Now()
			if _, err := c.Do("PING"); err != nil {
				return
			}
			p.rtts = append(p.rtts, time.Since(t))
			if t.Sub(sampled) >= memoryEvery {
				sampled = t
				if info, err := redis.String(c.Do("INFO", "memory")); err == nil {
					if m, err := strconv.ParseInt(parseInfo(info)["used_memory"], 10, 64); err == nil {
						if p.baseMemory == 0 {
							p.baseMemory = m
						}
						p.peakMemory = max(p.peakMemory, m)
					}
				}
			}
			time.Sleep(probeEvery)
		}
	}()
	return p, nil
}

// stop ends the probe and returns its round trips, sorted.
func (p *prober) stop() []time.Duration {
	p.cancel()
	p.wg.Wait()
	slices.Sort(p.rtts)
	return p.rtts
}
