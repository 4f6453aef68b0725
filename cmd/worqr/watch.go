package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/spf13/cobra"
)

// watch calls show every interval until ctx ends (Ctrl-C: a normal end,
// nil). On a terminal (redraw) it clears the screen and prints title
// first. A Redis blip does not end it: when show fails because Redis
// cannot be reached, it says so (on stderr, or on the screen when it
// redraws) and tries again every interval, then says when Redis answers
// again. Any other error ends it.
func (a *app) watch(ctx context.Context, cmd *cobra.Command, interval time.Duration, redraw bool, title string,
	show func(ctx context.Context) error) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	var down time.Time // since when Redis does not answer; zero while it does
	for {
		if redraw {
			fmt.Fprint(a.env.out, "\033[H\033[2J")
			fmt.Fprintf(a.env.out, "%s, every %s (Ctrl-C to stop)   %s\n\n", title, interval, time.Now().Format(time.TimeOnly))
		}
		err := show(ctx)
		switch {
		case err == nil:
			if !down.IsZero() {
				fmt.Fprintf(a.env.err, "%s: Redis answers again, after %s\n", cmd.CommandPath(), ago(time.Since(down)))
				down = time.Time{}
			}
		case ctx.Err() != nil:
			return nil
		case !unreachable(err):
			return err
		default:
			if down.IsZero() {
				down = time.Now()
				if !redraw {
					fmt.Fprintf(a.env.err, "%s: lost the connection to Redis (%s); retrying every %s\n",
						cmd.CommandPath(), message(err, cmd.Name()), interval)
				}
			}
			if redraw {
				fmt.Fprintf(a.env.out, "lost the connection to Redis at %s (%s); retrying every %s\n",
					down.Format(time.TimeOnly), message(err, cmd.Name()), interval)
			}
		}
		select {
		case <-ctx.Done():
			return nil // interrupted: a normal end of a watch
		case <-t.C:
		}
	}
}

// unreachable reports whether err says that Redis could not be reached or
// cannot serve for now (a dropped or refused connection, a timeout, a
// server loading its data or in a failover), rather than that it refused
// the command for good.
func unreachable(err error) bool {
	var ne net.Error
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, redis.ErrPoolExhausted) {
		return true
	}
	var re redis.Error
	if errors.As(err, &re) {
		for _, p := range []string{"LOADING", "BUSY", "MASTERDOWN", "READONLY", "TRYAGAIN", "CLUSTERDOWN"} {
			if strings.HasPrefix(string(re), p+" ") {
				return true
			}
		}
	}
	return false
}
