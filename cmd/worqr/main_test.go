package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/redisconn"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/xid"

	"github.com/worqr/worqr-go/worqr"
)

// The tests run the real binary against a real redis-server: TestMain builds
// the one and starts the other (or uses WORQR_TEST_REDIS_URL).
var (
	binPath  string
	redisURL string
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "worqr-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer os.RemoveAll(dir)
	binPath = filepath.Join(dir, "worqr")
	if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the binary: %v\n%s", err, out)
		return 2
	}
	srv, err := redistest.Start() // or the server WORQR_TEST_REDIS_URL names
	if err != nil {
		fmt.Fprintln(os.Stderr, "redis:", err)
		return 2
	}
	defer srv.Stop()
	redisURL = srv.URL
	return m.Run()
}

// bundle is what a test works with: its own namespace, and the library's
// client and inspector on it to seed and check Redis state.
type bundle struct {
	t      *testing.T
	ns     string
	pool   *redis.Pool
	client *worqr.Client
	in     *worqr.Inspector
}

func setup(t *testing.T) *bundle {
	t.Helper()
	t.Parallel()
	pool, err := redisconn.NewPool(redisURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	ns := "clitest-" + xid.New().String()
	cfg := &worqr.Config{Namespace: ns}
	client, err := worqr.NewClient(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = in.DeleteNamespace(context.Background()) })
	return &bundle{t: t, ns: ns, pool: pool, client: client, in: in}
}

// result is what one run of the binary did.
type result struct {
	out, err string
	code     int
}

// run runs the binary with args in the bundle's namespace (through the
// environment, as an operator would), stdin as its standard input.
func (b *bundle) run(stdin string, args ...string) result {
	b.t.Helper()
	return b.runEnv([]string{"WORQR_REDIS_URL=" + redisURL, "WORQR_NAMESPACE=" + b.ns}, stdin, args...)
}

// runEnv is run with only env as the WORQR_ variables.
func (b *bundle) runEnv(env []string, stdin string, args ...string) result {
	b.t.Helper()
	return b.runFor(60*time.Second, env, stdin, args...)
}

// runFor runs the binary with only env as the WORQR_ variables and stdin
// as its input, killing it after d.
func (b *bundle) runFor(d time.Duration, env []string, stdin string, args ...string) result {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		b.t.Fatalf("running worqr %v: %v", args, err)
	}
	return result{out: out.String(), err: errb.String(), code: code}
}

// ok runs the binary and fails the test unless it exits 0.
func (b *bundle) ok(stdin string, args ...string) string {
	b.t.Helper()
	r := b.run(stdin, args...)
	if r.code != 0 {
		b.t.Fatalf("worqr %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.out, r.err)
	}
	return r.out
}

// cleanEnv is the test's environment without any WORQR_ variable, so a
// developer's own settings do not leak in.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WORQR_") {
			env = append(env, kv)
		}
	}
	return env
}

// patience bounds a wait for a state the binary reports only when asked
// (a run's status, a queue's counts).
const patience = 10 * time.Second

func (b *bundle) queue(q string) worqr.QueueInfo {
	b.t.Helper()
	qi, err := b.in.Queue(context.Background(), q)
	if err != nil {
		b.t.Fatal(err)
	}
	return *qi
}

// enqueue enqueues payloads to q and returns their ids.
func (b *bundle) enqueue(q string, payloads ...string) []string {
	b.t.Helper()
	var ids []string
	for _, p := range payloads {
		id, err := b.client.Enqueue(context.Background(), q, []byte(p), nil)
		if err != nil {
			b.t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// bury makes one dead task in q per error text: a worker allowed one
// attempt fails every task with its payload as the error. q must hold no
// other waiting task.
func (b *bundle) bury(q string, errs ...string) []string {
	b.t.Helper()
	before := b.queue(q).Dead
	ids := b.enqueue(q, errs...)
	died := make(chan struct{}, len(errs))
	w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{
		Config: worqr.Config{Namespace: b.ns},
		Queues: map[string]worqr.QueueConfig{q: {Concurrency: 4, MaxAttempts: 1, Handler: worqr.HandlerFunc(
			func(_ context.Context, t *worqr.Task) error { return errors.New(string(t.Payload)) })}},
		OnEvent: func(e worqr.Event) {
			if e.Kind == worqr.EventDead {
				died <- struct{}{}
			}
		},
	})
	if err != nil {
		b.t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		b.t.Fatal(err)
	}
	timeout := time.After(patience)
	for i := range errs {
		select {
		case <-died:
		case <-timeout:
			b.t.Fatalf("%d of %d tasks of %s died within %s", i, len(errs), q, patience)
		}
	}
	if got := b.queue(q).Dead; got != before+int64(len(errs)) {
		b.t.Fatalf("%s has %d dead tasks after %d dead events, want %d", q, got, len(errs), before+int64(len(errs)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		b.t.Fatal(err)
	}
	return ids
}

// runLines runs the binary, reads n lines of its stdout, then interrupts it
// and checks that it exits 0.
func (b *bundle) runLines(n int, args ...string) []string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = append(cleanEnv(), "WORQR_REDIS_URL="+redisURL, "WORQR_NAMESPACE="+b.ns)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var lines []string
	for len(lines) < n && sc.Scan() {
		lines = append(lines, sc.Text())
	}
	_ = cmd.Process.Signal(os.Interrupt)
	go func() {
		for sc.Scan() {
		}
	}()
	if err := cmd.Wait(); err != nil {
		b.t.Fatalf("worqr %v after an interrupt: %v\nstderr: %s", args, err, errb.String())
	}
	if len(lines) < n {
		b.t.Fatalf("worqr %v printed %d lines, want %d\nstderr: %s", args, len(lines), n, errb.String())
	}
	return lines
}

// runQuick runs the binary in b's namespace for at most d: a command that
// should have refused its input at once is killed (exit -1) instead of
// hanging the test.
func (b *bundle) runQuick(d time.Duration, args ...string) result {
	b.t.Helper()
	return b.runFor(d, []string{"WORQR_REDIS_URL=" + redisURL, "WORQR_NAMESPACE=" + b.ns}, "", args...)
}

func TestUsageErrorsExitTwoAndNameTheProblem(t *testing.T) {
	b := setup(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"queue", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"stats", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"stats", "-o", "yaml"}, `-o/--output "yaml": want table or json`},
		{[]string{"stats", "--history", "--minutes", "0"}, "--minutes 0: must be between 1 and 120"},
		{[]string{"stats", "--minutes", "5"}, "--minutes: only with --history"},
		{[]string{"stats", "--history", "--watch"}, "--history: not with --watch"},
		{[]string{"queue", "history"}, "missing argument <queue>"},
		{[]string{"task", "cancel", "emails"}, "missing argument <id>"},
		{[]string{"queue", "pause", "bad name"}, `<queue> "bad name"`},
		{[]string{"stats", "--redis-url", "http://x"}, "--redis-url"},
	} {
		r := b.run("", c.args...)
		if r.code != 2 || !strings.Contains(r.err, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, r.code, r.err, c.want)
		}
	}
}

// An error reads "worqr <command>: what went wrong": the library's own
// "worqr: " prefixes, and a repeat of the command's name, are dropped
// wherever the CLI wraps them (it read "worqr load: worqr: load: line 2:
// worqr: line is not one JSON value ...").
func TestErrorsCarryOnePrefix(t *testing.T) {
	b := setup(t)
	file := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(file, []byte("{\"n\":1}\n{oops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderrs []string
	r := b.run("", "load", file, "--queue", "jobs", "--format", "jsonl", "--name", "bad")
	first := strings.SplitN(r.err, "\n", 3)[1] // after the "loading ..." line
	if r.code != exitUsage || !strings.HasPrefix(first, "worqr load: line 2: line is not one JSON value (format jsonl); lines before it are enqueued") {
		t.Errorf("a bad line: exit %d, stderr %q; want 2 and \"worqr load: line 2: line is not one JSON value ...\"", r.code, r.err)
	}

	stderrs = append(stderrs, r.err)

	// An error from Redis, wrapped by the library and by the CLI.
	c := b.pool.Get()
	defer c.Close()
	if _, err := c.Do("SET", b.ns+":{reg}:queues", "not a set"); err != nil {
		t.Fatal(err)
	}
	r = b.run("", "stats")
	if r.code != 1 || !strings.HasPrefix(r.err, "worqr stats: queues: WRONGTYPE") {
		t.Errorf("stats over a broken key: exit %d, stderr %q; want 1 and \"worqr stats: queues: WRONGTYPE ...\"", r.code, r.err)
	}
	stderrs = append(stderrs, r.err)
	if _, err := c.Do("DEL", b.ns+":{reg}:queues"); err != nil {
		t.Fatal(err)
	}

	// A sentinel of the library, wrapped by the CLI's own words.
	b.ok("", "enqueue", "jobs", "x", "--unique-key", "k", "--unique-ttl", "1m")
	r = b.run("", "enqueue", "jobs", "y", "--unique-key", "k", "--unique-ttl", "1m")
	if r.code != 1 || !strings.HasPrefix(r.err, "worqr enqueue: duplicate task: unique key \"k\"") {
		t.Errorf("a duplicate: exit %d, stderr %q; want \"worqr enqueue: duplicate task: ...\"", r.code, r.err)
	}
	for _, out := range append(stderrs, r.err) {
		if strings.Contains(out, "worqr: ") {
			t.Errorf("stderr %q still carries the library's prefix", out)
		}
	}
}
