// Command worqr is the operator CLI of worqr: it reads and steers the queues,
// tasks, dead sets, workers and flow runs of a namespace in Redis through the
// public Inspector and Client, nothing else.
//
//	worqr stats                       every queue's counts
//	worqr stats --history             tasks per minute over the last hour
//	worqr dead errors emails          dead tasks grouped by normalised error
//	worqr dead retry emails --all     requeue every dead task (asks first)
//
// It reads WORQR_REDIS_URL, WORQR_NAMESPACE and the TLS variables of
// .example.env; --redis-url and --namespace win over them.
//
// Exit codes: 0 success, 1 failure (Redis unreachable, task not found, an
// operation refused or aborted), 2 bad input (unknown command, bad flag or
// argument, a bulk action without --yes when stdin is not a terminal);
// task wait and flow wait also exit 3 (dead, or the run failed), 4
// (cancelled), 5 (expired: its deadline passed before it started) and 6
// (timed out: --timeout passed first).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/worqr/worqr-go/worqr"
)

const prog = "worqr"

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
	// How what task wait and flow wait waited for ended, when not done.
	exitDead      = 3 // a dead task, a failed run
	exitCancelled = 4
	exitExpired   = 5 // a task whose deadline passed before it started
	exitTimedOut  = 6 // --timeout passed first
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], newEnv())
	stop()
	os.Exit(code)
}

// usageError is bad input: the binary exits 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// runError is an error returned by a command's body (after its flags and
// arguments were parsed). Anything else that cobra returns is a usage error.
type runError struct{ err error }

func (e *runError) Error() string { return e.err.Error() }
func (e *runError) Unwrap() error { return e.err }

// exitError is an error with an exit code of its own.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// run executes args and returns the exit code.
func run(ctx context.Context, args []string, e *env) int {
	root := newRoot(e)
	root.SetArgs(args)
	root.SetIn(e.in)
	root.SetOut(e.out)
	root.SetErr(e.err)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	path := prog
	if cmd != nil {
		path = cmd.CommandPath()
	}
	name := prog
	if cmd != nil {
		name = cmd.Name()
	}
	fmt.Fprintf(e.err, "%s: %s\n", path, message(err, name))
	if code := exitCode(err); code != exitUsage {
		return code
	}
	fmt.Fprintf(e.err, "run '%s --help' for usage\n", path)
	return exitUsage
}

// message is err's text as the CLI prints it after "worqr <command>: ": one
// prefix per error. Wherever one error wraps another, the library's
// "worqr: " at the start of either is dropped, and so is a leading
// "<command>: " that repeats the command's name ("worqr load: line 2:
// ...", not "worqr load: worqr: load: line 2: worqr: ..."). Text inside a
// message, such as a task's last error, is left as it is.
func message(err error, command string) string {
	s := unprefixed(err)
	if command != prog {
		s = strings.TrimPrefix(s, command+": ")
	}
	return s
}

// unprefixed is err's text without the library's prefix at the start of
// err's own part and of each error it wraps (found by its text inside
// err's).
func unprefixed(err error) string {
	s := err.Error()
	if inner := errors.Unwrap(err); inner != nil {
		if in := inner.Error(); in != "" {
			if i := strings.LastIndex(s, in); i >= 0 {
				return strings.TrimPrefix(s[:i], libPrefix) + unprefixed(inner) + s[i+len(in):]
			}
		}
	}
	return strings.TrimPrefix(s, libPrefix)
}

// libPrefix starts the library's errors.
const libPrefix = "worqr: "

// exitCode classifies err: an *exitError has its own code; usage errors,
// the library's invalid-input errors and errors cobra raised while parsing
// are 2; the rest are 1.
func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	var ue *usageError
	if errors.As(err, &ue) || errors.Is(err, worqr.ErrInvalid) {
		return exitUsage
	}
	var re *runError
	if errors.As(err, &re) {
		return exitFail
	}
	return exitUsage
}

// env is what the commands talk to; tests never swap it (they run the real
// binary), but keeping it in one place keeps the commands honest.
type env struct {
	in     io.Reader
	out    io.Writer
	err    io.Writer
	getenv func(string) string
	// stdinTTY and stderrTTY say whether a person is there to confirm and
	// to watch a progress bar.
	stdinTTY, stderrTTY, stdoutTTY bool
}

func newEnv() *env {
	return &env{in: os.Stdin, out: os.Stdout, err: os.Stderr, getenv: os.Getenv,
		stdinTTY: isTerminal(os.Stdin), stderrTTY: isTerminal(os.Stderr), stdoutTTY: isTerminal(os.Stdout)}
}
