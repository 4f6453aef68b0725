package worqr

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/worqr/worqr-go/heartbeat"
	"github.com/worqr/worqr-go/internal/engine"
	"github.com/worqr/worqr-go/internal/group"
	"github.com/worqr/worqr-go/internal/rdb"
)

// endGroup is a queue's one way to end takings: ends that arrive together
// share one script call (group commit), whatever their kind (done, retry,
// dead, give back, a stage's forward or fan-out, a child's end); each is
// checked and answered on its own. The same call takes again for the slots
// its ends free (see refill), so a busy worker spends one round trip per
// batch of tasks, not two.
func (w *Worker) endGroup(q *queueRunner) *group.Group[rdb.Ending, endDone] {
	retention := q.cfg.Retention.Milliseconds()
	return engine.NewEndGroup(func(ctx context.Context, es []rdb.Ending) ([]endDone, error) {
		s, take := w.refill(q, es)
		if take != nil {
			// Until its takings are launched (see takeMu).
			q.takeMu.RLock()
			defer q.takeMu.RUnlock()
			if q.unsureFor(s.ID()) != "" {
				take = nil // a release is due first
			} else if q.takesOver {
				// Stop began after refill: it waited for the takes
				// already under way (takeMu) before it unparks and
				// requeues, so none may start now.
				take = nil
			}
		}
		call := take
		if call == nil && q.Limited.Load() {
			// Takes nothing; tells the script that the queue may have
			// limits, so that the slots freed are announced.
			call = &rdb.TakeArgs{Limited: true}
		}
		hints := q.hints.Load()
		ended, taken, wait, err := w.st.EndTakeWait(ctx, q.QK, retention, es, call)
		var replica error
		if errors.Is(err, ErrNotReplicated) {
			// Recorded on the primary: the takings are ended (an end
			// tried again would find them lost); complete says so.
			replica, err = err, nil
		}
		if err != nil {
			if take != nil {
				// The take may have been applied with the reply
				// lost: release before the queue is taken from again.
				q.setUnsure(s.ID())
				q.hint()
			}
			return nil, err
		}
		if take != nil {
			q.limitWait(wait, hints)
			full := heads(taken) == take.Max && wait == 0
			q.tookShort(full, hints)
			if _, buried := w.launch(s, q, taken, launchAny); buried > 0 || full {
				q.hint() // slots left by buried ids, or more may wait
			}
		}
		emitStopped(w.emit, q.QK.Ref.Tag, ended)
		out := make([]endDone, len(ended))
		for i, e := range ended {
			out[i] = endDone{Ended: e, replica: replica}
		}
		return out, nil
	})
}

// emitStopped reports, through emit, the cancels of the waiting children
// that the ends of a flow's tag took out of their queues (a child's end
// that failed its run, fail-fast): no end of a taking reports them.
func emitStopped(emit func(Event), tag string, ended []rdb.Ended) {
	for _, e := range ended {
		emitTakenOut(emit, tag, e.Stopped)
	}
}

// emitTakenOut reports, through emit, the cancels of tasks ks of a flow's
// tag that a stop took out of where they waited.
func emitTakenOut(emit func(Event), tag string, ks []rdb.QueuedTask) {
	for _, k := range ks {
		emit(Event{Kind: EventCancelled, Queue: rdb.QueueRef{Tag: tag, Name: k.Queue}.Member(), TaskID: k.ID})
	}
}

// endDone is what the end of one taking recorded, and a *ReplicaError
// when too few replicas acknowledged it (Config.Replicas).
type endDone struct {
	rdb.Ended
	replica error
}

// refill says whether the end of es takes again, and how many: one task per
// taking that ends other than by a give back (whose slot is then reused
// without the fetch loop), under the current session, when tasks may be
// waiting (q.more) and the fetch loop would take too (session fresh and not
// lost, queue not paused, worker not stopping). Whether a release is
// pending is checked by the caller under takeMu. The handlers of es are still running, so
// the new takings never overfill the queue. A queue held by its global
// limits does not take again; a queue of a priority group takes again only
// the slots the priority rule gives it (refillShare).
func (w *Worker) refill(q *queueRunner, es []rdb.Ending) (*heartbeat.Session, *rdb.TakeArgs) {
	n := 0
	for _, e := range es {
		if e.Ask != rdb.AskBack {
			n++
		}
	}
	s, _ := w.keeper.Current()
	if n == 0 || !q.more.Load() || s.Lost() || q.Paused.Load() || !w.keeper.Fresh() {
		return s, nil
	}
	if limited, _ := q.limitedNow(); limited {
		return s, nil
	}
	if n = w.refillShare(q, n); n == 0 {
		return s, nil // the priority rule gives these slots to other queues
	}
	if stopping(w.takeStop) {
		return s, nil
	}
	a := w.takeArgs(s, q, n)
	return s, &a
}

// complete records the end of a taking, retrying on connection errors for as
// long as the session lives: a taking left in Redis by a live worker would
// never be recovered.
//
// A retry after a connection error may find the taking gone because the
// first attempt was applied and only its reply was lost. While the session's
// keepalive still exists nobody else can have moved the taking (the reaper
// only requeues workers whose key is gone, and a key never comes back), so a
// taking that vanished from a live session was ended by this worker: that
// is reported as the outcome asked for, not as lost.
//
// ts are the tasks e ends: one, or a batch's (its head first, then
// e.Batch's members, whose outcomes come in Ended.Members).
func (w *Worker) complete(s *heartbeat.Session, q *queueRunner, ts []*Task, e rdb.Ending, herr error) {
	t := ts[0]
	delay := 20 * time.Millisecond
	unsure := false // an earlier attempt may have been applied
	for {
		if s.Lost() {
			for _, t := range ts {
				w.emit(Event{Kind: EventLost, Queue: q.Member, TaskID: t.ID, PID: t.pid, WorkerID: s.ID(), Err: s.Cause()})
			}
			return
		}
		res, err := q.ends.Call(w.runCtx, e)
		out, members := res.Outcome, res.Members
		if err == nil && out == rdb.OutcomeLost && unsure {
			var applied bool
			var was rdb.Outcome
			if applied, was, err = q.AppliedEarlier(w.runCtx, w.st, w.reg, s.ID(), s.Lost, e); err == nil {
				if !applied {
					unsure = false
				} else {
					out, members = was, nil
					w.cfg.Logger.Info("worker: end applied earlier, its reply was lost", "queue", q.Member, "task_id", t.ID, "pid", t.pid)
				}
			}
		}
		if err == nil && res.replica != nil {
			w.unreplicated.Add(1)
			w.cfg.Logger.Warn("worker: end not acknowledged by enough replicas", "queue", q.Member, "task_id", t.ID, "pid", t.pid, "err", res.replica)
			w.emit(Event{Kind: EventError, Queue: q.Member, TaskID: t.ID, PID: t.pid, WorkerID: s.ID(),
				Err: fmt.Errorf("worqr: end of %s: %w", t.ID, res.replica)})
		}
		if err == nil {
			if out == rdb.OutcomeLost {
				for _, t := range ts {
					w.cfg.Logger.Warn("worker: taking lost", "queue", q.Member, "task_id", t.ID, "pid", t.pid, "worker_id", s.ID())
					w.emit(Event{Kind: EventLost, Queue: q.Member, TaskID: t.ID, PID: t.pid, WorkerID: s.ID(), Err: ErrTaskLost})
				}
				return
			}
			w.emit(Event{Kind: eventOf[out], Queue: q.Member, TaskID: t.ID, PID: t.pid, WorkerID: s.ID(), Err: herr})
			for i, m := range ts[1:] {
				mo := engine.MemberAsked(e)
				if i < len(members) {
					mo = members[i]
				}
				w.emit(Event{Kind: eventOf[mo], Queue: q.Member, TaskID: m.ID, PID: m.pid, WorkerID: s.ID(), Err: herr})
			}
			return
		}
		if w.runCtx.Err() != nil {
			return // hard stop: the keepalive expires and a peer requeues
		}
		unsure = unsure || !rdb.IsReplyError(err)
		w.emit(Event{Kind: EventError, Queue: q.Member, TaskID: t.ID, PID: t.pid, WorkerID: s.ID(), Err: err})
		w.cfg.Logger.Warn("worker: end failed, retrying", "queue", q.Member, "task_id", t.ID, "err", err)
		if !engine.Sleep(w.runCtx, delay) {
			return
		}
		delay = min(delay*2, time.Second)
	}
}
