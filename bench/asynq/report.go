package main

import (
	"bufio"
	"math"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Report is what this program prints on stdout as JSON. Its shape is the one
// cmd/worqr-bench parses (cmd/worqr-bench/report.go): keep the two in step.
type Report struct {
	System  string `json:"system"`
	Version string `json:"version"`
	// Metrics holds one sample per repetition.
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

// cmdStat is one line of INFO commandstats.
type cmdStat struct {
	Calls int64
	Usec  int64
}

// snapshot is what is read before and after a timed phase.
type snapshot struct {
	cmds       map[string]cmdStat
	redisCPU   float64 // seconds, used_cpu_sys + used_cpu_user
	usedMemory int64
	selfCPU    float64 // seconds, RUSAGE_SELF user + sys
	childCPU   float64 // seconds, RUSAGE_CHILDREN user + sys (waited children)
	mallocs    uint64  // this process's heap allocations so far
	allocBytes uint64  // and their bytes
}

func parseSnapshot(info string) snapshot {
	fields := parseInfo(info)
	s := snapshot{cmds: map[string]cmdStat{}}
	for k, v := range fields {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		var st cmdStat
		for _, kv := range strings.Split(v, ",") {
			key, val, _ := strings.Cut(kv, "=")
			switch key {
			case "calls":
				st.Calls, _ = strconv.ParseInt(val, 10, 64)
			case "usec":
				st.Usec, _ = strconv.ParseInt(val, 10, 64)
			}
		}
		s.cmds[name] = st
	}
	sys, _ := strconv.ParseFloat(fields["used_cpu_sys"], 64)
	user, _ := strconv.ParseFloat(fields["used_cpu_user"], 64)
	s.redisCPU = sys + user
	s.usedMemory, _ = strconv.ParseInt(fields["used_memory"], 10, 64)
	s.selfCPU = rusageSeconds(syscall.RUSAGE_SELF)
	s.childCPU = rusageSeconds(syscall.RUSAGE_CHILDREN)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.mallocs, s.allocBytes = ms.Mallocs, ms.TotalAlloc
	return s
}

func parseInfo(text string) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out
}

func rusageSeconds(who int) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// cmdDelta is the per-command difference between two snapshots, without the
// INFO calls this program makes; own[name] calls the program itself made
// (its completion polls) are taken off too.
func cmdDelta(a, b snapshot, own map[string]int64) map[string]cmdStat {
	out := map[string]cmdStat{}
	for name, sb := range b.cmds {
		if name == "info" {
			continue
		}
		sa := a.cmds[name]
		d := cmdStat{Calls: sb.Calls - sa.Calls - own[name], Usec: sb.Usec - sa.Usec}
		if d.Calls > 0 {
			out[name] = d
		}
	}
	return out
}

func totalCalls(d map[string]cmdStat) int64 {
	var n int64
	for _, s := range d {
		n += s.Calls
	}
	return n
}

func perJob(d map[string]cmdStat, n int) map[string][2]float64 {
	out := make(map[string][2]float64, len(d))
	for name, s := range d {
		out[name] = [2]float64{float64(s.Calls) / float64(n), float64(s.Usec) / float64(n)}
	}
	return out
}

// percentile returns the nearest-rank p-quantile (0 < p <= 1) of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	i = min(max(i, 0), len(sorted)-1)
	return sorted[i]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// recordLatency adds the p50, p90, p99 and max of lats (in ms) under
// prefix_p50_ms and so on, and returns them.
func recordLatency(rep *Report, prefix string, lats []time.Duration) [4]float64 {
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	out := [4]float64{ms(percentile(lats, .5)), ms(percentile(lats, .9)), ms(percentile(lats, .99)), ms(lats[len(lats)-1])}
	for i, p := range []string{"p50", "p90", "p99", "max"} {
		rep.add(prefix+"_"+p+"_ms", out[i])
	}
	return out
}
