package worqr

import (
	"context"
	"sync"

	"github.com/worqr/worqr-go/heartbeat"
	"github.com/worqr/worqr-go/internal/engine"
	"github.com/worqr/worqr-go/internal/rdb"
)

// Hand-offs (docs/PROTOCOL.md "Hand-offs"). A take that finds its queue
// empty parks the worker (TakeArgs.Park); an enqueue then records the
// taking for it, as a take would, and announces it on the queue's wake
// channel, and the worker runs it with no take of its own. The message may
// be lost (pub/sub) or come late, so:
//   - a subscription made again (messages were lost meanwhile) and a
//     taking held in Redis and unknown to the worker at two checks in a
//     row (checkHandoffs) both make the queue unsure: its fetch loop
//     releases what the worker holds and does not know;
//   - while a release is on its way, hand-offs wait (hand.pending), and
//     after it one that the release put back (its pid at most the release's
//     Seq, and not among the pids the release was told of) is dropped: the
//     worker never runs a taking it no longer holds.

// handState is a queue's hand-off bookkeeping, guarded by mu. Lock order:
// mu, then launchMu, then heldMu.
type handState struct {
	mu sync.Mutex
	// releasing is the session whose release is on its way (or failed:
	// it may have run): its hand-offs wait in pending until one succeeds.
	releasing string
	pending   []pendingHandoff
	// The last release that succeeded: its session, its Seq and the pids
	// it was told the worker runs.
	relFor   string
	relSeq   int64
	relKnown map[string]bool
	// suspect: the pids held in Redis and unknown at the last check.
	suspect map[string]bool
}

// pendingHandoff is a hand-off waiting for a release to end, and whether a
// cancel of its task came meanwhile.
type pendingHandoff struct {
	h         rdb.Handoff
	cancelled bool
}

// handed receives a hand-off message of q.
func (w *Worker) handed(q *queueRunner, data []byte) {
	s, _ := w.keeper.Current()
	if s == nil || s.Lost() || !rdb.HandoffFor(data, s.ID()) {
		// Another worker's (every process of the queue receives every
		// hand-off: not parsed); or one of an id of ours that is dead or
		// retired: what it held is put back (recovery, or Stop).
		return
	}
	h, ok := rdb.ParseHandoff(data)
	if !ok {
		w.cfg.Logger.Warn("worker: malformed hand-off message ignored", "queue", q.Member)
		return
	}
	q.hand.mu.Lock()
	defer q.hand.mu.Unlock()
	if q.hand.releasing == h.Worker {
		q.hand.pending = append(q.hand.pending, pendingHandoff{h: h})
		return
	}
	w.deliver(s, q, h, false)
}

// deliver launches hand-off h unless a release put it back; cancelled: a
// cancel of its task came while it waited. Called with q.hand.mu held.
func (w *Worker) deliver(s *heartbeat.Session, q *queueRunner, h rdb.Handoff, cancelled bool) {
	st := &q.hand
	if st.relFor == h.Worker && h.Seq <= st.relSeq && !st.relKnown[h.Taken.PID] {
		w.cfg.Logger.Debug("worker: hand-off put back by a release before its message came", "queue", q.Member,
			"task_id", h.Taken.ID, "pid", h.Taken.PID)
		return
	}
	w.launch(s, q, []rdb.Taken{h.Taken}, launchHandoff)
	if cancelled {
		q.askCancel(h.Taken.ID) // its handler starts cancelled
	}
}

// cancelAsked stops the handler of task id of q, or has it start
// cancelled: launched and not started yet, or a hand-off waiting for a
// release.
func (w *Worker) cancelAsked(q *queueRunner, id string) {
	w.cancelRunning(id)
	q.askCancel(id)
	q.hand.mu.Lock()
	for i := range q.hand.pending {
		if q.hand.pending[i].h.Taken.ID == id {
			q.hand.pending[i].cancelled = true
		}
	}
	q.hand.mu.Unlock()
}

// releaseBegin marks a release of session id as on its way: hand-offs to id
// wait until it is over.
func (q *queueRunner) releaseBegin(id string) {
	q.hand.mu.Lock()
	q.hand.releasing = id
	q.hand.mu.Unlock()
}

// releaseEnd ends what releaseBegin began, after a release of session s
// that succeeded (r, known: the pids it was told of) or failed (err: it may
// have run, so hand-offs keep waiting for one that succeeds).
func (w *Worker) releaseEnd(s *heartbeat.Session, q *queueRunner, known []string, r rdb.Released, err error) {
	st := &q.hand
	st.mu.Lock()
	defer st.mu.Unlock()
	if err != nil {
		return
	}
	st.releasing = ""
	st.relFor, st.relSeq = s.ID(), r.Seq
	st.relKnown = make(map[string]bool, len(known))
	for _, pid := range known {
		st.relKnown[pid] = true
	}
	pending := st.pending
	st.pending = nil
	cur, _ := w.keeper.Current()
	for _, p := range pending {
		if cur == s && p.h.Worker == s.ID() && !s.Lost() {
			w.deliver(s, q, p.h, p.cancelled)
		}
	}
}

// checkHandoffs compares what session s holds in q in Redis with what it
// runs: a pid unknown at two checks in a row (a poll interval apart) is a
// hand-off whose message was lost, or a take whose reply was: the queue is
// made unsure, and its fetch loop releases it.
func (w *Worker) checkHandoffs(s *heartbeat.Session, q *queueRunner) {
	ctx, cancel := context.WithTimeout(w.runCtx, engine.CallTimeout)
	defer cancel()
	held, err := w.st.Holdings(ctx, q.QK, s.ID())
	if err != nil {
		return // the next check
	}
	known := map[string]bool{}
	for _, pid := range q.heldPIDs() { // read after the holdings
		known[pid] = true
	}
	st := &q.hand
	st.mu.Lock()
	for _, p := range st.pending {
		known[p.h.Taken.PID] = true
	}
	prev := st.suspect
	st.suspect = nil
	lost := ""
	for _, pid := range held {
		if known[pid] {
			continue
		}
		if st.suspect == nil {
			st.suspect = map[string]bool{}
		}
		st.suspect[pid] = true
		if prev[pid] {
			lost = pid
		}
	}
	st.mu.Unlock()
	if lost != "" {
		w.cfg.Logger.Warn("worker: holding a taking it does not run (a lost hand-off or take reply): releasing",
			"queue", q.Member, "pid", lost, "worker_id", s.ID())
		q.setUnsure(s.ID())
		engine.Poke(q.wake)
	}
}

// parkArgs is TakeArgs.Park for q: its concurrency while it may park and
// hand-offs can reach the worker, else 0.
func (w *Worker) parkArgs(q *queueRunner) (cap int, validMs int64) {
	if !q.parks || !w.listening.Load() {
		return 0, 0
	}
	select {
	case <-w.takeStop: // stopping: parked no more (see Stop)
		return 0, 0
	default:
	}
	// The worker parks again at each poll's take, so an entry need not
	// outlive two polls: a worker that died or froze is skipped (and its
	// entry dropped) that soon, not at the end of its keepalive.
	return q.concurrency, 2 * w.cfg.PollInterval.Milliseconds()
}

// unparkAll removes the worker's session s from the parked workers of every
// queue that parks (best effort: a parked entry outlives the worker's
// deadline by nothing, and a hand-off no message brought is released).
func (w *Worker) unparkAll(ctx context.Context, s *heartbeat.Session) {
	for _, q := range w.queues {
		if !q.parks {
			continue
		}
		if err := w.st.Unpark(ctx, q.QK, s.ID()); err != nil {
			w.cfg.Logger.Debug("worker: unpark failed", "queue", q.Member, "err", err)
		}
	}
}
