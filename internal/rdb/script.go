package rdb

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
)

//go:embed lua/*.lua lua/include/*.lua
var luaFiles embed.FS

// script is one Lua script. On Redis 7 it runs as a function of the worqr
// library (FCALL fn); where functions are not available (Redis 6.2, or a
// user whose ACL denies them) it runs by SHA, with a fallback to EVAL on
// NOSCRIPT.
//
// Each script exists in two variants that differ only in how they publish:
// the plain one (PUBLISH, for a single Redis or a Sentinel-managed primary)
// and the sharded one (SPUBLISH, for a Redis Cluster: see sharded).
type script struct {
	name      string
	src       string // the script alone, its includes prepended
	body      string // the script without its includes
	hash      string
	fn        string // its function name in the library
	shardSrc  string // src, sharded
	shardHash string
	shardFn   string // its function name in the sharded library
	keyCount  int    // -1: the caller passes the key count first
}

// publishCall is how every script publishes a wake-up or a cancel (the
// channel and the message follow). TestPublishCalls checks that no script
// publishes another way.
const publishCall = "redis.call('PUBLISH',"

// sharded returns code with every publish made a sharded publish (SPUBLISH).
// On a Redis Cluster, PUBLISH is broadcast to every node of the cluster;
// SPUBLISH goes only to the nodes of the shard that serves the channel's
// slot. Every channel a script publishes on carries the hash tag of the
// script's keys (<ns>:{T}:wake:<queue>, <ns>:{T}:cancel:<queue>), so it is
// in the slot the script runs in: Redis refuses a script's SPUBLISH to a
// channel whose slot the node does not serve.
func sharded(code string) string {
	return strings.ReplaceAll(code, publishCall, "redis.call('SPUBLISH',")
}

// includePrefix starts a line naming a file of lua/include/ that a script (or
// another include) needs, BullMQ style: `--- @include "name"`. The
// layouts a file names (LAYOUT.<NAME>) are a generated include: their Lua
// tables, built from their Go declarations (see layout), emitted after the
// file's includes, once per script.
const includePrefix = "--- @include "

// load builds a script from lua/<name>.lua with the includes it names
// prepended, each once, dependencies first, and adds it to the library.
func load(name string, keyCount int) *script {
	head, body, err := assembleParts("lua/"+name+".lua", map[string]bool{})
	if err != nil {
		panic("rdb: " + err.Error()) // a build defect, caught by every test
	}
	src := unguardLua + head + body
	sum := sha1.Sum([]byte(src))
	shardSrc := sharded(src)
	shardSum := sha1.Sum([]byte(shardSrc))
	sc := &script{name: name, src: src, body: body, hash: hex.EncodeToString(sum[:]), keyCount: keyCount,
		shardSrc: shardSrc, shardHash: hex.EncodeToString(shardSum[:])}
	scripts = append(scripts, sc)
	return sc
}

// scripts are the scripts load built, in order.
var scripts []*script

// assemble returns file with its includes resolved; seen holds the includes
// already emitted.
func assemble(file string, seen map[string]bool) (string, error) {
	head, body, err := assembleParts(file, seen)
	return head + body, err
}

// assembleParts returns the includes file needs that are not in seen
// (resolved, dependencies first) and file's own text.
func assembleParts(file string, seen map[string]bool) (string, string, error) {
	b, err := luaFiles.ReadFile(file)
	if err != nil {
		return "", "", fmt.Errorf("missing embedded script %s", file)
	}
	return assembleText(file, string(b), seen)
}

// assembleText is assembleParts of file's text.
func assembleText(file, text string, seen map[string]bool) (string, string, error) {
	var head, body strings.Builder
	for _, line := range strings.SplitAfter(text, "\n") {
		rest, ok := strings.CutPrefix(line, includePrefix)
		if !ok {
			body.WriteString(line)
			continue
		}
		inc := strings.Trim(strings.TrimSpace(rest), `"`)
		if seen[inc] {
			continue
		}
		seen[inc] = true
		part, err := assemble("lua/include/"+inc+".lua", seen)
		if err != nil {
			return "", "", fmt.Errorf("%s: %w", file, err)
		}
		head.WriteString(part)
	}
	// A generated include: the layouts the file's code (comments aside)
	// names as LAYOUT.<NAME>, after its includes, each once.
	for _, name := range layoutsNamed(text) {
		l, ok := layouts[name]
		if !ok {
			return "", "", fmt.Errorf("%s: no layout %s is declared", file, name)
		}
		if seen["LAYOUT."+name] {
			continue
		}
		if !seen["LAYOUT"] {
			seen["LAYOUT"] = true
			head.WriteString(layoutTable)
		}
		seen["LAYOUT."+name] = true
		head.WriteString(l.lua())
	}
	return head.String(), body.String(), nil
}

// library is every script as one Redis function library: each include
// defined once, at load, and each script a function of (KEYS, ARGV), so a
// call runs only the script's own code. Its name carries a hash of its
// source: versions of worqr that differ load libraries of their own, side
// by side. The sharded library (see sharded) has a name of its own.
type library struct {
	name string
	src  string
}

// lib returns the plain library, or the sharded one.
func lib(shard bool) *library {
	l := libs()
	if shard {
		return l[1]
	}
	return l[0]
}

// libraryTable starts the library's functions: they are fields of one
// table, not locals of their own, so that the library chunk, which holds
// every include's names too, stays well under Lua's limit of 200 locals.
const libraryTable = "local wq = {} -- the scripts, by name\n"

// libraryParts returns the library's code in two parts: heads, every
// include of every script once, then libraryTable, and fns, each script as
// a function of (KEYS, ARGV) stored in it, in the order of scripts.
func libraryParts() (heads string, fns []string) {
	seen := map[string]bool{}
	var hb strings.Builder
	for _, sc := range scripts {
		head, body, err := assembleParts("lua/"+sc.name+".lua", seen)
		if err != nil {
			panic("rdb: " + err.Error())
		}
		hb.WriteString(head)
		var fn strings.Builder
		fmt.Fprintf(&fn, "wq['%s'] = function(KEYS, ARGV)\n", sc.name)
		fn.WriteString(unguardLua)
		if seen["time"] {
			fn.WriteString("_call = nil\n") // Redis time is read once per call, and per-call bounds start afresh
		}
		if seen["key"] {
			fn.WriteString("key_wakes = nil\n") // no call inherits another's (one that failed half way)
		}
		fmt.Fprintf(&fn, "%s\nend\n", body)
		fns = append(fns, fn.String())
	}
	hb.WriteString(libraryTable)
	return hb.String(), fns
}

var libs = sync.OnceValue(func() [2]*library {
	heads, fns := libraryParts()
	code := heads + strings.Join(fns, "")
	var out [2]*library
	for v, code := range []string{code, sharded(code)} {
		sum := sha1.Sum([]byte(code))
		id := hex.EncodeToString(sum[:6])
		var reg strings.Builder
		for _, sc := range scripts {
			fn := "worqr_" + id + "_" + sc.name
			if v == 0 {
				sc.fn = fn
			} else {
				sc.shardFn = fn
			}
			fmt.Fprintf(&reg, "redis.register_function('%s', wq['%s'])\n", fn, sc.name)
		}
		out[v] = &library{name: "worqr_" + id, src: "#!lua name=worqr_" + id + "\n" + code + reg.String()}
	}
	return out
})

// How a Store runs scripts: found out on its first script call.
const (
	modeFunctions int32 = iota // FCALL, loading the library where it is missing
	modeScripts                // EVALSHA, with EVAL on NOSCRIPT
)

// modeSharded, or'ed into a Store's mode from its creation, says it runs
// the sharded variant of the scripts (a Redis Cluster).
const modeSharded int32 = 4

// command returns the command and arguments that run sc in mode m. With
// guard (a store that routes by tag: maybe a Redis Cluster), the script's
// migration guard key is declared after its own keys (see guardKey).
func (sc *script) command(m int32, guard bool, keysAndArgs []any) (string, []any) {
	args := make([]any, 0, 3+len(keysAndArgs))
	cmd := "EVALSHA"
	shard := m&modeSharded != 0
	switch {
	case m&^modeSharded == modeFunctions && shard:
		cmd = "FCALL"
		args = append(args, sc.shardFn)
	case m&^modeSharded == modeFunctions:
		cmd = "FCALL"
		args = append(args, sc.fn)
	case shard:
		args = append(args, sc.shardHash)
	default:
		args = append(args, sc.hash)
	}
	n, rest := sc.keyCount, keysAndArgs
	if n < 0 {
		c, ok := keysAndArgs[0].(int)
		if !ok {
			panic(fmt.Sprintf("rdb: script %s: key count %T, want int", sc.name, keysAndArgs[0]))
		}
		n, rest = c, keysAndArgs[1:]
	}
	if !guard || n < 1 || n > len(rest) {
		return cmd, append(append(args, n), rest...)
	}
	first, _ := rest[0].(string)
	args = append(append(args, n+1), rest[:n]...)
	args = append(args, guardKey(first))
	return cmd, append(args, rest[n:]...)
}

// guardSuffix ends the migration guard key: <key up to its hash tag's '}'>
// followed by it. No worqr key is named so.
const guardSuffix = ":~"

// guardKey returns the migration guard key of the slot of key k: its name
// up to the end of its hash tag, then guardSuffix. The key never exists.
// Declared as a script's last key on a cluster, it makes Redis refuse the
// call before the script runs while the slot is being migrated: on the
// migrating node some declared keys exist and this one does not
// (TRYAGAIN), or none does (ASK, then on the importing node: several
// keys, some missing, TRYAGAIN). So no script ever runs on a slot whose
// keys are split between two nodes, where it would fail half way on a key
// already moved (Redis does not undo what it wrote before) or, on the
// importing node, read a key not moved yet as missing and create a second
// copy of it. docs/PROTOCOL.md, "Scripts during a slot migration".
func guardKey(k string) string {
	if o := strings.IndexByte(k, '{'); o >= 0 {
		if c := strings.IndexByte(k[o+1:], '}'); c > 0 {
			return k[:o+1+c+1] + guardSuffix
		}
	}
	return k + guardSuffix
}

// unguardLua drops the migration guard key from KEYS (the scripts read
// KEYS by position and by count); it starts every function and script.
// It mirrors guardKey. A last key that does not end with guardSuffix's '~'
// (every call on a single Redis) costs one byte comparison.
const unguardLua = `do
  local n = #KEYS
  if n > 1 and string.byte(KEYS[n], -1) == 126 then -- '~': maybe the guard
    local k = KEYS[1]
    local o = string.find(k, '{', 1, true)
    local c = o and string.find(k, '}', o + 1, true)
    local g = (c and c > o + 1) and (string.sub(k, 1, c) .. '` + guardSuffix + `') or (k .. '` + guardSuffix + `')
    if KEYS[n] == g then KEYS[n] = nil end
  end
end
`

// run runs sc on c. When ctx carries a deadline and c supports timeouts, it
// uses the connection's read deadline rather than redigo's
// goroutine-per-call DoContext: cheaper on the hot path, and bounded the
// same.
func (s *Store) run(ctx context.Context, c redis.Conn, sc *script, keysAndArgs ...any) (any, error) {
	libs() // names the functions
	m := s.mode.Load()
	shard := m & modeSharded
	if m&^modeSharded == modeFunctions {
		cmd, args := sc.command(m, s.tagged, keysAndArgs)
		r, err := do(ctx, c, cmd, args...)
		e, ok := err.(redis.Error)
		switch {
		case !ok:
			return r, err
		case strings.HasPrefix(string(e), "ERR Function not found"):
			if err := loadLibrary(ctx, c, shard != 0); err == nil {
				return do(ctx, c, cmd, args...)
			} else if !functionsDenied(err) {
				return nil, err
			}
		case !functionsDenied(e):
			return r, err
		}
		s.mode.Store(modeScripts | shard)
	}
	cmd, args := sc.command(modeScripts|shard, s.tagged, keysAndArgs)
	r, err := do(ctx, c, cmd, args...)
	if e, ok := err.(redis.Error); ok && strings.HasPrefix(string(e), "NOSCRIPT ") {
		args[0] = sc.src
		if shard != 0 {
			args[0] = sc.shardSrc
		}
		r, err = do(ctx, c, "EVAL", args...)
	}
	return r, err
}

// loadLibrary loads the library (the sharded one if shard) on c's server (a
// peer may have just done so).
func loadLibrary(ctx context.Context, c redis.Conn, shard bool) error {
	l := lib(shard)
	_, err := do(ctx, c, "FUNCTION", "LOAD", l.src)
	if e, ok := err.(redis.Error); ok && strings.Contains(string(e), "already exists") {
		return nil
	}
	return err
}

// functionsDenied reports an error that says this server or user cannot run
// functions: Redis before 7 (no FCALL or FUNCTION), or an ACL that denies
// them. The store then runs scripts by SHA.
func functionsDenied(err error) bool {
	e, ok := err.(redis.Error)
	if !ok {
		return false
	}
	msg := string(e)
	return strings.HasPrefix(msg, "NOPERM") || strings.Contains(msg, "unknown command") ||
		strings.Contains(msg, "unknown subcommand")
}

// do sends one command on c, bounded by ctx.
func do(ctx context.Context, c redis.Conn, cmd string, args ...any) (any, error) {
	if dl, ok := ctx.Deadline(); ok {
		if cwt, ok := c.(redis.ConnWithTimeout); ok {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			return cwt.DoWithTimeout(time.Until(dl), cmd, args...)
		}
	}
	return redis.DoContext(c, ctx, cmd, args...)
}

// The scripts are immutable once built.
var (
	enqueueScript     = load("enqueue", -1)
	enqueuePacked     = load("enqueue_packed", -1)
	enqueueHandScript = load("enqueue_hand", -1)
	takeScript        = load("take", -1)
	endScript         = load("end", -1)
	requeueScript     = load("requeue", -1)
	releaseScript     = load("release", 5)
	cancelScript      = load("cancel", 6)
	registerScript    = load("register", 4)
	moveScript        = load("move", 4)
	promoteScript     = load("promote", 4)
	deadScript        = load("dead", -1)
	bulkScript        = load("bulk", 4)
	flowStartScript   = load("flow_start", -1)
	runCancelScript   = load("run_cancel", 1)
	signalScript      = load("signal", 1)
	runRetryScript    = load("run_retry", 1)
	runsPageScript    = load("runs_page", 1)
	runsForgetScript  = load("runs_forget", -1)
	progressScript    = load("progress", 2)
	waitMarkScript    = load("wait_mark", 1)
	loadScript        = load("load", -1)
	enqueueKeyScript  = load("enqueue_key", -1)
	keyLimitsScript   = load("key_limits", 2)
	periodicScript    = load("periodic", 3)
	periodicDue       = load("periodic_due", 1)
	levelsScript      = load("levels", 2)
	removeQueueScript = load("remove_queue", 24)
)
