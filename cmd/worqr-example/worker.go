package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/worqr/worqr-go/defaults"

	"github.com/worqr/worqr-go/worqr"
)

const workerHead = `Usage: worqr-example worker [flags]

Runs one worqr worker serving the given queues until SIGINT or SIGTERM. Each
handler sleeps --work-time (returning early when its context ends: cancel,
lost keepalive, stop). On a signal the worker stops taking, lets running
handlers finish for up to --grace, puts back what still runs, deregisters and
exits 0. A second signal kills it at once.

Stdout carries one line per event, written as it happens (logs go to stderr):
  registered <worker_id>
  took <queue> <task_id> <pid> <attempt> <crashes>
  done <queue> <task_id> <pid>
  cancelled <queue> <task_id>
  lost <queue> <task_id> <pid>
  keepalive_lost <worker_id>
  recovered <queue> <count> <worker_id>[,<worker_id>...]
  retry <queue> <task_id>           (a failed attempt, scheduled again)
  dead <queue> <task_id>            (moved to the dead set: an accepted end)
<pid> names one taking: a task taken again after a crash has a new pid, so a
dead or cut-off worker's lines are told apart from its successor's.
<attempt> is 1 plus the failed attempts, <crashes> the earlier runs lost
because their worker died. recovered names the dead workers whose tasks a
peer put back at the front of the queue. With --timestamps every line starts
with the time it was written, RFC3339Nano in UTC, then the same words:
  2025-01-02T15:04:05.123456789Z took <queue> <task_id> <pid> <attempt> <crashes>

With --key-batch N, tasks enqueued with a key (enqueue --key) run in batches
of up to N tasks of one key, in order: one took line per task, in the batch's order, one --work-time
(and --fail-first counted in the batch's attempts) per batch, and the
batch's tasks end together.

With --flow it also serves the built-in flow guild-access (start runs with
'worqr-example flow'): access-check -> update-membership -> manage-reward,
which fans out one child per platform into the child queues discord and
telegram -> notify; runs are indexed by userId. Stage handlers sleep
--work-time, child handlers --child-work-time, each returning early when its
context ends. With --flow, --queues may be empty (serve the flow only). The
flow adds these lines (a stage's took line has "-" for the pid and the
crashes, which stage handlers do not see; done after the last stage means the
run is done):
  took <stage> <run_id> - <attempt> -
  forwarded <stage> <run_id>        (the stage ended; the run moved on)
  fanned_out <stage> <run_id>       (the stage ended by fanning out children)
`

func runWorker(ctx context.Context, args []string, io stdio) error {
	fs := newFlagSet("worker")
	var c common
	c.register(fs, io.getenv, true)
	queueList := fs.String("queues", "default", "comma-separated queues to serve")
	concurrency := fs.Int("concurrency", 4, "handlers per queue (at least 1)")
	workTime := fs.Duration("work-time", time.Second, "how long each handler sleeps")
	grace := fs.Duration("grace", 10*time.Second, "on SIGINT/SIGTERM, how long running handlers may finish before their tasks are put back")
	failFirst := fs.Int("fail-first", 0, "the handler returns an error on the first N attempts of each task (to exercise retries)")
	maxAttempts := fs.Int("max-attempts", 0, "failed attempts before a task goes to the dead set (0: library default, 25)")
	maxCrashes := fs.Int("max-crashes", 0, "worker deaths one task may cause before it goes to the dead set (0: library default, 5; negative: no limit)")
	retryDelay := fs.Duration("retry-delay", 0, "fixed delay before a retry (0: the library's exponential backoff); a retry then waits in the scheduled set until the next pass of the mover, about once a second")
	retention := fs.Duration("retention", 0, "how long done and cancelled tasks stay readable in Redis (0: deleted at once)")
	serveFlow := fs.Bool("flow", false, "also serve the built-in flow guild-access (see above)")
	childWorkTime := fs.Duration("child-work-time", 0, "with --flow: how long each child handler sleeps (default: --work-time)")
	timestamps := fs.Bool("timestamps", false, "start every stdout line with the time it was written (RFC3339Nano, UTC)")
	keyBatch := fs.Int("key-batch", 0, "run tasks enqueued with a key in batches of up to N tasks of one key (one took line each, one --work-time per batch; 0: one task per handler call)")
	if err := parse(fs, args, io.out, workerHead, "\nEnvironment:\n"+envHelp(true, true)); err != nil {
		return err
	}
	if err := c.check(true); err != nil {
		return err
	}
	var queues []string
	if !*serveFlow || strings.TrimSpace(*queueList) != "" {
		var err error
		if queues, err = parseQueues("--queues", *queueList); err != nil {
			return err
		}
	}
	if *concurrency < 1 {
		return usagef("--concurrency (%d) must be at least 1", *concurrency)
	}
	if *workTime < 0 {
		return usagef("--work-time (%s) must not be negative", *workTime)
	}
	if *childWorkTime < 0 {
		return usagef("--child-work-time (%s) must not be negative", *childWorkTime)
	}
	if !flagSet(fs, "child-work-time") {
		*childWorkTime = *workTime
	}
	if *grace < 0 {
		return usagef("--grace (%s) must not be negative", *grace)
	}
	if *failFirst < 0 {
		return usagef("--fail-first (%d) must not be negative", *failFirst)
	}
	if *maxAttempts < 0 {
		return usagef("--max-attempts (%d) must not be negative", *maxAttempts)
	}
	if *retention < 0 {
		return usagef("--retention (%s) must not be negative", *retention)
	}
	if *retryDelay < 0 {
		return usagef("--retry-delay (%s) must not be negative", *retryDelay)
	}
	if *keyBatch < 0 || *keyBatch > defaults.MaxKeyBatch {
		return usagef("--key-batch (%d) must be between 0 and %d", *keyBatch, defaults.MaxKeyBatch)
	}
	tm, err := readTimings(io.getenv)
	if err != nil {
		return err
	}
	rep, err := readReplication(io.getenv)
	if err != nil {
		return err
	}
	zl, log, err := newLogger(io.err, io.getenv)
	if err != nil {
		return err
	}
	defer zl.Sync() //nolint:errcheck // stderr

	out := &lineWriter{w: io.out}
	if *timestamps {
		out.now = time.Now
	}
	work := func(ctx context.Context, attempt int) error {
		if attempt <= *failFirst {
			return fmt.Errorf("failing attempt %d of %d on purpose (--fail-first)", attempt, *failFirst)
		}
		timer := time.NewTimer(*workTime)
		defer timer.Stop()
		select {
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	handler := worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
		if err := out.line(tookLine(t)...); err != nil {
			log.Warn("worker: stdout write failed", "err", err)
		}
		return work(ctx, t.Attempt)
	})
	cfg := worqr.WorkerConfig{
		Config: worqr.Config{Namespace: c.namespace, Logger: log},
		Queues: map[string]worqr.QueueConfig{},
		OnEvent: func(e worqr.Event) {
			words := eventLine(e)
			if words == nil {
				words = flowEventLine(e)
			}
			if words != nil {
				if err := out.line(words...); err != nil {
					log.Warn("worker: stdout write failed", "err", err)
				}
			}
			logEvent(log, e)
		},
	}
	var backoff func(int, error) time.Duration
	if *retryDelay > 0 {
		d := *retryDelay
		backoff = func(int, error) time.Duration { return d }
	}
	for _, q := range queues {
		qc := worqr.QueueConfig{Handler: handler, Concurrency: *concurrency,
			MaxAttempts: *maxAttempts, MaxCrashes: *maxCrashes, Backoff: backoff, Retention: *retention}
		if *keyBatch > 0 {
			qc.Handler, qc.KeyBatch = nil, *keyBatch
			qc.BatchHandler = worqr.BatchHandlerFunc(func(ctx context.Context, b *worqr.Batch) error {
				for _, t := range b.Tasks {
					if err := out.line(tookLine(t)...); err != nil {
						log.Warn("worker: stdout write failed", "err", err)
					}
				}
				return work(ctx, b.Attempt) // once for the batch
			})
		}
		cfg.Queues[q] = qc
	}
	if *serveFlow {
		cfg.Flows = []*worqr.Flow{newAccessFlow(accessFlowOpts{
			concurrency: *concurrency, workTime: *workTime, childWorkTime: *childWorkTime,
			failFirst: *failFirst,
			queue: worqr.QueueConfig{MaxAttempts: *maxAttempts, MaxCrashes: *maxCrashes,
				Backoff: backoff, Retention: *retention},
			onStage: func(r *worqr.Run) {
				if err := out.line(stageTookLine(r)...); err != nil {
					log.Warn("worker: stdout write failed", "err", err)
				}
			},
			onChild: func(t *worqr.Task) {
				if err := out.line(tookLine(t)...); err != nil {
					log.Warn("worker: stdout write failed", "err", err)
				}
			},
		})}
	}
	tm.apply(&cfg)
	rep.apply(&cfg.Config)
	pool, closePool, err := c.openPool() // a URL's pool dials nothing yet
	if err != nil {
		return err
	}
	defer closePool()
	w, err := worqr.NewWorker(pool, &cfg)
	if err != nil {
		return workerConfigError(err)
	}

	sigCtx, stopSignals := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stopSignals()
	if err := ping(sigCtx, pool, c.namespace, c.where()); err != nil {
		return err
	}
	// The worker's life is not sigCtx: a Worker whose Start context ends
	// stops at once, with no grace. It ends by the Stop below, or when run
	// returns.
	life, endLife := context.WithCancel(context.WithoutCancel(ctx))
	defer endLife()
	if err := w.Start(life); err != nil {
		return err
	}
	log.Info("worker: serving", "queues", queues, "flow", *serveFlow, "concurrency", *concurrency,
		"work_time", *workTime, "namespace", c.namespace)

	<-sigCtx.Done()
	stopSignals() // from now on a second signal kills the process
	log.Info("worker: stopping", "grace", *grace)
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), *grace)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		if !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("stop: %w", err)
		}
		log.Warn("worker: grace period over; running tasks were put back", "grace", *grace)
	}
	log.Info("worker: stopped")
	return nil
}

// logEvent logs the events the line protocol does not carry, and the errors
// of those it does.
func logEvent(log *slog.Logger, e worqr.Event) {
	switch e.Kind {
	case worqr.EventDone:
		if e.Err != nil {
			log.Warn("worker: handler failed", "queue", e.Queue, "task_id", e.TaskID, "err", e.Err)
		}
	case worqr.EventGivenBack:
		log.Info("worker: task given back", "queue", e.Queue, "task_id", e.TaskID)
	case worqr.EventRetry:
		log.Info("worker: attempt failed, retry scheduled", "queue", e.Queue, "task_id", e.TaskID, "err", e.Err)
	case worqr.EventDead:
		log.Warn("worker: task moved to the dead set", "queue", e.Queue, "task_id", e.TaskID, "err", e.Err)
	case worqr.EventStopRequeued:
		log.Info("worker: stop put tasks back", "queue", e.Queue, "count", e.Count)
	case worqr.EventError:
		log.Warn("worker: background step failed", "queue", e.Queue, "task_id", e.TaskID, "err", e.Err)
	case worqr.EventRecovered:
		log.Info("worker: recovered tasks of dead workers", "queue", e.Queue, "count", e.Count, "dead_workers", e.DeadWorkers)
	}
}
