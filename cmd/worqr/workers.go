package main

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"
)

type workerJSON struct {
	ID             string         `json:"id"`
	Host           string         `json:"host"`
	PID            int            `json:"pid"`
	Started        *string        `json:"started"`
	Alive          bool           `json:"alive"`
	KeepaliveAgeMs int64          `json:"keepalive_age_ms"`
	Queues         []string       `json:"queues"`
	Held           map[string]int `json:"held"`
}

func (a *app) workersCmd() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "workers",
		Short:   "list the registered workers",
		Example: "  worqr workers ls\n  worqr workers ls -o json",
	})
	var o output
	ls := &cobra.Command{
		Use:   "ls",
		Short: "every registered worker: host, pid, keepalive age, queues and held tasks",
		Long: `Lists the registered workers with their host and process id, when they
started, whether their keepalive is still there and how old it is, the queues
they serve and how many tasks they hold in each (HELD: queue=n, ...). A dead
worker is listed until a peer's reaper forgets it.`,
		Example: "  worqr workers ls",
		Args:    args(),
	}
	o.register(ls)
	ls.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, _ []string) error {
		if err := o.check(); err != nil {
			return err
		}
		ws, err := a.in.Workers(ctx)
		if err != nil {
			return err
		}
		if o.json() {
			out := make([]workerJSON, len(ws))
			for i, w := range ws {
				qs := w.Queues
				if qs == nil {
					qs = []string{}
				}
				out[i] = workerJSON{ID: w.ID, Host: w.Host, PID: w.PID, Started: jsonTime(w.Started), Alive: w.Alive,
					KeepaliveAgeMs: w.KeepaliveAge.Milliseconds(), Queues: qs, Held: w.Held}
			}
			return writeJSON(a.env.out, out)
		}
		if len(ws) == 0 {
			_, err := fmt.Fprintf(a.env.out, "no workers registered in namespace %q\n", a.namespace)
			return err
		}
		t := newTable(a.env.out, "WORKER", "HOST", "PID", "ALIVE", "KEEPALIVE", "STARTED", "QUEUES", "HELD")
		for _, w := range ws {
			var held []string
			for q, n := range w.Held {
				held = append(held, fmt.Sprintf("%s=%d", q, n))
			}
			sort.Strings(held)
			t.row(w.ID, orDash(w.Host), itoa(w.PID), yesNo(w.Alive), ago(w.KeepaliveAge), when(w.Started),
				orDash(strings.Join(w.Queues, ",")), orDash(strings.Join(held, ",")))
		}
		return t.flush()
	})
	cmd.AddCommand(ls)
	return cmd
}
