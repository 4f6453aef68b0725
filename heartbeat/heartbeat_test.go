package heartbeat_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/heartbeat"
	"github.com/worqr/worqr-go/internal/dial"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/internal/seam"
	"github.com/worqr/worqr-go/registry"
)

// The Keeper's time is a manual clock: beats happen when a test advances it,
// never on their own. interval is also a beat's wall-time budget for its
// retries; ttl is long in wall time, so that only a test expires a key.
const (
	interval = 100 * time.Millisecond
	ttl      = 10 * time.Second
	patience = 5 * time.Second // how long a test waits for something that must happen
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// tickClock is seam.ManualClock that says when the Keeper made a ticker, so a
// test advances the clock only once the Keeper listens to it.
type tickClock struct {
	*seam.ManualClock
	made chan struct{}
}

func (c *tickClock) NewTicker(d time.Duration) heartbeat.Ticker {
	t := c.ManualClock.NewTicker(d)
	c.made <- struct{}{}
	return t
}

// fault is what flaky does to one call.
type fault int

const (
	dialFails  fault = iota + 1 // GetContext fails, as a refused dial
	deadConn                    // GetContext hands out a dead connection: its Do fails
	replyError                  // the command reaches "Redis", which refuses it
)

var (
	errDown    = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
	errNoPerm  = redis.Error("NOPERM this user has no permissions to run the 'set' command")
	errDialing = &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
)

// flaky is a ConnGetter in front of the test's pool that can break and heal:
// while down every GetContext fails; otherwise the next calls meet the queued
// faults, one each, before calls go through again.
type flaky struct {
	pool  *redis.Pool
	mu    sync.Mutex
	down  bool
	next  []fault
	calls int
}

func (f *flaky) setDown(down bool) {
	f.mu.Lock()
	f.down = down
	f.mu.Unlock()
}

// failNext makes the next n calls meet fault ft.
func (f *flaky) failNext(n int, ft fault) {
	f.mu.Lock()
	for range n {
		f.next = append(f.next, ft)
	}
	f.mu.Unlock()
}

// state returns how many calls were made and how many faults are left.
func (f *flaky) state() (calls, left int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls, len(f.next)
}

func (f *flaky) GetContext(ctx context.Context) (redis.Conn, error) {
	f.mu.Lock()
	f.calls++
	down := f.down
	var ft fault
	if !down && len(f.next) > 0 {
		ft, f.next = f.next[0], f.next[1:]
	}
	f.mu.Unlock()
	switch {
	case down:
		return nil, errDown
	case ft == dialFails:
		return nil, errDialing
	case ft == deadConn:
		// A pooled connection reset by a blip: writing to it fails.
		a, b := net.Pipe()
		b.Close()
		return redis.NewConn(a, time.Second, time.Second), nil
	case ft == replyError:
		return errConn{errNoPerm}, nil
	}
	return f.pool.GetContext(ctx)
}

// errConn answers every command with err.
type errConn struct{ err error }

func (c errConn) Close() error                                           { return nil }
func (c errConn) Err() error                                             { return nil }
func (c errConn) Do(string, ...any) (any, error)                         { return nil, c.err }
func (c errConn) DoContext(context.Context, string, ...any) (any, error) { return nil, c.err }
func (c errConn) DoWithTimeout(time.Duration, string, ...any) (any, error) {
	return nil, c.err
}
func (c errConn) Send(string, ...any) error                     { return c.err }
func (c errConn) Flush() error                                  { return c.err }
func (c errConn) Receive() (any, error)                         { return nil, c.err }
func (c errConn) ReceiveContext(context.Context) (any, error)   { return nil, c.err }
func (c errConn) ReceiveWithTimeout(time.Duration) (any, error) { return nil, c.err }

// bundle is one test's Keeper with what drives and observes it.
type bundle struct {
	ctx    context.Context
	pool   *redis.Pool
	k      rdb.Keys
	reg    *registry.Registry
	net    *flaky
	clock  *tickClock
	keeper *heartbeat.Keeper
	events chan heartbeat.Event
}

var emails = registry.Queue{Tag: "emails", Name: "emails"}

// setup returns a Keeper (not started) on a healthy flaky pool and a manual
// clock; edit changes the Keeper before it is returned.
func setup(t *testing.T, edit ...func(*heartbeat.Keeper)) *bundle {
	t.Helper()
	pool := srv.TagCheckedPool(t)
	ns := redistest.Namespace()
	fl := &flaky{pool: pool}
	reg, err := registry.New(fl, ns)
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{
		ctx: context.Background(), pool: pool, k: rdb.NewKeys(ns), reg: reg, net: fl,
		clock:  &tickClock{ManualClock: seam.NewManualClock(time.Unix(1_700_000_000, 0)), made: make(chan struct{}, 100)},
		events: make(chan heartbeat.Event, 1000),
	}
	b.keeper = &heartbeat.Keeper{
		Registry: reg, Queues: []registry.Queue{emails},
		Interval: interval, TTL: ttl, Logger: quiet, Clock: b.clock,
		OnEvent: func(e heartbeat.Event) { b.events <- e },
	}
	for _, f := range edit {
		f(b.keeper)
	}
	return b
}

func (b *bundle) start(t *testing.T) *heartbeat.Session {
	t.Helper()
	s, err := b.keeper.Start(b.ctx)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return s
}

// run runs the Keeper until the test ends (or stop is called, which waits
// for Run to return).
func (b *bundle) run(t *testing.T, ctx context.Context) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		b.keeper.Run(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-finished:
			case <-time.After(patience):
				t.Error("Run did not return after its context was cancelled")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitTicker waits until the Keeper's beat loop made its next ticker (one per
// session): advancing the clock before that would tick nothing.
func (b *bundle) waitTicker(t *testing.T) {
	t.Helper()
	select {
	case <-b.clock.made:
	case <-time.After(patience):
		t.Fatal("the Keeper made no ticker")
	}
}

func (b *bundle) do(t *testing.T, cmd string, args ...any) any {
	t.Helper()
	c := b.pool.Get()
	defer c.Close()
	v, err := c.Do(cmd, args...)
	if err != nil {
		t.Fatalf("%s %v: %v", cmd, args, err)
	}
	return v
}

func (b *bundle) keyExists(t *testing.T, id string) bool {
	t.Helper()
	return b.do(t, "EXISTS", b.k.Keepalive(id)).(int64) == 1
}

// beatOnce advances the clock by d and waits until a beat renewed id's
// keepalive: the key is first given a life no beat gives, so a PTTL back
// within the TTL can only come from a beat.
func (b *bundle) beatOnce(t *testing.T, id string, d time.Duration) {
	t.Helper()
	if n := b.do(t, "PEXPIRE", b.k.Keepalive(id), 10*time.Minute.Milliseconds()).(int64); n != 1 {
		t.Fatalf("keepalive of %s missing before the beat", id)
	}
	b.clock.Advance(d)
	b.afterBeats(t, "no beat renewed the keepalive of "+id+" after the clock advanced "+d.String(), func() bool {
		return b.do(t, "PTTL", b.k.Keepalive(id)).(int64) <= ttl.Milliseconds()
	})
}

// waitFresh waits until the Keeper is fresh: beatOnce returns once Redis
// applied the renewal, a moment before the beat is over.
func (b *bundle) waitFresh(t *testing.T, when string) {
	t.Helper()
	b.afterBeats(t, "Fresh() = false "+when, b.keeper.Fresh)
}

// afterBeats checks cond now and after each beat that ends, and fails the
// test with what when no beat made it hold within patience.
func (b *bundle) afterBeats(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(patience)
	for {
		beaten := b.keeper.Beaten() // before cond: a beat ending in between closes it
		if cond() {
			return
		}
		select {
		case <-beaten:
		case <-deadline:
			t.Fatal(what)
		}
	}
}

// next returns the Keeper's next event.
func (b *bundle) next(t *testing.T) heartbeat.Event {
	t.Helper()
	select {
	case e := <-b.events:
		return e
	case <-time.After(patience):
		t.Fatal("the Keeper reported nothing")
		return heartbeat.Event{}
	}
}

// noEvents fails if the Keeper reported anything so far.
func (b *bundle) noEvents(t *testing.T) {
	t.Helper()
	select {
	case e := <-b.events:
		t.Fatalf("unexpected event %+v", e)
	default:
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// checkRetired checks that s was retired for good with cause why.
func checkRetired(t *testing.T, s *heartbeat.Session, why error) {
	t.Helper()
	if !s.Lost() {
		t.Errorf("session %s: Lost() = false, want true", s.ID())
	}
	select {
	case <-s.Context().Done():
	default:
		t.Fatalf("session %s: context not cancelled", s.ID())
	}
	if c := context.Cause(s.Context()); !errors.Is(c, why) {
		t.Errorf("session %s: context cause = %v, want %v", s.ID(), c, why)
	}
	if c := s.Cause(); !errors.Is(c, why) {
		t.Errorf("session %s: Cause() = %v, want %v", s.ID(), c, why)
	}
}

func checkLive(t *testing.T, s *heartbeat.Session) {
	t.Helper()
	if s.Lost() || s.Context().Err() != nil {
		t.Fatalf("session %s: Lost() = %v, context error %v; want a live session", s.ID(), s.Lost(), s.Context().Err())
	}
}

// checkRegistered checks what Redis holds about a session just registered.
func (b *bundle) checkRegistered(t *testing.T, id string) {
	t.Helper()
	if ms := b.do(t, "PTTL", b.k.Keepalive(id)).(int64); ms <= (ttl-time.Second).Milliseconds() || ms > ttl.Milliseconds() {
		t.Errorf("keepalive of %s: PTTL = %dms, want about %v", id, ms, ttl)
	}
	ws, err := b.reg.Workers(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(ws, id) {
		t.Errorf("Workers = %v, want %s among them", ws, id)
	}
	infos, err := b.reg.Describe(b.ctx, []string{id})
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	wi := infos[0]
	if wi.Host != host || wi.PID != os.Getpid() || wi.TTL != ttl || !wi.Alive ||
		!reflect.DeepEqual(wi.Queues, []registry.Queue{emails}) {
		t.Errorf("Describe(%s) = %+v, want this host and process, TTL %v, queues [emails], alive", id, wi, ttl)
	}
}

func TestStartValidates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(*heartbeat.Keeper)
	}{
		{"no registry", func(k *heartbeat.Keeper) { k.Registry = nil }},
		{"zero interval", func(k *heartbeat.Keeper) { k.Interval = 0 }},
		{"ttl equal to interval", func(k *heartbeat.Keeper) { k.TTL = k.Interval }},
		{"ttl under interval", func(k *heartbeat.Keeper) { k.TTL = k.Interval / 2 }},
	} {
		b := setup(t, tc.edit)
		if s, err := b.keeper.Start(b.ctx); err == nil {
			t.Errorf("%s: Start = session %s, want an error", tc.name, s.ID())
		}
		if calls, _ := b.net.state(); calls != 0 {
			t.Errorf("%s: a refused Start still sent %d commands", tc.name, calls)
		}
	}

	// A registration that fails is Start's error.
	b := setup(t)
	b.net.setDown(true)
	if _, err := b.keeper.Start(b.ctx); !errors.Is(err, errDown) {
		t.Errorf("Start with Redis unreachable = %v, want the pool's error", err)
	}
}

// registered -> alive -> lost (key deleted) -> registered again under a new id.
func TestKeeperLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s1 := b.start(t)
	b.checkRegistered(t, s1.ID())
	cur, changed := b.keeper.Current()
	if cur != s1 {
		t.Fatalf("Current() = %s, want the session Start returned (%s)", cur.ID(), s1.ID())
	}
	checkLive(t, s1)
	if !b.keeper.Fresh() {
		t.Error("Fresh() = false right after registration")
	}

	// Alive: each tick beats, over three TTLs of the Keeper's clock.
	b.run(t, b.ctx)
	b.waitTicker(t)
	for range 6 {
		b.beatOnce(t, s1.ID(), ttl/2)
		b.waitFresh(t, "right after a good beat")
	}
	b.noEvents(t)
	checkLive(t, s1)
	if closed(changed) {
		t.Fatal("Current()'s channel closed while the session was alive")
	}

	// Lost: the key is gone, the next beat finds it so.
	b.do(t, "DEL", b.k.Keepalive(s1.ID()))
	b.clock.Advance(interval)
	if e := b.next(t); e.Kind != heartbeat.Lost || e.ID != s1.ID() || !errors.Is(e.Err, heartbeat.ErrLost) {
		t.Fatalf("first event after the key was deleted = %+v, want Lost of %s", e, s1.ID())
	}
	checkRetired(t, s1, heartbeat.ErrLost)

	// Registered again, under a new id.
	e := b.next(t)
	if e.Kind != heartbeat.Registered || e.ID == "" || e.ID == s1.ID() {
		t.Fatalf("event after Lost = %+v, want Registered under a new id", e)
	}
	// By the time Registered is reported, Current() has the new session.
	if !closed(changed) {
		t.Error("Current()'s channel still open after the session was replaced")
	}
	s2, changed2 := b.keeper.Current()
	if s2.ID() != e.ID {
		t.Fatalf("Current() = %s, want the newly registered %s", s2.ID(), e.ID)
	}
	checkLive(t, s2)
	if closed(changed2) {
		t.Error("the new session's change channel is already closed")
	}
	b.checkRegistered(t, s2.ID())
	if b.keyExists(t, s1.ID()) {
		t.Error("the lost id's keepalive came back")
	}
	if !b.keeper.Fresh() {
		t.Error("Fresh() = false right after the new registration")
	}

	// The new session is kept alive in turn; the old one stays dead.
	b.waitTicker(t)
	b.beatOnce(t, s2.ID(), interval)
	b.beatOnce(t, s2.ID(), interval)
	b.noEvents(t)
	checkLive(t, s2)
	if b.keyExists(t, s1.ID()) {
		t.Error("the lost id's keepalive came back")
	}
}

// A frozen process: its clock does not move, so it does not beat, and Redis
// expires its key. When it wakes, its first beat finds the key gone.
func TestKeeperLostAfterFreeze(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s1 := b.start(t)
	b.run(t, b.ctx)
	b.waitTicker(t)
	b.beatOnce(t, s1.ID(), interval)

	// Frozen: the TTL passes in Redis, not on the Keeper's clock.
	b.do(t, "PEXPIRE", b.k.Keepalive(s1.ID()), 1)
	redistest.WaitFor(t, patience, "the keepalive to expire", func() bool { return !b.keyExists(t, s1.ID()) })
	// It has noticed nothing yet.
	b.noEvents(t)
	checkLive(t, s1)

	// It wakes a whole TTL later: one tick (a ticker drops the others).
	b.clock.Advance(ttl)
	if e := b.next(t); e.Kind != heartbeat.Lost || e.ID != s1.ID() {
		t.Fatalf("event after the wake-up = %+v, want Lost of %s", e, s1.ID())
	}
	checkRetired(t, s1, heartbeat.ErrLost)
	e := b.next(t)
	if e.Kind != heartbeat.Registered || e.ID == s1.ID() {
		t.Fatalf("event after Lost = %+v, want Registered under a new id", e)
	}
	if b.keyExists(t, s1.ID()) {
		t.Error("the keepalive that expired came back")
	}
	b.checkRegistered(t, e.ID)
}

// Fresh is false once TTL - Interval passed on the Keeper's clock without a
// good beat, and true again after one.
func TestFresh(t *testing.T) {
	t.Parallel()
	t.Run("no beats", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.start(t) // Run is not started: nothing beats
		b.clock.Advance(ttl - interval - time.Millisecond)
		if !b.keeper.Fresh() {
			t.Errorf("Fresh() = false %v after registration, want true until %v", ttl-interval-time.Millisecond, ttl-interval)
		}
		b.clock.Advance(time.Millisecond)
		if b.keeper.Fresh() {
			t.Errorf("Fresh() = true %v after the last good beat, want false", ttl-interval)
		}
	})
	t.Run("failed beats", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s1 := b.start(t)
		b.run(t, b.ctx)
		b.waitTicker(t)
		b.net.setDown(true)

		b.clock.Advance(ttl - 2*interval)
		if e := b.next(t); e.Kind != heartbeat.Failed || e.ID != s1.ID() || !errors.Is(e.Err, errDown) {
			t.Fatalf("event = %+v, want Failed of %s with the pool's error", e, s1.ID())
		}
		if !b.keeper.Fresh() {
			t.Errorf("Fresh() = false %v after the last good beat", ttl-2*interval)
		}
		b.clock.Advance(interval)
		if e := b.next(t); e.Kind != heartbeat.Failed {
			t.Fatalf("event = %+v, want Failed", e)
		}
		if b.keeper.Fresh() {
			t.Errorf("Fresh() = true %v after the last good beat (TTL %v, Interval %v)", ttl-interval, ttl, interval)
		}
		checkLive(t, s1) // stale is not lost

		// Redis is back; the key is still there; a good beat makes it fresh.
		b.net.setDown(false)
		b.beatOnce(t, s1.ID(), interval)
		b.waitFresh(t, "after a good beat")
		b.noEvents(t)
		checkLive(t, s1)
	})
}

// Failed beats alone are not a loss: only a whole TTL without a good one.
// Then the session is retired, and registration is retried until it works.
func TestKeeperLostWhenNoBeatForATTL(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s1 := b.start(t)
	b.run(t, b.ctx)
	b.waitTicker(t)
	b.net.setDown(true)

	b.clock.Advance(ttl - interval)
	if e := b.next(t); e.Kind != heartbeat.Failed || e.ID != s1.ID() {
		t.Fatalf("event = %+v, want Failed of %s", e, s1.ID())
	}
	b.noEvents(t)
	checkLive(t, s1)

	b.clock.Advance(interval)
	if e := b.next(t); e.Kind != heartbeat.Failed || e.ID != s1.ID() {
		t.Fatalf("event = %+v, want Failed of %s", e, s1.ID())
	}
	if e := b.next(t); e.Kind != heartbeat.Lost || e.ID != s1.ID() || !errors.Is(e.Err, heartbeat.ErrLost) {
		t.Fatalf("event after a whole TTL without a good beat = %+v, want Lost of %s", e, s1.ID())
	}
	checkRetired(t, s1, heartbeat.ErrLost)
	_, changed := b.keeper.Current()

	// Registration fails while Redis is down, and is retried.
	if e := b.next(t); e.Kind != heartbeat.Failed || !errors.Is(e.Err, errDown) {
		t.Fatalf("event = %+v, want a failed registration", e)
	}
	if s, _ := b.keeper.Current(); s != s1 || closed(changed) {
		t.Fatal("Current() changed before a new session was registered")
	}
	b.net.setDown(false)
	var e heartbeat.Event
	for e = b.next(t); e.Kind == heartbeat.Failed; e = b.next(t) {
	}
	if e.Kind != heartbeat.Registered || e.ID == s1.ID() {
		t.Fatalf("event once Redis is back = %+v, want Registered under a new id", e)
	}
	if !closed(changed) {
		t.Error("Current()'s channel still open after the session was replaced")
	}
	if s2, _ := b.keeper.Current(); s2.ID() != e.ID {
		t.Errorf("Current() = %s, want %s", s2.ID(), e.ID)
	}
	b.checkRegistered(t, e.ID)
}

// One blip must not cost a beat: a beat that meets connection errors (dials
// refused, dead pooled connections) retries within its interval.
func TestBeatRetriesConnectionErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		fault    fault
		n        int
		interval time.Duration
	}{
		{"dials refused", dialFails, 20, interval},
		{"dead pooled connections", deadConn, 20, interval},
		// Beyond the immediate retries a beat pauses between tries; its
		// interval still leaves room for them.
		{"more dead connections than quick retries", deadConn, 40, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(k *heartbeat.Keeper) { k.Interval = tc.interval })
			s1 := b.start(t)
			b.run(t, b.ctx)
			b.waitTicker(t)
			before, _ := b.net.state()
			b.net.failNext(tc.n, tc.fault)
			b.beatOnce(t, s1.ID(), tc.interval)
			calls, left := b.net.state()
			if left != 0 || calls-before != tc.n+1 {
				t.Errorf("the beat made %d calls (%d faults left), want %d failed then one good", calls-before, left, tc.n)
			}
			b.noEvents(t) // not even Failed: the beat worked
			checkLive(t, s1)
			if !b.keeper.Fresh() {
				t.Error("Fresh() = false after the beat")
			}
		})
	}
}

// An error reply is Redis refusing the command: retrying cannot help, the beat
// fails at once, and the next beat tries again.
func TestBeatDoesNotRetryErrorReplies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s1 := b.start(t)
	b.run(t, b.ctx)
	b.waitTicker(t)
	before, _ := b.net.state()
	b.net.failNext(1, replyError)
	b.clock.Advance(interval)
	if e := b.next(t); e.Kind != heartbeat.Failed || e.ID != s1.ID() || !errors.Is(e.Err, errNoPerm) {
		t.Fatalf("event = %+v, want Failed of %s with the error reply", e, s1.ID())
	}
	if calls, _ := b.net.state(); calls-before != 1 {
		t.Errorf("the beat made %d calls for an error reply, want 1", calls-before)
	}
	checkLive(t, s1)
	b.beatOnce(t, s1.ID(), interval)
	b.noEvents(t)
}

// Run retires the current session when its context ends, with its cause.
func TestRunRetiresSessionWhenContextEnds(t *testing.T) {
	t.Parallel()
	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s1 := b.start(t)
		why := errors.New("shutting down")
		ctx, cancel := context.WithCancelCause(b.ctx)
		stop := b.run(t, ctx)
		b.waitTicker(t)
		b.beatOnce(t, s1.ID(), interval)
		cancel(why)
		stop() // waits for Run to return
		checkRetired(t, s1, why)
		b.noEvents(t)
		if s, _ := b.keeper.Current(); s != s1 {
			t.Error("Run registered a new session after its context ended")
		}
	})
	t.Run("deadline", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s1 := b.start(t)
		ctx, cancel := context.WithTimeout(b.ctx, 50*time.Millisecond)
		defer cancel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			b.keeper.Run(ctx)
		}()
		select {
		case <-done:
		case <-time.After(patience):
			t.Fatal("Run did not return when its deadline passed")
		}
		checkRetired(t, s1, context.DeadlineExceeded)
	})
}

// redisNow reads Redis's clock.
func (b *bundle) redisNow(t *testing.T) time.Time {
	t.Helper()
	v, err := redis.Int64s(b.do(t, "TIME"), nil)
	if err != nil || len(v) != 2 {
		t.Fatalf("TIME = %v, %v", v, err)
	}
	return time.UnixMicro(v[0]*1e6 + v[1])
}

// A session's deadline is on Redis's clock, a tenth of the TTL before the
// keepalive can expire: set by the registration, moved on by each good beat
// from the Redis time the beat read before renewing.
func TestSessionUntilFollowsRedisClock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	margin := ttl - ttl/10
	within := func(what string, u, lo, hi time.Time) {
		t.Helper()
		lo, hi = lo.Add(margin).Truncate(time.Millisecond), hi.Add(margin)
		if u.Before(lo) || u.After(hi) {
			t.Errorf("%s: Until = %v, want between %v and %v (Redis time + TTL - TTL/10)", what, u, lo, hi)
		}
	}
	before := b.redisNow(t)
	s := b.start(t)
	within("after Start", s.Until(), before, b.redisNow(t))

	b.run(t, b.ctx)
	b.waitTicker(t)
	first := s.Until()
	// Redis's clock cannot be injected: wait until it has moved on from
	// the registration, so that a beat moves Until on.
	registered := b.redisNow(t)
	redistest.WaitFor(t, patience, "Redis's clock to move on", func() bool {
		return b.redisNow(t).Sub(registered) >= 5*time.Millisecond
	})
	before = b.redisNow(t)
	b.beatOnce(t, s.ID(), interval)
	b.afterBeats(t, "a good beat to move Until on", func() bool {
		return !s.Until().Before(before.Add(margin).Truncate(time.Millisecond))
	})
	within("after a beat", s.Until(), before, b.redisNow(t))
	if !s.Until().After(first) {
		t.Errorf("Until = %v after a beat, want later than %v (at Start)", s.Until(), first)
	}
}

// Confirm beats at once (the clock does not move) and returns once a beat
// begun after the call found the keepalive alive; when the key is gone
// (a failover to a server that never got it) it returns the retired
// session's cause, and the keeper registers a new id.
func TestConfirm(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s1 := b.start(t)
	b.run(t, b.ctx)
	b.waitTicker(t)
	b.do(t, "PEXPIRE", b.k.Keepalive(s1.ID()), 10*time.Minute.Milliseconds())
	ctx, cancel := context.WithTimeout(b.ctx, patience)
	defer cancel()
	if err := b.keeper.Confirm(ctx, s1); err != nil {
		t.Fatalf("Confirm of a live session: %v", err)
	}
	if pttl := b.do(t, "PTTL", b.k.Keepalive(s1.ID())).(int64); pttl > ttl.Milliseconds() {
		t.Fatalf("Confirm returned before a beat renewed the keepalive (PTTL %d ms)", pttl)
	}
	b.noEvents(t)

	b.do(t, "DEL", b.k.Keepalive(s1.ID()))
	if err := b.keeper.Confirm(ctx, s1); !errors.Is(err, heartbeat.ErrLost) {
		t.Fatalf("Confirm of a session whose key is gone: %v, want ErrLost", err)
	}
	checkRetired(t, s1, heartbeat.ErrLost)
	if e := b.next(t); e.Kind != heartbeat.Lost || e.ID != s1.ID() {
		t.Fatalf("event %+v, want Lost of %s", e, s1.ID())
	}
	if e := b.next(t); e.Kind != heartbeat.Registered {
		t.Fatalf("event %+v, want Registered", e)
	}
	// A Confirm of the retired session returns its cause at once.
	if err := b.keeper.Confirm(ctx, s1); !errors.Is(err, heartbeat.ErrLost) {
		t.Fatalf("Confirm of a retired session: %v", err)
	}
}

// blackhole forwards TCP to target until cut, then swallows every byte in
// both directions, on the connections it has and on new ones: a network
// partition that drops packets (no reset), as the client sees it. Its
// writes succeed, and no reply ever comes.
type blackhole struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
}

func newBlackhole(t *testing.T, target string) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &blackhole{ln: ln, target: target}
	go h.accept()
	t.Cleanup(h.close)
	return h
}

func (h *blackhole) addr() string { return h.ln.Addr().String() }

func (h *blackhole) isCut() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cut
}

func (h *blackhole) setCut() {
	h.mu.Lock()
	h.cut = true
	h.mu.Unlock()
}

func (h *blackhole) track(c net.Conn) {
	h.mu.Lock()
	h.conns = append(h.conns, c)
	h.mu.Unlock()
}

func (h *blackhole) close() {
	h.ln.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		c.Close()
	}
}

func (h *blackhole) accept() {
	for {
		c, err := h.ln.Accept()
		if err != nil {
			return
		}
		h.track(c)
		if h.isCut() {
			go io.Copy(io.Discard, c)
			continue
		}
		up, err := net.Dial("tcp", h.target)
		if err != nil {
			c.Close()
			continue
		}
		h.track(up)
		go h.pipe(up, c)
		go h.pipe(c, up)
	}
}

// pipe copies src to dst until the hole is cut, then reads and drops.
func (h *blackhole) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		if h.isCut() {
			continue
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

// A worker cut off from Redis by a partition that drops packets must still
// find, a TTL after its last good beat, that its keepalive is lost, and
// cancel its handlers: by then the key has expired and a reaper on the
// other side requeues what it holds. The production pool (dial.Pool, as
// NewPool builds it) pings a connection idle for a minute or more before
// handing it out; that PING carried no deadline, so the beat that drew such
// a connection waited for its reply as long as TCP kept the connection
// (about 15 minutes of retransmissions on Linux; here, for ever), no later
// beat ran, the TTL check never came, and the handlers ran on beside the
// tasks' second owners.
func TestKeeperLostBehindABlackholeWithIdleConnections(t *testing.T) {
	t.Parallel()
	hole := newBlackhole(t, srv.Addr)
	pool, err := dial.Pool(dial.Options{URL: "redis://" + hole.addr(), MaxIdle: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// Every idle connection counts as idle for an hour: the state of a
	// pool after a burst of work, a minute later (the one thing the test
	// does not wait for in wall time).
	if f := pool.TestOnBorrow; f != nil {
		pool.TestOnBorrow = func(c redis.Conn, idle time.Time) error { return f(c, idle.Add(-time.Hour)) }
	}
	if f := pool.TestOnBorrowContext; f != nil {
		pool.TestOnBorrowContext = func(ctx context.Context, c redis.Conn, idle time.Time) error {
			return f(ctx, c, idle.Add(-time.Hour))
		}
	}
	reg, err := registry.New(pool, redistest.Namespace())
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, func(k *heartbeat.Keeper) { k.TTL = 5 * interval })
	b.keeper.Registry = reg
	s1 := b.start(t)
	// A burst of work leaves idle connections in the pool.
	var cs []redis.Conn
	for range 4 {
		c := pool.Get()
		if _, err := c.Do("PING"); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	for _, c := range cs {
		c.Close()
	}
	b.run(t, b.ctx)
	b.waitTicker(t)

	hole.setCut()
	lost := make(chan struct{})
	go func() {
		defer close(lost)
		for e := range b.events {
			if e.Kind == heartbeat.Lost && e.ID == s1.ID() {
				return
			}
		}
	}()
	// The keeper's clock moves a TTL on, one interval at a time, while
	// each beat has its interval of wall time to fail in.
	deadline := time.After(patience)
	for advanced := time.Duration(0); ; {
		select {
		case <-lost:
			checkRetired(t, s1, heartbeat.ErrLost)
			return
		case <-deadline:
			t.Fatalf("no Lost event %v after the partition (keeper clock moved %v, TTL %v): a beat hangs on an idle connection's check",
				patience, advanced, b.keeper.TTL)
		case <-time.After(2 * interval):
			if advanced < 2*b.keeper.TTL {
				b.clock.Advance(interval)
				advanced += interval
			}
		}
	}
}

// wallShifted returns t, which must carry a monotonic clock reading (as
// time.Now's do), with its wall clock moved by whole seconds of d and its
// monotonic reading kept: what time.Now returns after the system clock was
// stepped (NTP, a VM resumed, an operator's date -s). time has no API for
// it; the layout is that of Go's time.Time (with a monotonic reading, wall
// holds 33 bits of seconds since 1885 above 30 bits of nanoseconds).
func wallShifted(t *testing.T, at time.Time, d time.Duration) time.Time {
	t.Helper()
	type rep struct {
		wall uint64
		ext  int64
		loc  *time.Location
	}
	r := *(*rep)(unsafe.Pointer(&at))
	if r.wall&(1<<63) == 0 {
		t.Fatal("wallShifted: no monotonic reading")
	}
	r.wall = uint64(int64(r.wall) + int64(d/time.Second)<<30)
	out := *(*time.Time)(unsafe.Pointer(&r))
	if got := out.Unix() - at.Unix(); got != int64(d/time.Second) || out.Sub(at) != 0 {
		t.Fatalf("wallShifted: wall moved %ds, monotonic %v; the layout of time.Time changed", got, out.Sub(at))
	}
	return out
}

// stepClock is a manual clock whose readings carry a monotonic reading
// that follows Advance, and whose wall clock can be stepped apart from it.
type stepClock struct {
	*tickClock
	t     *testing.T
	start time.Time // the manual clock's start
	mono  time.Time // time.Now() when made: the monotonic base
	step  time.Duration
}

func newStepClock(t *testing.T) *stepClock {
	start := time.Unix(1_700_000_000, 0)
	return &stepClock{
		tickClock: &tickClock{ManualClock: seam.NewManualClock(start), made: make(chan struct{}, 100)},
		t:         t, start: start, mono: time.Now(),
	}
}

func (c *stepClock) Now() time.Time {
	return wallShifted(c.t, c.mono.Add(c.ManualClock.Now().Sub(c.start)), c.step)
}

// The Keeper and a Lease time their silence (Fresh, "no good beat for a
// whole TTL") on the local clock. They stored the last good beat as unix
// nanoseconds, which drops Go's monotonic reading: every elapsed time was
// read on the wall clock. A step of the system clock forward by a TTL made
// a worker stale (no takes, takings received not run) and, with one failed
// beat, retired its session (every handler cancelled and run again
// elsewhere); a Lease (a remote's session on the gateway) was retired at
// once. A step back made a worker cut off from Redis never find its
// keepalive lost: its handlers ran on for as long as the step, while the
// reaper requeued their tasks to other workers.
func TestKeeperTimesSilenceOnTheMonotonicClock(t *testing.T) {
	t.Parallel()
	t.Run("stepped forward", func(t *testing.T) {
		t.Parallel()
		clock := newStepClock(t)
		b := setup(t)
		b.clock = clock.tickClock
		b.keeper.Clock = clock
		s1 := b.start(t)
		b.run(t, b.ctx)
		b.waitTicker(t)
		b.beatOnce(t, s1.ID(), interval)
		b.waitFresh(t, "after a good beat")

		clock.step = 2 * ttl // the system clock jumps on: no time passed
		if !b.keeper.Fresh() {
			t.Error("Fresh() = false right after a good beat: the wall clock was stepped forward")
		}
		// One beat meets a blip.
		b.net.failNext(1000, dialFails)
		b.clock.Advance(interval)
		if e := b.next(t); e.Kind != heartbeat.Failed {
			t.Fatalf("event = %+v, want Failed", e)
		}
		select {
		case e := <-b.events:
			t.Fatalf("event %+v after one failed beat %v after a good one (TTL %v)", e, 2*interval, ttl)
		case <-time.After(10 * interval):
		}
		checkLive(t, s1)
	})
	t.Run("stepped back", func(t *testing.T) {
		t.Parallel()
		clock := newStepClock(t)
		const short = 5 * interval
		b := setup(t, func(k *heartbeat.Keeper) { k.TTL = short })
		b.clock = clock.tickClock
		b.keeper.Clock = clock
		s1 := b.start(t)
		b.run(t, b.ctx)
		b.waitTicker(t)
		clock.step = -time.Hour
		b.net.setDown(true) // cut off from Redis for good
		for range short / interval {
			b.clock.Advance(interval)
			if e := b.next(t); e.Kind != heartbeat.Failed {
				break
			}
		}
		deadline := time.After(patience)
		for {
			select {
			case e := <-b.events:
				if e.Kind == heartbeat.Lost && e.ID == s1.ID() {
					checkRetired(t, s1, heartbeat.ErrLost)
					return
				}
			case <-deadline:
				t.Fatalf("no Lost a whole TTL (%v) without a good beat: the wall clock was stepped back an hour", short)
			}
		}
	})
}
