package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/worqr/worqr-go/defaults"

	"github.com/spf13/cobra"

	"github.com/worqr/worqr-go/worqr"
)

// scheduleJSON is one schedule in `periodic ls -o json`.
type scheduleJSON struct {
	Name      string  `json:"name"`
	Queue     string  `json:"queue"`
	Cron      string  `json:"cron"`
	EveryMs   int64   `json:"every_ms"`
	TimeZone  string  `json:"time_zone"`
	Missed    string  `json:"missed"`
	GraceMs   int64   `json:"grace_ms"`
	Paused    bool    `json:"paused"`
	Next      *string `json:"next"`
	LastFired *string `json:"last_fired"`
	Fired     int64   `json:"fired"`
	// The options of the ticks' tasks (worqr.Schedule.Opts; 0: none, the
	// queue's; a TimeoutMS of -1: no limit) and StartWithin.
	Type          string            `json:"type"`
	Priority      int               `json:"priority"`
	MaxAttempts   int               `json:"max_attempts"`
	TimeoutMS     int64             `json:"timeout_ms"`
	RetentionMS   int64             `json:"retention_ms"`
	Meta          map[string]string `json:"meta,omitempty"`
	StartWithinMS int64             `json:"start_within_ms"`
}

func scheduleOf(s worqr.ScheduleInfo) scheduleJSON {
	j := scheduleJSON{Name: s.Name, Queue: s.Queue, Cron: s.Cron, EveryMs: s.Every.Milliseconds(), TimeZone: s.TimeZone,
		Missed: string(s.Missed), GraceMs: s.Grace.Milliseconds(), Paused: s.Paused, Next: jsonTime(s.Next),
		LastFired: jsonTime(s.LastFired), Fired: s.Fired, StartWithinMS: s.StartWithin.Milliseconds()}
	if o := s.Opts; o != nil {
		j.Type, j.Priority, j.MaxAttempts, j.Meta = o.Type, o.Priority, o.MaxAttempts, o.Meta
		j.TimeoutMS, j.RetentionMS = o.Timeout.Milliseconds(), o.Retention.Milliseconds()
		if o.Timeout < 0 {
			j.TimeoutMS = -1
		}
	}
	return j
}

// tickOptions says what options the ticks' tasks of s carry, as
// name=value pairs ("-": none).
func tickOptions(s worqr.ScheduleInfo) string {
	var out []string
	add := func(name, v string) {
		if v == "" || strings.ContainsAny(v, " \t\n\"=") {
			v = strconv.Quote(v)
		}
		out = append(out, name+"="+v)
	}
	if o := s.Opts; o != nil {
		if o.Type != "" {
			add("type", o.Type)
		}
		if o.Priority != 0 {
			add("priority", itoa(o.Priority))
		}
		if o.MaxAttempts != 0 {
			add("max_attempts", itoa(o.MaxAttempts))
		}
		switch {
		case o.Timeout > 0:
			add("timeout", o.Timeout.String())
		case o.Timeout < 0:
			add("timeout", "none")
		}
		if o.Retention != 0 {
			add("retention", o.Retention.String())
		}
		keys := make([]string, 0, len(o.Meta))
		for k := range o.Meta {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			add("meta."+k, o.Meta[k])
		}
	}
	if s.StartWithin > 0 {
		add("start_within", s.StartWithin.Round(time.Millisecond).String())
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, " ")
}

func (a *app) periodicCmd() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "periodic",
		Short: "list, pause, resume and remove the schedules of periodic tasks",
		Long: `Schedules of periodic tasks are registered by the programs that run a
worqr.Scheduler; every Scheduler of the namespace fires every schedule, one
task per tick. These commands list and steer them.`,
		Example: `  worqr periodic ls
  worqr periodic pause nightly-report
  worqr periodic resume nightly-report
  worqr periodic rm nightly-report`,
	})
	cmd.AddCommand(a.periodicLsCmd(), a.periodicActCmd("pause"), a.periodicActCmd("resume"), a.periodicActCmd("rm"))
	return cmd
}

func (a *app) periodicLsCmd() *cobra.Command {
	var o output
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "list every schedule with its timing, next tick and last fired tick",
		Long: `Lists every schedule of the namespace: its queue, its timing (a cron
expression with its time zone, or an interval), its missed-tick policy, whether
it is paused, its next tick and the last tick a task was enqueued for (UTC),
and the options its ticks' tasks are enqueued with (type, priority,
max_attempts, timeout, retention, meta.<name>, start_within: the deadline
after each tick).`,
		Example: "  worqr periodic ls\n  worqr periodic ls -o json",
		Args:    args(),
	}
	o.register(cmd)
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, _ []string) error {
		if err := o.check(); err != nil {
			return err
		}
		ss, err := a.in.Schedules(ctx)
		if err != nil {
			return err
		}
		if o.json() {
			out := make([]scheduleJSON, len(ss))
			for i, s := range ss {
				out[i] = scheduleOf(s)
			}
			return writeJSON(a.env.out, out)
		}
		if len(ss) == 0 {
			_, err := fmt.Fprintf(a.env.out, "no schedules in namespace %q\n", a.namespace)
			return err
		}
		t := newTable(a.env.out, "NAME", "QUEUE", "TIMING", "MISSED", "PAUSED", "NEXT", "LAST FIRED", "FIRED", "TASK OPTIONS")
		for _, s := range ss {
			timing := "every " + s.Every.String()
			if s.Cron != "" {
				timing = s.Cron
				if s.TimeZone != "" {
					timing += " (" + s.TimeZone + ")"
				}
			}
			t.row(s.Name, s.Queue, timing, string(s.Missed), yesNo(s.Paused), when(s.Next), when(s.LastFired), itoa(s.Fired), tickOptions(s))
		}
		return t.flush()
	})
	return cmd
}

func (a *app) periodicActCmd(verb string) *cobra.Command {
	var short, long, done string
	switch verb {
	case "pause":
		short, done = "stop a schedule from firing until it is resumed", "paused"
		long = short + ".\n\nEvery Scheduler of the namespace sees it at its next pass."
	case "resume":
		short, done = "let a paused schedule fire again", "resumed"
		long = short + ".\n\nIt fires from its first tick after now: the ticks that fell during the pause\nare skipped, whatever its missed-tick policy."
	default:
		short, done = "remove a schedule: no Scheduler fires it again", "removed"
		long = short + ".\n\nA program that registers it at start brings it back when it restarts."
	}
	cmd := &cobra.Command{
		Use:     verb + " <name>",
		Short:   short,
		Long:    long,
		Example: "  worqr periodic " + verb + " nightly-report",
		Args:    args("name"),
	}
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		name := args[0]
		if err := worqr.CheckQueueName(name); err != nil || len(name) > defaults.MaxScheduleNameLen {
			return usagef("<name> %q: schedule names are 1 to %d characters of A-Z a-z 0-9 _ - .", name, defaults.MaxScheduleNameLen)
		}
		var err error
		switch verb {
		case "pause":
			err = a.in.PauseSchedule(ctx, name)
		case "resume":
			err = a.in.ResumeSchedule(ctx, name)
		default:
			err = a.in.RemoveSchedule(ctx, name)
		}
		if errors.Is(err, worqr.ErrScheduleNotFound) {
			return fmt.Errorf("schedule %q not found in namespace %q", name, a.namespace)
		}
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(a.env.out, "%s %s\n", done, name)
		return err
	})
	return cmd
}
