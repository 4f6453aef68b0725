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
//	go run ./cmd/worqr-bench                    # everything, about 4-5 minutes
//	go run ./cmd/worqr-bench -only a,b -reps 5  # enqueue and drain only
//	go run ./cmd/worqr-bench -skip-asynq -only drain -cpuprofile drain.pprof
//	go run ./cmd/worqr-bench -skip-asynq -only a -profile a -cpuprofile enqueue.pprof
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
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
)

type options struct {
	n             int
	concurrency   int
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
	profile       string
	jsonOut       string
	verbose       bool

	run workloads
}

// workloads says which measurements run. The letters are the issue's.
type workloads struct {
	enqueue, drain, latency, commands, cpu, memory, recovery bool
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
	fs.IntVar(&o.concurrency, "concurrency", 50, "handler goroutines per worker process (drain, latency)")
	fs.IntVar(&o.payload, "payload", 100, "payload size in bytes")
	fs.IntVar(&o.rate, "rate", 1000, "latency run: jobs enqueued per second")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "latency run: how long to enqueue at -rate")
	fs.IntVar(&o.procs, "procs", 1, "drain: worker processes (1: one in-process worker; more: child processes, -concurrency each)")
	fs.IntVar(&o.reps, "reps", 3, "repetitions of each workload; the table shows medians")
	fs.StringVar(&o.only, "only", "", "comma list of workloads to run: a|enqueue b|drain c|latency d|commands e|cpu f|memory g|recovery (default all)")
	fs.StringVar(&o.redisURL, "redis-url", os.Getenv("WORQR_REDIS_URL"), "Redis to use instead of a private redis-server (default $WORQR_REDIS_URL); its database is flushed between workloads")
	fs.BoolVar(&o.flush, "flush", false, "allow flushing the database of a -redis-url that holds keys")
	fs.BoolVar(&o.skipAsynq, "skip-asynq", false, "measure worqr only")
	fs.StringVar(&o.asynqDir, "asynq-dir", "", "directory of the asynq bench module (default: bench/asynq above the working directory)")
	fs.DurationVar(&o.asynqFastPoll, "asynq-fast-poll", time.Millisecond, "asynq TaskCheckInterval of the extra latency run (0: skip it)")
	fs.IntVar(&o.asynqRecReps, "asynq-recovery-reps", 1, "repetitions of asynq's recovery run (each takes one to two minutes)")
	fs.IntVar(&o.recoveryJobs, "recovery-jobs", 10, "recovery: jobs held by the worker that is killed")
	fs.DurationVar(&o.recoveryCap, "recovery-cap", 120*time.Second, "recovery: longest wait for the jobs to be taken again")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the first worqr run of -profile's workload to this file")
	fs.StringVar(&o.profile, "profile", "b", "workload -cpuprofile covers: a (enqueue) or b (drain)")
	fs.StringVar(&o.jsonOut, "json", "", "also write both reports as JSON to this file")
	fs.BoolVar(&o.verbose, "v", false, "print every repetition's samples")
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
	switch {
	case o.n < 1:
		return nil, fmt.Errorf("-n (%d) must be at least 1", o.n)
	case o.concurrency < 1:
		return nil, fmt.Errorf("-concurrency (%d) must be at least 1", o.concurrency)
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
	case o.profile != "a" && o.profile != "b":
		return nil, fmt.Errorf("-profile (%q) must be a (enqueue) or b (drain)", o.profile)
	case o.asynqFastPoll < 0:
		return nil, fmt.Errorf("-asynq-fast-poll (%s) must not be negative", o.asynqFastPoll)
	}
	return o, nil
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
	fmt.Fprintf(os.Stderr, "worqr-bench: redis %s at %s; %d CPUs, GOMAXPROCS %d, %s; n=%d payload=%dB concurrency=%d procs=%d reps=%d\n",
		info["redis_version"], url, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(),
		o.n, o.payload, o.concurrency, o.procs, o.reps)

	load0 := loadAvg()
	if load0 > 0.25*float64(runtime.NumCPU()) {
		fmt.Fprintf(os.Stderr, "worqr-bench: warning: load average %.2f on %d CPUs: other work on this machine will skew the numbers\n", load0, runtime.NumCPU())
	}
	b, err := newBench(ctx, o, url, stats)
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
		r, err := runAsynq(ctx, o, url, asynqDir, rep)
		if err != nil {
			return fmt.Errorf("asynq: %w", err)
		}
		aq = aq.merge(r)
	}
	wq := b.report()

	load1 := loadAvg()
	wq.Notes = append(wq.Notes, fmt.Sprintf("1-minute load average before the run %.2f, after %.2f (%d CPUs)", load0, load1, runtime.NumCPU()))
	out := os.Stdout
	fmt.Fprintf(out, "\nredis %s, %d CPUs, %s, n=%d, payload %d B, concurrency %d, worker processes %d, reps %d (medians), latency %d jobs/s for %s\n\n",
		info["redis_version"], runtime.NumCPU(), runtime.Version(), o.n, o.payload, o.concurrency, o.procs, o.reps, o.rate, o.duration)
	printTable(out, o, wq, aq)
	printTargets(out, wq, aq)
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

// printTargets says which of the targets the medians meet.
func printTargets(w io.Writer, wq, aq *Report) {
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
	ts := []target{
		{"enqueue >= 1.5x asynq", ratio("enqueue_jobs_per_s", 1.5)},
		{"drain >= 2x asynq", ratio("drain_jobs_per_s", 2)},
		{"latency p50 <= 0.5 ms", atMost("latency_p50_ms", 0.5, " ms")},
		{"latency p99 <= 2 ms", atMost("latency_p99_ms", 2, " ms")},
		{"<= 10 Redis commands per job", atMost("cmds_per_job", 10, "")},
		{"<= 400 B per waiting job", atMost("mem_bytes_per_job", 400, " B")},
		{"dead worker's jobs offered again <= 4 s", atMost("recovery_released_s", 4, " s")},
	}
	fmt.Fprintf(w, "\nissue targets (worqr medians):\n")
	for _, t := range ts {
		v, met, known := t.ok()
		switch {
		case !known:
			fmt.Fprintf(w, "  [ ? ] %-40s not measured\n", t.what)
		case met:
			fmt.Fprintf(w, "  [met] %-40s %s\n", t.what, v)
		default:
			fmt.Fprintf(w, "  [NOT] %-40s %s\n", t.what, v)
		}
	}
}

// runAsynq runs repetition rep of the asynq module's program with `go run`
// in dir against url and parses the report it prints on stdout (nil when
// nothing is left to run: recovery only, and its repetitions are done).
func runAsynq(ctx context.Context, o *options, url, dir string, rep int) (*Report, error) {
	only := o.run.letters(rep < o.asynqRecReps)
	if only == "" {
		return nil, nil
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin = "go"
	}
	args := []string{"run", ".",
		"-redis-url", url, "-flush",
		"-n", strconv.Itoa(o.n),
		"-concurrency", strconv.Itoa(o.concurrency),
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

func newLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
