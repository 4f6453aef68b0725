package worqr

import (
	"context"
	"errors"
	"fmt"

	"github.com/worqr/worqr-go/heartbeat"
	"github.com/worqr/worqr-go/internal/rdb"
)

// Batches per key (QueueConfig.KeyBatch, after Lowkiq's batch_size): a
// BatchHandler gets a key's head together with up to KeyBatch-1 tasks of
// the same key waiting behind it, in enqueue order, taken in one atomic
// step; they end together, in one atomic step.

// Batch is what a BatchHandler runs: tasks of one key, in enqueue order.
// Tasks[0] is the key's head, the oldest; the others were waiting behind
// it. A task enqueued without a key comes alone, with Key "".
type Batch struct {
	Key   string
	Tasks []*Task
	// Attempt is the highest Attempt of the tasks: 1 on a batch none of
	// whose tasks failed before. The batch goes dead (see BatchHandler)
	// once it reaches the head's max attempts.
	Attempt int
}

// BatchHandler runs batches of a queue with QueueConfig.KeyBatch. The
// context ends as a Handler's does, and also when a cancel is asked for any
// task of the batch.
//
// What it returns ends every task of the batch, together and atomically:
//   - nil: every task is done (each records its own Task.SetResult; a task
//     whose cancel was asked meanwhile ends as cancelled);
//   - an error: the batch is retried as a unit, the key's head kept: the
//     tasks behind the head go back to the front of the key's list, in
//     order, the head waits out the backoff (QueueConfig.Backoff of
//     Batch.Attempt), and each task counts a failed attempt;
//   - when the batch is out of attempts (Batch.Attempt reaches the head's
//     max attempts) or the error is SkipRetry: Lowkiq's rule, the head (the
//     oldest task) goes to the dead set and blocks its key (or lets it
//     move on: KeyPolicy.MoveOnDead), while the tasks behind it go back to
//     the front of the key's list with their counters reset;
//   - ErrGiveBack: the batch goes back whole (the head to the front of the
//     queue), nothing counted; RateLimited(d): the same after d.
//
// A cancel asked for a task of a running batch ends the batch's context;
// when the handler then returns an error, that task ends as cancelled and
// the others go back as for ErrGiveBack.
//
// A worker that dies mid-batch gives the whole batch back the same way
// (the head to the front of the queue, within a reaper pass; one crash,
// counted on the head); its late end changes nothing.
type BatchHandler interface {
	HandleBatch(ctx context.Context, b *Batch) error
}

type batchCtxKey struct{}

// BatchOf returns the Batch that the middleware of a BatchHandler's queue
// wraps (the Task it is given is the batch's head, Tasks[0]), or nil when
// ctx is not that of a batch. A middleware that changes a task's payload
// (a trace envelope) does so for every task of the batch.
func BatchOf(ctx context.Context) *Batch {
	b, _ := ctx.Value(batchCtxKey{}).(*Batch)
	return b
}

// BatchHandlerFunc adapts a function to BatchHandler.
type BatchHandlerFunc func(ctx context.Context, b *Batch) error

// HandleBatch calls f.
func (f BatchHandlerFunc) HandleBatch(ctx context.Context, b *Batch) error { return f(ctx, b) }

// HandleBatchOf returns a BatchHandler that decodes the payload of each
// task of a batch into a T with codec (encoding/json when nil) and calls fn
// with them, in the batch's order (vs[i] is b.Tasks[i]'s Task.Payload, the
// latest of a merged task's payloads). A payload that does not decode never
// will: the batch fails with SkipRetry (its head goes dead, see
// BatchHandler) and fn is not called.
func HandleBatchOf[T any](fn func(ctx context.Context, b *Batch, vs []T) error, codec Codec) BatchHandler {
	if codec == nil {
		codec = jsonCodec{}
	}
	return BatchHandlerFunc(func(ctx context.Context, b *Batch) error {
		vs := make([]T, len(b.Tasks))
		for i, t := range b.Tasks {
			if err := codec.Unmarshal(t.Payload, &vs[i]); err != nil {
				return SkipRetry(fmt.Errorf("worqr: payload of task %s does not decode into %T: %w", t.ID, vs[i], err))
			}
		}
		return fn(ctx, b, vs)
	})
}

// batchJob is a head's job with the tasks taken behind it (Taken.Head).
type batchJob struct {
	taken []rdb.Taken
	tasks []*Task
	held  []*holding // each taking's record, in the order of tasks
}

// runBatch runs a batch of q (the head's taking first) through q's
// BatchHandler, wrapped in the worker's middleware (which sees the head's
// Task), and ends it through the queue's one end path.
func (w *Worker) runBatch(s *heartbeat.Session, q *queueRunner, b *batchJob) {
	defer func() {
		for i, t := range b.tasks {
			q.unhold(t.pid, b.held[i])
		}
		q.busy.Add(-1)
		q.slots.busy.Add(-1)
		q.slotFreed()
		w.handlers.Done()
	}()
	head, headTaken := b.tasks[0], b.taken[0]
	if headTaken.Expired && len(b.tasks) == 1 {
		if !q.returned(b.held) {
			w.complete(s, q, b.tasks, q.NotRun(head.worker, headTaken), nil)
		}
		return
	}
	if !w.usable(s) {
		// Waited for this goroutine past a freeze or the session's loss
		// (see slot): not run here.
		for i, t := range b.tasks {
			w.notRun(s, q, t.pid, b.held[i])
		}
		return
	}
	batch := &Batch{Key: head.Key, Tasks: b.tasks}
	for _, t := range b.tasks {
		batch.Attempt = max(batch.Attempt, t.Attempt)
	}
	hctx, cancel := context.WithCancelCause(s.Context())
	if timeout := q.Timeout(headTaken); timeout > 0 {
		var stop context.CancelFunc
		hctx, stop = context.WithTimeoutCause(hctx, timeout, &TimeoutError{Timeout: timeout})
		defer stop()
	}
	if !q.started(b.held, cancel) {
		// A taking of the batch was found lost (a failover) before the
		// handler started. The takes of one batch are one script call,
		// replicated as one transaction: they are lost together.
		cancel(ErrLostInFailover)
		q.returned(b.held)
		return
	}
	me := &inflight{cancel: cancel, sess: s}
	w.runMu.Lock()
	for _, t := range b.tasks {
		w.running[t.ID] = me // a cancel of any task stops the batch
	}
	w.runMu.Unlock()
	for _, t := range b.tasks {
		w.emit(Event{Kind: EventStarted, Queue: q.Member, TaskID: t.ID, PID: t.pid, WorkerID: s.ID()})
	}
	// finish ends the batch as the handler said, once it has run.
	finish := func(err error) {
		var te *TimeoutError
		if err != nil && errors.As(context.Cause(hctx), &te) {
			err = fmt.Errorf("%w: %w", te, err)
		}
		w.runMu.Lock()
		for _, t := range b.tasks {
			if w.running[t.ID] == me {
				delete(w.running, t.ID)
			}
		}
		w.runMu.Unlock()
		cancel(nil)
		if q.returned(b.held) {
			return // lost in a failover: no end is sent (see run)
		}
		// The batch's attempt decides retry or dead, against the head's max.
		at := headTaken
		at.Attempt = batch.Attempt
		asked := err
		if err == nil {
			if rerr := w.checkResults(b.tasks); rerr != nil {
				// Results Redis is not to hold: nothing is written; the
				// head goes to the dead set with the reason (see run).
				err = SkipRetry(rerr)
				asked = err
			}
		}
		if err != nil && errors.Is(context.Cause(hctx), ErrTaskCancelled) {
			// A cancel asked for one of its tasks stopped the batch: that task
			// ends as cancelled, the others go back as they were, nothing
			// counted (they did not fail).
			asked = fmt.Errorf("%w: %w", ErrGiveBack, err)
		}
		e := q.Decide(head.worker, at, outcomeOf(asked, head.result), w.cfg.Logger)
		if len(b.tasks) > 1 {
			ms := make([]rdb.Member, len(b.tasks)-1)
			for i, t := range b.tasks[1:] {
				ms[i] = rdb.Member{PID: t.pid, ID: t.ID, Result: t.result}
			}
			e = e.WithBatch(ms)
		}
		w.complete(s, q, b.tasks, e, err)
	}
	exited := true
	defer func() {
		if exited {
			// The handler ended this goroutine (runtime.Goexit): see run.
			finish(ErrHandlerExited)
			go w.serve(q)
		}
	}()
	h := Chain(HandlerFunc(func(ctx context.Context, _ *Task) error {
		return q.cfg.BatchHandler.HandleBatch(ctx, batch)
	}), w.cfg.Middleware...)
	err := callHandler(context.WithValue(hctx, batchCtxKey{}, batch), h, head)
	exited = false
	finish(err)
}
