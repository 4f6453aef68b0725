package worqr

import (
	"context"
	"fmt"
	"strings"

	"github.com/worqr/worqr-go/internal/rdb"
)

// Run returns what Redis holds about run id of flow (the flow's name is
// enough: its definition is not needed), or ErrTaskNotFound.
func (in *Inspector) Run(ctx context.Context, flow, id string) (*RunInfo, error) {
	if err := checkName("flow", flow); err != nil {
		return nil, err
	}
	if id == "" {
		return nil, invalid("id", "is empty")
	}
	r, err := in.st.Run(ctx, in.st.Queue(rdb.QueueRef{Tag: flow, Name: flow}), id)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, ErrTaskNotFound
	}
	return runInfo(flow, r), nil
}

// FindRuns returns the runs of flow whose state field prop (declared in
// IndexBy) is value, running or ended within the retention. It takes the
// flow's definition, not only its name: prop is checked against the
// IndexBy it declares. The index and the runs are read in pages of 1,000
// (no Redis call grows with the index), so the list is not one instant's:
// a run started, or a failed run retried, while it is read may be missing;
// no run is listed twice.
func (in *Inspector) FindRuns(ctx context.Context, flow *Flow, prop, value string) ([]*RunInfo, error) {
	f, err := flow.validate()
	if err != nil {
		return nil, err
	}
	declared := false
	for _, p := range f.IndexBy {
		declared = declared || p == prop
	}
	if !declared {
		return nil, invalid("prop", "%q is not in Flow.IndexBy of %s", prop, f.Name)
	}
	qk := in.st.Queue(rdb.QueueRef{Tag: f.Name, Name: f.Name})
	ids, err := in.st.FindRuns(ctx, qk, prop, value)
	if err != nil {
		return nil, fmt.Errorf("worqr: find runs: %w", err)
	}
	recs, err := in.st.Runs(ctx, qk, ids)
	if err != nil {
		return nil, err
	}
	out := make([]*RunInfo, len(recs))
	for i, r := range recs {
		out[i] = runInfo(f.Name, r)
	}
	return out, nil
}

// CancelRun cancels run id of flow as Client.CancelRun does, for a caller
// that knows only the flow's name (an operator tool): the run's retention
// and indexed properties are those it was started with. It reports
// whether the run was running.
func (in *Inspector) CancelRun(ctx context.Context, flow, id string) (bool, error) {
	var r rdb.RunStop
	_, err := in.runOp(ctx, "cancel", flow, id, func(ctx context.Context, q rdb.QueueKeys, id string) (bool, error) {
		var err error
		r, err = in.st.RunCancelStored(ctx, q, id)
		return r.Cancelled, err
	})
	if err != nil {
		return false, err
	}
	runCancelEvents(in.bus, flow, id, r) // as Client.CancelRun's
	return r.Cancelled, nil
}

// RetryRun runs failed run id of flow (its name is enough) again from the
// stage it failed in: a stage whose handler failed for good runs again,
// and so does a stage whose fan-out failed (a child failed for good and
// the run failed with it), fanning out anew. The run forgets the failed
// fan-out's children: a dead one stays dead (its requeue is refused from
// then on) and one still running ends as cancelled. The stage's attempt
// and crash counts start over. It reports false when the run was not
// failed (running, done, cancelled, or unknown: ended longer ago than its
// retention).
func (in *Inspector) RetryRun(ctx context.Context, flow, id string) (bool, error) {
	return in.runOp(ctx, "retry", flow, id, in.st.RunRetry)
}

// runOp checks flow and id, then applies op (a run script by the run's
// stored settings) to run id on a queue of the flow's tag.
func (in *Inspector) runOp(ctx context.Context, name, flow, id string,
	op func(context.Context, rdb.QueueKeys, string) (bool, error)) (bool, error) {
	if err := checkName("flow", flow); err != nil {
		return false, err
	}
	if id == "" {
		return false, invalid("id", "is empty")
	}
	ok, err := op(ctx, in.st.Queue(rdb.QueueRef{Tag: flow, Name: flow}), id)
	if err != nil {
		return false, fmt.Errorf("worqr: %s run %s of %s: %w", name, id, flow, err)
	}
	return ok, nil
}

// RunNow moves scheduled task id of queue (enqueued with a delay, or
// waiting for its retry) to the back of the queue now: a worker takes it
// once it has taken the tasks before it. Its attempts, deadline and the
// rest are kept. It reports false when the task was not scheduled:
// waiting, running, ended, dead or unknown, or a task of an ordered queue
// waiting behind its key's head (it runs after the head, whatever its due
// time).
func (in *Inspector) RunNow(ctx context.Context, queue, id string) (bool, error) {
	ref, err := parseQueue(queue)
	if err != nil {
		return false, err
	}
	if id == "" {
		return false, invalid("id", "is empty")
	}
	ok, err := in.st.Promote(ctx, in.st.Queue(ref), id)
	if err != nil {
		return false, fmt.Errorf("worqr: run %s of %s now: %w", id, queue, err)
	}
	return ok, nil
}

// RequeueDead moves the given dead tasks of queue to the back of the queue
// with their failure and crash counts reset, and returns how many were dead.
// A task enqueued with a UniqueKey runs again without it (its key was freed
// when it died).
func (in *Inspector) RequeueDead(ctx context.Context, queue string, ids ...string) (int, error) {
	return in.deadIDs(ctx, queue, rdb.DeadRequeue, ids)
}

// DeleteDead deletes the given dead tasks of queue and returns how many were
// dead.
func (in *Inspector) DeleteDead(ctx context.Context, queue string, ids ...string) (int, error) {
	return in.deadIDs(ctx, queue, rdb.DeadDelete, ids)
}

// deadIDs applies op to the given dead tasks of queue, in atomic chunks of
// at most rdb.BulkStep. A requeue that some ids refused (flow children
// whose run no longer waits for them) is ErrInvalid naming them, after the
// others were requeued.
func (in *Inspector) deadIDs(ctx context.Context, queue string, op rdb.DeadOp, ids []string) (int, error) {
	ref, err := parseQueue(queue)
	if err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, invalid("ids", "is empty")
	}
	qk := in.st.Queue(ref)
	total := 0
	var refused []string
	for len(ids) > 0 {
		n := min(len(ids), rdb.BulkStep)
		k, r, err := in.st.DeadIDs(ctx, qk, op, ids[:n])
		total += k
		refused = append(refused, r...)
		if err != nil {
			return total, err
		}
		ids = ids[n:]
	}
	if len(refused) > 0 {
		shown := refused[:min(len(refused), 5)]
		more := ""
		if len(refused) > len(shown) {
			more = fmt.Sprintf(" and %d more", len(refused)-len(shown))
		}
		return total, invalid("ids", "%s%s: flow children whose run no longer waits for them (it failed with them, was cancelled, or moved on): a requeue would run them and throw their result away; they stay dead (delete them, or start a new run)",
			strings.Join(shown, ", "), more)
	}
	return total, nil
}
