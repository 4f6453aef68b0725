package worqr

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/worqr/worqr-go/heartbeat"
	"github.com/worqr/worqr-go/internal/engine"
	"github.com/worqr/worqr-go/internal/rdb"
)

// fetchLoop takes tasks of one queue while it has free slots and reason to
// believe work is waiting: at start, on a wake-up, on the poll tick, after a
// take that filled every free slot, and after a take that buried something
// (bad data or a crash breaker must not cost the good task behind it a poll
// interval). A queue whose global limits stop its takes waits for the time
// the take script named (rate) or a wake-up (concurrency), never spins.
func (w *Worker) fetchLoop(q *queueRunner) {
	defer w.loops.Done()
	poll := time.NewTicker(w.cfg.PollInterval)
	defer poll.Stop()
	lift := time.NewTimer(time.Hour)
	lift.Stop()
	defer lift.Stop()
	hint := true
	delay := 50 * time.Millisecond
	for {
		s, changed := w.keeper.Current()
		unsure := q.unsureFor(s.ID())
		free := q.free()
		// A process frozen (or cut off) for most of a TTL does not take
		// before a beat confirms its id still lives: a zombie re-taking its
		// own requeued task would count a second crash for it.
		// A release takes nothing: it runs while the queue is paused or
		// limited too, so that nothing stays held with no handler.
		alive := !s.Lost() && w.keeper.Fresh()
		ready := alive && !q.Paused.Load()
		if limited, until := q.limitedNow(); limited {
			ready = false
			if !until.IsZero() {
				lift.Reset(time.Until(until))
			}
		}
		if alive && unsure != "" || ready && hint && free > 0 {
			var (
				tasks []rdb.Taken
				err   error
				hints uint64
			)
			if unsure != "" {
				err = w.release(s, q)
				// Hand-offs that waited for the release were launched
				// at its end: the take counts them.
				free = q.free()
			}
			if err == nil && ready && hint && free > 0 {
				if f, ok := w.hooks.beforeTake.get(); ok {
					f(q)
				}
				var wait rdb.LimitWait
				hints = q.hints.Load()
				tasks, wait, err = w.take(s, q, free)
				err = w.takeReplicated(s, q, err)
				q.limitWait(wait, hints)
				if errors.Is(err, rdb.ErrExpired) {
					// Redis refused: the keepalive may be gone (beats
					// are failing). Nothing was taken; wait for a beat.
					if !engine.Sleep(w.takeCtx, w.cfg.HeartbeatInterval/4) {
						return
					}
					continue
				}
				if err != nil {
					// The take may have run with its reply lost: its
					// takings would be held by a live worker that never
					// runs them. Release them before taking again.
					q.setUnsure(s.ID())
				}
			}
			if err != nil {
				if w.runCtx.Err() != nil {
					return
				}
				w.emit(Event{Kind: EventError, Queue: q.Member, WorkerID: s.ID(), Err: err})
				w.cfg.Logger.Warn("worker: take failed", "queue", q.Member, "err", err)
				if !engine.Sleep(w.takeCtx, delay) {
					return
				}
				delay = min(delay*2, 5*time.Second)
				continue
			}
			delay = 50 * time.Millisecond
			if ready && hint && free > 0 {
				q.tookShort(heads(tasks) == free, hints)
				launched, buried := w.launch(s, q, tasks, launchFree)
				hint = buried > 0 || (launched == free && free > 0)
				if hint && !stopping(w.takeStop) {
					continue
				}
			}
		}
		if !alive && !s.Lost() && (unsure != "" || hint) {
			// Frozen or cut off for most of a TTL: nothing is released
			// or taken before a beat says the id lives, and nothing tells
			// this loop when one does. Look again soon: a taking not run
			// meanwhile (a hand-off, or one that waited past the freeze)
			// is held here, out of every other worker's reach, until the
			// release, which must not wait for a poll or a wake-up.
			if !engine.Sleep(w.takeCtx, w.cfg.HeartbeatInterval/4) {
				return
			}
			continue
		}
		if ready && hint && free == 0 {
			// Work may be waiting, and no slot is free: a handler that
			// frees one says so (slotFreed), unless it did before this.
			q.waitsSlot.Store(true)
			if q.free() > 0 {
				q.waitsSlot.Store(false)
				continue
			}
		}
		select {
		case <-w.takeStop:
			return
		case <-q.wake:
			hint = true
		case <-q.freed:
		case <-poll.C:
			q.ConcWait.Store(false) // a lost wake-up must not stall a limited queue
			hint = true
		case <-lift.C:
			hint = true
		case <-changed:
			hint = true
		}
		q.waitsSlot.Store(false)
	}
}

// stopping reports whether c (the worker's takeStop) is closed.
func stopping(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// take takes up to n tasks of q under s, and says whether q's global limits
// cut the take.
func (w *Worker) take(s *heartbeat.Session, q *queueRunner, n int) ([]rdb.Taken, rdb.LimitWait, error) {
	ctx, cancel := context.WithTimeout(w.runCtx, engine.CallTimeout)
	defer cancel()
	return w.st.TakeWait(ctx, q.QK, w.takeArgs(s, q, n))
}

// takeArgs are the arguments of a take of up to n tasks of q under s:
// the engine's, with the Worker's key batches, replica acks and hand-off
// parks.
func (w *Worker) takeArgs(s *heartbeat.Session, q *queueRunner, n int) rdb.TakeArgs {
	a := q.TakeArgs(s.ID(), s.Until(), n)
	a.Batch, a.Ack = q.keyBatch(), w.cfg.Replicas > 0
	a.Park, a.ParkMs = w.parkArgs(q)
	return a
}

// takeReplicated turns the error of a take that too few replicas
// acknowledged (Config.Replicas) into nil, after logging and reporting it
// (an EventError): the takings are held on the primary and are run. Such
// a take is lost only if the primary fails before a replica gets it; then
// the check after the switch (release) cancels their handlers.
func (w *Worker) takeReplicated(s *heartbeat.Session, q *queueRunner, err error) error {
	if !errors.Is(err, ErrNotReplicated) {
		return err
	}
	w.cfg.Logger.Warn("worker: take not acknowledged by enough replicas", "queue", q.Member, "err", err)
	w.emit(Event{Kind: EventError, Queue: q.Member, WorkerID: s.ID(), Err: fmt.Errorf("worqr: take from %s: %w", q.Member, err)})
	return nil
}

// keyBatch is the TakeArgs.Batch of q: its KeyBatch when a BatchHandler
// serves it (above 1: batches), else 0 (the plain take).
func (q *queueRunner) keyBatch() int {
	if q.cfg.BatchHandler == nil {
		return 0
	}
	return q.cfg.KeyBatch
}

// heads counts the takings of a take that are not taken behind a batch's
// head (each fills a slot; those behind a head share its slot).
func heads(ts []rdb.Taken) int {
	n := 0
	for _, t := range ts {
		if t.Head == "" {
			n++
		}
	}
	return n
}

// release puts back the takings session s holds in q that no handler runs
// (those of a take whose reply was lost), and in the same call reads which
// of the takings being run s no longer holds: after a failover, a take the
// old primary acknowledged and never passed on to the new one. Their
// handlers are cancelled at once (ErrLostInFailover) and their ends are
// not sent. After a switch of server it first waits for a beat of s on the
// new server (confirmSwitch).
func (w *Worker) release(s *heartbeat.Session, q *queueRunner) error {
	if err := w.confirmSwitch(s, q); err != nil {
		return err
	}
	q.takeMu.Lock()
	defer q.takeMu.Unlock()
	ctx, cancel := context.WithTimeout(w.runCtx, engine.CallTimeout)
	defer cancel()
	// The need for a release is met by this one, unless it fails: a
	// taking left unlaunched from now on (a hand-off delivered at its end,
	// say) makes the queue unsure again, for the next one.
	q.setUnsure("")
	// Hand-offs wait while the release is on its way (see handoff.go):
	// the pids it is told of are read after they began to wait.
	q.releaseBegin(s.ID())
	known := q.heldPIDs()
	r, err := w.st.ReleaseCheck(ctx, q.QK, s.ID(), known)
	if f, ok := w.hooks.released.get(); ok {
		f(q)
	}
	w.releaseEnd(s, q, known, r, err)
	emitCancelled(w.emit, q.Member, r.Cancelled)
	if err != nil {
		q.setUnsure(s.ID())
		return err
	}
	if r.Requeued > 0 {
		w.cfg.Logger.Warn("worker: put back takings it held and did not run (taken ahead of handlers that slowed down, or a lost take reply or hand-off)",
			"queue", q.Member, "count", r.Requeued)
	}
	for pid, id := range q.markLost(r.Missing) {
		w.cfg.Logger.Warn("worker: taking lost in a failover (the new primary does not hold it): handler cancelled",
			"queue", q.Member, "task_id", id, "pid", pid, "worker_id", s.ID())
		w.emit(Event{Kind: EventLost, Queue: q.Member, TaskID: id, PID: pid, WorkerID: s.ID(), Err: ErrLostInFailover})
	}
	return nil
}

// confirmSwitch waits, when q saw its pool switch servers since its last
// release, for a beat of s that the new server acknowledged: until then
// the keepalive of s may be missing there (so a reaper may be requeueing
// what s holds), and s.Until, read on the old server, fences nothing on
// the new one. A session lost meanwhile is retired by the keeper, which
// cancels every handler of s.
func (w *Worker) confirmSwitch(s *heartbeat.Session, q *queueRunner) error {
	for {
		need, seen := q.unsure.NeedsConfirm()
		if !need {
			return nil
		}
		// One beat serves every queue that saw no later switch.
		if m := w.confirmed.Load(); m == nil || m.s != s || m.switches < seen {
			now := w.st.Switches() // read before the beat begins
			ctx, cancel := context.WithTimeout(w.takeCtx, w.cfg.HeartbeatTTL)
			err := w.keeper.Confirm(ctx, s)
			cancel()
			if err != nil {
				return fmt.Errorf("worqr: confirm keepalive after a server switch: %w", err)
			}
			w.confirmed.Store(&confirmMark{s: s, switches: now})
		}
		if f, ok := w.hooks.confirmed.get(); ok {
			f(q)
		}
		// A switch seen meanwhile (by an end that takes again) needs a
		// beat of its own, begun after it: go round again.
		if q.unsure.Confirmed(seen) {
			return nil
		}
	}
}

// confirmMark says that a beat of session s begun when the pool had
// switched servers switches times was acknowledged (confirmSwitch).
type confirmMark struct {
	s        *heartbeat.Session
	switches uint64
}

// reporter records a running taking's progress reports, while its session
// owns it.
func (w *Worker) reporter(s *heartbeat.Session, q *queueRunner, pid, id string) func(context.Context, string) error {
	return func(ctx context.Context, text string) error {
		if s.Lost() {
			return ErrTaskLost
		}
		ok, err := w.st.Progress(ctx, q.QK, s.ID(), pid, id, text)
		if err != nil {
			return fmt.Errorf("worqr: progress of %s: %w", id, err)
		}
		if !ok {
			return ErrTaskLost
		}
		return nil
	}
}

// How launch bounds the takings it launches.
const (
	// launchAny: an end's take again (the handlers of its ends still
	// count as busy: it refills their slots) and a priority group's take.
	launchAny = iota
	// launchFree: the fetch loop's take, which asked for q's free slots.
	launchFree
	// launchHandoff: a hand-off, which Redis recorded while the worker
	// held fewer than its concurrency there.
	launchHandoff
)

// launch hands the takings to the queue's handler goroutines and returns how
// many it launched and how many the take buried. After Stop closed the
// queue it launches nothing: those takings stay held, and Stop requeues them.
// It never blocks: a taking the handler goroutines have no room for is not
// launched (nor one received while frozen). A taking not launched while the
// session lives stays held: the queue is made unsure, and its fetch loop
// releases it. With bound launchFree (the fetch loop's take, which asked
// for q's free slots) it launches no taking past the slots free now: a
// hand-off launched while the take was on its way took one of them (Redis
// hands a worker tasks only below its concurrency, but the take did not
// count the hand-off), and the taking past them would wait, held out of
// other workers' reach, for a handler to finish its task. With bound
// launchHandoff it launches none past the slots free now and those of
// handlers that returned (a hand-off may come while the end that freed
// its slot in Redis is on its way back: it waits for that end only): the
// same race the other way round, the take's reply launched before the
// hand-off's message came.
func (w *Worker) launch(s *heartbeat.Session, q *queueRunner, tasks []rdb.Taken, bound int) (launched, buried int) {
	q.launchMu.Lock()
	unsure, lost := false, false
	defer func() {
		if unsure {
			q.unsure.Mark(s.ID())
		}
		q.launchMu.Unlock()
		if unsure {
			engine.Poke(q.wake)
		}
		if lost {
			go w.requeueLostIn(s.ID(), q) // never a Redis call under launchMu
		}
	}()
	// A process frozen (or cut off) for most of a TTL since its last good
	// beat runs nothing it received meanwhile: its keepalive may have
	// expired and the reaper requeued these takings to another worker.
	// After a beat confirms the id lives, the release puts them back.
	fresh := w.keeper.Fresh()
	for i := 0; i < len(tasks); i++ {
		t := tasks[i]
		var behind []rdb.Taken // the batch t heads: the takings right after it
		for i+1 < len(tasks) && tasks[i+1].Head != "" && tasks[i+1].Head == t.ID {
			i++
			behind = append(behind, tasks[i])
		}
		if t.PID == "" {
			buried++
			w.cfg.Logger.Warn("worker: task buried by take", "queue", q.Member, "task_id", t.ID, "reason", t.Reason)
			w.emit(Event{Kind: EventDead, Queue: q.Member, TaskID: t.ID, WorkerID: s.ID(), Err: errors.New(t.Reason)})
			emitTakenOut(w.emit, q.QK.Ref.Tag, t.Stopped) // a child that failed its run: its waiting siblings
			continue
		}
		if s.Lost() {
			// Taken under an id that just died: put back as the worker
			// put back the rest of what that id held (requeueLost; this
			// take was on its way then). A reaper would find the id only
			// while the registry holds it.
			w.emit(Event{Kind: EventLost, Queue: q.Member, TaskID: t.ID, PID: t.PID, WorkerID: s.ID(), Err: ErrKeepaliveLost})
			lost = true
			continue
		}
		if q.closed {
			continue
		}
		if f := q.free(); bound != launchAny && f <= 0 && (bound == launchFree || f+q.ending() <= 0) {
			w.cfg.Logger.Debug("worker: taking past the free slots (a hand-off and a take crossed): put back by a release",
				"queue", q.Member, "task_id", t.ID, "pid", t.PID)
			unsure = true
			continue
		}
		// No room for it: a hand-off (whose subscriber goroutine must
		// never block), or more takings than the handlers' channel holds
		// (a priority group may plan a queue past its own Concurrency):
		// never wait here under launchMu (an end waiting on this queue's
		// handlers would wait for this launch, the group loop for launchMu).
		if !fresh || len(q.work) == cap(q.work) {
			w.cfg.Logger.Warn("worker: taking not run (received while frozen, or no room): put back by a release",
				"queue", q.Member, "task_id", t.ID, "pid", t.PID, "fresh", fresh)
			unsure = true
			continue
		}
		launched++
		q.busy.Add(1)
		q.slots.busy.Add(1)
		w.handlers.Add(1)
		h := w.hold(s, q, t)
		// The send below never blocks: the channel had room (checked
		// above; only launch sends, under launchMu).
		task := w.newTask(s, q, t)
		j := job{s: s, taken: t, task: task, h: h}
		if q.cfg.BatchHandler != nil {
			j.batch = &batchJob{taken: append([]rdb.Taken{t}, behind...), tasks: []*Task{task}, held: []*holding{h}}
			for _, b := range behind {
				j.batch.held = append(j.batch.held, w.hold(s, q, b))
				j.batch.tasks = append(j.batch.tasks, w.newTask(s, q, b))
			}
		}
		if q.turn != nil {
			q.tickets++
			j.ticket = q.tickets
		}
		q.work <- j
	}
	return launched, buried
}

// hold records taking t of q as being run (queueRunner.hold), and reports
// the taking it displaced, if any: lost in a failover.
func (w *Worker) hold(s *heartbeat.Session, q *queueRunner, t rdb.Taken) *holding {
	h, displaced := q.hold(t.PID, t.ID)
	if displaced != "" {
		w.cfg.Logger.Warn("worker: taking lost in a failover (its pid was handed out again): handler cancelled",
			"queue", q.Member, "task_id", displaced, "pid", t.PID, "worker_id", s.ID())
		w.emit(Event{Kind: EventLost, Queue: q.Member, TaskID: displaced, PID: t.PID, WorkerID: s.ID(), Err: ErrLostInFailover})
	}
	return h
}

// newTask is the Task a handler sees for taking t.
func (w *Worker) newTask(s *heartbeat.Session, q *queueRunner, t rdb.Taken) *Task {
	task := &Task{ID: t.ID, Queue: q.name, Payload: t.Payload, Attempt: t.Attempt,
		Crashes: t.Crashes, pid: t.PID, worker: s.ID(), report: w.reporter(s, q, t.PID, t.ID)}
	if rdb.IsEnvelope(t.Payload) {
		task.Payload, task.Key, task.Payloads = unwrap(t.Payload)
	}
	if t.Meta != "" {
		task.Meta = engine.DecodeMeta(t.Meta)
	}
	return task
}
