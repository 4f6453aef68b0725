package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/worqr/worqr-go/defaults"

	"github.com/spf13/cobra"

	"github.com/worqr/worqr-go/worqr"
)

// queueStats is one queue in `stats -o json`: exactly these fields.
type queueStats struct {
	Name           string `json:"name"`
	Waiting        int64  `json:"waiting"`
	Behind         int64  `json:"behind"`
	Scheduled      int64  `json:"scheduled"`
	Active         int64  `json:"active"`
	OldestActiveMs int64  `json:"oldest_active_ms"`
	Dead           int64  `json:"dead"`
	Paused         bool   `json:"paused"`
	LatencyMs      int64  `json:"latency_ms"`
}

func (a *app) statsCmd() *cobra.Command {
	var (
		o        output
		watch    bool
		interval time.Duration
		history  bool
		minutes  int
	)
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "every queue's waiting, scheduled, active and dead counts, pause and latency",
		Long: `Prints every known queue (served by a worker or enqueued to, flow stage and
child queues as <flow>/<queue>) with how many tasks wait, wait behind their
key's head (BEHIND: an ordered queue's tasks that WAITING does not count), are
scheduled, are held by workers and are dead, how long the oldest active task
has been running (OLDEST_ACTIVE: a handler that hangs shows here), whether it
is paused, and its latency: the age of the oldest waiting task.

With -o json it prints a list of {name, waiting, behind, scheduled, active,
oldest_active_ms, dead, paused, latency_ms}. With --watch it prints again every --interval until
interrupted (Ctrl-C): on a terminal it redraws the screen; otherwise, and with
-o json, it prints one snapshot after the other (JSON: one list per line).
When Redis cannot be reached it says so and tries again every --interval,
and goes on once Redis answers again.

With --history it prints instead every queue's throughput per minute over the
last hour (or --minutes); -o json adds each queue's share of every minute.
` + historyHelp,
		Example: `  worqr stats
  worqr stats -o json | jq '.[] | select(.dead > 0) | .name'
  worqr stats --watch --interval 1s
  worqr stats --history
  worqr stats --history --minutes 120 -o json`,
		Args: args(),
	}
	o.register(cmd)
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "print again every --interval until interrupted")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "how often --watch prints (at least 100ms)")
	cmd.Flags().BoolVar(&history, "history", false, "print the throughput per minute instead of the counts")
	cmd.Flags().IntVar(&minutes, "minutes", 60, fmt.Sprintf("with --history: how many minutes, the current one included (1 to %d)", defaults.HistoryMaxMinutes))
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, _ []string) error {
		if err := o.check(); err != nil {
			return err
		}
		if interval < 100*time.Millisecond {
			return usagef("--interval %s: must be at least 100ms", interval)
		}
		if history {
			if watch {
				return usagef("--history: not with --watch")
			}
			return a.printHistory(ctx, a.env.out, o, "", minutes)
		}
		if cmd.Flags().Changed("minutes") {
			return usagef("--minutes: only with --history")
		}
		if !watch {
			return a.printStats(ctx, a.env.out, o, false)
		}
		redraw := a.env.stdoutTTY && !o.json()
		return a.watch(ctx, cmd, interval, redraw, "worqr stats", func(ctx context.Context) error {
			return a.printStats(ctx, a.env.out, o, true)
		})
	})
	return cmd
}

func (a *app) printStats(ctx context.Context, w io.Writer, o output, compact bool) error {
	qs, err := a.in.Queues(ctx)
	if err != nil {
		return err
	}
	if o.json() {
		out := make([]queueStats, len(qs))
		for i, q := range qs {
			out[i] = statsOf(q)
		}
		if compact {
			return writeJSONLine(w, out)
		}
		return writeJSON(w, out)
	}
	if len(qs) == 0 {
		_, err := fmt.Fprintf(w, "no queues in namespace %q\n", a.namespace)
		return err
	}
	t := newTable(w, "QUEUE", "WAITING", "BEHIND", "SCHEDULED", "ACTIVE", "OLDEST_ACTIVE", "DEAD", "PAUSED", "LATENCY")
	for _, q := range qs {
		t.row(q.Name, itoa(q.Waiting), itoa(q.Behind), itoa(q.Scheduled), itoa(q.Active), ago(q.OldestActive),
			itoa(q.Dead), yesNo(q.Paused), ago(q.Latency))
	}
	return t.flush()
}

func statsOf(q worqr.QueueInfo) queueStats {
	return queueStats{Name: q.Name, Waiting: q.Waiting, Behind: q.Behind, Scheduled: q.Scheduled, Active: q.Active,
		OldestActiveMs: q.OldestActive.Milliseconds(), Dead: q.Dead, Paused: q.Paused, LatencyMs: q.Latency.Milliseconds()}
}
