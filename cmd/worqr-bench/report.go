package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Report is what one system's run produced. The asynq program prints the same
// shape as JSON on stdout; keep the two in step (bench/asynq/report.go).
type Report struct {
	System  string `json:"system"`
	Version string `json:"version"`
	// Metrics holds one sample per repetition; the table shows medians.
	Metrics map[string][]float64 `json:"metrics"`
	// Capped marks metrics whose wait hit its cap: the samples hold the cap.
	Capped map[string]bool `json:"capped,omitempty"`
	// Commands holds, for the last repetition, each phase's Redis commands
	// per job: command -> {calls per job, microseconds per job}.
	Commands map[string]map[string][2]float64 `json:"commands,omitempty"`
	Notes    []string                         `json:"notes,omitempty"`
}

func newReport(system, version string) *Report {
	return &Report{System: system, Version: version, Metrics: map[string][]float64{},
		Capped: map[string]bool{}, Commands: map[string]map[string][2]float64{}}
}

func (r *Report) add(key string, v float64) { r.Metrics[key] = append(r.Metrics[key], v) }

// merge adds the samples of next (one repetition) to r and returns the result;
// the command breakdown is next's, notes are kept once.
func (r *Report) merge(next *Report) *Report {
	if next == nil {
		return r
	}
	if r == nil {
		r = newReport(next.System, next.Version)
	}
	for k, v := range next.Metrics {
		r.Metrics[k] = append(r.Metrics[k], v...)
	}
	for k, v := range next.Capped {
		r.Capped[k] = r.Capped[k] || v
	}
	for k, v := range next.Commands {
		r.Commands[k] = v
	}
	for _, n := range next.Notes {
		if !slices.Contains(r.Notes, n) {
			r.Notes = append(r.Notes, n)
		}
	}
	return r
}

func (r *Report) median(key string) (float64, bool) {
	if r == nil {
		return 0, false
	}
	xs := r.Metrics[key]
	if len(xs) == 0 {
		return 0, false
	}
	return median(xs), true
}

// row is one line of the results table. asynqKey, when set, takes the asynq
// column from another metric (the latency rows with asynq's shorter poll).
type row struct {
	key, asynqKey string
	label         string
	higher        bool // higher is better
	format        func(float64) string
}

func rows(o *options) []row {
	jobs := func(v float64) string { return thousands(int64(math.Round(v))) }
	msf := func(v float64) string { // three significant digits, no exponent
		switch {
		case v >= 100:
			return thousands(int64(math.Round(v)))
		case v >= 10:
			return strconv.FormatFloat(v, 'f', 1, 64)
		case v >= 1:
			return strconv.FormatFloat(v, 'f', 2, 64)
		}
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	f2 := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
	f1 := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	b := func(v float64) string { return thousands(int64(math.Round(v))) }
	out := []row{
		{key: "enqueue_jobs_per_s", label: "a. enqueue one by one, 10 goroutines (jobs/s)", higher: true, format: jobs},
	}
	for _, c := range o.concurrencies {
		out = append(out, row{key: o.drainKey("drain_jobs_per_s", c), label: drainLabel(o, c), higher: true, format: jobs})
	}
	for _, p := range []string{"p50", "p90", "p99", "max"} {
		out = append(out, row{key: "latency_" + p + "_ms", label: "c. latency enqueue -> handler start, " + p + " (ms)", format: msf})
	}
	out = append(out,
		row{key: "lowrate_cmds_per_job", label: "c. low rate: Redis commands per job (enqueue + take + finish)", format: f2},
		row{key: "lowrate_redis_cpu_us_per_job", label: "c. low rate: Redis CPU per job (µs)", format: f1},
		row{key: "lowrate_client_cpu_us_per_job", label: "c. low rate: client CPU per job, producer + worker (µs)", format: f1},
		row{key: "lowrate_allocs_per_job", label: "   low rate: client heap allocations per job", format: f1},
	)
	for _, p := range []string{"p50", "p90", "p99", "max"} {
		out = append(out, row{key: "latency_" + p + "_ms", asynqKey: "latency_fastpoll_" + p + "_ms",
			label: fmt.Sprintf("c'. latency %s (ms), asynq TaskCheckInterval=%s", p, o.asynqFastPoll), format: msf})
	}
	out = append(out,
		row{key: "lowrate_cmds_per_job", asynqKey: "lowrate_fastpoll_cmds_per_job", label: fmt.Sprintf("c'. low rate: Redis commands per job, asynq TaskCheckInterval=%s", o.asynqFastPoll), format: f2},
		row{key: "lowrate_redis_cpu_us_per_job", asynqKey: "lowrate_fastpoll_redis_cpu_us_per_job", label: fmt.Sprintf("c'. low rate: Redis CPU per job (µs), asynq TaskCheckInterval=%s", o.asynqFastPoll), format: f1},
		row{key: "lowrate_client_cpu_us_per_job", asynqKey: "lowrate_fastpoll_client_cpu_us_per_job", label: fmt.Sprintf("c'. low rate: client CPU per job (µs), asynq TaskCheckInterval=%s", o.asynqFastPoll), format: f1},
		row{key: "cmds_per_job", label: fmt.Sprintf("d. Redis commands per job, enqueue + drain (concurrency %d)", o.concurrency), format: f2},
		row{key: "cmds_per_job_enqueue", label: "   of which enqueue (a)", format: f2},
	)
	for _, c := range o.concurrencies {
		out = append(out, row{key: o.drainKey("cmds_per_job_drain", c), label: "   take + finish (b)" + o.atC(c), format: f2})
	}
	for _, c := range o.concurrencies {
		out = append(out,
			row{key: o.drainKey("redis_cpu_us_per_job", c), label: "e. Redis CPU per job, drain" + o.atC(c) + " (µs)", format: f1},
			row{key: o.drainKey("client_cpu_us_per_job", c), label: "e. client CPU per job, drain" + o.atC(c) + " (µs)", format: f1},
		)
	}
	out = append(out,
		row{key: "enqueue_redis_cpu_us_per_job", label: "   Redis CPU per job, enqueue (µs)", format: f1},
		row{key: "enqueue_client_cpu_us_per_job", label: "   client CPU per job, enqueue (µs)", format: f1},
		row{key: "enqueue_allocs_per_job", label: "   client heap allocations per job, enqueue (a)", format: f1},
	)
	for _, c := range o.concurrencies {
		out = append(out, row{key: o.drainKey("drain_allocs_per_job", c), label: "   client heap allocations per job, drain" + o.atC(c) + " (b)", format: f1})
	}
	out = append(out,
		row{key: "mem_bytes_per_job", label: "f. Redis memory per waiting job (bytes)", format: b},
		row{key: "recovery_released_s", label: fmt.Sprintf("g. SIGKILL -> %d held jobs released by a peer (s)", o.recoveryJobs), format: f2},
		row{key: "recovery_first_s", label: "g. SIGKILL -> first job taken again (s)", format: f2},
		row{key: "recovery_all_s", label: fmt.Sprintf("g. SIGKILL -> all %d jobs taken again (s)", o.recoveryJobs), format: f2},
		row{key: "bulk_tasks_per_s", label: fmt.Sprintf("h. one EnqueueBatch of %s tasks (tasks/s; asynq: no batch call)", thousands(int64(o.bulkN))), higher: true, format: jobs},
		row{key: "bulk_call_p50_ms", label: "h. Redis time per enqueue script call, p50 (ms, SLOWLOG)", format: msf},
		row{key: "bulk_call_p99_ms", label: "h. Redis time per enqueue script call, p99 (ms, SLOWLOG)", format: msf},
		row{key: "bulk_call_max_ms", label: "h. Redis time per enqueue script call, max (ms, SLOWLOG)", format: msf},
		row{key: "bulk_other_max_ms", label: "h. longest other command meanwhile (ms, SLOWLOG)", format: msf},
		row{key: "bulk_ping_p99_ms", label: "h. PING round trip meanwhile, p99 (ms)", format: msf},
		row{key: "bulk_ping_max_ms", label: "h. PING round trip meanwhile, max (ms)", format: msf},
		row{key: "bulk_redis_cpu_us_per_task", label: "h. Redis CPU per task (µs)", format: f2},
		row{key: "bulk_client_cpu_us_per_task", label: "h. client CPU per task (µs)", format: f2},
		row{key: "bulk_allocs_per_task", label: "h. client heap allocations per task", format: f1},
		row{key: "bulk_cmds_per_task", label: "h. Redis commands per task", format: f2},
		row{key: "bulk_keepalive_lost", label: fmt.Sprintf("h. live worker (TTL %s, beat %s): keepalives lost", bulkTTL, bulkBeat), format: f1},
		row{key: "load_tasks_per_s", label: fmt.Sprintf("l. load.Run of %s lines, no worker (tasks/s)", thousands(int64(o.loadN))), higher: true, format: jobs},
		row{key: "load_call_p50_ms", label: "l. Redis time per load script call, p50 (ms, SLOWLOG)", format: msf},
		row{key: "load_call_max_ms", label: "l. Redis time per load script call, max of the last ones (ms, SLOWLOG)", format: msf},
		row{key: "load_latency_max_ms", label: "l. longest command of all, latency monitor (ms, 0: none >= 1 ms)", format: f1},
		row{key: "load_ping_max_ms", label: "l. PING round trip meanwhile, max (ms)", format: msf},
		row{key: "load_redis_cpu_us_per_task", label: "l. Redis CPU per task (µs)", format: f2},
		row{key: "load_client_cpu_us_per_task", label: "l. client CPU per task (µs)", format: f2},
		row{key: "load_cmds_per_task", label: "l. Redis commands per task", format: f2},
		row{key: "load_peak_mem_mb", label: "l. Redis used memory, peak over the start (MiB)", format: f1},
		row{key: "load_keepalive_lost", label: "l. live worker: keepalives lost", format: f1},
		row{key: "loadmw_tasks_per_s", label: fmt.Sprintf("l. load.Run of %s lines, MaxWaiting %s, a worker draining (tasks/s)", thousands(int64(o.loadDrainN)), thousands(int64(o.loadMaxWait))), higher: true, format: jobs},
		row{key: "loadmw_peak_mem_mb", label: "l. same: Redis used memory, peak over the start (MiB)", format: f1},
		row{key: "loadmw_latency_max_ms", label: "l. same: longest command of all, latency monitor (ms)", format: f1},
		row{key: "loadmw_call_max_ms", label: "l. same: Redis time per load script call, max (ms, SLOWLOG)", format: msf},
		row{key: "loadmw_keepalive_lost", label: "l. same: live worker keepalives lost", format: f1},
	)
	out = append(out, orderedRows(jobs, f2, f1)...)
	return append(out, fairRows(o, jobs, msf, f2, f1, b)...)
}

func drainLabel(o *options, c int) string {
	if o.procs == 1 {
		return fmt.Sprintf("b. drain, concurrency %d, no-op handler (jobs/s)", c)
	}
	return fmt.Sprintf("b. drain, %d processes x concurrency %d, no-op handler (jobs/s)", o.procs, c)
}

// drainKey is the metric key of a drain measurement at concurrency c: key
// itself when the run has one concurrency, key_c<c> when it has several (the
// asynq side names them the same way).
func (o *options) drainKey(key string, c int) string {
	if len(o.concurrencies) <= 1 {
		return key
	}
	return key + "_c" + strconv.Itoa(c)
}

// atC labels a drain row with its concurrency when the run has several.
func (o *options) atC(c int) string {
	if len(o.concurrencies) <= 1 {
		return ""
	}
	return fmt.Sprintf(" at concurrency %d", c)
}

func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// printTable writes the results as a Markdown table of medians.
func printTable(w io.Writer, o *options, wq, aq *Report) {
	fmt.Fprintf(w, "| metric (median of reps) | worqr | asynq | worqr/asynq |\n|---|--:|--:|--:|\n")
	for _, r := range rows(o) {
		wv, wok := wq.median(r.key)
		ak := r.key
		if r.asynqKey != "" {
			ak = r.asynqKey
		}
		av, aok := aq.median(ak)
		if !wok && !aok {
			continue
		}
		if r.asynqKey != "" && !aok {
			continue // no fast-poll run: the plain latency rows say it all
		}
		cell := func(rep *Report, key string, v float64, ok bool) string {
			if !ok {
				return "—"
			}
			if rep.Capped[key] {
				return ">" + r.format(v)
			}
			return r.format(v)
		}
		ratio := "—"
		if wok && aok && av != 0 {
			x := wv / av
			prefix := ""
			switch {
			case aq.Capped[ak] && !wq.Capped[r.key]:
				prefix = "<" // asynq's value is only a lower bound
			case wq.Capped[r.key] && !aq.Capped[ak]:
				prefix = ">"
			case wq.Capped[r.key]:
				prefix = "?"
			}
			dir := "lower is better"
			if r.higher {
				dir = "higher is better"
			}
			if x < 0.01 && prefix == "" {
				ratio = fmt.Sprintf("<0.01x (%s)", dir)
			} else {
				ratio = fmt.Sprintf("%s%.2fx (%s)", prefix, x, dir)
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", r.label, cell(wq, r.key, wv, wok), cell(aq, ak, av, aok), ratio)
	}
}

// printCommands writes each phase's Redis commands per job, most called first.
func printCommands(w io.Writer, rep *Report) {
	if rep == nil || len(rep.Commands) == 0 {
		return
	}
	phases := make([]string, 0, len(rep.Commands))
	for p := range rep.Commands {
		phases = append(phases, p)
	}
	sort.Strings(phases)
	for _, p := range phases {
		cmds := rep.Commands[p]
		names := make([]string, 0, len(cmds))
		var total float64
		for n, v := range cmds {
			names = append(names, n)
			total += v[0]
		}
		sort.Slice(names, func(i, j int) bool {
			if cmds[names[i]][0] != cmds[names[j]][0] {
				return cmds[names[i]][0] > cmds[names[j]][0]
			}
			return names[i] < names[j]
		})
		fmt.Fprintf(w, "\n%s, %s: %.2f Redis commands per job (calls/job, µs/job; a script's µs include its inner commands)\n", rep.System, p, total)
		for _, n := range names {
			v := cmds[n]
			if v[0] < 0.005 {
				continue
			}
			fmt.Fprintf(w, "  %-22s %7.3f %9.2f\n", n, v[0], v[1])
		}
	}
}

// printSamples writes every repetition's value of every metric.
func printSamples(w io.Writer, rep *Report) {
	if rep == nil {
		return
	}
	keys := make([]string, 0, len(rep.Metrics))
	for k := range rep.Metrics {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(w, "\n%s samples:\n", rep.System)
	for _, k := range keys {
		var parts []string
		for _, v := range rep.Metrics[k] {
			parts = append(parts, strconv.FormatFloat(v, 'g', 5, 64))
		}
		capped := ""
		if rep.Capped[k] {
			capped = " (capped)"
		}
		fmt.Fprintf(w, "  %-26s %s%s\n", k, strings.Join(parts, " "), capped)
	}
}
