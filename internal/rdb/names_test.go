package rdb_test

import (
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// luaConstants reads the constants of lua/include/codes.lua: every line
// `local A, B = 1, 'b'` (after its comment is cut). A local it cannot read
// fails the test, so a constant written some other way is not skipped.
func luaConstants(t *testing.T) map[string]string {
	t.Helper()
	src, err := os.ReadFile("lua/include/codes.lua")
	if err != nil {
		t.Fatal(err)
	}
	value := regexp.MustCompile(`^(-?[0-9]+|'[^']*')$`)
	out := map[string]string{}
	for i, line := range strings.Split(string(src), "\n") {
		if c := strings.Index(line, "--"); c >= 0 {
			line = line[:c]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		decl, ok := strings.CutPrefix(line, "local ")
		names, vals, ok2 := strings.Cut(decl, "=")
		if !ok || !ok2 {
			t.Fatalf("codes.lua:%d: not a constant declaration: %q", i+1, line)
		}
		ns, vs := strings.Split(names, ","), strings.Split(vals, ",")
		if len(ns) != len(vs) {
			t.Fatalf("codes.lua:%d: %d names for %d values", i+1, len(ns), len(vs))
		}
		for j := range ns {
			n, v := strings.TrimSpace(ns[j]), strings.TrimSpace(vs[j])
			if !value.MatchString(v) {
				t.Fatalf("codes.lua:%d: %s = %s: not a number or a quoted string", i+1, n, v)
			}
			if _, dup := out[n]; dup {
				t.Fatalf("codes.lua:%d: %s declared twice", i+1, n)
			}
			out[n] = v // a string keeps its quotes: 'd' is not d
		}
	}
	return out
}

// goConstants type-checks names.go on its own and returns its exported
// constants with their values written as in Lua ('d' for a string).
func goConstants(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "names.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := new(types.Config).Check("rdb", fset, []*ast.File{f}, nil)
	if err != nil {
		t.Fatalf("type-checking names.go on its own: %v", err)
	}
	out := map[string]string{}
	for _, name := range pkg.Scope().Names() {
		c, ok := pkg.Scope().Lookup(name).(*types.Const)
		if !ok || !c.Exported() {
			continue
		}
		v := c.Val()
		if v.Kind() == constant.String {
			out[name] = "'" + constant.StringVal(v) + "'"
		} else {
			out[name] = v.ExactString()
		}
	}
	return out
}

// luaPrefixes map the prefix of a Lua name to the prefix of its Go twin:
// OUT_FANNED_OUT is OutcomeFannedOut, F_PID is FieldPID.
var luaPrefixes = map[string]string{"OUT_": "Outcome", "F_": "Field", "S_": "State", "R_": "Run"}

// twin is the Go name a Lua constant must have, lower-cased (Go initialisms
// like PID keep their own case).
func twin(lua string) (string, bool) {
	for lp, gp := range luaPrefixes {
		if rest, ok := strings.CutPrefix(lua, lp); ok {
			return strings.ToLower(gp + strings.ReplaceAll(rest, "_", "")), true
		}
	}
	return "", false
}

// The scripts and the Go code must agree on every return code, task-hash
// field, task state and run status: each side has its names (codes.lua,
// names.go), and this test fails when one side changes a value, adds a name
// or drops one.
func TestNamesMatchLua(t *testing.T) {
	t.Parallel()
	lua, gov := luaConstants(t), goConstants(t)
	if len(lua) < 40 || len(gov) < 40 {
		t.Fatalf("read %d Lua and %d Go constants: the parsers missed some", len(lua), len(gov))
	}
	byLower := map[string]string{}
	for name := range gov {
		byLower[strings.ToLower(name)] = name
	}
	matched := map[string]bool{}
	var luaNames []string
	for name := range lua {
		luaNames = append(luaNames, name)
	}
	sort.Strings(luaNames)
	for _, name := range luaNames {
		want, ok := twin(name)
		if !ok {
			t.Errorf("codes.lua: %s has none of the prefixes OUT_, F_, S_, R_", name)
			continue
		}
		goName, ok := byLower[want]
		if !ok {
			t.Errorf("codes.lua: %s = %s has no Go twin in names.go", name, lua[name])
			continue
		}
		matched[goName] = true
		if lua[name] != gov[goName] {
			t.Errorf("%s = %s in codes.lua, but %s = %s in names.go", name, lua[name], goName, gov[goName])
		}
	}
	for name, v := range gov {
		if !matched[name] {
			t.Errorf("names.go: %s = %s has no Lua twin in codes.lua", name, v)
		}
	}
}
