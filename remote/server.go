package remote

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/worqr/worqr-go/defaults"

	"github.com/worqr/worqr-go/heartbeat"
	"github.com/worqr/worqr-go/internal/engine"
	"github.com/worqr/worqr-go/internal/group"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/seam"
	"github.com/worqr/worqr-go/internal/startstop"
	"github.com/worqr/worqr-go/recovery"
	"github.com/worqr/worqr-go/registry"
	"github.com/worqr/worqr-go/worqr"
)

// Server serves worqr queues to workers in other processes or languages (the
// gateway is a thin layer over it). Each Session is a worqr worker: it
// registers a worker id with a keepalive that its remote renews by calling
// Beat, it takes with the same script and deadline fence as a Worker, and
// every taking it ends goes through the same batched end call, whose
// ownership check refuses the end of a taking the session no longer holds.
// The pid of each taking is the fencing token the remote presents.
//
// Sessions live in the memory of the process that opened them: a remote must
// keep talking to that process (a gateway behind a load balancer needs
// sticky routing by session). When the process or the remote goes away,
// the session's keepalive expires and the ordinary recovery requeues its
// takings, within SessionTTL + ReaperInterval, as for a Worker.
type Server struct {
	pool worqr.ConnGetter
	st   *rdb.Store
	reg  *registry.Registry
	cfg  Config
	// deliver and flush deliver events (Config.OnEvent, the event
	// stream); emit stamps them first.
	deliver func(worqr.Event)
	flush   func()

	mu       sync.Mutex
	queues   map[string]*remoteQueue
	sessions map[string]*Session
	opening  int // Opens under way (counted against MaxSessions)
	// retired sessions are kept for memory(), so that an end repeated
	// after its reply was lost still gets its recorded answer.
	retired map[string]*Session
	subGrew chan struct{} // cap 1: the set of queues to listen to grew

	life startstop.Machine // Start, Stop, Stopped

	draining  atomic.Bool
	runCtx    context.Context
	runCancel context.CancelFunc
	bg        sync.WaitGroup
}

// Config is what a Server needs. Every field has a default, given in
// its comment.
type Config struct {
	worqr.Config
	// Queues are the stand-alone queues sessions may take from, with their
	// retry, timeout and dead-set settings, their key policy (Keys) and
	// their global Limits (stored when a session first asks for the queue,
	// as a Worker's are at its start: keep them the same as the Workers'). Handler, Concurrency and Weight are not used and must be
	// left zero. Sessions apply the limits stored in Redis, whoever set
	// them, and take higher priority levels first.
	Queues map[string]worqr.QueueConfig
	// AnyQueue lets sessions take from any stand-alone queue, those not in
	// Queues with the settings of DefaultQueue.
	AnyQueue bool
	// DefaultQueue holds the settings of the queues AnyQueue admits.
	DefaultQueue worqr.QueueConfig
	// Flows are served whole: a session may take from a stage or child
	// queue, named "<flow>/<queue>". worqr.Stage handlers may be nil.
	Flows []*worqr.Flow
	// SessionTTL is a session's keepalive lifetime: a session whose remote
	// has not beaten for this long is lost, and its takings are requeued by
	// the recovery within one ReaperInterval. Remotes should beat every
	// SessionTTL/3. Default 10s, at least 30ms.
	SessionTTL time.Duration
	// ReaperInterval is how often this process checks for dead workers
	// (its own sessions and any other worker). Default 1s.
	ReaperInterval time.Duration
	// DisableReaper turns off this process's part in recovery; some other
	// peer must run one. Default false.
	DisableReaper bool
	// PollInterval is how often a waiting Take looks at its queue without a
	// wake-up (pub/sub messages can be lost). Default 1s.
	PollInterval time.Duration
	// MaxSessions caps the sessions open at once. Default 1000.
	MaxSessions int
	// MaxHeld caps the takings one session holds at once. Default 1000.
	MaxHeld int
	// MaxWait is the longest a Take may wait for work. Default 30s.
	MaxWait time.Duration
}

// Defaults of Config.
const (
	DefaultSessionTTL  = 10 * time.Second
	DefaultMaxSessions = 1000
	DefaultMaxHeld     = 1000
	DefaultMaxWait     = 30 * time.Second
)

// ErrSessionLost is returned by every Session call (and Server.Session)
// once the session is gone: its remote stopped beating for SessionTTL, it was
// closed, or this process never opened it (for example it restarted). Its
// takings are requeued by the recovery; the remote must drop them and open
// a new session. errors.Is(err, ErrNotOwner) is true for it as well.
var ErrSessionLost = &remoteError{"worqr: session lost"}

// ErrNotOwner is returned by a Session's Finish, Fail, GiveBack, Bury,
// Forward and FanOut when the session does not own the taking (any more):
// its keepalive was lost and the task requeued, the taking was already ended
// another way, or the pid is not one of its takings. Nothing was changed.
var ErrNotOwner = errors.New("worqr: taking not owned by this session")

// ErrTooManySessions is returned by Open when MaxSessions are open.
var ErrTooManySessions = errors.New("worqr: too many sessions")

// ErrTooManyHeld is returned by Take when the session holds MaxHeld
// takings already: end some first.
var ErrTooManyHeld = errors.New("worqr: the session holds as many takings as it may")

// ErrDraining is returned by Open while the Server stops.
var ErrDraining = errors.New("worqr: remote is stopping")

type remoteError struct{ msg string }

func (e *remoteError) Error() string { return e.msg }

func (e *remoteError) Is(target error) bool { return target == ErrNotOwner }

func (c *Config) withDefaults() (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	base, err := configDefaults(out.Config)
	if err != nil {
		return out, err
	}
	out.Config = base
	placeholder := worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil })
	fill := func(field string, q worqr.QueueConfig) (worqr.QueueConfig, error) {
		if q.Handler != nil || q.Concurrency != 0 {
			return q, invalid(field, "sets Handler or Concurrency, which a remote queue does not use")
		}
		return fillQueue(field, q)
	}
	queues := make(map[string]worqr.QueueConfig, len(out.Queues))
	for name, q := range out.Queues {
		field := fmt.Sprintf("Queues[%q]", name)
		if err := checkName(field, name); err != nil {
			return out, err
		}
		if queues[name], err = fill(field, q); err != nil {
			return out, err
		}
	}
	out.Queues = queues
	if out.DefaultQueue, err = fill("DefaultQueue", out.DefaultQueue); err != nil {
		return out, err
	}
	// Stage handlers run remotely: placeholders pass validation.
	out.Flows, err = validateFlows(out.Flows, func(g worqr.Flow) worqr.Flow {
		g.Stages = append([]worqr.Stage(nil), g.Stages...)
		for j := range g.Stages {
			if g.Stages[j].Handler == nil {
				g.Stages[j].Handler = worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return nil, nil })
			}
			if g.Stages[j].Queue.Concurrency == 0 {
				g.Stages[j].Queue.Concurrency = 1
			}
			ch := make(map[string]worqr.QueueConfig, len(g.Stages[j].Children))
			for name, cq := range g.Stages[j].Children {
				if cq.Handler == nil {
					cq.Handler = placeholder
				}
				if cq.Concurrency == 0 {
					cq.Concurrency = 1
				}
				ch[name] = cq
			}
			g.Stages[j].Children = ch
			bs := make(map[string]worqr.Branch, len(g.Stages[j].Branches))
			for name, b := range g.Stages[j].Branches {
				if b.Handler == nil {
					b.Handler = worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return nil, nil })
				}
				if b.Queue.Concurrency == 0 {
					b.Queue.Concurrency = 1
				}
				bs[name] = b
			}
			g.Stages[j].Branches = bs
		}
		return g
	})
	if err != nil {
		return out, err
	}
	if len(out.Queues) == 0 && len(out.Flows) == 0 && !out.AnyQueue {
		return out, invalid("Queues", "is empty, there are no Flows and AnyQueue is false: a remote needs at least one queue")
	}
	for _, d := range []struct {
		v    *time.Duration
		def  time.Duration
		min  time.Duration
		name string
	}{
		{&out.SessionTTL, DefaultSessionTTL, 3 * defaults.MinInterval, "SessionTTL"},
		{&out.ReaperInterval, defaults.ReaperInterval, defaults.MinInterval, "ReaperInterval"},
		{&out.PollInterval, defaults.PollInterval, defaults.MinInterval, "PollInterval"},
		{&out.MaxWait, DefaultMaxWait, 0, "MaxWait"},
	} {
		if *d.v == 0 {
			*d.v = d.def
		}
		if *d.v < d.min || *d.v < 0 {
			return out, invalid(d.name, "(%s) must be at least %s", *d.v, d.min)
		}
	}
	for _, n := range []struct {
		v    *int
		def  int
		name string
	}{
		{&out.MaxSessions, DefaultMaxSessions, "MaxSessions"},
		{&out.MaxHeld, DefaultMaxHeld, "MaxHeld"},
	} {
		if *n.v == 0 {
			*n.v = n.def
		}
		if *n.v < 0 {
			return out, invalid(n.name, "(%d) must not be negative", *n.v)
		}
	}
	return out, nil
}

// remoteQueue is one queue sessions take from: its keys, settings and the
// group its ends share (every session's ends of the queue, one script call
// per batch).
type remoteQueue struct {
	// Queue: the queue's keys, retry policy, place in a flow and flags
	// (read when a session first asks for it and by pauseLoop), decided
	// as a Worker's runners are. Its Member is "<queue>" or
	// "<flow>/<queue>".
	engine.Queue
	cfg  worqr.QueueConfig
	ends *group.Group[rdb.Ending, rdb.Ended]

	settings  atomic.Bool // written to Redis
	flagsRead atomic.Bool // its flags were read once

	wakeMu sync.Mutex
	wakeCh chan struct{} // closed (and replaced) on a wake-up

	// refs counts the open sessions naming the queue and the Opens under
	// way that resolved it; idleSince is when it last fell to 0. Both
	// guarded by Server.mu. A queue idle for a SessionTTL is let go
	// (sweepLoop): names come from remotes, and each queue kept is
	// subscribed to and read every PollInterval.
	refs      int
	idleSince time.Time
}

func (q *remoteQueue) woken() <-chan struct{} {
	q.wakeMu.Lock()
	defer q.wakeMu.Unlock()
	return q.wakeCh
}

func (q *remoteQueue) wake() {
	q.wakeMu.Lock()
	close(q.wakeCh)
	q.wakeCh = make(chan struct{})
	q.wakeMu.Unlock()
}

// NewServer validates cfg and returns a Server; Start it before opening
// sessions.
func NewServer(pool worqr.ConnGetter, cfg *Config) (*Server, error) {
	if pool == nil {
		return nil, invalid("pool", "is nil")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	warnPool(pool, c.Logger)
	reg, err := registry.New(pool, c.Namespace)
	if err != nil {
		return nil, err
	}
	st := rdb.NewStore(pool, c.Namespace)
	st.SetReplicas(c.Replicas, c.ReplicaTimeout)
	deliver, flush := newEvents(st, c.Config)
	return &Server{
		pool: pool, st: st, reg: reg, cfg: c, deliver: deliver, flush: flush,

		queues: map[string]*remoteQueue{}, sessions: map[string]*Session{}, retired: map[string]*Session{},
		subGrew: make(chan struct{}, 1),
	}, nil
}

// queue resolves a queue name a session asks for, made on first use, and
// counts a reference to it (see unref).
func (r *Server) queue(name string) (*remoteQueue, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if q := r.queues[name]; q != nil {
		q.refs++
		return q, nil
	}
	ref, err := parseQueue(name)
	if err != nil {
		return nil, err
	}
	q := &remoteQueue{wakeCh: make(chan struct{})}
	kind, flow, stage := rdb.KindTask, (*worqr.Flow)(nil), 0
	if !ref.Flow() {
		cfg, ok := r.cfg.Queues[name]
		if !ok {
			if !r.cfg.AnyQueue {
				return nil, invalid("queue", "%q is not served by this remote", name)
			}
			cfg = r.cfg.DefaultQueue
		}
		q.cfg = cfg
	} else if kind, flow, stage = r.flowQueue(q, ref); flow == nil {
		return nil, invalid("queue", "%q is not a stage or child queue of a flow served by this remote", name)
	}
	initEngine(&q.Queue, kind, name, r.st.Queue(ref), &q.cfg, flow, stage)
	retention := q.cfg.Retention.Milliseconds()
	q.ends = engine.NewEndGroup(func(ctx context.Context, es []rdb.Ending) ([]rdb.Ended, error) {
		var call *rdb.TakeArgs
		if q.Limited.Load() {
			// Takes nothing; tells the script that the queue may have
			// limits, so that the slots freed are announced.
			call = &rdb.TakeArgs{Limited: true}
		}
		ended, _, _, err := r.st.EndTakeWait(ctx, q.QK, retention, es, call)
		if errors.Is(err, worqr.ErrNotReplicated) {
			// Recorded on the primary: the takings are ended.
			r.cfg.Logger.Warn("remote: end not acknowledged by enough replicas", "queue", name, "count", len(es), "err", err)
			r.emit(worqr.Event{Kind: worqr.EventError, Queue: name, Count: len(es), Err: fmt.Errorf("worqr: end of %d takings: %w", len(es), err)})
			err = nil
		}
		if err == nil {
			for _, e := range ended {
				emitTakenOut(r.emit, q.QK.Ref.Tag, e.Stopped)
			}
		}
		return ended, err
	})
	r.queues[name] = q
	q.refs++
	engine.Poke(r.subGrew)
	return q, nil
}

// unref drops the references queue counted for qs. Called with r.mu held.
func (r *Server) unref(qs []*remoteQueue) {
	now := time.Now()
	for _, q := range qs {
		if q.refs--; q.refs == 0 {
			q.idleSince = now
		}
	}
}

// forgetIdleQueues lets go of the queues no open session has named for a
// SessionTTL: the listener resubscribes without them, and they are no
// longer read. A session naming one again makes it anew.
func (r *Server) forgetIdleQueues() {
	r.mu.Lock()
	forgot := false
	for name, q := range r.queues {
		if q.refs == 0 && time.Since(q.idleSince) >= r.cfg.SessionTTL {
			delete(r.queues, name)
			forgot = true
		}
	}
	r.mu.Unlock()
	if forgot {
		engine.Poke(r.subGrew)
	}
}

// flowQueue finds ref among the queues of the Server's flows: its kind,
// flow and (declaring) stage, with its config in q; a nil flow when none
// has it.
func (r *Server) flowQueue(q *remoteQueue, ref rdb.QueueRef) (rdb.Kind, *worqr.Flow, int) {
	for _, f := range r.cfg.Flows {
		if f.Name != ref.Tag {
			continue
		}
		for i, st := range f.Stages {
			if st.Name == ref.Name {
				q.cfg = st.Queue
				return rdb.KindStage, f, i
			}
			if cq, ok := st.Children[ref.Name]; ok {
				q.cfg = cq
				return rdb.KindChild, f, i
			}
			if b, ok := st.Branches[ref.Name]; ok {
				q.cfg = b.Queue
				return rdb.KindChild, f, i
			}
		}
	}
	return rdb.KindTask, nil, 0
}

// Start starts the Server's background loops: the subscriber that wakes
// waiting takes and routes cancels, the sweeper of expired sessions, and
// (unless disabled) a reaper. It returns at once; ctx's values reach the
// loops, not its cancellation. Calling it twice, or after Stop (even a
// Stop before any Start), is an error; a Start that failed leaves the
// Server startable.
func (r *Server) Start(ctx context.Context) error {
	return r.life.Start("remote", func() error { return r.start(ctx) })
}

func (r *Server) start(ctx context.Context) error {
	var reaper *recovery.Reaper
	if !r.cfg.DisableReaper {
		var err error
		reaper, err = newReaper(r.pool, r.cfg.Config, r.cfg.ReaperInterval, r.emit, func() string { return "" })
		if err != nil {
			return err // before any loop starts: nothing to undo
		}
	}
	r.runCtx, r.runCancel = context.WithCancel(context.WithoutCancel(ctx))
	r.bg.Add(3)
	go r.listenLoop()
	go r.sweepLoop()
	go r.pauseLoop()
	if reaper != nil {
		r.bg.Add(1)
		go func() {
			defer r.bg.Done()
			reaper.Run(r.runCtx)
		}()
	}
	return nil
}

// Draining reports whether Stop has begun: sessions should finish what they
// run and take no more.
func (r *Server) Draining() bool { return r.draining.Load() }

// Stop drains: Take returns nothing and Beat tells every session to drain,
// until no session holds a taking or ctx ends. Then every session is closed
// (what it still holds is put back at the front of its queue) and the loops
// stop. It returns ctx.Err() if the grace period ran out. More calls wait
// for the first and return its result. A Stop before any Start returns
// nil and is final: Stopped is closed and a later Start is refused.
func (r *Server) Stop(ctx context.Context) error {
	return r.life.Stop(func() error { return r.stop(ctx) })
}

// Stopped is closed once the Server has stopped: the first Stop after
// Start has closed the sessions and ended the loops, or a Stop came
// before any Start.
func (r *Server) Stopped() <-chan struct{} { return r.life.Stopped() }

// stop is Stop after a Start, run once.
func (r *Server) stop(ctx context.Context) error {
	r.draining.Store(true)
	for _, q := range r.allQueues() {
		q.wake() // waiting takes return
	}
	var err error
	t := time.NewTicker(50 * time.Millisecond)
	for err == nil && r.held() > 0 {
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-t.C:
		}
	}
	t.Stop()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	defer cancel()
	for _, s := range r.allSessions() {
		if cerr := s.Close(cctx); cerr != nil && !errors.Is(cerr, ErrSessionLost) {
			r.cfg.Logger.Warn("remote: closing a session failed (the reaper will requeue its takings)", "worker_id", s.ID(), "err", cerr)
		}
	}
	r.runCancel()
	r.bg.Wait()
	r.flush()
	return err
}

func (r *Server) allQueues() []*remoteQueue {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*remoteQueue, 0, len(r.queues))
	for _, q := range r.queues {
		out = append(out, q)
	}
	return out
}

func (r *Server) allSessions() []*Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Session, 0, len(r.sessions))
	for _, s := range r.sessions {
		out = append(out, s)
	}
	return out
}

func (r *Server) held() int {
	n := 0
	for _, s := range r.allSessions() {
		if s.lease.Fresh() {
			n += s.heldCount()
		}
	}
	return n
}

func (r *Server) emit(e worqr.Event) {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	r.deliver(e)
}

// OpenOpts describe a new session.
type OpenOpts struct {
	// Name says who the remote is (recorded as the worker's host, shown by
	// the Inspector and the dashboard). At most 200 bytes.
	Name string
	// Queues are the queues the session will take from: "<queue>" or
	// "<flow>/<queue>". At least one.
	Queues []string
}

// Open registers a new session (a new worker id, alive for SessionTTL).
func (r *Server) Open(ctx context.Context, opts OpenOpts) (*Session, error) {
	if !r.life.Started() {
		return nil, errors.New("worqr: remote not started")
	}
	if r.draining.Load() {
		return nil, ErrDraining
	}
	if len(opts.Name) > 200 {
		return nil, invalid("name", "is %d bytes long (at most 200)", len(opts.Name))
	}
	if len(opts.Queues) == 0 {
		return nil, invalid("queues", "is empty: a session takes from at least one queue")
	}
	if len(opts.Queues) > 100 {
		return nil, invalid("queues", "lists %d queues (at most 100)", len(opts.Queues))
	}
	qs := map[string]*remoteQueue{}
	refs := make([]registry.Queue, 0, len(opts.Queues))
	var resolved []*remoteQueue // each reference counted, the session's once it opens
	opened := false
	defer func() {
		if !opened {
			r.mu.Lock()
			r.unref(resolved)
			r.mu.Unlock()
		}
	}()
	for i, name := range opts.Queues {
		q, err := r.queue(name)
		if err == nil {
			resolved = append(resolved, q)
		}
		if err != nil {
			var ie *worqr.InvalidError
			if errors.As(err, &ie) {
				return nil, invalid(fmt.Sprintf("queues[%d]", i), "%s", ie.Rule)
			}
			return nil, err
		}
		if qs[name] == nil {
			qs[name] = q
			refs = append(refs, q.QK.Ref)
		}
		if !q.settings.Load() {
			if err := writeSettings(ctx, r.st, q.QK, &q.cfg); err != nil {
				return nil, fmt.Errorf("worqr: %s: %w", name, err)
			}
			q.settings.Store(true)
		}
	}
	var unread []*remoteQueue
	for _, q := range qs {
		if !q.flagsRead.Load() {
			unread = append(unread, q)
		}
	}
	if len(unread) > 0 {
		// Before the first take: a queue with priority levels or limits
		// must not be taken from the plain way.
		if err := r.readFlags(ctx, unread); err != nil {
			return nil, fmt.Errorf("worqr: read queue flags: %w", err)
		}
	}
	r.mu.Lock()
	n := len(r.sessions) + r.opening
	if n < r.cfg.MaxSessions {
		r.opening++
	}
	r.mu.Unlock()
	if n >= r.cfg.MaxSessions {
		return nil, fmt.Errorf("%w (%d open, MaxSessions)", ErrTooManySessions, n)
	}
	defer func() {
		r.mu.Lock()
		r.opening--
		r.mu.Unlock()
	}()
	name := opts.Name
	if name == "" {
		name = "remote"
	}
	switches := r.st.Switches() // read before the registration
	lease, err := heartbeat.Open(ctx, r.reg, r.cfg.SessionTTL, name, 0, refs, seam.HeartbeatClock(r.runCtx))
	if err != nil {
		return nil, fmt.Errorf("worqr: open session: %w", err)
	}
	tags := map[string]bool{}
	unsure := make(map[*remoteQueue]*engine.Unsure, len(qs))
	for _, q := range qs {
		tags[q.QK.Ref.Tag] = true
		unsure[q] = &engine.Unsure{}
		unsure[q].Init(switches)
	}
	s := &Session{r: r, lease: lease, queues: qs, qualify: len(tags) > 1, takings: map[string]*remoteTaking{},
		takes: map[string]*takeReply{}, unsure: unsure, beatAt: time.Now(), refd: resolved}
	r.mu.Lock()
	r.sessions[s.ID()] = s
	opened = true
	r.mu.Unlock()
	r.emit(worqr.Event{Kind: worqr.EventRegistered, WorkerID: s.ID()})
	return s, nil
}

// Session returns session id, or ErrSessionLost when this process does not
// know it (never opened here, or retired long ago). A session that is lost
// but still remembered is returned: its calls answer ErrSessionLost, except
// an end repeated after its reply was lost, which gets its recorded answer.
func (r *Server) Session(id string) (*Session, error) {
	r.mu.Lock()
	s := r.sessions[id]
	if s == nil {
		s = r.retired[id]
	}
	r.mu.Unlock()
	if s == nil {
		return nil, fmt.Errorf("%w: %s", ErrSessionLost, id)
	}
	return s, nil
}

// Sessions returns how many sessions are open.
func (r *Server) Sessions() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sessions)
}

// retire forgets session s (its lease is retired: nothing more is done
// under its id here).
func (r *Server) retire(s *Session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sessions[s.ID()] == s {
		delete(r.sessions, s.ID())
		s.retiredAt = time.Now()
		r.retired[s.ID()] = s
		r.unref(s.refd)
	}
}

// sweepLoop retires sessions whose remote stopped beating (the reaper
// requeues their takings once their keepalive expires) and forgets old
// ended takings.
func (r *Server) sweepLoop() {
	defer r.bg.Done()
	t := time.NewTicker(max(r.cfg.SessionTTL/10, defaults.MinInterval))
	defer t.Stop()
	for {
		select {
		case <-r.runCtx.Done():
			return
		case <-t.C:
		}
		for _, s := range r.allSessions() {
			if !s.lease.Fresh() {
				r.retire(s)
				r.emit(worqr.Event{Kind: worqr.EventKeepaliveLost, WorkerID: s.ID(), Err: ErrSessionLost})
				r.cfg.Logger.Info("remote: session lost (no beat)", "worker_id", s.ID())
				continue
			}
			s.forgetEnded(time.Now().Add(-r.memory()))
			for _, e := range s.newlyStuck(time.Now()) {
				r.cfg.Logger.Warn("remote: a taking has run past its queue's StuckAfter and is still held",
					"queue", e.Queue, "task_id", e.TaskID, "pid", e.PID, "worker_id", e.WorkerID, "running", e.Running)
				r.emit(e)
			}
		}
		r.mu.Lock()
		for id, s := range r.retired {
			if time.Since(s.retiredAt) > r.memory() {
				delete(r.retired, id)
			}
		}
		r.mu.Unlock()
		r.forgetIdleQueues()
	}
}

// memory is how long an ended taking's answer is kept for a repeated call.
func (r *Server) memory() time.Duration { return max(time.Minute, 3*r.cfg.SessionTTL) }

// pauseLoop reads the flags of the queues sessions take from (paused,
// priority levels in use, global limits) once per PollInterval (one round
// trip per tag), as a Worker does: a pause, a level or a limit stored in
// Redis is honoured within one interval even if its announcement was lost.
func (r *Server) pauseLoop() {
	defer r.bg.Done()
	t := time.NewTicker(r.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-r.runCtx.Done():
			return
		case <-t.C:
			r.refreshFlags()
		}
	}
}

func (r *Server) refreshFlags() {
	qs := r.allQueues()
	if len(qs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(r.runCtx, callTimeout)
	defer cancel()
	if err := r.readFlags(ctx, qs); err != nil && r.runCtx.Err() == nil {
		r.cfg.Logger.Warn("remote: reading queue flags failed", "err", err)
	}
}

// readFlags reads the flags of qs and wakes the takes waiting on those
// resumed or whose limits may have changed.
func (r *Server) readFlags(ctx context.Context, qs []*remoteQueue) error {
	es := make([]*engine.Queue, len(qs))
	for i, q := range qs {
		es[i] = &q.Queue
	}
	errs := engine.ReadFlags(ctx, r.st, es, func(i int, _, _ bool) { qs[i].wake() })
	var err error
	for i, q := range qs {
		if errs[i] != nil {
			err = errs[i] // the others are applied (a cluster's master down)
			continue
		}
		q.flagsRead.Store(true)
	}
	return err
}

// listenLoop holds the Server's pub/sub connection: the wake-up channel of
// every queue a session asked for (cancels are read by each beat instead:
// the remote hears of them only then, and a read cannot be lost). It resubscribes when that set
// grows, and wakes every waiting take after each subscribe (messages sent
// meanwhile are gone).
func (r *Server) listenLoop() {
	defer r.bg.Done()
	delay := 50 * time.Millisecond
	for r.runCtx.Err() == nil {
		qs := r.allQueues()
		if len(qs) == 0 {
			select {
			case <-r.runCtx.Done():
				return
			case <-r.subGrew:
				continue
			}
		}
		sort.Slice(qs, func(i, j int) bool { return qs[i].Member < qs[j].Member })
		route := map[string]func([]byte){}
		channels := make([]string, 0, len(qs))
		for _, q := range qs {
			q := q
			channels = append(channels, q.QK.WakeChannel)
			route[q.QK.WakeChannel] = func(data []byte) {
				if rdb.IsHandoff(data) {
					return // a task handed to a worker of this process's peers: nothing waits
				}
				if string(data) == "0" { // a pause, a resume, new limits or a new priority level
					r.refreshFlags()
				}
				q.wake()
			}
		}
		lctx, cancel := context.WithCancel(r.runCtx)
		go func() {
			select {
			case <-r.subGrew:
				cancel()
			case <-lctx.Done():
			}
		}()
		subscribed := false
		err := r.st.Listen(lctx, channels, func() {
			subscribed = true
			for _, q := range qs {
				q.wake()
			}
		}, func(ch string, data []byte) {
			if f := route[ch]; f != nil {
				f(data)
			}
		})
		grew := lctx.Err() != nil && r.runCtx.Err() == nil
		cancel()
		if r.runCtx.Err() != nil {
			return
		}
		if grew {
			delay = 50 * time.Millisecond
			continue
		}
		if err == nil {
			err = errors.New("unsubscribed")
		}
		if subscribed {
			delay = 50 * time.Millisecond
		}
		r.cfg.Logger.Warn("remote: subscription lost, reconnecting", "err", err, "in", delay)
		if !engine.Sleep(r.runCtx, delay) {
			return
		}
		delay = min(delay*2, 5*time.Second)
	}
}
