package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gomodule/redigo/redis"
)

// cmdStat is one line of INFO commandstats.
type cmdStat struct {
	Calls int64
	Usec  int64
}

// snapshot is what the bench reads before and after a timed phase: Redis's
// command counters, CPU and memory, and this process's CPU.
type snapshot struct {
	at         time.Time
	cmds       map[string]cmdStat
	redisCPU   float64 // seconds, used_cpu_sys + used_cpu_user
	usedMemory int64
	clientMem  int64   // mem_clients_normal: the clients' buffers, in usedMemory
	selfCPU    float64 // seconds, RUSAGE_SELF user + sys
	childCPU   float64 // seconds, RUSAGE_CHILDREN user + sys (waited children)
	mallocs    uint64  // this process's heap allocations so far
	allocBytes uint64  // and their bytes
}

// takeSnapshot reads INFO commandstats, cpu and memory in one call (Redis 7
// accepts several sections) and this process's resource usage.
func takeSnapshot(ctx context.Context, c redis.Conn) (snapshot, error) {
	s := snapshot{at: time.Now()}
	text, err := redis.String(redis.DoContext(c, ctx, "INFO", "commandstats", "cpu", "memory"))
	if err != nil {
		return s, fmt.Errorf("INFO: %w", err)
	}
	fields := parseInfo(text)
	s.cmds = map[string]cmdStat{}
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
	s.clientMem, _ = strconv.ParseInt(fields["mem_clients_normal"], 10, 64)
	s.selfCPU = rusageSeconds(syscall.RUSAGE_SELF)
	s.childCPU = rusageSeconds(syscall.RUSAGE_CHILDREN)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.mallocs, s.allocBytes = ms.Mallocs, ms.TotalAlloc
	return s, nil
}

// loadAvg returns the 1-minute load average, or -1.
func loadAvg() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
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
// INFO calls the bench itself makes.
func cmdDelta(a, b snapshot) map[string]cmdStat {
	out := map[string]cmdStat{}
	for name, sb := range b.cmds {
		if name == "info" {
			continue
		}
		sa := a.cmds[name]
		if d := (cmdStat{Calls: sb.Calls - sa.Calls, Usec: sb.Usec - sa.Usec}); d.Calls > 0 {
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

// perJob divides every command's calls and time by n jobs.
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

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
