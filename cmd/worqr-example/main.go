// Command worqr-example shows worqr at work and drives it from the shell.
//
// With no subcommand it runs a short demo: tasks are enqueued, three
// in-process workers and one child worker process share them, the child is
// killed with SIGKILL while it holds tasks, and a peer recovers them. Without
// WORQR_REDIS_URL the demo runs on an embedded in-process Redis (miniredis).
//
// The subcommands enqueue, flow, worker, stats, task, reaper and consumer work on a real Redis,
// across as many processes as you like. The worker subcommand prints one line
// per event on stdout (see lines.go; --timestamps stamps each line); logs go
// to stderr. The task subcommand prints what Redis holds about one task.
//
// Exit codes: 0 success, 1 failure, 2 bad input (unknown subcommand, bad
// flag, bad environment variable).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/worqr/worqr-go/worqr"
)

const prog = "worqr-example"

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], stdio{out: os.Stdout, err: os.Stderr, getenv: os.Getenv}))
}

// stdio is what a subcommand talks to. Tests swap it.
type stdio struct {
	out    io.Writer
	err    io.Writer
	getenv func(string) string
}

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, io stdio) error
}

func commands() []command {
	return []command{
		{"demo", "run the demo (the default when no subcommand is given)", runDemo},
		{"enqueue", "enqueue tasks and print their ids", runEnqueue},
		{"flow", "start runs of the built-in flow guild-access and print their ids", runFlow},
		{"worker", "serve queues until SIGINT/SIGTERM, printing one line per event", runWorker},
		{"stats", "print queue lengths and registered workers", runStats},
		{"task", "print what Redis holds about one task", runTask},
		{"reaper", "run a stand-alone reaper (recovery and the mover) until SIGINT/SIGTERM", runReaper},
		{"consumer", "run a pipeline of two indexed consumers (blocks, then their chunks) until SIGINT/SIGTERM", runConsumer},
	}
}

// run dispatches args to a subcommand and returns the exit code.
func run(ctx context.Context, args []string, io stdio) int {
	name := "demo"
	if len(args) > 0 {
		switch a := args[0]; {
		case a == "help" || a == "-h" || a == "-help" || a == "--help":
			if len(args) > 1 && a == "help" {
				// "help worker" is "worker --help".
				return run(ctx, []string{args[1], "--help"}, io)
			}
			topUsage(io.out)
			return exitOK
		case strings.HasPrefix(a, "-"):
			// Flags without a subcommand belong to the demo.
		default:
			name, args = a, args[1:]
		}
	}
	for _, c := range commands() {
		if c.name != name {
			continue
		}
		err := c.run(ctx, args, io)
		if err == nil {
			return exitOK
		}
		if errors.Is(err, errHelpShown) {
			return exitOK
		}
		fmt.Fprintf(io.err, "%s %s: %v\n", prog, name, err)
		var ue *usageError
		if errors.As(err, &ue) || errors.Is(err, worqr.ErrInvalid) {
			fmt.Fprintf(io.err, "run '%s %s --help' for usage\n", prog, name)
			return exitUsage
		}
		return exitFail
	}
	fmt.Fprintf(io.err, "%s: unknown subcommand %q\nrun '%s --help' for the list of subcommands\n", prog, name, prog)
	return exitUsage
}

func topUsage(w io.Writer) {
	fmt.Fprintf(w, `%[1]s: a tour of worqr, the Redis-backed peer-to-peer job queue.

Usage:
  %[1]s [demo flags]             run the demo
  %[1]s <subcommand> [flags]
  %[1]s help <subcommand>        same as <subcommand> --help

Subcommands:
`, prog)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, `
Environment (flags win over variables; empty means unset):
%s
Exit codes: 0 success, 1 failure, 2 bad input.
`, envHelp(true, true))
}
