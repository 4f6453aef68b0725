package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
