package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// events follows what processes publish: here a client enqueueing every
// 100 ms until two events were printed (the first enqueues may come before
// the command subscribed).
func TestEventsFollowsLiveEvents(t *testing.T) {
	b := setup(t)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				_, _ = b.client.Enqueue(context.Background(), "live", []byte("x"), nil)
			}
		}
	}()
	lines := b.runLines(2, "events", "--queue", "live", "-o", "json")
	for _, l := range lines {
		var e struct {
			Kind, Queue, Task string
			At                *string
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil || e.Kind != "enqueued" || e.Queue != "live" || e.Task == "" || e.At == nil {
			t.Errorf("event line %q: %v %+v; want an enqueued event of queue live with its task and time", l, err, e)
		}
	}
}

func TestEventsRefusesAnUnknownKind(t *testing.T) {
	b := setup(t)
	r := b.run("", "events", "--kind", "dead,given back")
	if r.code != exitUsage || !strings.Contains(r.err, `--kind "given back": not an event kind`) || !strings.Contains(r.err, "given_back") {
		t.Errorf("events --kind with a bad kind: exit %d, stderr %q; want 2 and the kinds", r.code, r.err)
	}
}

// events stops, and says why, when its output cannot be written (a full
// disk, a closed socket): it followed on, printing nothing, forever.
func TestEventsStopsWhenItsOutputFails(t *testing.T) {
	b := setup(t)
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip("no /dev/full")
	}
	defer full.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, "events")
	cmd.Env = append(cleanEnv(), "WORQR_REDIS_URL="+redisURL, "WORQR_NAMESPACE="+b.ns)
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = full, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for {
		if _, err := b.client.Enqueue(ctx, "live", []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
		b.client.Flush()
		select {
		case err := <-exited:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(errb.String(), "no space left on device") {
				t.Fatalf("events with a failing output: %v, stderr %q; want exit 1 naming the write error", err, errb.String())
			}
			return
		case <-time.After(100 * time.Millisecond):
		}
		if ctx.Err() != nil {
			t.Fatalf("events still runs 30 s after its output failed (stderr %q)", errb.String())
		}
	}
}

// TestEventsRefusesABadQueueName: `events --queue` with a name no queue can
// have followed the events forever, printing nothing, instead of saying so.
func TestEventsRefusesABadQueueName(t *testing.T) {
	b := setup(t)
	r := b.runQuick(5*time.Second, "events", "--queue", "my queue")
	if r.code != 2 || !strings.Contains(r.err, "--queue") || !strings.Contains(r.err, "forbidden character") {
		t.Fatalf("events --queue 'my queue': exit %d, stderr %q; want exit 2 naming --queue and the rule", r.code, r.err)
	}
}
