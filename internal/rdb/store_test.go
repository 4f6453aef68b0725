package rdb_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/types"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/worqr/worqr-go/internal/redistest"
	"golang.org/x/tools/go/packages"
)

// fakeTB records the errors a checker reports instead of failing.
type fakeTB struct {
	*testing.T
	errs []string
}

func (f *fakeTB) Errorf(format string, args ...any) {
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}

// The checks every store call of these tests runs through must catch what
// they are there for: script KEYS of two hash tags (redistest's pool), and
// a command on a connection asked for another tag, or asked for with no tag
// at all (routed).
func TestTagChecksCatchCrossTagCalls(t *testing.T) {
	t.Parallel()
	fake := &fakeTB{T: t}
	c, err := srv.TagCheckedPool(fake).GetContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, keys := range [][2]string{{"x:{a}:1", "x:{a}:2"}, {"x:{a}:1", "x:{b}:2"}} {
		if _, err := c.Do("EVAL", "return 1", 2, keys[0], keys[1]); err != nil {
			t.Fatal(err)
		}
	}
	if len(fake.errs) != 1 || !strings.Contains(fake.errs[0], `"a" and "b"`) {
		t.Errorf("TagCheckedPool reported %q, want one error for the keys of tags a and b", fake.errs)
	}

	fake.errs = nil
	ns := "x" + redistest.Namespace()
	r := routed{pool: srv.TagCheckedPool(t), t: fake, ns: ns}
	rc, err := r.GetContextForTag(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	for _, key := range []string{ns + ":{a}:k", ns + ":{b}:k", "other:{b}:k"} {
		if _, err := rc.Do("GET", key); err != nil {
			t.Fatal(err)
		}
	}
	if len(fake.errs) != 1 || !strings.Contains(fake.errs[0], ns+":{b}:k") {
		t.Errorf("routed reported %q, want one error for %s:{b}:k", fake.errs, ns)
	}
	fake.errs = nil
	if c, err := r.GetContext(context.Background()); err == nil {
		c.Close()
	}
	if len(fake.errs) != 1 {
		t.Errorf("routed.GetContext reported %q, want one error", fake.errs)
	}
}

const (
	module = "github.com/worqr/worqr-go"
	redigo = "github.com/gomodule/redigo/redis"
)

// commandSenders are the allowed non-test packages outside internal/rdb that
// may talk to Redis directly. Nothing else may.
var commandSenders = map[string]string{
	// The test harness: it starts redis-server, waits for it and reads
	// keys to compare states (SCAN); it is imported by tests only.
	module + "/internal/redistest": "test harness starting servers",
	// The benchmark binary measures Redis itself, outside the library: it
	// reads INFO (commands processed, CPU, memory) and DBSIZE around each
	// run, and empties its database (FLUSHDB) before one.
	module + "/cmd/worqr-bench": "benchmark binary reading INFO",
}

// harmless are the redigo methods that do not talk to Redis.
var harmless = map[string]bool{"Close": true, "Err": true}

// sendingFuncs are redigo's package-level functions that send or receive
// on a connection (or build a script to send).
var sendingFuncs = map[string]bool{
	"DoContext": true, "DoWithTimeout": true, "ReceiveContext": true, "ReceiveWithTimeout": true,
	"NewScript": true,
}

// moduleRoot is the directory of go.mod above the test's directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found")
		}
		dir = parent
	}
}

// loadModule loads the non-test files of every package of the module
// matching patterns, with types, from root; overlay adds or replaces files.
func loadModule(t *testing.T, root string, overlay map[string][]byte, patterns ...string) []*packages.Package {
	t.Helper()
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax |
			packages.NeedTypes | packages.NeedTypesInfo,
		Dir:     root,
		Tests:   false,
		Overlay: overlay,
	}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		t.Fatalf("loading the module: %v", err)
	}
	return pkgs
}

// redisUses returns, for each package outside internal/rdb, where its
// non-test code calls a redigo method other than Close and Err, or a redigo
// function that sends or receives. A package that does not type-check is
// reported too: it could hide a use.
func redisUses(pkgs []*packages.Package) []string {
	var out []string
	for _, p := range pkgs {
		if p.PkgPath == module+"/internal/rdb" || strings.HasPrefix(p.PkgPath, module+"/internal/rdb/") {
			continue
		}
		for _, e := range p.Errors {
			out = append(out, fmt.Sprintf("%s: cannot check: %v", p.PkgPath, e))
		}
		if p.TypesInfo == nil {
			continue
		}
		for _, f := range p.Syntax {
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				fn, ok := p.TypesInfo.Uses[sel.Sel].(*types.Func)
				if !ok || fn.Pkg() == nil || fn.Pkg().Path() != redigo {
					return true
				}
				sig, _ := fn.Type().(*types.Signature)
				isMethod := sig != nil && sig.Recv() != nil
				if (isMethod && !harmless[fn.Name()]) || (!isMethod && sendingFuncs[fn.Name()]) {
					what := "redis." + fn.Name()
					if isMethod {
						what = types.TypeString(sig.Recv().Type(), func(p *types.Package) string { return p.Name() }) +
							"." + fn.Name()
					}
					out = append(out, fmt.Sprintf("%s: %s: %s", p.PkgPath, p.Fset.Position(sel.Pos()), what))
				}
				return true
			})
		}
	}
	sort.Strings(out)
	return out
}

// Only internal/rdb sends Redis commands: the public packages and the
// binaries go through its Store, so that key names, fields and the routing
// by hash tag live in one place (docs/PROTOCOL.md, "One owner").
func TestOnlyRdbSendsCommands(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("loads and type-checks the whole module")
	}
	root := moduleRoot(t)
	pkgs := loadModule(t, root, nil, "./...")
	if len(pkgs) < 5 {
		t.Fatalf("loaded only %d packages", len(pkgs))
	}
	allowed := map[string]bool{}
	for _, use := range redisUses(pkgs) {
		pkg, _, _ := strings.Cut(use, ": ")
		if _, ok := commandSenders[pkg]; ok {
			allowed[pkg] = true
			continue
		}
		t.Errorf("only internal/rdb may send Redis commands: %s", use)
	}
	// An allowed package that no longer sends anything should leave the list.
	for pkg, why := range commandSenders {
		if !allowed[pkg] {
			t.Errorf("%s is allowed to send commands (%s) but does not: remove it from commandSenders", pkg, why)
		}
	}
}

// The check above must see a command sent from a public package: load
// package worqr with one more file that pings, and expect exactly that.
func TestOnlyRdbSendsCommandsSeesAPing(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("loads and type-checks package worqr")
	}
	root := moduleRoot(t)
	probe := filepath.Join(root, "worqr", "zz_probe_ping.go")
	src := []byte(`package worqr

import "github.com/gomodule/redigo/redis"

func probePing(c redis.Conn) error {
	_, err := c.Do("PING")
	return err
}

func probeScript(c redis.Conn) {
	s := redis.NewScript(0, "return 1")
	_, _ = redis.DoContext(c, nil, "GET", "k")
	_ = s
	_ = c.Close()
}
`)
	uses := redisUses(loadModule(t, root, map[string][]byte{probe: src}, module+"/worqr"))
	var found []string
	for _, u := range uses {
		if strings.Contains(u, "zz_probe_ping.go") {
			found = append(found, u[strings.LastIndex(u, " ")+1:])
		}
	}
	want := []string{"redis.Conn.Do", "redis.DoContext", "redis.NewScript"}
	sort.Strings(found)
	if strings.Join(found, " ") != strings.Join(want, " ") {
		t.Errorf("found %v in the probe, want %v (Close is allowed); all: %v", found, want, uses)
	}
}
