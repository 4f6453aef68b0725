package main

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/gomodule/redigo/redis"
)

// Redis-side cost per script call (-script-costs). INFO commandstats lumps
// every EVALSHA together; SLOWLOG with a threshold of 0 records each call's
// execution time with its arguments, the SHA among them. The bench names
// the SHAs by assembling internal/rdb/lua/*.lua as internal/rdb does (each
// `--- @include "x"` line replaced, once, by lua/include/x.lua, includes
// first) from the source tree it runs in; SHAs it cannot name are shown
// shortened.

const slowlogLen = 1 << 20

// scriptNames maps the SHA1 of every script in internal/rdb/lua to its name,
// or returns an empty map when the directory is not found above the working
// directory.
func scriptNames() map[string]string {
	dir, err := os.Getwd()
	if err != nil {
		return nil
	}
	var lua string
	for {
		cand := filepath.Join(dir, "internal", "rdb", "lua")
		if st, err := os.Stat(cand); err == nil && st.IsDir() {
			lua = cand
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil
		}
		dir = parent
	}
	files, _ := filepath.Glob(filepath.Join(lua, "*.lua"))
	out := map[string]string{}
	for _, f := range files {
		src, err := assembleLua(lua, f, map[string]bool{})
		if err != nil {
			continue
		}
		sum := sha1.Sum([]byte(src))
		out[hex.EncodeToString(sum[:])] = strings.TrimSuffix(filepath.Base(f), ".lua")
	}
	return out
}

func assembleLua(root, file string, seen map[string]bool) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	var head, body strings.Builder
	for _, line := range strings.SplitAfter(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "--- @include ")
		if !ok {
			body.WriteString(line)
			continue
		}
		inc := strings.Trim(strings.TrimSpace(rest), `"`)
		if seen[inc] {
			continue
		}
		seen[inc] = true
		part, err := assembleLua(root, filepath.Join(root, "include", inc+".lua"), seen)
		if err != nil {
			return "", err
		}
		head.WriteString(part)
	}
	return head.String() + body.String(), nil
}

// startSlowlog makes Redis record every command in its slow log and
// returns a function that restores the settings (once, however often it is
// called).
func startSlowlog(ctx context.Context, c redis.Conn) (func(), error) {
	return startSlowlogN(ctx, c, slowlogLen)
}

// startSlowlogN is startSlowlog keeping the last maxLen commands.
func startSlowlogN(ctx context.Context, c redis.Conn, maxLen int) (func(), error) {
	old, err := redis.StringMap(redis.DoContext(c, ctx, "CONFIG", "GET", "slowlog-*"))
	if err != nil {
		return nil, err
	}
	if _, err := redis.DoContext(c, ctx, "CONFIG", "SET", "slowlog-log-slower-than", "0", "slowlog-max-len", maxLen); err != nil {
		return nil, err
	}
	if _, err := redis.DoContext(c, ctx, "SLOWLOG", "RESET"); err != nil {
		return nil, err
	}
	return sync.OnceFunc(func() {
		_, _ = redis.DoContext(c, context.Background(), "CONFIG", "SET",
			"slowlog-log-slower-than", old["slowlog-log-slower-than"], "slowlog-max-len", old["slowlog-max-len"])
		_, _ = redis.DoContext(c, context.Background(), "SLOWLOG", "RESET")
	}), nil
}

// startLatency makes Redis's latency monitor record every command that
// runs 1 ms or longer (it keeps the longest per second and the all-time
// maximum per event) and returns a function that restores the threshold.
func startLatency(ctx context.Context, c redis.Conn) (func(), error) {
	old, err := redis.StringMap(redis.DoContext(c, ctx, "CONFIG", "GET", "latency-monitor-threshold"))
	if err != nil {
		return nil, err
	}
	if _, err := redis.DoContext(c, ctx, "CONFIG", "SET", "latency-monitor-threshold", "1"); err != nil {
		return nil, err
	}
	if _, err := redis.DoContext(c, ctx, "LATENCY", "RESET"); err != nil {
		return nil, err
	}
	return sync.OnceFunc(func() {
		_, _ = redis.DoContext(c, context.Background(), "CONFIG", "SET", "latency-monitor-threshold", old["latency-monitor-threshold"])
	}), nil
}

// latencyMax returns the longest command (event "command": any command,
// scripts included) the latency monitor saw since startLatency, in ms; 0
// means none took 1 ms.
func latencyMax(ctx context.Context, c redis.Conn) (float64, error) {
	events, err := redis.Values(redis.DoContext(c, ctx, "LATENCY", "LATEST"))
	if err != nil {
		return 0, err
	}
	for _, e := range events {
		f, err := redis.Values(e, nil)
		if err != nil || len(f) < 4 {
			continue
		}
		if name, _ := redis.String(f[0], nil); name == "command" {
			v, err := redis.Int64(f[3], nil)
			return float64(v), err
		}
	}
	return 0, nil
}

// scriptCost is what SLOWLOG recorded for one script (or command).
type scriptCost struct {
	name  string
	calls int64
	usec  int64
}

// slowEntry is one command SLOWLOG recorded: its id (increasing), its name
// (see slowlogEntries) and its execution time.
type slowEntry struct {
	id   int64
	name string
	usec int64
}

// slowlogMark returns the id of the newest entry of the slow log (-1 when
// it is empty).
func slowlogMark(ctx context.Context, c redis.Conn) (int64, error) {
	entries, err := redis.Values(redis.DoContext(c, ctx, "SLOWLOG", "GET", 1))
	if err != nil || len(entries) == 0 {
		return -1, err
	}
	f, err := redis.Values(entries[0], nil)
	if err != nil || len(f) == 0 {
		return -1, err
	}
	return redis.Int64(f[0], nil)
}

// slowlogEntries returns every command in the slow log, newest first, but
// the bench's own (SLOWLOG, INFO, CONFIG), each named by script (EVALSHA's
// SHA as "evalsha <script>", FCALL's function worqr_<library>_<script> as
// "fcall <script>") or command.
func slowlogEntries(ctx context.Context, c redis.Conn, names map[string]string) ([]slowEntry, error) {
	entries, err := redis.Values(redis.DoContext(c, ctx, "SLOWLOG", "GET", slowlogLen))
	if err != nil {
		return nil, err
	}
	out := make([]slowEntry, 0, len(entries))
	for _, e := range entries {
		f, err := redis.Values(e, nil)
		if err != nil || len(f) < 4 {
			continue
		}
		id, _ := redis.Int64(f[0], nil)
		usec, _ := redis.Int64(f[2], nil)
		args, _ := redis.Strings(f[3], nil)
		if len(args) == 0 {
			continue
		}
		name := strings.ToLower(args[0])
		switch name {
		case "slowlog", "info", "config":
			continue
		case "evalsha":
			if len(args) > 1 {
				sha := strings.ToLower(args[1])
				if n, ok := names[sha]; ok {
					name = "evalsha " + n
				} else {
					name = "evalsha " + sha[:min(8, len(sha))]
				}
			}
		case "fcall":
			if len(args) > 1 {
				// worqr_<12 hex digits of the library>_<script>
				fn := args[1]
				if len(fn) > 19 && strings.HasPrefix(fn, "worqr_") {
					fn = fn[19:]
				}
				name = "fcall " + fn
			}
		}
		out = append(out, slowEntry{id: id, name: name, usec: usec})
	}
	return out, nil
}

// readSlowlog groups the slow log by script or command (see slowlogEntries).
func readSlowlog(ctx context.Context, c redis.Conn, names map[string]string) ([]scriptCost, error) {
	entries, err := slowlogEntries(ctx, c, names)
	if err != nil {
		return nil, err
	}
	by := map[string]*scriptCost{}
	for _, e := range entries {
		s := by[e.name]
		if s == nil {
			s = &scriptCost{name: e.name}
			by[e.name] = s
		}
		s.calls++
		s.usec += e.usec
	}
	out := make([]scriptCost, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].usec > out[j].usec })
	return out, nil
}

func printScriptCosts(w io.Writer, title string, costs []scriptCost, jobs int) {
	fmt.Fprintf(w, "\n%s: Redis time per call from SLOWLOG (every command logged; top-level calls only)\n", title)
	fmt.Fprintf(w, "  %-24s %9s %10s %10s %10s\n", "command", "calls", "calls/job", "µs/call", "µs/job")
	for _, s := range costs {
		fmt.Fprintf(w, "  %-24s %9d %10.3f %10.1f %10.2f\n", s.name, s.calls,
			float64(s.calls)/float64(jobs), float64(s.usec)/float64(s.calls), float64(s.usec)/float64(jobs))
	}
}

// scriptCosts runs workload c once more with every command in the slow log
// (its metrics are dropped: the logging costs Redis time) and returns what
// each script and command cost.
func (b *bench) scriptCosts(ctx context.Context) ([]scriptCost, error) {
	saved := b.rep
	b.rep = newReport("worqr", "scratch")
	defer func() { b.rep = saved }()
	restore, err := startSlowlog(ctx, b.stats)
	if err != nil {
		return nil, err
	}
	defer restore()
	b.progress("script costs: one more latency run with SLOWLOG on")
	if err := b.latency(ctx, false); err != nil {
		return nil, err
	}
	return readSlowlog(ctx, b.stats, scriptNames())
}
