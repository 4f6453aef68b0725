package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/worqr/worqr-go/worqr"
)

type childJSON struct {
	ID     string  `json:"id"`
	Queue  string  `json:"queue"`
	Status string  `json:"status"`
	Error  string  `json:"error"`
	Result *string `json:"result,omitempty"`
}

type runJSON struct {
	ID         string            `json:"id"`
	Flow       string            `json:"flow"`
	Stage      string            `json:"stage"`
	Status     string            `json:"status"`
	TaskState  string            `json:"task_state"`
	LastError  string            `json:"last_error"`
	FinishedAt *string           `json:"finished_at"`
	StartedAt  *string           `json:"started_at"`
	State      map[string]string `json:"state"`
	Children   []childJSON       `json:"children"`
	Awaiting   string            `json:"awaiting"`
	WakeAt     *string           `json:"wake_at"`
}

func runOf(r *worqr.RunInfo) runJSON {
	j := runJSON{ID: r.ID, Flow: r.Flow, Stage: r.Stage, Status: string(r.Status), TaskState: r.TaskState,
		LastError: r.LastError, FinishedAt: jsonTime(r.FinishedAt), State: r.State, Children: []childJSON{},
		Awaiting: r.Awaiting, WakeAt: jsonTime(r.WakeAt)}
	if t := idTime(r.ID); !t.IsZero() {
		j.StartedAt = jsonTime(t)
	}
	if j.State == nil {
		j.State = map[string]string{}
	}
	for _, c := range r.Children {
		cj := childJSON{ID: c.ID, Queue: c.Queue, Status: c.Status, Error: c.Err}
		cj.Result, _ = bytesJSON(c.Result)
		j.Children = append(j.Children, cj)
	}
	return j
}

var runStatuses = []string{"running", "done", "failed", "cancelled"}

func (a *app) flowCmd() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "flow",
		Short: "list the flows and a flow's runs, show one run, draw it as a tree, wait for, signal, wake, cancel or retry one",
		Example: `  worqr flow ls
  worqr flow runs membership --status failed
  worqr flow get membership cv3k1s1hhc2s73b0o3ng
  worqr flow tree membership cv3k1s1hhc2s73b0o3ng
  worqr flow signal order cv3k1s1hhc2s73b0o3ng paid '{"amount":12}' --id evt_1
  worqr flow wake onboarding cv3k1s1hhc2s73b0o3ng
  worqr flow cancel membership cv3k1s1hhc2s73b0o3ng
  worqr flow retry membership cv3k1s1hhc2s73b0o3ng`,
	})
	cmd.AddCommand(a.flowLsCmd(), a.flowRunsCmd(), a.flowGetCmd(), a.flowTreeCmd(), a.flowWaitCmd(), a.flowSignalCmd(),
		a.flowWakeCmd(), a.flowCancelCmd(), a.flowRetryCmd())
	return cmd
}

// flowJSON is one flow in `flow ls -o json`.
type flowJSON struct {
	Flow      string       `json:"flow"`
	Queues    []queueStats `json:"queues"`
	Waiting   int64        `json:"waiting"`
	Scheduled int64        `json:"scheduled"`
	Active    int64        `json:"active"`
	Dead      int64        `json:"dead"`
	NewestRun *runJSON     `json:"newest_run"`
}

func (a *app) flowLsCmd() *cobra.Command {
	var o output
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "list the known flows with their queues, counts and newest run",
		Long: `Lists every flow the namespace knows (one whose stage or child queues a worker
served or a run was started on), with its queues (<flow>/<queue>: the stages
and the child queues; Redis keeps no flow definition, so not which is which
nor the stages' order), the sums of their waiting, scheduled, active and dead
tasks, and its newest run still kept (its start, stage and status).`,
		Example: "  worqr flow ls\n  worqr flow ls -o json | jq '.[] | select(.dead > 0) | .flow'",
		Args:    args(),
	}
	o.register(cmd)
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, _ []string) error {
		if err := o.check(); err != nil {
			return err
		}
		qs, err := a.in.Queues(ctx) // sorted by name: a flow's queues together
		if err != nil {
			return err
		}
		var flows []*flowJSON
		for _, q := range qs {
			if q.Flow == "" {
				continue
			}
			if len(flows) == 0 || flows[len(flows)-1].Flow != q.Flow {
				flows = append(flows, &flowJSON{Flow: q.Flow, Queues: []queueStats{}})
			}
			f := flows[len(flows)-1]
			f.Queues = append(f.Queues, statsOf(q))
			f.Waiting += q.Waiting
			f.Scheduled += q.Scheduled
			f.Active += q.Active
			f.Dead += q.Dead
		}
		for _, f := range flows {
			runs, err := a.in.Runs(ctx, f.Flow, "", 0, 1)
			if err != nil {
				return err
			}
			if len(runs) > 0 {
				r := runOf(runs[0])
				f.NewestRun = &r
			}
		}
		if o.json() {
			if flows == nil {
				flows = []*flowJSON{}
			}
			return writeJSON(a.env.out, flows)
		}
		if len(flows) == 0 {
			_, err := fmt.Fprintf(a.env.out, "no flows in namespace %q\n", a.namespace)
			return err
		}
		t := newTable(a.env.out, "FLOW", "QUEUES", "WAITING", "SCHEDULED", "ACTIVE", "DEAD", "NEWEST_RUN")
		for _, f := range flows {
			names := make([]string, len(f.Queues))
			for i, q := range f.Queues {
				names[i] = strings.TrimPrefix(q.Name, f.Flow+"/")
			}
			newest := "-"
			if r := f.NewestRun; r != nil {
				newest = fmt.Sprintf("%s %s at %s", deref(r.StartedAt), r.Status, r.Stage)
			}
			t.row(f.Flow, strings.Join(names, ","), itoa(f.Waiting), itoa(f.Scheduled), itoa(f.Active), itoa(f.Dead), newest)
		}
		return t.flush()
	})
	return cmd
}

func (a *app) flowRunsCmd() *cobra.Command {
	var (
		o             output
		status        string
		limit, offset int
	)
	cmd := &cobra.Command{
		Use:   "runs <flow> [--status S]",
		Short: "a flow's runs, newest first",
		Long: `Lists a flow's runs, newest first (running, or ended within the flow's
retention), optionally only those of one status: running, done, failed or
cancelled. It scans at most the flow's 10,000 newest runs.`,
		Example: "  worqr flow runs membership\n  worqr flow runs membership --status failed -o json",
		Args:    args("flow"),
	}
	o.register(cmd)
	cmd.Flags().StringVarP(&status, "status", "s", "", "only runs of this status: "+strings.Join(runStatuses, ", ")+" (default any)")
	cmd.Flags().IntVar(&limit, "limit", 20, "how many runs to show (1 to 1000)")
	cmd.Flags().IntVar(&offset, "offset", 0, "how many matching runs to skip first")
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		flow := args[0]
		if err := o.check(); err != nil {
			return err
		}
		if err := worqr.CheckQueueName(flow); err != nil {
			return usagef("<flow> %q: %s", flow, ruleOf(err))
		}
		if status != "" && !contains(runStatuses, status) {
			return usagef("--status %q: want one of %s", status, strings.Join(runStatuses, ", "))
		}
		if limit < 1 || limit > 1000 {
			return usagef("--limit %d: must be between 1 and 1000", limit)
		}
		if offset < 0 {
			return usagef("--offset %d: must not be negative", offset)
		}
		runs, err := a.in.Runs(ctx, flow, worqr.RunStatus(status), offset, limit)
		if err != nil {
			return err
		}
		if o.json() {
			out := make([]runJSON, len(runs))
			for i, r := range runs {
				out[i] = runOf(r)
			}
			return writeJSON(a.env.out, out)
		}
		if len(runs) == 0 {
			_, err := fmt.Fprintf(a.env.out, "no runs of flow %q%s\n", flow, map[bool]string{true: " with status " + status}[status != ""])
			return err
		}
		t := newTable(a.env.out, "RUN", "STATUS", "STAGE", "TASK", "CHILDREN", "STARTED", "FINISHED", "LAST_ERROR")
		for _, r := range runs {
			t.row(r.ID, string(r.Status), r.Stage, orDash(r.TaskState), childSummary(r.Children), when(idTime(r.ID)),
				when(r.FinishedAt), orDash(clip(r.LastError, 50)))
		}
		return t.flush()
	})
	return cmd
}

// childSummary counts children by status: "done=2,pending=1", or "-".
func childSummary(cs []worqr.ChildResult) string {
	if len(cs) == 0 {
		return "-"
	}
	n := map[string]int{}
	for _, c := range cs {
		n[c.Status]++
	}
	var parts []string
	for s, k := range n {
		parts = append(parts, fmt.Sprintf("%s=%d", s, k))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// getRun reads one run through Inspector.Run; the flow's definition is
// not needed for that, only its name.
func (a *app) getRun(ctx context.Context, flow, id string) (*worqr.RunInfo, error) {
	if err := worqr.CheckQueueName(flow); err != nil {
		return nil, usagef("<flow> %q: %s", flow, ruleOf(err))
	}
	r, err := a.in.Run(ctx, flow, id)
	if errors.Is(err, worqr.ErrTaskNotFound) {
		return nil, fmt.Errorf("run %s of flow %s not found (never existed, or it ended longer ago than the flow's retention)", id, flow)
	}
	return r, err
}

func (a *app) flowCancelCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cancel <flow> <run_id>",
		Short: "cancel a running run: its waiting stage and children removed, running ones told to stop",
		Long: `Cancels one run of a flow: its stage task or children that wait are removed,
those that run are told to stop (their later ends change nothing), and the
run ends as cancelled, kept for the retention it was started with. Prints
"cancelled <run_id>"; a run that is not running (ended, or unknown) is an
error (exit 1).`,
		Example: "  worqr flow cancel membership cv3k1s1hhc2s73b0o3ng",
		Args:    args("flow", "run_id"),
	}
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		flow, id := args[0], args[1]
		if err := worqr.CheckQueueName(flow); err != nil {
			return usagef("<flow> %q: %s", flow, ruleOf(err))
		}
		ok, err := a.in.CancelRun(ctx, flow, id)
		if err != nil {
			return err
		}
		if !ok {
			// Say how it ended: a cancel repeated after a lost reply finds
			// the run cancelled by the first.
			if r, err := a.in.Run(ctx, flow, id); err == nil {
				return fmt.Errorf("run %s of flow %s is not running: it is %s (nothing cancelled now)", id, flow, r.Status)
			}
			return fmt.Errorf("run %s of flow %s is not running (it ended and expired, or never existed): nothing cancelled", id, flow)
		}
		_, err = fmt.Fprintln(a.env.out, "cancelled", id)
		return err
	})
	return cmd
}

func (a *app) flowSignalCmd() *cobra.Command {
	var id string
	cmd := &cobra.Command{
		Use:   "signal <flow> <run_id> <name> [payload]",
		Short: "send a signal to a run: it moves on now if it waits for it, else it is kept",
		Long: `Sends signal <name> with [payload] (empty when left out) to one run of a
flow, as Client.Signal does: a run that waits for it (StageResult.Await)
gets the payload as its state field <name> and its next stage starts now
(prints "delivered <run_id>"); one that does not wait for it yet keeps it
for 24 hours for the stage end that awaits it (prints "kept <run_id>").
--id makes a repeat safe: a signal of an id the run took already changes
nothing (exit 1, saying so). A run that is not running is an error (exit 1).`,
		Example: `  worqr flow signal order cv3k1s1hhc2s73b0o3ng paid '{"amount":12}' --id evt_1`,
		Args:    cobra.RangeArgs(3, 4),
	}
	cmd.Flags().StringVar(&id, "id", "", "the signal's id (say, a webhook's delivery id): a repeat of it changes nothing")
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		flow, run, name := args[0], args[1], args[2]
		if err := worqr.CheckQueueName(flow); err != nil {
			return usagef("<flow> %q: %s", flow, ruleOf(err))
		}
		var payload []byte
		if len(args) == 4 {
			payload = []byte(args[3])
		}
		now, err := a.client.Signal(ctx, &worqr.Flow{Name: flow}, run, name, payload, id)
		switch {
		case errors.Is(err, worqr.ErrTaskNotFound):
			return fmt.Errorf("run %s of flow %s is not running (it ended, or never existed): no signal sent", run, flow)
		case errors.Is(err, worqr.ErrDuplicate):
			return fmt.Errorf("run %s of flow %s took signal id %s already: nothing changed", run, flow, id)
		case err != nil:
			return err
		case now:
			_, err = fmt.Fprintln(a.env.out, "delivered", run)
		default:
			_, err = fmt.Fprintln(a.env.out, "kept", run)
		}
		return err
	})
	return cmd
}

func (a *app) flowWakeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "wake <flow> <run_id>",
		Short: "wake a sleeping run now: its next stage starts at once",
		Long: `Wakes one run of a flow that sleeps (StageResult.Sleep, or a wait for a
signal, StageResult.Await): its stage task moves to the back of its queue
now, as "task run-now" moves it (a run waiting for a signal then runs
without it). Prints "woke <run_id>"; a run that does not sleep is an error
(exit 1).`,
		Example: "  worqr flow wake onboarding cv3k1s1hhc2s73b0o3ng",
		Args:    args("flow", "run_id"),
	}
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		flow, id := args[0], args[1]
		if err := worqr.CheckQueueName(flow); err != nil {
			return usagef("<flow> %q: %s", flow, ruleOf(err))
		}
		r, err := a.getRun(ctx, flow, id)
		if err != nil {
			return err
		}
		ok := false
		if r.Status == worqr.RunRunning && r.TaskState == "scheduled" {
			if ok, err = a.in.RunNow(ctx, flow+"/"+r.Stage, id); err != nil {
				return err
			}
		}
		if !ok {
			return fmt.Errorf("run %s of flow %s does not sleep: it is %s, its stage task %s (nothing woken)", id, flow, r.Status, orDash(r.TaskState))
		}
		_, err = fmt.Fprintln(a.env.out, "woke", id)
		return err
	})
	return cmd
}

func (a *app) flowRetryCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "retry <flow> <run_id>",
		Short: "run a failed run again from the stage it failed in",
		Long: `Runs a failed run of a flow again from the stage it failed in: a stage whose
handler failed for good leaves its dead set and runs again; a stage whose
fan-out failed (a child failed for good: fail-fast) runs again and fans
out anew, the run forgetting the failed fan-out's children (a dead one
stays dead). Prints "retried <run_id>"; a run that is not failed (running,
done, cancelled, or unknown) is an error (exit 1).`,
		Example: "  worqr flow retry membership cv3k1s1hhc2s73b0o3ng",
		Args:    args("flow", "run_id"),
	}
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		flow, id := args[0], args[1]
		if err := worqr.CheckQueueName(flow); err != nil {
			return usagef("<flow> %q: %s", flow, ruleOf(err))
		}
		ok, err := a.in.RetryRun(ctx, flow, id)
		if err != nil {
			return err
		}
		if !ok {
			// Say how it stands: a retry repeated after a lost reply finds
			// the run running again.
			if r, err := a.in.Run(ctx, flow, id); err == nil {
				return fmt.Errorf("run %s of flow %s is not failed: it is %s (nothing retried)", id, flow, r.Status)
			}
			return fmt.Errorf("run %s of flow %s is not failed (it ended and expired, or never existed): nothing retried", id, flow)
		}
		_, err = fmt.Fprintln(a.env.out, "retried", id)
		return err
	})
	return cmd
}

func (a *app) flowGetCmd() *cobra.Command {
	var o output
	cmd := &cobra.Command{
		Use:     "get <flow> <run_id>",
		Short:   "one run: status, stage, state fields, children",
		Example: "  worqr flow get membership cv3k1s1hhc2s73b0o3ng -o json",
		Args:    args("flow", "run_id"),
	}
	o.register(cmd)
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		if err := o.check(); err != nil {
			return err
		}
		r, err := a.getRun(ctx, args[0], args[1])
		if err != nil {
			return err
		}
		if o.json() {
			return writeJSON(a.env.out, runOf(r))
		}
		w := a.env.out
		if err := kv(w, "run", r.ID, "flow", r.Flow, "status", string(r.Status), "stage", r.Stage,
			"task_state", orDash(r.TaskState), "awaiting", orDash(r.Awaiting), "wake_at", when(r.WakeAt),
			"started_at", when(idTime(r.ID)), "finished_at", when(r.FinishedAt),
			"last_error", orDash(r.LastError)); err != nil {
			return err
		}
		fmt.Fprintf(w, "\nstate: %d fields\n", len(r.State))
		if len(r.State) > 0 {
			t := newTable(w, "FIELD", "VALUE")
			for _, k := range sortedKeys(r.State) {
				t.row(k, clip(r.State[k], 100))
			}
			if err := t.flush(); err != nil {
				return err
			}
		}
		fmt.Fprintf(w, "\nchildren: %d\n", len(r.Children))
		if len(r.Children) > 0 {
			t := newTable(w, "CHILD", "QUEUE", "STATUS", "ERROR")
			for _, c := range r.Children {
				t.row(c.ID, c.Queue, c.Status, orDash(clip(c.Err, 60)))
			}
			return t.flush()
		}
		return nil
	})
	return cmd
}

func (a *app) flowTreeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tree <flow> <run_id>",
		Short: "one run drawn as a tree: the run, its stage, its children by queue",
		Long: `Draws one run as a tree: the run with its status, its current (or last)
stage with the state of the stage's task, and its children grouped by child
queue with their outcome.`,
		Example: "  worqr flow tree membership cv3k1s1hhc2s73b0o3ng",
		Args:    args("flow", "run_id"),
	}
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		r, err := a.getRun(ctx, args[0], args[1])
		if err != nil {
			return err
		}
		return drawTree(a.env.out, r)
	})
	return cmd
}

func drawTree(w io.Writer, r *worqr.RunInfo) error {
	line := func(prefix, text string) { fmt.Fprintf(w, "%s%s\n", prefix, text) }
	head := fmt.Sprintf("run %s  flow %s  %s", r.ID, r.Flow, r.Status)
	if r.LastError != "" {
		head += "  error: " + clip(r.LastError, 80)
	}
	line("", head)
	stage := fmt.Sprintf("stage %s", r.Stage)
	if r.TaskState != "" {
		stage += "  " + r.TaskState
	}
	if len(r.Children) == 0 {
		line("└── ", stage)
		return nil
	}
	line("├── ", stage)
	byQueue := map[string][]worqr.ChildResult{}
	var queues []string
	for _, c := range r.Children {
		if _, ok := byQueue[c.Queue]; !ok {
			queues = append(queues, c.Queue)
		}
		byQueue[c.Queue] = append(byQueue[c.Queue], c)
	}
	line("└── ", fmt.Sprintf("children  %s", childSummary(r.Children)))
	for i, q := range queues {
		branch, indent := "    ├── ", "    │   "
		if i == len(queues)-1 {
			branch, indent = "    └── ", "        "
		}
		line(branch, "queue "+q)
		cs := byQueue[q]
		for j, c := range cs {
			b := "├── "
			if j == len(cs)-1 {
				b = "└── "
			}
			text := c.ID + "  " + c.Status
			if c.Err != "" {
				text += "  error: " + clip(c.Err, 80)
			}
			line(indent+b, text)
		}
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
