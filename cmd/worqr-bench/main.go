// Command worqr-bench measures worqr, and asynq for comparison, on one Redis:
// enqueue throughput, drain throughput, enqueue-to-handler latency, Redis
// commands, Redis and client CPU and Redis memory per job, and the time from
// a worker's SIGKILL to its jobs being taken again by a peer.
//
// By default it starts a private redis-server (persistence off, free
// loopback port); -redis-url or WORQR_REDIS_URL points it at another one,
// whose database it flushes between workloads (only with -flush). Unless
// -skip-asynq, it then runs the asynq side (bench/asynq, a module of its own)
// with `go run` against the same server, and prints one table of medians.
//
// With -rtt, both systems reach Redis through a delay proxy (a child process
// of the bench) that delays every chunk of bytes each way by about rtt/2,
// calibrated so that a PING through it takes rtt more than one straight to
// Redis; the bench's own INFO and FLUSHDB go to Redis directly.
//
//	go run ./cmd/worqr-bench                    # everything, about 4-5 minutes
//	go run ./cmd/worqr-bench -only a,b -reps 5  # enqueue and drain only
//	go run ./cmd/worqr-bench -rtt 600us -only b,c -concurrency 10,50 -n 20000  # make bench-net
//	go run ./cmd/worqr-bench -skip-asynq -only c -concurrency 10 -profile c -cpuprofile lowrate.pprof
//	go run ./cmd/worqr-bench -skip-asynq -only drain -cpuprofile drain.pprof
//	go run ./cmd/worqr-bench -skip-asynq -only a -profile a -cpuprofile enqueue.pprof
//	go run ./cmd/worqr-bench -skip-asynq -only h                  # EnqueueBatch of 1,000,000 (not in the default set)
//	go run ./cmd/worqr-bench -skip-asynq -only h -reps 1 -profile h -cpuprofile bulk.pprof
//	go run ./cmd/worqr-bench -skip-asynq -only i                  # ordered queues: 1,000 and 10 keys vs a plain queue
//	go run ./cmd/worqr-bench -skip-asynq -only j -fair-n 1000000  # fair queue: a million-task key beside 1,000 small keys
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
)

type options struct {
	n             int
	bulkN         int
	loadN         int
	loadDrainN    int
	loadMaxWait   int
	fairN         int
	fairKeys      int
	fairDuration  time.Duration
	concurrency   int   // the first of concurrencies: latency, warm-up
	concurrencies []int // drain runs once at each
	rtt           time.Duration
	payload       int
	rate          int
	duration      time.Duration
	procs         int
	reps          int
	only          string
	redisURL      string
	flush         bool
	skipAsynq     bool
	asynqDir      string
	asynqFastPoll time.Duration
	asynqRecReps  int
	recoveryJobs  int
	recoveryCap   time.Duration
	cpuprofile    string
	memprofile    string
	profile       string
	jsonOut       string
	verbose       bool
	scriptCosts   bool

	run workloads
}

// workloads says which measurements run, each named by a letter (-only).
type workloads struct {
	enqueue, drain, latency, commands, cpu, memory, recovery bool
	// bulk (h) runs only when named: a million tasks take tens of seconds
	// per repetition with the flushes and about 1 GB of Redis and client
	// memory. asynq has no batch enqueue, so it is worqr's alone.
	bulk bool
	// load (l) runs only when named too: ten million lines by default.
	load bool
	// ordered (i) runs only when named, worqr's alone too.
	ordered bool
	// fair (j) is in the default set, worqr's alone too.
	fair bool
}

func (w workloads) needEnqueue() bool { return w.enqueue || w.commands }
func (w workloads) needDrain() bool   { return w.drain || w.commands || w.cpu || w.memory }

// letters is the -only list of the selected workloads, without recovery
// unless withRecovery.
func (w workloads) letters(withRecovery bool) string {
	var out []string
	for _, l := range []struct {
		on     bool
		letter string
	}{{w.enqueue, "a"}, {w.drain, "b"}, {w.latency, "c"}, {w.commands, "d"}, {w.cpu, "e"}, {w.memory, "f"}, {w.recovery && withRecovery, "g"}} {
		if l.on {
			out = append(out, l.letter)
		}
	}
	return strings.Join(out, ",")
}

func parseOnly(s string) (workloads, error) {
	if s == "" {
		return workloads{enqueue: true, drain: true, latency: true, commands: true, cpu: true, memory: true, recovery: true, fair: true}, nil
	}
	var w workloads
	for _, part := range strings.Split(s, ",") {
		switch strings.TrimSpace(strings.ToLower(part)) {
		case "a", "enqueue":
			w.enqueue = true
		case "b", "drain":
			w.drain = true
		case "c", "latency":
			w.latency = true
		case "d", "commands":
			w.commands = true
		case "e", "cpu":
			w.cpu = true
		case "f", "memory":
			w.memory = true
		case "g", "recovery":
			w.recovery = true
		case "h", "bulk":
			w.bulk = true
		case "l", "load":
			w.load = true
		case "i", "ordered":
			w.ordered = true
		case "j", "fair":
			w.fair = true
		case "":
		default:
			return w, fmt.Errorf("-only: unknown workload %q (want a-j, l or enqueue, drain, latency, commands, cpu, memory, recovery, bulk, ordered, fair, load)", part)
		}
	}
	return w, nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == childMode {
		os.Exit(runChild(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == proxyMode {
		os.Exit(runProxy(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == scaleMode {
		os.Exit(runScale(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == scaleChildMode {
		os.Exit(runScaleChild(os.Args[2:]))
	}
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "worqr-bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "worqr-bench:", err)
		stop()
		os.Exit(1)
	}
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("worqr-bench", flag.ContinueOnError)
	fs.IntVar(&o.n, "n", 50000, "jobs per enqueue and drain run")
	concurrency := fs.String("concurrency", "50", "handler goroutines per worker process; a comma list (10,50) runs the drain at each, the latency run at the first")
	fs.DurationVar(&o.rtt, "rtt", 0, "emulated network round trip: both systems reach Redis through a proxy that delays each direction by rtt/2 (0: direct)")
	fs.IntVar(&o.payload, "payload", 100, "payload size in bytes")
	fs.IntVar(&o.bulkN, "bulk-n", 1_000_000, "bulk (h): payloads in the one EnqueueBatch call")
	fs.IntVar(&o.loadN, "load-n", 10_000_000, "load (l): lines in the load.Run with no worker")
	fs.IntVar(&o.loadDrainN, "load-drain-n", 1_000_000, "load (l): lines in the load.Run with -load-max-waiting while a worker drains the queue")
	fs.IntVar(&o.loadMaxWait, "load-max-waiting", 100_000, "load (l): load.Options.MaxWaiting of the second load")
	fs.IntVar(&o.fairN, "fair-n", 100_000, "fair (j): tasks of the big key's backlog (1000000: the issue's full size)")
	fs.IntVar(&o.fairKeys, "fair-keys", 1000, "fair (j): small keys, each enqueueing one task a second")
	fs.DurationVar(&o.fairDuration, "fair-duration", 5*time.Second, "fair (j): how long the small keys enqueue with the big key absent")
	fs.IntVar(&o.rate, "rate", 1000, "latency run: jobs enqueued per second")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "latency run: how long to enqueue at -rate")
	fs.IntVar(&o.procs, "procs", 1, "drain: worker processes (1: one in-process worker; more: child processes, -concurrency each)")
	fs.IntVar(&o.reps, "reps", 3, "repetitions of each workload; the table shows medians")
	fs.StringVar(&o.only, "only", "", "comma list of workloads to run: a|enqueue b|drain c|latency d|commands e|cpu f|memory g|recovery h|bulk i|ordered j|fair l|load (default a-g and j: h, i and l only when named)")
	fs.StringVar(&o.redisURL, "redis-url", os.Getenv("WORQR_REDIS_URL"), "Redis to use instead of a private redis-server (default $WORQR_REDIS_URL); its database is flushed between workloads")
	fs.BoolVar(&o.flush, "flush", false, "allow flushing the database of a -redis-url that holds keys")
	fs.BoolVar(&o.skipAsynq, "skip-asynq", false, "measure worqr only")
	fs.StringVar(&o.asynqDir, "asynq-dir", "", "directory of the asynq bench module (default: bench/asynq above the working directory)")
	fs.DurationVar(&o.asynqFastPoll, "asynq-fast-poll", time.Millisecond, "asynq TaskCheckInterval of the extra latency run (0: skip it)")
	fs.IntVar(&o.asynqRecReps, "asynq-recovery-reps", 1, "repetitions of asynq's recovery run (each takes one to two minutes)")
	fs.IntVar(&o.recoveryJobs, "recovery-jobs", 10, "recovery: jobs held by the worker that is killed")
	fs.DurationVar(&o.recoveryCap, "recovery-cap", 120*time.Second, "recovery: longest wait for the jobs to be taken again")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the first worqr run of -profile's workload to this file")
	fs.StringVar(&o.memprofile, "memprofile", "", "with -cpuprofile: also write allocation profiles at the start (FILE.base) and the end (FILE) of the profiled window")
	fs.StringVar(&o.profile, "profile", "b", "workload -cpuprofile covers: a (enqueue), b (drain, first concurrency), c (latency at -rate) or h (the EnqueueBatch call of bulk)")
	fs.StringVar(&o.jsonOut, "json", "", "also write both reports as JSON to this file")
	fs.BoolVar(&o.verbose, "v", false, "print every repetition's samples")
	fs.BoolVar(&o.scriptCosts, "script-costs", false, "after the repetitions, one more worqr latency run (c) with every command in Redis's SLOWLOG: Redis time per call of each script (not in the table)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if o.run, err = parseOnly(o.only); err != nil {
		return nil, err
	}
	if o.concurrencies, err = parseInts(*concurrency); err != nil {
		return nil, fmt.Errorf("-concurrency: %w", err)
	}
	o.concurrency = o.concurrencies[0]
	switch {
	case o.n < 1:
		return nil, fmt.Errorf("-n (%d) must be at least 1", o.n)
	case o.bulkN < 2:
		return nil, fmt.Errorf("-bulk-n (%d) must be at least 2", o.bulkN)
	case o.loadN < 1 || o.loadDrainN < 1:
		return nil, fmt.Errorf("-load-n (%d) and -load-drain-n (%d) must be at least 1", o.loadN, o.loadDrainN)
	case o.fairN < 1 || o.fairKeys < 1:
		return nil, fmt.Errorf("-fair-n (%d) and -fair-keys (%d) must be at least 1", o.fairN, o.fairKeys)
	case o.fairDuration < time.Second:
		return nil, fmt.Errorf("-fair-duration (%s) must be at least 1s", o.fairDuration)
	case o.loadMaxWait < 1:
		return nil, fmt.Errorf("-load-max-waiting (%d) must be at least 1", o.loadMaxWait)
	case slices.Min(o.concurrencies) < 1:
		return nil, fmt.Errorf("-concurrency (%s) must be at least 1", *concurrency)
	case o.rtt < 0:
		return nil, fmt.Errorf("-rtt (%s) must not be negative", o.rtt)
	case o.payload < 8:
		return nil, fmt.Errorf("-payload (%d) must be at least 8 (the latency run stores a timestamp in it)", o.payload)
	case o.rate < 1:
		return nil, fmt.Errorf("-rate (%d) must be at least 1", o.rate)
	case o.duration < time.Second:
		return nil, fmt.Errorf("-duration (%s) must be at least 1s", o.duration)
	case o.procs < 1:
		return nil, fmt.Errorf("-procs (%d) must be at least 1", o.procs)
	case o.reps < 1:
		return nil, fmt.Errorf("-reps (%d) must be at least 1", o.reps)
	case o.recoveryJobs < 1:
		return nil, fmt.Errorf("-recovery-jobs (%d) must be at least 1", o.recoveryJobs)
	case o.recoveryCap < time.Second:
		return nil, fmt.Errorf("-recovery-cap (%s) must be at least 1s", o.recoveryCap)
	case o.asynqRecReps < 1:
		return nil, fmt.Errorf("-asynq-recovery-reps (%d) must be at least 1", o.asynqRecReps)
	case o.profile != "a" && o.profile != "b" && o.profile != "c" && o.profile != "h":
		return nil, fmt.Errorf("-profile (%q) must be a (enqueue), b (drain), c (latency) or h (bulk)", o.profile)
	case o.asynqFastPoll < 0:
		return nil, fmt.Errorf("-asynq-fast-poll (%s) must not be negative", o.asynqFastPoll)
	}
	return o, nil
}

// parseInts parses a comma list of integers, in order, without repeats.
func parseInts(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		v, err := strconv.Atoi(part)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

func run(ctx context.Context, o *options) error {
	url := o.redisURL
	if url == "" {
		srv, err := redistest.Start()
		if err != nil {
			return err
		}
		defer srv.Stop()
		url = srv.URL
		o.flush = true // our own server
	}
	stats, err := redis.DialURLContext(ctx, url)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", url, err)
	}
	defer stats.Close()
	if !o.flush {
		n, err := redis.Int(redis.DoContext(stats, ctx, "DBSIZE"))
		if err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("%s holds %d keys and the bench flushes its database between workloads: pass -flush to allow it, or use an empty database", url, n)
		}
	}
	server, err := redis.String(redis.DoContext(stats, ctx, "INFO", "server"))
	if err != nil {
		return err
	}
	info := parseInfo(server)
	fmt.Fprintf(os.Stderr, "worqr-bench: redis %s at %s; %d CPUs, GOMAXPROCS %d, %s; n=%d payload=%dB concurrency=%s procs=%d reps=%d\n",
		info["redis_version"], url, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(),
		o.n, o.payload, joinInts(o.concurrencies), o.procs, o.reps)

	// Both systems reach Redis through clientURL; the bench's own INFO and
	// FLUSHDB (stats) go to url directly.
	clientURL := url
	var netNote string
	if o.rtt > 0 {
		px, err := startProxy(url, o.rtt/2)
		if err != nil {
			return err
		}
		defer px.stop()
		clientURL = px.url
		direct, via, err := px.calibrate(ctx, url, o.rtt)
		if err != nil {
			return err
		}
		netNote = fmt.Sprintf("emulated network: -rtt %s through a delay proxy (its own process), each direction delayed %s (calibrated: rtt/2 less the proxy's own overhead); PING round trip, median of 300: %s direct, %s through the proxy",
			o.rtt, px.delay.Round(time.Microsecond), direct.Round(time.Microsecond), via.Round(time.Microsecond))
		fmt.Fprintf(os.Stderr, "worqr-bench: %s\n", netNote)
	}

	load0 := loadAvg()
	if load0 > 0.25*float64(runtime.NumCPU()) {
		fmt.Fprintf(os.Stderr, "worqr-bench: warning: load average %.2f on %d CPUs: other work on this machine will skew the numbers\n", load0, runtime.NumCPU())
	}
	b, err := newBench(ctx, o, clientURL, stats)
	if err != nil {
		return err
	}
	defer b.close()
	asynqDir := ""
	if !o.skipAsynq {
		if asynqDir, err = findAsynqDir(o.asynqDir); err != nil {
			return err
		}
	}
	// The systems take turns, one repetition each, so that both see the
	// same conditions on a machine whose load changes.
	var aq *Report
	for rep := 0; rep < o.reps; rep++ {
		if err := b.runRep(ctx, rep); err != nil {
			return fmt.Errorf("worqr: %w", err)
		}
		if _, err := redis.DoContext(stats, ctx, "FLUSHDB"); err != nil {
			return err
		}
		if o.skipAsynq {
			continue
		}
		r, err := runAsynq(ctx, o, clientURL, url, asynqDir, rep)
		if err != nil {
			return fmt.Errorf("asynq: %w", err)
		}
		aq = aq.merge(r)
	}
	wq := b.report()
	var costs []scriptCost
	if o.scriptCosts && o.run.latency {
		if costs, err = b.scriptCosts(ctx); err != nil {
			return fmt.Errorf("worqr script costs: %w", err)
		}
	}

	load1 := loadAvg()
	wq.Notes = append(wq.Notes, fmt.Sprintf("1-minute load average before the run %.2f, after %.2f (%d CPUs)", load0, load1, runtime.NumCPU()))
	if netNote != "" {
		wq.Notes = append(wq.Notes, netNote)
	}
	if o.run.bulk {
		wq.Notes = append(wq.Notes, bulkNote(o))
	}
	if o.run.load {
		wq.Notes = append(wq.Notes, loadNote(o))
	}
	if o.run.ordered {
		wq.Notes = append(wq.Notes, orderedNote(o))
	}
	if o.run.fair {
		wq.Notes = append(wq.Notes, fairNote(o))
	}
	out := os.Stdout
	network := "loopback"
	if o.rtt > 0 {
		network = fmt.Sprintf("emulated RTT %s", o.rtt)
	}
	fmt.Fprintf(out, "\nredis %s, %d CPUs, %s, %s, n=%d, payload %d B, concurrency %s, worker processes %d, reps %d (medians), latency %d jobs/s for %s at concurrency %d\n\n",
		info["redis_version"], runtime.NumCPU(), runtime.Version(), network, o.n, o.payload, joinInts(o.concurrencies), o.procs, o.reps, o.rate, o.duration, o.concurrency)
	printTable(out, o, wq, aq)
	printTargets(out, o, wq, aq)
	for _, rep := range []*Report{wq, aq} {
		if rep == nil {
			continue
		}
		for _, n := range rep.Notes {
			fmt.Fprintf(out, "\nnote (%s): %s", rep.System, n)
		}
	}
	fmt.Fprintln(out)
	printCommands(out, wq)
	printCommands(out, aq)
	if costs != nil {
		printScriptCosts(out, "worqr, c. low rate (extra run, not in the table)", costs, int(float64(o.rate)*o.duration.Seconds()))
	}
	if o.verbose {
		printSamples(out, wq)
		printSamples(out, aq)
	}
	if o.jsonOut != "" {
		data, err := json.MarshalIndent(map[string]*Report{"worqr": wq, "asynq": aq}, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.jsonOut, append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// printTargets says which targets the medians meet: on loopback, saturated,
// and over a network, at a low rate; those that can be stated against
// asynq or alone.
func printTargets(w io.Writer, o *options, wq, aq *Report) {
	type target struct {
		what string
		ok   func() (string, bool, bool) // value, met, known
	}
	ratio := func(key string, min float64) func() (string, bool, bool) {
		return func() (string, bool, bool) {
			wv, wok := wq.median(key)
			av, aok := aq.median(key)
			if !wok || !aok || av == 0 {
				return "", false, false
			}
			return fmt.Sprintf("%.2fx", wv/av), wv/av >= min, true
		}
	}
	atMost := func(key string, limit float64, unit string) func() (string, bool, bool) {
		return func() (string, bool, bool) {
			v, ok := wq.median(key)
			if !ok {
				return "", false, false
			}
			if wq.Capped[key] { // the wait ran out: the value is a lower bound
				return ">" + strconv.FormatFloat(v, 'g', 3, 64) + unit, false, true
			}
			return strconv.FormatFloat(v, 'g', 3, 64) + unit, v <= limit, true
		}
	}
	atLeast := func(key string, limit float64, unit string) func() (string, bool, bool) {
		return func() (string, bool, bool) {
			v, ok := wq.median(key)
			if !ok {
				return "", false, false
			}
			return thousands(int64(math.Round(v))) + unit, v >= limit, true
		}
	}
	atLeastX := func(key string, limit float64) func() (string, bool, bool) {
		return func() (string, bool, bool) {
			v, ok := wq.median(key)
			if !ok {
				return "", false, false
			}
			return fmt.Sprintf("%.2fx", v), v >= limit, true
		}
	}
	// worst holds the largest sample of key, over every repetition, to limit.
	worst := func(key string, limit float64, unit string) func() (string, bool, bool) {
		return func() (string, bool, bool) {
			xs := wq.Metrics[key]
			if len(xs) == 0 {
				return "", false, false
			}
			v := slices.Max(xs)
			return strconv.FormatFloat(v, 'g', 3, 64) + unit, v <= limit, true
		}
	}
	// sumRatio compares worqr's sum of keys with asynq's (at most max).
	sumRatio := func(max float64, keys ...string) func() (string, bool, bool) {
		return func() (string, bool, bool) {
			var ws, as float64
			for _, k := range keys {
				wv, wok := wq.median(k)
				av, aok := aq.median(k)
				if !wok || !aok {
					return "", false, false
				}
				ws, as = ws+wv, as+av
			}
			if as == 0 {
				return "", false, false
			}
			return fmt.Sprintf("%.3g µs = %.2fx asynq", ws, ws/as), ws/as <= max, true
		}
	}
	ts := []target{
		{"enqueue >= 1.5x asynq", ratio("enqueue_jobs_per_s", 1.5)},
	}
	for _, c := range o.concurrencies {
		ts = append(ts, target{fmt.Sprintf("drain at C=%d >= 2x asynq", c), ratio(o.drainKey("drain_jobs_per_s", c), 2)})
	}
	if o.rtt == 0 && slices.Contains(o.concurrencies, 50) {
		ts = append(ts, target{"loopback drain at C=50 >= 5x asynq", ratio(o.drainKey("drain_jobs_per_s", 50), 5)})
	}
	// Targets against BullMQ, which this bench does not run: as multiples
	// of asynq in this run, by BullMQ's ratio to asynq in side-by-side
	// runs (same harness, same Redis, both in one run).
	for _, b := range bullmqTargets {
		if o.rtt != b.rtt || !slices.Contains(o.concurrencies, b.c) {
			continue
		}
		min := b.times * b.bullmq / b.asynq
		ts = append(ts, target{fmt.Sprintf("drain at C=%d >= %gx BullMQ (%.2fx asynq)", b.c, b.times, min),
			ratio(o.drainKey("drain_jobs_per_s", b.c), min)})
	}
	if o.rtt == 0 {
		ts = append(ts,
			target{"latency p50 <= 0.5 ms (loopback)", atMost("latency_p50_ms", 0.5, " ms")},
			target{"latency p99 <= 2 ms (loopback)", atMost("latency_p99_ms", 2, " ms")})
	}
	ts = append(ts,
		target{"<= 10 Redis commands per job", atMost("cmds_per_job", 10, "")},
		target{"<= 400 B per waiting job", atMost("mem_bytes_per_job", 400, " B")},
		target{"dead worker's jobs offered again <= 4 s", atMost("recovery_released_s", 4, " s")},
		target{"low rate: <= 8 Redis commands per job", atMost("lowrate_cmds_per_job", 8, "")},
		target{"low rate: Redis + client CPU <= 0.5x asynq", sumRatio(0.5, "lowrate_redis_cpu_us_per_job", "lowrate_client_cpu_us_per_job")},
		target{"bulk >= 300,000 tasks/s", atLeast("bulk_tasks_per_s", 300_000, " tasks/s")},
		target{fmt.Sprintf("bulk: longest enqueue call <= %g ms (all reps)", bulkCallLimitMs), worst("bulk_call_max_ms", bulkCallLimitMs, " ms")},
		target{"bulk: live worker keeps its keepalive (all reps)", worst("bulk_keepalive_lost", 0, " losses")},
		target{"load >= 300,000 tasks/s", atLeast("load_tasks_per_s", 300_000, " tasks/s")},
		target{fmt.Sprintf("load: longest command <= %g ms (all reps)", bulkCallLimitMs), worst("load_latency_max_ms", bulkCallLimitMs, " ms")},
		target{"load: live worker keeps its keepalive (all reps)", worst("load_keepalive_lost", 0, " losses")},
		target{"fair: small keys' p99 <= 2x with the big key absent", atMost("fair_p99_ratio", 2, "x")},
		target{"fair: throughput >= 0.9x a plain queue's", atLeastX("fair_tput_ratio", 0.9)},
		target{"fair: <= 2 extra Redis commands per task", atMost("fair_extra_cmds_per_task", 2, "")},
	)
	if o.rtt == 0 {
		ts = append(ts, target{"low rate: latency p99 <= 1 ms (loopback)", atMost("latency_p99_ms", 1, " ms")})
	} else {
		rtts := 3 * float64(o.rtt) / float64(time.Millisecond)
		ts = append(ts, target{fmt.Sprintf("low rate: latency p99 <= 3 RTT (%.3g ms)", rtts), atMost("latency_p99_ms", rtts, " ms")})
	}
	fmt.Fprintf(w, "\nissue targets (worqr medians):\n")
	for _, t := range ts {
		v, met, known := t.ok()
		switch {
		case !known:
			fmt.Fprintf(w, "  [ ? ] %-50s not measured\n", t.what)
		case met:
			fmt.Fprintf(w, "  [met] %-50s %s\n", t.what, v)
		default:
			fmt.Fprintf(w, "  [NOT] %-50s %s\n", t.what, v)
		}
	}
}

// bullmqTargets are the drain targets against BullMQ 6.7, with the jobs/s
// BullMQ and asynq 0.26 drained side by side (rtt 0: loopback; else the
// emulated 0.6 ms round trip).
var bullmqTargets = []struct {
	rtt           time.Duration
	c             int
	times         float64
	bullmq, asynq float64
}{
	{0, 10, 1.5, 21_640, 9_013},
	{0, 50, 2.5, 18_398, 7_434},
	{600 * time.Microsecond, 10, 2, 4_591, 938},
	{600 * time.Microsecond, 50, 2, 6_700, 920},
}

// runAsynq runs repetition rep of the asynq module's program with `go run`
// in dir against url and parses the report it prints on stdout (nil when
// nothing is left to run: recovery only, and its repetitions are done).
//
// The asynq side's workers and clients use url (the proxy with -rtt); its
// INFO, FLUSHDB and completion polls use statsURL (Redis itself).
func runAsynq(ctx context.Context, o *options, url, statsURL, dir string, rep int) (*Report, error) {
	only := o.run.letters(rep < o.asynqRecReps)
	if only == "" {
		return nil, nil
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin = "go"
	}
	args := []string{"run", ".",
		"-redis-url", url, "-stats-url", statsURL, "-flush",
		"-n", strconv.Itoa(o.n),
		"-concurrency", joinInts(o.concurrencies),
		"-payload", strconv.Itoa(o.payload),
		"-rate", strconv.Itoa(o.rate),
		"-duration", o.duration.String(),
		"-procs", strconv.Itoa(o.procs),
		"-reps", "1",
		"-recovery-reps", "1",
		"-recovery-jobs", strconv.Itoa(o.recoveryJobs),
		"-recovery-cap", o.recoveryCap.String(),
		"-fast-poll", o.asynqFastPoll.String(),
		"-only", only,
	}
	fmt.Fprintf(os.Stderr, "worqr-bench: running the asynq side: (cd %s && go %s)\n", dir, strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = dir
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = os.Stderr
	// Own process group, so that an interrupt reaches the program go run
	// started (and its worker children), not only the go command.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %w", strings.Join(cmd.Args, " "), err)
	}
	var out Report
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return nil, fmt.Errorf("parse its report: %w (output: %.200q)", err, stdout.String())
	}
	return &out, nil
}

// findAsynqDir returns dir, or when it is empty looks for bench/asynq/go.mod
// in the working directory and the directories above it.
func findAsynqDir(dir string) (string, error) {
	if dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
			return "", fmt.Errorf("-asynq-dir: %w", err)
		}
		return dir, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		cand := filepath.Join(dir, "bench", "asynq")
		if _, err := os.Stat(filepath.Join(cand, "go.mod")); err == nil {
			return cand, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("bench/asynq/go.mod not found above the working directory: run from the repository, pass -asynq-dir, or -skip-asynq")
		}
		dir = parent
	}
}

func joinInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, ",")
}

// pingRTT returns the median time of n PINGs on one connection to url.
func pingRTT(ctx context.Context, url string, n int) (time.Duration, error) {
	c, err := redis.DialURLContext(ctx, url)
	if err != nil {
		return 0, fmt.Errorf("connect to %s: %w", url, err)
	}
	defer c.Close()
	ds := make([]time.Duration, n)
	for i := range ds {
		t := time.Now()
		if _, err := redis.DoContext(c, ctx, "PING"); err != nil {
			return 0, err
		}
		ds[i] = time.Since(t)
	}
	slices.Sort(ds)
	return ds[len(ds)/2], nil
}

func newLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
