package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/worqr/worqr-go/worqr"
)

// errAborted is returned when the person at the terminal did not confirm.
var errAborted = errors.New("aborted: nothing was changed")

// confirm asks the person at the terminal to confirm what (a question). With
// --yes it asks nothing. Without a terminal on stdin nobody can answer, so it
// refuses with a usage error that names --yes.
func (a *app) confirm(cmd *cobra.Command, yes bool, what string) error {
	if yes {
		return nil
	}
	if !a.env.stdinTTY {
		return usagef("refusing to %s without --yes: stdin is not a terminal, so nobody can confirm (nothing was changed)", what)
	}
	fmt.Fprintf(a.env.err, "%s%s? [y/N] ", strings.ToUpper(what[:1]), what[1:])
	line, err := bufio.NewReader(a.env.in).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(a.env.err)
		return errAborted
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return errAborted
}

// progress returns the Progress callback of a bulk operation over about
// total tasks (verb: "requeued", "deleted") and a function that ends it. On
// a terminal (stderr) it draws a progress bar; otherwise it prints one line
// per chunk on stderr, so that logs show how far it went.
func (a *app) progress(verb string, total int64) (worqr.Progress, func()) {
	if a.env.stderrTTY {
		bar := progressbar.NewOptions64(max(total, 1),
			progressbar.OptionSetWriter(a.env.err),
			progressbar.OptionSetDescription(verb),
			progressbar.OptionShowCount(),
			progressbar.OptionSetWidth(40),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
		return func(done int) {
				if int64(done) > bar.GetMax64() {
					bar.ChangeMax64(int64(done))
				}
				_ = bar.Set64(int64(done))
			}, func() {
				_ = bar.Finish()
			}
	}
	return func(done int) {
		fmt.Fprintf(a.env.err, "%s %d of about %d\n", verb, done, total)
	}, func() {}
}

// bulk runs op (one of the Inspector's bulk methods) with progress, and says
// what happened; an interruption between chunks is reported with the count
// done so far (every chunk is atomic: nothing is half-moved).
func (a *app) bulk(ctx context.Context, verb, what string, total int64,
	op func(ctx context.Context, p worqr.Progress) (int, error)) error {
	p, end := a.progress(verb, total)
	n, err := op(ctx, p)
	end()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted: %s %d %s so far; every chunk is atomic, so nothing is half-done: run the command again to finish", verb, n, what)
		}
		return fmt.Errorf("%s %d %s, then: %w", verb, n, what, err)
	}
	fmt.Fprintf(a.env.out, "%s %d %s\n", verb, n, what)
	return nil
}
