package worqr

import (
	"time"

	"github.com/worqr/worqr-go/heartbeat"
	"github.com/worqr/worqr-go/internal/rdb"
)

// Reading ahead: a queue whose handlers return quickly takes up to
// QueueConfig.ReadAhead tasks beyond Concurrency. They wait in the worker
// for a handler slot, so that a handler that returns starts its next task
// at once instead of after its end's round trip, and each end carries more
// takings back. At most Concurrency handlers run at once either way.
const (
	// MaxReadAhead caps QueueConfig.ReadAhead.
	MaxReadAhead = 1024
	// readAheadFast: a queue reads ahead while its handlers' recent average
	// run time is under this.
	readAheadFast = time.Millisecond
)

// readAheadWait is how long a task taken ahead waits for a handler slot
// before it is given back to the front of its queue (handlers that slowed
// down before their average shows it). A variable for tests.
var readAheadWait = 10 * time.Millisecond

// aheadMax is how many tasks q may take ahead at most (0: it never reads
// ahead): ReadAhead, or Concurrency when ReadAhead is 0, for stand-alone
// queues with a Handler served without priority.
func aheadMax(q *queueRunner) int {
	if q.kind != rdb.KindTask || q.weight > 0 || q.cfg.BatchHandler != nil || q.cfg.ReadAhead < 0 {
		return 0
	}
	if q.cfg.ReadAhead > 0 {
		return q.cfg.ReadAhead
	}
	return q.concurrency
}

// ahead is how many tasks q may hold beyond its slots now: none while its
// handlers are slow, while its global limits may apply (a task held ahead
// would count against them while it waits), or while it has tasks of
// several priority levels (one taken ahead would run before a more urgent
// one enqueued meanwhile, or given back).
func (q *queueRunner) ahead() int {
	if q.aheadMax == 0 || q.limited.Load() || q.levels.Load() > 0 || time.Duration(q.runAvg.Load()) >= readAheadFast {
		return 0
	}
	return q.aheadMax
}

// ran records how long a handler of q took: the average of the last eight
// runs or so decides whether q reads ahead. When it turns fast, the fetch
// loop is told (its next take fills the room ahead).
func (q *queueRunner) ran(d time.Duration) {
	if q.aheadMax == 0 {
		return
	}
	old := q.runAvg.Load()
	avg := old + (int64(d)-old)/8
	q.runAvg.Store(avg) // a lost update only delays a switch
	if old >= int64(readAheadFast) && avg < int64(readAheadFast) {
		q.hint()
	}
}

// slowed stops q reading ahead until about sixteen fast runs say its
// handlers are fast again.
func (q *queueRunner) slowed() {
	q.runAvg.Store(int64(8 * readAheadFast))
}

// slot waits for one of q's Concurrency handler slots for taking t of s.
// It reports false when t must not run here: then t is given back to the
// front of its queue (nothing counted). That is when the worker stops, and
// when t waited readAheadWait while q held more takings than Concurrency
// (read ahead): its handlers slowed down before their average showed it,
// so q also stops reading ahead.
func (w *Worker) slot(s *heartbeat.Session, q *queueRunner, t *Task, hs []*holding) bool {
	if q.sem == nil {
		return true
	}
	select {
	case q.sem <- struct{}{}:
		return true
	default:
	}
	timer := time.NewTimer(readAheadWait)
	defer timer.Stop()
	for waiting := true; waiting; {
		select {
		case q.sem <- struct{}{}:
			return true
		case <-timer.C:
			if waiting = int(q.busy.Load()) <= q.concurrency; waiting {
				timer.Reset(readAheadWait)
			} else {
				q.slowed()
			}
		case <-w.takeStop:
			waiting = false
		}
	}
	if !q.returned(hs) {
		w.complete(s, q, []*Task{t}, rdb.GiveBack(rdb.KindTask, t.worker, t.pid, t.ID), nil)
	}
	return false
}

// unslot frees the handler slot slot took.
func (q *queueRunner) unslot() {
	if q.sem != nil {
		<-q.sem
	}
}
