package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/worqr/worqr-go/worqr"
)

type eventJSON struct {
	Kind        string   `json:"kind"`
	At          *string  `json:"at"`
	Worker      string   `json:"worker,omitempty"`
	Queue       string   `json:"queue,omitempty"`
	Task        string   `json:"task,omitempty"`
	PID         string   `json:"pid,omitempty"`
	Err         string   `json:"err,omitempty"`
	Count       int      `json:"count,omitempty"`
	DeadWorkers []string `json:"dead_workers,omitempty"`
}

func (a *app) eventsCmd() *cobra.Command {
	var (
		o      output
		queue  string
		kinds  []string
		recent int
	)
	cmd := &cobra.Command{
		Use:   "events",
		Short: "follow what every worker, client and inspector of the namespace does, live",
		Long: `Prints each event as it is published (enqueued, started, done, retry, dead,
cancelled, given back, recovered, paused, ...) until interrupted. Each process
publishes what it observed at most once per its EventInterval (250 ms by
default), so events arrive in small bursts. With --recent N, the events of the
latest N batches kept in the event log (processes with EventLogLength set)
are printed first. One JSON object per line with -o json.`,
		Example: "  worqr events\n  worqr events --queue emails --kind dead,retry\n  worqr events -o json | jq .",
		Args:    args(),
	}
	o.register(cmd)
	cmd.Flags().StringVar(&queue, "queue", "", "only events of this queue")
	cmd.Flags().StringSliceVar(&kinds, "kind", nil, "only events of these kinds (comma-separated: "+kindList()+")")
	cmd.Flags().IntVar(&recent, "recent", 0, "first print the events of the latest N logged batches")
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, _ []string) error {
		if err := o.check(); err != nil {
			return err
		}
		if queue != "" {
			if err := checkQueue("--queue", queue); err != nil {
				return err
			}
		}
		if recent < 0 {
			return usagef("--recent %d: want 0 or more", recent)
		}
		want := map[worqr.EventKind]bool{}
		for _, k := range kinds {
			k := worqr.EventKind(strings.TrimSpace(k))
			if !slices.Contains(worqr.EventKinds(), k) {
				return usagef("--kind %q: not an event kind (want one of %s)", k, kindList())
			}
			want[k] = true
		}
		// Output that cannot be written (a full disk, a closed socket)
		// ends the command with its error rather than following on.
		ctx, stop := context.WithCancel(ctx)
		defer stop()
		var werr error
		print := func(e worqr.Event) {
			if werr != nil || (queue != "" && e.Queue != queue) || (len(want) > 0 && !want[e.Kind]) {
				return
			}
			if werr = a.printEvent(o, e); werr != nil {
				stop()
			}
		}
		if recent > 0 {
			events, err := a.in.RecentEvents(ctx, recent)
			if err != nil {
				return err
			}
			for _, e := range events {
				print(e)
			}
			if werr != nil {
				return werr
			}
		}
		if err := a.in.Follow(ctx, print); err != nil {
			return err
		}
		return werr
	})
	return cmd
}

func (a *app) printEvent(o output, e worqr.Event) error {
	if o.json() {
		j := eventJSON{Kind: string(e.Kind), At: jsonTime(e.At), Worker: e.WorkerID, Queue: e.Queue, Task: e.TaskID,
			PID: e.PID, Count: e.Count, DeadWorkers: e.DeadWorkers}
		if e.Err != nil {
			j.Err = e.Err.Error()
		}
		return writeJSONLine(a.env.out, j)
	}
	parts := []string{e.At.UTC().Format("15:04:05.000"), string(e.Kind), orDash(e.Queue), orDash(e.TaskID)}
	if e.Count > 1 {
		parts = append(parts, fmt.Sprintf("count=%d", e.Count))
	}
	if e.WorkerID != "" {
		parts = append(parts, "worker="+e.WorkerID)
	}
	if e.Err != nil {
		parts = append(parts, "err="+strings.ReplaceAll(e.Err.Error(), "\n", " "))
	}
	_, err := fmt.Fprintln(a.env.out, strings.Join(parts, " "))
	return err
}

func kindList() string {
	kinds := worqr.EventKinds()
	s := make([]string, len(kinds))
	for i, k := range kinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}
