// Package docs_test type-checks every ```go block of README.md and
// docs/guide/*.md, so that an API change that breaks a documented example
// fails `make test` with the file and line of the block. Blocks of other
// languages (sh, js, yaml, text) are not checked.
//
// A block is one of two kinds:
//
//   - A complete file: its first word, after comments, is `package`. It is
//     checked as it stands, as the compiler would: unused variables and
//     imports are errors, and package main needs func main.
//   - A fragment: anything else. It is checked in a package of its own
//     beside the prelude below, which imports every package of the table
//     `imports` under its usual name and declares ctx, pool, client,
//     inspector and logger. A fragment that parses as file-level
//     declarations (types, funcs, vars) is placed at file level; any other
//     is the body of a `func() error`, so `return err` works in it. Unused
//     variables and imports are allowed in fragments (they are soft errors
//     of go/types); every other error fails the test.
//
// Each block is checked in the module that serves its imports: a block that
// imports (a complete file) or names (a fragment: `gateway.X`,
// `worqrprom.X`, `otelworqr.X`) a package of a nested module is checked from
// that module's directory, through the repository's go.work (which maps the
// modules' requires of each other to this tree); every other block from the
// root module, as its environment says (`make test` sets GOWORK=off there). The packages a
// module's blocks import are loaded from their export data with
// golang.org/x/tools/go/packages (one `go list` per module), and the blocks
// are type-checked with go/types.
//
// Run it alone with `go test ./test/docs`.
package docs_test

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
)

const module = "github.com/worqr/worqr-go"

// imports are the packages a fragment may name without importing them:
// name -> import path, and the nested module (directory) that serves it
// ("" for the root module, whose packages the nested modules see too).
var imports = []struct{ name, path, dir string }{
	{"context", "context", ""},
	{"errors", "errors", ""},
	{"fmt", "fmt", ""},
	{"io", "io", ""},
	{"log", "log", ""},
	{"slog", "log/slog", ""},
	{"http", "net/http", ""},
	{"os", "os", ""},
	{"signal", "os/signal", ""},
	{"strings", "strings", ""},
	{"syscall", "syscall", ""},
	{"testing", "testing", ""},
	{"time", "time", ""},
	{"redis", "github.com/gomodule/redigo/redis", ""},
	{"miniredis", "github.com/alicebob/miniredis/v2", ""},
	{"worqr", module + "/worqr", ""},
	{"worqrtest", module + "/worqrtest", ""},
	{"redisconn", module + "/redisconn", ""},
	{"remote", module + "/remote", ""},
	{"load", module + "/load", ""},
	{"consumer", module + "/consumer", ""},
	{"dash", module + "/dash", ""},
	{"recovery", module + "/recovery", ""},
	{"gateway", module + "/gateway", "gateway"},
	{"worqrprom", module + "/contrib/prometheus", "contrib/prometheus"},
	{"prometheus", "github.com/prometheus/client_golang/prometheus", "contrib/prometheus"},
	{"otelworqr", module + "/contrib/otel", "contrib/otel"},
	{"sdktrace", "go.opentelemetry.io/otel/sdk/trace", "contrib/otel"},
	{"goredis", module + "/contrib/goredis", "contrib/goredis"},
}

// rootOnly are the packages of imports that only the root module requires:
// a fragment checked in a nested module does not see them.
var rootOnly = map[string]bool{"github.com/alicebob/miniredis/v2": true}

// prelude is the second file of every fragment's package: the names a
// fragment may use without declaring them.
const prelude = `package doc

var (
	ctx       context.Context
	pool      *redis.Pool
	client    *worqr.Client
	inspector *worqr.Inspector
	logger    *slog.Logger
)
`

// docFiles are the Markdown files whose go blocks are checked, relative
// to the repository's root.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	guide, err := filepath.Glob(filepath.Join(root, "docs", "guide", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(guide) == 0 {
		t.Fatal("docs/guide has no .md file")
	}
	files := []string{"README.md"}
	for _, g := range guide {
		rel, _ := filepath.Rel(root, g)
		files = append(files, filepath.ToSlash(rel))
	}
	return files
}

// block is one ```go block: its text, and the Markdown file and line of
// its first line of code.
type block struct {
	file string
	line int
	text string
}

func (b block) pos() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// extract returns the ```go blocks of a Markdown file. A fence opens on a
// line that is "```go" once trimmed, and closes on the next line that is
// "```" once trimmed.
func extract(file string, data []byte) ([]block, error) {
	var (
		out  []block
		cur  *block
		text strings.Builder
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && trimmed == "```go":
			cur = &block{file: file, line: n + 1}
			text.Reset()
		case cur != nil && trimmed == "```":
			cur.text = text.String()
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			text.WriteString(line)
			text.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("%s: ```go block not closed", cur.pos())
	}
	return out, nil
}

// complete reports whether a block is a complete file (it starts with a
// package clause).
func complete(b block) bool {
	_, err := parser.ParseFile(token.NewFileSet(), "", b.text, parser.PackageClauseOnly)
	return err == nil
}

// nestedName matches a use (`name.Exported`) of a package of imports that a
// nested module serves.
var nestedName = func() *regexp.Regexp {
	var names []string
	for _, im := range imports {
		if im.dir != "" {
			names = append(names, im.name)
		}
	}
	return regexp.MustCompile(`\b(` + strings.Join(names, "|") + `)\.[A-Z]`)
}()

// moduleOf returns the directory, relative to the root, of the module a
// block is checked in, and the import paths it needs.
func moduleOf(b block) (dir string, paths []string, err error) {
	if complete(b) {
		f, err := parser.ParseFile(token.NewFileSet(), b.file, b.text, parser.ImportsOnly)
		if err != nil {
			return "", nil, err
		}
		for _, is := range f.Imports {
			p, _ := strconv.Unquote(is.Path.Value)
			paths = append(paths, p)
			for _, im := range imports {
				if im.path == p && im.dir != "" {
					dir = im.dir
				}
			}
		}
		return dir, paths, nil
	}
	for _, m := range nestedName.FindAllStringSubmatch(b.text, -1) {
		for _, im := range imports {
			if im.name == m[1] {
				dir = im.dir
			}
		}
	}
	for _, im := range imports {
		if im.dir == dir || im.dir == "" && (dir == "" || !rootOnly[im.path]) {
			paths = append(paths, im.path)
		}
	}
	return dir, paths, nil
}

// load returns the types of the packages at paths, and of everything they
// import, as seen from the module in dir (relative to root). A nested module
// requires the root module at its release version, which only the
// repository's go.work maps to this tree: it is loaded through that
// workspace even when the test runs with GOWORK=off, as `make test` runs the
// root module. The root module is loaded as the environment says.
func load(root, dir string, paths []string) (map[string]*types.Package, error) {
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedTypes | packages.NeedImports | packages.NeedDeps,
		Dir:  filepath.Join(root, dir),
	}
	if work := filepath.Join(root, "go.work"); dir != "" {
		if _, err := os.Stat(work); err == nil {
			cfg.Env = append(os.Environ(), "GOWORK="+work)
		}
	}
	pkgs, err := packages.Load(cfg, paths...)
	if err != nil {
		return nil, err
	}
	byPath := map[string]*types.Package{}
	var errs []string
	packages.Visit(pkgs, nil, func(p *packages.Package) {
		for _, e := range p.Errors {
			errs = append(errs, e.Error())
		}
		if p.Types != nil {
			byPath[p.PkgPath] = p.Types
		}
	})
	if len(errs) > 0 {
		return nil, fmt.Errorf("loading from %s: %s", dir, strings.Join(errs, "; "))
	}
	return byPath, nil
}

// check type-checks one block with the packages of its module and returns
// its errors, each prefixed with its Markdown file and line.
func check(b block, pkgs map[string]*types.Package) []string {
	fset := token.NewFileSet()
	var files []*ast.File
	strict := complete(b)
	if strict {
		// Leading newlines put each line of code at its Markdown line.
		src := strings.Repeat("\n", b.line-1) + b.text
		f, err := parser.ParseFile(fset, b.file, src, parser.ParseComments)
		if err != nil {
			return []string{err.Error()}
		}
		files = append(files, f)
	} else {
		var head strings.Builder
		head.WriteString("package doc\n\nimport (\n")
		for _, im := range imports {
			if _, ok := pkgs[im.path]; ok {
				fmt.Fprintf(&head, "\t%s %q\n", im.name, im.path)
			}
		}
		head.WriteString(")\n")
		directive := fmt.Sprintf("//line %s:%d:1\n", b.file, b.line)
		// File level first; else the body of a func() error.
		// The file is named "doc.go" (no directory), so that the //line
		// directive's relative path stays as written.
		src := head.String() + directive + b.text
		f, err := parser.ParseFile(fset, "doc.go", src, parser.ParseComments)
		if err != nil {
			src = head.String() + "func _() error {\n" + directive + b.text + "\nreturn nil\n}\n"
			f, err = parser.ParseFile(fset, "doc.go", src, parser.ParseComments)
		}
		if err != nil {
			return []string{err.Error()}
		}
		p, err := parser.ParseFile(fset, "prelude.go", head.String()+strings.TrimPrefix(prelude, "package doc\n"), 0)
		if err != nil {
			return []string{"prelude: " + err.Error()}
		}
		files = append(files, f, p)
	}
	var errs []string
	conf := types.Config{
		Importer: importerFunc(func(path string) (*types.Package, error) {
			if p, ok := pkgs[path]; ok {
				return p, nil
			}
			return nil, fmt.Errorf("package %s not loaded", path)
		}),
		Error: func(err error) {
			if te, ok := err.(types.Error); ok && te.Soft && !strict {
				return
			}
			errs = append(errs, err.Error())
		},
	}
	tp, _ := conf.Check("doc", fset, files, nil)
	if strict && tp != nil && files[0].Name.Name == "main" && tp.Scope().Lookup("main") == nil {
		errs = append(errs, b.pos()+": package main has no func main")
	}
	return errs
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

func TestGoBlocksCompile(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if mod, err := os.ReadFile(filepath.Join(root, "go.mod")); err != nil || !bytes.HasPrefix(mod, []byte("module "+module+"\n")) {
		t.Fatalf("%s is not the root of module %s (%v)", root, module, err)
	}
	byDir := map[string][]block{}
	need := map[string]map[string]bool{}
	total := 0
	for _, file := range docFiles(t, root) {
		data, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := extract(file, data)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			dir, paths, err := moduleOf(b)
			if err != nil {
				t.Errorf("%s: %v", b.pos(), err)
				continue
			}
			byDir[dir] = append(byDir[dir], b)
			if need[dir] == nil {
				need[dir] = map[string]bool{}
			}
			for _, p := range paths {
				need[dir][p] = true
			}
			total++
		}
	}
	if total == 0 {
		t.Fatal("no ```go block found")
	}
	dirs := make([]string, 0, len(byDir))
	for d := range byDir {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		name := dir
		if name == "" {
			name = "root"
		}
		t.Run(strings.ReplaceAll(name, "/", "_"), func(t *testing.T) {
			paths := make([]string, 0, len(need[dir]))
			for p := range need[dir] {
				paths = append(paths, p)
			}
			sort.Strings(paths)
			pkgs, err := load(root, dir, paths)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range byDir[dir] {
				for _, e := range check(b, pkgs) {
					t.Errorf("%s (block at %s)", e, b.pos())
				}
			}
			t.Logf("%d blocks checked in module %s", len(byDir[dir]), name)
		})
	}
}
