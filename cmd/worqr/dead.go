package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/worqr/worqr-go/worqr"
)

func (a *app) deadCmd() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "dead",
		Short: "list, requeue, delete and group a queue's dead tasks",
		Example: `  worqr dead ls emails
  worqr dead errors emails
  worqr dead retry emails --all
  worqr dead retry emails --error 'timeout after <n>s'
  worqr dead delete emails --all --yes`,
	})
	cmd.AddCommand(a.deadLsCmd(), a.deadAllCmd(true), a.deadAllCmd(false), a.deadErrorsCmd())
	return cmd
}

func (a *app) deadLsCmd() *cobra.Command {
	var (
		o             output
		limit, offset int
	)
	cmd := &cobra.Command{
		Use:     "ls <queue> [--limit N] [--offset N]",
		Short:   "a page of a queue's dead tasks, newest first",
		Long:    "Lists a page of a queue's dead set, newest first, with why each died. A flow's failed runs are in the dead set of the stage they failed in (<flow>/<stage>).",
		Example: "  worqr dead ls emails\n  worqr dead ls emails --limit 100 -o json",
		Args:    args("queue"),
	}
	o.register(cmd)
	cmd.Flags().IntVar(&limit, "limit", 20, "how many tasks to show (1 to 1000)")
	cmd.Flags().IntVar(&offset, "offset", 0, "how many of the newest to skip")
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		q := args[0]
		if err := a.knownArg(ctx, &o, q); err != nil {
			return err
		}
		if limit < 1 || limit > 1000 {
			return usagef("--limit %d: must be between 1 and 1000", limit)
		}
		if offset < 0 {
			return usagef("--offset %d: must not be negative", offset)
		}
		ts, total, err := a.in.Tasks(ctx, q, worqr.StateDead, offset, limit)
		if err != nil {
			return err
		}
		if o.json() {
			return a.printTasks(o, ts, total, offset, "dead")
		}
		if len(ts) > 0 {
			t := newTable(a.env.out, "ID", "DIED", "REASON", "FAILURES", "LAST_ERROR", "PAYLOAD")
			for _, tk := range ts {
				t.row(tk.ID, when(tk.DiedAt), orDash(clip(tk.DeadReason, 30)), itoa(tk.Failures), orDash(clip(tk.LastError, 50)), typedPreview(tk.Type, tk.HandlerPayload(), 40))
			}
			if err := t.flush(); err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.env.out, "%d-%d of %d dead\n", offset+1, offset+len(ts), total)
			return err
		}
		_, err = fmt.Fprintf(a.env.out, "no dead tasks shown (%d in all)\n", total)
		return err
	})
	return cmd
}

// deadAllCmd is `dead retry` (requeue) or `dead delete`, over the whole dead
// set of a queue (--all) or over one error group of it (--error).
func (a *app) deadAllCmd(requeue bool) *cobra.Command {
	var (
		all, yes bool
		group    string
		scan     int
	)
	name, verb, question := "delete", "deleted", "delete all %d dead tasks of queue %s"
	short := "delete every dead task of a queue, or those of one error group (asks first)"
	if requeue {
		name, verb, question = "retry", "requeued", "requeue all %d dead tasks of queue %s"
		short = "requeue every dead task of a queue, or those of one error group, at its back (asks first)"
	}
	cmd := &cobra.Command{
		Use:   name + " <queue> --all | --error GROUP",
		Short: short,
		Long: short + `.

With --all it works through the whole dead set, oldest first, in atomic
chunks of at most 250, so an interruption (Ctrl-C) leaves every task either
done or untouched: run it again to finish. With --error it acts on the dead
tasks of one error group, as 'worqr dead errors' prints it ("timeout after
<n>s"; a group clipped with … matches the groups it starts; a raw error
text matches its group): it reads the newest --scan dead tasks (10,000 by
default) to find them, says so when the dead set holds more, and acts on
them in chunks of 250.

--all or --error is required, so that a whole dead set is never acted on by
accident ('worqr task ` + name + ` <queue> <id>' acts on one task). It asks for
confirmation on a terminal; --yes skips the question, and is required when
stdin is not a terminal. A progress bar is drawn when stderr is a terminal,
plain progress lines are printed otherwise.`,
		Example: "  worqr dead " + name + " emails --all\n  worqr dead " + name + " emails --all --yes\n" +
			"  worqr dead errors emails\n  worqr dead " + name + " emails --error 'timeout after <n>s' --yes",
		Args: args("queue"),
	}
	cmd.Flags().BoolVar(&all, "all", false, "act on every dead task of the queue")
	cmd.Flags().StringVar(&group, "error", "", "act on the dead tasks of this error group (as 'worqr dead errors' prints it)")
	cmd.Flags().IntVar(&scan, "scan", 10000, "with --error: how many of the newest dead tasks to read (at least 1)")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		q := args[0]
		if err := checkQueue("<queue>", q); err != nil {
			return err
		}
		byError := cmd.Flags().Changed("error")
		switch {
		case all && byError:
			return usagef("--all and --error: give one of them")
		case !all && !byError:
			return usagef("--all or --error is required: 'worqr dead %s %s --all' acts on the whole dead set, --error GROUP on one error group ('worqr task %s %s <id>' on one task)", name, q, name, q)
		case byError && strings.TrimSpace(group) == "":
			return usagef("--error: must not be empty ('worqr dead errors %s' lists the groups)", q)
		case cmd.Flags().Changed("scan") && !byError:
			return usagef("--scan: only with --error")
		case scan < 1:
			return usagef("--scan %d: must be at least 1", scan)
		}
		qi, err := a.knownQueue(ctx, q)
		if err != nil {
			return err
		}
		if qi.Dead == 0 {
			_, err := fmt.Fprintf(a.env.out, "%s 0 dead tasks of %s (the dead set is empty)\n", verb, q)
			return err
		}
		if byError {
			return a.deadGroup(ctx, cmd, requeue, q, group, scan, yes)
		}
		if err := a.confirm(cmd, yes, fmt.Sprintf(question, qi.Dead, q)); err != nil {
			return err
		}
		return a.bulk(ctx, verb, "dead tasks of "+q, qi.Dead, func(ctx context.Context, p worqr.Progress) (int, error) {
			if requeue {
				return a.in.RequeueAllDead(ctx, q, p)
			}
			return a.in.DeleteAllDead(ctx, q, p)
		})
	})
	return cmd
}

// deadGroup requeues (or deletes) the dead tasks of q in error group group
// among the newest scan.
func (a *app) deadGroup(ctx context.Context, cmd *cobra.Command, requeue bool, q, group string, scan int, yes bool) error {
	ids, scanned, total, err := a.deadInGroup(ctx, q, group, scan)
	if err != nil {
		return err
	}
	newest := ""
	if scanned < total {
		newest = fmt.Sprintf(" among the newest %d of %d (raise --scan to read more)", scanned, total)
	}
	if len(ids) == 0 {
		return fmt.Errorf("no dead task of %s is in error group %q%s ('worqr dead errors %s' lists the groups)", q, group, newest, q)
	}
	verb, op := "deleted", "delete"
	act := a.in.DeleteDead
	if requeue {
		verb, op, act = "requeued", "requeue", a.in.RequeueDead
	}
	if err := a.confirm(cmd, yes, fmt.Sprintf("%s the %d dead tasks of queue %s in error group %q%s", op, len(ids), q, group, newest)); err != nil {
		return err
	}
	if newest != "" {
		fmt.Fprintf(a.env.err, "read the newest %d of %d dead tasks: run it again for the older ones\n", scanned, total)
	}
	return a.bulk(ctx, verb, fmt.Sprintf("dead tasks of %s in error group %q", q, group), int64(len(ids)),
		func(ctx context.Context, p worqr.Progress) (int, error) {
			done := 0
			for len(ids) > 0 {
				n := min(len(ids), deadChunk)
				k, err := act(ctx, q, ids[:n]...)
				done += k
				if err != nil {
					return done, err
				}
				ids = ids[n:]
				p(done)
			}
			return done, nil
		})
}

// deadChunk is how many dead tasks one call of deadGroup moves: a chunk is
// atomic, so an interruption leaves each task done or untouched.
const deadChunk = 250

// deadInGroup returns the ids of the dead tasks of q in error group group
// among the newest scan, how many it read and the dead set's size. group
// is a group as groupDead makes it ("timeout after <n>s"), a raw error
// text (it matches its group), or a group clipped by a table ("timeout
// aft…": it matches the groups it starts).
func (a *app) deadInGroup(ctx context.Context, q, group string, scan int) ([]string, int, int, error) {
	match := func(shape string) bool { return shape == worqr.ErrorShape(group) }
	if prefix, clipped := strings.CutSuffix(group, "…"); clipped {
		match = func(shape string) bool { return strings.HasPrefix(shape, prefix) }
	}
	var ids []string
	seen := map[string]bool{}
	scanned, total, err := a.scanDead(ctx, q, scan, func(t *worqr.TaskInfo) {
		if !seen[t.ID] && match(worqr.ErrorShape(deadText(t))) {
			ids = append(ids, t.ID)
		}
		seen[t.ID] = true
	})
	if err != nil {
		return nil, 0, 0, err
	}
	return ids, scanned, total, nil
}

// scanDead calls f with up to scan dead tasks of q, newest first, read in
// pages of 1,000, and returns how many it read and how many q holds.
func (a *app) scanDead(ctx context.Context, q string, scan int, f func(*worqr.TaskInfo)) (scanned, total int, err error) {
	for scanned < scan {
		page := min(1000, scan-scanned)
		ts, n, err := a.in.Tasks(ctx, q, worqr.StateDead, scanned, page)
		if err != nil {
			return scanned, total, err
		}
		total = n
		for _, t := range ts {
			f(t)
		}
		scanned += len(ts)
		if len(ts) < page {
			break
		}
	}
	return scanned, total, nil
}

// deadText is what a dead task is grouped by: its last error or, when it
// has none, the reason it died.
func deadText(t *worqr.TaskInfo) string {
	if t.LastError != "" {
		return t.LastError
	}
	return t.DeadReason
}

// errorGroup is one line of `dead errors`.
type errorGroup struct {
	Error   string `json:"error"`
	Count   int    `json:"count"`
	Example string `json:"example"`
	// ExampleID is the newest dead task with this error.
	ExampleID string  `json:"example_id"`
	Newest    *string `json:"newest"`
	newest    time.Time
}

func (a *app) deadErrorsCmd() *cobra.Command {
	var (
		o    output
		scan int
	)
	cmd := &cobra.Command{
		Use:   "errors <queue>",
		Short: "a queue's dead tasks grouped by normalised error, most frequent first",
		Long: `Groups a queue's dead tasks by their last error (or, when they have none, the
reason they died), normalised so that errors that differ only by numbers, hex
ids, task ids or UUIDs fall together: "timeout after 3s" and "timeout after
5s" both count as "timeout after <n>s". Prints each group's count, the
normalised text, and the newest task with it as an example; sorted by count,
then by text.

It reads the newest --scan dead tasks (10,000 by default) and says so when the
dead set holds more.`,
		Example: "  worqr dead errors emails\n  worqr dead errors emails -o json | jq '.groups[0]'",
		Args:    args("queue"),
	}
	o.register(cmd)
	cmd.Flags().IntVar(&scan, "scan", 10000, "how many of the newest dead tasks to read (at least 1)")
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		q := args[0]
		if err := a.knownArg(ctx, &o, q); err != nil {
			return err
		}
		if scan < 1 {
			return usagef("--scan %d: must be at least 1", scan)
		}
		groups, scanned, total, err := a.groupDead(ctx, q, scan)
		if err != nil {
			return err
		}
		if o.json() {
			if groups == nil {
				groups = []*errorGroup{}
			}
			return writeJSON(a.env.out, struct {
				Queue   string        `json:"queue"`
				Total   int           `json:"total"`
				Scanned int           `json:"scanned"`
				Groups  []*errorGroup `json:"groups"`
			}{q, total, scanned, groups})
		}
		if len(groups) == 0 {
			_, err := fmt.Fprintf(a.env.out, "no dead tasks in %s\n", q)
			return err
		}
		t := newTable(a.env.out, "COUNT", "ERROR", "NEWEST", "EXAMPLE_ID")
		for _, g := range groups {
			t.row(itoa(g.Count), clip(g.Error, 100), when(g.newest), g.ExampleID)
		}
		if err := t.flush(); err != nil {
			return err
		}
		if scanned < total {
			_, err = fmt.Fprintf(a.env.out, "%d groups in the newest %d of %d dead tasks (raise --scan to read more)\n", len(groups), scanned, total)
		} else {
			_, err = fmt.Fprintf(a.env.out, "%d groups in %d dead tasks\n", len(groups), scanned)
		}
		return err
	})
	return cmd
}

// groupDead reads up to scan dead tasks of q, newest first, and groups them.
func (a *app) groupDead(ctx context.Context, q string, scan int) ([]*errorGroup, int, int, error) {
	byText := map[string]*errorGroup{}
	var groups []*errorGroup
	scanned, total, err := a.scanDead(ctx, q, scan, func(t *worqr.TaskInfo) {
		text := deadText(t)
		norm := worqr.ErrorShape(text)
		g := byText[norm]
		if g == nil {
			g = &errorGroup{Error: norm, Example: text, ExampleID: t.ID, newest: t.DiedAt, Newest: jsonTime(t.DiedAt)}
			byText[norm] = g
			groups = append(groups, g)
		}
		g.Count++
	})
	if err != nil {
		return nil, 0, 0, err
	}
	sort.SliceStable(groups, func(i, j int) bool {
		if groups[i].Count != groups[j].Count {
			return groups[i].Count > groups[j].Count
		}
		return groups[i].Error < groups[j].Error
	})
	return groups, scanned, total, nil
}
