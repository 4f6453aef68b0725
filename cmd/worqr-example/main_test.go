package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/worqr/worqr-go/internal/dial"
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
		{name: "subcommand help", args: []string{"worker", "--help"}, code: 0, stdout: "took <queue> <task_id> <pid> <attempt>"},
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

func TestEventLine(t *testing.T) {
	for _, tc := range []struct {
		e    worqr.Event
		want string
	}{
		{worqr.Event{Kind: worqr.EventRegistered, WorkerID: "w1"}, "registered w1"},
		{worqr.Event{Kind: worqr.EventDone, Queue: "q", TaskID: "t1", PID: "7"}, "done q t1"},
		{worqr.Event{Kind: worqr.EventDone, Queue: "q", TaskID: "t1", Err: errors.New("boom")}, "done q t1"},
		{worqr.Event{Kind: worqr.EventCancelled, Queue: "q", TaskID: "t1"}, "cancelled q t1"},
		{worqr.Event{Kind: worqr.EventLost, Queue: "q", TaskID: "t1", PID: "7"}, "lost q t1 7"},
		{worqr.Event{Kind: worqr.EventKeepaliveLost, WorkerID: "w1"}, "keepalive_lost w1"},
		{worqr.Event{Kind: worqr.EventRecovered, Queue: "q", Count: 3}, "recovered q 3"},
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
	lr := newLineReader()
	ctx, cancel := context.WithCancel(context.Background())
	var errb syncBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, append([]string{"worker", "--redis-url", url, "--namespace", ns, "--grace", "2s"}, args...),
			stdio{out: lr.w, err: &errb, getenv: env{}.get})
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("worker exit code %d; stderr:\n%s", code, errb.String())
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
	if code != 0 || !strings.Contains(stdout, "queue fast waiting 3 active 0\nworkers 0\n") {
		t.Fatalf("stats before the worker: exit %d:\n%s", code, stdout)
	}

	lr := startWorker(t, url, ns, "--queues", "fast,slow", "--concurrency", "2", "--work-time", "20ms")
	if f := lr.next(t, "registered "); len(f) != 2 {
		t.Fatalf("bad registered line %v", f)
	}
	took, done := map[string]bool{}, map[string]bool{}
	for len(done) < 3 {
		select {
		case l := <-lr.lines:
			f := strings.Fields(l)
			switch f[0] {
			case "took":
				if len(f) != 5 || f[1] != "fast" || f[4] != "1" {
					t.Fatalf("bad took line %q", l)
				}
				took[f[2]] = true
			case "done":
				if len(f) != 3 || !took[f[2]] {
					t.Fatalf("done before took, or bad: %q", l)
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
	if code != 0 || !strings.Contains(stdout, "queue fast waiting 0 active 0\nqueue slow waiting 0 active 0\nworkers 1\nworker ") ||
		!strings.Contains(stdout, " alive\n") {
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
	pool, err := newPool(dial.Options{URL: url})
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
