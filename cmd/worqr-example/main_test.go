package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/worqr/worqr-go/worqr"
)

// childMarker tells a test binary re-executed by the demo to play the
// worqr-example binary instead of running tests.
const childMarker = "WORQR_EXAMPLE_TEST_BINARY"

func TestMain(m *testing.M) {
	if os.Getenv(childMarker) == "1" {
		os.Exit(run(context.Background(), os.Args[1:], stdio{out: os.Stdout, err: os.Stderr, getenv: os.Getenv}))
	}
	os.Exit(m.Run())
}

// env is a fake environment.
type env map[string]string

func (e env) get(k string) string { return e[k] }

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func runArgs(t *testing.T, e env, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb syncBuffer
	code = run(context.Background(), args, stdio{out: &out, err: &errb, getenv: e.get})
	return code, out.String(), errb.String()
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     env
		code    int
		stdout  string // substring
		stderr  string // substring
		noRedis bool
	}{
		{name: "top help", args: []string{"--help"}, code: 0, stdout: "worker    serve queues"},
		{name: "help word", args: []string{"help"}, code: 0, stdout: "Subcommands:"},
		{name: "help of a subcommand", args: []string{"help", "enqueue"}, code: 0, stdout: "enqueued <queue> <task_id>"},
		{name: "subcommand help", args: []string{"worker", "--help"}, code: 0, stdout: "took <queue> <task_id> <pid> <attempt> <crashes>"},
		{name: "worker help names the pid of done", args: []string{"worker", "--help"}, code: 0, stdout: "done <queue> <task_id> <pid>\n"},
		{name: "worker help names the dead workers", args: []string{"worker", "--help"}, code: 0, stdout: "recovered <queue> <count> <worker_id>[,<worker_id>...]"},
		{name: "worker help names --timestamps", args: []string{"worker", "--help"}, code: 0, stdout: "-timestamps"},
		{name: "top help lists task", args: []string{"--help"}, code: 0, stdout: "task      print what Redis holds about one task"},
		{name: "help of task", args: []string{"help", "task"}, code: 0, stdout: "payload_bytes <n>"},
		{name: "task needs redis", args: []string{"task", "q", "id"}, code: 2, stderr: "--redis-url is required"},
		{name: "task needs two arguments", args: []string{"task", "--redis-url", "redis://x", "q"}, code: 2, stderr: "want two arguments, <queue> <task_id>; got 1"},
		{name: "task takes no third argument", args: []string{"task", "--redis-url", "redis://x", "q", "id", "more"}, code: 2, stderr: "got 3"},
		{name: "task bad format", args: []string{"task", "--redis-url", "redis://x", "q", "id", "-o", "xml"}, code: 2, stderr: `-o "xml": want text or json`},
		{name: "task bad queue", args: []string{"task", "--redis-url", "redis://x", "a{b", "id"}, code: 2, stderr: `queue name "a{b"`},
		{name: "unknown subcommand", args: []string{"bogus"}, code: 2, stderr: `unknown subcommand "bogus"`},
		{name: "unknown flag", args: []string{"stats", "--bogus"}, code: 2, stderr: "-bogus"},
		{name: "stray argument", args: []string{"stats", "--redis-url", "redis://x", "more"}, code: 2, stderr: `unexpected argument "more"`},
		{name: "redis url required", args: []string{"worker"}, code: 2, stderr: "--redis-url is required (or set WORQR_REDIS_URL)"},
		{name: "bad url flag", args: []string{"enqueue", "--redis-url", "http://x"}, code: 2, stderr: "--redis-url: "},
		{name: "bad url env", args: []string{"stats"}, env: env{envRedisURL: "tcp://x"}, code: 2, stderr: "WORQR_REDIS_URL: "},
		{name: "bad namespace env", args: []string{"stats", "--redis-url", "redis://x"}, env: env{envNamespace: "a:b"}, code: 2, stderr: `WORQR_NAMESPACE "a:b" has forbidden character ':'`},
		{name: "bad namespace flag", args: []string{"stats", "--redis-url", "redis://x", "--namespace", "a{b"}, env: env{envNamespace: "ok"}, code: 2, stderr: `--namespace "a{b" has forbidden`},
		{name: "bad queue", args: []string{"enqueue", "--redis-url", "redis://x", "--queue", "a b"}, code: 2, stderr: `--queue: queue name "a b"`},
		{name: "empty queue in list", args: []string{"worker", "--redis-url", "redis://x", "--queues", "a,"}, code: 2, stderr: "--queues"},
		{name: "queue twice", args: []string{"worker", "--redis-url", "redis://x", "--queues", "a,a"}, code: 2, stderr: `queue "a" is listed twice`},
		{name: "bad count", args: []string{"enqueue", "--redis-url", "redis://x", "--count", "0"}, code: 2, stderr: "--count (0)"},
		{name: "bad concurrency", args: []string{"worker", "--redis-url", "redis://x", "--concurrency", "0"}, code: 2, stderr: "--concurrency (0)"},
		{name: "bad work time", args: []string{"worker", "--redis-url", "redis://x", "--work-time", "soon"}, code: 2, stderr: "-work-time"},
		{name: "bad duration env", args: []string{"worker", "--redis-url", "redis://x"}, env: env{envHeartbeatTTL: "3"}, code: 2, stderr: `WORQR_HEARTBEAT_TTL: "3" is not a duration`},
		{name: "negative duration env", args: []string{"demo"}, env: env{envPollInterval: "-1s"}, code: 2, stderr: "WORQR_POLL_INTERVAL"},
		{name: "ttl not above interval", args: []string{"worker", "--redis-url", "redis://x"}, env: env{envHeartbeatTTL: "1s"}, code: 2, stderr: "WORQR_HEARTBEAT_TTL: worqr: HeartbeatTTL (1s) must be greater than HeartbeatInterval (1s)"},
		{name: "bad log level", args: []string{"stats", "--redis-url", "redis://x"}, env: env{envLogLevel: "loud"}, code: 2, stderr: `WORQR_LOG_LEVEL: "loud"`},
		{name: "redis down", args: []string{"stats", "--redis-url", "redis://127.0.0.1:1"}, code: 1, stderr: "cannot reach Redis at redis://127.0.0.1:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env == nil {
				tc.env = env{}
			}
			code, stdout, stderr := runArgs(t, tc.env, tc.args...)
			if code != tc.code {
				t.Errorf("exit code %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, stdout, stderr)
			}
			if !strings.Contains(stdout, tc.stdout) {
				t.Errorf("stdout does not hold %q:\n%s", tc.stdout, stdout)
			}
			if !strings.Contains(stderr, tc.stderr) {
				t.Errorf("stderr does not hold %q:\n%s", tc.stderr, stderr)
			}
		})
	}
}

// docs/guide/production.md says the binaries never print the password of a
// Redis URL; --help shows each flag's default, which is the variable's value.
func TestHelpHidesPasswords(t *testing.T) {
	e := env{envRedisURL: "redis://ops:s3cret-url@127.0.0.1:6379/0",
		envRedisCluster:  "redis://ops:s3cret-seed@10.0.0.1:7000,10.0.0.2:7000",
		envRedisSentinel: "mymaster@redis://ops:s3cret-sent@10.0.0.1:26379,10.0.0.2:26379"}
	for _, c := range commands() {
		_, stdout, stderr := runArgs(t, e, c.name, "--help")
		if out := stdout + stderr; strings.Contains(out, "s3cret") {
			t.Errorf("%s --help prints a password:\n%s", c.name, out)
		} else if c.name != "demo" && !strings.Contains(out, "redis://ops:xxxxx@127.0.0.1:6379/0") {
			t.Errorf("%s --help does not show the URL's default, redacted:\n%s", c.name, out)
		}
	}
}

func TestEventLine(t *testing.T) {
	for _, tc := range []struct {
		e    worqr.Event
		want string
	}{
		{worqr.Event{Kind: worqr.EventRegistered, WorkerID: "w1"}, "registered w1"},
		{worqr.Event{Kind: worqr.EventDone, Queue: "q", TaskID: "t1", PID: "7"}, "done q t1 7"},
		{worqr.Event{Kind: worqr.EventDone, Queue: "q", TaskID: "t1", PID: "8", Err: errors.New("boom")}, "done q t1 8"},
		{worqr.Event{Kind: worqr.EventDone, Queue: "q", TaskID: "t1"}, "done q t1 -"},
		{worqr.Event{Kind: worqr.EventCancelled, Queue: "q", TaskID: "t1"}, "cancelled q t1"},
		{worqr.Event{Kind: worqr.EventLost, Queue: "q", TaskID: "t1", PID: "7"}, "lost q t1 7"},
		{worqr.Event{Kind: worqr.EventKeepaliveLost, WorkerID: "w1"}, "keepalive_lost w1"},
		{worqr.Event{Kind: worqr.EventRecovered, Queue: "q", Count: 3, DeadWorkers: []string{"w1"}}, "recovered q 3 w1"},
		{worqr.Event{Kind: worqr.EventRecovered, Queue: "q", Count: 3, DeadWorkers: []string{"w1", "w2"}}, "recovered q 3 w1,w2"},
		{worqr.Event{Kind: worqr.EventRecovered, Queue: "q", Count: 3}, "recovered q 3 -"},
		{worqr.Event{Kind: worqr.EventGivenBack, Queue: "q", TaskID: "t1"}, ""},
		{worqr.Event{Kind: worqr.EventStopRequeued, Queue: "q", Count: 1}, ""},
		{worqr.Event{Kind: worqr.EventError, Err: errors.New("x")}, ""},
		{worqr.Event{Kind: worqr.EventDead, Queue: "q", TaskID: "t1"}, "dead q t1"},
		{worqr.Event{Kind: worqr.EventRetry, Queue: "q", TaskID: "t1"}, "retry q t1"},
	} {
		if got := strings.Join(eventLine(tc.e), " "); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.e.Kind, got, tc.want)
		}
	}
}

func TestLineWriterNeverInterleaves(t *testing.T) {
	var buf syncBuffer
	lw := &lineWriter{w: &buf}
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 20; j++ {
				_ = lw.line("took", "q", "abcdefghijklmnopqrst", "12", "1")
			}
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 1000 {
		t.Fatalf("%d lines, want 1000", len(lines))
	}
	for _, l := range lines {
		if l != "took q abcdefghijklmnopqrst 12 1" {
			t.Fatalf("mangled line %q", l)
		}
	}
}

// startMiniredis returns the URL of an embedded Redis whose clock follows
// real time.
func startMiniredis(t *testing.T) string {
	t.Helper()
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	stop := runClock(m, clockStep)
	t.Cleanup(func() {
		stop()
		m.Close()
	})
	return "redis://" + m.Addr()
}

// lineReader collects the lines a subcommand writes.
type lineReader struct {
	w     *io.PipeWriter
	lines chan string
}

func newLineReader() *lineReader {
	r, w := io.Pipe()
	lr := &lineReader{w: w, lines: make(chan string, 1000)}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lr.lines <- sc.Text()
		}
		close(lr.lines)
	}()
	return lr
}

// next returns the next line that starts with prefix, skipping others.
func (lr *lineReader) next(t *testing.T, prefix string) []string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-lr.lines:
			if !ok {
				t.Fatalf("output ended before a %q line", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return strings.Fields(l)
			}
		case <-timeout:
			t.Fatalf("no %q line within 10s", prefix)
		}
	}
}

// startWorker runs the worker subcommand until the test ends.
func startWorker(t *testing.T, url, ns string, args ...string) *lineReader {
	t.Helper()
	return startWorkerEnv(t, env{}, url, ns, args...)
}

// startWorkerEnv is startWorker with the environment e.
func startWorkerEnv(t *testing.T, e env, url, ns string, args ...string) *lineReader {
	t.Helper()
	lr := newLineReader()
	ctx, cancel := context.WithCancel(context.Background())
	var errb syncBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, append([]string{"worker", "--redis-url", url, "--namespace", ns, "--grace", "2s"}, args...),
			stdio{out: lr.w, err: &errb, getenv: e.get})
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("worker exit code %d; stderr:\n%s", code, errb.String())
		} else if t.Failed() {
			t.Logf("worker stderr:\n%s", errb.String())
		}
		lr.w.Close()
	})
	return lr
}

func TestWorkerEnqueueStats(t *testing.T) {
	url := startMiniredis(t)
	ns := "t-" + strings.ReplaceAll(t.Name(), "/", "-")
	e := env{envRedisURL: url, envNamespace: ns}

	code, stdout, stderr := runArgs(t, e, "enqueue", "--queue", "fast", "--count", "3", "--batch", "--payload", "x")
	if code != 0 {
		t.Fatalf("enqueue: exit %d: %s", code, stderr)
	}
	var ids []string
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 || f[0] != "enqueued" || f[1] != "fast" {
			t.Fatalf("bad enqueue line %q", l)
		}
		ids = append(ids, f[2])
	}
	if len(ids) != 3 {
		t.Fatalf("got %d ids, want 3", len(ids))
	}
	code, stdout, _ = runArgs(t, e, "stats", "--queues", "fast")
	if code != 0 || !regexp.MustCompile(`(?m)^queue fast waiting 3 scheduled 0 active 0 dead 0 paused false latency_ms \d+\nworkers 0\n`).MatchString(stdout) {
		t.Fatalf("stats before the worker: exit %d:\n%s", code, stdout)
	}

	lr := startWorker(t, url, ns, "--queues", "fast,slow", "--concurrency", "2", "--work-time", "20ms")
	if f := lr.next(t, "registered "); len(f) != 2 {
		t.Fatalf("bad registered line %v", f)
	}
	took, done := map[string]string{}, map[string]bool{} // task id -> pid of its taking
	for len(done) < 3 {
		select {
		case l := <-lr.lines:
			f := strings.Fields(l)
			switch f[0] {
			case "took":
				if len(f) != 6 || f[1] != "fast" || f[3] == "-" || f[4] != "1" || f[5] != "0" {
					t.Fatalf("bad took line %q", l)
				}
				took[f[2]] = f[3]
			case "done":
				if len(f) != 4 || took[f[2]] == "" {
					t.Fatalf("done before took, or bad: %q", l)
				}
				if f[3] != took[f[2]] {
					t.Fatalf("done line %q: pid %s, want %s of the took line", l, f[3], took[f[2]])
				}
				done[f[2]] = true
			default:
				t.Fatalf("unexpected line %q", l)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d tasks done", len(done))
		}
	}
	for _, id := range ids {
		if !done[id] {
			t.Errorf("task %s not done", id)
		}
	}
	code, stdout, _ = runArgs(t, e, "stats")
	if code != 0 || !regexp.MustCompile(`(?m)^queue fast waiting 0 scheduled 0 active 0 dead 0 paused false latency_ms \d+\n`+
		`queue slow waiting 0 scheduled 0 active 0 dead 0 paused false latency_ms \d+\nworkers 1\nworker \S+ alive\n`).MatchString(stdout) {
		t.Fatalf("stats with the worker: exit %d:\n%s", code, stdout)
	}
}

func TestWorkerCancelled(t *testing.T) {
	url := startMiniredis(t)
	ns := "t-" + t.Name()
	lr := startWorker(t, url, ns, "--queues", "slow", "--work-time", "1m")
	lr.next(t, "registered ")

	code, stdout, stderr := runArgs(t, env{envNamespace: ns}, "enqueue", "--redis-url", url, "--queue", "slow")
	if code != 0 {
		t.Fatalf("enqueue: exit %d: %s", code, stderr)
	}
	id := strings.Fields(stdout)[2]
	if f := lr.next(t, "took "); f[2] != id {
		t.Fatalf("took %v, want task %s", f, id)
	}
	pool, err := newPool(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Cancel(context.Background(), "slow", id)
	if err != nil || st != worqr.CancelRequested {
		t.Fatalf("Cancel = %v, %v; want requested", st, err)
	}
	if f := lr.next(t, "cancelled "); strings.Join(f, " ") != "cancelled slow "+id {
		t.Fatalf("got %v", f)
	}
}

// TestDemo runs the demo as `worqr-example` would, with this test binary
// standing in for the child worker process.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo takes a few seconds")
	}
	t.Setenv(childMarker, "1")
	code, stdout, stderr := runArgs(t, env{})
	if code != 0 {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"no WORQR_REDIS_URL: using an embedded in-process Redis (miniredis)",
		"removed, no worker will ever get it",
		"reaper recovered 4 tasks",
		"summary: enqueued 31, done 30, recovered 4, cancelled 1, elapsed",
		"flow guild-access: 3 runs done, each stage and child ended once, each run found by userId",
		`state: access=granted membership=member notified="discord=done telegram=done" rewards=discord,telegram userId=user-1`,
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout does not hold %q:\n%s", want, stdout)
		}
	}
}

func TestLineWriterTimestamps(t *testing.T) {
	var buf syncBuffer
	at := time.Date(2025, 1, 2, 4, 4, 5, 600, time.FixedZone("UTC+1", 3600))
	lw := &lineWriter{w: &buf, now: func() time.Time { return at }}
	if err := lw.line("took", "q", "t1", "7", "1", "0"); err != nil {
		t.Fatal(err)
	}
	if got, want := buf.String(), "2025-01-02T03:04:05.0000006Z took q t1 7 1 0\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// parseStamp checks that the first word of a --timestamps line is an
// RFC3339Nano time in UTC and returns it with the words after it.
func parseStamp(t *testing.T, f []string) (time.Time, []string) {
	t.Helper()
	if len(f) < 2 {
		t.Fatalf("line %q: want a timestamp and an event", f)
	}
	at, err := time.Parse(time.RFC3339Nano, f[0])
	if err != nil || !strings.HasSuffix(f[0], "Z") {
		t.Fatalf("line %q: first word is not an RFC3339Nano UTC time (%v)", f, err)
	}
	return at, f[1:]
}

// TestWorkerTimestamps checks that with --timestamps every event line starts
// with the time it was written, in order, and keeps its usual words.
func TestWorkerTimestamps(t *testing.T) {
	url := startMiniredis(t)
	ns := "t-" + t.Name()
	start := time.Now()
	lr := startWorker(t, url, ns, "--queues", "ts", "--work-time", "10ms", "--timestamps")
	code, stdout, stderr := runArgs(t, env{envNamespace: ns}, "enqueue", "--redis-url", url, "--queue", "ts")
	if code != 0 {
		t.Fatalf("enqueue: exit %d: %s", code, stderr)
	}
	id := strings.Fields(stdout)[2]

	var kinds []string
	var last time.Time
	for len(kinds) == 0 || kinds[len(kinds)-1] != "done" {
		at, words := parseStamp(t, lr.next(t, ""))
		if at.Before(start.Add(-time.Minute)) || at.After(time.Now().Add(time.Minute)) {
			t.Fatalf("stamp %s is not the time of writing (%s)", at, start)
		}
		if at.Before(last) {
			t.Fatalf("stamp %s before the previous line's %s", at, last)
		}
		last = at
		switch words[0] {
		case "registered":
			if len(words) != 2 {
				t.Fatalf("bad registered words %q", words)
			}
		case "took", "done":
			if words[1] != "ts" || words[2] != id {
				t.Fatalf("bad %s words %q, want task %s", words[0], words, id)
			}
		default:
			t.Fatalf("unexpected line %q", words)
		}
		kinds = append(kinds, words[0])
	}
	if got := strings.Join(kinds, " "); got != "registered took done" {
		t.Fatalf("lines %s, want registered took done", got)
	}
}

// startChildWorker runs the worker subcommand in a child process (this test
// binary, playing worqr-example) with the environment e, so that it can be
// killed with SIGKILL. It returns the process and its stdout lines.
func startChildWorker(t *testing.T, e env, url, ns string, args ...string) (*exec.Cmd, *lineReader) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, append([]string{"worker", "--redis-url", url, "--namespace", ns}, args...)...)
	cmd.Env = append(os.Environ(), childMarker+"=1")
	for k, v := range e {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	lr := newLineReader()
	var errb syncBuffer
	cmd.Stdout, cmd.Stderr = lr.w, &errb
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // returns once the child is gone and its stdout copied
		lr.w.Close()
		close(waited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-waited
		if t.Failed() {
			t.Logf("child worker stderr:\n%s", errb.String())
		}
	})
	return cmd, lr
}

// taskFields runs the task subcommand and returns its key value lines.
func taskFields(t *testing.T, e env, args ...string) map[string]string {
	t.Helper()
	code, stdout, stderr := runArgs(t, e, append([]string{"task"}, args...)...)
	if code != 0 {
		t.Fatalf("task %v: exit %d: %s", args, code, stderr)
	}
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
		k, v, ok := strings.Cut(l, " ")
		if !ok || v == "" {
			t.Fatalf("task %v: bad line %q in:\n%s", args, l, stdout)
		}
		m[k] = v
	}
	return m
}

// TestWorkerKilled kills a worker process with SIGKILL while it runs a task
// and follows the task through a peer's lines: recovered names the dead
// worker, the new taking has a new pid and counts the crash, and done carries
// that taking's pid. The task subcommand shows the same story.
func TestWorkerKilled(t *testing.T) {
	url := startMiniredis(t)
	ns := "t-" + t.Name()
	e := env{envHeartbeatInterval: "200ms", envHeartbeatTTL: "1s", envReaperInterval: "300ms", envPollInterval: "200ms"}
	ce := env{envRedisURL: url, envNamespace: ns}

	child, clr := startChildWorker(t, e, url, ns, "--queues", "crash", "--work-time", "1m", "--grace", "1s")
	childID := clr.next(t, "registered ")[1]
	code, stdout, stderr := runArgs(t, ce, "enqueue", "--queue", "crash", "--payload", "hello")
	if code != 0 {
		t.Fatalf("enqueue: exit %d: %s", code, stderr)
	}
	id := strings.Fields(stdout)[2]
	first := clr.next(t, "took ")
	if len(first) != 6 || first[2] != id || first[4] != "1" || first[5] != "0" {
		t.Fatalf("child: took %q, want task %s at attempt 1 after 0 crashes", first, id)
	}
	if m := taskFields(t, ce, "crash", id); m["state"] != "active" || m["worker"] != childID || m["pid"] != first[3] || m["crashes"] != "0" {
		t.Fatalf("task while the child runs it: %v, want active on worker %s pid %s", m, childID, first[3])
	}

	peer := startWorkerEnv(t, e, url, ns, "--queues", "crash", "--work-time", "10ms", "--retention", "1m")
	peer.next(t, "registered ")
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	// The peer's lines up to the task's done line and its recovered line, in
	// either order: the requeue may wake the peer's fetch loop before its
	// reaper reports.
	var recovered, again, done []string
	for done == nil || recovered == nil {
		switch f := peer.next(t, ""); f[0] {
		case "recovered":
			if recovered != nil {
				t.Fatalf("peer: a second recovered line %q", f)
			}
			recovered = f
		case "took":
			if again != nil {
				t.Fatalf("peer: a second took line %q after %q", f, again)
			}
			again = f
		case "done":
			done = f
		default:
			t.Fatalf("peer: unexpected line %q", f)
		}
	}
	if strings.Join(recovered, " ") != "recovered crash 1 "+childID {
		t.Fatalf("peer: %q, want recovered crash 1 %s (the killed worker)", recovered, childID)
	}
	if len(again) != 6 || again[2] != id {
		t.Fatalf("peer: took %q, want task %s", again, id)
	}
	if again[3] == first[3] {
		t.Fatalf("peer took task %s with pid %s, the killed worker's pid", id, again[3])
	}
	if crashes, err := strconv.Atoi(again[5]); err != nil || crashes < 1 || again[4] != "1" {
		t.Fatalf("peer: took %q, want attempt 1 after at least 1 crash", again)
	}
	if strings.Join(done, " ") != "done crash "+id+" "+again[3] {
		t.Fatalf("peer: %q, want done crash %s %s (the pid of its took line)", done, id, again[3])
	}

	m := taskFields(t, ce, "crash", id)
	if m["state"] != "done" || m["crashes"] != again[5] || m["failures"] != "0" || m["pid"] != "-" {
		t.Fatalf("task after the peer finished it: %v, want done after %s crash", m, again[5])
	}
	if _, err := time.Parse(time.RFC3339Nano, m["finished_at"]); err != nil {
		t.Fatalf("finished_at %q: %v", m["finished_at"], err)
	}
}

// TestTask looks up an enqueued task, in text and in JSON, and an unknown
// one.
func TestTask(t *testing.T) {
	url := startMiniredis(t)
	ns := "t-" + t.Name()
	e := env{envRedisURL: url, envNamespace: ns}
	code, stdout, stderr := runArgs(t, e, "enqueue", "--queue", "q", "--payload", "hello")
	if code != 0 {
		t.Fatalf("enqueue: exit %d: %s", code, stderr)
	}
	id := strings.Fields(stdout)[2]

	m := taskFields(t, e, "q", id)
	want := map[string]string{
		"id": id, "queue": "q", "state": "queued", "failures": "0", "crashes": "0",
		"last_error": "-", "dead_reason": "-", "died_at": "-", "died_on": "-", "worker": "-", "pid": "-",
		"cancel_requested": "false", "due_at": "-", "finished_at": "-", "payload_bytes": "5", "result_bytes": "0",
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %q, want %q", k, m[k], v)
		}
	}
	if at, err := time.Parse(time.RFC3339Nano, m["enqueued_at"]); err != nil || time.Since(at) > time.Minute {
		t.Errorf("enqueued_at %q (%v), want about now", m["enqueued_at"], err)
	}
	if len(m) != len(want)+1 {
		t.Errorf("%d keys, want %d: %v", len(m), len(want)+1, m)
	}

	// Flags may follow the arguments.
	code, stdout, stderr = runArgs(t, e, "task", "q", id, "-o", "json")
	if code != 0 {
		t.Fatalf("task -o json: exit %d: %s", code, stderr)
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(stdout), &obj); err != nil || strings.Count(stdout, "\n") != 1 {
		t.Fatalf("task -o json: not one JSON object on one line (%v):\n%s", err, stdout)
	}
	if obj["id"] != id || obj["queue"] != "q" || obj["state"] != "queued" || obj["crashes"] != 0.0 ||
		obj["payload_bytes"] != 5.0 || obj["finished_at"] != nil || obj["pid"] != "" {
		t.Errorf("task -o json: %v", obj)
	}
	if s, _ := obj["enqueued_at"].(string); s != m["enqueued_at"] {
		t.Errorf("task -o json: enqueued_at %v, want %s as in text", obj["enqueued_at"], m["enqueued_at"])
	}

	unknown := "cv0000000000000000a0"
	code, stdout, stderr = runArgs(t, e, "task", "q", unknown)
	if code != exitFail || stdout != "" || !strings.Contains(stderr, "task "+unknown+` not found in queue "q"`) {
		t.Fatalf("unknown task: exit %d, stdout %q, stderr %q; want exit 1 and a not found message", code, stdout, stderr)
	}
	// The id exists, but not in that queue.
	if code, _, _ = runArgs(t, e, "task", "other", id); code != exitFail {
		t.Fatalf("task of another queue: exit %d, want 1", code)
	}
}

func TestTextValue(t *testing.T) {
	for in, want := range map[string]string{
		"":                   "-",
		"boom":               "boom",
		"-":                  `"-"`,
		`"x"`:                `"\"x\""`,
		"failing attempt 1":  `"failing attempt 1"`,
		"panic\ngoroutine 1": `"panic\ngoroutine 1"`,
	} {
		if got := textValue(in); got != want {
			t.Errorf("textValue(%q) = %s, want %s", in, got, want)
		}
	}
}

// enqueue --key: the tasks of one key wait behind its head, so only one is
// in the queue; a worker runs all three.
func TestEnqueueWithKey(t *testing.T) {
	url := startMiniredis(t)
	ns := "t-" + strings.ReplaceAll(t.Name(), "/", "-")
	e := env{envRedisURL: url, envNamespace: ns}
	code, stdout, stderr := runArgs(t, e, "enqueue", "--queue", "ord", "--count", "3", "--key", "order-42", "--payload", "x")
	if code != 0 {
		t.Fatalf("enqueue: exit %d: %s", code, stderr)
	}
	if n := len(strings.Split(strings.TrimSpace(stdout), "\n")); n != 3 {
		t.Fatalf("%d enqueued lines, want 3:\n%s", n, stdout)
	}
	code, stdout, _ = runArgs(t, e, "stats", "--queues", "ord")
	if code != 0 || !strings.Contains(stdout, "queue ord waiting 1 ") {
		t.Fatalf("stats: exit %d, want one task waiting (the key's head):\n%s", code, stdout)
	}
	lr := startWorker(t, url, ns, "--queues", "ord", "--concurrency", "3", "--work-time", "5ms")
	for done := 0; done < 3; {
		if f := lr.next(t, "done "); len(f) > 0 {
			done++
		}
	}
	if code, _, stderr := runArgs(t, e, "enqueue", "--queue", "ord", "--key", strings.Repeat("k", 513)); code != 2 || !strings.Contains(stderr, "--key") {
		t.Fatalf("a long key: exit %d: %s", code, stderr)
	}
}

// worker --key-batch: the tasks of one key run in batches, in order: with
// one handler, the took lines of a whole batch come before its done lines.
func TestWorkerKeyBatch(t *testing.T) {
	url := startMiniredis(t)
	ns := "t-" + strings.ReplaceAll(t.Name(), "/", "-")
	e := env{envRedisURL: url, envNamespace: ns}
	if code, _, stderr := runArgs(t, e, "enqueue", "--queue", "ord", "--count", "5", "--key", "order-42", "--payload", "x"); code != 0 {
		t.Fatalf("enqueue: exit %d: %s", code, stderr)
	}
	lr := startWorker(t, url, ns, "--queues", "ord", "--concurrency", "1", "--work-time", "5ms", "--key-batch", "3")
	var kinds []string
	for len(kinds) < 10 {
		if f := lr.next(t, ""); len(f) > 0 && (f[0] == "took" || f[0] == "done") {
			kinds = append(kinds, f[0])
		}
	}
	if got, want := strings.Join(kinds, " "), "took took took done done done took took done done"; got != want {
		t.Fatalf("lines %q, want %q (batches of 3 then 2)", got, want)
	}
	if code, _, stderr := runArgs(t, e, "worker", "--queues", "ord", "--key-batch", "-1"); code != 2 || !strings.Contains(stderr, "--key-batch") {
		t.Fatalf("a bad --key-batch: exit %d: %s", code, stderr)
	}
}
