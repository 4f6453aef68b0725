package worqr

import (
	"time"

	"github.com/worqr/worqr-go/heartbeat"
	"github.com/worqr/worqr-go/internal/engine"
	"github.com/worqr/worqr-go/internal/rdb"
)

// Reading ahead: a queue whose handlers return quickly takes up to
// QueueConfig.ReadAhead tasks beyond Concurrency. They wait in the worker
// for a handler slot, so that a handler that returns starts its next task
// at once instead of after its end's round trip, and each end carries more
// takings back. At most Concurrency handlers run at once either way.
const (
	// maxReadAhead caps QueueConfig.ReadAhead.
	maxReadAhead = 1024
	// readAheadFast: a queue reads ahead while its handlers' recent average
	// run time is under this.
	readAheadFast = time.Millisecond
)

// readAheadWait is how long a task taken ahead waits for a handler slot
// before it is given back to the front of its queue (handlers that slowed
// down before their average shows it), for each Concurrency tasks a queue
// may take ahead: a task waits about ReadAhead/Concurrency average runs.
// A variable for tests.
var readAheadWait = 10 * time.Millisecond

// aheadMax is how many tasks q may take ahead at most (0: it never reads
// ahead): ReadAhead, or Concurrency when ReadAhead is 0, for stand-alone
// queues with a Handler served without priority, at a concurrency of 2 or
// more. A queue at concurrency 1 runs its tasks one at a time in the order
// it takes them, a task given back next: with tasks taken ahead, two takes
// could be on their way at once and their replies cross.
func aheadMax(q *queueRunner) int {
	if q.Kind != rdb.KindTask || q.weight > 0 || q.cfg.BatchHandler != nil || q.cfg.ReadAhead < 0 || q.concurrency < 2 {
		return 0
	}
	if q.cfg.ReadAhead > 0 {
		return q.cfg.ReadAhead
	}
	return q.concurrency
}

// ahead is how many tasks q may hold beyond its slots now: none while its
// handlers are slow, while its global limits or the limits of its keys (a
// fair queue's) may apply (a task held ahead would count against them
// while it waits, and its rate would count its start before its handler
// starts), or while it has tasks of several priority levels (one taken
// ahead would run before a more urgent one enqueued meanwhile, or given
// back). A fair queue without limits per key reads ahead: its takes still
// serve the keys in turn, and a key's task taken ahead waits at most
// about ReadAhead/Concurrency runs of a fast handler.
func (q *queueRunner) ahead() int {
	if q.aheadMax == 0 || q.Limited.Load() || q.KeyLimited.Load() || q.Levels.Load() > 0 || time.Duration(q.runAvg.Load()) >= readAheadFast {
		return 0
	}
	return q.aheadMax
}

// began is when a handler of q starts, for ranSince; the zero time for a
// queue that never reads ahead (no clock read on its hot path).
func (q *queueRunner) began() time.Time {
	if q.aheadMax == 0 {
		return time.Time{}
	}
	return time.Now()
}

// ranSince records the run of a handler of q that began then (ran).
func (q *queueRunner) ranSince(began time.Time) {
	if !began.IsZero() {
		q.ran(time.Since(began))
	}
}

// ran records how long a handler of q took: the average of the last eight
// runs or so decides whether q reads ahead. When it turns fast, the fetch
// loop is told (its next take fills the room ahead).
func (q *queueRunner) ran(d time.Duration) {
	if q.aheadMax == 0 {
		return
	}
	for {
		old := q.runAvg.Load()
		avg := old + (int64(d)-old)/8
		if !q.runAvg.CompareAndSwap(old, avg) {
			continue // not over a slowdown recorded meanwhile
		}
		if old >= int64(readAheadFast) && avg < int64(readAheadFast) {
			q.hint()
		}
		return
	}
}

// slowed stops q reading ahead until about sixteen fast runs say its
// handlers are fast again.
func (q *queueRunner) slowed() {
	q.runAvg.Store(int64(8 * readAheadFast))
}

// slot waits for one of q's Concurrency handler slots for the taking of
// job j, in launch order (starts follow takes). It reports false when j
// must not run here: when the worker stops; when j waited readAheadWait
// for each Concurrency tasks q may take ahead (its handlers slowed down
// before their average showed it: q stops reading ahead); and when the
// process was frozen for most of a TTL while j waited, or j's session was
// lost (launch would not have launched it then: the reaper may have given
// it to another worker). The caller then lets the taking go unrun
// (notRun).
func (w *Worker) slot(q *queueRunner, j job) bool {
	if q.turn == nil {
		// Launched while its session lived, j may have waited for a
		// handler goroutine (one still ending its last task, its end
		// retried while Redis is out of reach) past a freeze or the
		// session's loss: the reaper may have given it to another worker.
		return w.usable(j.s)
	}
	granted := q.turn.Wait(j.ticket)
	if granted == nil {
		// A slot at once; j may still have waited for a handler
		// goroutine (as above) past a freeze or its session's loss.
		return w.slotUsable(q, j)
	}
	if f, ok := w.hooks.slotWait.get(); ok {
		f(j.taken.ID)
	}
	timer := time.NewTimer(readAheadWait * time.Duration((q.aheadMax+q.concurrency-1)/q.concurrency))
	defer timer.Stop()
	select {
	case <-granted:
		return w.slotUsable(q, j)
	case <-timer.C:
		q.slowed()
	case <-j.s.Context().Done():
	case <-w.takeStop:
	}
	if !q.turn.Leave(j.ticket) {
		// Served meanwhile: it holds a slot, and runs unless that came
		// too late.
		return w.slotUsable(q, j)
	}
	return false
}

// slotUsable reports whether job j, granted a slot after a wait, may run:
// its session lives and the process was not frozen meanwhile. If not, the
// slot is freed.
func (w *Worker) slotUsable(q *queueRunner, j job) bool {
	if w.usable(j.s) {
		return true
	}
	q.turn.Done()
	return false
}

// usable reports whether a taking of session s may start its handler
// now: s lives, and no freeze or cut-off of most of a TTL happened since
// the last beat that found its keepalive.
func (w *Worker) usable(s *heartbeat.Session) bool {
	return w.keeper.Fresh() && !s.Lost()
}

// notRun lets taking h (pid) of s go without running it: it is no longer
// held here, so a release puts it back at the front of its queue, in pid
// order with any others. The fetch loop makes it; once the worker stops,
// there is none, and this goroutine makes it, once the fetch loops are
// over (a take of theirs on its way, not yet held, would be put back and
// then run), unless another release took it along: not after Stop's
// grace period, as Stop's requeue would.
func (w *Worker) notRun(s *heartbeat.Session, q *queueRunner, pid string, h *holding) {
	q.unhold(pid, h)
	q.setUnsure(s.ID())
	if !stopping(w.takeStop) {
		engine.Poke(q.wake)
		return
	}
	w.loops.Wait()
	if q.unsureFor(s.ID()) == "" {
		return
	}
	if err := w.release(s, q); err != nil {
		w.cfg.Logger.Warn("worker: stopping: could not put back a task taken ahead (Stop's requeue will)",
			"queue", q.Member, "err", err)
	}
}

// unslot frees the handler slot a taking of q held (slot), if q hands
// them out.
func (q *queueRunner) unslot() {
	if q.turn != nil {
		q.turn.Done()
	}
}

// skipSlot says that the taking of ticket k will never ask for a slot.
func (q *queueRunner) skipSlot(k uint64) {
	if q.turn != nil {
		q.turn.Skip(k)
	}
}
