package rdb

import (
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// Hooks for layout_test.go (package rdb_test, which has the package's
// Redis), and the checks of the layouts that need no Redis.

// LayoutNames returns the names of the declared layouts, sorted.
func LayoutNames() []string {
	var out []string
	for name := range layouts {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// LayoutFields returns the fields of layout name, in order.
func LayoutFields(name string) []string { return append([]string(nil), layouts[name].fields...) }

// AssembleLua returns the Lua of a script whose text is body, as load
// builds it: the includes it names and the layouts it reads before it.
func AssembleLua(body string) (string, error) {
	head, rest, err := assembleText("test.lua", body, map[string]bool{})
	return head + rest, err
}

// TakeArgv returns the take script's ARGV for a, as TakeWait sends it.
func TakeArgv(q QueueKeys, a TakeArgs, safe bool) []any { return takeCall(nil, q, a, safe) }

// EndArgv returns the end script's ARGV for es and the take t, as
// EndTakeWait sends it.
func EndArgv(q QueueKeys, retentionMs int64, t TakeArgs, safe bool, es []Ending) []any {
	args := endCall(nil, q, retentionMs, t, safe)
	for _, e := range es {
		args = appendRecord(args, e)
	}
	return args
}

// DecodeTaken is decodeTaken: the take's reply read as Take reads it.
func DecodeTaken(vals []any, a TakeArgs) ([]Taken, LimitWait, error) { return decodeTaken(vals, a) }

// DecodeEnded is decodeEnded: the end's reply read as End reads it.
func DecodeEnded(reply []any, es []Ending, t TakeArgs) ([]Ended, []Taken, LimitWait, error) {
	return decodeEnded(reply, es, t)
}

// panics returns what f panicked with ("" when it did not).
func panics(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	f()
	return ""
}

// A layout Lua could not use, or a value left out, is a build defect that
// fails loudly: declare panics at package init, done at the first call.
func TestLayoutMisuseFails(t *testing.T) {
	t.Parallel()
	l := declare("T", "a", "b")
	for _, c := range []struct {
		name, want string
		f          func()
	}{
		{"lower-case name", `layout "t"`, func() { declare("t", "a") }},
		{"upper-case field", `field "A"`, func() { declare("T", "A") }},
		{"keyword field", `field "until"`, func() { declare("T", "worker", "until") }},
		{"field N (the width)", `field "N"`, func() { declare("T", "N") }},
		{"field twice", `"a" declared twice`, func() { declare("T", "a", "b", "a") }},
		{"field left unset", `T: field "b" not set`, func() {
			v := l.put([]any{"before"})
			v.set("a", 1)
			v.done()
		}},
		{"field set to nil", `T: field "a" not set`, func() {
			v := l.put(nil)
			v.set("a", nil)
			v.set("b", 1)
			v.done()
		}},
		{"field set twice", `T: field "a" set twice`, func() {
			v := l.put(nil)
			v.set("a", 1)
			v.set("a", 2)
		}},
		{"unknown field", `T has no field "c"`, func() { l.put(nil).set("c", 1) }},
		{"unknown field read", `T has no field "c"`, func() { l.index("c") }},
	} {
		if got := panics(c.f); !strings.Contains(got, c.want) {
			t.Errorf("%s: panicked with %q, want it to say %q", c.name, got, c.want)
		}
	}
	// Set by name in any order, placed by the declaration, after what the
	// arguments held before.
	v := l.put([]any{"before"})
	v.set("b", 2)
	v.set("a", 1)
	if got := fmt.Sprint(v.done()); got != "[before 1 2]" {
		t.Errorf("put, set b, set a, done = %s, want [before 1 2]", got)
	}
}

// A script that names an undeclared layout does not load.
func TestLayoutUndeclaredFails(t *testing.T) {
	t.Parallel()
	_, _, err := assembleText("x.lua", "local X = LAYOUT.NO_SUCH\n", map[string]bool{})
	if err == nil || !strings.Contains(err.Error(), "no layout NO_SUCH") {
		t.Errorf("assemble of LAYOUT.NO_SUCH: err = %v, want one naming it", err)
	}
	// Comments do not count.
	head, _, err := assembleText("x.lua", "-- LAYOUT.NO_SUCH, LAYOUT.TAKE\nreturn 1\n", map[string]bool{})
	if err != nil || head != "" {
		t.Errorf("assemble of a comment naming layouts: head %q, err %v; want nothing", head, err)
	}
}

// luaSources returns every embedded Lua file, comments stripped (after
// "--": no layout name or ARGV subscript is ever in a string).
func luaSources(t *testing.T) map[string]string {
	t.Helper()
	files, err := fs.Glob(luaFiles, "lua/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	inc, err := fs.Glob(luaFiles, "lua/include/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range append(files, inc...) {
		b, err := luaFiles.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var code strings.Builder
		for _, line := range strings.SplitAfter(string(b), "\n") {
			if c, _, cut := strings.Cut(line, "--"); cut {
				line = c + "\n"
			}
			code.WriteString(line)
		}
		out[f] = code.String()
	}
	return out
}

var (
	// layoutBinding is `local A, B = LAYOUT.A, LAYOUT.B` (and more after).
	layoutBinding = regexp.MustCompile(`local ([A-Za-z_][A-Za-z0-9_, ]*?)\s*=\s*((?:LAYOUT\.[A-Z_]+\s*,\s*)*LAYOUT\.[A-Z_]+)`)
	// fieldRead is NAME.field, LAYOUT.NAME.field, or LAYOUT.NAME (then
	// the match is LAYOUT and NAME).
	fieldRead = regexp.MustCompile(`\b(?:LAYOUT\.)?([A-Z][A-Z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)`)
	// takeArgsRead is L.field: take_tasks reads a take's fields from
	// LAYOUT.TAKE or LAYOUT.END, passed as L.
	takeArgsRead = regexp.MustCompile(`\bL\.([A-Za-z_][A-Za-z0-9_]*)`)
)

// Lua reads a layout's fields by the names Go declares: a name Go does not
// declare would read nil (the tables cannot refuse it). Each layout is
// bound to a local of its own name, so that the names read through it are
// checked against the right declaration.
func TestLayoutNamesInLua(t *testing.T) {
	t.Parallel()
	used := map[string]bool{}
	for file, code := range luaSources(t) {
		for _, m := range layoutBinding.FindAllStringSubmatch(code, -1) {
			names, exprs := strings.Split(m[1], ","), strings.Split(m[2], ",")
			for i := 0; i < len(names) && i < len(exprs); i++ {
				name, expr := strings.TrimSpace(names[i]), strings.TrimSpace(exprs[i])
				if expr != "LAYOUT."+name {
					t.Errorf("%s: local %s = %s: bind a layout to its own name", file, name, expr)
				}
			}
		}
		for _, m := range fieldRead.FindAllStringSubmatch(code, -1) {
			l, ok := layouts[m[1]]
			if m[1] == "LAYOUT" {
				if _, ok := layouts[m[2]]; !ok {
					t.Errorf("%s: LAYOUT.%s: no such layout is declared", file, m[2])
				}
				used[m[2]] = true
				continue
			}
			if !ok {
				continue // not a layout
			}
			used[m[1]] = true
			if _, ok := l.pos[m[2]]; !ok && m[2] != "N" {
				t.Errorf("%s: %s.%s: %s declares %v", file, m[1], m[2], l.name, l.fields)
			}
		}
		for _, m := range takeArgsRead.FindAllStringSubmatch(code, -1) {
			for _, l := range []*layout{takeArgv, endArgv} {
				if _, ok := l.pos[m[1]]; !ok {
					t.Errorf("%s: L.%s: read from %s, which declares %v", file, m[1], l.name, l.fields)
				}
			}
		}
	}
	for name := range layouts {
		if !used[name] {
			t.Errorf("layout %s is declared but no script reads it", name)
		}
	}
}

// argvRead is a subscript of ARGV (or argv, as take_tasks gets it).
var argvRead = regexp.MustCompile(`\b(?:ARGV|argv)\[([^\]]*)\]`)

// The take and end scripts, and the take they share, read no argument by
// bare position: each subscript of ARGV names a layout's field (or N, a
// width), or is a record's start (its size), or a size read before.
func TestTakeAndEndReadArgvByName(t *testing.T) {
	t.Parallel()
	src := luaSources(t)
	byName := regexp.MustCompile(`\b[A-Z][A-Z0-9_]*\.[a-zA-Z_]+\b|\bL\.[a-z_]+\b`)
	for _, f := range []string{"lua/take.lua", "lua/end.lua", "lua/include/take.lua", "lua/include/ending.lua"} {
		code, ok := src[f]
		if !ok {
			t.Fatalf("%s is not embedded", f)
		}
		n := 0
		for _, m := range argvRead.FindAllStringSubmatch(code, -1) {
			n++
			if strings.TrimSpace(m[1]) == "i" || byName.MatchString(m[1]) {
				continue
			}
			t.Errorf("%s: ARGV[%s] reads by position", f, m[1])
		}
		if n == 0 {
			t.Errorf("%s reads no ARGV: the test reads the wrong file", f)
		}
	}
}

// The generated Lua of a layout is its fields at their offsets and its
// width, nothing else.
func TestLayoutLua(t *testing.T) {
	t.Parallel()
	l := declare("T", "worker", "max", "park_ms")
	want := "LAYOUT.T = {worker = 1, max = 2, park_ms = 3, N = 3}\n"
	if got := l.lua(); got != want {
		t.Errorf("lua() = %q, want %q", got, want)
	}
	// Each script gets LAYOUT once, then each layout it reads once, after
	// its includes, whatever file of it reads it.
	for _, sc := range scripts {
		n := strings.Count(sc.src, layoutTable)
		reads := layoutsNamed(sc.src)
		if (n == 1) != (len(reads) > 0) || n > 1 {
			t.Errorf("%s: LAYOUT defined %d times, layouts read: %v", sc.name, n, reads)
		}
		for _, name := range reads {
			if c := strings.Count(sc.src, layouts[name].lua()); c != 1 {
				t.Errorf("%s: layout %s defined %d times, want once", sc.name, name, c)
			}
		}
	}
}
