// Command asynq runs worqr-bench's workloads on asynq (github.com/hibiken/asynq)
// and prints the results as JSON on stdout (progress goes to stderr). It is a
// module of its own so that asynq never enters worqr's go.mod; cmd/worqr-bench
// runs it with `go run` against the same redis-server as the worqr side.
//
//	cd bench/asynq && go run . -redis-url redis://127.0.0.1:6379 -flush
//
// It flushes the database of -redis-url between workloads (asynq's keys have
// a fixed prefix), so it refuses a database that holds keys unless -flush.
//
// asynq's workers poll: a processor that finds every queue empty sleeps
// TaskCheckInterval/2 plus a random part of TaskCheckInterval (1 s by
// default) before it looks again. The latency run uses the defaults; the
// "fastpoll" run repeats it with -fast-poll as TaskCheckInterval.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

type options struct {
	redisURL      string
	statsURL      string
	flush         bool
	n             int
	concurrency   int   // the first of concurrencies: latency, warm-up
	concurrencies []int // drain runs once at each
	payload       int
	rate          int
	duration      time.Duration
	procs         int
	reps          int
	recoveryReps  int
	recoveryJobs  int
	recoveryCap   time.Duration
	fastPoll      time.Duration
	only          string

	run workloads
}

// workloads says which measurements run (the letters of cmd/worqr-bench).
type workloads struct {
	enqueue, drain, latency, commands, cpu, memory, recovery bool
}

func (w workloads) needEnqueue() bool { return w.enqueue || w.commands }
func (w workloads) needDrain() bool   { return w.drain || w.commands || w.cpu || w.memory }

func parseOnly(s string) (workloads, error) {
	if s == "" {
		return workloads{true, true, true, true, true, true, true}, nil
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
		case "":
		default:
			return w, fmt.Errorf("-only: unknown workload %q (want a-g or enqueue, drain, latency, commands, cpu, memory, recovery)", part)
		}
	}
	return w, nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == childMode {
		os.Exit(runChild(os.Args[2:]))
	}
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "asynq-bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "asynq-bench:", err)
		stop()
		os.Exit(1)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		fmt.Fprintln(os.Stderr, "asynq-bench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("asynq-bench", flag.ContinueOnError)
	fs.StringVar(&o.redisURL, "redis-url", os.Getenv("WORQR_REDIS_URL"), "Redis to use (required; default $WORQR_REDIS_URL); its database is flushed between workloads")
	fs.BoolVar(&o.flush, "flush", false, "allow flushing a database that holds keys")
	fs.IntVar(&o.n, "n", 50000, "jobs per enqueue and drain run")
	fs.StringVar(&o.statsURL, "stats-url", "", "Redis for this program's INFO, FLUSHDB and completion polls (default -redis-url; cmd/worqr-bench passes Redis itself when -redis-url is its delay proxy)")
	concurrency := fs.String("concurrency", "50", "asynq Concurrency per server process; a comma list (10,50) runs the drain at each, the latency run at the first")
	fs.IntVar(&o.payload, "payload", 100, "payload size in bytes")
	fs.IntVar(&o.rate, "rate", 1000, "latency run: jobs enqueued per second")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "latency run: how long to enqueue at -rate")
	fs.IntVar(&o.procs, "procs", 1, "drain: server processes (1: one in-process server; more: child processes)")
	fs.IntVar(&o.reps, "reps", 3, "repetitions of each workload")
	fs.IntVar(&o.recoveryReps, "recovery-reps", 1, "repetitions of the recovery run (each takes one to two minutes)")
	fs.IntVar(&o.recoveryJobs, "recovery-jobs", 10, "recovery: jobs held by the server that is killed")
	fs.DurationVar(&o.recoveryCap, "recovery-cap", 120*time.Second, "recovery: longest wait for the jobs to be taken again")
	fs.DurationVar(&o.fastPoll, "fast-poll", time.Millisecond, "TaskCheckInterval of the extra latency run (0: skip it)")
	fs.StringVar(&o.only, "only", "", "comma list of workloads: a|enqueue b|drain c|latency d|commands e|cpu f|memory g|recovery (default all)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var err error
	if o.run, err = parseOnly(o.only); err != nil {
		return nil, err
	}
	if o.concurrencies, err = parseInts(*concurrency); err != nil {
		return nil, fmt.Errorf("-concurrency: %w", err)
	}
	o.concurrency = o.concurrencies[0]
	if o.statsURL == "" {
		o.statsURL = o.redisURL
	}
	switch {
	case o.redisURL == "":
		return nil, fmt.Errorf("-redis-url is required")
	case o.n < 1, slices.Min(o.concurrencies) < 1, o.rate < 1, o.procs < 1, o.reps < 1, o.recoveryReps < 1, o.recoveryJobs < 1:
		return nil, fmt.Errorf("-n, -concurrency, -rate, -procs, -reps, -recovery-reps and -recovery-jobs must be at least 1")
	case o.payload < 8:
		return nil, fmt.Errorf("-payload (%d) must be at least 8", o.payload)
	case o.duration < time.Second, o.recoveryCap < time.Second:
		return nil, fmt.Errorf("-duration and -recovery-cap must be at least 1s")
	case o.fastPoll < 0:
		return nil, fmt.Errorf("-fast-poll must not be negative")
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

// drainKey is the metric key of a drain measurement at concurrency c: key
// itself when the run has one concurrency, key_c<c> when it has several (as
// cmd/worqr-bench names them).
func (o *options) drainKey(key string, c int) string {
	if len(o.concurrencies) <= 1 {
		return key
	}
	return key + "_c" + strconv.Itoa(c)
}

// atC labels a drain phase with its concurrency when the run has several.
func (o *options) atC(c int) string {
	if len(o.concurrencies) <= 1 {
		return ""
	}
	return fmt.Sprintf(" at concurrency %d", c)
}

func concurrencyList(o *options) string {
	parts := make([]string, len(o.concurrencies))
	for i, c := range o.concurrencies {
		parts[i] = strconv.Itoa(c)
	}
	return strings.Join(parts, ",")
}

func asynqVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/hibiken/asynq" {
				return d.Version
			}
		}
	}
	return "unknown"
}

func run(ctx context.Context, o *options) (*Report, error) {
	connOpt, err := asynq.ParseRedisURI(o.redisURL)
	if err != nil {
		return nil, err
	}
	ropts, err := redis.ParseURL(o.statsURL)
	if err != nil {
		return nil, err
	}
	ropts.PoolSize = 4
	stats := redis.NewClient(ropts)
	defer stats.Close()
	if !o.flush {
		n, err := stats.DBSize(ctx).Result()
		if err != nil {
			return nil, err
		}
		if n > 0 {
			return nil, fmt.Errorf("%s holds %d keys and this program flushes its database between workloads: pass -flush to allow it", o.redisURL, n)
		}
	}
	b := &bench{o: o, connOpt: connOpt, stats: stats, payload: makePayload(o.payload),
		rep: newReport("asynq", asynqVersion())}
	fmt.Fprintf(os.Stderr, "asynq-bench: asynq %s, %s, GOMAXPROCS %d\n", b.rep.Version, runtime.Version(), runtime.GOMAXPROCS(0))
	if err := b.warmup(ctx); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	for rep := 0; rep < o.reps; rep++ {
		enq, drain := -1.0, -1.0
		if o.run.needEnqueue() {
			if enq, err = b.enqueue(ctx); err != nil {
				return nil, fmt.Errorf("enqueue: %w", err)
			}
		}
		if o.run.needDrain() {
			for i, c := range o.concurrencies {
				v, err := b.drain(ctx, c, i == 0)
				if err != nil {
					return nil, fmt.Errorf("drain at concurrency %d: %w", c, err)
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
			if err := b.latency(ctx, "latency", 0); err != nil {
				return nil, fmt.Errorf("latency: %w", err)
			}
			if o.fastPoll > 0 {
				if err := b.latency(ctx, "latency_fastpoll", o.fastPoll); err != nil {
					return nil, fmt.Errorf("latency (TaskCheckInterval %s): %w", o.fastPoll, err)
				}
			}
		}
		if o.run.recovery && rep < o.recoveryReps {
			if err := b.recovery(ctx); err != nil {
				return nil, fmt.Errorf("recovery: %w", err)
			}
		}
	}
	if o.run.latency {
		b.rep.Notes = append(b.rep.Notes, "asynq polls: a processor that finds its queues empty sleeps 0.5-1.5 x TaskCheckInterval (default 1 s) before it looks again")
		if o.fastPoll > 0 {
			b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("latency_fastpoll_*: the same run with TaskCheckInterval=%s (not a default; asynq warns it adds load to Redis)", o.fastPoll))
		}
	}
	if o.run.recovery {
		b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("recovery: %d repetition(s); asynq's recoverer (every 1 min, for leases expired 30 s ago; leases last 30 s) moves the jobs of a dead server to the retry set with the default retry delay (15-45 s for a first retry); the forwarder (every 5 s) then makes them pending; the peer was started 1.5-2.5 s before the kill and its recoverer runs at start and then every minute, so its first pass that could act came about 58 s after the kill: the best phase for asynq (a random phase adds 0-60 s)", o.recoveryReps))
	}
	if o.procs > 1 {
		b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("drain ran in %d child processes of Concurrency %s each; their CPU is in the client CPU", o.procs, concurrencyList(o)))
	}
	return b.rep, nil
}
