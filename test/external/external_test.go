// Package external checks the module's public surface from outside: the
// satellite packages (registry, heartbeat, recovery) and worqr must be usable
// by another module through exported names only.
package external

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// outsideMain uses every satellite constructor and the Keeper's lifecycle the
// way another module would. A change that makes any of them need a type of
// an internal package (which Go forbids other modules to import) breaks
// this build.
const outsideMain = `package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/worqr/worqr-go/heartbeat"
	"github.com/worqr/worqr-go/recovery"
	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/registry"
	"github.com/worqr/worqr-go/worqr"
)

// wallClock is a heartbeat.Clock written outside the module.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) NewTicker(d time.Duration) heartbeat.Ticker { return ticker{time.NewTicker(d)} }

type ticker struct{ t *time.Ticker }

func (t ticker) C() <-chan time.Time { return t.t.C }
func (t ticker) Stop()               { t.t.Stop() }

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := redisconn.NewPool(os.Getenv("REDIS_URL"), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer pool.Close()
	log := slog.Default()

	var pool2 registry.ConnGetter = pool
	reg, err := registry.New(pool2, "outside")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	queues := []registry.Queue{{Tag: "emails", Name: "emails"}, {Tag: "signup", Name: "mail"}}

	k := &heartbeat.Keeper{
		Registry: reg, Queues: queues, Interval: time.Second, TTL: 3 * time.Second,
		Logger: log, Clock: wallClock{},
		OnEvent: func(e heartbeat.Event) {
			switch e.Kind {
			case heartbeat.Registered, heartbeat.Lost, heartbeat.Failed:
				log.Info("keepalive", "kind", e.Kind, "worker_id", e.ID, "err", e.Err)
			}
		},
	}
	s, err := k.Start(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go k.Run(ctx)
	cur, changed := k.Current()
	var sess *heartbeat.Session = cur
	fmt.Println(s.ID(), sess.ID(), sess.Lost(), k.Fresh(), sess.Context().Err())
	select {
	case <-changed:
		fmt.Println("replaced, cause:", s.Cause(), heartbeat.ErrLost)
	default:
	}

	infos, err := reg.Describe(ctx, []string{s.ID()})
	if err == nil {
		var wi registry.WorkerInfo = infos[0]
		fmt.Println(wi.Host, wi.PID, wi.Started, wi.KeepaliveAge, wi.Queues)
	}
	ok, at, err := reg.Beat(ctx, s.ID(), 3*time.Second)
	fmt.Println(ok, at, err, s.Until())
	_, _ = reg.Alive(ctx, []string{s.ID()})
	_, _ = reg.KnownQueues(ctx)

	var rpool recovery.ConnGetter = pool
	rp, err := recovery.New(rpool, &recovery.Config{
		Namespace: "outside", Interval: recovery.MinInterval * 100, Holder: "outside", Logger: log,
		OnRecovered: func(r recovery.Recovered) { fmt.Println(r.Queue.Name, r.Workers, r.Requeued, r.Cancelled) },
		OnError:     func(err error) { fmt.Println(err) },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var recs []recovery.Recovered
	recs, err = rp.Pass(ctx)
	fmt.Println(len(recs), err)
	recs, err = rp.Sweep(ctx)
	fmt.Println(len(recs), err, recovery.SweepInterval)
	moved, err := rp.Move(ctx)
	fmt.Println(moved, err, recovery.MoveBatch)
	go rp.Run(ctx)

	insp, err := worqr.NewInspector(pool, &worqr.Config{Namespace: "outside"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	qs, err := insp.Queues(ctx)
	fmt.Println(len(qs), err)

	s.Retire(context.Canceled)
	_ = reg.Deregister(ctx, s.ID())
	_ = reg.Forget(ctx, []string{s.ID()})
}
`

// internalProbe imports an internal package: it must not build from another
// module, which proves the module above really is another one.
const internalProbe = `package probe

import "github.com/worqr/worqr-go/internal/rdb"

var _ = rdb.NewKeys
`

// goCmd runs the go command in dir with env and returns its combined output.
func goCmd(t *testing.T, dir string, env []string, args ...string) (string, error) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	cmd := exec.Command(goBin, args...)
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := goCmd(t, ".", os.Environ(), "env", name)
	if err != nil {
		t.Fatalf("go env %s: %v\n%s", name, err, out)
	}
	return strings.TrimSpace(out)
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSatellitePackagesBuildFromAnotherModule(t *testing.T) {
	gomod := goEnv(t, "GOMOD")
	if gomod == "" || gomod == os.DevNull {
		t.Fatalf("go env GOMOD = %q: the test must run inside the worqr-go module", gomod)
	}
	root := filepath.Dir(gomod)
	modcache := goEnv(t, "GOMODCACHE")
	goflags := strings.TrimSpace(goEnv(t, "GOFLAGS") + " -mod=mod")

	dir := t.TempDir() // outside the repository: a module of its own
	write(t, filepath.Join(dir, "go.mod"), "module example.com/outside\n\ngo 1.23\n\n"+
		"require github.com/worqr/worqr-go v0.0.0\n\n"+
		"replace github.com/worqr/worqr-go => "+root+"\n")
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "go.sum"), string(sum))
	write(t, filepath.Join(dir, "main.go"), outsideMain)

	// Only the module cache this machine already shares: no downloads.
	env := append(os.Environ(),
		"GOMODCACHE="+modcache, "GOFLAGS="+goflags, "GOWORK=off", "GOPROXY=off")

	// -e: tidy also looks for the test dependencies of dependencies (redigo's
	// tests import testify), which a fresh machine's cache need not hold;
	// what the build needs is checked by the build below.
	if out, err := goCmd(t, dir, env, "mod", "tidy", "-e"); err != nil {
		t.Fatalf("go mod tidy in the outside module: %v\n%s", err, out)
	}
	if out, err := goCmd(t, dir, env, "build", "-o", filepath.Join(dir, "outside"), "."); err != nil {
		t.Fatalf("the satellite packages do not build from another module with exported names only: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "outside")); err != nil {
		t.Fatalf("go build made no binary: %v", err)
	}

	// The control: the same module may not reach internal packages.
	write(t, filepath.Join(dir, "probe", "probe.go"), internalProbe)
	out, err := goCmd(t, dir, env, "build", "./probe")
	if err == nil || !strings.Contains(out, "use of internal package") {
		t.Fatalf("a package of the outside module imported internal/rdb: go build = %v\n%s\nwant a 'use of internal package' error", err, out)
	}
}
