package consumer_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/consumer"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// source is an in-memory Source of jobs 0..head (the job at i is i*10).
type source struct {
	head      atomic.Int64 // -1: no job yet
	headCalls atomic.Int64
	onHead    func(n int64) // called with the call's number (1-based)
}

func newSource(head int64) *source {
	s := &source{}
	s.head.Store(head)
	return s
}

func (s *source) Head(context.Context) (uint64, error) {
	n := s.headCalls.Add(1)
	if s.onHead != nil {
		s.onHead(n)
	}
	h := s.head.Load()
	if h < 0 {
		return 0, consumer.ErrNotFound
	}
	return uint64(h), nil
}

func (s *source) AtIndex(_ context.Context, i uint64) (uint64, error) {
	if int64(i) > s.head.Load() {
		return 0, consumer.ErrNotFound
	}
	return i * 10, nil
}

// bundle is one test's world: a pool and a namespace of its own, and what
// its consumers told through OnProcessed.
type bundle struct {
	pool *redis.Pool
	ns   string
	told *reports
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{pool: srv.Pool(), ns: redistest.Namespace(), told: &reports{changed: make(chan struct{})}}
	t.Cleanup(func() { b.pool.Close() })
	return b
}

// reports records the processed indexes consumers tell through
// OnProcessed, the signal a consumer sends once a record moved its
// processed index on.
type reports struct {
	mu      sync.Mutex
	told    []uint64
	changed chan struct{} // closed and replaced at each call
}

// OnProcessed is a Config.OnProcessed.
func (r *reports) OnProcessed(p uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.told = append(r.told, p)
	close(r.changed)
	r.changed = make(chan struct{})
}

// all returns what was told, in order.
func (r *reports) all() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]uint64(nil), r.told...)
}

// wait waits until a consumer told processed index p or more, failing the
// test after 30 s, and returns the highest index told.
func (r *reports) wait(t *testing.T, p uint64) uint64 {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		r.mu.Lock()
		top, changed := uint64(0), r.changed
		for _, q := range r.told {
			top = max(top, q)
		}
		r.mu.Unlock()
		if top >= p {
			return top
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("OnProcessed told %d at most in 30s, want %d", top, p)
		}
	}
}

// fast are worker timings that notice deaths and due retries quickly.
func (b *bundle) fast() worqr.WorkerConfig {
	return worqr.WorkerConfig{
		Config: worqr.Config{Namespace: b.ns, DisableEvents: true},
		// A long TTL: no test here kills a worker, and a loaded machine
		// must not cost one its keepalive (its jobs would run again).
		HeartbeatInterval: 100 * time.Millisecond, HeartbeatTTL: 5 * time.Second,
		ReaperInterval: 50 * time.Millisecond, PollInterval: 50 * time.Millisecond,
	}
}

// start fills in the worker settings, a quick backoff and b.told as
// OnProcessed (unless set), starts the consumer and stops it at the end of
// the test.
func (b *bundle) start(t *testing.T, cfg consumer.Config[uint64]) *consumer.Consumer[uint64] {
	t.Helper()
	cfg.Worker = b.fast()
	if cfg.OnProcessed == nil {
		cfg.OnProcessed = b.told.OnProcessed
	}
	if cfg.Backoff == nil {
		cfg.Backoff = func(int, error) time.Duration { return 10 * time.Millisecond }
	}
	c, err := consumer.New(b.pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return c
}

// patience bounds a wait for a state no consumer reports (a job finished
// above the processed index, a limit reached).
const patience = 30 * time.Second

func progress(t *testing.T, c *consumer.Consumer[uint64]) consumer.Progress {
	t.Helper()
	p, err := c.Progress(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	ok := func() consumer.Config[uint64] {
		return consumer.Config[uint64]{Name: "c", Source: newSource(0),
			Process: func(context.Context, uint64, uint64) error { return nil }}
	}
	for _, tc := range []struct {
		field string
		edit  func(c *consumer.Config[uint64])
	}{
		{"consumer.Config.Name", func(c *consumer.Config[uint64]) { c.Name = "" }},
		{"consumer.Config.Name", func(c *consumer.Config[uint64]) { c.Name = "a:b" }},
		{"consumer.Config.Name", func(c *consumer.Config[uint64]) { c.Name = string(make([]byte, consumer.MaxNameLen+1)) }},
		{"consumer.Config.Source", func(c *consumer.Config[uint64]) { c.Source = nil }},
		{"consumer.Config.Process", func(c *consumer.Config[uint64]) { c.Process = nil }},
		{"consumer.Config.First", func(c *consumer.Config[uint64]) { c.First = consumer.MaxIndex + 1 }},
		{"consumer.Config.MaxProcessing", func(c *consumer.Config[uint64]) { c.MaxProcessing = -1 }},
		{"consumer.Config.MaxSearchAhead", func(c *consumer.Config[uint64]) { c.MaxSearchAhead = consumer.MaxSearchAheadLimit + 1 }},
		{"consumer.Config.Concurrency", func(c *consumer.Config[uint64]) { c.Concurrency = -2 }},
		{"consumer.Config.Timeout", func(c *consumer.Config[uint64]) { c.Timeout = -time.Second }},
		{"consumer.Config.Worker", func(c *consumer.Config[uint64]) {
			c.Worker.Queues = map[string]worqr.QueueConfig{"x": {}}
		}},
	} {
		cfg := ok()
		tc.edit(&cfg)
		_, err := consumer.New(srv.Pool(), &cfg)
		var ie *worqr.InvalidError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("%s: New = %v, want an InvalidError naming %s", tc.field, err, tc.field)
		}
	}
	cfg := ok()
	if _, err := consumer.New(srv.Pool(), &cfg); err != nil {
		t.Errorf("valid config: %v", err)
	}
}

// Two consumers of one name share the jobs: every index is worked, none by
// both at once; failed attempts are retried; at no time are more than
// MaxProcessing jobs running, nor one at or past processed + MaxSearchAhead.
func TestSharedConsumerWorksEveryIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n, maxProc, ahead = 300, 5, 8
	src := newSource(n - 1)
	var (
		mu       sync.Mutex
		running  = map[uint64]bool{}
		okRuns   = map[uint64]int{}
		attempts = map[uint64]int{}
		now, top int
		problems []string
	)
	var c1 *consumer.Consumer[uint64]
	ready := make(chan struct{})
	process := func(ctx context.Context, i uint64, job uint64) error {
		<-ready
		p, err := c1.ProcessedIndex(ctx)
		if err != nil {
			return err
		}
		mu.Lock()
		if job != i*10 {
			problems = append(problems, fmt.Sprintf("index %d got job %d", i, job))
		}
		if i >= p+ahead {
			problems = append(problems, fmt.Sprintf("index %d ran with processed index %d", i, p))
		}
		if running[i] {
			problems = append(problems, fmt.Sprintf("index %d ran twice at once", i))
		}
		running[i] = true
		attempts[i]++
		a := attempts[i]
		now++
		top = max(top, now)
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		running[i] = false
		now--
		if i%7 == 3 && a < 3 {
			return fmt.Errorf("attempt %d fails", a)
		}
		okRuns[i]++
		return nil
	}
	cfg := consumer.Config[uint64]{Name: "shared", Source: src, Process: process,
		MaxProcessing: maxProc, MaxSearchAhead: ahead, Concurrency: 4}
	c1 = b.start(t, cfg)
	b.start(t, cfg) // a second process of the consumer
	close(ready)
	if top := b.told.wait(t, n); top != n {
		t.Errorf("OnProcessed told %d, want %d", top, n)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Error(p)
	}
	if top > maxProc {
		t.Errorf("%d jobs ran at once, MaxProcessing is %d", top, maxProc)
	}
	for i := uint64(0); i < n; i++ {
		if okRuns[i] != 1 {
			t.Errorf("index %d done %d times, want 1", i, okRuns[i])
		}
		if want := map[bool]int{true: 3, false: 1}[i%7 == 3]; attempts[i] != want {
			t.Errorf("index %d: %d attempts, want %d", i, attempts[i], want)
		}
	}
	if p := progress(t, c1); p != (consumer.Progress{Processed: n, Next: n}) {
		t.Errorf("progress = %+v, want processed = next = %d, nothing finished above", p, n)
	}
}

// A job that fails holds the processed index until it succeeds, and is
// never skipped, SkipRetry or not; the jobs after it are worked meanwhile
// (within MaxSearchAhead).
func TestFailedJobHoldsProgress(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var fails atomic.Int32
	fails.Store(1 << 20)
	var tries atomic.Int32
	c := b.start(t, consumer.Config[uint64]{Name: "fail", Source: newSource(9), MaxSearchAhead: 5,
		Process: func(_ context.Context, i uint64, _ uint64) error {
			if i != 2 {
				return nil
			}
			tries.Add(1)
			if fails.Add(-1) >= 0 {
				return worqr.SkipRetry(errors.New("broken"))
			}
			return nil
		}})
	redistest.WaitFor(t, patience, "the jobs after 2 within reach", func() bool {
		p := progress(t, c)
		return p.Next == 7 && p.Finished == 4 && tries.Load() >= 3
	})
	if p := progress(t, c); p.Processed != 2 {
		t.Fatalf("processed index %d while job 2 fails, want 2", p.Processed)
	}
	fails.Store(0)
	b.told.wait(t, 10)
	if p := progress(t, c); p.Processed != 10 {
		t.Errorf("processed index %d, want 10", p.Processed)
	}
}

// MaxSearchAhead: with job 0 held, nothing at or past 0 + MaxSearchAhead is
// dispatched however many slots are free; MaxProcessing: with every job
// held, no more than MaxProcessing are dispatched.
func TestLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name             string
		maxProc, ahead   int
		held             func(i uint64) bool
		wantNext, wantOK int
	}{
		{"search ahead", 10, 5, func(i uint64) bool { return i == 0 }, 5, 4},
		{"processing", 3, 100, func(uint64) bool { return true }, 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			release := make(chan struct{})
			var started sync.Map
			var done atomic.Int32
			c := b.start(t, consumer.Config[uint64]{Name: "lim", Source: newSource(50),
				MaxProcessing: tc.maxProc, MaxSearchAhead: tc.ahead,
				Process: func(ctx context.Context, i uint64, _ uint64) error {
					started.Store(i, true)
					if tc.held(i) {
						select {
						case <-release:
						case <-ctx.Done():
							return ctx.Err()
						}
					}
					done.Add(1)
					return nil
				}})
			redistest.WaitFor(t, patience, "the limit reached", func() bool {
				p := progress(t, c)
				return p.Next == uint64(tc.wantNext) && p.Finished == tc.wantOK && int(done.Load()) == tc.wantOK
			})
			c.Check()
			c.Check()
			started.Range(func(k, _ any) bool {
				if k.(uint64) >= uint64(tc.wantNext) {
					t.Errorf("index %v started past the limit (%d)", k, tc.wantNext)
				}
				return true
			})
			if p := progress(t, c); p.Processed != 0 || p.InFlight() != tc.wantNext-tc.wantOK {
				t.Errorf("progress %+v (in flight %d)", p, p.InFlight())
			}
			close(release)
			b.told.wait(t, 51)
			if p := progress(t, c); p.Processed != 51 {
				t.Errorf("processed index %d, want 51", p.Processed)
			}
		})
	}
}

// Concurrent Check calls while a check is under way cost one more check,
// not one each.
func TestCheckCoalesces(t *testing.T) {
	t.Parallel()
	b := setup(t)
	src := newSource(-1)
	calls := make(chan int64, 100)
	unblock := make(chan struct{})
	src.onHead = func(n int64) {
		calls <- n
		if n == 1 {
			<-unblock
		}
	}
	c := b.start(t, consumer.Config[uint64]{Name: "co", Source: src, CheckInterval: -1,
		Process: func(context.Context, uint64, uint64) error { return nil }})
	if n := <-calls; n != 1 { // Start's check, held in Head
		t.Fatalf("first Head call is number %d", n)
	}
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Check()
		}()
	}
	wg.Wait()
	close(unblock)
	if n := <-calls; n != 2 { // the 50 calls' one check
		t.Fatalf("second Head call is number %d", n)
	}
	c.Check()
	if n := <-calls; n != 3 {
		t.Fatalf("third Head call is number %d", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if got := src.headCalls.Load(); got != 3 {
		t.Errorf("Head called %d times, want 3 (Start's, one for 50 concurrent Checks, one for the last)", got)
	}
}

// A restarted consumer resumes from the stored index: the jobs done before
// do not run again.
func TestRestartResumes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	src := newSource(49)
	var mu sync.Mutex
	runs := map[uint64]int{}
	cfg := consumer.Config[uint64]{Name: "re", Source: src, First: 0,
		Process: func(_ context.Context, i uint64, _ uint64) error {
			mu.Lock()
			runs[i]++
			mu.Unlock()
			return nil
		},
		OnProcessed: b.told.OnProcessed}
	cfg.Worker = b.fast()
	c, err := consumer.New(b.pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	// OnProcessed runs after the progress is in Redis.
	toldEnd := func(c *consumer.Consumer[uint64], p uint64) {
		t.Helper()
		b.told.wait(t, p)
		if told := b.told.all(); told[len(told)-1] != p {
			t.Errorf("OnProcessed told %v, want it to end at %d", told, p)
		}
		if got := progress(t, c).Processed; got != p {
			t.Errorf("processed index %d, want %d", got, p)
		}
	}
	toldEnd(c, 50)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	src.head.Store(99)
	c2 := b.start(t, cfg)
	toldEnd(c2, 100)
	mu.Lock()
	defer mu.Unlock()
	for i := uint64(0); i < 100; i++ {
		if runs[i] != 1 {
			t.Errorf("index %d ran %d times, want 1", i, runs[i])
		}
	}
	// OnProcessed: increasing, ending at each run's processed index.
	told := b.told.all()
	for k := 1; k < len(told); k++ {
		if told[k] <= told[k-1] {
			t.Errorf("OnProcessed told %d after %d", told[k], told[k-1])
		}
	}
}

// The kill -9 test: consumer processes (this test binary, re-executed with
// childEnv set) share one consumer; the test kills them with SIGKILL and
// starts new ones while they work, and checks from their logs and from
// Redis that no index is skipped, none runs twice at once, the processed
// index never passes an unfinished job nor goes down, and the limits hold.

const (
	childEnv   = "WORQR_CONSUMER_CHILD" // the log file: run as a consumer process
	childRedis = "WORQR_CONSUMER_CHILD_REDIS"
	childNS    = "WORQR_CONSUMER_CHILD_NS"

	killJobs    = 300
	killMaxProc = 6
	killAhead   = 12
)

// failsFirst says whether the first attempt of index i fails.
func failsFirst(i uint64) bool { return i%9 == 4 }

type headOf uint64

func (h headOf) Head(context.Context) (uint64, error)                { return uint64(h), nil }
func (h headOf) AtIndex(_ context.Context, i uint64) (uint64, error) { return i, nil }

// childMain is a consumer process: it works consumer "kill" until killed,
// logging "S <i> <ns> <processed>" when a job starts, "E <i> <ns>" when it
// is done and "F <i> <ns>" when an attempt fails, each line written at
// once (a SIGKILL loses nothing written).
func childMain() int {
	f, err := os.OpenFile(os.Getenv(childEnv), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var mu sync.Mutex
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(f, format+"\n", args...)
	}
	pool := &redis.Pool{MaxIdle: 16, DialContext: func(ctx context.Context) (redis.Conn, error) {
		return redis.DialURLContext(ctx, os.Getenv(childRedis))
	}}
	ns := os.Getenv(childNS)
	var c *consumer.Consumer[uint64]
	c, err = consumer.New(pool, &consumer.Config[uint64]{
		Name: "kill", Source: headOf(killJobs - 1), MaxProcessing: killMaxProc, MaxSearchAhead: killAhead, Concurrency: 4,
		// No crash limit: on a starved machine a process that misses its
		// keepalive counts as a crash of the job it runs too, and a job
		// buried after 5 would stop progress (by design) mid-test.
		MaxCrashes: -1,
		Backoff:    func(int, error) time.Duration { return 20 * time.Millisecond },
		Process: func(ctx context.Context, i uint64, _ uint64) error {
			p, err := c.ProcessedIndex(ctx)
			if err != nil {
				return err
			}
			logf("S %d %d %d", i, time.Now().UnixNano(), p)
			time.Sleep(time.Duration(5+rand.IntN(30)) * time.Millisecond)
			if failsFirst(i) {
				conn, err := pool.GetContext(ctx)
				if err != nil {
					return err
				}
				n, err := redis.Int(conn.Do("INCR", ns+":test:fail:"+strconv.FormatUint(i, 10)))
				conn.Close()
				if err != nil {
					return err
				}
				if n == 1 {
					logf("F %d %d", i, time.Now().UnixNano())
					return errors.New("first attempt fails")
				}
			}
			logf("E %d %d", i, time.Now().UnixNano())
			return nil
		},
		Worker: worqr.WorkerConfig{
			Config:            worqr.Config{Namespace: ns, DisableEvents: true},
			HeartbeatInterval: 100 * time.Millisecond, HeartbeatTTL: 1500 * time.Millisecond,
			ReaperInterval: 100 * time.Millisecond, PollInterval: 100 * time.Millisecond,
			OnEvent: func(e worqr.Event) {
				if e.Kind == worqr.EventKeepaliveLost {
					logf("K 0 %d", time.Now().UnixNano())
				}
			},
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := c.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	<-c.Stopped()
	return 0
}

// child is one consumer process the test started.
type child struct {
	log    string
	cmd    *exec.Cmd
	exited chan struct{}
	diedAt time.Time // when Wait returned after the kill
}

func startChild(t *testing.T, dir, ns string, n int) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ch := &child{log: filepath.Join(dir, fmt.Sprintf("child-%d.log", n)), exited: make(chan struct{})}
	ch.cmd = exec.Command(exe, "-test.run=^$")
	ch.cmd.Env = append(os.Environ(), childEnv+"="+ch.log, childRedis+"="+srv.URL, childNS+"="+ns)
	ch.cmd.Stderr = os.Stderr
	if err := ch.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = ch.cmd.Wait()
		ch.diedAt = time.Now()
		close(ch.exited)
	}()
	return ch
}

func (ch *child) kill() {
	_ = ch.cmd.Process.Signal(syscall.SIGKILL)
	<-ch.exited
}

// run is one run of an index in one process: from its S line to its E or
// F line, or to the process's death.
type run struct {
	i          uint64
	start, end int64
	ok, failed bool
	processed  uint64 // the processed index read as it started
	proc       int
	zombie     bool // its process lost its keepalive at some point
}

// readRuns parses the children's logs.
func readRuns(t *testing.T, children []*child) []run {
	t.Helper()
	var out []run
	for n, ch := range children {
		f, err := os.Open(ch.log)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		open := map[uint64]int{} // index -> its run in out
		from := len(out)
		zombie := false
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 3 {
				continue // a line cut by the kill
			}
			i, _ := strconv.ParseUint(fs[1], 10, 64)
			at, _ := strconv.ParseInt(fs[2], 10, 64)
			switch fs[0] {
			case "S":
				if len(fs) < 4 {
					continue
				}
				p, _ := strconv.ParseUint(fs[3], 10, 64)
				open[i] = len(out)
				out = append(out, run{i: i, start: at, end: -1, processed: p, proc: n})
			case "K":
				zombie = true
			case "E", "F":
				if k, ok := open[i]; ok {
					out[k].end, out[k].ok, out[k].failed = at, fs[0] == "E", fs[0] == "F"
					delete(open, i)
				}
			}
		}
		f.Close()
		for k := from; k < len(out); k++ {
			out[k].zombie = zombie
		}
		for _, k := range open {
			select {
			case <-ch.exited:
				out[k].end = ch.diedAt.UnixNano()
			default:
				out[k].end = time.Now().UnixNano() // still running
			}
		}
	}
	return out
}

func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills processes")
	}
	t.Parallel()
	b := setup(t)
	dir := t.TempDir()
	c, err := consumer.New(b.pool, &consumer.Config[uint64]{Name: "kill", Source: headOf(killJobs - 1),
		Process: func(context.Context, uint64, uint64) error { return nil }, Worker: b.fast()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var children []*child
	live := func() []*child {
		var out []*child
		for _, ch := range children {
			select {
			case <-ch.exited:
			default:
				out = append(out, ch)
			}
		}
		return out
	}
	for len(children) < 3 {
		children = append(children, startChild(t, dir, b.ns, len(children)))
	}
	defer func() {
		for _, ch := range children {
			ch.kill()
		}
	}()

	// Watch the processed index: never down, never past an index with no
	// finished run in the logs.
	var last uint64
	watch := func() uint64 {
		p, err := c.ProcessedIndex(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if p < last {
			t.Fatalf("processed index went down: %d after %d", p, last)
		}
		last = p
		done := map[uint64]bool{}
		for _, r := range readRuns(t, children) {
			if r.ok {
				done[r.i] = true
			}
		}
		for i := uint64(0); i < p; i++ {
			if !done[i] {
				t.Fatalf("processed index %d passed index %d, which no run finished", p, i)
			}
		}
		return p
	}

	kills := 0
	cutAt := map[uint64]int{} // index -> kills aimed at its runs
	next := time.Now().Add(300 * time.Millisecond)
	within, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for watch() < killJobs {
		if kills < 6 && time.Now().After(next) && last > 0 {
			// Kill a process that is inside a job: wait until one is. Not
			// one whose job was cut twice already: a job that kills
			// MaxCrashes workers goes to the dead set (and progress waits
			// for an operator), which is not what this test is about.
			l := live()
			var inJob []*child
			var jobs []uint64
			for _, r := range readRuns(t, l) {
				if !r.ok && !r.failed && cutAt[r.i] < 2 {
					inJob = append(inJob, l[r.proc])
					jobs = append(jobs, r.i)
				}
			}
			if len(inJob) > 0 {
				k := rand.IntN(len(inJob))
				victim := inJob[k]
				cutAt[jobs[k]]++
				victim.kill()
				kills++
				children = append(children, startChild(t, dir, b.ns, len(children)))
				next = time.Now().Add(time.Duration(250+rand.IntN(250)) * time.Millisecond)
			}
		}
		// The logs and the index are sampled, and the kills paced, on
		// wall time: the children run on their own.
		if redistest.Pause(within, 20*time.Millisecond) != nil {
			dumpKeys(t, b.pool, b.ns)
			t.Fatalf("timed out at processed index %d", last)
		}
	}
	if kills < 3 {
		t.Errorf("only %d kills before the end: the test did not test much", kills)
	}
	for _, ch := range children {
		ch.kill()
	}

	runs := readRuns(t, children)
	byIndex := map[uint64][]run{}
	for _, r := range runs {
		byIndex[r.i] = append(byIndex[r.i], r)
		if r.i >= r.processed+killAhead {
			t.Errorf("index %d started with processed index %d (MaxSearchAhead %d)", r.i, r.processed, killAhead)
		}
	}
	rerun, cut := 0, 0
	for i := uint64(0); i < killJobs; i++ {
		rs := byIndex[i]
		sort.Slice(rs, func(a, b int) bool { return rs[a].start < rs[b].start })
		var oks, fails, cuts int
		for k, r := range rs {
			if r.ok {
				oks++
			}
			if r.failed {
				fails++
			}
			if !r.ok && !r.failed {
				cut++
				cuts++
			}
			// A process that lost its keepalive (starved on a loaded
			// machine) is a zombie: its run may overlap the next one
			// (documented); only live processes are held to it.
			if k > 0 && r.start < rs[k-1].end && !r.zombie && !rs[k-1].zombie {
				t.Errorf("index %d ran twice at once: process %d from %d, process %d from %d to %d",
					i, r.proc, r.start, rs[k-1].proc, rs[k-1].start, rs[k-1].end)
			}
		}
		if oks == 0 {
			t.Errorf("index %d never finished", i)
		}
		if failsFirst(i) && fails == 0 && cuts == 0 { // a kill may cut the failing attempt
			t.Errorf("index %d: its failing first attempt is not in the logs", i)
		}
		rerun += len(rs) - 1 - fails
	}
	// At most MaxProcessing runs at any time, across processes.
	type edge struct {
		at int64
		d  int
	}
	var edges []edge
	zombies := map[int]bool{}
	for _, r := range runs {
		if r.zombie {
			zombies[r.proc] = true
			continue
		}
		edges = append(edges, edge{r.start, 1}, edge{r.end, -1})
	}
	if len(zombies) > 0 {
		t.Logf("%d processes lost their keepalive (a loaded machine): their runs are left out of the overlap and MaxProcessing checks", len(zombies))
	}
	sort.Slice(edges, func(a, b int) bool {
		return edges[a].at < edges[b].at || edges[a].at == edges[b].at && edges[a].d < edges[b].d
	})
	now, top := 0, 0
	for _, e := range edges {
		now += e.d
		top = max(top, now)
	}
	if top > killMaxProc {
		t.Errorf("%d jobs ran at once, MaxProcessing is %d", top, killMaxProc)
	}
	p, err := c.Progress(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.Processed != killJobs || p.Next != killJobs || p.Finished != 0 {
		t.Errorf("progress %+v, want processed = next = %d", p, killJobs)
	}
	t.Logf("%d processes, %d kills, %d runs of %d jobs (%d cut by a kill, %d run again), at most %d at once",
		len(children), kills, len(runs), killJobs, cut, rerun, top)
	if cut == 0 {
		t.Errorf("no kill cut a run: the test did not test recovery")
	}
}

// dumpKeys logs every key of namespace ns with its contents (a failure's
// evidence).
func dumpKeys(t *testing.T, pool *redis.Pool, ns string) {
	c := pool.Get()
	defer c.Close()
	keys, _ := redis.Strings(c.Do("KEYS", ns+":*"))
	for _, k := range keys {
		typ, _ := redis.String(c.Do("TYPE", k))
		var v any
		switch typ {
		case "list":
			v, _ = redis.Strings(c.Do("LRANGE", k, 0, 20))
		case "hash":
			v, _ = redis.StringMap(c.Do("HGETALL", k))
		case "set":
			v, _ = redis.Strings(c.Do("SMEMBERS", k))
		case "zset":
			v, _ = redis.Strings(c.Do("ZRANGE", k, 0, 20, "WITHSCORES"))
		case "string":
			v, _ = redis.String(c.Do("GET", k))
		}
		if strings.Contains(k, ":t:") && typ == "hash" {
			m := v.(map[string]string)
			if m["s"] == "" {
				continue
			}
		}
		t.Logf("%s %s %v", typ, k, v)
	}
}

// With Worker.Replicas, a record is acknowledged only once the replicas
// have it, as a worker's ends are: OnProcessed (which tells the next
// consumer of a pipeline to read this one's progress) must never report a
// processed index that a failover can take back. Before, the record sent
// no WAIT and OnProcessed reported it at once; here the replica never got
// it, the primary died, and the promoted replica's processed index was
// below what OnProcessed had said ("it never goes down").
func TestOnProcessedWaitsForReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	primary, replicas, err := redistest.StartReplicated(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	replica := replicas[0]
	t.Cleanup(func() {
		_ = replica.Signal(syscall.SIGCONT)
		primary.Stop()
		replica.Stop()
	})
	pool := &redis.Pool{MaxIdle: 16, DialContext: func(ctx context.Context) (redis.Conn, error) {
		return redis.DialContext(ctx, "tcp", primary.Addr, redis.DialReadTimeout(5*time.Second))
	}}
	defer pool.Close()
	ns := redistest.Namespace()
	var (
		mu       sync.Mutex
		reported uint64
	)
	src := newSource(-1) // no job yet
	wc := worqr.WorkerConfig{
		Config:            worqr.Config{Namespace: ns, DisableEvents: true, Replicas: 1, ReplicaTimeout: 100 * time.Millisecond},
		HeartbeatInterval: 100 * time.Millisecond, HeartbeatTTL: 5 * time.Second,
		ReaperInterval: 50 * time.Millisecond, PollInterval: 50 * time.Millisecond,
	}
	c, err := consumer.New(pool, &consumer.Config[uint64]{Name: "durable", Source: src, Worker: wc,
		Process: func(context.Context, uint64, uint64) error { return nil },
		OnProcessed: func(p uint64) {
			mu.Lock()
			reported = max(reported, p)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = c.Stop(sctx)
	})

	// The replica stops acknowledging; job 0 comes and is done on the
	// primary (recorded, its taking ended).
	if err := replica.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	src.head.Store(0)
	c.Check()
	pc := redis.NewConn(mustDial(t, primary.Addr), 5*time.Second, 5*time.Second)
	defer pc.Close()
	state, task := ns+":{consumer.durable}:cs:consumer.durable", ns+":{consumer.durable}:t:0"
	// Not told through OnProcessed (the replica did not acknowledge) and
	// events are off: the state is read on the primary.
	redistest.WaitFor(t, patience, "job 0 recorded and its taking ended", func() bool {
		p, _ := redis.String(pc.Do("HGET", state, "processed"))
		n, _ := redis.Int(pc.Do("EXISTS", task))
		return p == "1" && n == 0
	})
	if n, _ := redis.Int(pc.Do("EXISTS", state)); n != 1 {
		t.Fatalf("progress hash %s missing on the primary (key names changed?)", state)
	}

	// The primary dies before the replica got the record; the replica
	// takes over.
	primary.Kill()
	if err := replica.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	rc := redis.NewConn(mustDial(t, replica.Addr), 5*time.Second, 5*time.Second)
	defer rc.Close()
	if _, err := rc.Do("REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
	after := uint64(0)
	if v, err := redis.Uint64(rc.Do("HGET", state, "processed")); err == nil {
		after = v
	}
	mu.Lock()
	defer mu.Unlock()
	if reported > after {
		t.Errorf("OnProcessed reported %d; after the failover the processed index is %d: it went down", reported, after)
	}
}

func mustDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return nc
}

// A Stop that comes before Start (a signal during the program's setup, or
// after a Start that failed) returns nil: the consumer is stopped. Its
// Stopped must then be closed, and a later Start refused, as a Worker's
// are: otherwise a late Start would run a consumer, dispatching and
// working jobs, whose Stop had already returned, with nobody left to stop
// it.
func TestStopBeforeStartIsFinal(t *testing.T) {
	b := setup(t)
	cfg := consumer.Config[uint64]{Name: "early", Source: newSource(9), Worker: b.fast(),
		Process: func(context.Context, uint64, uint64) error { return nil }}
	c, err := consumer.New(b.pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(context.Background()); err != nil {
		t.Fatalf("Stop before Start = %v, want nil", err)
	}
	if err := c.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop before Start = %v, want nil", err)
	}
	select {
	case <-c.Stopped():
	case <-time.After(time.Second):
		t.Error("Stopped is not closed after Stop returned")
	}
	if err := c.Start(context.Background()); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
		t.Fatal("Start after Stop = nil: a consumer runs after its Stop returned")
	}
	if p := progress(t, c); p.Next != 0 {
		t.Errorf("progress after a refused Start = %+v, want nothing dispatched", p)
	}
}
