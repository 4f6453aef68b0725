package rdb_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
)

// Lua 5.1, as Redis embeds it, refuses to compile a function that reads
// more than 60 names of the functions around it (upvalues) or has more
// than 200 locals active at once. A script grows towards both limits as
// its includes and its own code grow, and a script past one of them fails
// every call. The counts below are measured on the real compiler: pads
// (extra locals, or extra upvalues read) are added to the Lua a script
// compiles as, until Redis's Lua refuses it.
const (
	luaMaxUpvalues = 60
	luaMaxLocals   = 200
)

// The headroom every script keeps under Lua's limits: what a change may
// add before it must restructure (move work into functions of the
// includes that take their inputs as arguments, as end.lua's kinds do).
const (
	minUpvalueRoom = 20
	minLocalRoom   = 20
)

// compileProbe compiles ARGV[1] with Redis's Lua and returns "" or the
// compiler's error.
const compileProbe = "local _, err = loadstring(ARGV[1]) return err or ''"

// compileErr returns the error of compiling code with Redis's Lua, "" when
// it compiles.
func compileErr(t *testing.T, c redis.Conn, code string) string {
	t.Helper()
	msg, err := redis.String(c.Do("EVAL", compileProbe, 0, code))
	if err != nil {
		t.Fatalf("compile probe: %v", err)
	}
	return msg
}

// room returns the most pads k (0..luaMaxLocals) for which code(k)
// compiles, failing the test when code(0) does not or when code(k+1) fails
// for another reason than limit (a word of the compiler's message).
func room(t *testing.T, c redis.Conn, limit string, code func(k int) string) int {
	t.Helper()
	if msg := compileErr(t, c, code(0)); msg != "" {
		t.Fatalf("the unpadded code does not compile: %s", msg)
	}
	lo, hi := 0, luaMaxLocals+1 // code(lo) compiles; code(hi) does not
	if msg := compileErr(t, c, code(hi)); msg == "" {
		t.Fatalf("code with %d pads compiles: the probe does not pad", hi)
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if compileErr(t, c, code(mid)) == "" {
			lo = mid
		} else {
			hi = mid
		}
	}
	if msg := compileErr(t, c, code(hi)); !strings.Contains(msg, limit) {
		t.Fatalf("with %d pads: %s; want the limit on %s", hi, msg, limit)
	}
	return lo
}

// padLocals declares k more locals.
func padLocals(k int) string {
	if k == 0 {
		return ""
	}
	names := make([]string, k)
	for i := range names {
		names[i] = fmt.Sprintf("pad_%d", i)
	}
	return "local " + strings.Join(names, ", ") + "\n"
}

// padReads makes the function it starts read k more upvalues (pad_0 ..),
// in code that never runs.
func padReads(k int) string {
	var b strings.Builder
	b.WriteString("if false then\n")
	for i := range k {
		fmt.Fprintf(&b, "pad_%d = nil\n", i)
	}
	b.WriteString("end\n")
	return b.String()
}

// scriptLimits are one script's counts against Lua's limits.
type scriptLimits struct {
	evalLocals int // the main function's locals, run by EVAL (every include's names are among them)
	fnUpvalues int // its function's upvalues, in the function library
	fnLocals   int // its function's locals, in the function library
}

// measureScript measures script name's counts; fn is its function in the
// library, heads the library's includes.
func measureScript(t *testing.T, c redis.Conn, name, heads, fn string) scriptLimits {
	t.Helper()
	head, body := rdb.EvalParts(name)
	var l scriptLimits
	l.evalLocals = luaMaxLocals - room(t, c, "local variables", func(k int) string {
		return head + padLocals(k) + body
	})
	open, rest, ok := strings.Cut(fn, "\n")
	if !ok || !strings.HasPrefix(open, "wq['"+name+"'] = function(") {
		t.Fatalf("library function of %s starts %q", name, open)
	}
	l.fnLocals = luaMaxLocals - room(t, c, "local variables", func(k int) string {
		return heads + open + "\n" + padLocals(k) + rest
	})
	// The pads are locals of a function around the script's function, so
	// that they count against its upvalues and not against the library
	// chunk's locals (and so does the table it is stored in: the function
	// around it reads only what it reads).
	l.fnUpvalues = luaMaxUpvalues - room(t, c, "upvalues", func(k int) string {
		return heads + "local function probe()\nlocal wq = {}\n" + padLocals(k) + open + "\n" + padReads(k) + rest + "end\n"
	})
	return l
}

// Every script compiles within Lua's limits with room to grow, run by EVAL
// and as a function of the library; the library chunk too.
func TestScriptsStayWithinLuaLimits(t *testing.T) {
	c := srv.Pool().Get()
	defer c.Close()
	heads, fns := rdb.LibraryParts()
	names := rdb.ScriptNames()
	if len(fns) != len(names) {
		t.Fatalf("%d library functions for %d scripts", len(fns), len(names))
	}
	for i, name := range names {
		t.Run(name, func(t *testing.T) {
			l := measureScript(t, c, name, heads, fns[i])
			t.Logf("%s: upvalues %d (library), locals %d (EVAL main), %d (library function)",
				name, l.fnUpvalues, l.evalLocals, l.fnLocals)
			if room := luaMaxUpvalues - l.fnUpvalues; room < minUpvalueRoom {
				t.Errorf("%s reads %d upvalues as a library function: %d under Lua's %d, want at least %d",
					name, l.fnUpvalues, room, luaMaxUpvalues, minUpvalueRoom)
			}
			for _, n := range []struct {
				what   string
				locals int
			}{{"run by EVAL", l.evalLocals}, {"as a library function", l.fnLocals}} {
				if room := luaMaxLocals - n.locals; room < minLocalRoom {
					t.Errorf("%s %s has %d locals: %d under Lua's %d, want at least %d",
						name, n.what, n.locals, room, luaMaxLocals, minLocalRoom)
				}
			}
		})
	}
	t.Run("library", func(t *testing.T) {
		all := strings.Join(fns, "")
		locals := luaMaxLocals - room(t, c, "local variables", func(k int) string {
			return heads + padLocals(k) + all
		})
		t.Logf("library chunk: locals %d", locals)
		if room := luaMaxLocals - locals; room < minLocalRoom {
			t.Errorf("the library chunk has %d locals: %d under Lua's %d, want at least %d",
				locals, room, luaMaxLocals, minLocalRoom)
		}
	})
}
