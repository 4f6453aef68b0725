package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/worqr/worqr-go/defaults"

	"github.com/worqr/worqr-go/recovery"
)

const reaperHead = `Usage: worqr-example reaper [flags]

Runs a stand-alone reaper until SIGINT or SIGTERM: it serves no queue, but
takes part in recovery like any worker does. Every WORQR_REAPER_INTERVAL it
tries the namespace's reaper lease; when it holds it, it requeues the takings
of workers whose keepalive expired (to the front of their queues) and moves
due delayed and retried tasks to their queues. Use it when every worker runs
with DisableReaper, or to keep recovery going while no worker is up.

Its passes are published as events (recovered, cancelled), as a worker's
reaper publishes them. Stdout carries one line per event:
  reaping <holder>                              (started)
  recovered <queue> <count> <worker_id>[,...]   (takings requeued)
  cancelled <queue> <task_id>                   (a taking ended as cancelled instead:
                                                 its cancel was asked while it was held)
  error <text>                                  (a failed pass; retried next interval)
`

func runReaper(ctx context.Context, args []string, io stdio) error {
	fs := newFlagSet("reaper")
	var c common
	c.register(fs, io.getenv, true)
	if err := parse(fs, args, io.out, reaperHead, "\nEnvironment:\n"+envHelp(true, true)); err != nil {
		return err
	}
	if err := c.check(true); err != nil {
		return err
	}
	tm, err := readTimings(io.getenv)
	if err != nil {
		return err
	}
	interval := tm.orDefaults().ReaperInterval
	if interval < defaults.MinInterval {
		return usagef("%s: %s must be at least %s", envReaperInterval, interval, defaults.MinInterval)
	}
	cn, err := c.connect(ctx, io)
	if err != nil {
		return err
	}
	defer cn.close()
	out := &lineWriter{w: io.out}
	holder := "reaper-cli-" + strconv.Itoa(os.Getpid())
	r, err := recovery.New(cn.pool, &recovery.Config{
		Namespace: c.namespace, Interval: interval, Holder: holder, Logger: cn.log,
		OnRecovered: func(rec recovery.Recovered) {
			// Published as a worker's reaper publishes its passes: the
			// events and the history count this reaper's work too.
			cn.client.ReportRecovered(holder, rec)
			_ = out.line("recovered", rec.Queue.Member(), strconv.Itoa(rec.Requeued), strings.Join(rec.Workers, ","))
			for _, c := range rec.Cancelled {
				// Ended as cancelled instead (its cancel was asked while
				// the dead worker held it), as a worker's line says it.
				_ = out.line(lineCancelled, rec.Queue.Member(), c.TaskID)
			}
		},
		OnError: func(err error) {
			_ = out.line("error", strings.ReplaceAll(err.Error(), "\n", " "))
		},
	})
	if err != nil {
		return usagef("%v", err)
	}
	sigCtx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := out.line("reaping", holder); err != nil {
		return err
	}
	r.Run(sigCtx)
	if err := ctx.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("reaper: %w", err)
	}
	return nil
}
