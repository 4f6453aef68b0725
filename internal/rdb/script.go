package rdb

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

//go:embed lua/*.lua lua/include/*.lua
var luaFiles embed.FS

// script is one Lua script, run by SHA with a fallback to EVAL on NOSCRIPT.
type script struct {
	name     string
	src      string
	hash     string
	keyCount int // -1: the caller passes the key count first
}

// includePrefix starts a line naming a file of lua/include/ that a script (or
// another include) needs, BullMQ style: `--- @include "name"`.
const includePrefix = "--- @include "

// load builds a script from lua/<name>.lua with the includes it names
// prepended, each once, dependencies first.
func load(name string, keyCount int) *script {
	src, err := assemble("lua/"+name+".lua", map[string]bool{})
	if err != nil {
		panic("rdb: " + err.Error()) // a build defect, caught by every test
	}
	sum := sha1.Sum([]byte(src))
	return &script{name: name, src: src, hash: hex.EncodeToString(sum[:]), keyCount: keyCount}
}

// assemble returns file with its includes resolved; seen holds the includes
// already emitted.
func assemble(file string, seen map[string]bool) (string, error) {
	b, err := luaFiles.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("missing embedded script %s", file)
	}
	var head, body strings.Builder
	for _, line := range strings.SplitAfter(string(b), "\n") {
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
			return "", fmt.Errorf("%s: %w", file, err)
		}
		head.WriteString(part)
	}
	return head.String() + body.String(), nil
}

// DoContext runs the script on c. When ctx carries a deadline and c supports
// timeouts, it uses the connection's read deadline rather than redigo's
// goroutine-per-call DoContext: cheaper on the hot path, and bounded the same.
func (s *script) DoContext(ctx context.Context, c redis.Conn, keysAndArgs ...any) (any, error) {
	args := make([]any, 0, 2+len(keysAndArgs))
	args = append(args, s.hash)
	if s.keyCount >= 0 {
		args = append(args, s.keyCount)
	}
	args = append(args, keysAndArgs...)
	r, err := do(ctx, c, "EVALSHA", args...)
	if e, ok := err.(redis.Error); ok && strings.HasPrefix(string(e), "NOSCRIPT ") {
		args[0] = s.src
		r, err = do(ctx, c, "EVAL", args...)
	}
	return r, err
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
	enqueueScript   = load("enqueue", -1)
	takeScript      = load("take", 6)
	endScript       = load("end", -1)
	requeueScript   = load("requeue", -1)
	releaseScript   = load("release", 4)
	cancelScript    = load("cancel", 5)
	registerScript  = load("register", 4)
	moveScript      = load("move", 4)
	deadScript      = load("dead", 2)
	bulkScript      = load("bulk", 4)
	flowStartScript = load("flow_start", -1)
	runCancelScript = load("run_cancel", 1)
)
