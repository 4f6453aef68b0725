package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/worqr/worqr-go/defaults"

	"github.com/spf13/cobra"

	"github.com/worqr/worqr-go/worqr"
)

func (a *app) enqueueCmd() *cobra.Command {
	var (
		delay, timeout, uniqueTTL time.Duration
		maxAttempts, priority     int
		uniqueKey, key, id, typ   string
		at                        string
	)
	cmd := &cobra.Command{
		Use:   "enqueue <queue> <payload | @file | ->",
		Short: "enqueue one task and print its id",
		Long: `Enqueues one task at the back of a queue and prints its id on stdout.

The payload is the argument itself, the contents of a file with @file, or
standard input with - (all of it, up to the library's payload limit). A file
and stdin are taken byte for byte: the newline that echo or jq -c ends its
output with is part of the payload (printf '%s' avoids it).

--priority sets the task's level (0 to ` + strconv.Itoa(worqr.MaxPriority) + `, higher taken first); --key makes it
wait for the tasks enqueued earlier with the same key (an ordered queue; not
with --priority, --id or --unique-key); --id gives it an id of your choosing,
which makes the enqueue idempotent (the same id and payload again enqueue
nothing and print the same id); --type gives it a task type (EnqueueOpts.Type)
for a queue served by a Mux; --at (an RFC 3339 time) or --delay (a duration
from now) hold it back until then; --timeout is its handler's deadline.`,
		Example: `  worqr enqueue emails '{"to":"ada@example.com"}'
  worqr enqueue emails @message.json
  jq -c . message.json | worqr enqueue emails -
  worqr enqueue emails '{}' --delay 10m --max-attempts 3
  worqr enqueue emails '{}' --type welcome --priority 5 --timeout 30s
  worqr enqueue orders '{"step":2}' --key order-42
  worqr enqueue reports '{"month":"2026-10"}' --id report-2026-10 --at 2026-11-01T06:00:00Z`,
		Args: args("queue", "payload | @file | -"),
	}
	f := cmd.Flags()
	f.DurationVar(&delay, "delay", 0, "run it no sooner than this from now (for example 30s, 10m); not with --at")
	f.StringVar(&at, "at", "", "run it no sooner than this RFC 3339 time (for example 2026-11-01T06:00:00Z); not with --delay")
	f.IntVar(&maxAttempts, "max-attempts", 0, "failed attempts before it goes to the dead set (0: the queue's setting)")
	f.DurationVar(&timeout, "timeout", 0, "the handler's deadline for this task (0: the queue's setting)")
	f.IntVar(&priority, "priority", 0, fmt.Sprintf("its level within the queue, 0 to %d: higher levels are taken first", worqr.MaxPriority))
	f.StringVar(&key, "key", "", "run it after the tasks enqueued earlier with this key, never beside one (ordered queue)")
	f.StringVar(&id, "id", "", "its id, of your choosing (as queue names): the same id and payload again enqueue nothing")
	f.StringVar(&typ, "type", "", "its task type, for a queue served by a Mux (as queue names)")
	f.StringVar(&uniqueKey, "unique-key", "", "refuse the enqueue while another task holds this key")
	f.DurationVar(&uniqueTTL, "unique-ttl", 0, "how long --unique-key holds at most (required with it; released sooner when the task ends)")
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		q, src := args[0], args[1]
		if err := checkQueue("<queue>", q); err != nil {
			return err
		}
		opts := &worqr.EnqueueOpts{Delay: delay, MaxAttempts: maxAttempts, Timeout: timeout, UniqueKey: uniqueKey,
			UniqueTTL: uniqueTTL, Priority: priority, Key: key, ID: id, Type: typ}
		if err := checkEnqueueFlags(cmd, opts, at); err != nil {
			return err
		}
		payload, err := a.readPayload(src)
		if err != nil {
			return err
		}
		id, err := a.client.Enqueue(ctx, q, payload, opts)
		if errors.Is(err, worqr.ErrNotReplicated) {
			// Enqueued on the primary: print the id, then say so (exit 1).
			if _, perr := fmt.Fprintln(a.env.out, id); perr != nil {
				return perr
			}
			return fmt.Errorf("task %s is enqueued on the primary, but not confirmed by the replicas %s asks for (lost if the primary fails now): %w", id, envReplicas, err)
		}
		if err != nil {
			return enqueueFlagError(err)
		}
		_, err = fmt.Fprintln(a.env.out, id)
		return err
	})
	return cmd
}

// checkEnqueueFlags checks the flags of enqueue, fills opts.At from at, and
// refuses a bad value with an error naming the flag and the rule (before
// anything is read or enqueued).
func checkEnqueueFlags(cmd *cobra.Command, opts *worqr.EnqueueOpts, at string) error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--delay", opts.Delay}, {"--timeout", opts.Timeout}, {"--unique-ttl", opts.UniqueTTL}} {
		if d.v < 0 {
			return usagef("%s %s: must not be negative", d.name, d.v)
		}
	}
	if opts.MaxAttempts < 0 {
		return usagef("--max-attempts %d: must not be negative", opts.MaxAttempts)
	}
	if opts.Priority < 0 || opts.Priority > worqr.MaxPriority {
		return usagef("--priority %d: must be between 0 and %d", opts.Priority, worqr.MaxPriority)
	}
	if opts.UniqueTTL > 0 && opts.UniqueKey == "" {
		return usagef("--unique-ttl needs --unique-key")
	}
	if opts.UniqueKey != "" && opts.UniqueTTL < time.Millisecond {
		return usagef("--unique-key needs --unique-ttl (at least 1ms): how long the key holds at most")
	}
	changed := cmd.Flags().Changed
	for _, name := range []string{"key", "id", "type", "unique-key"} {
		if changed(name) && cmd.Flags().Lookup(name).Value.String() == "" {
			return usagef("--%s: must not be empty", name)
		}
	}
	if opts.Key != "" {
		if len(opts.Key) > defaults.MaxKeyLen {
			return usagef("--key is %d bytes long (at most %d)", len(opts.Key), defaults.MaxKeyLen)
		}
		if changed("priority") {
			return usagef("--key: not with --priority (a key's tasks run in enqueue order)")
		}
		for _, other := range []string{"id", "unique-key"} {
			if changed(other) {
				return usagef("--key: not with --%s", other)
			}
		}
	}
	if opts.ID != "" {
		if err := worqr.CheckQueueName(opts.ID); err != nil {
			return usagef("--id %s", ruleOf(err))
		}
	}
	if opts.Type != "" {
		if err := worqr.CheckQueueName(opts.Type); err != nil { // a type follows the rules of queue names
			return usagef("--type %s", ruleOf(err))
		}
	}
	if at != "" {
		if changed("delay") {
			return usagef("--at: not with --delay (--at is a time, --delay a duration from now)")
		}
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			return usagef("--at %q: not an RFC 3339 time (want for example 2026-11-01T06:00:00Z or 2026-11-01T07:00:00+01:00)", at)
		}
		if t.UnixMilli() <= 0 {
			return usagef("--at %q: must be after 1970", at)
		}
		opts.At = t
	} else if changed("at") {
		return usagef("--at: must not be empty")
	}
	return nil
}

// enqueueFlag names the flag of each EnqueueOpts field the library may
// refuse.
var enqueueFlag = map[string]string{
	"EnqueueOpts.Delay": "--delay", "EnqueueOpts.At": "--at", "EnqueueOpts.MaxAttempts": "--max-attempts",
	"EnqueueOpts.Timeout": "--timeout", "EnqueueOpts.UniqueKey": "--unique-key", "EnqueueOpts.UniqueTTL": "--unique-ttl",
	"EnqueueOpts.ID": "--id", "EnqueueOpts.Priority": "--priority", "EnqueueOpts.Key": "--key",
	"EnqueueOpts.Type": "--type",
}

// enqueueFlagError turns the library's refusal of an option into one that
// names the flag (a rule the CLI does not check itself, say one added
// later); other errors pass as they are.
func enqueueFlagError(err error) error {
	var ie *worqr.InvalidError
	if errors.As(err, &ie) {
		if flag, ok := enqueueFlag[ie.Field]; ok {
			return usagef("%s %s", flag, ie.Rule)
		}
	}
	return err
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
