package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/xid"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/worqr/worqr-go/load"
	"github.com/worqr/worqr-go/worqr"
)

func (a *app) loadCmd() *cobra.Command {
	var (
		queue, format, name string
		resume              bool
		maxWaiting, chunk   int
		window              int
		every               time.Duration
		out                 output
	)
	cmd := &cobra.Command{
		Use:   "load <FILE | ->",
		Short: "enqueue one task per line of a file or of stdin, resumably and exactly once",
		Long: `Reads newline-delimited payloads (one task per non-blank line) from FILE, or
from standard input with -, and enqueues them at the back of --queue in
atomic chunks, each applied together with a checkpoint in Redis.

Exactly once per line: a load that stops for any reason (Ctrl-C, a kill, a
lost connection) is continued with the same input and --resume; lines already
enqueued are read and skipped, and a chunk whose reply was lost is recognised
by the checkpoint rather than enqueued twice. The load's name (--name) keys
its checkpoint; for a file it defaults to one made from the file's base name
and first line, and for stdin it must be given. On --resume the input must
be the one loaded (its first line, and the last line loaded, are checked),
and a name with no checkpoint is refused: nothing starts over.

--max-waiting N stops feeding while the queue holds N waiting tasks and goes
on as workers drain it, so that an input far larger than Redis's memory
streams through. On a terminal a progress bar shows the rate; otherwise a
progress line is printed every --every.`,
		Example: `  worqr load payloads.txt --queue emails
  worqr load events.jsonl --queue events --format jsonl --max-waiting 100000
  worqr load events.jsonl --queue events --format jsonl --resume     # after an interruption
  zcat big.jsonl.gz | worqr load - --queue events --name big-2026-11 --format jsonl
  zcat big.jsonl.gz | worqr load - --queue events --name big-2026-11 --format jsonl --resume`,
		Args: args("FILE | -"),
	}
	f := cmd.Flags()
	f.StringVarP(&queue, "queue", "q", "", "the queue to load into (required)")
	f.StringVar(&format, "format", "raw", "raw (each line is a payload) or jsonl (each line must be one JSON value)")
	f.StringVar(&name, "name", "", "the load's name, which keys its checkpoint (default for a file: from its name and first line)")
	f.BoolVar(&resume, "resume", false, "continue the load from its checkpoint (skips the lines already enqueued)")
	f.IntVar(&maxWaiting, "max-waiting", 0, "pause while the queue holds this many waiting tasks (0: no limit)")
	f.IntVar(&chunk, "chunk", load.DefaultChunk, "tasks per atomic step (1..2000)")
	f.IntVar(&window, "window", load.DefaultWindow, "steps on the wire at once (1..64)")
	f.DurationVar(&every, "every", 5*time.Second, "how often a progress line is printed when stderr is not a terminal")
	out.register(cmd)
	cmd.RunE = a.body(false, func(ctx context.Context, cmd *cobra.Command, args []string) error {
		if err := out.check(); err != nil {
			return err
		}
		if queue == "" {
			return usagef("--queue is required")
		}
		if err := checkQueue("--queue", queue); err != nil {
			return err
		}
		if format != string(load.Raw) && format != string(load.JSONLines) {
			return usagef("--format %q: want raw or jsonl", format)
		}
		if maxWaiting < 0 {
			return usagef("--max-waiting %d: must not be negative", maxWaiting)
		}
		if chunk < 1 || chunk > 2000 {
			return usagef("--chunk %d: want 1 to 2000", chunk)
		}
		if window < 1 || window > 64 {
			return usagef("--window %d: want 1 to 64", window)
		}
		if every <= 0 {
			return usagef("--every %s: must be positive", every)
		}
		var (
			in   io.Reader
			size int64 = -1
		)
		src := args[0]
		if src == "-" {
			if name == "" {
				return usagef("--name is required when reading stdin: it keys the checkpoint that --resume continues from (for example --name %s)", "load-"+xid.New().String())
			}
			in = a.env.in
		} else {
			file, err := os.Open(src)
			if err != nil {
				return usagef("%v", err)
			}
			defer file.Close()
			st, err := file.Stat()
			if err != nil {
				return err
			}
			if st.IsDir() {
				return usagef("%s is a directory, not a file of payloads", src)
			}
			size = st.Size()
			if name == "" {
				name, err = fileLoadName(file, st.Name())
				if err != nil {
					return err
				}
			}
			in = file
		}
		if err := worqr.CheckQueueName(name); err != nil {
			return usagef("--name %s", ruleOf(err))
		}
		fmt.Fprintf(a.env.err, "loading %s into %s as load %s\n", displaySource(src), queue, name)
		show, end := a.loadProgress(size, every)
		started := time.Now()
		p, err := load.Run(ctx, a.client, queue, in, &load.Options{
			Name: name, Format: load.Format(format), Resume: resume, MaxWaiting: maxWaiting,
			Chunk: chunk, Window: window, Progress: show,
		})
		end(err == nil, p)
		if err != nil {
			var le *load.Error
			switch {
			case errors.Is(err, load.ErrExists):
				return usagef("%v (--resume continues it, --name starts another)", err)
			case errors.Is(err, load.ErrNotFound):
				return usagef("%v (a load is resumed under the name it started with: see the \"as load\" line it printed)", err)
			case ctx.Err() != nil:
				return fmt.Errorf("interrupted after %d of %d lines read (%d tasks enqueued now): every chunk is atomic; to finish, %s", enqueuedLines(p), p.Lines, p.Enqueued, again(src, queue, name, format, p, resume))
			case errors.As(err, &le) && errors.Is(err, worqr.ErrInvalid):
				return fmt.Errorf("%w; lines before it are enqueued: fix the input, then %s", err, again(src, queue, name, format, p, resume))
			}
			// Redis refused a chunk (OOM, say) or went away: every chunk
			// is atomic, and the load goes on from its checkpoint.
			return fmt.Errorf("%w (%d tasks enqueued now, every chunk is atomic); once Redis is back or has room, %s", err, p.Enqueued, again(src, queue, name, format, p, resume))
		}
		took := time.Since(started)
		if out.json() {
			return writeJSON(a.env.out, map[string]any{
				"queue": queue, "name": name, "lines": p.Lines, "enqueued": p.Enqueued, "resumed": p.Resumed,
				"blank": p.Empty, "seconds": took.Seconds(),
			})
		}
		_, err = fmt.Fprintf(a.env.out, "enqueued %d tasks into %s from %d lines (%d blank, %d loaded before) in %s (%s tasks/s)\n",
			p.Enqueued, queue, p.Lines, p.Empty, p.Resumed, took.Round(time.Millisecond), rate(p.Enqueued, took))
		return err
	})
	return cmd
}

// again says how to go on with a load that stopped after p: resume it when
// it has a checkpoint (a chunk was applied, now or before, if only of blank
// lines), else start it again (a --resume would find nothing to resume).
func again(src, queue, name, format string, p load.Progress, resumed bool) string {
	if p.Checkpointed || resumed {
		return "run: " + resumeCommand(src, queue, name, format)
	}
	return "run the same command again (nothing was enqueued, so not with --resume)"
}

// resumeCommand is the command that resumes load name of src into queue.
func resumeCommand(src, queue, name, format string) string {
	cmd := fmt.Sprintf("worqr load %s --queue %s --name %s --resume", src, queue, name)
	if format != "raw" {
		cmd += " --format " + format
	}
	if src == "-" {
		cmd = "... | " + cmd
	}
	return cmd
}

// enqueuedLines is how many lines are done: loaded now, before, or blank.
func enqueuedLines(p load.Progress) int64 { return p.Enqueued + p.Resumed + p.Empty }

func rate(n int64, d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", float64(n)/d.Seconds())
}

func displaySource(src string) string {
	if src == "-" {
		return "stdin"
	}
	return src
}

// fileLoadName names a load of a file from its base name and first line
// (at most 64 KiB of it), so that the same file gets the same name (and
// --resume finds its checkpoint) even once a bad line after the first was
// fixed in place, and another file, as a rule, another one. (Load checks
// on --resume that the input is the one loaded: its first line, and the
// last line loaded.)
func fileLoadName(f *os.File, base string) (string, error) {
	head := make([]byte, 64<<10)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	first := head[:n]
	if i := bytes.IndexByte(first, '\n'); i >= 0 {
		first = first[:i]
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00", base)
	h.Write(first)
	clean := []byte(filepath.Base(base))
	for i, b := range clean {
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '-' || b == '.') {
			clean[i] = '_'
		}
	}
	if len(clean) > 40 {
		clean = clean[:40]
	}
	return string(clean) + "-" + hex.EncodeToString(h.Sum(nil)[:6]), nil
}

// loadProgress shows a load's progress: a bar over the input's bytes on a
// terminal (or a spinner when the size is unknown), otherwise a line every
// every. end(done, p) ends it: a load done fills the bar; one that stopped
// (interrupted, refused) leaves instead a line that says where, never a
// full bar.
func (a *app) loadProgress(size int64, every time.Duration) (func(load.Progress), func(bool, load.Progress)) {
	if a.env.stderrTTY {
		bar := progressbar.NewOptions64(size,
			progressbar.OptionSetWriter(a.env.err),
			progressbar.OptionShowBytes(true),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionShowElapsedTimeOnFinish(),
			progressbar.OptionSetPredictTime(size > 0),
		)
		return func(p load.Progress) {
				state := ""
				if p.Waiting {
					state = ", waiting for workers"
				}
				bar.Describe(fmt.Sprintf("%d enqueued of %d read%s", p.Enqueued, p.Lines, state))
				_ = bar.Set64(p.Bytes)
			}, func(done bool, p load.Progress) {
				if done {
					_ = bar.Finish()
					fmt.Fprintln(a.env.err)
					return
				}
				_ = bar.Exit()
				_ = bar.Clear()
				fmt.Fprintf(a.env.err, "stopped at %s: %d enqueued of %d lines read\n", inputShare(p.Bytes, size), p.Enqueued, p.Lines)
			}
	}
	start := time.Now()
	last := start
	var lastP load.Progress
	return func(p load.Progress) {
			lastP = p
			if now := time.Now(); now.Sub(last) >= every {
				last = now
				a.loadLine(p, now.Sub(start), size)
			}
		}, func(bool, load.Progress) {
			if lastP.Lines > 0 && time.Since(start) >= every {
				a.loadLine(lastP, time.Since(start), size)
			}
		}
}

// inputShare says how much of an input of size bytes (-1: unknown) n is:
// "12.5% of the input (1.2 MB of 9.8 MB)", or "1.2 MB of the input".
func inputShare(n, size int64) string {
	if size <= 0 {
		return byteSize(n) + " of the input"
	}
	return fmt.Sprintf("%.1f%% of the input (%s of %s)", 100*float64(n)/float64(size), byteSize(n), byteSize(size))
}

// byteSize prints n bytes for people: 512 B, 1.2 kB, 3.4 MB, 5.6 GB.
func byteSize(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, prefix := float64(n)/unit, "kMGTPE"
	i := 0
	for v >= unit && i < len(prefix)-1 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %cB", v, prefix[i])
}

func (a *app) loadLine(p load.Progress, took time.Duration, size int64) {
	of := ""
	if size > 0 {
		of = fmt.Sprintf(" (%.1f%% of the input)", 100*float64(p.Bytes)/float64(size))
	}
	state := ""
	if p.Waiting {
		state = ", waiting for workers to drain the queue"
	}
	fmt.Fprintf(a.env.err, "read %d lines%s, enqueued %d (%s tasks/s)%s\n", p.Lines, of, p.Enqueued, rate(p.Enqueued, took), state)
}
