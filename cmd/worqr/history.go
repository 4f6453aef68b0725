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

// historyJSON is one minute in `stats --history -o json` and
// `queue history -o json`.
type historyJSON struct {
	Minute time.Time `json:"minute"` // the minute's start, UTC
	worqr.Throughput
	// Queues is each queue's share (stats --history only; queues with
	// nothing that minute are left out).
	Queues map[string]worqr.Throughput `json:"queues,omitempty"`
}

const historyHelp = `Each row is one minute (oldest first, the current minute last, still
counting): tasks enqueued, takings done (flow stages: forwarded or fanned out
too), failed attempts retried, tasks gone dead, cancelled, expired, and tasks
requeued from dead workers (recovered). Every worker and client of the
namespace adds what it observed with each publication of its events (about
every 250ms), so the history is shared by every process that reads it and
survives restarts; Redis keeps each minute for two hours. A process killed
loses at most what it saw since its last publication.`

func (a *app) printHistory(ctx context.Context, w io.Writer, o output, queue string, minutes int) error {
	if minutes < 1 || minutes > defaults.HistoryMaxMinutes {
		return usagef("--minutes %d: must be between 1 and %d", minutes, defaults.HistoryMaxMinutes)
	}
	hs, err := a.in.History(ctx, queue, minutes)
	if err != nil {
		return err
	}
	if o.json() {
		out := make([]historyJSON, len(hs))
		for i, h := range hs {
			out[i] = historyJSON{Minute: h.Minute.UTC(), Throughput: h.Throughput}
			if queue == "" {
				out[i].Queues = h.Queues
			}
		}
		return writeJSON(w, out)
	}
	t := newTable(w, "MINUTE", "ENQUEUED", "DONE", "RETRIED", "DEAD", "CANCELLED", "EXPIRED", "RECOVERED")
	var sum worqr.Throughput
	for _, h := range hs {
		c := h.Throughput
		t.row(h.Minute.Format("15:04"), itoa(c.Enqueued), itoa(c.Done), itoa(c.Retried), itoa(c.Dead),
			itoa(c.Cancelled), itoa(c.Expired), itoa(c.Recovered))
		sum.Enqueued += c.Enqueued
		sum.Done += c.Done
		sum.Retried += c.Retried
		sum.Dead += c.Dead
		sum.Cancelled += c.Cancelled
		sum.Expired += c.Expired
		sum.Recovered += c.Recovered
	}
	t.row("total", itoa(sum.Enqueued), itoa(sum.Done), itoa(sum.Retried), itoa(sum.Dead),
		itoa(sum.Cancelled), itoa(sum.Expired), itoa(sum.Recovered))
	return t.flush()
}

func (a *app) queueHistoryCmd() *cobra.Command {
	var o output
	cmd := &cobra.Command{
		Use:   "history <queue>",
		Short: "one queue's throughput per minute over the last hour (or --minutes)",
		Long:  "Prints one queue's history, minute by minute.\n\n" + historyHelp,
		Example: `  worqr queue history emails
  worqr queue history emails --minutes 120 -o json | jq 'map(.dead) | add'`,
		Args: args("queue"),
	}
	o.register(cmd)
	minutes := cmd.Flags().Int("minutes", 60, fmt.Sprintf("how many minutes, the current one included (1 to %d)", defaults.HistoryMaxMinutes))
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		if err := o.check(); err != nil {
			return err
		}
		if err := checkQueue("<queue>", args[0]); err != nil {
			return err
		}
		if err := a.mustKnow(ctx, args[0]); err != nil {
			return err
		}
		return a.printHistory(ctx, a.env.out, o, args[0], *minutes)
	})
	return cmd
}
