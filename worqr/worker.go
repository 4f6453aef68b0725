package worqr

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/worqr/worqr-go/heartbeat"
	"github.com/worqr/worqr-go/internal/engine"
	"github.com/worqr/worqr-go/internal/group"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/seam"
	"github.com/worqr/worqr-go/internal/startstop"
	"github.com/worqr/worqr-go/internal/turnstile"
	"github.com/worqr/worqr-go/recovery"
	"github.com/worqr/worqr-go/registry"
)

// Worker is one registered process serving several queues. Start it once;
// Stop it once (more calls wait for the first). It is safe for concurrent
// use.
//
// Its parts, one file each: take.go takes tasks (one fetch loop per queue),
// prio.go the one fetch loop of the queues served by priority (shared
// slots), run.go runs handlers, end.go ends takings (one batched call per queue),
// wake.go holds the pub/sub connection and the pause flags; the keepalive's
// state machine is heartbeat.Keeper, recovery is recovery.Reaper.
type Worker struct {
	hooks  workerHooks
	pool   ConnGetter
	st     *rdb.Store
	reg    *registry.Registry
	cfg    WorkerConfig
	keeper *heartbeat.Keeper
	bus    *eventBus // publishes what the worker observes

	unreplicated atomic.Uint64               // ends and takes too few replicas acknowledged (Unreplicated)
	listening    atomic.Bool                 // the subscription is up: hand-offs can reach the worker
	confirmed    atomic.Pointer[confirmMark] // the last keepalive confirmed after a switch

	queues []*queueRunner
	group  *prioGroup // the queues served by priority (WorkerConfig.Priority), or nil

	life startstop.Machine // Start, Stop, Stopped

	runCtx    context.Context // lives until Stop ends; Redis calls of the loops
	runCancel context.CancelFunc
	takeStop  chan struct{} // closed when Stop begins: no more taking
	takeCtx   context.Context
	takeStopC context.CancelFunc // ends takeCtx with takeStop

	loops    sync.WaitGroup // fetchers
	bg       sync.WaitGroup // keeper, subscriber, pause watcher, reaper
	handlers sync.WaitGroup

	runMu   sync.Mutex
	running map[string]*inflight // by task id
}

type inflight struct {
	cancel context.CancelCauseFunc
	sess   *heartbeat.Session
}

type queueRunner struct {
	// Queue: the queue's keys, retry policy, place in a flow and flags
	// (read by refreshFlags), decided as a remote session's are. Its
	// Member is the queue's name in events, the history and the
	// Inspector: "<flow>/<queue>" for a flow's.
	engine.Queue
	cfg          QueueConfig
	flow         *Flow  // stage and child queues
	stage        int    // the stage (declaring the child queue)
	name         string // the queue's name within its tag (a flow's stage or child queue: without the flow)
	handler      Handler
	stageHandler StageHandler // a stage queue's handler, in WorkerConfig.StageMiddleware
	branch       StageHandler // a branch's (Stage.Branches) handler, likewise
	concurrency  int          // handlers that run at once
	// aheadMax: tasks the queue may take beyond concurrency while its
	// handlers are fast (see ahead.go), waiting for one of turn's
	// concurrency slots (nil when aheadMax is 0) in launch order (tickets,
	// the last one issued, guarded by launchMu); runAvg: its handlers'
	// recent average run time (ns).
	aheadMax int
	turn     *turnstile.Turnstile
	tickets  uint64
	runAvg   atomic.Int64
	busy     atomic.Int32 // takings of this queue being run
	slots    *slotPool    // its own, or the one its priority group shares
	weight   int          // in a priority group
	// hints counts the wake-ups (hint): a take reads it before it is sent,
	// so that a reply saying "wait for a wake-up" is not waited on when one
	// came while that reply was on its way (see limitWait).
	hints atomic.Uint64
	// more: the queue may hold waiting tasks (the last take filled what
	// it asked, or a wake-up came since). An end takes again only then, so
	// that a worker at a low rate does not pop an empty queue on every end.
	more  atomic.Bool
	work  chan job      // takings for the handler goroutines (room: see NewWorker)
	wake  chan struct{} // cap 1: work may be waiting
	freed chan struct{} // cap 1: a slot was freed (see slotFreed)
	// waitsSlot: the fetch loop waits for a free slot to take work that
	// may be waiting (see slotFreed).
	waitsSlot atomic.Bool
	ends      *group.Group[rdb.Ending, endDone]

	heldMu sync.Mutex
	held   map[string]*holding // pids of this queue's takings being run

	// launchMu guards closed (set by Stop before it closes work: nothing
	// is launched after).
	launchMu sync.Mutex
	closed   bool
	// unsure says whether the current session may hold takings of the
	// queue with no handler (a take whose reply was lost, a taking not
	// launched, a switch of server): the fetch loop releases them before
	// it takes again, and after a switch first waits for a beat on the
	// new server (confirmSwitch).
	unsure     engine.Unsure
	switchesOf func() uint64 // the pool's count of server switches (rdb.Store.Switches)
	currentID  func() string // the worker's current session id (Worker.ID)

	// parks: the queue's takes may park the worker, so that enqueues hand
	// it tasks (see handoff.go); hand is the state that guards them.
	parks bool
	hand  handState

	// takeMu keeps release apart from an end that takes again: such an
	// end holds it (read) from its call until its takings are launched
	// (their pids in held), and release holds it (write) while it puts
	// back what held does not list. Without it, a release running while
	// an end's takings are on their way would put them back, and the
	// worker would then run takings it no longer owns.
	takeMu sync.RWMutex
	// takesOver: Stop began; no end takes again (set under takeMu).
	takesOver bool
}

func (q *queueRunner) setUnsure(id string) { q.unsure.Mark(id) }

// unsureFor returns the pending unsure session id when it is the caller's
// session s (engine.Unsure.For), after recording a switch of server seen
// since the last call.
func (q *queueRunner) unsureFor(s string) string {
	current := s
	if q.currentID != nil {
		current = q.currentID()
	}
	if q.switchesOf != nil {
		q.unsure.Switched(q.switchesOf(), current)
	}
	return q.unsure.For(s, current)
}

// holding is the local state of one taking being run: from its launch
// until its handler goroutine let it go (after its end).
type holding struct {
	id     string                  // the task's
	cancel context.CancelCauseFunc // its handler's, while the handler runs
	ending bool                    // its handler returned: its end is (or was) on its way
	lost   bool                    // found not held in Redis before it ended: never ended
	// cancelled: a cancel of its task came before its handler started
	// (a task handed to the worker is running for Redis from its enqueue
	// on); the handler starts cancelled.
	cancelled bool
	// started is when its handler started (zero before); stuck: it was
	// reported stuck (see stuckLoop).
	started time.Time
	stuck   bool
}

// hold records taking pid (of task id) as being run and returns its
// record, which its handler goroutine keeps: after a failover the new
// primary may hand out a pid again (its sequence lacks the lost takes), so
// a later taking may replace the record under the same pid while the lost
// one's handler still runs. unhold forgets h unless it was replaced.
//
// A record that a new taking replaces while its handler still runs (not
// ending) proves that its take was lost: Redis hands a pid out again only
// when the INCRBY that issued it was lost with a primary. hold marks it
// lost and cancels its handler (as markLost does) and returns its task id
// as displaced. On a Redis Cluster a take can reach the new master before
// the pool counts the switch (a MOVED reply updates the slot at once), so
// the worker's check may come after such a take.
func (q *queueRunner) hold(pid, id string) (h *holding, displaced string) {
	q.heldMu.Lock()
	defer q.heldMu.Unlock()
	if old := q.held[pid]; old != nil && !old.ending && !old.lost {
		old.lost = true
		if old.cancel != nil {
			old.cancel(ErrLostInFailover)
		}
		displaced = old.id
	}
	h = &holding{id: id}
	q.held[pid] = h
	return h, displaced
}

func (q *queueRunner) unhold(pid string, h *holding) {
	q.heldMu.Lock()
	defer q.heldMu.Unlock()
	if q.held[pid] == h {
		delete(q.held, pid)
	}
}

// ending counts the takings being run whose handler has returned: their
// ends are on their way, and their handler goroutines free soon after.
func (q *queueRunner) ending() int {
	q.heldMu.Lock()
	defer q.heldMu.Unlock()
	n := 0
	for _, h := range q.held {
		if h.ending {
			n++
		}
	}
	return n
}

func (q *queueRunner) heldPIDs() []string {
	q.heldMu.Lock()
	defer q.heldMu.Unlock()
	out := make([]string, 0, len(q.held))
	for pid := range q.held {
		out = append(out, pid)
	}
	return out
}

// started records the cancel of the handler that runs hs, and reports
// false when one of them was found lost before it started (then the
// handler must not run).
func (q *queueRunner) started(hs []*holding, cancel context.CancelCauseFunc) bool {
	q.heldMu.Lock()
	defer q.heldMu.Unlock()
	ok := true
	now := time.Now()
	for _, h := range hs {
		h.cancel, h.started = cancel, now
		ok = ok && !h.lost
		if h.cancelled {
			cancel(ErrTaskCancelled)
		}
	}
	return ok
}

// askCancel cancels the handler of the taking of task id, or, when that
// handler has not started yet, marks the taking so that it starts
// cancelled (see started).
func (q *queueRunner) askCancel(id string) {
	q.heldMu.Lock()
	defer q.heldMu.Unlock()
	for _, h := range q.held {
		if h.id != id || h.ending || h.lost {
			continue
		}
		if h.cancel != nil {
			h.cancel(ErrTaskCancelled)
		} else {
			h.cancelled = true
		}
	}
}

// returned marks hs as ending (their handler returned) and reports
// whether one of them was found lost meanwhile: then nothing is ended.
func (q *queueRunner) returned(hs []*holding) (lost bool) {
	q.heldMu.Lock()
	defer q.heldMu.Unlock()
	for _, h := range hs {
		h.ending = true
		lost = lost || h.lost
	}
	return lost
}

// markLost marks as lost the pids of missing (read as not held in Redis)
// whose handler has not returned yet, cancels those handlers with cause
// ErrLostInFailover, and returns the pids it marked with their task ids. A
// pid whose handler returned is left alone: its end may have removed it
// from Redis before the read (ending is set before the end is sent).
func (q *queueRunner) markLost(missing []string) map[string]string {
	q.heldMu.Lock()
	defer q.heldMu.Unlock()
	var out map[string]string
	for _, pid := range missing {
		h := q.held[pid]
		if h == nil || h.ending || h.lost {
			continue
		}
		h.lost = true
		if h.cancel != nil {
			h.cancel(ErrLostInFailover)
		}
		if out == nil {
			out = map[string]string{}
		}
		out[pid] = h.id
	}
	return out
}

// NewWorker validates cfg and returns a worker that is not yet registered.
func NewWorker(pool ConnGetter, cfg *WorkerConfig) (*Worker, error) {
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
	w := &Worker{
		pool:     pool,
		st:       rdb.NewStore(pool, c.Namespace),
		reg:      reg,
		cfg:      c,
		running:  map[string]*inflight{},
		takeStop: make(chan struct{}),
	}
	w.st.SetReplicas(c.Replicas, c.ReplicaTimeout)
	w.bus = newEventBus(w.st, c.Config)
	if c.Priority != PriorityNone {
		w.group = newPrioGroup(c.Priority, c.Concurrency)
	}
	add := func(r *queueRunner, kind rdb.Kind, ref rdb.QueueRef) {
		initEngine(&r.Queue, kind, ref.Member(), w.st.Queue(ref), &r.cfg, r.flow, r.stage)
		r.name = ref.Name
		r.concurrency = r.cfg.Concurrency
		r.handler = r.cfg.Handler
		if r.handler != nil {
			r.handler = Chain(r.handler, c.Middleware...)
		}
		if r.Kind == rdb.KindStage {
			r.stageHandler = ChainStage(r.flow.Stages[r.stage].Handler, c.StageMiddleware...)
		}
		if b, ok := r.flow.branch(r.stage, ref.Name); ok && r.Kind == rdb.KindChild {
			r.branch = ChainStage(b.Handler, c.StageMiddleware...)
		}
		if g := w.group; g != nil && r.Kind == rdb.KindTask {
			// Served by priority: the group's slots and signals.
			r.slots, r.wake, r.freed = g.slots, g.wake, g.freed
			r.weight = max(r.cfg.Weight, 1)
			if r.concurrency == 0 || r.concurrency > g.slots.size {
				r.concurrency = g.slots.size
			}
			g.queues = append(g.queues, r)
		} else {
			r.slots = &slotPool{size: r.concurrency}
			r.wake = make(chan struct{}, 1)
			r.freed = make(chan struct{}, 1)
		}
		r.parks = !c.DisableHandoff && c.Replicas == 0 && r.Kind == rdb.KindTask && r.weight == 0 &&
			r.cfg.BatchHandler == nil
		// A hand-off is bounded by what Redis sees held: one may come while
		// the end that freed its slot is still on its way back, so the
		// channel has room for a second round of takings.
		if r.aheadMax = aheadMax(r); r.aheadMax > 0 {
			r.turn = turnstile.New(r.concurrency)
			r.runAvg.Store(int64(readAheadFast)) // until handlers are seen fast
		}
		room := r.concurrency + r.aheadMax
		if r.parks {
			room *= 2
		}
		r.work = make(chan job, room)
		r.held = map[string]*holding{}
		r.switchesOf = w.st.Switches
		r.currentID = w.ID
		r.unsure.Init(w.st.Switches())
		r.ends = w.endGroup(r)
		r.more.Store(true)
		w.queues = append(w.queues, r)
	}
	names := make([]string, 0, len(c.Queues))
	for name := range c.Queues {
		names = append(names, name)
	}
	sort.Strings(names) // a stable order: strict priority breaks ties by name
	for _, name := range names {
		add(&queueRunner{cfg: c.Queues[name]}, rdb.KindTask, rdb.Standalone(name))
	}
	if w.group != nil {
		w.group.sortQueues()
	}
	for _, f := range c.Flows {
		for i, st := range f.Stages {
			add(&queueRunner{flow: f, stage: i, cfg: st.Queue}, rdb.KindStage, rdb.QueueRef{Tag: f.Name, Name: st.Name})
			for name, cq := range st.Children {
				add(&queueRunner{flow: f, stage: i, cfg: cq}, rdb.KindChild, rdb.QueueRef{Tag: f.Name, Name: name})
			}
			for name, b := range st.Branches {
				add(&queueRunner{flow: f, stage: i, cfg: b.Queue}, rdb.KindChild, rdb.QueueRef{Tag: f.Name, Name: name})
			}
		}
	}
	return w, nil
}

// Unreplicated returns how many ends of takings this worker recorded on the
// primary that fewer than Config.Replicas replicas acknowledged within
// Config.ReplicaTimeout (each also logged and reported as an EventError).
// Those takings are ended; an end is lost only if the primary fails before
// a replica gets it, and then the task runs again (at-least-once). (A take
// short of replicas is logged and reported as an EventError, not counted
// here: its takings run, and if it is lost after all their handlers are
// cancelled once the worker sees the failover, ErrLostInFailover.)
func (w *Worker) Unreplicated() uint64 { return w.unreplicated.Load() }

// ID returns the worker's current id ("" before Start). It changes when the
// keepalive is lost and the worker registers again.
func (w *Worker) ID() string {
	if w.keeper == nil {
		return ""
	}
	s, _ := w.keeper.Current()
	if s == nil {
		return ""
	}
	return s.ID()
}

// Start registers the worker and starts serving its queues. It returns once
// registered (ctx bounds the registration); the work goes on in the
// background until Stop, or until ctx ends: then the worker stops as Stop
// does with a grace period that has already run out (running handlers are
// cancelled with ErrWorkerStopped and their tasks put back at the front).
// Calling Start twice, or after Stop (even a Stop before any Start), is an
// error; a Start that failed leaves the worker startable.
func (w *Worker) Start(ctx context.Context) error {
	return w.life.Start("worker", func() error { return w.start(ctx) })
}

func (w *Worker) start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w.runCtx, w.runCancel = context.WithCancel(context.WithoutCancel(ctx))
	w.takeCtx, w.takeStopC = context.WithCancel(w.runCtx)
	if err := w.writeSettings(ctx); err != nil {
		w.runCancel()
		return err
	}
	refs := make([]registry.Queue, len(w.queues))
	for i, q := range w.queues {
		refs[i] = q.QK.Ref
	}
	w.keeper = &heartbeat.Keeper{
		Registry: w.reg, Queues: refs, Interval: w.cfg.HeartbeatInterval, TTL: w.cfg.HeartbeatTTL,
		Logger: w.cfg.Logger, Clock: seam.HeartbeatClock(ctx), OnEvent: w.onKeepalive,
	}
	s, err := w.keeper.Start(ctx)
	if err != nil {
		w.runCancel()
		return fmt.Errorf("worqr: register worker: %w", err)
	}
	w.emit(Event{Kind: EventRegistered, WorkerID: s.ID()})

	// The worker's components, started together; each runs until runCtx
	// ends, and Stop waits for them (bg) after it has put back what the
	// worker holds.
	components := []func(){
		func() { w.keeper.Run(w.runCtx) },
		w.switchLoop,    // pokes every queue on a server switch
		w.subscribeLoop, // wake-ups, cancels and hand-offs
		w.pauseLoop,     // queue flags every PollInterval
		w.stuckLoop,     // reports takings past their queue's StuckAfter
	}
	if reaper := w.newReaper(); reaper != nil {
		components = append(components, func() { reaper.Run(w.runCtx) })
	}
	for _, run := range components {
		w.bg.Add(1)
		go func() {
			defer w.bg.Done()
			run()
		}()
	}
	w.refreshFlags()
	for _, q := range w.queues {
		for i := 0; i < q.concurrency+q.aheadMax; i++ {
			go w.serve(q)
		}
		if q.weight > 0 {
			continue // the group's loop takes for it
		}
		w.loops.Add(1)
		go w.fetchLoop(q)
	}
	if w.group != nil {
		w.loops.Add(1)
		go w.groupLoop(w.group)
	}
	go func() {
		select {
		case <-ctx.Done():
			done, cancel := context.WithCancel(context.Background())
			cancel()
			_ = w.Stop(done)
		case <-w.takeStop:
		}
	}()
	return nil
}

// newReaper is the worker's reaper and mover (nil with DisableReaper).
func (w *Worker) newReaper() *recovery.Reaper {
	if w.cfg.DisableReaper {
		return nil
	}
	reaper, err := newReaper(w.pool, w.cfg.Config, w.cfg.ReaperInterval, w.emit, w.ID)
	if err != nil { // validated by withDefaults; a defect if reached
		w.cfg.Logger.Error("worker: reaper not started", "err", err)
		return nil
	}
	return reaper
}

// newReaper is the reaper and mover a Worker or a remote.Server runs: any peer
// may requeue the tasks of dead workers and move due tasks, one per
// interval (every) under a lease. What it recovers is reported through emit, as
// the peer whose id who returns ("" for a remote.Server).
func newReaper(pool ConnGetter, cfg Config, every time.Duration, emit func(Event), who func() string) (*recovery.Reaper, error) {
	return recovery.New(pool, &recovery.Config{
		Namespace: cfg.Namespace, Interval: every, Logger: cfg.Logger,
		OnRecovered: func(r recovery.Recovered) {
			emit(Event{Kind: EventRecovered, WorkerID: who(), Queue: r.Queue.Member(), Count: r.Requeued, DeadWorkers: r.Workers})
			emitCancelled(emit, r.Queue.Member(), recoveredCancels(r))
		},
		OnError: func(err error) { emit(Event{Kind: EventError, WorkerID: who(), Err: err}) },
	})
}

// switchLoop pokes every queue when the pool says its server changed (a
// failover; rdb.Store.Switched): each fetch loop then sees the switch at
// once and checks what its session holds on the new server (release),
// rather than at its next poll.
func (w *Worker) switchLoop() {
	for {
		ch := w.st.Switched()
		if ch == nil {
			return
		}
		select {
		case <-w.runCtx.Done():
			return
		case <-ch:
			w.pokeAll()
		}
	}
}

// onKeepalive turns the keeper's events into the worker's.
func (w *Worker) onKeepalive(e heartbeat.Event) {
	switch e.Kind {
	case heartbeat.Lost:
		w.emit(Event{Kind: EventKeepaliveLost, WorkerID: e.ID, Err: ErrKeepaliveLost})
		go w.requeueLost(e.ID) // the keeper registers again meanwhile
	case heartbeat.Registered:
		w.emit(Event{Kind: EventRegistered, WorkerID: e.ID})
		w.pokeAll()
	case heartbeat.Failed:
		w.emit(Event{Kind: EventError, WorkerID: e.ID, Err: e.Err})
	}
}

// requeueLost puts back what the worker held under id, whose keepalive was
// just found lost (the session is retired: its handlers are cancelled and
// its ends change nothing), before the worker registers again. A reaper
// would, once it finds id dead; but after a failover of a Redis Cluster's
// registry master that lost id's registration, no reaper pass finds id
// (passes start from the registry) while its takings live on in queues of
// other masters, until a sweep minutes later. Whatever is not requeued
// here (Redis unreachable) is left to the reaper.
func (w *Worker) requeueLost(id string) {
	for _, q := range w.queues {
		w.requeueLostIn(id, q)
	}
}

// requeueLostIn is requeueLost for queue q: also run for the takings of a
// take under id that landed after requeueLost.
func (w *Worker) requeueLostIn(id string, q *queueRunner) {
	ctx, cancel := context.WithTimeout(w.runCtx, engine.CallTimeout)
	defer cancel()
	n, cancelled, err := w.st.Requeue(ctx, q.QK, []string{id}, false)
	emitCancelled(w.emit, q.Member, cancelled)
	if err != nil {
		w.cfg.Logger.Warn("worker: could not requeue the takings of a lost keepalive (the reaper will)",
			"queue", q.Member, "worker_id", id, "err", err)
		return
	}
	if n > 0 {
		w.emit(Event{Kind: EventRecovered, WorkerID: id, Queue: q.Member, Count: n, DeadWorkers: []string{id}})
	}
}

// writeSettings stores the settings of the worker's queues (see
// writeQueueSettings).
func (w *Worker) writeSettings(ctx context.Context) error {
	for _, q := range w.queues {
		if err := writeQueueSettings(ctx, w.st, q.QK, &q.cfg); err != nil {
			return fmt.Errorf("worqr: %s: %w", q.Member, err)
		}
	}
	return nil
}

// writeQueueSettings stores the settings of queue qk that the scripts
// read from Redis (those not passed on every call): retention of ended
// tasks, the dead set's caps, the key policy, and the global limits when
// cfg sets them.
func writeQueueSettings(ctx context.Context, st *rdb.Store, qk rdb.QueueKeys, cfg *QueueConfig) error {
	if err := st.WriteSettings(ctx, qk, rdb.QueueSettings{
		RetentionMs: cfg.Retention.Milliseconds(), DeadMaxCount: cfg.DeadMaxCount,
		DeadMaxAgeMs: cfg.DeadMaxAge.Milliseconds(), Keys: cfg.Keys.stored(),
	}); err != nil {
		return fmt.Errorf("write settings: %w", err)
	}
	if l := cfg.Limits; l != nil {
		if err := st.SetLimits(ctx, qk, l.rdb()); err != nil {
			return fmt.Errorf("write limits: %w", err)
		}
	}
	return nil
}

// emitCancelled emits EventCancelled for each of cs, takings of queue that
// a requeue or a release ended as cancelled instead of putting them back
// (their cancel was asked while they were held): their ends were not
// reached, so nothing else reports them. Each event names the taking's
// holder and pid, as its end would have.
func emitCancelled(emit func(Event), queue string, cs []rdb.Cancelled) {
	for _, c := range cs {
		emit(Event{Kind: EventCancelled, Queue: queue, TaskID: c.ID, PID: c.PID, WorkerID: c.Worker})
	}
}

// recoveredCancels are the takings a reaper's pass ended as cancelled.
func recoveredCancels(r recovery.Recovered) []rdb.Cancelled {
	out := make([]rdb.Cancelled, len(r.Cancelled))
	for i, c := range r.Cancelled {
		out[i] = rdb.Cancelled{ID: c.TaskID, PID: c.PID, Worker: c.Worker}
	}
	return out
}

func (w *Worker) emit(e Event) {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	if w.cfg.OnEvent != nil {
		w.cfg.OnEvent(e)
	}
	w.bus.add(e)
}

func (w *Worker) pokeAll() {
	for _, q := range w.queues {
		q.hint()
	}
}

// hint says that work may be waiting in q: its fetch loop looks, and its
// ends take again.
func (q *queueRunner) hint() {
	q.hints.Add(1)
	q.more.Store(true)
	q.ConcWait.Store(false)
	engine.Poke(q.wake)
}

// tookShort records what a take said of q's waiting work: full, it filled
// what it asked (more may wait); else q has none until a wake-up. hints
// is q.hints read before the take was sent: a wake-up since then (a take
// that gave tasks back past its byte bound publishes one, and its few
// bytes come before the take's reply) is newer than the take's answer,
// and is kept.
func (q *queueRunner) tookShort(full bool, hints uint64) {
	q.more.Store(full)
	if !full && q.hints.Load() != hints {
		// (hint counts before it sets more: either this sees its count,
		// or its store comes after the one above.)
		q.more.Store(true)
	}
}

// slotPool counts the takings being run against a number of slots: a
// queue's own concurrency, or the slots a priority group's queues share.
type slotPool struct {
	size int
	busy atomic.Int32
}

// free returns how many more takings q may hold now: its slots, and while
// it reads ahead the room ahead of them.
func (q *queueRunner) free() int {
	f := q.slots.size + q.ahead() - int(q.slots.busy.Load())
	if q.slots.size != q.concurrency {
		f = min(f, q.concurrency-int(q.busy.Load()))
	}
	return max(f, 0)
}

// limitWait records what q's global limits said of a take: no start before
// the rate allows one, or none until a wake-up (a taking ended somewhere).
// hints is q.hints read before the take was sent: a wake-up since then (an
// end that freed a slot after the take ran in Redis, whose message came
// before the take's reply) is the one the wait is for, and it has come.
func (q *queueRunner) limitWait(wait rdb.LimitWait, hints uint64) {
	switch {
	case wait > 0:
		q.Rate.Hold(wait)
	case wait == rdb.WaitWake:
		q.ConcWait.Store(true)
		if q.hints.Load() != hints {
			// (hint counts before it clears: either this sees its
			// count, or its clear comes after the store above.)
			q.ConcWait.Store(false)
		}
	}
}

// limitedNow reports whether q's global limits forbid a take now, and
// when the rate limit lifts (zero when a wake-up lifts it, or none holds).
func (q *queueRunner) limitedNow() (bool, time.Time) {
	if held, until := q.Rate.Held(); held {
		return true, until
	}
	return q.ConcWait.Load(), time.Time{}
}

// slotFreed tells q's fetch loop that a handler freed a slot, when the
// loop waits for one: at a low rate it waits for work instead, and a
// wake-up per task would cost it a goroutine switch for nothing. The
// loop sets waitsSlot before it reads the free slots again (see
// fetchLoop), and a handler frees its slot before it reads waitsSlot: one
// of the two sees the other. A priority group's loop is always told.
func (q *queueRunner) slotFreed() {
	if q.weight > 0 || q.waitsSlot.Load() {
		engine.Poke(q.freed)
	}
}

// Stopped is closed once the worker has stopped: Stop returned, or the
// context given to Start ended and the stop it began is over.
func (w *Worker) Stopped() <-chan struct{} { return w.life.Stopped() }

// takesOverWait bounds Stop's wait for the ends that take again on their
// way (each call has 5 s).
const takesOverWait = 6 * time.Second

// Stop stops taking, lets running handlers finish until ctx ends, then puts
// the takings still running back at the front of their queues (cancelling
// their handlers with ErrWorkerStopped), deregisters and stops every loop. It
// returns ctx.Err() when the grace period ran out, nil otherwise. Calling it
// again waits for the first call and returns its result.
//
// Its own Redis calls are bounded: while Redis is out of reach, a take on
// its way, the put-back and the deregistration each wait up to 5 s, so
// Stop may return up to about 10 s after ctx ends. Leave that much beyond
// the grace to a hard kill deadline (Kubernetes'
// terminationGracePeriodSeconds); what a killed worker holds comes back
// through the reaper.
//
// A Stop before any Start (or after a Start that failed) returns nil: the
// worker is stopped for good, Stopped is closed and a later Start is
// refused rather than run a worker whose Stop already returned.
func (w *Worker) Stop(ctx context.Context) error {
	return w.life.Stop(func() error { return w.stop(ctx) })
}

// stop is Stop after a Start, run once.
func (w *Worker) stop(ctx context.Context) error {
	close(w.takeStop)
	w.takeStopC()
	w.loops.Wait()
	for _, q := range w.queues {
		// An end that takes again (and may park the worker) holds takeMu
		// while its call is on its way (at most 5 s): wait for those begun
		// before takeStop closed; none begins after. Else one landing after
		// the requeue below would take, or park, for a worker that is gone.
		// Bounded: an OnEvent that calls Stop runs under such an end (it
		// launches), and would wait for itself.
		over := make(chan struct{})
		go func() {
			q.takeMu.Lock()
			q.takesOver = true
			q.takeMu.Unlock()
			close(over)
		}()
		t := time.NewTimer(takesOverWait)
		select {
		case <-over:
		case <-t.C:
			w.cfg.Logger.Warn("worker: stopping: an end that takes again is still on its way; going on", "queue", q.Member)
		}
		t.Stop()
	}
	if s, _ := w.keeper.Current(); !s.Lost() {
		// Nothing more is handed to the worker: no take parks it from
		// now on (parkArgs), and the fetch loops are over. What is on its
		// way is run, or put back with the rest below (the requeue
		// unparks it again, after an end that took again in flight).
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		w.unparkAll(uctx, s)
		cancel()
	}
	for _, q := range w.queues {
		// No more takings: handler goroutines end after theirs. An end
		// that takes again from now on launches nothing; what it took is
		// requeued below with the rest of this worker's holdings.
		q.launchMu.Lock()
		q.closed = true
		close(q.work)
		q.launchMu.Unlock()
	}

	drained := make(chan struct{})
	go func() {
		w.handlers.Wait()
		close(drained)
	}()
	var err error
	select {
	case <-drained:
	case <-ctx.Done():
		err = ctx.Err()
	}

	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), engine.CallTimeout)
	defer cancel()
	s, _ := w.keeper.Current()
	if !s.Lost() {
		// Put back what still runs (nothing when drained) and leave the
		// queues' holder indexes, then deregister. If a queue could not be
		// requeued, stay registered: the reaper requeues the queues of a
		// registered worker once its keepalive expires, and would never
		// look for the takings of one that deregistered.
		if w.requeueOwn(cctx, s) {
			if derr := w.reg.Deregister(cctx, s.ID()); derr != nil {
				w.cfg.Logger.Warn("worker: deregister failed (the reaper will clean up)", "worker_id", s.ID(), "err", derr)
			}
		}
	}
	w.runCancel()
	w.bg.Wait()
	if err != nil {
		// The handlers' contexts are cancelled; give them a moment to
		// return, so their events come before Stop does. A handler that
		// ignores its context is left behind: it can no longer change Redis.
		t := time.NewTimer(time.Second)
		select {
		case <-drained:
		case <-t.C:
		}
		t.Stop()
	}
	w.bus.flush() // what happened before Stop reaches the followers now
	return err
}

// requeueOwn retires session s, then puts every taking of s back at the
// front of its queue and cancels the handlers still running them: their
// ends see the session retired and change nothing. It reports whether every
// queue was requeued.
func (w *Worker) requeueOwn(ctx context.Context, s *heartbeat.Session) bool {
	s.Retire(ErrWorkerStopped)
	ok := true
	for _, q := range w.queues {
		n, cancelled, err := w.st.Requeue(ctx, q.QK, []string{s.ID()}, false)
		emitCancelled(w.emit, q.Member, cancelled)
		if err != nil {
			ok = false
			w.cfg.Logger.Warn("worker: stop could not requeue (the reaper will once the keepalive expires)",
				"queue", q.Member, "worker_id", s.ID(), "err", err)
			continue
		}
		if n > 0 {
			w.emit(Event{Kind: EventStopRequeued, Queue: q.Member, WorkerID: s.ID(), Count: n})
		}
	}
	return ok
}

// stuckLoop reports, once each, the takings whose handler has run for
// their queue's StuckAfter and still runs: an EventStuck and a warning.
// It looks a tenth of the shortest StuckAfter apart (engine.StuckEvery).
func (w *Worker) stuckLoop() {
	qs := make([]*engine.Queue, len(w.queues))
	for i, q := range w.queues {
		qs[i] = &q.Queue
	}
	every := engine.StuckEvery(qs)
	if every == 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-w.runCtx.Done():
			return
		case <-t.C:
		}
		for _, q := range w.queues {
			for _, e := range q.newlyStuck(time.Now()) {
				w.cfg.Logger.Warn("worker: a task has run past its queue's StuckAfter and still runs",
					"queue", q.Member, "task_id", e.TaskID, "pid", e.PID, "running", e.Running)
				e.WorkerID = w.ID()
				w.emit(e)
			}
		}
	}
}

// newlyStuck marks the takings of q whose handler has run StuckAfter at now
// and were not reported yet, and returns their EventStuck.
func (q *queueRunner) newlyStuck(now time.Time) []Event {
	if q.Policy.StuckAfter <= 0 {
		return nil
	}
	q.heldMu.Lock()
	defer q.heldMu.Unlock()
	var out []Event
	for pid, h := range q.held {
		if h.started.IsZero() || h.ending || h.lost || h.stuck || !q.Stuck(h.started, now) {
			continue
		}
		h.stuck = true
		out = append(out, Event{Kind: EventStuck, Queue: q.Member, TaskID: h.id, PID: pid, Running: now.Sub(h.started)})
	}
	return out
}
