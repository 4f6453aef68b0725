package worqr

import (
	"context"

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

// CancelRun cancels run id of flow (its name is enough), as
// Client.CancelRunByName does: for an operator tool that holds an
// Inspector. It reports whether the run was running.
func (in *Inspector) CancelRun(ctx context.Context, flow, id string) (bool, error) {
	return cancelRunByName(ctx, in.st, in.bus, flow, id)
}

// RetryRun runs failed run id of flow (its name is enough) again from the
// stage it failed in, as Client.RetryRun does. It reports whether the run
// was failed.
func (in *Inspector) RetryRun(ctx context.Context, flow, id string) (bool, error) {
	return retryRunByName(ctx, in.st, flow, id)
}

// RunNow moves scheduled task id of queue to the back of the queue now, as
// Client.RunNow does. It reports whether the task was scheduled.
func (in *Inspector) RunNow(ctx context.Context, queue, id string) (bool, error) {
	ref, err := parseQueue(queue)
	if err != nil {
		return false, err
	}
	return runNow(ctx, in.st, in.st.Queue(ref), id)
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

func (in *Inspector) deadIDs(ctx context.Context, queue string, op rdb.DeadOp, ids []string) (int, error) {
	ref, err := parseQueue(queue)
	if err != nil {
		return 0, err
	}
	return deadIDs(ctx, in.st, in.st.Queue(ref), op, ids)
}
