package heartbeat

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/xid"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/registry"
)

// ErrLost is the cause of a session's context when its keepalive was lost.
var ErrLost = errors.New("worqr: keepalive lost")

// Session is one registered worker id. When its keepalive is lost it is
// retired for good: nothing may change Redis under its id any more.
type Session struct {
	id     string
	ctx    context.Context
	cancel context.CancelCauseFunc
	lost   atomic.Bool
	why    atomic.Pointer[error]
	until  atomic.Int64 // unix ms, Redis time
}

// ID is the session's worker id.
func (s *Session) ID() string { return s.id }

// Context ends when the session is retired; context.Cause says why. Handler
// contexts of the session derive from it.
func (s *Session) Context() context.Context { return s.ctx }

// Until is the session's deadline on Redis's clock: its keepalive lives at
// least until then (a margin of TTL/10 before its earliest expiry). A take
// is refused by Redis at or after it (rdb.TakeArgs.Until), so no taking is
// ever recorded under an id whose keepalive may be gone. Each good beat moves
// it on.
func (s *Session) Until() time.Time { return time.UnixMilli(s.until.Load()) }

// extend moves the deadline on to at + ttl - ttl/10 (Redis time at, read
// before the keepalive was set for ttl), never back.
func (s *Session) extend(at time.Time, ttl time.Duration) {
	u := at.Add(ttl - ttl/10).UnixMilli()
	for {
		old := s.until.Load()
		if u <= old || s.until.CompareAndSwap(old, u) {
			return
		}
	}
}

// Lost reports whether the session was retired.
func (s *Session) Lost() bool { return s.lost.Load() }

// Cause says why the session was retired (ErrLost when it was not said).
func (s *Session) Cause() error {
	if p := s.why.Load(); p != nil {
		return *p
	}
	return ErrLost
}

// Retire marks the session dead for good and cancels its context with
// cause why. The first cause wins. Lost reports true before the context
// is done: a handler that returns because of the cancel finds the session
// lost, and sends no end (at Stop, the requeue puts its taking back with
// nothing counted).
func (s *Session) Retire(why error) {
	s.why.CompareAndSwap(nil, &why)
	s.lost.Store(true)
	s.cancel(s.Cause())
}

// EventKind names what a Keeper reports.
type EventKind int

// The events of a Keeper.
const (
	Registered EventKind = iota // a new session (ID) is registered
	Lost                        // session ID's keepalive was lost
	Failed                      // a registration or beat failed (Err); retried
)

// Event is one thing that happened to the keepalive.
type Event struct {
	Kind EventKind
	ID   string
	Err  error
}

// Keeper keeps a worker registered and alive: it registers a session, beats
// its keepalive every Interval, and when the keepalive is lost retires the
// session and registers a new one under a new id (see the package doc for the
// state machine). Fill the exported fields before Start.
type Keeper struct {
	Registry *registry.Registry
	// Queues are recorded with each registration (the reaper's view of
	// what the worker may hold).
	Queues   []registry.Queue
	Interval time.Duration // between beats
	TTL      time.Duration // keepalive lifetime; > Interval
	Logger   *slog.Logger
	// OnEvent, when set, is called for each event, on the Keeper's
	// goroutine; it must return quickly.
	OnEvent func(Event)
	// Clock defaults to the system clock.
	Clock Clock

	mu      sync.Mutex
	cur     *Session
	changed chan struct{}
	// lastOK is when the last good beat was sent, as the time since epoch
	// (Clock.Now at Start): a difference of two readings of the clock, so
	// that it keeps their monotonic reading (a unix time would drop it,
	// and every silence would be timed on the wall clock, which steps).
	lastOK atomic.Int64
	epoch  time.Time
	parent context.Context

	// Confirm's requests and answers: kick asks the beat loop for a beat
	// now; sent counts the beats begun, okSeq is the number of the last
	// good one, and beaten is closed (and replaced) after each beat.
	kick   chan struct{}
	sent   uint64
	okSeq  uint64
	beaten chan struct{}
}

// Start registers the first session; ctx bounds the registration, and every
// session's context carries its values (not its cancellation: a session ends
// when it is retired, and Run retires the current one when it returns).
func (k *Keeper) Start(ctx context.Context) (*Session, error) {
	if k.Registry == nil {
		return nil, errors.New("heartbeat: Keeper.Registry is nil")
	}
	if k.Interval <= 0 || k.TTL <= k.Interval {
		return nil, errors.New("heartbeat: Keeper needs 0 < Interval < TTL")
	}
	if k.Clock == nil {
		k.Clock = systemClock{}
	}
	k.epoch = k.Clock.Now()
	k.parent = ctx
	k.changed = make(chan struct{})
	k.kick = make(chan struct{}, 1)
	k.beaten = make(chan struct{})
	s, err := k.register(ctx)
	if err != nil {
		return nil, err
	}
	k.cur = s
	return s, nil
}

func (k *Keeper) register(ctx context.Context) (*Session, error) {
	host, _ := os.Hostname()
	sent := k.Clock.Now()
	s, err := register(ctx, k.Registry, k.parent, k.TTL, host, os.Getpid(), k.Queues)
	if err != nil {
		return nil, err
	}
	k.lastOK.Store(int64(sent.Sub(k.epoch)))
	k.log().Info("heartbeat: registered", "worker_id", s.id)
	return s, nil
}

// register registers a session under a new id; its context carries parent's
// values (not its cancellation).
func register(ctx context.Context, reg *registry.Registry, parent context.Context, ttl time.Duration, host string, pid int, queues []registry.Queue) (*Session, error) {
	id := xid.New().String()
	at, err := reg.Register(ctx, id, ttl, host, pid, queues)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	s := &Session{id: id, ctx: sctx, cancel: cancel}
	s.extend(at, ttl)
	return s, nil
}

// Current returns the live session and a channel closed when it is replaced.
func (k *Keeper) Current() (*Session, <-chan struct{}) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cur, k.changed
}

// Fresh reports whether the current session's last good beat was sent less
// than TTL - Interval ago by the Keeper's clock: a process that was frozen
// (or cut off) longer than that must not take work before a beat says its
// id is still alive.
func (k *Keeper) Fresh() bool {
	return k.sinceOK() < k.TTL-k.Interval
}

// sinceOK is how long ago the last good beat was sent, by the Keeper's
// clock (monotonic when the clock's readings carry it).
func (k *Keeper) sinceOK() time.Duration {
	return k.Clock.Now().Sub(k.epoch) - time.Duration(k.lastOK.Load())
}

// Confirm asks for a beat of s now and waits until one begun after the
// call found the keepalive of s alive (nil), s is retired (its cause), or
// ctx ends. A worker calls it after its pool moved to another server (a
// failover): the new server may not have the keepalive (it expired there,
// or its last beats were never replicated), and the deadline of s
// (Session.Until) was read on the old server. Once Confirm returns nil,
// the new server holds the keepalive for a TTL from a beat after the
// switch.
func (k *Keeper) Confirm(ctx context.Context, s *Session) error {
	k.mu.Lock()
	want := k.sent + 1
	k.mu.Unlock()
	select {
	case k.kick <- struct{}{}:
	default:
	}
	for {
		k.mu.Lock()
		ok, ch := k.okSeq >= want, k.beaten
		k.mu.Unlock()
		switch {
		case s.Lost():
			<-s.ctx.Done() // Retire cancels it right after
			return s.Cause()
		case ok:
			return nil
		}
		select {
		case <-ch:
		case <-s.ctx.Done():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Run beats until ctx ends. On a lost keepalive it retires the session
// (cause ErrLost), reports Lost, registers a new session (retrying with
// capped backoff) and reports Registered.
func (k *Keeper) Run(ctx context.Context) {
	for {
		s, _ := k.Current()
		if err := k.beatLoop(ctx, s); !errors.Is(err, ErrLost) {
			s.Retire(context.Cause(ctx))
			return
		}
		s.Retire(ErrLost)
		k.emit(Event{Kind: Lost, ID: s.id, Err: ErrLost})
		next, ok := k.reregister(ctx)
		if !ok {
			return // the retired session stays current
		}
		k.mu.Lock()
		k.cur = next
		close(k.changed)
		k.changed = make(chan struct{})
		k.mu.Unlock()
		k.emit(Event{Kind: Registered, ID: next.id})
	}
}

// reregister registers under a new id, retrying with capped backoff until it
// works or ctx ends.
func (k *Keeper) reregister(ctx context.Context) (*Session, bool) {
	delay := 50 * time.Millisecond
	for {
		rctx, cancel := context.WithTimeout(ctx, k.TTL)
		s, err := k.register(rctx)
		cancel()
		if err == nil {
			return s, true
		}
		k.emit(Event{Kind: Failed, Err: err})
		k.log().Warn("heartbeat: register failed", "err", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, false
		case <-t.C:
		}
		delay = min(delay*2, 5*time.Second)
	}
}

// beatLoop beats id until ctx ends (returning ctx.Err()) or the keepalive is
// lost (returning ErrLost): a beat found the key gone, or no beat succeeded
// for a whole TTL (Redis unreachable), by when the key has expired and peers
// may already have requeued this worker's tasks.
func (k *Keeper) beatLoop(ctx context.Context, s *Session) error {
	id := s.id
	t := k.Clock.NewTicker(k.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C():
		case <-k.kick:
		}
		sent := k.Clock.Now()
		k.mu.Lock()
		k.sent++
		seq := k.sent
		k.mu.Unlock()
		alive, at, err := k.beat(ctx, id)
		if err == nil && alive {
			// Until and Fresh both move on before beaten is closed: a
			// caller woken by it (Confirm) sees the whole good beat.
			s.extend(at, k.TTL)
			k.lastOK.Store(int64(sent.Sub(k.epoch)))
		}
		k.mu.Lock()
		if err == nil && alive && k.cur == s {
			k.okSeq = seq
		}
		close(k.beaten)
		k.beaten = make(chan struct{})
		k.mu.Unlock()
		switch {
		case err == nil && alive:
		case err == nil:
			k.log().Warn("heartbeat: keepalive lost", "worker_id", id)
			return ErrLost
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			since := k.sinceOK()
			k.emit(Event{Kind: Failed, ID: id, Err: err})
			k.log().Warn("heartbeat: beat failed", "worker_id", id, "since_last_ok", since, "err", err)
			if since >= k.TTL {
				k.log().Warn("heartbeat: keepalive lost (no beat for a whole TTL)", "worker_id", id)
				return ErrLost
			}
		}
	}
}

// A beat draws connections from the user's pool. After a blip every idle
// connection in it may be dead, and each failed attempt makes the pool drop
// one, so a beat retries at once up to quickRetries times (a dead connection
// fails in microseconds), then every retryPause until its interval is over:
// one blip never costs the keepalive, and an outage never spins the CPU.
const (
	quickRetries = 32
	retryPause   = 25 * time.Millisecond
)

// beat renews the keepalive once, retrying connection errors within one
// interval. A Redis error reply (for example a permission error) is not
// retried.
func (k *Keeper) beat(ctx context.Context, id string) (bool, time.Time, error) {
	bctx, cancel := context.WithTimeout(ctx, k.Interval)
	defer cancel()
	for i := 0; ; i++ {
		alive, at, err := k.Registry.Beat(bctx, id, k.TTL)
		if err == nil || rdb.IsReplyError(err) || bctx.Err() != nil {
			return alive, at, err
		}
		if i >= quickRetries {
			select {
			case <-bctx.Done():
				return false, time.Time{}, err
			case <-time.After(retryPause):
			}
		}
	}
}

func (k *Keeper) emit(e Event) {
	if k.OnEvent != nil {
		k.OnEvent(e)
	}
}

func (k *Keeper) log() *slog.Logger {
	if k.Logger == nil {
		return slog.Default()
	}
	return k.Logger
}
