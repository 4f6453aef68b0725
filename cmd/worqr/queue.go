package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/worqr/worqr-go/worqr"
)

// group returns a command that only holds subcommands: without one it prints
// its help, with an unknown one it fails as a usage error.
func group(cmd *cobra.Command) *cobra.Command {
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usagef("unknown command %q for %q", args[0], c.CommandPath())
		}
		return c.Help()
	}
	return cmd
}

// queueJSON is one queue in `queue ls -o json` and `queue inspect -o json`.
type queueJSON struct {
	queueStats
	Flow     string `json:"flow"`
	Retained int64  `json:"retained"`
	// Keys: an ordered queue's keys that have tasks; waiting counts only
	// their heads, behind the tasks behind them.
	Keys int64 `json:"keys"`
}

func (a *app) queueCmd() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "queue",
		Short: "list, inspect, pause, resume, limit, purge, remove queues and show their history",
		Example: `  worqr queue ls
  worqr queue inspect emails
  worqr queue pause emails
  worqr queue limits emails --rate 100 --period 1s --concurrency 10
  worqr queue purge emails --yes
  worqr queue rm emials
  worqr queue history emails`,
	})
	cmd.AddCommand(a.queueLsCmd(), a.queueInspectCmd(), a.queueHistoryCmd(), a.queuePauseCmd(true), a.queuePauseCmd(false), a.queueLimitsCmd(), a.queuePurgeCmd(), a.queueRmCmd(), a.queueKeysCmd())
	return cmd
}

func (a *app) queueLsCmd() *cobra.Command {
	var o output
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "list every known queue with its counts",
		Long: `Lists every known queue with its flow, counts (behind: an ordered queue's
tasks waiting behind their key's head, which waiting does not count; retained:
ended tasks kept for the queue's retention; keys: an ordered queue's keys that
have tasks: 'worqr queue keys' shows what waits behind each), pause and
latency.`,
		Example: "  worqr queue ls\n  worqr queue ls -o json",
		Args:    args(),
	}
	o.register(cmd)
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, _ []string) error {
		if err := o.check(); err != nil {
			return err
		}
		qs, err := a.in.Queues(ctx)
		if err != nil {
			return err
		}
		if o.json() {
			out := make([]queueJSON, len(qs))
			for i, q := range qs {
				out[i] = queueJSON{queueStats: statsOf(q), Flow: q.Flow, Retained: q.Retained, Keys: q.Keys}
			}
			return writeJSON(a.env.out, out)
		}
		if len(qs) == 0 {
			_, err := fmt.Fprintf(a.env.out, "no queues in namespace %q\n", a.namespace)
			return err
		}
		t := newTable(a.env.out, "QUEUE", "FLOW", "WAITING", "BEHIND", "SCHEDULED", "ACTIVE", "DEAD", "RETAINED", "KEYS", "PAUSED", "LATENCY")
		for _, q := range qs {
			t.row(q.Name, orDash(q.Flow), itoa(q.Waiting), itoa(q.Behind), itoa(q.Scheduled), itoa(q.Active), itoa(q.Dead),
				itoa(q.Retained), itoa(q.Keys), yesNo(q.Paused), ago(q.Latency))
		}
		return t.flush()
	})
	return cmd
}

func (a *app) queueInspectCmd() *cobra.Command {
	var o output
	cmd := &cobra.Command{
		Use:   "inspect <queue>",
		Short: "one queue's counts, the workers that serve it and the next tasks",
		Long: `Prints one queue's counts (behind: an ordered queue's tasks waiting behind
their key's head; oldest_active: how long its oldest active task has been
running), pause and latency, the workers that serve it (with how many of its
tasks each holds) and the first tasks waiting.`,
		Example: "  worqr queue inspect emails\n  worqr queue inspect membership/notify -o json",
		Args:    args("queue"),
	}
	o.register(cmd)
	next := cmd.Flags().Int("next", 5, "how many waiting tasks to show (0 for none, at most 1000)")
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		q := args[0]
		if err := o.check(); err != nil {
			return err
		}
		if err := checkQueue("<queue>", q); err != nil {
			return err
		}
		if *next < 0 || *next > 1000 {
			return usagef("--next %d: must be between 0 and 1000", *next)
		}
		qi, err := a.knownQueue(ctx, q)
		if err != nil {
			return err
		}
		ws, err := a.in.Workers(ctx)
		if err != nil {
			return err
		}
		type served struct {
			ID    string `json:"id"`
			Alive bool   `json:"alive"`
			Held  int    `json:"held"`
		}
		var workers []served
		for _, w := range ws {
			for _, wq := range w.Queues {
				if wq == q {
					workers = append(workers, served{ID: w.ID, Alive: w.Alive, Held: w.Held[q]})
				}
			}
		}
		var tasks []taskJSON
		if *next > 0 {
			ts, _, err := a.in.Tasks(ctx, q, "queued", 0, *next)
			if err != nil {
				return err
			}
			for _, t := range ts {
				tasks = append(tasks, taskOf(t))
			}
		}
		if o.json() {
			if workers == nil {
				workers = []served{}
			}
			if tasks == nil {
				tasks = []taskJSON{}
			}
			return writeJSON(a.env.out, struct {
				queueJSON
				Workers []served   `json:"workers"`
				Next    []taskJSON `json:"next"`
			}{queueJSON{queueStats: statsOf(*qi), Flow: qi.Flow, Retained: qi.Retained, Keys: qi.Keys}, workers, tasks})
		}
		w := a.env.out
		if err := kv(w, "queue", qi.Name, "flow", orDash(qi.Flow), "waiting", itoa(qi.Waiting), "behind", itoa(qi.Behind),
			"scheduled", itoa(qi.Scheduled), "active", itoa(qi.Active), "oldest_active", ago(qi.OldestActive), "dead", itoa(qi.Dead),
			"retained", itoa(qi.Retained), "keys", itoa(qi.Keys), "paused", yesNo(qi.Paused), "latency", ago(qi.Latency)); err != nil {
			return err
		}
		fmt.Fprintf(w, "\nworkers serving it: %d\n", len(workers))
		if len(workers) > 0 {
			t := newTable(w, "WORKER", "ALIVE", "HELD")
			for _, s := range workers {
				t.row(s.ID, yesNo(s.Alive), itoa(s.Held))
			}
			if err := t.flush(); err != nil {
				return err
			}
		}
		if *next > 0 {
			fmt.Fprintf(w, "\nnext waiting: %d of %d\n", len(tasks), qi.Waiting)
			if len(tasks) > 0 {
				t := newTable(w, "ID", "ENQUEUED", "PAYLOAD")
				for _, tk := range tasks {
					t.row(tk.ID, orDash(deref(tk.EnqueuedAt)), tk.preview())
				}
				return t.flush()
			}
		}
		return nil
	})
	return cmd
}

func (a *app) queuePauseCmd(pause bool) *cobra.Command {
	use, short, verb := "resume <queue>", "let workers take tasks of a paused queue again", "resumed"
	if pause {
		use, short, verb = "pause <queue>", "stop every worker from taking tasks of a queue (running ones finish)", "paused"
	}
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Long:    short + ".\n\nWorkers see the change within one poll interval (at once when the announcement reaches them). The queue must be known in the namespace.",
		Example: "  worqr queue pause emails\n  worqr queue resume emails",
		Args:    args("queue"),
	}
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		q := args[0]
		if err := checkQueue("<queue>", q); err != nil {
			return err
		}
		if err := a.mustKnow(ctx, q); err != nil {
			return err
		}
		var err error
		if pause {
			err = a.in.Pause(ctx, q)
		} else {
			err = a.in.Resume(ctx, q)
		}
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(a.env.out, "%s %s\n", verb, q)
		return err
	})
	return cmd
}

func (a *app) queueLimitsCmd() *cobra.Command {
	var (
		rate, conc int
		period     time.Duration
		clear, new bool
	)
	cmd := &cobra.Command{
		Use:   "limits <queue>",
		Short: "show or set a queue's global rate and concurrency limits",
		Long: `Without flags, prints the queue's global limits. With --rate and --period,
--concurrency or --clear, stores them (the flags given replace every limit:
one left out is removed); every worker applies them at once (within one poll
interval if the announcement is lost). The limits hold across every process:
at most --rate tasks start in any window of --period (Redis's clock), at
most --concurrency run at once.

Setting the limits of a queue the namespace does not know yet (no worker or
client used it) is refused, so that a typo does not set them on nothing:
--new sets them all the same, for a queue about to be used.`,
		Example: "  worqr queue limits emails\n  worqr queue limits emails --rate 100 --period 1s\n  worqr queue limits emails --concurrency 10\n  worqr queue limits emails --clear\n  worqr queue limits api-calls --rate 100 --period 1s --new",
		Args:    args("queue"),
	}
	f := cmd.Flags()
	f.IntVar(&rate, "rate", 0, "most task starts per period")
	f.DurationVar(&period, "period", 0, "the rate's window")
	f.IntVar(&conc, "concurrency", 0, "most tasks running at once, across every worker")
	f.BoolVar(&clear, "clear", false, "remove every limit")
	f.BoolVar(&new, "new", false, "set the limits of a queue that is not known yet")
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		q := args[0]
		if err := checkQueue("<queue>", q); err != nil {
			return err
		}
		set := clear || cmd.Flags().Changed("rate") || cmd.Flags().Changed("period") || cmd.Flags().Changed("concurrency")
		switch {
		case clear && (rate != 0 || period != 0 || conc != 0):
			return usagef("--clear cannot be given with --rate, --period or --concurrency")
		case rate < 0:
			return usagef("--rate %d: must not be negative", rate)
		case conc < 0:
			return usagef("--concurrency %d: must not be negative", conc)
		case period < 0:
			return usagef("--period %s: must not be negative", period)
		case rate > 0 && period == 0:
			return usagef("--rate needs --period, the window it counts starts in (for example --period 1s)")
		case period > 0 && rate == 0 && cmd.Flags().Changed("rate"):
			return usagef("--rate 0 with --period %s: the rate must be at least 1 start per period (--clear, or no --rate and --period, removes the rate limit)", period)
		case period > 0 && rate == 0:
			return usagef("--period needs --rate, the starts it allows in each window")
		case new && !set:
			return usagef("--new is for setting limits: give --rate and --period, --concurrency or --clear")
		}
		var unknown *unknownQueueError
		if err := a.mustKnow(ctx, q); err != nil && !errors.As(err, &unknown) {
			return err
		} else if err != nil && !new {
			if set {
				return fmt.Errorf("%w; --new sets its limits all the same", err)
			}
			fmt.Fprintf(a.env.err, "note: %v\n", err)
		}
		if set {
			if err := a.in.SetLimits(ctx, q, worqr.Limits{Rate: rate, Period: period, Concurrency: conc}); err != nil {
				if errors.Is(err, worqr.ErrInvalid) {
					return usagef("%v", err)
				}
				return err
			}
		}
		l, err := a.in.Limits(ctx, q)
		if err != nil {
			return err
		}
		desc := "none"
		switch {
		case l.Rate > 0 && l.Concurrency > 0:
			desc = fmt.Sprintf("rate %d per %s, concurrency %d", l.Rate, l.Period, l.Concurrency)
		case l.Rate > 0:
			desc = fmt.Sprintf("rate %d per %s", l.Rate, l.Period)
		case l.Concurrency > 0:
			desc = fmt.Sprintf("concurrency %d", l.Concurrency)
		}
		_, err = fmt.Fprintf(a.env.out, "limits of %s: %s\n", q, desc)
		return err
	})
	return cmd
}

func (a *app) queuePurgeCmd() *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "purge <queue>",
		Short: "delete every waiting and scheduled task of a queue (asks first)",
		Long: `Deletes every task waiting in a stand-alone queue, and its scheduled tasks
(delayed ones and retries) too, in atomic chunks of at most 250. In an
ordered queue that includes the tasks waiting behind each key's head, even
a head that runs or is dead. Running
tasks are left alone; dead tasks are kept ('worqr dead delete' removes them).
A flow's queues cannot be purged: cancel their runs instead.

It asks for confirmation on a terminal; --yes skips the question, and is
required when stdin is not a terminal.`,
		Example: "  worqr queue purge emails\n  worqr queue purge emails --yes",
		Args:    args("queue"),
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		q := args[0]
		if err := checkQueue("<queue>", q); err != nil {
			return err
		}
		qi, err := a.knownQueue(ctx, q)
		if err != nil {
			return err
		}
		if qi.Flow != "" {
			return usagef("<queue> %q is a queue of flow %q: its tasks are runs, end them with the flow's CancelRun", q, qi.Flow)
		}
		total := qi.Waiting + qi.Scheduled
		what := fmt.Sprintf("delete all %d waiting and %d scheduled tasks of queue %s", qi.Waiting, qi.Scheduled, q)
		if qi.Keys > 0 {
			what += fmt.Sprintf(", and every task waiting behind its %d keys", qi.Keys)
		}
		if err := a.confirm(cmd, yes, what); err != nil {
			return err
		}
		return a.bulk(ctx, "deleted", "waiting and scheduled tasks of "+q, total, func(ctx context.Context, p worqr.Progress) (int, error) {
			return a.in.DeleteAllWaiting(ctx, q, p)
		})
	})
	return cmd
}

func (a *app) queueRmCmd() *cobra.Command {
	var yes, force bool
	cmd := &cobra.Command{
		Use:   "rm <queue>",
		Short: "remove a queue: forget it and delete its keys (asks first)",
		Long: `Removes a stand-alone queue (a typo, a test, a queue no longer used): deletes
its keys (config and limits, pause, key heads, parked workers) and its
throughput history, and forgets it, so that 'queue ls', 'stats', the
dashboard and the metrics no longer list it.

It is refused while the queue holds tasks (waiting, scheduled, running,
dead or retained), unless --force: then they are deleted first, in atomic
chunks of at most 250 (the takings of dead workers are requeued first, as
the reaper would), with a progress report. It is refused, forced or not,
while a live worker or gateway session serves the queue: stop them first.
A flow's queues cannot be removed one by one.

Each step can be repeated: an interrupted removal leaves the queue listed,
and the same command finishes it. A producer still enqueueing to the queue
lists it again (within a minute), with its tasks.

It asks for confirmation on a terminal; --yes skips the question, and is
required when stdin is not a terminal.`,
		Example: "  worqr queue rm emials\n  worqr queue rm load-test --force --yes",
		Args:    args("queue"),
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	cmd.Flags().BoolVar(&force, "force", false, "delete the queue's tasks too")
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		q := args[0]
		if err := checkQueue("<queue>", q); err != nil {
			return err
		}
		if strings.Contains(q, "/") {
			return usagef("<queue> %q is a flow's queue: a flow's queues cannot be removed one by one", q)
		}
		qi, err := a.in.Queue(ctx, q)
		if err != nil {
			return err
		}
		tasks := qi.Waiting + qi.Scheduled + qi.Active + qi.Dead + qi.Retained
		if tasks == 0 && qi.Keys == 0 {
			// Nothing to ask about for a name never used (a queue not
			// known but holding tasks, a producer's, can be removed).
			if err := a.mustKnow(ctx, q); err != nil {
				return err
			}
		}
		if !force && (tasks > 0 || qi.Keys > 0) {
			// Refused before asking: the library would refuse it too.
			return &worqr.QueueNotEmptyError{Held: *qi}
		}
		what := "remove queue " + q
		if force && tasks > 0 {
			what += fmt.Sprintf(" and delete its %d waiting, %d scheduled, %d running, %d dead and %d retained tasks",
				qi.Waiting, qi.Scheduled, qi.Active, qi.Dead, qi.Retained)
		}
		if err := a.confirm(cmd, yes, what); err != nil {
			return err
		}
		var p worqr.Progress
		end := func() {}
		if force {
			p, end = a.progress("deleted", tasks)
		}
		n, err := a.in.RemoveQueue(ctx, q, &worqr.RemoveQueueOpts{Force: force, Progress: p})
		end()
		if errors.Is(err, worqr.ErrQueueNotFound) {
			return &unknownQueueError{q: q, ns: a.namespace}
		}
		if err != nil {
			if n > 0 {
				return fmt.Errorf("deleted %d tasks of %s, then: %w", n, q, err)
			}
			return err
		}
		if force {
			_, err = fmt.Fprintf(a.env.out, "removed queue %s (deleted %d tasks)\n", q, n)
		} else {
			_, err = fmt.Fprintf(a.env.out, "removed queue %s\n", q)
		}
		return err
	})
	return cmd
}

// keyJSON is one key in `queue keys -o json`; a fair queue's key has no
// head, its tasks waiting in behind, and its running count and limits.
type keyJSON struct {
	Key         string `json:"key"`
	Head        string `json:"head"`
	HeadState   string `json:"head_state"`
	Behind      int    `json:"behind"`
	Blocked     bool   `json:"blocked"`
	Running     int    `json:"running,omitempty"`
	Weight      int    `json:"weight,omitempty"`
	Concurrency int    `json:"concurrency,omitempty"`
	Rate        int    `json:"rate,omitempty"`
	PeriodMs    int64  `json:"period_ms,omitempty"`
}

func (a *app) queueKeysCmd() *cobra.Command {
	var (
		o       output
		blocked bool
		limit   int
	)
	cmd := &cobra.Command{
		Use:   "keys <queue>",
		Short: "an ordered or fair queue's keys: each one's head and tasks behind it, or its counts and limits",
		Long: `Lists the keys of an ordered queue that have tasks: each key's head (the task
that runs, waits its turn or its retry, or is dead), its state, and how many
tasks wait behind it (they run one at a time, after the head). A key whose
head is dead is blocked until the head is requeued or deleted ('worqr dead
retry' / 'worqr dead delete'), unless the queue moves on. 'queue ls' counts
only the heads as waiting.

Of a fair queue, the keys with tasks waiting or running: how many of each,
whether the key is blocked (held by its concurrency, or waiting out its
rate), and its limits (its own, or the queue's for each key): weight,
concurrency, rate per period ('-': none).`,
		Example: "  worqr queue keys orders\n  worqr queue keys orders --blocked\n  worqr queue keys orders -o json --limit 10000",
		Args:    args("queue"),
	}
	o.register(cmd)
	cmd.Flags().BoolVar(&blocked, "blocked", false, "only the keys blocked by a dead head (read from the dead set, newest first)")
	cmd.Flags().IntVar(&limit, "limit", 100, "at most this many keys (1 to 100000)")
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		q := args[0]
		if err := o.check(); err != nil {
			return err
		}
		if err := checkQueue("<queue>", q); err != nil {
			return err
		}
		if limit < 1 || limit > 100000 {
			return usagef("--limit %d: must be between 1 and 100000", limit)
		}
		if err := a.mustKnow(ctx, q); err != nil {
			return err
		}
		var ks []worqr.KeyInfo
		total := -1
		if blocked {
			var err error
			if ks, err = a.in.BlockedKeys(ctx, q, limit); err != nil {
				return err
			}
		} else {
			seen := map[string]bool{}
			for cursor := uint64(0); ; {
				page, next, n, err := a.in.Keys(ctx, q, cursor, min(limit, 1000))
				if err != nil {
					return err
				}
				total = n
				for _, k := range page {
					if !seen[k.Key] && len(ks) < limit {
						seen[k.Key] = true
						ks = append(ks, k)
					}
				}
				if next == 0 || len(ks) >= limit {
					break
				}
				cursor = next
			}
		}
		out := make([]keyJSON, len(ks))
		fair := false
		for i, k := range ks {
			out[i] = keyJSON{Key: k.Key, Behind: k.Behind, Blocked: k.Blocked}
			if k.Head != nil {
				out[i].Head, out[i].HeadState = k.Head.ID, string(k.Head.State)
			} else {
				fair = true
				out[i].Running, out[i].Weight, out[i].Concurrency = k.Running, k.Weight, k.Concurrency
				out[i].Rate, out[i].PeriodMs = k.Rate, k.Period.Milliseconds()
			}
		}
		if o.json() {
			return writeJSON(a.env.out, out)
		}
		if len(out) == 0 {
			_, err := fmt.Fprintf(a.env.out, "no keys with tasks in queue %s\n", q)
			return err
		}
		var t *table
		if fair {
			t = newTable(a.env.out, "KEY", "WAITING", "RUNNING", "BLOCKED", "WEIGHT", "CONCURRENCY", "RATE")
			for _, k := range out {
				conc, rate := "-", "-"
				if k.Concurrency > 0 {
					conc = strconv.Itoa(k.Concurrency)
				}
				if k.Rate > 0 {
					rate = strconv.Itoa(k.Rate) + "/" + (time.Duration(k.PeriodMs) * time.Millisecond).String()
				}
				t.row(k.Key, strconv.Itoa(k.Behind), strconv.Itoa(k.Running), yesNo(k.Blocked), strconv.Itoa(k.Weight), conc, rate)
			}
		} else {
			t = newTable(a.env.out, "KEY", "HEAD", "HEAD STATE", "BEHIND", "BLOCKED")
			for _, k := range out {
				t.row(k.Key, orDash(k.Head), orDash(k.HeadState), strconv.Itoa(k.Behind), yesNo(k.Blocked))
			}
		}
		if err := t.flush(); err != nil {
			return err
		}
		if total > len(out) {
			_, err := fmt.Fprintf(a.env.out, "%d of %d keys (--limit)\n", len(out), total)
			return err
		}
		return nil
	})
	return cmd
}
