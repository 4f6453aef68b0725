package worqr

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/worqr/worqr-go/heartbeat"
	"github.com/worqr/worqr-go/internal/engine"
	"github.com/worqr/worqr-go/internal/rdb"
)

// job is one taking handed to a queue's handler goroutines.
type job struct {
	s     *heartbeat.Session
	taken rdb.Taken
	task  *Task
	h     *holding  // its record in the queue's held map
	batch *batchJob // a queue with KeyBatch: the batch this taking heads
	// ticket is its place in the launch order, for a queue that reads
	// ahead (see turnstile).
	ticket uint64
}

// serve is one of a queue's long-lived handler goroutines (concurrency of
// them): reusing goroutines saves a new stack per task.
func (w *Worker) serve(q *queueRunner) {
	for j := range q.work {
		if j.batch != nil {
			w.runBatch(j.s, q, j.batch)
			continue
		}
		w.run(q, j)
	}
}

func (w *Worker) run(q *queueRunner, j job) {
	s, taken, t, h := j.s, j.taken, j.task, j.h
	hs := []*holding{h}
	defer func() {
		q.unhold(t.pid, h)
		q.busy.Add(-1)
		q.slots.busy.Add(-1)
		q.slotFreed()
		w.handlers.Done()
	}()
	if taken.Expired {
		// Past its deadline when taken (Redis time), or cancelled while it
		// waited: never run, ended as expired (or cancelled) through the
		// queue's one end path.
		q.skipSlot(j.ticket)
		if !q.returned(hs) {
			w.complete(s, q, []*Task{t}, q.NotRun(t.worker, taken), nil)
		}
		return
	}
	if !w.slot(q, j) {
		w.notRun(s, q, t.pid, h)
		return
	}
	hctx, cancel := context.WithCancelCause(s.Context())
	if timeout := q.Timeout(taken); timeout > 0 {
		var stop context.CancelFunc
		hctx, stop = context.WithTimeoutCause(hctx, timeout, &TimeoutError{Timeout: timeout})
		defer stop()
	}
	if !q.started(hs, cancel) {
		// Found lost (a failover) before its handler started.
		q.unslot()
		cancel(ErrLostInFailover)
		q.returned(hs)
		return
	}
	me := &inflight{cancel: cancel, sess: s}
	w.runMu.Lock()
	w.running[t.ID] = me
	w.runMu.Unlock()
	w.emit(Event{Kind: EventStarted, Queue: q.Member, TaskID: t.ID, PID: t.pid, WorkerID: s.ID()})

	// fan: a taking of a stage with branches whose run is not joined
	// there yet fans them out instead of running the stage's handler.
	var fan bool
	// finish ends the taking as the handler said, once it has run.
	finish := func(err error, res *StageResult) {
		// The slot is free for a task taken ahead while this one's end is
		// on its way.
		q.unslot()
		var te *TimeoutError
		if err != nil && errors.As(context.Cause(hctx), &te) {
			err = fmt.Errorf("%w: %w", te, err)
		}

		w.runMu.Lock()
		if w.running[t.ID] == me {
			delete(w.running, t.ID)
		}
		w.runMu.Unlock()
		cancel(nil)
		if q.returned(hs) {
			// Lost in a failover (markLost reported it): no end is sent,
			// Redis would refuse it (or, the pid handed out again by the new
			// primary, end another taking).
			return
		}
		if err == nil {
			if rerr := w.checkResults([]*Task{t}); rerr != nil {
				// A result Redis is not to hold: nothing is written; the
				// task goes to the dead set with the reason.
				err = SkipRetry(rerr)
			}
		}
		e := q.Decide(t.worker, taken, outcomeOf(err, t.result), w.cfg.Logger)
		if fan && e.Ask == rdb.AskDone {
			e = q.FanEnding(t.worker, taken, w.cfg.Logger)
		} else if q.branch != nil && e.Ask == rdb.AskDone {
			if perr := w.planBranch(q, res, &e); perr != nil {
				err = SkipRetry(perr)
				e = q.Decide(t.worker, taken, outcomeOf(err, t.result), w.cfg.Logger)
			}
		} else if q.Kind == rdb.KindStage && e.Ask == rdb.AskDone {
			if perr := w.planStage(q, res, &e); perr != nil {
				// A result the flow cannot record: nothing is written; the
				// stage goes to the dead set with the reason.
				err = SkipRetry(perr)
				e = q.Decide(t.worker, taken, outcomeOf(err, t.result), w.cfg.Logger)
			}
		}
		w.complete(s, q, []*Task{t}, e, err)
	}
	began := q.began()
	exited := true
	defer func() {
		if exited {
			// The handler ended this goroutine (runtime.Goexit) instead of
			// returning: its taking ends as a failed attempt, and the queue
			// gets a handler goroutine in place of this one.
			finish(ErrHandlerExited, nil)
			go w.serve(q)
		}
	}()
	var (
		err error
		res *StageResult
	)
	switch {
	case q.Kind == rdb.KindStage:
		if taken.RunUnread > 0 {
			// The run was too big to come with the take (it keeps every
			// child it fanned out): read in steps. Failing that, the
			// taking goes back to the front of the queue, no attempt
			// counted.
			if taken.Run, err = w.st.ReadRun(hctx, q.QK, t.ID); err != nil {
				err = fmt.Errorf("%w: reading run %s: %w", ErrGiveBack, t.ID, err)
			}
		}
		if fan = err == nil && q.Branching(taken); err == nil && !fan {
			res, err = callStage(hctx, q.stageHandler, newRun(q, taken, t))
		}
	case q.branch != nil:
		var r *Run
		if r, err = w.branchRun(hctx, q, taken, t); err == nil {
			res, err = callStage(hctx, q.branch, r)
		}
	default:
		err = callHandler(hctx, q.handler, t)
	}
	exited = false
	q.ranSince(began)
	finish(err, res)
}

func newRun(q *queueRunner, taken rdb.Taken, t *Task) *Run {
	r := rdb.DecodeRun(t.ID, taken.Run)
	if r == nil {
		r = &rdb.RunRecord{State: map[string]string{}}
	}
	return &Run{ID: t.ID, Flow: q.flow.Name, Stage: q.name, State: r.State, Children: childResults(r.Children),
		Attempt: t.Attempt, Meta: engine.DecodeMeta(r.Meta)}
}

// branchRun reads the run of a branch's taking (Stage.Branches) as its
// handler sees it: the run's state now, its children, its metadata; Stage
// is the branch's name. A run that is gone, or no longer running, is not
// run for: the taking ends for good (its end finds the run ended and
// drops it). A failed read gives the taking back, no attempt counted.
func (w *Worker) branchRun(ctx context.Context, q *queueRunner, taken rdb.Taken, t *Task) (*Run, error) {
	r, err := engine.ReadBranchRun(ctx, w.st, &q.Queue, taken)
	if errors.Is(err, engine.ErrRunNotRunning) {
		return nil, SkipRetry(fmt.Errorf("worqr: %w", err))
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrGiveBack, err)
	}
	return &Run{ID: taken.Parent, Flow: q.flow.Name, Stage: q.name, State: r.State, Children: childResults(r.Children),
		Attempt: t.Attempt, Meta: engine.DecodeMeta(r.Meta)}, nil
}

// planBranch checks a branch's result and adds the state fields its end
// merges into the run: a branch sets Fields only.
func (w *Worker) planBranch(q *queueRunner, res *StageResult, e *rdb.Ending) error {
	if res == nil {
		return nil
	}
	rule := "does not apply to a branch (Stage.Branches[%q]): its result sets Fields only"
	switch {
	case len(res.Children) > 0:
		return invalid("StageResult.Children", rule, q.name)
	case res.Sleep != 0:
		return invalid("StageResult.Sleep", rule, q.name)
	case res.Again:
		return invalid("StageResult.Again", rule, q.name)
	case res.Await != "":
		return invalid("StageResult.Await", rule, q.name)
	}
	field := fmt.Sprintf("StageResult.Fields of branch %s", q.name)
	return asInvalid(q.BranchFields(e, field, res.Fields, w.cfg.MaxPayloadBytes))
}

// callStage runs a stage handler and turns a panic into an error.
func callStage(ctx context.Context, h StageHandler, r *Run) (res *StageResult, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return h.HandleStage(ctx, r)
}

// planStage checks a stage's result and adds what the stage's end records.
func (w *Worker) planStage(q *queueRunner, res *StageResult, e *rdb.Ending) error {
	if res == nil {
		res = &StageResult{}
	}
	names := engine.FanOutNames{
		Fields:   fmt.Sprintf("StageResult.Fields of stage %s", q.flow.Stages[q.stage].Name),
		Children: "StageResult.Children", Sleep: "StageResult.Sleep", Again: "StageResult.Again",
		Await: "StageResult.Await",
	}
	if err := q.FanOut(e, res.Fields, engineChildren(res.Children), w.cfg.MaxPayloadBytes, names); err != nil {
		return asInvalid(err)
	}
	return asInvalid(q.Resume(e, res.Sleep, res.Again, res.Await, names))
}

// checkResults checks the results ts recorded (Task.SetResult): each at
// most MaxPayloadBytes, as a remote session's Finish checks, and together (a
// batch's, ended in one atomic step) at most MaxEnqueueChunkBytes (4 MiB)
// or, when larger, MaxPayloadBytes.
func (w *Worker) checkResults(ts []*Task) error {
	total := 0
	for _, t := range ts {
		if len(t.result) > w.cfg.MaxPayloadBytes {
			return invalid("Task.SetResult", "of task %s is %d bytes, over MaxPayloadBytes (%d)", t.ID, len(t.result), w.cfg.MaxPayloadBytes)
		}
		total += len(t.result)
	}
	if budget := max(rdb.MaxEnqueueChunkBytes, w.cfg.MaxPayloadBytes); total > budget {
		return invalid("Task.SetResult", "results of the batch's %d tasks are %d bytes together (at most %d per batch)", len(ts), total, budget)
	}
	return nil
}

// TimeoutError is the cause of a handler context whose run took longer than
// its timeout; the run counts as a failed attempt.
type TimeoutError struct{ Timeout time.Duration }

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("worqr: task timed out after %s", e.Timeout)
}

// callHandler runs the handler and turns a panic into an error.
func callHandler(ctx context.Context, h Handler, t *Task) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return h.HandleTask(ctx, t)
}

// PanicError is the error of a handler that panicked.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("worqr: handler panic: %v\n%s", e.Value, e.Stack)
}
