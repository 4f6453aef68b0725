package rdb

import (
	"crypto/sha1"
	"encoding/hex"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// Tests of the script loader (assemble): they read the embedded files
// themselves and check what load built from them, without Redis.

// allScripts are the scripts the package loads (load records each); every file of
// lua/*.lua must be one of them.
var allScripts = scripts

// luaFile is one embedded file split into the includes it names and the
// rest (what the loader copies).
type luaFile struct {
	includes []string
	body     string
}

func readLua(t *testing.T, file string) luaFile {
	t.Helper()
	b, err := luaFiles.ReadFile(file)
	if err != nil {
		t.Fatalf("reading %s: %v", file, err)
	}
	var f luaFile
	var body strings.Builder
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, includePrefix); ok {
			f.includes = append(f.includes, strings.Trim(strings.TrimSpace(rest), `"`))
			continue
		}
		body.WriteString(line)
	}
	f.body = body.String()
	return f
}

func includeFile(name string) string { return "lua/include/" + name + ".lua" }

// closure returns every include file reaches, directly or not.
func closure(t *testing.T, file string) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	var walk func(string)
	walk = func(f string) {
		for _, inc := range readLua(t, f).includes {
			if !seen[inc] {
				seen[inc] = true
				walk(includeFile(inc))
			}
		}
	}
	walk(file)
	return seen
}

// stripComments removes Lua comments (-- to the end of the line, outside
// quoted strings).
func stripComments(src string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(src, "\n") {
		var quote byte
		cut := len(line)
		for i := 0; i < len(line); i++ {
			c := line[i]
			switch {
			case quote != 0 && c == '\\':
				i++
			case quote != 0 && c == quote:
				quote = 0
			case quote == 0 && (c == '\'' || c == '"'):
				quote = c
			case quote == 0 && c == '-' && i+1 < len(line) && line[i+1] == '-':
				cut = i
				i = len(line)
			}
		}
		b.WriteString(line[:cut])
		if cut < len(line) && strings.HasSuffix(line, "\n") {
			b.WriteString("\n")
		}
	}
	return b.String()
}

var (
	localFunc = regexp.MustCompile(`(?m)^local function ([A-Za-z_][A-Za-z0-9_]*)\(`)
	localVars = regexp.MustCompile(`(?m)^local ([A-Za-z_][A-Za-z0-9_, ]*?)\s*(=|$)`)
)

// definitions returns the names an include defines at its top level.
func definitions(body string) []string {
	var out []string
	for _, m := range localFunc.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	for _, m := range localVars.FindAllStringSubmatch(body, -1) {
		if strings.HasPrefix(m[1], "function ") {
			continue
		}
		for _, n := range strings.Split(m[1], ",") {
			out = append(out, strings.TrimSpace(n))
		}
	}
	return out
}

func TestEveryLuaFileIsLoaded(t *testing.T) {
	t.Parallel()
	files, err := fs.Glob(luaFiles, "lua/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	var onDisk, loaded []string
	for _, f := range files {
		onDisk = append(onDisk, strings.TrimSuffix(path.Base(f), ".lua"))
	}
	for _, s := range allScripts {
		loaded = append(loaded, s.name)
	}
	sort.Strings(onDisk)
	sort.Strings(loaded)
	if strings.Join(onDisk, " ") != strings.Join(loaded, " ") {
		t.Errorf("lua/*.lua holds %v, the package loads %v", onDisk, loaded)
	}
}

// Each script's source is its includes, each once and before whatever uses
// it, then the script itself; its hash is the SHA-1 EVALSHA runs it by.
func TestScriptsAssembleTheirIncludes(t *testing.T) {
	t.Parallel()
	incFiles, err := fs.Glob(luaFiles, "lua/include/*.lua")
	if err != nil || len(incFiles) == 0 {
		t.Fatalf("no includes: %v", err)
	}
	for _, s := range allScripts {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			file := "lua/" + s.name + ".lua"
			main := readLua(t, file)
			if sum := sha1.Sum([]byte(s.src)); hex.EncodeToString(sum[:]) != s.hash {
				t.Errorf("hash %s is not the SHA-1 of the source", s.hash)
			}
			if !strings.HasSuffix(s.src, main.body) || strings.Count(s.src, main.body) != 1 {
				t.Errorf("the script's own text is not the end of its source, once")
			}
			if strings.Contains(s.src, includePrefix) {
				t.Errorf("an %q line was left in the source", includePrefix)
			}
			need := closure(t, file)
			if len(main.includes) > 0 && len(need) == 0 {
				t.Fatal("includes named but none found")
			}
			// Each include it needs is in, once; the others are not.
			pos := map[string]int{}
			for _, f := range incFiles {
				name := strings.TrimSuffix(path.Base(f), ".lua")
				body := readLua(t, f).body
				switch n := strings.Count(s.src, body); {
				case need[name] && n != 1:
					t.Errorf("include %q appears %d times, want once", name, n)
				case !need[name] && n != 0:
					t.Errorf("include %q appears %d times though nothing includes it", name, n)
				}
				pos[name] = strings.Index(s.src, body)
			}
			// Dependencies first: an include comes before every file
			// that names it.
			at := func(f string) int {
				if f == file {
					return len(s.src) - len(main.body)
				}
				return pos[strings.TrimSuffix(path.Base(f), ".lua")]
			}
			files := []string{file}
			for inc := range need {
				files = append(files, includeFile(inc))
			}
			for _, f := range files {
				for _, dep := range readLua(t, f).includes {
					if pos[dep] >= at(f) {
						t.Errorf("include %q comes after %s, which names it", dep, f)
					}
				}
			}
			// Defined before use: the first mention of anything an include
			// defines (comments aside) is its definition; a use before it
			// would read an undefined global when the script runs.
			code := stripComments(s.src)
			for inc := range need {
				for _, name := range definitions(stripComments(readLua(t, includeFile(inc)).body)) {
					word := regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `\b`)
					first := word.FindStringIndex(code)
					if first == nil {
						continue
					}
					lineStart := strings.LastIndexByte(code[:first[0]], '\n') + 1
					if !strings.HasPrefix(code[lineStart:], "local ") {
						t.Errorf("%s (from %q) is used before it is defined: %q", name, inc,
							strings.SplitN(code[lineStart:], "\n", 2)[0])
					}
				}
			}
		})
	}
}

// Every file uses only what it defines or includes itself (directly or
// through its includes), never what a sibling include of the script happens
// to bring: each file declares what it needs.
func TestEachFileIncludesWhatItUses(t *testing.T) {
	t.Parallel()
	defined := map[string]string{} // name -> include defining it
	incFiles, _ := fs.Glob(luaFiles, "lua/include/*.lua")
	for _, f := range incFiles {
		inc := strings.TrimSuffix(path.Base(f), ".lua")
		for _, name := range definitions(stripComments(readLua(t, f).body)) {
			if other, dup := defined[name]; dup {
				t.Errorf("%s is defined by both %q and %q", name, other, inc)
			}
			defined[name] = inc
		}
	}
	all, _ := fs.Glob(luaFiles, "lua/*.lua")
	for _, f := range append(all, incFiles...) {
		own := strings.TrimSuffix(path.Base(f), ".lua")
		code := stripComments(readLua(t, f).body)
		reach := closure(t, f)
		for name, inc := range defined {
			if inc == own && strings.HasPrefix(f, "lua/include/") {
				continue
			}
			if regexp.MustCompile(`\b`+regexp.QuoteMeta(name)+`\b`).MatchString(code) && !reach[inc] {
				t.Errorf("%s uses %s from %q without including it", f, name, inc)
			}
		}
	}
}

func TestMissingIncludeFails(t *testing.T) {
	t.Parallel()
	// assemble reads an include the way it reads a script: a name with no
	// file behind it is an error naming the file...
	_, err := assemble(includeFile("no-such-include"), map[string]bool{})
	if err == nil || !strings.Contains(err.Error(), "lua/include/no-such-include.lua") {
		t.Errorf("assemble of a missing include: err = %v, want one naming the file", err)
	}
	// ...and load, run while the package initializes, panics on it.
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(r.(string), "no-such-script") {
			t.Errorf("load of a missing script: recovered %v, want a panic naming it", r)
		}
	}()
	load("no-such-script", 0)
}

// An include already emitted for a script is not emitted again, even when a
// later file names it.
func TestAssembleEmitsAnIncludeOnce(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	first, err := assemble(includeFile("fail"), seen)
	if err != nil {
		t.Fatal(err)
	}
	for _, inc := range []string{"codes", "time", "cfg", "finalize", "bury"} {
		if !seen[inc] {
			t.Errorf("fail includes %q (directly or not), not marked seen", inc)
		}
	}
	again, err := assemble(includeFile("bury"), seen)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(again, readLua(t, includeFile("codes")).body) {
		t.Error("codes emitted a second time")
	}
	if !strings.Contains(first, readLua(t, includeFile("codes")).body) {
		t.Error("codes missing from the first assembly")
	}
}
