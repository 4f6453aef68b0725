package remote

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/worqr/worqr-go/heartbeat"
	"github.com/worqr/worqr-go/internal/engine"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/worqr"
)

// Session is one remote worker: a registered worker id whose
// keepalive its remote renews with Beat. Every call is safe for concurrent
// use. Calls about a taking are idempotent by pid: a call repeated after its
// reply was lost answers as the first did.
type Session struct {
	r     *Server
	lease *heartbeat.Lease

	queues map[string]*remoteQueue // by name, fixed at Open
	// qualify: the queues span more than one tag, whose pids count up
	// apart (each stand-alone queue is a tag): the pid handed to the
	// remote is then "<pid>@<tag>" (see token), else the pid itself.
	qualify bool

	// actMu keeps Close apart from takes: a take holds it (read) around
	// its script call, Close (write) after retiring the lease, so that no
	// take lands under the id after Close requeued its holdings.
	actMu sync.RWMutex
	// takeMu makes the session's takes one at a time, so that the release
	// after a lost take reply never puts back the takings of a take that
	// ran meanwhile (its pids are not yet among the known ones).
	takeMu sync.Mutex

	mu      sync.Mutex
	takings map[string]*remoteTaking // by token (see token), running or recently ended
	takes   map[string]*takeReply    // by request id
	beatAt  time.Time                // when the previous Beat arrived
	// unsure says, per queue, whether the session may hold takings the
	// remote does not know of (a take whose reply was lost, takings not
	// handed out, a switch of server): they are released before the
	// queue's next take, or after the next good beat (checkHoldings).
	// Fixed at Open, one per queue of the session.
	unsure map[*remoteQueue]*engine.Unsure

	retiredAt time.Time      // guarded by Server.mu
	refd      []*remoteQueue // the queue references it holds while open (Server.queue)
}

type remoteTaking struct {
	q     *remoteQueue
	taken rdb.Taken
	at    time.Time // when taken (local clock)
	// notRun: never handed to the remote; the session itself ends it as
	// this says (see endNotRun): past its deadline, or cancelled where it
	// waited (NotRun); a join's stage whose run is to fan out its
	// branches first (FanEnding); a branch whose run ended while it
	// waited (buried with the reason).
	notRun func() rdb.Ending
	// stuck: reported stuck (see newlyStuck). Guarded by Session.mu.
	stuck bool

	mu   sync.Mutex  // one end at a time
	done atomic.Bool // ended is set (read without mu)
	// missing: a release found it not held in Redis (a take a failed
	// primary acknowledged and never passed on): every beat reports it
	// in Cancel, as a Worker cancels its handler; its end answers lost.
	missing atomic.Bool
	ended   bool
	endedAt time.Time
	how     string // the call that ended it
	// unsure: an earlier end call failed with its reply lost (it may have
	// been applied); a later "lost" answer is then checked (see complete).
	unsure   bool
	tried    string     // the call of that attempt
	triedEnd rdb.Ending // and the end it sent
	outcome  worqr.EventKind
	err      error
}

type takeReply struct {
	at      time.Time
	queue   string
	takings []Taking
}

// ID is the session's worker id.
func (s *Session) ID() string { return s.lease.ID() }

// TTL is the session's keepalive lifetime; beat every TTL/3.
func (s *Session) TTL() time.Duration { return s.lease.TTL() }

func (s *Session) heldCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, t := range s.takings {
		if !t.isEnded() {
			n++
		}
	}
	return n
}

func (t *remoteTaking) isEnded() bool { return t.done.Load() }

// live returns ErrSessionLost when the session may no longer act.
func (s *Session) live() error {
	if !s.lease.Fresh() {
		s.r.retire(s)
		return fmt.Errorf("%w: %s", ErrSessionLost, s.ID())
	}
	return nil
}

// Taking is one task handed to a remote session. PID is its fencing token:
// every call about the taking names it.
type Taking struct {
	// PID names the taking in the session: the pid Redis gave it, or,
	// for a session whose queues span several tags (pids count up per
	// tag: two stand-alone queues hand out the same ones),
	// "<pid>@<tag>".
	PID    string
	TaskID string
	Queue  string
	// Payload is the task's payload (stand-alone and child queues); for a
	// task of an ordered queue, the last of its Payloads (as worqr.Task.Payload).
	Payload []byte
	// Key and Payloads: a task of an ordered queue (EnqueueOpts.Key), as
	// worqr.Task.Key and worqr.Task.Payloads.
	Key      string
	Payloads []worqr.Payload
	// Type is the task's type, for a task enqueued with one
	// (EnqueueOpts.Type): worqr.Payload is then the payload as it was given, as
	// is each of Payloads of that type (one of another type, or of none,
	// merged into the same task, is left as it was stored).
	Type string
	// TraceParent and TraceState are the W3C trace context of a task
	// enqueued with tracing on (contrib/otel's Enqueue): from its Meta
	// (keys traceparent and tracestate), or from the envelope an earlier
	// version put around the payload (worqr.Payload is then the payload as it
	// was given).
	TraceParent, TraceState string
	// Meta is the task's metadata (EnqueueOpts.Meta, or a flow child's
	// worqr.ChildSpec.Meta), as worqr.Task.Meta; nil when none.
	Meta map[string]string
	// Attempt is 1 on the first run, plus the failed attempts before.
	Attempt     int
	MaxAttempts int
	Crashes     int
	// Timeout is the task's time limit (0: none). The remote should give up
	// and Fail the taking when it passes.
	Timeout time.Duration
	// State and Children are a stage taking's run: its fields, and the
	// children of earlier fan-outs with their outcomes.
	State    map[string]string
	Children []worqr.ChildResult
	// Parent is a child taking's run id.
	Parent string
}

// TakeRequest asks for tasks of one queue.
type TakeRequest struct {
	// Queue is one of the session's queues.
	Queue string
	// Max is how many tasks to take at most: 1 to MaxTake.
	Max int
	// Wait is how long to wait when the queue is empty: 0 to MaxWait.
	Wait time.Duration
	// RequestID, when set, makes the take idempotent: a take repeated with
	// the same id (after its reply was lost) returns the same takings. An
	// id names one take: repeated for another queue, it is refused.
	// Same rules as queue names.
	RequestID string
	// MaxBytes, when positive, bounds the takings handed out by their
	// size (payloads, run state and children, about as a reply carries
	// them): the first is always handed; those past the bound are put
	// back at the front of the queue at once, in order, nothing counted.
	// A gateway sets it to the largest message its clients read.
	MaxBytes int
	// Size, when set, is how many bytes a taking weighs against MaxBytes:
	// a gateway gives the size of its encoding in the reply (base64 and
	// JSON make a payload a third larger). Default: its bytes and strings,
	// and a little for the framing of each. It is called with the
	// session's lock held: it must not call the session.
	Size func(k *Taking) int
}

// size is about how many bytes k takes in a reply: its bytes and strings,
// and a little for the framing of each.
func (k *Taking) size() int {
	n := 64 + len(k.PID) + len(k.TaskID) + len(k.Queue) + len(k.Payload) + len(k.Key) + len(k.Parent) +
		len(k.Type) + len(k.TraceParent) + len(k.TraceState)
	for _, p := range k.Payloads {
		n += 16 + len(p.Data)
	}
	for f, v := range k.Meta {
		n += 8 + len(f) + len(v)
	}
	for f, v := range k.State {
		n += 8 + len(f) + len(v)
	}
	for _, c := range k.Children {
		n += 16 + len(c.ID) + len(c.Queue) + len(c.Status) + len(c.Result) + len(c.Err)
	}
	return n
}

// MaxTake is the most tasks one Take returns.
const MaxTake = rdb.MaxTake

// Take takes up to req.Max tasks of req.Queue, waiting up to req.Wait for
// work when none waits. It returns no takings (and no error) when the wait
// ran out (while the Server drains, it waits it out: nothing more comes), or when the session's deadline
// passed on Redis's clock before a beat moved it on (beat, then take).
func (s *Session) Take(ctx context.Context, req TakeRequest) ([]Taking, error) {
	q := s.queues[req.Queue]
	switch {
	case q == nil:
		return nil, invalid("queue", "%q is not one of the session's queues (given at open)", req.Queue)
	case req.Max < 1 || req.Max > MaxTake:
		return nil, invalid("max", "(%d) must be between 1 and %d", req.Max, MaxTake)
	case req.Wait < 0 || req.Wait > s.r.cfg.MaxWait:
		return nil, invalid("wait", "(%s) must be between 0 and %s", req.Wait, s.r.cfg.MaxWait)
	case req.MaxBytes < 0:
		return nil, invalid("max_bytes", "(%d) must not be negative", req.MaxBytes)
	}
	if req.RequestID != "" {
		if err := checkName("request_id", req.RequestID); err != nil {
			return nil, err
		}
		s.mu.Lock()
		prev := s.takes[req.RequestID]
		s.mu.Unlock()
		if prev != nil && prev.queue != req.Queue {
			return nil, invalid("request_id", "(%s) named a take of queue %s: a take of another queue needs an id of its own", req.RequestID, prev.queue)
		}
		if prev != nil {
			return prev.takings, nil
		}
	}
	deadline := time.Now().Add(req.Wait)
	for {
		if err := s.live(); err != nil {
			return nil, err
		}
		if s.r.draining.Load() {
			// Nothing more is handed out: the take waits out its wait
			// (or the session's end, when the Server has stopped), so that
			// a remote that takes again at once does not spin.
			t := time.NewTimer(time.Until(deadline))
			select {
			case <-ctx.Done():
			case <-s.lease.Context().Done():
			case <-t.C:
			}
			t.Stop()
			return nil, nil
		}
		woken := q.woken()
		if held, _ := q.Rate.Held(); !held && !q.Paused.Load() {
			out, skipped, err := s.takeOnce(ctx, q, req)
			if err != nil || len(out) > 0 {
				return out, err
			}
			if skipped > 0 {
				continue // it took only tasks not to hand: more may wait
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		wait := min(left, s.r.cfg.PollInterval)
		if held, until := q.Rate.Held(); held {
			wait = min(wait, time.Until(until))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-s.lease.Context().Done():
		case <-woken:
		case <-t.C:
		}
		t.Stop()
	}
}

// releaseUnknown puts back what the session holds in q besides known (the
// takings the remote knows of): those of a take whose reply was lost, or
// whose takings could not be handed out. q stays unsure until it succeeds,
// so that the next take tries again. The caller holds takeMu: no other
// take's takings are in flight.
func (s *Session) releaseUnknown(ctx context.Context, q *remoteQueue, known []string) error {
	s.unsure[q].Mark(s.ID())
	r, err := s.r.st.ReleaseCheck(ctx, q.QK, s.ID(), known)
	emitCancelled(s.r.emit, q.Member, r.Cancelled)
	if err != nil {
		return err
	}
	s.unsure[q].Mark("")
	s.mu.Lock()
	for _, pid := range r.Missing {
		// Known and not held: lost in a failover (or ended meanwhile).
		if t := s.takings[s.token(q, pid)]; t != nil && t.q == q && !t.isEnded() {
			t.missing.Store(true)
			s.r.cfg.Logger.Warn("remote: taking lost in a failover (the new primary does not hold it): reported as cancelled",
				"queue", q.Member, "task_id", t.taken.ID, "pid", pid, "worker_id", s.ID())
		}
	}
	s.mu.Unlock()
	return nil
}

// checkHoldings runs, after a good beat, the releases due: every queue
// after a switch of server (seen before that beat, which reached the new
// one), and a queue whose take reply was lost. Each puts back what the
// session holds there and does not know, and finds the known takings the
// server no longer holds (a take the old primary acknowledged and never
// passed on): a Worker's fetch loop does both at once, and cancels their
// handlers; a remote that takes only when its work is done would
// otherwise run such a taking to its end while the new primary hands its
// task to another worker. A take under way does them itself.
func (s *Session) checkHoldings(ctx context.Context, sw uint64) error {
	if !s.takeMu.TryLock() {
		return nil
	}
	defer s.takeMu.Unlock()
	known := map[*remoteQueue][]string{}
	for q, u := range s.unsure {
		u.Switched(sw, s.ID())
		if u.Owner() != "" {
			known[q] = []string{}
		}
	}
	s.mu.Lock()
	for _, t := range s.takings {
		if _, ok := known[t.q]; ok && !t.isEnded() {
			known[t.q] = append(known[t.q], t.taken.PID)
		}
	}
	s.mu.Unlock()
	if len(known) == 0 {
		return nil
	}
	s.actMu.RLock()
	defer s.actMu.RUnlock()
	if s.lease.Lost() {
		return nil
	}
	for q, pids := range known {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		err := s.releaseUnknown(cctx, q, pids)
		cancel()
		if err != nil {
			return fmt.Errorf("release of %s: %w", q.Member, err)
		}
	}
	return nil
}

// takeOnce takes once from q for req. skipped counts the tasks taken and
// not handed to the remote (buried by the take, or past their deadline and
// ended as expired): the queue may hold more.
func (s *Session) takeOnce(ctx context.Context, q *remoteQueue, req TakeRequest) (out []Taking, skipped int, err error) {
	s.takeMu.Lock()
	defer s.takeMu.Unlock()
	s.mu.Lock()
	if prev := s.takes[req.RequestID]; req.RequestID != "" && prev != nil {
		s.mu.Unlock() // the same request ran meanwhile
		if prev.queue != req.Queue {
			return nil, 0, invalid("request_id", "(%s) named a take of queue %s: a take of another queue needs an id of its own", req.RequestID, prev.queue)
		}
		return prev.takings, 0, nil
	}
	sw := s.r.st.Switches()
	for _, u := range s.unsure {
		u.Switched(sw, s.ID())
	}
	held, known := 0, []string{}
	for _, t := range s.takings {
		if !t.isEnded() {
			held++
			if t.q == q {
				known = append(known, t.taken.PID)
			}
		}
	}
	s.mu.Unlock()
	unsure := s.unsure[q].Owner() != ""
	free := min(req.Max, s.r.cfg.MaxHeld-held)
	if free <= 0 {
		return nil, 0, fmt.Errorf("%w: %d (MaxHeld %d): end some first", ErrTooManyHeld, held, s.r.cfg.MaxHeld)
	}
	s.actMu.RLock()
	defer s.actMu.RUnlock()
	if s.lease.Lost() {
		return nil, 0, fmt.Errorf("%w: %s", ErrSessionLost, s.ID())
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if unsure {
		// A take whose reply was lost may have left takings under this id
		// that the remote never saw: put them back first.
		if err := s.releaseUnknown(cctx, q, known); err != nil {
			return nil, 0, fmt.Errorf("worqr: take from %s: %w", q.Member, err)
		}
	}
	taken, wait, err := s.r.st.TakeWait(cctx, q.QK, q.TakeArgs(s.ID(), s.lease.Until(), free))
	if wait > 0 {
		// The rate limit allows the next start in wait ms: until then,
		// the session's takes wait rather than ask.
		q.Rate.Hold(wait)
	}
	if errors.Is(err, rdb.ErrExpired) {
		return nil, 0, nil
	}
	if err != nil {
		if !rdb.IsReplyError(err) {
			s.unsure[q].Mark(s.ID())
		}
		return nil, 0, fmt.Errorf("worqr: take from %s: %w", q.Member, err)
	}
	// The ends the session makes itself, by taking (see remoteTaking.notRun).
	self := make([]func() rdb.Ending, len(taken))
	for i, t := range taken {
		if t.Expired {
			self[i] = func() rdb.Ending { return q.NotRun(s.ID(), t) }
		}
		if t.RunUnread > 0 && !t.Expired {
			// A run too big to come with the take (it keeps every child
			// it fanned out): read in steps, each run in a time of its own
			// (many wide runs read in the take's time could miss it on
			// every try).
			rctx, rcancel := context.WithTimeout(ctx, callTimeout)
			taken[i].Run, err = s.r.st.ReadRun(rctx, q.QK, t.ID)
			rcancel()
			if err != nil {
				// Not handed out: put back at once (the remote may never
				// take from q again), or at the next take.
				gctx, gcancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
				_ = s.releaseUnknown(gctx, q, known)
				gcancel()
				return nil, 0, fmt.Errorf("worqr: take from %s: reading run %s: %w", q.Member, t.ID, err)
			}
		}
	}
	// A join's branches: their run's state comes with them, read by its
	// id (as a Worker reads it for a branch's handler); a join's stage not
	// joined yet fans them out, without the remote.
	state := make([]*rdb.RunRecord, len(taken))
	for i, t := range taken {
		switch {
		case t.PID == "" || t.Expired:
		case q.Branching(t):
			self[i] = func() rdb.Ending { return q.FanEnding(s.ID(), t, s.r.cfg.Logger) }
		case q.IsBranch():
			rctx, rcancel := context.WithTimeout(ctx, callTimeout)
			run, err := engine.ReadBranchRun(rctx, s.r.st, &q.Queue, t)
			rcancel()
			if errors.Is(err, engine.ErrRunNotRunning) {
				self[i] = func() rdb.Ending {
					return s.decide(&remoteTaking{q: q, taken: t}, engine.Outcome{Verdict: engine.Bury, Err: err})
				}
				break
			}
			if err != nil {
				gctx, gcancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
				_ = s.releaseUnknown(gctx, q, known)
				gcancel()
				return nil, 0, fmt.Errorf("worqr: take from %s: %w", q.Member, err)
			}
			state[i] = run
		}
	}
	now := time.Now()
	out = make([]Taking, 0, len(taken))
	s.mu.Lock()
	for i, t := range taken {
		if t.PID == "" {
			skipped++
			s.r.emit(worqr.Event{Kind: worqr.EventDead, Queue: q.Member, TaskID: t.ID, WorkerID: s.ID(), Err: errors.New(t.Reason)})
			emitTakenOut(s.r.emit, q.QK.Ref.Tag, t.Stopped) // a child that failed its run: its waiting siblings
			continue
		}
		kept := t
		kept.Payload, kept.Run = nil, nil // handed over: the session needs only the bookkeeping
		s.takings[s.token(q, t.PID)] = &remoteTaking{q: q, taken: kept, at: now, notRun: self[i]}
		if self[i] != nil {
			// Past its deadline when taken (Redis time), or cancelled
			// while it waited, a join's fan-out, a branch of an ended
			// run: never handed to the remote, ended below as a Worker
			// ends it. Held meanwhile: if that end fails, the next beat
			// or take tries it again (the remote never saw it: nothing
			// else would).
			skipped++
			continue
		}
		k := s.taking(q, t)
		if run := state[i]; run != nil {
			k.State, k.Children = run.State, childResults(run.Children)
		}
		out = append(out, k)
	}
	var over []Taking
	if req.MaxBytes > 0 {
		size, weigh := 0, (*Taking).size
		if req.Size != nil {
			weigh = req.Size
		}
		for i := range out {
			if size += weigh(&out[i]); i > 0 && size > req.MaxBytes {
				over = out[i:]
				out = out[:i:i]
				break
			}
		}
		for _, k := range over {
			delete(s.takings, k.PID) // never handed: put back below
		}
	}
	for _, k := range out {
		s.r.emit(worqr.Event{Kind: worqr.EventStarted, Queue: q.Member, TaskID: k.TaskID, PID: s.takings[k.PID].taken.PID, WorkerID: s.ID()})
	}
	if len(over) > 0 {
		// Everything the session holds in q but these is kept.
		known = known[:0]
		for _, t := range s.takings {
			if t.q == q && !t.isEnded() {
				known = append(known, t.taken.PID)
			}
		}
	}
	if req.RequestID != "" && len(out) > 0 {
		s.takes[req.RequestID] = &takeReply{at: now, queue: req.Queue, takings: out}
	}
	s.mu.Unlock()
	if len(over) > 0 {
		// Put back at once; if that fails, q stays unsure and the next
		// beat or take puts them back (the session no longer knows them).
		gctx, gcancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
		if err := s.releaseUnknown(gctx, q, known); err != nil {
			s.r.cfg.Logger.Warn("remote: takings past the take's MaxBytes not put back yet", "queue", q.Member, "count", len(over), "err", err)
		}
		gcancel()
	}
	if skipped > 0 {
		s.endNotRun(ctx)
	}
	return out, skipped, nil
}

// endNotRun ends the takings the session's takes found not to run (past
// their deadline, cancelled where they waited, a join's fan-out, a branch
// of an ended run: remoteTaking.notRun) and has not ended yet:
// those of the take just made, and any whose end failed before (a Redis
// error reply, a caller that hung up while it was retried). The remote
// never saw them, so no call of its ends them, and every release counts
// them as known: without this they stayed held for the session's life.
func (s *Session) endNotRun(ctx context.Context) {
	var pids []string
	s.mu.Lock()
	for pid, t := range s.takings {
		if t.notRun != nil && !t.isEnded() {
			pids = append(pids, pid)
		}
	}
	s.mu.Unlock()
	for _, pid := range pids {
		_, err := s.end(ctx, pid, "expire", func(t *remoteTaking) (rdb.Ending, error) {
			return t.notRun(), nil
		})
		if err != nil && !errors.Is(err, ErrNotOwner) {
			s.r.cfg.Logger.Warn("remote: a taking the session ends itself (past its deadline, cancelled where it waited, a join's fan-out) not ended yet (tried again at the next beat or take)", "pid", pid, "err", err)
		}
	}
}

// token is the name the remote knows taking pid of q by.
func (s *Session) token(q *remoteQueue, pid string) string {
	if s.qualify {
		return pid + "@" + q.QK.Ref.Tag
	}
	return pid
}

func (s *Session) taking(q *remoteQueue, t rdb.Taken) Taking {
	k := Taking{PID: s.token(q, t.PID), TaskID: t.ID, Queue: q.Member, Payload: t.Payload, Attempt: t.Attempt,
		MaxAttempts: q.cfg.MaxAttempts, Crashes: t.Crashes, Timeout: q.Timeout(t), Parent: t.Parent}
	if rdb.IsEnvelope(t.Payload) {
		k.Payload, k.Key, k.Payloads = unwrap(t.Payload)
	}
	remotePayload(&k)
	if t.Meta != "" {
		k.Meta = engine.DecodeMeta(t.Meta)
		if k.TraceParent == "" && k.Meta["traceparent"] != "" {
			k.TraceParent, k.TraceState = k.Meta["traceparent"], k.Meta["tracestate"]
		}
	}
	if t.MaxAttempts > 0 {
		k.MaxAttempts = t.MaxAttempts
	}
	if q.Kind == rdb.KindStage {
		k.State = map[string]string{}
		if run := rdb.DecodeRun(t.ID, t.Run); run != nil {
			k.State = run.State
			k.Children = childResults(run.Children)
		}
	}
	return k
}

// BeatReply is what a beat tells the remote.
type BeatReply struct {
	// Lost lists pids the session gave back because the remote did not
	// list them as running: drop them if they show up.
	Lost []string
	// Cancel lists the running takings whose task's cancel was asked
	// (every beat, until they end: a lost reply loses nothing): stop them
	// and end them; the end records the task as cancelled, whichever end
	// is called.
	Cancel []string
	// Drain: the Server is stopping; finish what runs and take no more.
	Drain bool
}

// Beat renews the session's keepalive. running, when not nil, lists the pids
// the remote is running: a taking of the session taken before the previous
// beat and not listed is given back (the remote never got it, say a take
// whose reply was lost) and reported in Lost. A lost session answers
// ErrSessionLost.
func (s *Session) Beat(ctx context.Context, running []string) (BeatReply, error) {
	sw := s.r.st.Switches() // read before the beat: a switch before it is confirmed by it
	if err := s.lease.Beat(ctx); err != nil {
		if errors.Is(err, heartbeat.ErrLost) || s.lease.Lost() {
			s.r.retire(s)
			return BeatReply{}, fmt.Errorf("%w: %s", ErrSessionLost, s.ID())
		}
		return BeatReply{}, fmt.Errorf("worqr: beat: %w", err)
	}
	s.endNotRun(ctx) // before the orphans: such a taking ends as it should, not given back
	now := time.Now()
	s.mu.Lock()
	prev := s.beatAt
	s.beatAt = now
	var orphans []string
	if running != nil {
		listed := make(map[string]bool, len(running))
		for _, pid := range running {
			listed[pid] = true
		}
		for pid, t := range s.takings {
			if !listed[pid] && t.at.Before(prev) && !t.isEnded() {
				orphans = append(orphans, pid)
			}
		}
	}
	s.mu.Unlock()
	var gaveBack []string
	for _, pid := range orphans {
		_, err := s.GiveBack(ctx, pid)
		switch {
		case err == nil:
			gaveBack = append(gaveBack, pid)
		case !errors.Is(err, ErrNotOwner):
			return BeatReply{}, err
		}
	}
	if err := s.checkHoldings(ctx, sw); err != nil {
		return BeatReply{}, fmt.Errorf("worqr: beat: %w", err)
	}
	cancels, err := s.cancelsAsked(ctx)
	if err != nil {
		return BeatReply{}, fmt.Errorf("worqr: beat: %w", err)
	}
	return BeatReply{Lost: gaveBack, Cancel: cancels, Drain: s.r.draining.Load()}, nil
}

// cancelsAsked returns the pids of running takings whose cancel was asked
// (one pipelined read per queue holding takings).
func (s *Session) cancelsAsked(ctx context.Context) ([]string, error) {
	byQueue := map[*remoteQueue][]*remoteTaking{}
	pids := map[*remoteTaking]string{}
	s.mu.Lock()
	for pid, t := range s.takings {
		if !t.isEnded() {
			byQueue[t.q] = append(byQueue[t.q], t)
			pids[t] = pid
		}
	}
	s.mu.Unlock()
	var out []string
	for q, ts := range byQueue {
		kept := ts[:0]
		for _, t := range ts {
			if t.missing.Load() {
				out = append(out, pids[t])
			} else {
				kept = append(kept, t)
			}
		}
		ts = kept
		if len(ts) == 0 {
			continue
		}
		ids := make([]string, len(ts))
		for i, t := range ts {
			ids[i] = t.taken.ID
		}
		asked, err := s.r.st.CancelAsked(ctx, q.QK, ids)
		if err != nil {
			return nil, err
		}
		for i, t := range ts {
			if asked[i] {
				out = append(out, pids[t])
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// newlyStuck marks the takings the remote has run for their queue's
// StuckAfter at now (from when they were taken) and were not reported
// yet, and returns their EventStuck.
func (s *Session) newlyStuck(now time.Time) []worqr.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []worqr.Event
	for _, t := range s.takings {
		if t.notRun != nil || t.stuck || t.isEnded() || !t.q.Stuck(t.at, now) {
			continue
		}
		t.stuck = true
		out = append(out, worqr.Event{Kind: worqr.EventStuck, Queue: t.q.Member, TaskID: t.taken.ID, PID: t.taken.PID,
			WorkerID: s.ID(), Running: now.Sub(t.at)})
	}
	return out
}

// forgetEnded forgets takings ended before cutoff, and old take replies.
func (s *Session) forgetEnded(cutoff time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for pid, t := range s.takings {
		t.mu.Lock()
		old := t.ended && t.endedAt.Before(cutoff)
		t.mu.Unlock()
		if old {
			delete(s.takings, pid)
		}
	}
	for id, rep := range s.takes {
		if rep.at.Before(cutoff) {
			delete(s.takes, id)
		}
	}
}

// Finish ends a taking whose work is done, recording result (a stage's
// Finish forwards its run with no new fields). It returns the outcome:
// worqr.EventDone (EventForwarded for a stage), or worqr.EventCancelled when a cancel
// was asked meanwhile.
func (s *Session) Finish(ctx context.Context, pid string, result []byte) (worqr.EventKind, error) {
	return s.end(ctx, pid, "finish", func(t *remoteTaking) (rdb.Ending, error) {
		if len(result) > s.r.cfg.MaxPayloadBytes {
			return rdb.Ending{}, invalid("result", "is %d bytes, over MaxPayloadBytes (%d)", len(result), s.r.cfg.MaxPayloadBytes)
		}
		return s.decide(t, engine.Outcome{Verdict: engine.Done, Result: result}), nil
	})
}

// Fail ends a failed attempt: it runs again after retryIn (0: the queue's
// backoff), or goes to the dead set when its attempts are used up. It
// returns EventRetry or worqr.EventDead (or worqr.EventCancelled).
func (s *Session) Fail(ctx context.Context, pid, reason string, retryIn time.Duration) (worqr.EventKind, error) {
	return s.end(ctx, pid, "fail", func(t *remoteTaking) (rdb.Ending, error) {
		if retryIn < 0 {
			return rdb.Ending{}, invalid("retry_in", "(%s) must not be negative", retryIn)
		}
		o := engine.Outcome{Verdict: engine.Fail, Err: errors.New(reason)}
		if retryIn > 0 {
			o.Verdict, o.Delay = engine.Retry, retryIn
		}
		return s.decide(t, o), nil
	})
}

// Bury sends the taking's task to the dead set at once, with reason.
func (s *Session) Bury(ctx context.Context, pid, reason string) (worqr.EventKind, error) {
	return s.end(ctx, pid, "bury", func(t *remoteTaking) (rdb.Ending, error) {
		return s.decide(t, engine.Outcome{Verdict: engine.Bury, Err: errors.New(reason)}), nil
	})
}

// GiveBack puts the taking's task back at the front of its queue, counting
// no attempt. It returns EventGivenBack (or worqr.EventCancelled).
func (s *Session) GiveBack(ctx context.Context, pid string) (worqr.EventKind, error) {
	return s.end(ctx, pid, "give_back", func(t *remoteTaking) (rdb.Ending, error) {
		return s.decide(t, engine.Outcome{Verdict: engine.GiveBack}), nil
	})
}

// Forward ends a stage taking: fields are merged into the run's state and
// the run moves to the next stage (or ends, after the last).
func (s *Session) Forward(ctx context.Context, pid string, fields map[string]string) (worqr.EventKind, error) {
	return s.stageEnd(ctx, pid, fields, nil, 0, false, "")
}

// ForwardAfter is Forward with a durable timer or a signal, as a Go
// stage's StageResult.Sleep, Again and Await: the run sleeps in Redis for
// sleep, or until signal await comes (at most sleep; 0: without bound),
// before its next stage starts, or before this stage runs again when
// again.
func (s *Session) ForwardAfter(ctx context.Context, pid string, fields map[string]string, sleep time.Duration, again bool, await string) (worqr.EventKind, error) {
	return s.stageEnd(ctx, pid, fields, nil, sleep, again, await)
}

// FanOut ends a stage taking by merging fields into the run's state and
// fanning out children into the stage's declared child queues (named
// without the flow); the run moves on when the last child ends. With no
// children it is Forward.
func (s *Session) FanOut(ctx context.Context, pid string, fields map[string]string, children []worqr.ChildSpec) (worqr.EventKind, error) {
	return s.stageEnd(ctx, pid, fields, children, 0, false, "")
}

// stageEnd is every done end of a stage taking: Forward, ForwardAfter and
// FanOut.
func (s *Session) stageEnd(ctx context.Context, pid string, fields map[string]string, children []worqr.ChildSpec, sleep time.Duration, again bool, await string) (worqr.EventKind, error) {
	how := "forward"
	if len(children) > 0 {
		how = "fan_out"
	}
	return s.end(ctx, pid, how, func(t *remoteTaking) (rdb.Ending, error) {
		if t.q.IsBranch() {
			return s.branchEnd(t, fields, children, sleep, again, await)
		}
		if t.q.Kind != rdb.KindStage {
			return rdb.Ending{}, invalid("pid", "%s is a taking of %s, not of a flow stage: use finish", pid, t.q.Member)
		}
		e := s.decide(t, engine.Outcome{Verdict: engine.Done})
		cs := make([]engine.Child, len(children))
		for i, c := range children {
			cs[i] = engine.Child{Queue: c.Queue, Payload: c.Payload, Meta: c.Meta}
		}
		names := engine.FanOutNames{Fields: "fields", Children: "children", Lower: true, Sleep: "sleep", Again: "again", Await: "await"}
		if err := t.q.FanOut(&e, fields, cs, s.r.cfg.MaxPayloadBytes, names); err != nil {
			return rdb.Ending{}, asInvalid(err)
		}
		if err := t.q.Resume(&e, sleep, again, await, names); err != nil {
			return rdb.Ending{}, asInvalid(err)
		}
		return e, nil
	})
}

// branchEnd is the done end of a taking of a join's branch
// (worqr.Stage.Branches): its fields are merged into the run's state; a
// branch sets fields only.
func (s *Session) branchEnd(t *remoteTaking, fields map[string]string, children []worqr.ChildSpec, sleep time.Duration, again bool, await string) (rdb.Ending, error) {
	rule := "does not apply to a branch of a join (%s): its end merges fields only"
	switch {
	case len(children) > 0:
		return rdb.Ending{}, invalid("children", rule, t.q.Member)
	case sleep != 0:
		return rdb.Ending{}, invalid("sleep", rule, t.q.Member)
	case again:
		return rdb.Ending{}, invalid("again", rule, t.q.Member)
	case await != "":
		return rdb.Ending{}, invalid("await", rule, t.q.Member)
	}
	e := s.decide(t, engine.Outcome{Verdict: engine.Done})
	return e, asInvalid(t.q.BranchFields(&e, "fields", fields, s.r.cfg.MaxPayloadBytes))
}

// decide is the queue's outcome policy for taking t of the session: o is
// what the remote reported.
func (s *Session) decide(t *remoteTaking, o engine.Outcome) rdb.Ending {
	return t.q.Decide(s.ID(), t.taken, o, s.r.cfg.Logger)
}

// end is every end of a taking: the pid's answer if it ended already (the
// same call answers the same; another call is refused), else the session's
// liveness, then the queue's one batched end, retried on connection errors
// while the session lives (as Worker.complete does).
func (s *Session) end(ctx context.Context, pid, how string, build func(*remoteTaking) (rdb.Ending, error)) (worqr.EventKind, error) {
	s.mu.Lock()
	t := s.takings[pid]
	s.mu.Unlock()
	if t == nil {
		if err := s.live(); err != nil {
			return "", err
		}
		return "", fmt.Errorf("%w: %s is not a taking of session %s", ErrNotOwner, pid, s.ID())
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		if t.how != how {
			return "", fmt.Errorf("%w: %s already ended by %s", ErrNotOwner, pid, t.how)
		}
		return t.outcome, t.err
	}
	if err := s.live(); err != nil {
		return "", err
	}
	e, err := build(t)
	if err != nil {
		return "", err
	}
	out, err := s.complete(ctx, t, how, e)
	if err != nil && !errors.Is(err, ErrNotOwner) {
		return "", err // not recorded: the call may be repeated
	}
	t.ended, t.endedAt, t.how, t.outcome, t.err = true, time.Now(), how, out, err
	t.done.Store(true)
	if errors.Is(err, ErrNotOwner) {
		s.r.emit(worqr.Event{Kind: worqr.EventLost, Queue: t.q.Member, TaskID: t.taken.ID, PID: t.taken.PID, WorkerID: s.ID(), Err: worqr.ErrTaskLost})
	} else {
		ev := worqr.Event{Kind: out, Queue: t.q.Member, TaskID: t.taken.ID, PID: t.taken.PID, WorkerID: s.ID()}
		if e.Err != "" {
			ev.Err = errors.New(e.Err) // the reason of a Fail or a Bury, as a Worker's handler error
		}
		s.r.emit(ev)
	}
	return out, err
}

// complete runs the end e of t through its queue's group, retrying
// connection errors while the caller waits. A "lost" answer after an attempt
// whose reply was lost (in this call or an earlier one) is checked: while
// the session's keepalive still exists nobody else moves its takings (the
// reaper only requeues dead workers), so the taking vanished because that
// attempt was applied, and the outcome asked for is the answer. Each
// attempt runs detached from the caller (at most 5 s), so a remote that
// hangs up does not leave an end half known. Called with t.mu held.
func (s *Session) complete(ctx context.Context, t *remoteTaking, how string, e rdb.Ending) (worqr.EventKind, error) {
	delay := 20 * time.Millisecond
	for {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
		res, err := t.q.ends.Call(cctx, e)
		out := res.Outcome
		if err == nil && out == rdb.OutcomeLost && t.unsure {
			var applied bool
			var was rdb.Outcome
			applied, was, err = t.q.AppliedEarlier(context.WithoutCancel(ctx), s.r.st, s.r.reg, s.ID(), s.lease.Lost, t.triedEnd)
			if err == nil && applied {
				cancel()
				if t.tried != how { // the earlier call was applied, not this one
					return "", fmt.Errorf("%w: %s already ended by %s", ErrNotOwner, e.PID, t.tried)
				}
				return eventOf(was), nil
			}
		}
		cancel()
		if err == nil {
			if out == rdb.OutcomeLost {
				return "", fmt.Errorf("%w: %s (the session's keepalive was lost and the task requeued)", ErrNotOwner, e.PID)
			}
			return eventOf(out), nil
		}
		if rdb.IsReplyError(err) {
			return "", fmt.Errorf("worqr: end %s: %w", e.PID, err)
		}
		t.unsure, t.tried, t.triedEnd = true, how, e
		if s.lease.Lost() || !engine.Sleep(ctx, delay) {
			return "", fmt.Errorf("worqr: end %s: %w", e.PID, err)
		}
		delay = min(delay*2, time.Second)
	}
}

// Close ends the session: every taking it holds goes back to the front of
// its queue (no attempt counted) and the worker id is deregistered. The
// remote must not act on its takings after.
func (s *Session) Close(ctx context.Context) error {
	if s.lease.Lost() {
		s.r.retire(s)
		return fmt.Errorf("%w: %s", ErrSessionLost, s.ID())
	}
	s.lease.Retire(ErrSessionLost)
	s.r.retire(s)
	s.actMu.Lock() // takes on their way land before the requeue; later ones see the lease retired
	defer s.actMu.Unlock()
	// The session is retired: nobody may act under its id any more, so a
	// caller that hangs up (or whose deadline is short) must not cut the
	// requeue short, or its takings stay held until the keepalive expires
	// (a Worker's Stop requeues detached from its context too).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	defer cancel()
	for _, q := range s.queues {
		n, cancelled, err := s.r.st.Requeue(ctx, q.QK, []string{s.ID()}, false)
		emitCancelled(s.r.emit, q.Member, cancelled)
		if err != nil {
			// Stay registered: the reaper requeues once the keepalive expires.
			return fmt.Errorf("worqr: close session %s: requeue %s: %w", s.ID(), q.Member, err)
		}
		if n > 0 {
			s.r.emit(worqr.Event{Kind: worqr.EventStopRequeued, Queue: q.Member, WorkerID: s.ID(), Count: n})
		}
	}
	if err := s.r.reg.Deregister(ctx, s.ID()); err != nil {
		return fmt.Errorf("worqr: close session %s: %w", s.ID(), err)
	}
	return nil
}
