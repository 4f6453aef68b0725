package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/worqr/worqr-go/worqr"
)

// waitCmd gives cmd -o and --timeout and runs wait with a context that
// --timeout bounds (none when 0); ctx is the command's own.
func (a *app) waitCmd(cmd *cobra.Command, wait func(ctx, wctx context.Context, o *output, timeout time.Duration, args []string) error) *cobra.Command {
	var (
		o       output
		timeout time.Duration
	)
	o.register(cmd)
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (0: wait until Ctrl-C)")
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		if err := o.check(); err != nil {
			return err
		}
		if timeout < 0 {
			return usagef("--timeout %s: must not be negative", timeout)
		}
		wctx, cancel := context.WithCancel(ctx)
		if timeout > 0 {
			wctx, cancel = context.WithTimeout(ctx, timeout)
		}
		defer cancel()
		return wait(ctx, wctx, &o, timeout, args)
	})
	return cmd
}

func (a *app) taskWaitCmd() *cobra.Command {
	return a.waitCmd(&cobra.Command{
		Use:   "wait <queue> <id> [--timeout D]",
		Short: "wait until a task has ended; the exit code says how it ended",
		Long: `Waits until one task has ended (done, dead, cancelled or expired), woken by
the workers' events (and reading the task every 5 s in case one was lost),
then prints its state and id ("done cv3k1s1hhc2s73b0o3ng"), or the task as
'task get -o json' prints it. A task that ends while it waits is seen by
its end's event, retention or not; one that ended before is found only
while its retention keeps it (give the queue a Retention, or the task one).

Exit codes:
  0  done
  1  not found, or Redis failed
  2  bad input
  3  dead (its last error on stderr)
  4  cancelled
  5  expired: its deadline passed before it started
  6  timed out: --timeout passed first (its state on stderr)`,
		Example: "  id=$(worqr enqueue reports '{\"month\":\"2026-10\"}')\n  worqr task wait reports $id --timeout 10m && echo ready",
		Args:    args("queue", "id"),
	}, func(ctx, wctx context.Context, o *output, timeout time.Duration, args []string) error {
		q, id := args[0], args[1]
		if err := checkQueue("<queue>", q); err != nil {
			return err
		}
		t, err := a.client.Wait(wctx, q, id)
		switch {
		case errors.Is(err, worqr.ErrTaskNotFound):
			return fmt.Errorf("task %s not found in queue %s (never existed, or it ended and its record is gone: it is kept only for its retention)", id, q)
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			state := "unknown"
			if t, err := a.in.Task(ctx, q, id); err == nil {
				state = string(t.State)
			}
			return &exitError{exitTimedOut, fmt.Errorf("timed out after %s: task %s is %s", timeout, id, state)}
		case err != nil:
			return err
		}
		if o.json() {
			err = writeJSON(a.env.out, taskOf(t))
		} else {
			_, err = fmt.Fprintf(a.env.out, "%s %s\n", t.State, t.ID)
		}
		if err != nil || t.State == worqr.StateDone {
			return err
		}
		code := exitDead
		switch t.State {
		case worqr.StateCancelled:
			code = exitCancelled
		case worqr.StateExpired:
			code = exitExpired
		}
		return &exitError{code, fmt.Errorf("task %s ended %s%s", id, t.State, lastError(t.LastError))}
	})
}

func (a *app) flowWaitCmd() *cobra.Command {
	return a.waitCmd(&cobra.Command{
		Use:   "wait <flow> <run_id> [--timeout D]",
		Short: "wait until a run has ended; the exit code says how it ended",
		Long: `Waits until one run of a flow has ended (done, failed or cancelled), woken
by the events of the flow's queues (and reading the run every 5 s in case
one was lost), then prints its status and id, or the run as 'flow get -o
json' prints it. An ended run is kept for its flow's Retention.

Exit codes (as task wait's):
  0  done
  1  not found, or Redis failed
  2  bad input
  3  failed (its last error on stderr)
  4  cancelled
  6  timed out: --timeout passed first`,
		Example: "  worqr flow wait membership cv3k1s1hhc2s73b0o3ng --timeout 5m",
		Args:    args("flow", "run_id"),
	}, func(ctx, wctx context.Context, o *output, timeout time.Duration, args []string) error {
		flow, id := args[0], args[1]
		if err := worqr.CheckQueueName(flow); err != nil {
			return usagef("<flow> %q: %s", flow, ruleOf(err))
		}
		r, err := a.client.WaitRun(wctx, &worqr.Flow{Name: flow}, id)
		switch {
		case errors.Is(err, worqr.ErrTaskNotFound):
			return fmt.Errorf("run %s of flow %s not found (never existed, or it ended longer ago than the flow's retention)", id, flow)
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			return &exitError{exitTimedOut, fmt.Errorf("timed out after %s: run %s is still running", timeout, id)}
		case err != nil:
			return err
		}
		if o.json() {
			err = writeJSON(a.env.out, runOf(r))
		} else {
			_, err = fmt.Fprintf(a.env.out, "%s %s\n", r.Status, r.ID)
		}
		if err != nil || r.Status == worqr.RunDone {
			return err
		}
		code := exitDead
		if r.Status == worqr.RunCancelled {
			code = exitCancelled
		}
		return &exitError{code, fmt.Errorf("run %s of flow %s ended %s%s", id, flow, r.Status, lastError(r.LastError))}
	})
}

func lastError(e string) string {
	if e == "" {
		return ""
	}
	return ": " + clip(e, 200)
}
