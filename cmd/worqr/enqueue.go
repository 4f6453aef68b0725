package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/worqr/worqr-go/worqr"
)

func (a *app) enqueueCmd() *cobra.Command {
	var (
		delay, timeout, uniqueTTL time.Duration
		maxAttempts               int
		uniqueKey                 string
	)
	cmd := &cobra.Command{
		Use:   "enqueue <queue> <payload | @file | ->",
		Short: "enqueue one task and print its id",
		Long: `Enqueues one task at the back of a queue and prints its id on stdout.

The payload is the argument itself, the contents of a file with @file, or
standard input with - (all of it, up to the library's payload limit). A file
and stdin are taken byte for byte: the newline that echo or jq -c ends its
output with is part of the payload (printf '%s' avoids it).`,
		Example: `  worqr enqueue emails '{"to":"ada@example.com"}'
  worqr enqueue emails @message.json
  jq -c . message.json | worqr enqueue emails -
  worqr enqueue emails '{}' --delay 10m --max-attempts 3`,
		Args: args("queue", "payload | @file | -"),
	}
	f := cmd.Flags()
	f.DurationVar(&delay, "delay", 0, "run it no sooner than this from now (for example 30s, 10m)")
	f.IntVar(&maxAttempts, "max-attempts", 0, "failed attempts before it goes to the dead set (0: the queue's setting)")
	f.DurationVar(&timeout, "timeout", 0, "the handler's deadline for this task (0: the queue's setting)")
	f.StringVar(&uniqueKey, "unique-key", "", "refuse the enqueue while another task holds this key")
	f.DurationVar(&uniqueTTL, "unique-ttl", 0, "how long --unique-key holds at most (required with it; released sooner when the task ends)")
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		q, src := args[0], args[1]
		if err := checkQueue("<queue>", q); err != nil {
			return err
		}
		for _, d := range []struct {
			name string
			v    time.Duration
		}{{"--delay", delay}, {"--timeout", timeout}, {"--unique-ttl", uniqueTTL}} {
			if d.v < 0 {
				return usagef("%s %s: must not be negative", d.name, d.v)
			}
		}
		if maxAttempts < 0 {
			return usagef("--max-attempts %d: must not be negative", maxAttempts)
		}
		if uniqueTTL > 0 && uniqueKey == "" {
			return usagef("--unique-ttl needs --unique-key")
		}
		if uniqueKey != "" && uniqueTTL < time.Millisecond {
			return usagef("--unique-key needs --unique-ttl (at least 1ms): how long the key holds at most")
		}
		payload, err := a.readPayload(src)
		if err != nil {
			return err
		}
		opts := &worqr.EnqueueOpts{Delay: delay, MaxAttempts: maxAttempts, Timeout: timeout, UniqueKey: uniqueKey, UniqueTTL: uniqueTTL}
		id, err := a.client.Enqueue(ctx, q, payload, opts)
		if errors.Is(err, worqr.ErrNotReplicated) {
			// Enqueued on the primary: print the id, then say so (exit 1).
			if _, perr := fmt.Fprintln(a.env.out, id); perr != nil {
				return perr
			}
			return fmt.Errorf("task %s is enqueued on the primary, but not confirmed by the replicas %s asks for (lost if the primary fails now): %w", id, envReplicas, err)
		}
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(a.env.out, id)
		return err
	})
	return cmd
}

// readPayload reads the payload argument: "-" is stdin, "@file" a file, and
// anything else the payload itself.
func (a *app) readPayload(src string) ([]byte, error) {
	switch {
	case src == "-":
		if a.env.stdinTTY {
			fmt.Fprintln(a.env.err, "reading the payload from stdin (end it with Ctrl-D)")
		}
		b, err := io.ReadAll(a.env.in)
		if err != nil {
			return nil, fmt.Errorf("reading the payload from stdin: %w", err)
		}
		return b, nil
	case strings.HasPrefix(src, "@"):
		name := src[1:]
		if name == "" {
			return nil, usagef("<payload> %q: want @<file>, for example @message.json", src)
		}
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, usagef("<payload> %s: %v", src, err)
		}
		return b, nil
	}
	return []byte(src), nil
}
