package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/xid"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/registry"
)

// ConnGetter is satisfied by *redis.Pool. The reaper never closes it.
type ConnGetter = rdb.ConnGetter

// MinInterval is the shortest reaper interval: the lease lasts nine tenths
// of it, in whole milliseconds.
const MinInterval = 10 * time.Millisecond

// Cancelled is a taking of a dead worker that a pass ended as cancelled:
// its task, and its pid and worker when known ("" for a task taken in a
// batch behind its key's head).
type Cancelled struct{ TaskID, PID, Worker string }

// Recovered reports what a pass did for one queue.
type Recovered struct {
	Queue     registry.Queue
	Workers   []string // the dead workers whose takings were requeued
	Requeued  int
	Cancelled []Cancelled // takings ended as cancelled (their cancel had been asked), not requeued
}

// Config is what a Reaper needs. Namespace and Interval are required.
type Config struct {
	// Namespace of the keys (worqr's Config.Namespace, default "worqr").
	Namespace string
	// Interval between lease attempts, and the lease's length. At least
	// MinInterval.
	Interval time.Duration
	// Holder is written into the lease: any string that names this
	// process. Default "reaper-<xid>".
	Holder string
	// Logger receives warnings. Default slog.Default().
	Logger *slog.Logger
	// OnRecovered, when set, is called for each queue a pass requeued in.
	// A reaper publishes no events of its own: pass what it gets to
	// worqr's Client.ReportRecovered to have them published (as a
	// worker's reaper does), so that the events and the history count them.
	OnRecovered func(Recovered)
	// OnError, when set, is called for each failed lease, pass or move (the
	// loop goes on at the next interval).
	OnError func(error)
}

// Reaper requeues the takings of dead workers and moves due scheduled tasks.
type Reaper struct {
	st  *rdb.Store
	reg *registry.Registry
	cfg Config
	// callTimeout bounds each call of Run's lease, of a pass and of the
	// mover (see CallTimeout); tests shorten it.
	callTimeout time.Duration
	// ticked, when set (by tests only), is called once Run has handled a
	// tick: after the lease attempt, and after the pass when it held the
	// lease (leased).
	ticked func(leased bool)
}

// CallTimeout bounds each call to Redis of Run's lease, of a pass (each
// read, each queue's requeue) and of the mover (each round trip of its
// pipelined calls), when the caller's context allows longer. A call whose reply
// never comes (a connection that went silent: a partition that drops
// packets, a virtual IP moved to another host) would otherwise wait until
// TCP gives up, about 15 minutes, while its holder keeps the lease: no
// delayed task or retry would become due, and no dead worker's task come
// back, meanwhile.
const CallTimeout = 5 * time.Second

// New returns a reaper on pool.
func New(pool ConnGetter, cfg *Config) (*Reaper, error) {
	if pool == nil {
		return nil, errors.New("recovery: pool is nil")
	}
	if cfg == nil {
		return nil, errors.New("recovery: Config is nil")
	}
	c := *cfg
	if c.Namespace == "" {
		return nil, errors.New("recovery: Config.Namespace is empty")
	}
	if c.Interval < MinInterval {
		return nil, fmt.Errorf("recovery: Config.Interval (%s) must be at least %s", c.Interval, MinInterval)
	}
	if c.Holder == "" {
		c.Holder = "reaper-" + xid.New().String()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	reg, err := registry.New(pool, c.Namespace)
	if err != nil {
		return nil, err
	}
	return &Reaper{st: rdb.NewStore(pool, c.Namespace), reg: reg, cfg: c, callTimeout: CallTimeout}, nil
}

// bounded returns ctx bounded by the reaper's callTimeout.
func (r *Reaper) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.callTimeout)
}

func (r *Reaper) fail(what string, err error) {
	err = fmt.Errorf("recovery: %s: %w", what, err)
	r.cfg.Logger.Warn(err.Error())
	if r.cfg.OnError != nil {
		r.cfg.OnError(err)
	}
}

// Run tries the lease every Interval and, when it gets it, starts the
// mover (beside, one at a time) and runs a pass, until ctx ends. Errors
// reach OnError and the loop goes on.
func (r *Reaper) Run(ctx context.Context) {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	var lastPrune time.Time
	var sweptAt atomic.Pointer[time.Time] // when the last good sweep began
	// The sweep, the prune and the move each make calls per known queue
	// (or per flow's run), which can take seconds with many of them: they
	// run beside the passes, each one at a time, so that recovery never
	// waits for them (the documented bound is TTL + one interval).
	var sweeping, pruning, moving atomic.Bool
	var pruner sync.WaitGroup
	defer pruner.Wait()
	beside := func(busy *atomic.Bool, f func()) {
		if !busy.CompareAndSwap(false, true) {
			return
		}
		pruner.Add(1)
		go func() {
			defer pruner.Done()
			defer busy.Store(false)
			f()
		}()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// The lease ends a little before the next tick, so that a lone
		// reaper gets it every interval (Redis expires to the millisecond,
		// and a lease of exactly one interval is often still there).
		lctx, cancel := r.bounded(ctx)
		ok, err := r.reg.AcquireLease(lctx, r.cfg.Holder, r.cfg.Interval*9/10)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				r.fail("lease", err)
			}
			r.tick(false)
			continue
		}
		if !ok {
			r.tick(false)
			continue
		}
		// The move first: a long pass (many dead workers' queues) does
		// not hold back the due tasks.
		beside(&moving, func() {
			if _, err := r.Move(ctx); err != nil && ctx.Err() == nil {
				r.fail("move", err)
			}
		})
		if _, err := r.Pass(ctx); err != nil && ctx.Err() == nil {
			r.fail("pass", err)
		}
		r.tick(true)
		// A sweep that failed is tried again at the next interval.
		if at := sweptAt.Load(); at == nil || time.Since(*at) >= SweepInterval {
			beside(&sweeping, func() {
				start := time.Now()
				if _, err := r.Sweep(ctx); err != nil {
					if ctx.Err() == nil {
						r.fail("sweep", err)
					}
				} else {
					sweptAt.Store(&start)
				}
			})
		}
		if time.Since(lastPrune) >= SweepInterval && !pruning.Load() {
			lastPrune = time.Now()
			beside(&pruning, func() {
				if _, err := r.PruneRuns(ctx); err != nil && ctx.Err() == nil {
					r.fail("prune runs", err)
				}
			})
		}
	}
}

func (r *Reaper) tick(leased bool) {
	if r.ticked != nil {
		r.ticked(leased)
	}
}

// SweepInterval is how often Run also sweeps (see Sweep).
const SweepInterval = 5 * time.Minute

// Pass runs one recovery pass without the lease and returns what it requeued.
// It is safe to run concurrently with other passes. It reads the registered
// workers and their keepalives (two commands), and for each dead one
// requeues its takings in the queues its registration recorded, then
// forgets it: its cost follows the dead workers and their queues, not the
// number of queues ever served. This finds every taking because a take is
// refused by Redis once its worker's deadline (before its keepalive can
// expire) has passed: once a keepalive is seen gone, no taking appears under
// its id.
//
// Each of its calls is bounded by CallTimeout (the reading of every known
// queue, for a worker with no description, by 6 times that): a call whose
// reply never comes fails the pass, and the next one goes on, rather than
// holding the lease holder's passes until TCP gives up on the connection.
func (r *Reaper) Pass(ctx context.Context) ([]Recovered, error) {
	bctx, cancel := r.bounded(ctx)
	registered, err := r.st.Workers(bctx)
	cancel()
	if err != nil || len(registered) == 0 {
		return nil, err
	}
	bctx, cancel = r.bounded(ctx)
	alive, err := r.st.Alive(bctx, registered)
	cancel()
	if err != nil {
		return nil, err
	}
	var dead []string
	for i, w := range registered {
		if !alive[i] {
			dead = append(dead, w)
		}
	}
	if len(dead) == 0 {
		return nil, nil
	}
	bctx, cancel = r.bounded(ctx)
	queues, known, err := r.st.WorkerQueues(bctx, dead)
	cancel()
	if err != nil {
		return nil, err
	}
	// Group the dead by queue, in a stable order; a worker with no
	// description is looked for in every known queue.
	var order []rdb.QueueRef
	byQueue := map[rdb.QueueRef][]string{}
	add := func(q rdb.QueueRef, w string) {
		if _, ok := byQueue[q]; !ok {
			order = append(order, q)
		}
		byQueue[q] = append(byQueue[q], w)
	}
	var all []rdb.QueueRef
	for i, w := range dead {
		qs := queues[i]
		if !known[i] {
			if all == nil {
				kctx, kcancel := context.WithTimeout(ctx, 6*r.callTimeout)
				all, err = r.st.KnownQueues(kctx)
				kcancel()
				if err != nil {
					return nil, err
				}
			}
			qs = all
		}
		for _, q := range qs {
			add(q, w)
		}
	}
	out, err := r.requeue(ctx, order, byQueue)
	if err != nil {
		return out, err
	}
	bctx, cancel = r.bounded(ctx)
	defer cancel()
	return out, r.st.Forget(bctx, dead)
}

// requeue runs the requeue of each queue for its dead workers. A queue
// whose requeue fails does not stop the others: every pass reads the
// queues in the same order, and those after it would stay held for as
// long as it fails. The errors are returned together (the caller then
// keeps the workers registered, so that a later pass tries again).
func (r *Reaper) requeue(ctx context.Context, order []rdb.QueueRef, byQueue map[rdb.QueueRef][]string) ([]Recovered, error) {
	var out []Recovered
	var errs []error
	for _, q := range order {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		ws := byQueue[q]
		qk := r.st.Queue(q)
		bctx, cancel := r.bounded(ctx)
		n, cancelled, err := r.st.Requeue(bctx, qk, ws, true)
		cancel()
		if err != nil && n == 0 && len(cancelled) == 0 {
			errs = append(errs, fmt.Errorf("requeue %s: %w", q.Member(), err))
			continue
		}
		if n == 0 && len(cancelled) == 0 {
			continue
		}
		rec := Recovered{Queue: q, Workers: ws, Requeued: n}
		for _, c := range cancelled {
			rec.Cancelled = append(rec.Cancelled, Cancelled{TaskID: c.ID, PID: c.PID, Worker: c.Worker})
		}
		r.cfg.Logger.Info("recovery: requeued takings of dead workers",
			"queue", q.Member(), "workers", ws, "requeued", n, "cancelled", len(cancelled))
		if r.cfg.OnRecovered != nil {
			r.cfg.OnRecovered(rec)
		}
		out = append(out, rec)
		if err != nil {
			// Reported first: the chunks done before the error moved
			// takings (and ended some as cancelled) that no later pass
			// would name.
			errs = append(errs, fmt.Errorf("requeue %s: %w", q.Member(), err))
		}
	}
	return out, errors.Join(errs...)
}

// PruneRuns drops, from the list of runs of every known flow, the runs
// whose data is gone (ended and past their retention), in chunks of
// rdb.BulkChunk: that list is what Inspector.Runs pages through, and
// nothing else shortens it. It returns how many it dropped. Run prunes
// every SweepInterval, beside its passes.
func (r *Reaper) PruneRuns(ctx context.Context) (int, error) {
	kctx, cancel := context.WithTimeout(ctx, 6*r.callTimeout)
	queues, err := r.st.KnownQueues(kctx)
	cancel()
	if err != nil {
		return 0, err
	}
	flows := map[string]bool{}
	total := 0
	for _, q := range queues {
		if !q.Flow() || flows[q.Tag] {
			continue
		}
		flows[q.Tag] = true
		qk := r.st.Queue(rdb.QueueRef{Tag: q.Tag, Name: q.Tag})
		for start := 0; ; {
			bctx, cancel := r.bounded(ctx)
			seen, dropped, err := r.st.PruneRuns(bctx, qk, start, rdb.BulkChunk)
			cancel()
			total += dropped
			if err != nil {
				return total, err
			}
			if seen < rdb.BulkChunk {
				break
			}
			start += seen - dropped
		}
	}
	return total, nil
}

// Sweep reads the holder index of every known queue and requeues the
// takings of holders that are neither registered nor alive: takings a Pass
// cannot reach, which an older version of worqr (one that did not fence
// takes by deadline) or a hand edit can leave, and, on a Redis Cluster, a
// worker that died just after a failover of the registry's master lost its
// registration (a live one puts back what it held itself). Its cost
// follows the number of known queues; Run sweeps once when it first holds
// the lease and then every SweepInterval. Safe to run concurrently with
// passes. Its reads of every known queue are bounded by 6 times
// CallTimeout, its other calls by CallTimeout, as a pass's.
func (r *Reaper) Sweep(ctx context.Context) ([]Recovered, error) {
	wide := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 6*r.callTimeout) }
	kctx, cancel := wide()
	queues, err := r.st.KnownQueues(kctx)
	cancel()
	if err != nil || len(queues) == 0 {
		return nil, err
	}
	qks := make([]rdb.QueueKeys, len(queues))
	for i, q := range queues {
		qks[i] = r.st.Queue(q)
	}
	// A queue whose holder index cannot be read is left out, and reported:
	// the others are swept all the same.
	hctx, cancel := wide()
	holders, herr := r.st.Holders(hctx, qks)
	cancel()
	// Read the registered set after the holders: a worker in it now was
	// registered when its holdings were read (ids are never reused), so
	// a holder missing from it is not a live registration.
	bctx, cancel := r.bounded(ctx)
	registered, err := r.st.Workers(bctx)
	cancel()
	if err != nil {
		return nil, errors.Join(herr, err)
	}
	listed := map[string]bool{}
	for _, w := range registered {
		listed[w] = true
	}
	var ids []string
	seen := map[string]bool{}
	for _, hs := range holders {
		for _, w := range hs {
			if !listed[w] && !seen[w] {
				seen[w] = true
				ids = append(ids, w)
			}
		}
	}
	if len(ids) == 0 {
		return nil, herr
	}
	bctx, cancel = r.bounded(ctx)
	alive, err := r.st.Alive(bctx, ids)
	cancel()
	if err != nil {
		return nil, errors.Join(herr, err)
	}
	orphan := map[string]bool{}
	for i, w := range ids {
		if !alive[i] {
			orphan[w] = true
		}
	}
	var order []rdb.QueueRef
	byQueue := map[rdb.QueueRef][]string{}
	for i, hs := range holders {
		for _, w := range hs {
			if orphan[w] {
				if _, ok := byQueue[queues[i]]; !ok {
					order = append(order, queues[i])
				}
				byQueue[queues[i]] = append(byQueue[queues[i]], w)
			}
		}
	}
	res, err := r.requeue(ctx, order, byQueue)
	return res, errors.Join(herr, err)
}

// MoveBatch is how many due tasks one move script call moves.
const MoveBatch = 500

// movePipe is how many queues' move calls Move sends in one round trip,
// each for up to MoveBatch/movePipe tasks and rdb.TrimDead/movePipe dead
// entries of each kind, so that a round trip does about the work of one
// call alone at most (each call holds Redis a little, and the calls of one
// round trip run back to back). A queue whose call reached either share
// goes on alone, MoveBatch a call.
const movePipe = 16

// Move pushes every due scheduled task (delayed enqueues, retries) of every
// known queue to the back of its queue, in batches, each batch one atomic
// script run against Redis time; it also trims dead sets by age. The calls
// of queues that share a connection (all of them on a single Redis, those
// of one master on a cluster) go movePipe to a round trip: a pass over
// many queues costs a few round trips, not one per queue, and a due task
// waits less for the queues before it. It is safe to run concurrently with
// other movers: each task moves once. It returns how many tasks it moved.
// A queue whose move fails does not stop the others (every mover reads the
// queues in the same order: the queues after it would never be moved while
// it fails): its error is returned with those of the other queues that
// failed. Each round trip is bounded by CallTimeout: one that gets no
// reply fails its queues' move for this time, and the next move goes on.
func (r *Reaper) Move(ctx context.Context) (int, error) {
	kctx, cancel := r.bounded(ctx)
	queues, err := r.st.KnownQueues(kctx)
	cancel()
	if err != nil {
		return 0, err
	}
	total := 0
	var errs []error
	for _, g := range r.st.ConnGroups(queues) {
		for lo := 0; lo < len(g); lo += movePipe {
			if err := ctx.Err(); err != nil {
				return total, errors.Join(append(errs, err)...)
			}
			refs := g[lo:min(lo+movePipe, len(g))]
			qks := make([]rdb.QueueKeys, len(refs))
			for i, q := range refs {
				qks[i] = r.st.Queue(q)
			}
			mctx, cancel := r.bounded(ctx)
			ns, more, es := r.st.MoveEach(mctx, qks, MoveBatch/movePipe, rdb.TrimDead/movePipe)
			cancel()
			for i, qk := range qks {
				total += ns[i]
				if es[i] == nil && more[i] {
					n, err := r.moveRest(ctx, qk)
					total, es[i] = total+n, err
				}
				if es[i] != nil {
					errs = append(errs, fmt.Errorf("move %s: %w", refs[i].Member(), es[i]))
				}
			}
		}
	}
	return total, errors.Join(errs...)
}

// moveRest moves the due tasks of q, MoveBatch a call, until a call moves
// fewer.
func (r *Reaper) moveRest(ctx context.Context, q rdb.QueueKeys) (int, error) {
	total := 0
	for {
		mctx, cancel := r.bounded(ctx)
		n, err := r.st.Move(mctx, q, MoveBatch)
		cancel()
		total += n
		if err != nil || n < MoveBatch {
			return total, err
		}
	}
}
