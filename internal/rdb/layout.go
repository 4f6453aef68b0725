package rdb

import (
	"fmt"
	"regexp"
	"strings"
)

// A layout is the order of the values of one part of a script call: a
// script's ARGV, one record among them (an ending of the end script), or
// one row of a reply (a taking handed out by a take). It is declared once,
// here in Go, as ordered field names. Go places values by name (put, set,
// done) and finds them by name (index). The loader gives every script
// whose files name a layout as LAYOUT.<NAME> a Lua table of the same
// names, generated from the declaration and defined before the script's
// code (see assembleParts):
//
//	LAYOUT.TAKE = {worker = 1, max = 2, ..., N = 17}
//
// A file binds the layouts it reads to locals of the same name and reads
// by name:
//
//	local TAKE = LAYOUT.TAKE
//	if now_ms() >= tonumber(ARGV[TAKE.deadline]) then
//
// and a record at i reads ARGV[i + REC.kind]. N is the layout's width
// (fields are lower case, so no field is named N). Positions appear in
// neither Go nor Lua code, so reordering or adding a field changes both
// sides at once (TestLayoutRoundTrip). A field Go does not declare would
// read nil in Lua (Redis 7 loads a library where setmetatable is not
// reachable, so the tables cannot refuse it): TestLayoutNamesInLua checks
// every NAME.field the Lua files read against the declarations.
//
// All layouts hang off the one table LAYOUT, and each file binds the ones
// it reads where it reads them, because of two limits of Lua 5.1: a
// function reads at most 60 names of the functions around it (upvalues),
// and has at most 200 locals (a script run by EVAL has every include's
// names among its locals). TestScriptsStayWithinLuaLimits measures every
// script against both.
type layout struct {
	name   string         // its name in LAYOUT
	fields []string       // in order: field i is at Lua offset i+1
	pos    map[string]int // field -> its index in fields
}

// layoutUse finds the layouts a Lua file names (LAYOUT.<NAME>).
var layoutUse = regexp.MustCompile(`\bLAYOUT\.([A-Z][A-Z0-9_]*)`)

// layoutsNamed returns the layouts Lua code names (LAYOUT.<NAME>), in
// order of first mention, comments aside (the text after "--").
func layoutsNamed(code string) []string {
	var out []string
	seen := map[string]bool{}
	for _, line := range strings.Split(code, "\n") {
		line, _, _ = strings.Cut(line, "--")
		for _, m := range layoutUse.FindAllStringSubmatch(line, -1) {
			if !seen[m[1]] {
				seen[m[1]] = true
				out = append(out, m[1])
			}
		}
	}
	return out
}

// layoutTable starts the generated Lua of the layouts, once per script
// (and once in the library).
const layoutTable = "-- LAYOUT: the layouts declared in Go (internal/rdb/layout.go)\nlocal LAYOUT = {}\n"

var (
	layoutName = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
	fieldName  = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
)

// luaKeywords are the reserved words of Lua 5.1: no field may be one
// (TAKE.until would not parse).
var luaKeywords = map[string]bool{
	"and": true, "break": true, "do": true, "else": true, "elseif": true, "end": true,
	"false": true, "for": true, "function": true, "if": true, "in": true, "local": true,
	"nil": true, "not": true, "or": true, "repeat": true, "return": true, "then": true,
	"true": true, "until": true, "while": true, "goto": true,
}

// declare returns the layout name of fields, in order. A name that Lua
// could not use, or a field named twice, panics: a build defect, caught by
// every test.
func declare(name string, fields ...string) *layout {
	if !layoutName.MatchString(name) {
		panic(fmt.Sprintf("rdb: layout %q: want an upper-case Lua name", name))
	}
	l := &layout{name: name, fields: fields, pos: make(map[string]int, len(fields))}
	for i, f := range fields {
		if !fieldName.MatchString(f) || luaKeywords[f] {
			panic(fmt.Sprintf("rdb: layout %s: field %q: want a lower-case Lua name, not a keyword", name, f))
		}
		if _, dup := l.pos[f]; dup {
			panic(fmt.Sprintf("rdb: layout %s: field %q declared twice", name, f))
		}
		l.pos[f] = i
	}
	return l
}

// fieldsOf joins lists of fields (a layout made of shared parts).
func fieldsOf(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// index returns the position of field f among l's values (0-based: Lua's
// offset is one more). A field l does not have panics.
func (l *layout) index(f string) int {
	i, ok := l.pos[f]
	if !ok {
		panic(fmt.Sprintf("rdb: layout %s has no field %q", l.name, f))
	}
	return i
}

// width is how many values l has.
func (l *layout) width() int { return len(l.fields) }

// lua returns the Lua that defines l in LAYOUT: its table of offsets, and
// its width N.
func (l *layout) lua() string {
	var b strings.Builder
	fmt.Fprintf(&b, "LAYOUT.%s = {", l.name)
	for i, f := range l.fields {
		fmt.Fprintf(&b, "%s = %d, ", f, i+1)
	}
	fmt.Fprintf(&b, "N = %d}\n", len(l.fields))
	return b.String()
}

// values are the values of one layout in a call's arguments, being set by
// field: put starts them, set places each, done checks that none is
// missing and returns the arguments.
type values struct {
	l    *layout
	args []any // the call's arguments, l's values last
	at   int   // where l's values start in args
}

// put appends l's values to args, unset: set each, then take the
// arguments from done.
func (l *layout) put(args []any) values {
	at := len(args)
	for range l.fields {
		args = append(args, nil)
	}
	return values{l: l, args: args, at: at}
}

// set places x as field f. A field the layout does not have, or one set
// twice, panics.
func (v values) set(f string, x any) {
	i := v.at + v.l.index(f)
	if v.args[i] != nil {
		panic(fmt.Sprintf("rdb: layout %s: field %q set twice", v.l.name, f))
	}
	v.args[i] = x
}

// done returns the call's arguments with l's values. A field left unset
// (or set to nil) panics: a build defect, caught by every test that makes
// the call.
func (v values) done() []any {
	for i, x := range v.args[v.at:] {
		if x == nil {
			panic(fmt.Sprintf("rdb: layout %s: field %q not set", v.l.name, v.l.fields[i]))
		}
	}
	return v.args
}

// flag is a boolean field's value: 1 or 0 (Lua compares with '1').
func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}

// layouts are the declared layouts, by name: those a Lua file may name
// as LAYOUT.<NAME>.
var layouts = layoutsByName(takeArgv, takenRow, endArgv, endRecord, recChild, recStage, recBatch,
	batchMember, fanOutChild, endedRow, stoppedRow, endReply)

func layoutsByName(ls ...*layout) map[string]*layout {
	out := make(map[string]*layout, len(ls))
	for _, l := range ls {
		if _, dup := out[l.name]; dup {
			panic("rdb: two layouts named " + l.name)
		}
		out[l.name] = l
	}
	return out
}
