package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/worqr/worqr-go/defaults"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/startstop"
	"github.com/worqr/worqr-go/worqr"
)

// ErrNotFound is returned by a Source's Head when no job exists yet (and
// may be returned by AtIndex when the job is not there).
var ErrNotFound = errors.New("worqr: consumer: not found")

// Consumer works the jobs of a Source in index order, at most MaxProcessing
// in flight and MaxSearchAhead ahead, and keeps its progress in Redis. It
// is safe for concurrent use. Start it once; Stop it once (more calls wait
// for the first).
type Consumer[J any] struct {
	cfg    Config[J]
	st     *rdb.Store
	ck     rdb.ConsumerKeys
	limits rdb.ConsumerLimits
	worker *worqr.Worker
	log    *slog.Logger

	kick chan struct{} // cap 1: a check is due (Check coalesces here)

	notifyMu sync.Mutex
	notified uint64 // the last index given to OnProcessed

	life       startstop.Machine // Start, Stop, Stopped
	loopCancel context.CancelFunc
	loopDone   chan struct{}
}

// Progress is a consumer's progress as Redis holds it.
type Progress struct {
	// Processed is the processed index: every job at an index below it is
	// done, and it is the lowest index not known to be done. It never
	// goes down.
	Processed uint64
	// Next is the next index to dispatch: the jobs from Processed to
	// Next-1 are dispatched, Finished of them are done.
	Next     uint64
	Finished int
}

// InFlight is the number of dispatched jobs not done (running, waiting to
// run or waiting for a retry).
func (p Progress) InFlight() int { return int(p.Next-p.Processed) - p.Finished }

// New validates cfg and returns a consumer that is not yet started. pool
// is the Redis connection source, as worqr.NewWorker takes it.
func New[J any](pool worqr.ConnGetter, cfg *Config[J]) (*Consumer[J], error) {
	if pool == nil {
		return nil, invalid("pool", "is nil")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	con := &Consumer[J]{
		cfg:    c,
		limits: rdb.ConsumerLimits{First: c.First, MaxProcessing: c.MaxProcessing, MaxSearchAhead: c.MaxSearchAhead},
		kick:   make(chan struct{}, 1),
		log:    c.Worker.Logger,
	}
	if con.log == nil {
		con.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	wc := c.Worker
	wc.Logger = con.log
	wc.Queues = map[string]worqr.QueueConfig{QueueName(c.Name): {
		Handler:     worqr.HandlerFunc(con.handle),
		Concurrency: c.Concurrency,
		// Never dead for failing: a job is retried until it is done.
		MaxAttempts: math.MaxInt,
		Backoff:     c.Backoff,
		Timeout:     c.Timeout,
		MaxCrashes:  c.MaxCrashes,
	}}
	if con.worker, err = worqr.NewWorker(pool, &wc); err != nil {
		return nil, err
	}
	ns := wc.Namespace
	if ns == "" {
		ns = defaults.Namespace
	}
	con.st = rdb.NewStore(pool, ns)
	if wc.Replicas > 0 {
		// A record waits for the replicas as the worker's ends do.
		rt := wc.ReplicaTimeout
		if rt == 0 {
			rt = defaults.ReplicaTimeout
		}
		con.st.SetReplicas(wc.Replicas, rt)
	}
	con.ck = rdb.NewKeys(ns).Consumer(QueueName(c.Name))
	return con, nil
}

// Name returns the consumer's name.
func (c *Consumer[J]) Name() string { return c.cfg.Name }

// Worker returns the worqr worker that runs the consumer's jobs (its id,
// Stopped).
func (c *Consumer[J]) Worker() *worqr.Worker { return c.worker }

// Start registers the consumer's worker, starts working jobs and checks
// for new ones at once. It returns once registered (ctx bounds the
// registration); the work goes on until Stop, or until ctx ends (then it
// stops as Stop does with no grace period). Calling Start twice, or after
// Stop (even a Stop before any Start), is an error; a Start that failed
// leaves the consumer startable.
func (c *Consumer[J]) Start(ctx context.Context) error {
	return c.life.Start("consumer", func() error { return c.start(ctx) })
}

func (c *Consumer[J]) start(ctx context.Context) error {
	if err := c.worker.Start(ctx); err != nil {
		return err
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.loopCancel = cancel
	c.loopDone = make(chan struct{})
	go func() {
		defer close(c.loopDone)
		c.loop(lctx)
	}()
	go func() {
		// The worker also stops on its own, when ctx ends: the consumer
		// follows it (a Stop that came first has done so already, and
		// this one returns at once).
		<-c.worker.Stopped()
		_ = c.life.Stop(func() error { return c.stop(context.Background()) })
	}()
	c.Check()
	return nil
}

// Stop stops checking for jobs, then stops the worker: running jobs may
// finish until ctx ends; those still running then are cancelled and their
// tasks put back, to run again (in this process after a restart, or in
// another). It returns ctx.Err() when the grace period ran out. Calling it
// again waits for the first call and returns its result. A Stop before
// Start is final: Start is then refused.
func (c *Consumer[J]) Stop(ctx context.Context) error {
	err := c.life.Stop(func() error { return c.stop(ctx) })
	if !c.life.Started() {
		// Never started (or its Start failed): nothing runs. The
		// consumer is stopped for good, and so is its worker: a Start
		// of either is refused.
		return c.worker.Stop(ctx)
	}
	return err
}

// stop is Stop after a Start, run once: by Stop, or when the worker
// stopped on its own.
func (c *Consumer[J]) stop(ctx context.Context) error {
	c.loopCancel()
	<-c.loopDone
	return c.worker.Stop(ctx)
}

// Stopped is closed once the consumer has stopped: Stop returned, or the
// context given to Start ended and its worker has stopped; or a Stop came
// before any Start.
func (c *Consumer[J]) Stopped() <-chan struct{} { return c.life.Stopped() }

// Check tells the consumer that new jobs may exist. It returns at once; the
// consumer reads the Source's head and dispatches what the limits allow.
// Calls that come while a check waits to run are one check: however many
// goroutines call it, a check runs at most once after the call.
func (c *Consumer[J]) Check() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Progress reads the consumer's progress from Redis.
func (c *Consumer[J]) Progress(ctx context.Context) (Progress, error) {
	p, err := c.st.ReadProgress(ctx, c.ck, c.cfg.First)
	return Progress{Processed: p.Processed, Next: p.Next, Finished: p.Finished}, err
}

// ProcessedIndex reads the processed index from Redis: every job at an
// index below it is done.
func (c *Consumer[J]) ProcessedIndex(ctx context.Context) (uint64, error) {
	p, err := c.Progress(ctx)
	return p.Processed, err
}

// loop runs a check for each kick and each CheckInterval.
func (c *Consumer[J]) loop(ctx context.Context) {
	var tick <-chan time.Time
	if c.cfg.CheckInterval > 0 {
		t := time.NewTicker(c.cfg.CheckInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.kick:
		case <-tick:
		}
		if err := c.check(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("consumer: check failed (retried on the next check)", "consumer", c.cfg.Name, "err", err)
			if c.cfg.OnError != nil {
				c.cfg.OnError(err)
			}
		}
	}
}

// check reads the head and dispatches: one Source.Head call and one script
// call (more only past rdb.ConsumerStep indexes).
func (c *Consumer[J]) check(ctx context.Context) error {
	head, err := c.cfg.Source.Head(ctx)
	has := true
	switch {
	case errors.Is(err, ErrNotFound):
		has = false
	case err != nil:
		return fmt.Errorf("worqr: consumer %s: Head: %w", c.cfg.Name, err)
	case head > MaxIndex:
		return fmt.Errorf("worqr: consumer %s: Head returned %d, above MaxIndex (%d)", c.cfg.Name, head, uint64(MaxIndex))
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, _, err := c.st.Dispatch(dctx, c.ck, c.limits, head, has); err != nil {
		return fmt.Errorf("worqr: consumer %s: dispatch: %w", c.cfg.Name, err)
	}
	return nil
}

// handle runs one index's task: skipped when the index is already done (a
// run again after a crash that followed the record), else the job is read,
// processed and recorded done while this run owns the taking.
func (c *Consumer[J]) handle(ctx context.Context, t *worqr.Task) error {
	i, err := strconv.ParseUint(string(t.Payload), 10, 64)
	if err != nil || strconv.FormatUint(i, 10) != t.ID {
		return worqr.SkipRetry(fmt.Errorf("worqr: consumer %s: task %s is not an index task (payload %q)", c.cfg.Name, t.ID, t.Payload))
	}
	done, err := c.st.IndexDone(ctx, c.ck, c.cfg.First, i)
	if err != nil {
		return fmt.Errorf("worqr: consumer %s: job %d: %w", c.cfg.Name, i, err)
	}
	if done {
		c.Check()
		return nil
	}
	job, err := c.cfg.Source.AtIndex(ctx, i)
	if err != nil {
		return c.attemptError(i, "AtIndex: ", err)
	}
	if err := c.cfg.Process(ctx, i, job); err != nil {
		return c.attemptError(i, "", err)
	}
	return c.markDone(ctx, t, i)
}

// attemptError is the error a failed attempt returns: the job's error,
// except that SkipRetry is not honoured (a skipped job would stop the
// progress for good).
func (c *Consumer[J]) attemptError(i uint64, what string, err error) error {
	if errors.Is(err, worqr.ErrSkipRetry) {
		c.log.Warn("consumer: SkipRetry ignored, the job will be retried", "consumer", c.cfg.Name, "index", i)
		return fmt.Errorf("worqr: consumer %s: job %d: %s%s", c.cfg.Name, i, what, err.Error())
	}
	return fmt.Errorf("worqr: consumer %s: job %d: %s%w", c.cfg.Name, i, what, err)
}

// markDone records index i done, retrying a call that failed on the wire
// (recording is idempotent). The record does not wait on ctx: a job done
// just as its attempt times out is still done.
func (c *Consumer[J]) markDone(ctx context.Context, t *worqr.Task, i uint64) error {
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	delay := 20 * time.Millisecond
	for {
		res, processed, err := c.st.MarkDone(mctx, c.ck, c.cfg.First, t.WorkerID(), t.PID(), t.ID, i)
		switch {
		case err == nil && res == rdb.MarkLost:
			// Our keepalive was lost and the task went back: the run
			// that owns it now records it. Nothing changed.
			return worqr.ErrTaskLost
		case errors.Is(err, rdb.ErrNotReplicated) && res != rdb.MarkLost:
			// Recorded on the primary, not on enough replicas: a
			// failover may take it back, so OnProcessed is not told
			// (a later record that the replicas have tells it).
			c.log.Warn("consumer: record not acknowledged by enough replicas", "consumer", c.cfg.Name, "index", i, "err", err)
			c.Check()
			return nil
		case errors.Is(err, rdb.ErrNotReplicated):
			return worqr.ErrTaskLost
		case err == nil && res == rdb.MarkUnknown:
			c.log.Warn("consumer: index done but never dispatched (progress rewound?)", "consumer", c.cfg.Name, "index", i)
			return nil
		case err == nil:
			if processed > i && c.cfg.OnProcessed != nil {
				c.notify(processed)
			}
			c.Check()
			return nil
		case rdb.IsReplyError(err):
			return fmt.Errorf("worqr: consumer %s: job %d: record: %w", c.cfg.Name, i, err)
		}
		timer := time.NewTimer(delay)
		select {
		case <-mctx.Done():
			timer.Stop()
			return fmt.Errorf("worqr: consumer %s: job %d: record: %w", c.cfg.Name, i, err)
		case <-timer.C:
		}
		delay = min(2*delay, time.Second)
	}
}

// notify calls OnProcessed with p unless it was called with p or more
// already: the calls of one process go up, one at a time.
func (c *Consumer[J]) notify(p uint64) {
	c.notifyMu.Lock()
	defer c.notifyMu.Unlock()
	if p > c.notified {
		c.notified = p
		c.cfg.OnProcessed(p)
	}
}
