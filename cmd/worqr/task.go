package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/worqr/worqr-go/defaults"

	"github.com/spf13/cobra"

	"github.com/worqr/worqr-go/worqr"
)

// taskJSON is a task in JSON output. Payload and result are text when they
// are valid UTF-8, else base64 in payload_base64 / result_base64. A typed
// task's payload is the one its handler sees, its type apart.
type taskJSON struct {
	ID              string  `json:"id"`
	Queue           string  `json:"queue"`
	Type            string  `json:"type"`
	Key             string  `json:"key"`
	State           string  `json:"state"`
	Failures        int     `json:"failures"`
	Crashes         int     `json:"crashes"`
	LastError       string  `json:"last_error"`
	DeadReason      string  `json:"dead_reason"`
	DiedAt          *string `json:"died_at"`
	DiedOn          string  `json:"died_on"`
	Worker          string  `json:"worker"`
	PID             string  `json:"pid"`
	CancelRequested bool    `json:"cancel_requested"`
	EnqueuedAt      *string `json:"enqueued_at"`
	DueAt           *string `json:"due_at"`
	FinishedAt      *string `json:"finished_at"`
	Deadline        *string `json:"deadline"`
	// Priority, MaxAttempts and TimeoutMS are the task's own options (0:
	// none, the queue's; a TimeoutMS of -1: no limit).
	Priority    int   `json:"priority"`
	MaxAttempts int   `json:"max_attempts"`
	TimeoutMS   int64 `json:"timeout_ms"`
	// StartedAt and RanForMS are its latest attempt's start and run (see
	// worqr.TaskInfo.RanFor).
	StartedAt *string `json:"started_at"`
	RanForMS  int64   `json:"ran_for_ms"`
	// Attempts are its last failed attempts, oldest first (at most
	// worqr.MaxAttemptHistory).
	Attempts []attemptJSON `json:"attempts"`
	// Meta is the task's metadata (EnqueueOpts.Meta: a trace context...),
	// apart from its payload; absent when none.
	Meta          map[string]string `json:"meta,omitempty"`
	Payload       *string           `json:"payload,omitempty"`
	PayloadBase64 *string           `json:"payload_base64,omitempty"`
	Result        *string           `json:"result,omitempty"`
	ResultBase64  *string           `json:"result_base64,omitempty"`

	raw []byte
}

func bytesJSON(b []byte) (text, b64 *string) {
	if len(b) == 0 {
		return nil, nil
	}
	if utf8.Valid(b) {
		s := string(b)
		return &s, nil
	}
	s := base64.StdEncoding.EncodeToString(b)
	return nil, &s
}

// attemptJSON is one failed attempt of a task in JSON output.
type attemptJSON struct {
	Number    int     `json:"number"`
	Outcome   string  `json:"outcome"`
	Worker    string  `json:"worker"`
	StartedAt *string `json:"started_at"`
	EndedAt   *string `json:"ended_at"`
	RanForMS  int64   `json:"ran_for_ms"`
	Error     string  `json:"error"`
}

func taskOf(t *worqr.TaskInfo) taskJSON {
	j := taskJSON{ID: t.ID, Queue: t.Queue, Type: t.Type, Key: t.Key, State: string(t.State), Failures: t.Failures,
		Crashes: t.Crashes, LastError: t.LastError, DeadReason: t.DeadReason, DiedAt: jsonTime(t.DiedAt),
		DiedOn: t.DiedOn, Worker: t.WorkerID, PID: t.PID, CancelRequested: t.CancelRequested,
		EnqueuedAt: jsonTime(t.EnqueuedAt), DueAt: jsonTime(t.DueAt), FinishedAt: jsonTime(t.FinishedAt),
		Deadline: jsonTime(t.Deadline), Priority: t.Priority, MaxAttempts: t.MaxAttempts,
		TimeoutMS: t.Timeout.Milliseconds(), StartedAt: jsonTime(t.StartedAt), RanForMS: t.RanFor.Milliseconds(),
		Attempts: []attemptJSON{}, Meta: t.Meta, raw: t.HandlerPayload()}
	for _, a := range t.Attempts {
		j.Attempts = append(j.Attempts, attemptJSON{Number: a.Number, Outcome: a.Outcome, Worker: a.WorkerID,
			StartedAt: jsonTime(a.StartedAt), EndedAt: jsonTime(a.EndedAt), RanForMS: a.RanFor().Milliseconds(),
			Error: a.Error})
	}
	j.Payload, j.PayloadBase64 = bytesJSON(t.HandlerPayload())
	j.Result, j.ResultBase64 = bytesJSON(t.Result)
	return j
}

func (t taskJSON) preview() string { return typedPreview(t.Type, t.raw, 60) }

// typedPreview shows a payload in a table cell, a typed task's type first.
func typedPreview(typ string, payload []byte, n int) string {
	if typ == "" {
		return preview(payload, n)
	}
	return typ + " " + preview(payload, max(n-len(typ)-1, 10))
}

// ownOption shows a task's own option, or that the queue's applies.
// taskTimeout is a task's own Timeout as shown: the queue's, none, or its
// own.
func taskTimeout(d time.Duration) string {
	if d < 0 {
		return "none"
	}
	return ownOption(d > 0, d.String())
}

func ownOption(set bool, v string) string {
	if !set {
		return "(the queue's)"
	}
	return v
}

// printAttempts prints a task's failed attempts as a table, oldest first.
func printAttempts(w io.Writer, t *worqr.TaskInfo) error {
	if len(t.Attempts) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nfailed attempts (the last %d kept)\n", defaults.MaxAttemptHistory)
	tb := newTable(w, "ATTEMPT", "OUTCOME", "WORKER", "STARTED", "RAN", "ERROR")
	for _, a := range t.Attempts {
		ran := "-"
		if !a.StartedAt.IsZero() {
			ran = ago(a.RanFor())
		}
		tb.row(itoa(a.Number), a.Outcome, orDash(a.WorkerID), when(a.StartedAt), ran, orDash(clip(a.Error, 80)))
	}
	return tb.flush()
}

// metaText shows metadata on one line, name=value pairs by name ("-" for
// none).
func metaText(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = k + "=" + strconv.Quote(m[k])
	}
	return strings.Join(parts, " ")
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func (a *app) taskCmd() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "task",
		Short: "find, list, cancel, run now, requeue and delete tasks",
		Example: `  worqr task get emails cv3k1s1hhc2s73b0o3ng
  worqr task ls emails --state dead --limit 50
  worqr task cancel emails cv3k1s1hhc2s73b0o3ng
  worqr task run-now emails cv3k1s1hhc2s73b0o3ng
  worqr task retry emails cv3k1s1hhc2s73b0o3ng`,
	})
	cmd.AddCommand(a.taskGetCmd(), a.taskLsCmd(), a.taskWaitCmd(), a.taskCancelCmd(), a.taskRunNowCmd(), a.taskDeadCmd(true), a.taskDeadCmd(false))
	return cmd
}

func (a *app) taskGetCmd() *cobra.Command {
	var o output
	cmd := &cobra.Command{
		Use:   "get <queue> <id> | get <id>",
		Short: "what Redis holds about one task",
		Long: `Prints what Redis holds about one task: its type (a typed task's payload is
shown without its type's envelope), key and state; failures, crashes, last
error, why and when it died, its worker while it runs; the options it was
enqueued with (priority, max attempts, timeout, deadline: "(the queue's)"
when it has none of its own); its times (enqueued, due, started, how long
its latest attempt ran, finished); metadata (a trace context...), payload
and result; then its last 10 failed attempts, oldest first (number,
outcome, worker, start, run time, error). -o json has them all, the
attempts' errors whole.
With only an id it looks in every known queue.

A task that is not found (it never existed, or it ended and its record is
gone: done and cancelled tasks stay only for their queue's retention) is an
error: nothing on stdout, exit 1.`,
		Example: "  worqr task get emails cv3k1s1hhc2s73b0o3ng\n  worqr task get cv3k1s1hhc2s73b0o3ng -o json | jq -r .payload",
		Args: func(cmd *cobra.Command, got []string) error {
			if len(got) == 0 || len(got) > 2 {
				return usagef("want <queue> <id> or <id>, got %d arguments (usage: %s)", len(got), cmd.UseLine())
			}
			return nil
		},
	}
	o.register(cmd)
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		if err := o.check(); err != nil {
			return err
		}
		q, id := "", args[0] // no queue: every known queue is searched
		if len(args) == 2 {
			if err := checkQueue("<queue>", args[0]); err != nil {
				return err
			}
			q, id = args[0], args[1]
		}
		t, err := a.in.Task(ctx, q, id)
		if errors.Is(err, worqr.ErrTaskNotFound) {
			where := "any known queue"
			if len(args) == 2 {
				where = "queue " + args[0]
			}
			return fmt.Errorf("task %s not found in %s (never existed, or it ended and its record is gone)", args[len(args)-1], where)
		}
		if err != nil {
			return err
		}
		j := taskOf(t)
		if o.json() {
			return writeJSON(a.env.out, j)
		}
		payload := "-"
		if j.Payload != nil {
			payload = *j.Payload
		} else if j.PayloadBase64 != nil {
			payload = "base64:" + *j.PayloadBase64
		}
		result := "-"
		if j.Result != nil {
			result = *j.Result
		} else if j.ResultBase64 != nil {
			result = "base64:" + *j.ResultBase64
		}
		ranFor := "-"
		if !t.StartedAt.IsZero() && (t.RanFor > 0 || t.State == worqr.StateActive) {
			ranFor = ago(t.RanFor)
			if t.State == worqr.StateActive {
				ranFor += " so far"
			}
		}
		err = kv(a.env.out, "id", j.ID, "queue", j.Queue, "type", orDash(j.Type), "key", orDash(j.Key),
			"state", j.State, "failures", itoa(j.Failures), "crashes", itoa(j.Crashes), "last_error", orDash(j.LastError),
			"dead_reason", orDash(j.DeadReason), "died_at", when(t.DiedAt), "died_on", orDash(j.DiedOn),
			"worker", orDash(j.Worker), "pid", orDash(j.PID), "cancel_requested", yesNo(j.CancelRequested),
			"priority", itoa(j.Priority), "max_attempts", ownOption(t.MaxAttempts > 0, itoa(t.MaxAttempts)),
			"timeout", taskTimeout(t.Timeout), "deadline", when(t.Deadline),
			"enqueued_at", when(t.EnqueuedAt), "due_at", when(t.DueAt), "started_at", when(t.StartedAt),
			"ran_for", ranFor, "finished_at", when(t.FinishedAt), "meta", metaText(j.Meta),
			"payload", payload, "result", result)
		if err != nil {
			return err
		}
		return printAttempts(a.env.out, t)
	})
	return cmd
}

var states = []string{"queued", "scheduled", "active", "dead", "done", "cancelled", "expired"}

func (a *app) taskLsCmd() *cobra.Command {
	var (
		o             output
		state         string
		limit, offset int
	)
	cmd := &cobra.Command{
		Use:   "ls <queue> [--state S] [--limit N] [--offset N]",
		Short: "a page of a queue's tasks in one state",
		Long: `Lists a page of a queue's tasks in one state: queued (front first), scheduled
(soonest first), active (held by workers: with the worker, the start and
how long it has run), dead (newest first), done,
cancelled or expired (retained ended tasks, those kept longest first; all
three are listed for any of them).
The table ends with how many the state holds; -o json prints
{"total": n, "tasks": [...]}.`,
		Example: "  worqr task ls emails\n  worqr task ls emails --state scheduled --limit 100 --offset 100",
		Args:    args("queue"),
	}
	o.register(cmd)
	cmd.Flags().StringVarP(&state, "state", "s", "queued", "one of "+strings.Join(states, ", "))
	cmd.Flags().IntVar(&limit, "limit", 20, "how many tasks to show (1 to 1000)")
	cmd.Flags().IntVar(&offset, "offset", 0, "how many to skip first")
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		q := args[0]
		if err := a.knownArg(ctx, &o, q); err != nil {
			return err
		}
		if !contains(states, state) {
			return usagef("--state %q: want one of %s", state, strings.Join(states, ", "))
		}
		if limit < 1 || limit > 1000 {
			return usagef("--limit %d: must be between 1 and 1000", limit)
		}
		if offset < 0 {
			return usagef("--offset %d: must not be negative", offset)
		}
		ts, total, err := a.in.Tasks(ctx, q, worqr.TaskState(state), offset, limit)
		if err != nil {
			return err
		}
		return a.printTasks(o, ts, total, offset, state)
	})
	return cmd
}

func (a *app) printTasks(o output, ts []*worqr.TaskInfo, total, offset int, state string) error {
	if o.json() {
		out := struct {
			Total int        `json:"total"`
			Tasks []taskJSON `json:"tasks"`
		}{Total: total, Tasks: make([]taskJSON, len(ts))}
		for i, t := range ts {
			out.Tasks[i] = taskOf(t)
		}
		return writeJSON(a.env.out, out)
	}
	if len(ts) > 0 && state == string(worqr.StateActive) {
		// What runs: since when, for how long, and where (a stuck handler
		// shows here before its timeout ends it).
		t := newTable(a.env.out, "ID", "WORKER", "STARTED", "RUNNING_FOR", "FAILURES", "PAYLOAD")
		for _, tk := range ts {
			running := "-"
			if !tk.StartedAt.IsZero() {
				running = ago(tk.RanFor)
			}
			t.row(tk.ID, orDash(tk.WorkerID), when(tk.StartedAt), running, itoa(tk.Failures), typedPreview(tk.Type, tk.HandlerPayload(), 40))
		}
		if err := t.flush(); err != nil {
			return err
		}
	} else if len(ts) > 0 {
		t := newTable(a.env.out, "ID", "STATE", "ENQUEUED", "FAILURES", "LAST_ERROR", "PAYLOAD")
		for _, tk := range ts {
			t.row(tk.ID, string(tk.State), when(tk.EnqueuedAt), itoa(tk.Failures), orDash(clip(tk.LastError, 50)), typedPreview(tk.Type, tk.HandlerPayload(), 40))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	from, to := offset+1, offset+len(ts)
	what := state
	if state == string(worqr.StateDone) || state == string(worqr.StateCancelled) || state == string(worqr.StateExpired) {
		what = "ended (done, cancelled or expired: retained)" // one listing for the three
	}
	if len(ts) == 0 {
		_, err := fmt.Fprintf(a.env.out, "no %s tasks shown (%d in all)\n", what, total)
		return err
	}
	_, err := fmt.Fprintf(a.env.out, "%d-%d of %d %s\n", from, to, total, what)
	return err
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (a *app) taskCancelCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cancel <queue> <id>",
		Short: "cancel a waiting, scheduled or running task",
		Long: `Cancels one task: a waiting or scheduled task is removed (no worker gets it);
a running task's handler is told to stop and its taking ends as cancelled.
Prints "removed" or "requested". A task with nothing to cancel (unknown,
ended, dead, or already asked) is an error (exit 1). Flow runs and their
children cannot be cancelled here.`,
		Example: "  worqr task cancel emails cv3k1s1hhc2s73b0o3ng",
		Args:    args("queue", "id"),
	}
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		if err := checkQueue("<queue>", args[0]); err != nil {
			return err
		}
		st, err := a.client.Cancel(ctx, args[0], args[1])
		if err != nil {
			return err
		}
		if st == worqr.CancelNotFound {
			msg := fmt.Sprintf("task %s of queue %s: nothing to cancel (unknown, ended, dead, or its cancel was already asked)", args[1], args[0])
			if w := a.whereNow(ctx, args[0], args[1]); w != "" {
				msg += ": " + w
			}
			return errors.New(msg)
		}
		_, err = fmt.Fprintf(a.env.out, "%s %s\n", st, args[1])
		return err
	})
	return cmd
}

func (a *app) taskRunNowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run-now <queue> <id>",
		Short: "move a scheduled task (delayed, or waiting for its retry) to its queue now",
		Long: `Moves one scheduled task (enqueued with a delay, or waiting for its retry)
to the back of its queue now; its attempts and deadline are kept. Prints
"moved <id>". A task that is not scheduled (waiting, running, ended, dead,
unknown, or waiting behind its key's head in an ordered queue) is an error
(exit 1).`,
		Example: "  worqr task run-now emails cv3k1s1hhc2s73b0o3ng",
		Args:    args("queue", "id"),
	}
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		q, id := args[0], args[1]
		if err := checkQueue("<queue>", q); err != nil {
			return err
		}
		ok, err := a.in.RunNow(ctx, q, id)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("task %s of queue %s is not scheduled%s: nothing moved", id, q, a.stateNow(ctx, q, id))
		}
		_, err = fmt.Fprintln(a.env.out, "moved", id)
		return err
	})
	return cmd
}

// taskDeadCmd is `task retry` (requeue) or `task delete`: both act on one
// dead task.
func (a *app) taskDeadCmd(requeue bool) *cobra.Command {
	use, short, verb := "delete <queue> <id>", "delete one dead task", "deleted"
	if requeue {
		use, short, verb = "retry <queue> <id>", "requeue one dead task at the back of its queue (counts reset)", "requeued"
	}
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Long:    short + ". A task that is not in the queue's dead set is an error (exit 1). 'worqr dead retry|delete <queue> --all' acts on the whole dead set.",
		Example: "  worqr task " + strings.Fields(use)[0] + " emails cv3k1s1hhc2s73b0o3ng",
		Args:    args("queue", "id"),
	}
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		q, id := args[0], args[1]
		if err := checkQueue("<queue>", q); err != nil {
			return err
		}
		var (
			n   int
			err error
		)
		if requeue {
			n, err = a.in.RequeueDead(ctx, q, id)
		} else {
			n, err = a.in.DeleteDead(ctx, q, id)
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("task %s is not in the dead set of queue %s%s: nothing %s", id, q, a.stateNow(ctx, q, id), verb)
		}
		_, err = fmt.Fprintf(a.env.out, "%s %s\n", verb, id)
		return err
	})
	return cmd
}

// stateNow says where task id of queue q stands now, for an action that
// found it elsewhere: " (it is queued)", " (it is unknown: ended and not
// kept, or never was)", or "" when it cannot be read. An operator who runs
// an action again after an error (its reply lost, the action applied)
// learns that it did.
func (a *app) stateNow(ctx context.Context, q, id string) string {
	if w := a.whereNow(ctx, q, id); w != "" {
		return " (" + w + ")"
	}
	return ""
}

// whereNow is stateNow's words without the parentheses ("" when the task
// cannot be read).
func (a *app) whereNow(ctx context.Context, q, id string) string {
	t, err := a.in.Task(ctx, q, id)
	switch {
	case errors.Is(err, worqr.ErrTaskNotFound):
		return "it is unknown: ended and not kept, or never was"
	case err != nil || t == nil:
		return ""
	}
	return fmt.Sprintf("it is %s", t.State)
}
