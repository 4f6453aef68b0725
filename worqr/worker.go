package worqr

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/xid"

	"github.com/worqr/worqr-go/heartbeat"
	"github.com/worqr/worqr-go/internal/group"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/recovery"
	"github.com/worqr/worqr-go/registry"
)

// Worker is one registered process serving several queues. Start it once;
// Stop it once. It is safe for concurrent use.
type Worker struct {
	pool ConnGetter
	cfg  WorkerConfig
	keys rdb.Keys
	reg  *registry.Registry

	queues []*queueRunner
	byName map[string]*queueRunner

	mu       sync.Mutex
	started  bool
	stopped  bool
	stopErr  error
	stopDone chan struct{}

	runCtx    context.Context // lives until Stop ends; Redis calls of the loops
	runCancel context.CancelFunc
	takeStop  chan struct{} // closed when Stop begins: no more taking

	sess        atomic.Pointer[session]
	sessChanged chan struct{} // closed and replaced on each new session
	sessMu      sync.Mutex

	loops    sync.WaitGroup // fetchers
	bg       sync.WaitGroup // heartbeat, subscriber, reaper
	handlers sync.WaitGroup

	runMu   sync.Mutex
	running map[string]*inflight // by task id

	hbPaused atomic.Bool // test hook: see PauseHeartbeat
	hb       atomic.Pointer[heartbeat.Loop]
}

// session is one registered worker id. When its keepalive is lost it is
// never used again for anything that changes Redis.
type session struct {
	id     string
	ctx    context.Context // parent of every handler context of the session
	cancel context.CancelCauseFunc
	lost   atomic.Bool
	// why is set before lost: ErrKeepaliveLost, or ErrWorkerStopped when
	// Stop requeued the session's takings.
	why atomic.Pointer[error]
}

// retire marks the session dead for good: nothing may change Redis under its
// id any more. It cancels the handlers' contexts with cause why.
func (s *session) retire(why error) {
	s.why.Store(&why)
	s.lost.Store(true)
	s.cancel(why)
}

func (s *session) cause() error {
	if p := s.why.Load(); p != nil {
		return *p
	}
	return ErrKeepaliveLost
}

type inflight struct {
	cancel context.CancelCauseFunc
	sess   *session
}

// queueKind says which finish script a queue's takings end with.
type queueKind int

const (
	plainQueue queueKind = iota
	stageQueue
	childQueue
)

type queueRunner struct {
	kind        queueKind
	flow        *Flow // stage and child queues
	stage       int   // the stage (declaring the child queue)
	name        string
	qk          rdb.QueueKeys
	cfg         QueueConfig
	handler     Handler
	concurrency int
	busy        atomic.Int32
	work        chan job      // cap concurrency: takings for the handler goroutines
	wake        chan struct{} // cap 1: work may be waiting
	freed       chan struct{} // cap 1: a slot was freed
	finishes    *group.Group[rdb.Taking, rdb.Outcome]

	heldMu sync.Mutex
	held   map[string]bool // pids of this queue's takings being run
}

func (q *queueRunner) hold(pid string, on bool) {
	q.heldMu.Lock()
	defer q.heldMu.Unlock()
	if on {
		q.held[pid] = true
	} else {
		delete(q.held, pid)
	}
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

// NewWorker validates cfg and returns a worker that is not yet registered.
func NewWorker(pool ConnGetter, cfg *WorkerConfig) (*Worker, error) {
	if pool == nil {
		return nil, invalid("pool", "is nil")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	w := &Worker{
		pool:        pool,
		cfg:         c,
		keys:        rdb.NewKeys(c.Namespace),
		byName:      map[string]*queueRunner{},
		running:     map[string]*inflight{},
		sessChanged: make(chan struct{}),
		takeStop:    make(chan struct{}),
		stopDone:    make(chan struct{}),
	}
	w.reg = registry.New(pool, w.keys)
	add := func(r *queueRunner, ref rdb.QueueRef) {
		r.qk = w.keys.Queue(ref)
		r.concurrency = r.cfg.Concurrency
		r.handler = r.cfg.Handler
		r.wake = make(chan struct{}, 1)
		r.freed = make(chan struct{}, 1)
		r.work = make(chan job, r.concurrency)
		r.held = map[string]bool{}
		qk := r.qk
		r.finishes = &group.Group[rdb.Taking, rdb.Outcome]{
			MaxBatch: 64, MaxInFlight: 2,
			Run: func(ctx context.Context, ts []rdb.Taking) ([]rdb.Outcome, error) {
				ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				c, err := w.pool.GetContext(ctx)
				if err != nil {
					return nil, err
				}
				defer c.Close()
				return rdb.FinishMany(ctx, c, qk, ts)
			},
		}
		w.queues = append(w.queues, r)
		w.byName[ref.Member()] = r
	}
	for name, q := range c.Queues {
		add(&queueRunner{name: name, cfg: q}, rdb.Standalone(name))
	}
	for _, f := range c.Flows {
		for i, st := range f.Stages {
			add(&queueRunner{kind: stageQueue, flow: f, stage: i, name: st.Name, cfg: st.Queue},
				rdb.QueueRef{Tag: f.Name, Name: st.Name})
			for name, cq := range st.Children {
				add(&queueRunner{kind: childQueue, flow: f, stage: i, name: name, cfg: cq},
					rdb.QueueRef{Tag: f.Name, Name: name})
			}
		}
	}
	return w, nil
}

// ID returns the worker's current id ("" before Start). It changes when the
// keepalive is lost and the worker registers again.
func (w *Worker) ID() string {
	if s := w.sess.Load(); s != nil {
		return s.id
	}
	return ""
}

// PauseHeartbeat stops renewing the keepalive, as if the process were frozen,
// until ResumeHeartbeat. It is a fault-injection hook for tests.
func (w *Worker) PauseHeartbeat() {
	w.hbPaused.Store(true)
	if l := w.hb.Load(); l != nil {
		l.Pause()
	}
}

// ResumeHeartbeat undoes PauseHeartbeat.
func (w *Worker) ResumeHeartbeat() {
	w.hbPaused.Store(false)
	if l := w.hb.Load(); l != nil {
		l.Resume()
	}
}

// Start registers the worker and starts serving its queues. It returns once
// registered; the work goes on in the background until Stop. The context is
// used for registration only. Calling Start twice is an error.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("worqr: worker already started")
	}
	w.runCtx, w.runCancel = context.WithCancel(context.WithoutCancel(ctx))
	if err := w.writeQueueConfig(ctx); err != nil {
		w.runCancel()
		return err
	}
	s, err := w.register(ctx)
	if err != nil {
		w.runCancel()
		return err
	}
	w.started = true
	w.sess.Store(s)
	w.emit(Event{Kind: EventRegistered, WorkerID: s.id})

	w.bg.Add(2)
	go w.heartbeatLoop()
	go w.subscribeLoop()
	if !w.cfg.DisableReaper {
		reaper := &recovery.Reaper{
			Pool: w.pool, Keys: w.keys, Registry: w.reg,
			Holder: "reaper-" + xid.New().String(), Interval: w.cfg.ReaperInterval,
			Logger: w.cfg.Logger,
			OnRecovered: func(r recovery.Recovered) {
				w.emit(Event{Kind: EventRecovered, WorkerID: w.ID(), Queue: r.Queue, Count: r.Requeued, DeadWorkers: r.Workers})
			},
		}
		w.bg.Add(1)
		go func() {
			defer w.bg.Done()
			reaper.Run(w.runCtx)
		}()
	}
	for _, q := range w.queues {
		for i := 0; i < q.concurrency; i++ {
			go w.serve(q)
		}
		w.loops.Add(1)
		go w.fetchLoop(q)
	}
	return nil
}

// writeQueueConfig stores the settings the scripts read from Redis (those not
// passed on every call): retention of ended tasks and the dead set's caps.
func (w *Worker) writeQueueConfig(ctx context.Context) error {
	c, err := w.pool.GetContext(ctx)
	if err != nil {
		return fmt.Errorf("worqr: write queue config: %w", err)
	}
	defer c.Close()
	for _, q := range w.queues {
		if err := c.Send("HSET", q.qk.Config,
			"retention", q.cfg.Retention.Milliseconds(),
			"dead_max", q.cfg.DeadMaxCount,
			"dead_age", q.cfg.DeadMaxAge.Milliseconds()); err != nil {
			return err
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("worqr: write queue config: %w", err)
	}
	for range w.queues {
		if _, err := redis.ReceiveContext(c, ctx); err != nil {
			return fmt.Errorf("worqr: write queue config: %w", err)
		}
	}
	return nil
}

func (w *Worker) register(ctx context.Context) (*session, error) {
	refs := make([]rdb.QueueRef, len(w.queues))
	for i, q := range w.queues {
		refs[i] = q.qk.Ref
	}
	id := xid.New().String()
	if err := w.reg.Register(ctx, id, w.cfg.HeartbeatTTL, refs); err != nil {
		return nil, fmt.Errorf("worqr: register worker: %w", err)
	}
	sctx, cancel := context.WithCancelCause(w.runCtx)
	w.cfg.Logger.Info("worker: registered", "worker_id", id)
	return &session{id: id, ctx: sctx, cancel: cancel}, nil
}

func (w *Worker) emit(e Event) {
	if w.cfg.OnEvent != nil {
		w.cfg.OnEvent(e)
	}
}

// heartbeatLoop renews the current session's keepalive; on loss it retires
// the session and registers a new one.
func (w *Worker) heartbeatLoop() {
	defer w.bg.Done()
	for {
		s := w.sess.Load()
		loop := &heartbeat.Loop{
			Registry: w.reg, ID: s.id, Interval: w.cfg.HeartbeatInterval,
			TTL: w.cfg.HeartbeatTTL, Logger: w.cfg.Logger,
		}
		if w.hbPaused.Load() {
			loop.Pause()
		}
		w.hb.Store(loop)
		if err := loop.Run(w.runCtx); !errors.Is(err, heartbeat.ErrLost) {
			return // Stop
		}
		// Dead to the cluster: nothing may change Redis under this id again.
		s.retire(ErrKeepaliveLost)
		w.emit(Event{Kind: EventKeepaliveLost, WorkerID: s.id, Err: ErrKeepaliveLost})
		next, ok := w.reregister()
		if !ok {
			return
		}
		w.sessMu.Lock()
		w.sess.Store(next)
		close(w.sessChanged)
		w.sessChanged = make(chan struct{})
		w.sessMu.Unlock()
		w.emit(Event{Kind: EventRegistered, WorkerID: next.id})
		w.pokeAll()
	}
}

// reregister registers under a new id, retrying with capped backoff until it
// works or the worker stops.
func (w *Worker) reregister() (*session, bool) {
	delay := 50 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(w.runCtx, w.cfg.HeartbeatTTL)
		s, err := w.register(ctx)
		cancel()
		if err == nil {
			return s, true
		}
		w.emit(Event{Kind: EventError, Err: err})
		w.cfg.Logger.Warn("worker: register failed", "err", err)
		if !sleepCtx(w.runCtx, delay) {
			return nil, false
		}
		delay = min(delay*2, 5*time.Second)
	}
}

func (w *Worker) currentSession() (*session, <-chan struct{}) {
	w.sessMu.Lock()
	defer w.sessMu.Unlock()
	return w.sess.Load(), w.sessChanged
}

func (w *Worker) pokeAll() {
	for _, q := range w.queues {
		poke(q.wake)
	}
}

func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// fetchLoop takes tasks of one queue while it has free slots and reason to
// believe work is waiting: at start, on a wake-up, on the poll tick, and after
// a take that filled every free slot.
func (w *Worker) fetchLoop(q *queueRunner) {
	defer w.loops.Done()
	poll := time.NewTicker(w.cfg.PollInterval)
	defer poll.Stop()
	hint := true
	unsure := "" // the session id under which a take's reply was lost
	delay := 50 * time.Millisecond
	for {
		s, changed := w.currentSession()
		if unsure != "" && unsure != s.id {
			unsure = "" // that id is dead: the reaper requeues what it held
		}
		free := q.concurrency - int(q.busy.Load())
		if hint && free > 0 && !s.lost.Load() {
			var (
				tasks []rdb.Taken
				err   error
			)
			if unsure != "" {
				err = w.release(s, q)
			}
			if err == nil {
				unsure = ""
				tasks, err = w.take(s, q, free)
				if err != nil {
					// The take may have run with its reply lost: its
					// takings would be held by a live worker that never
					// runs them. Release them before taking again.
					unsure = s.id
				}
			}
			switch {
			case err != nil:
				if w.runCtx.Err() != nil {
					return
				}
				w.emit(Event{Kind: EventError, Queue: q.name, WorkerID: s.id, Err: err})
				w.cfg.Logger.Warn("worker: take failed", "queue", q.name, "err", err)
				if !sleepCtxOr(w.runCtx, w.takeStop, delay) {
					return
				}
				delay = min(delay*2, 5*time.Second)
				continue
			default:
				delay = 50 * time.Millisecond
				hint = len(tasks) == free
				w.launch(s, q, tasks)
			}
		}
		select {
		case <-w.takeStop:
			return
		case <-q.wake:
			hint = true
		case <-q.freed:
		case <-poll.C:
			hint = true
		case <-changed:
			hint = true
		}
	}
}

func (w *Worker) take(s *session, q *queueRunner, n int) ([]rdb.Taken, error) {
	ctx, cancel := context.WithTimeout(w.runCtx, 5*time.Second)
	defer cancel()
	c, err := w.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return rdb.Take(ctx, c, q.qk, s.id, n, q.cfg.MaxCrashes, q.kind == stageQueue)
}

// release puts back the takings session s holds in q that no handler runs
// (those of a take whose reply was lost).
func (w *Worker) release(s *session, q *queueRunner) error {
	ctx, cancel := context.WithTimeout(w.runCtx, 5*time.Second)
	defer cancel()
	c, err := w.pool.GetContext(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	n, _, err := rdb.Release(ctx, c, q.qk, s.id, q.heldPIDs())
	if err == nil && n > 0 {
		w.cfg.Logger.Warn("worker: put back takings whose take reply was lost", "queue", q.name, "count", n)
	}
	return err
}

func (w *Worker) launch(s *session, q *queueRunner, tasks []rdb.Taken) {
	for _, t := range tasks {
		if t.PID == "" {
			w.cfg.Logger.Warn("worker: task buried by take", "queue", q.name, "task_id", t.ID, "reason", t.Reason)
			w.emit(Event{Kind: EventDead, Queue: q.name, TaskID: t.ID, WorkerID: s.id, Err: errors.New(t.Reason)})
			continue
		}
		if s.lost.Load() {
			// Taken under an id that just died: leave it to the reaper.
			w.emit(Event{Kind: EventLost, Queue: q.name, TaskID: t.ID, PID: t.PID, WorkerID: s.id, Err: ErrKeepaliveLost})
			continue
		}
		q.busy.Add(1)
		w.handlers.Add(1)
		q.hold(t.PID, true)
		// Never blocks: at most concurrency tasks are busy, and the channel
		// holds that many.
		q.work <- job{s: s, taken: t, task: &Task{ID: t.ID, Queue: q.name, Payload: t.Payload, Attempt: t.Attempt,
			Crashes: t.Crashes, pid: t.PID, worker: s.id}}
	}
}

// job is one taking handed to a queue's handler goroutines.
type job struct {
	s     *session
	taken rdb.Taken
	task  *Task
}

// serve is one of a queue's long-lived handler goroutines (concurrency of
// them): reusing goroutines saves a new stack per task.
func (w *Worker) serve(q *queueRunner) {
	for j := range q.work {
		w.run(j.s, q, j.taken, j.task)
	}
}

func (w *Worker) run(s *session, q *queueRunner, taken rdb.Taken, t *Task) {
	defer func() {
		q.hold(t.pid, false)
		q.busy.Add(-1)
		poke(q.freed)
		w.handlers.Done()
	}()
	hctx, cancel := context.WithCancelCause(s.ctx)
	timeout := q.cfg.Timeout
	if taken.TimeoutMs > 0 {
		timeout = time.Duration(taken.TimeoutMs) * time.Millisecond
	}
	if timeout > 0 {
		var stop context.CancelFunc
		hctx, stop = context.WithTimeoutCause(hctx, timeout, &TimeoutError{Timeout: timeout})
		defer stop()
	}
	me := &inflight{cancel: cancel, sess: s}
	w.runMu.Lock()
	w.running[t.ID] = me
	w.runMu.Unlock()

	var (
		err error
		res *StageResult
		run *Run
	)
	if q.kind == stageQueue {
		run = newRun(q, taken, t)
		res, err = callStage(hctx, q.flow.Stages[q.stage].Handler, run)
	} else {
		err = callHandler(hctx, q.handler, t)
	}
	var te *TimeoutError
	if err != nil && errors.As(context.Cause(hctx), &te) {
		err = fmt.Errorf("%w: %w", te, err)
	}

	w.runMu.Lock()
	if w.running[t.ID] == me {
		delete(w.running, t.ID)
	}
	w.runMu.Unlock()
	cancel(nil)
	p := w.finishArgs(q, taken, t, err)
	if q.kind == stageQueue && err == nil {
		if perr := w.planStage(q, res, &p); perr != nil {
			// A result the flow cannot record: nothing is written; the
			// stage goes to the dead set with the reason.
			p = w.finishArgs(q, taken, t, SkipRetry(perr))
		}
	}
	if q.kind == childQueue {
		p.parent = taken.Parent
	}
	w.complete(s, q, t, p)
}

// nextStage is the stage after q's (its declaring stage's, for a child
// queue), or "" after the last.
func (q *queueRunner) nextStage() string {
	if q.stage+1 < len(q.flow.Stages) {
		return q.flow.Stages[q.stage+1].Name
	}
	return ""
}

func newRun(q *queueRunner, taken rdb.Taken, t *Task) *Run {
	state, kids := decodeRun(taken.Run)
	return &Run{ID: t.ID, Flow: q.flow.Name, Stage: q.name, State: state, Children: kids, Attempt: t.Attempt}
}

// callStage runs a stage handler and turns a panic into an error.
func callStage(ctx context.Context, h StageHandler, r *Run) (res *StageResult, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return h.HandleStage(ctx, r)
}

// planStage checks a stage's result and adds what the flow finish records.
func (w *Worker) planStage(q *queueRunner, res *StageResult, p *finishPlan) error {
	st := q.flow.Stages[q.stage]
	if res == nil {
		res = &StageResult{}
	}
	fields, err := stateFields(fmt.Sprintf("StageResult.Fields of stage %s", st.Name), res.Fields, w.cfg.MaxPayloadBytes)
	if err != nil {
		return err
	}
	p.fields = fields
	for i, c := range res.Children {
		if _, ok := st.Children[c.Queue]; !ok {
			return invalid(fmt.Sprintf("StageResult.Children[%d].Queue", i), "%q is not a child queue declared by stage %s", c.Queue, st.Name)
		}
		if len(c.Payload) > w.cfg.MaxPayloadBytes {
			return invalid(fmt.Sprintf("StageResult.Children[%d].Payload", i), "is %d bytes, over MaxPayloadBytes (%d)", len(c.Payload), w.cfg.MaxPayloadBytes)
		}
		p.children = append(p.children, rdb.Child{ID: xid.New().String(), Queue: c.Queue, Payload: c.Payload})
	}
	return nil
}

// TimeoutError is the cause of a handler context whose run took longer than
// its timeout; the run counts as a failed attempt.
type TimeoutError struct{ Timeout time.Duration }

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("worqr: task timed out after %s", e.Timeout)
}

// maxErrorLen caps the error text stored with a task.
const maxErrorLen = 8 << 10

// finishArgs turns a handler's return into what the finish records.
func (w *Worker) finishArgs(q *queueRunner, taken rdb.Taken, t *Task, herr error) finishPlan {
	p := finishPlan{herr: herr}
	if herr == nil {
		p.args = rdb.FinishArgs{Mode: rdb.FinishDone, RetentionMillis: q.cfg.Retention.Milliseconds(), Result: t.result}
		return p
	}
	if errors.Is(herr, ErrGiveBack) {
		p.giveBack = true
		return p
	}
	msg := herr.Error()
	if len(msg) > maxErrorLen {
		msg = msg[:maxErrorLen]
	}
	maxAttempts := q.cfg.MaxAttempts
	if taken.MaxAttempts > 0 {
		maxAttempts = taken.MaxAttempts
	}
	p.args = rdb.FinishArgs{Err: msg, RetentionMillis: q.cfg.Retention.Milliseconds()}
	var ra *RetryAfterError
	switch {
	case errors.Is(herr, ErrSkipRetry) || t.Attempt >= maxAttempts:
		p.args.Mode = rdb.FinishDead
	case errors.As(herr, &ra):
		p.args.Mode = rdb.FinishRetry
		p.args.RetryDelayMs = max(ra.Delay.Milliseconds(), 0)
	default:
		p.args.Mode = rdb.FinishRetry
		p.args.RetryDelayMs = max(q.cfg.Backoff(t.Attempt, herr).Milliseconds(), 0)
	}
	return p
}

// finishPlan is what complete records for one run.
type finishPlan struct {
	herr     error
	giveBack bool
	args     rdb.FinishArgs
	fields   []string    // stage: state fields to merge
	children []rdb.Child // stage: children to fan out
	parent   string      // child: its run
}

// callHandler runs the handler and turns a panic into an error.
func callHandler(ctx context.Context, h Handler, t *Task) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return h.HandleTask(ctx, t)
}

// PanicError is the error of a handler that panicked.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("worqr: handler panic: %v\n%s", e.Value, e.Stack)
}

// complete records the end of a taking, retrying on connection errors for as
// long as the session lives: a taking left in Redis by a live worker would
// never be recovered.
func (w *Worker) complete(s *session, q *queueRunner, t *Task, p finishPlan) {
	delay := 20 * time.Millisecond
	for {
		if s.lost.Load() {
			w.emit(Event{Kind: EventLost, Queue: q.name, TaskID: t.ID, PID: t.pid, WorkerID: s.id, Err: s.cause()})
			return
		}
		out, err := w.finish(s, q, t, p)
		if err == nil {
			kind := EventDone
			switch out {
			case rdb.OutcomeCancelled:
				kind = EventCancelled
			case rdb.OutcomeRequeued:
				kind = EventGivenBack
			case rdb.OutcomeRetry:
				kind = EventRetry
			case rdb.OutcomeDead:
				kind = EventDead
			case rdb.OutcomeForwarded:
				kind = EventForwarded
			case rdb.OutcomeFannedOut:
				kind = EventFannedOut
			}
			w.emit(Event{Kind: kind, Queue: q.name, TaskID: t.ID, PID: t.pid, WorkerID: s.id, Err: p.herr})
			return
		}
		if errors.Is(err, ErrTaskLost) {
			w.cfg.Logger.Warn("worker: taking lost", "queue", q.name, "task_id", t.ID, "pid", t.pid, "worker_id", s.id)
			w.emit(Event{Kind: EventLost, Queue: q.name, TaskID: t.ID, PID: t.pid, WorkerID: s.id, Err: ErrTaskLost})
			return
		}
		if w.runCtx.Err() != nil {
			return // hard stop: the keepalive expires and a peer requeues
		}
		w.emit(Event{Kind: EventError, Queue: q.name, TaskID: t.ID, PID: t.pid, WorkerID: s.id, Err: err})
		w.cfg.Logger.Warn("worker: finish failed, retrying", "queue", q.name, "task_id", t.ID, "err", err)
		if !sleepCtx(w.runCtx, delay) {
			return
		}
		delay = min(delay*2, time.Second)
	}
}

func (w *Worker) finish(s *session, q *queueRunner, t *Task, p finishPlan) (rdb.Outcome, error) {
	if q.kind == plainQueue && !p.giveBack {
		// Group commit: finishes of this queue that arrive together share
		// one script call (with its own timeout); each is checked and
		// answered on its own.
		out, err := q.finishes.Do(w.runCtx, rdb.Taking{Worker: s.id, PID: t.pid, ID: t.ID, Args: p.args})
		if err == nil && out == rdb.OutcomeLost {
			return out, ErrTaskLost
		}
		return out, err
	}
	ctx, cancel := context.WithTimeout(w.runCtx, 5*time.Second)
	defer cancel()
	c, err := w.pool.GetContext(ctx)
	if err != nil {
		return rdb.OutcomeLost, err
	}
	defer c.Close()
	switch {
	case p.giveBack:
		return rdb.GiveBack(ctx, c, q.qk, s.id, t.pid, t.ID)
	case q.kind == stageQueue:
		return rdb.FlowFinish(ctx, c, q.qk, s.id, t.pid, t.ID, p.args, q.flow.ref(), q.nextStage(), p.fields, p.children,
			!q.flow.Stages[q.stage].ContinueOnChildFailure)
	default: // childQueue: plain queues went through the group above
		child, _, err := rdb.ChildFinish(ctx, c, q.qk, s.id, t.pid, t.ID, p.parent, p.args)
		return child, err
	}
}

// subscribeLoop holds the worker's one pub/sub connection: wake-ups and
// cancels of every queue it serves. After each (re)subscribe it polls every
// queue, since messages sent while it was away are gone.
func (w *Worker) subscribeLoop() {
	defer w.bg.Done()
	channels := make([]any, 0, 2*len(w.queues))
	route := map[string]func(data []byte){}
	for _, q := range w.queues {
		q := q
		channels = append(channels, q.qk.WakeChannel, q.qk.CancelChannel)
		route[q.qk.WakeChannel] = func([]byte) { poke(q.wake) }
		route[q.qk.CancelChannel] = func(id []byte) { w.cancelRunning(string(id)) }
	}
	delay := 50 * time.Millisecond
	for w.runCtx.Err() == nil {
		subscribed, err := w.subscribeOnce(channels, route)
		if w.runCtx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("unsubscribed")
		}
		if subscribed {
			delay = 50 * time.Millisecond // a new failure starts a new backoff
		}
		w.emit(Event{Kind: EventError, Err: fmt.Errorf("worqr: subscription: %w", err)})
		w.cfg.Logger.Warn("worker: subscription lost, reconnecting", "err", err, "in", delay)
		if !sleepCtx(w.runCtx, delay) {
			return
		}
		delay = min(delay*2, 5*time.Second)
	}
}

// subscribeOnce subscribes and dispatches until the connection fails; it
// reports whether the subscription was confirmed.
func (w *Worker) subscribeOnce(channels []any, route map[string]func([]byte)) (bool, error) {
	c, err := w.pool.GetContext(w.runCtx)
	if err != nil {
		return false, err
	}
	defer c.Close()
	subscribed := false
	err = listen(w.runCtx, c, channels, func() {
		subscribed = true
		w.pokeAll()
	}, func(ch string, data []byte) {
		if f := route[ch]; f != nil {
			f(data)
		}
	})
	return subscribed, err
}

func (w *Worker) cancelRunning(id string) {
	w.runMu.Lock()
	f := w.running[id]
	w.runMu.Unlock()
	if f != nil {
		f.cancel(ErrTaskCancelled)
	}
}

// Stop stops taking, lets running handlers finish until ctx ends, then puts
// the takings still running back at the front of their queues (cancelling
// their handlers with ErrWorkerStopped), deregisters and stops every loop. It
// returns ctx.Err() when the grace period ran out, nil otherwise. Calling it
// again waits for the first call and returns its result.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	if !w.started {
		w.mu.Unlock()
		return nil
	}
	if w.stopped {
		w.mu.Unlock()
		<-w.stopDone
		return w.stopErr
	}
	w.stopped = true
	w.mu.Unlock()

	close(w.takeStop)
	w.loops.Wait()
	for _, q := range w.queues {
		close(q.work) // no more takings: handler goroutines end after theirs
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

	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	s := w.sess.Load()
	if !s.lost.Load() {
		// Put back what still runs (nothing when drained) and leave the
		// queues' holder indexes, then deregister.
		w.requeueOwn(cctx, s)
		if derr := w.reg.Deregister(cctx, s.id); derr != nil {
			w.cfg.Logger.Warn("worker: deregister failed (the reaper will clean up)", "worker_id", s.id, "err", derr)
		}
	}
	w.runCancel()
	w.bg.Wait()
	if err != nil {
		// The handlers' contexts are cancelled; give them a moment to
		// return, so their events come before Stop does. A handler that
		// ignores its context is left behind: it can no longer change Redis.
		select {
		case <-drained:
		case <-time.After(time.Second):
		}
	}
	w.stopErr = err
	close(w.stopDone)
	return err
}

// requeueOwn puts every taking of session s back at the front of its queue and
// cancels the handlers still running them; their finishes then find the
// taking lost and change nothing.
func (w *Worker) requeueOwn(ctx context.Context, s *session) {
	c, err := w.pool.GetContext(ctx)
	if err != nil {
		w.cfg.Logger.Warn("worker: stop could not requeue (the reaper will)", "err", err)
		return
	}
	defer c.Close()
	for _, q := range w.queues {
		n, _, err := rdb.Requeue(ctx, c, q.qk, []string{s.id}, false)
		if err != nil {
			w.cfg.Logger.Warn("worker: stop could not requeue (the reaper will)", "queue", q.name, "err", err)
			continue
		}
		if n > 0 {
			w.emit(Event{Kind: EventStopRequeued, Queue: q.name, WorkerID: s.id, Count: n})
		}
	}
	s.retire(ErrWorkerStopped)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func sleepCtxOr(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}
