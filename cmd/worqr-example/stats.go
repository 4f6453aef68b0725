package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/worqr/worqr-go/worqr"
)

const statsHead = `Usage: worqr-example stats [flags]

Prints, for each queue, how many tasks wait, are scheduled, are held by
workers and are dead, whether it is paused and the age of its oldest waiting
task, then the registered workers and whether their keepalive is still there
(a dead one is listed until a peer's reaper forgets it):
  queue <name> waiting <n> scheduled <n> active <n> dead <n> paused <bool> latency_ms <n>
  workers <n>
  worker <worker_id> alive|dead
Without --queues, every known queue is shown: served by a worker or enqueued
to, flow stage and child queues included (as <flow>/<queue>).
`

func runStats(ctx context.Context, args []string, io stdio) error {
	fs := newFlagSet("stats")
	var c common
	c.register(fs, io.getenv, true)
	queueList := fs.String("queues", "", "comma-separated queues to show (default: every known queue)")
	if err := parse(fs, args, io.out, statsHead, "\nEnvironment:\n"+envHelp(true, false)); err != nil {
		return err
	}
	if err := c.check(true); err != nil {
		return err
	}
	var queues []string
	if *queueList != "" {
		var err error
		if queues, err = parseQueues("--queues", *queueList); err != nil {
			return err
		}
	}
	cn, err := c.connect(ctx, io)
	if err != nil {
		return err
	}
	defer cn.close()
	in := cn.in
	var infos []worqr.QueueInfo
	if queues == nil {
		if infos, err = in.Queues(ctx); err != nil {
			return fmt.Errorf("queues: %w", err)
		}
	}
	for _, q := range queues {
		qi, err := in.Queue(ctx, q)
		if err != nil {
			return fmt.Errorf("queue %s: %w", q, err)
		}
		infos = append(infos, *qi)
	}
	out := &lineWriter{w: io.out}
	for _, q := range infos {
		if err := out.line("queue", q.Name, "waiting", itoa(q.Waiting), "scheduled", itoa(q.Scheduled),
			"active", itoa(q.Active), "dead", itoa(q.Dead), "paused", strconv.FormatBool(q.Paused),
			"latency_ms", itoa(q.Latency.Milliseconds())); err != nil {
			return err
		}
	}
	workers, err := in.Workers(ctx)
	if err != nil {
		return fmt.Errorf("workers: %w", err)
	}
	if err := out.line("workers", strconv.Itoa(len(workers))); err != nil {
		return err
	}
	for _, w := range workers {
		state := "dead"
		if w.Alive {
			state = "alive"
		}
		if err := out.line("worker", w.ID, state); err != nil {
			return err
		}
	}
	return nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
