package worqr

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/registry"
)

// Inspector reads and steers what a namespace holds in Redis: queues and
// their lengths, tasks, dead sets, workers, flow runs, pauses, limits and
// bulk operations. Every read is here, for a producer (its Client
// enqueues, cancels and waits) as for binaries and dashboards, which use
// it rather than reading keys. It is safe for concurrent use.
type Inspector struct {
	st    *rdb.Store
	reg   *registry.Registry
	cfg   Config
	bus   *eventBus
	hooks inspectorHooks
}

// NewInspector returns an inspector on pool. A nil cfg means all defaults
// (namespace "worqr").
func NewInspector(pool ConnGetter, cfg *Config) (*Inspector, error) {
	if pool == nil {
		return nil, invalid("pool", "is nil")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	reg, err := registry.New(pool, c.Namespace)
	if err != nil {
		return nil, err
	}
	st := rdb.NewStore(pool, c.Namespace)
	return &Inspector{st: st, reg: reg, cfg: c, bus: newEventBus(st, c)}, nil
}

// Flush publishes at once the events the Inspector observed since its last
// publication, as Client.Flush does: it publishes events of its own
// (pauses, resumes, cancels of CancelAll and CancelRun) that a short-lived
// process would lose at exit.
func (in *Inspector) Flush() { in.bus.flush() }

// QueueInfo counts the tasks of one queue.
type QueueInfo struct {
	// Name is the queue's name: "<queue>", or "<flow>/<queue>" for a flow's
	// stage or child queue (the form every Client and Inspector method
	// takes).
	Name string
	// Flow is the flow of a stage or child queue, "" for a stand-alone one.
	Flow                       string
	Waiting, Scheduled, Active int64
	Dead                       int64
	// Retained counts ended tasks kept for the queue's Retention (or
	// their own), those whose retention has not ended (Redis's clock).
	Retained int64
	Paused   bool
	// Keys counts the keys of an ordered queue that have tasks; Waiting
	// counts only their heads, Behind the tasks waiting behind them, for
	// their key's head to end (see Inspector.Keys). Behind is kept exact
	// by the scripts that move those tasks, so reading it costs one
	// command whatever the number of keys. A fair queue's tasks waiting
	// in its keys' lists count in Waiting, and Keys counts its keys in
	// turn or held by their limits: those with tasks waiting, and a key
	// whose last task started until a take finds its list empty. Both are
	// kept the same way.
	Keys, Behind int64
	// OldestActive is the age of the oldest active taking: how long ago
	// the task that has been running longest started (Redis time; 0 when
	// none is active). A handler that hangs shows here as a growing age,
	// however busy the queue. Reading it costs time in Redis for each
	// active taking (about 0.3 us), none for waiting tasks.
	OldestActive time.Duration
	// Latency is the age of the oldest waiting task: how long ago the task
	// at the front of the queue was first enqueued (0 when none waits), so
	// a retried or requeued task at the front counts its whole age. It is
	// read from the task's id (as TaskInfo.EnqueuedAt): 0 too when that is
	// an id of the caller's choosing (EnqueueOpts.ID) without a periodic
	// tick's shape. For
	// a queue with priority levels, the front of level 0; for a flow's
	// stage queue, the run's age. Waiting counts every level. For a fair
	// queue, the oldest of the fronts of its tasks without a key and of
	// the lists of its first 100 keys in turn (the next to be served):
	// reading it costs the same however many keys wait, and a key further
	// back, or held by its Concurrency or Rate, is not seen.
	Latency time.Duration
}

// Queues lists every known queue (served by a worker, or enqueued to by a
// client, including every flow stage and child queue), sorted by name.
func (in *Inspector) Queues(ctx context.Context) ([]QueueInfo, error) {
	refs, err := in.st.KnownQueues(ctx)
	if err != nil {
		return nil, fmt.Errorf("worqr: queues: %w", err)
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].Member() < refs[j].Member() })
	return in.stats(ctx, refs)
}

// Known reports whether queue ("<queue>" or "<flow>/<queue>") is one that
// Queues lists: a worker served it or a client enqueued to it. One round
// trip, whatever the number of queues.
func (in *Inspector) Known(ctx context.Context, queue string) (bool, error) {
	ref, err := parseQueue(queue)
	if err != nil {
		return false, err
	}
	ok, err := in.st.IsKnownQueue(ctx, ref)
	if err != nil {
		return false, fmt.Errorf("worqr: known %s: %w", queue, err)
	}
	return ok, nil
}

// Queue returns the counts of one queue ("<queue>" or "<flow>/<queue>").
func (in *Inspector) Queue(ctx context.Context, queue string) (*QueueInfo, error) {
	ref, err := parseQueue(queue)
	if err != nil {
		return nil, err
	}
	qs, err := in.stats(ctx, []rdb.QueueRef{ref})
	if err != nil {
		return nil, err
	}
	return &qs[0], nil
}

func (in *Inspector) stats(ctx context.Context, refs []rdb.QueueRef) ([]QueueInfo, error) {
	qks := make([]rdb.QueueKeys, len(refs))
	for i, r := range refs {
		qks[i] = in.st.Queue(r)
	}
	st, err := in.st.Stats(ctx, qks)
	if err != nil {
		return nil, fmt.Errorf("worqr: queue stats: %w", err)
	}
	now := time.Now()
	out := make([]QueueInfo, len(refs))
	for i, r := range refs {
		qi := QueueInfo{Name: r.Member(), Waiting: st[i].Waiting, Scheduled: st[i].Scheduled, Active: st[i].Active,
			Dead: st[i].Dead, Retained: st[i].Retained, Paused: st[i].Paused, Keys: st[i].Keys, Behind: st[i].Behind,
			OldestActive: time.Duration(st[i].OldestActiveMs) * time.Millisecond}
		if r.Flow() {
			qi.Flow = r.Tag
		}
		for _, id := range append([]string{st[i].Head}, st[i].FairHeads...) {
			if at, ok := enqueuedAt(id); ok {
				qi.Latency = max(qi.Latency, now.Sub(at))
			}
		}
		out[i] = qi
	}
	return out, nil
}

// Tasks returns up to limit tasks of queue in one state, skipping the
// offset first, and how many the state holds: StateQueued (waiting, the
// next to be taken first, without taking them; a fair queue's keys'
// tasks follow, key after key, each key's in the order they will start,
// the keys in no particular order), StateScheduled (soonest
// first), StateActive (held by workers), StateDead (newest first; a flow's
// failed runs are in the dead set of the stage they failed in,
// "<flow>/<stage>"), or StateDone / StateCancelled / StateExpired
// (retained ended tasks, those kept longest first; all three are listed
// for any of them). The ids are read in pages of 1,000 (no Redis call
// grows with limit), so a large limit does not list one instant's queue.
func (in *Inspector) Tasks(ctx context.Context, queue string, state TaskState, offset, limit int) ([]*TaskInfo, int, error) {
	ref, err := parseQueue(queue)
	if err != nil {
		return nil, 0, err
	}
	if offset < 0 {
		return nil, 0, invalid("offset", "(%d) must not be negative", offset)
	}
	if limit < 1 {
		return nil, 0, invalid("limit", "(%d) must be at least 1", limit)
	}
	qk := in.st.Queue(ref)
	var span rdb.Span
	switch state {
	case StateQueued:
		span, err = pages(offset, limit, func(off, n int) (rdb.Span, error) { return in.st.Waiting(ctx, qk, off, n) })
		if err == nil {
			// A fair queue's keys' lists, after the waiting list.
			var fair rdb.Span
			if rest := limit - len(span.IDs); rest > 0 {
				fair, err = pages(max(offset-span.Total, 0), rest, func(off, n int) (rdb.Span, error) {
					return in.st.FairWaiting(ctx, qk, off, n)
				})
			} else {
				fair, err = in.st.FairWaiting(ctx, qk, 0, 0) // the count alone
			}
			span.IDs = append(span.IDs, fair.IDs...)
			span.Total += fair.Total
		}
	case StateScheduled:
		span, err = pages(offset, limit, func(off, n int) (rdb.Span, error) { return in.st.Scheduled(ctx, qk, off, n) })
	case StateDead:
		span, err = pages(offset, limit, func(off, n int) (rdb.Span, error) { return in.st.Dead(ctx, qk, off, n) })
	case StateDone, StateCancelled, StateExpired:
		span, err = pages(offset, limit, func(off, n int) (rdb.Span, error) { return in.st.Retained(ctx, qk, off, n) })
	case StateActive:
		var hs []rdb.Holding
		hs, err = in.st.Active(ctx, qk) // in take order (by pid's value)
		span.Total = len(hs)
		for i := offset; i < len(hs) && i < offset+limit; i++ {
			span.IDs = append(span.IDs, hs[i].ID)
		}
	default:
		return nil, 0, invalid("state", "%q is not one of queued, scheduled, active, dead, done, cancelled, expired", state)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("worqr: tasks of %s: %w", queue, err)
	}
	recs, err := in.st.Tasks(ctx, qk, span.IDs)
	if err != nil {
		return nil, 0, err
	}
	out := make([]*TaskInfo, len(recs))
	for i, r := range recs {
		out[i] = taskInfo(ref, r)
	}
	return out, span.Total, nil
}

// pages reads entries [offset, offset+limit) of a list or sorted set with
// read, in pages of at most rdb.BulkChunk (so that no LRANGE or ZRANGE
// holds Redis long, however large limit is), until a page comes short. The
// pages are not one instant's: an entry that moved between two of them
// may be missing, and one met twice is listed once.
func pages(offset, limit int, read func(offset, n int) (rdb.Span, error)) (rdb.Span, error) {
	var out rdb.Span
	seen := map[string]bool{}
	for limit > 0 {
		n := min(limit, rdb.BulkChunk)
		sp, err := read(offset, n)
		if err != nil {
			return rdb.Span{}, err
		}
		out.Total = sp.Total
		for _, id := range sp.IDs {
			if !seen[id] {
				seen[id] = true
				out.IDs = append(out.IDs, id)
			}
		}
		if len(sp.IDs) < n {
			break
		}
		offset, limit = offset+n, limit-n
	}
	return out, nil
}

// Task returns what Redis holds about task id of queue ("<queue>", or
// "<flow>/<queue>" for a flow's stage or child queue: a flow's queues
// share their tasks, any of them finds a task of the flow), or
// ErrTaskNotFound. It is one lookup. An empty queue searches every known
// queue, for a tool that holds only an id: one lookup per stand-alone
// queue or flow, and the first task of that id found (an id is unique
// within a queue, not across queues: EnqueueOpts.ID may use it in
// another). For a flow run the TaskInfo names the run's current stage
// queue, for a child its own queue.
func (in *Inspector) Task(ctx context.Context, queue, id string) (*TaskInfo, error) {
	var refs []rdb.QueueRef
	if queue != "" {
		ref, err := parseQueue(queue)
		if err != nil {
			return nil, err
		}
		refs = []rdb.QueueRef{ref}
	}
	if id == "" {
		return nil, invalid("id", "is empty")
	}
	if queue == "" {
		var err error
		if refs, err = in.st.KnownQueues(ctx); err != nil {
			return nil, err
		}
	}
	seen := map[string]bool{}
	for _, r := range refs {
		if seen[r.Tag] {
			continue
		}
		seen[r.Tag] = true
		qk := in.st.Queue(r)
		rec, err := in.st.Task(ctx, qk, id)
		if err != nil {
			return nil, err
		}
		if rec == nil {
			continue
		}
		ref := r
		switch {
		case rec.RunStatus != "":
			run, err := in.st.Run(ctx, qk, id)
			if err == nil && run != nil {
				ref = rdb.QueueRef{Tag: r.Tag, Name: run.Stage}
			}
		case rec.Parent != "":
			run, err := in.st.Run(ctx, qk, rec.Parent)
			if err == nil && run != nil {
				for _, c := range run.Children {
					if c.ID == id {
						ref = rdb.QueueRef{Tag: r.Tag, Name: c.Queue}
					}
				}
			}
		}
		return taskInfo(ref, rec), nil
	}
	return nil, ErrTaskNotFound
}

// WorkerInfo describes one registered worker.
type WorkerInfo struct {
	ID      string
	Host    string
	PID     int
	Started time.Time
	// Alive is false for a worker whose keepalive expired and that no
	// reaper pass has forgotten yet.
	Alive bool
	// KeepaliveAge is how long ago its keepalive was renewed.
	KeepaliveAge time.Duration
	// Queues are the queues it serves ("<flow>/<queue>" for flow queues).
	Queues []string
	// Held counts the takings it holds, by queue (queues with none are
	// left out).
	Held map[string]int
}

// Workers lists the registered workers, sorted by id.
func (in *Inspector) Workers(ctx context.Context) ([]WorkerInfo, error) {
	ids, err := in.reg.Workers(ctx)
	if err != nil {
		return nil, fmt.Errorf("worqr: workers: %w", err)
	}
	sort.Strings(ids)
	infos, err := in.reg.Describe(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("worqr: workers: %w", err)
	}
	out := make([]WorkerInfo, len(infos))
	for i, wi := range infos {
		w := WorkerInfo{ID: wi.ID, Host: wi.Host, PID: wi.PID, Started: wi.Started, Alive: wi.Alive,
			KeepaliveAge: wi.KeepaliveAge, Held: map[string]int{}}
		for _, q := range wi.Queues {
			w.Queues = append(w.Queues, q.Member())
			n, err := in.st.HeldCounts(ctx, in.st.Queue(q), []string{wi.ID})
			if err != nil {
				return nil, fmt.Errorf("worqr: takings of %s: %w", wi.ID, err)
			}
			if n[0] > 0 {
				w.Held[q.Member()] = n[0]
			}
		}
		out[i] = w
	}
	return out, nil
}

// Runs returns up to limit runs of flow (newest first) whose status is
// status ("" for any), skipping the first offset that match. It scans at most
// the flow's 10,000 newest runs.
func (in *Inspector) Runs(ctx context.Context, flow string, status RunStatus, offset, limit int) ([]*RunInfo, error) {
	if err := checkName("flow", flow); err != nil {
		return nil, err
	}
	switch status {
	case "", RunRunning, RunDone, RunFailed, RunCancelled:
	default:
		return nil, invalid("status", "%q is not one of running, done, failed, cancelled", status)
	}
	if offset < 0 {
		return nil, invalid("offset", "(%d) must not be negative", offset)
	}
	if limit < 1 || limit > rdb.BulkChunk {
		return nil, invalid("limit", "(%d) must be between 1 and %d", limit, rdb.BulkChunk)
	}
	qk := in.st.Queue(rdb.QueueRef{Tag: flow, Name: flow})
	const page, scanMax = 200, 10000
	var out []*RunInfo
	skipped := 0
	// A run started between two pages moves every entry down one rank: the
	// last of a page comes again first in the next.
	seen := map[string]bool{}
	for pos := 0; pos < scanMax; pos += page {
		if f, ok := in.hooks.runsPage.get(); ok && pos > 0 {
			f()
		}
		ids, total, err := in.st.RunIDs(ctx, qk, pos, page)
		if err != nil {
			return nil, err
		}
		runs, err := in.st.Runs(ctx, qk, ids)
		if err != nil {
			return nil, err
		}
		if len(runs) < len(ids) { // some expired: drop them from the list
			have := map[string]bool{}
			for _, r := range runs {
				have[r.ID] = true
			}
			var gone []string
			for _, id := range ids {
				if !have[id] {
					gone = append(gone, id)
				}
			}
			if f, ok := in.hooks.runsForget.get(); ok {
				f(gone)
			}
			if err := in.st.ForgetRuns(ctx, qk, gone); err != nil {
				return nil, err
			}
			pos -= len(gone)
		}
		for _, r := range runs {
			if seen[r.ID] {
				continue
			}
			seen[r.ID] = true
			if status != "" && RunStatus(r.Status) != status {
				continue
			}
			if skipped < offset {
				skipped++
				continue
			}
			out = append(out, runInfo(flow, r))
			if len(out) == limit {
				return out, nil
			}
		}
		if pos+page >= total {
			break
		}
	}
	return out, nil
}

// Pause stops every worker from taking tasks of queue within one poll
// interval (at once when the announcement reaches them); running tasks
// finish, and so do those a worker took ahead of its handlers
// (QueueConfig.ReadAhead: a few per worker). The flag is stored in Redis.
func (in *Inspector) Pause(ctx context.Context, queue string) error {
	return in.setPaused(ctx, queue, true)
}

// Resume undoes Pause.
func (in *Inspector) Resume(ctx context.Context, queue string) error {
	return in.setPaused(ctx, queue, false)
}

func (in *Inspector) setPaused(ctx context.Context, queue string, on bool) error {
	ref, err := parseQueue(queue)
	if err != nil {
		return err
	}
	if err := in.st.SetPaused(ctx, in.st.Queue(ref), on); err != nil {
		return fmt.Errorf("worqr: pause %s: %w", queue, err)
	}
	kind := EventResumed
	if on {
		kind = EventPaused
	}
	in.bus.add(Event{Kind: kind, At: time.Now(), Queue: queue})
	return nil
}

// SetLimits stores queue's global limits (a zero Limits removes them):
// the one value every process applies, since the take script reads it on
// every take of a limited queue. Workers are told at once (a wake-up), and
// read it at least once per PollInterval if that message is lost: until a
// worker has read that the queue is limited at all, its takes do not look
// (a queue without limits takes the plain way). A worker whose
// QueueConfig.Limits is set stores its own at start: the last write wins.
func (in *Inspector) SetLimits(ctx context.Context, queue string, l Limits) error {
	ref, err := parseQueue(queue)
	if err != nil {
		return err
	}
	if err := l.check("Limits"); err != nil {
		return err
	}
	if err := in.st.SetLimits(ctx, in.st.Queue(ref), l.rdb()); err != nil {
		return fmt.Errorf("worqr: set limits of %s: %w", queue, err)
	}
	return nil
}

// Limits returns queue's stored global limits (zero: none).
func (in *Inspector) Limits(ctx context.Context, queue string) (Limits, error) {
	ref, err := parseQueue(queue)
	if err != nil {
		return Limits{}, err
	}
	l, err := in.st.ReadLimits(ctx, in.st.Queue(ref))
	if err != nil {
		return Limits{}, fmt.Errorf("worqr: limits of %s: %w", queue, err)
	}
	return Limits{Rate: l.Rate, Period: time.Duration(l.PeriodMs) * time.Millisecond, Concurrency: l.Conc}, nil
}

// Progress is called after each chunk of a bulk operation with how many
// tasks it handled so far.
type Progress func(done int)

// RequeueAllDead moves every dead task of queue to the back of the queue,
// oldest first, in atomic chunks of at most 250, and returns how many:
// those dead when it started (a task it requeued that dies again
// meanwhile stays dead).
func (in *Inspector) RequeueAllDead(ctx context.Context, queue string, progress Progress) (int, error) {
	return in.deadAll(ctx, queue, rdb.DeadRequeue, progress)
}

// DeleteAllDead deletes every dead task of queue in chunks of at most 250.
func (in *Inspector) DeleteAllDead(ctx context.Context, queue string, progress Progress) (int, error) {
	return in.deadAll(ctx, queue, rdb.DeadDelete, progress)
}

// deadAll applies op to every dead task of queue, oldest first, in atomic
// chunks of at most rdb.BulkStep, calling progress after each non-empty
// one. A requeue leaves dead, and passes, the flow children whose run no
// longer waits for them (see deadIDs).
func (in *Inspector) deadAll(ctx context.Context, queue string, op rdb.DeadOp, progress Progress) (int, error) {
	ref, err := parseQueue(queue)
	if err != nil {
		return 0, err
	}
	qk := in.st.Queue(ref)
	total := 0
	// A requeue reads only the tasks dead before it started: one it
	// requeued that dies again meanwhile (a poison task) is not requeued
	// again, round and round for as long as it keeps dying.
	var before int64
	if op == rdb.DeadRequeue {
		if before, err = in.st.Time(ctx, qk.Ref.Tag); err != nil {
			return 0, fmt.Errorf("worqr: %s dead of %s: %w", op, qk.Ref.Member(), err)
		}
	}
	var after, score string // the last id refused: the next chunk starts after it
	for {
		p, err := in.st.DeadOldestBefore(ctx, qk, op, rdb.BulkStep, after, score, before)
		total += p.Handled
		after, score = p.After, p.AfterScore
		if err != nil {
			return total, fmt.Errorf("worqr: %s dead of %s: %w", op, qk.Ref.Member(), err)
		}
		if progress != nil && p.Handled > 0 {
			progress(total)
		}
		if p.Read < rdb.BulkStep && !p.Cut {
			return total, nil
		}
	}
}

// DeleteAllWaiting deletes every task waiting in stand-alone queue (its
// scheduled tasks too, in an ordered queue the tasks waiting behind each
// key's head, whether that head waits, runs or is dead, and in a fair
// queue those in its keys' lists) in chunks of at most 250; running tasks
// are left alone. A flow's runs are ended with
// Client.CancelRun instead.
func (in *Inspector) DeleteAllWaiting(ctx context.Context, queue string, progress Progress) (int, error) {
	return in.bulk(ctx, queue, rdb.BulkDelete, progress)
}

// CancelAll cancels every task of stand-alone queue: waiting and scheduled
// ones (and those behind an ordered queue's keys, or in a fair queue's)
// end as cancelled (in
// chunks of at most 250), running ones are asked to stop. It returns how
// many it cancelled or asked. A task given back to its queue while the call
// runs (by the reaper, or by a worker that stops) is cancelled too; a task
// enqueued while it runs may be.
func (in *Inspector) CancelAll(ctx context.Context, queue string, progress Progress) (int, error) {
	n, err := in.cancelWaiting(ctx, queue, 0, progress)
	if err != nil {
		return n, err
	}
	ref, _ := parseQueue(queue)
	qk := in.st.Queue(ref)
	if f, ok := in.hooks.cancelAllActive.get(); ok {
		f()
	}
	hs, err := in.st.Active(ctx, qk)
	if err != nil {
		return n, fmt.Errorf("worqr: cancel all of %s: %w", queue, err)
	}
	for _, h := range hs {
		if h.ID == "" {
			continue
		}
		res, err := in.st.Cancel(ctx, qk, h.ID)
		if err != nil {
			return n, fmt.Errorf("worqr: cancel all of %s: %w", queue, err)
		}
		if res == rdb.CancelRequested || res == rdb.CancelRemoved || res == rdb.CancelMarked {
			n++
		}
		if res == rdb.CancelRemoved { // given back meanwhile, removed here
			in.bus.add(Event{Kind: EventCancelled, At: time.Now(), Queue: queue, TaskID: h.ID})
		}
	}
	// A task that was running when the first pass ran and was given back
	// before the running ones were read was in neither: a second pass
	// finds it (one call per place when there is nothing).
	n, err = in.cancelWaiting(ctx, queue, n, progress)
	if err != nil {
		return n, err
	}
	if progress != nil {
		progress(n)
	}
	return n, nil
}

// cancelWaiting is CancelAll's pass over the waiting and scheduled tasks of
// queue, after before were cancelled or asked: it returns the new total,
// and publishes the pass's count as one event.
func (in *Inspector) cancelWaiting(ctx context.Context, queue string, before int, progress Progress) (int, error) {
	var pg Progress
	if progress != nil {
		pg = func(done int) { progress(before + done) }
	}
	n, err := in.bulk(ctx, queue, rdb.BulkCancel, pg)
	if n > 0 {
		// Each ended as cancelled here, where no worker will see it: its
		// event (and history count) is this call's to publish.
		in.bus.add(Event{Kind: EventCancelled, At: time.Now(), Queue: queue, Count: n})
	}
	return before + n, err
}

func (in *Inspector) bulk(ctx context.Context, queue string, action rdb.BulkAction, progress Progress) (int, error) {
	ref, err := parseQueue(queue)
	if err != nil {
		return 0, err
	}
	if ref.Flow() {
		return 0, invalid("queue", "%s is a flow queue: end its runs with Client.CancelRun", queue)
	}
	qk := in.st.Queue(ref)
	total := 0
	type part struct {
		place rdb.Place
		level int
	}
	var parts []part
	for l := rdb.MaxLevel; l >= 0; l-- {
		parts = append(parts, part{rdb.PlaceWaiting, l})
	}
	parts = append(parts, part{rdb.PlaceScheduled, 0})
	// A key's head ended by a call that had no room left for all the tasks
	// behind it moves its key on: the next one becomes the head, in the
	// waiting list or the scheduled set, which another part may have
	// passed already. Only a call that filled its chunk does that: the
	// parts run again until a round fills none.
	for full := true; full; {
		full = false
		for _, pt := range parts {
			place := pt.place
			for {
				n, err := in.st.BulkLevel(ctx, qk, place, pt.level, action)
				total += n
				if err != nil {
					return total, fmt.Errorf("worqr: %s %s tasks of %s: %w", action, place, queue, err)
				}
				if progress != nil && n > 0 {
					progress(total)
				}
				if n < rdb.BulkStep {
					break
				}
				full = true
			}
		}
	}
	// A fair queue: the tasks in its keys' lists.
	for cursor := uint64(0); ; {
		ks, next, err := in.st.FairKeys(ctx, qk, cursor, 100)
		if err != nil {
			return total, fmt.Errorf("worqr: %s the tasks waiting in the keys of %s: %w", action, queue, err)
		}
		var names []string
		for _, k := range ks {
			if k.Waiting > 0 {
				names = append(names, k.Key)
			}
		}
		for len(names) > 0 {
			n, err := in.st.BulkFair(ctx, qk, names, action)
			total += n
			if err != nil {
				return total, fmt.Errorf("worqr: %s the tasks waiting in the keys of %s: %w", action, queue, err)
			}
			if progress != nil && n > 0 {
				progress(total)
			}
			if n < rdb.BulkStep {
				break
			}
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	// An ordered queue: the tasks still waiting behind keys whose head
	// runs, or is dead and blocks its key.
	for cursor := uint64(0); ; {
		ks, next, err := in.st.Keys(ctx, qk, cursor, 100)
		if err != nil {
			return total, fmt.Errorf("worqr: %s the tasks waiting behind the keys of %s: %w", action, queue, err)
		}
		names := make([]string, len(ks))
		for i, k := range ks {
			names[i] = k.Key
		}
		for len(names) > 0 {
			n, err := in.st.BulkKeys(ctx, qk, names, action)
			total += n
			if err != nil {
				return total, fmt.Errorf("worqr: %s the tasks waiting behind the keys of %s: %w", action, queue, err)
			}
			if progress != nil && n > 0 {
				progress(total)
			}
			if n < rdb.BulkStep {
				break
			}
		}
		if next == 0 {
			return total, nil
		}
		cursor = next
	}
}

// Ping checks that Redis answers.
func (in *Inspector) Ping(ctx context.Context) error {
	return in.st.Ping(ctx, rdb.RegistryTag)
}

// DeleteNamespace deletes every key of the inspector's namespace (tasks,
// queues, workers, flow runs: everything), a thousand keys per call, and
// returns how many it deleted. Stop every worker of the namespace first.
func (in *Inspector) DeleteNamespace(ctx context.Context) (int, error) {
	n, err := in.st.DeleteNamespace(ctx)
	if err != nil {
		return n, fmt.Errorf("worqr: delete namespace %s: %w", in.cfg.Namespace, err)
	}
	return n, nil
}
