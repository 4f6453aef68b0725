package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/worqr/worqr-go/defaults"

	"github.com/worqr/worqr-go/worqr"
)

// What enqueue's --priority, --type and --timeout set reaches the worker:
// the task of the higher level is taken first, a Mux routes it by its
// type, and its handler's deadline is the task's, not the queue's.
func TestEnqueuePriorityTypeAndTimeoutReachTheWorker(t *testing.T) {
	b := setup(t)
	low := strings.TrimSpace(b.ok("", "enqueue", "jobs", "low"))
	high := strings.TrimSpace(b.ok("", "enqueue", "jobs", "high", "--priority", "3", "--type", "greet", "--timeout", "7s"))

	type seen struct {
		id, typ, payload string
		left             time.Duration
	}
	var (
		mu   sync.Mutex
		got  []seen
		done = make(chan struct{}, 2)
	)
	record := func(ctx context.Context, tk *worqr.Task) error {
		dl, _ := ctx.Deadline()
		mu.Lock()
		got = append(got, seen{tk.ID, tk.Type, string(tk.Payload), time.Until(dl)})
		mu.Unlock()
		done <- struct{}{}
		return nil
	}
	mux := worqr.NewMux()
	mux.Handle("greet", worqr.HandlerFunc(record))
	mux.Fallback = worqr.HandlerFunc(record)
	w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{
		Config: worqr.Config{Namespace: b.ns},
		Queues: map[string]worqr.QueueConfig{"jobs": {Concurrency: 1, Timeout: time.Hour, Handler: mux}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background()) //nolint:errcheck
	for range 2 {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("the worker ran %d of 2 tasks in 10s", len(got))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if got[0].id != high || got[1].id != low {
		t.Fatalf("taken in the order %v, want %s (--priority 3) before %s", got, high, low)
	}
	if got[0].typ != "greet" || got[0].payload != "high" {
		t.Errorf("--type greet: the handler saw type %q, payload %q; want greet, high", got[0].typ, got[0].payload)
	}
	if got[1].typ != "" {
		t.Errorf("a task enqueued without --type has type %q", got[1].typ)
	}
	if got[0].left <= 0 || got[0].left > 7*time.Second {
		t.Errorf("--timeout 7s: the handler had %s left, want at most 7s", got[0].left)
	}
	if got[1].left < 7*time.Second {
		t.Errorf("without --timeout the handler had %s left, want the queue's hour", got[1].left)
	}
}

// --key, --id and --at reach the task as given.
func TestEnqueueKeyIDAndAt(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	keyed := strings.TrimSpace(b.ok("", "enqueue", "orders", "step1", "--key", "order-42"))
	ti, err := b.in.Task(ctx, "orders", keyed)
	if err != nil || ti.Key != "order-42" {
		t.Fatalf("--key order-42: the task is %+v, %v", ti, err)
	}
	if out := b.ok("", "queue", "keys", "orders"); !strings.Contains(out, "order-42") {
		t.Errorf("queue keys does not list order-42:\n%s", out)
	}

	if out := b.ok("", "enqueue", "reports", "oct", "--id", "report-2026-10"); out != "report-2026-10\n" {
		t.Errorf("--id report-2026-10 printed %q", out)
	}
	if out := b.ok("", "enqueue", "reports", "oct", "--id", "report-2026-10"); out != "report-2026-10\n" {
		t.Errorf("the same --id and payload again printed %q", out)
	}
	if qi := b.queue("reports"); qi.Waiting != 1 {
		t.Errorf("reports holds %d waiting after the same --id twice, want 1", qi.Waiting)
	}

	at := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	id := strings.TrimSpace(b.ok("", "enqueue", "later", "x", "--at", at.Format(time.RFC3339Nano)))
	ti, err = b.in.Task(ctx, "later", id)
	if err != nil || ti.State != worqr.StateScheduled || !ti.DueAt.Equal(at) {
		t.Fatalf("--at %s: the task is %+v, %v; want scheduled for then", at.Format(time.RFC3339Nano), ti, err)
	}
}

// Every bad value of enqueue's flags is refused (exit 2, nothing
// enqueued) with an error that names the flag and the rule.
func TestEnqueueRefusesBadFlagValues(t *testing.T) {
	b := setup(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--priority", "-1"}, "--priority -1: must be between 0 and 9"},
		{[]string{"--priority", "10"}, "--priority 10: must be between 0 and 9"},
		{[]string{"--key", strings.Repeat("k", defaults.MaxKeyLen+1)}, "--key is 513 bytes long (at most 512)"},
		{[]string{"--key", "k", "--priority", "2"}, "--key: not with --priority"},
		{[]string{"--key", "k", "--id", "x"}, "--key: not with --id"},
		{[]string{"--key", ""}, "--key: must not be empty"},
		{[]string{"--id", "a b"}, `--id "a b" has forbidden character ' '`},
		{[]string{"--id", strings.Repeat("i", 101)}, "--id is 101 bytes long (at most 100)"},
		{[]string{"--type", "bad/type"}, `--type "bad/type" has forbidden character '/'`},
		{[]string{"--type", ""}, "--type: must not be empty"},
		{[]string{"--at", "tomorrow"}, `--at "tomorrow": not an RFC 3339 time`},
		{[]string{"--at", "2026-11-01 06:00"}, "not an RFC 3339 time"},
		{[]string{"--at", "2026-11-01T06:00:00Z", "--delay", "1m"}, "--at: not with --delay"},
		{[]string{"--delay", "-1s"}, "--delay -1s: must not be negative"},
		{[]string{"--timeout", "-1s"}, "--timeout -1s: must not be negative"},
		{[]string{"--priority", "x"}, `invalid argument "x" for "--priority"`},
	} {
		args := append([]string{"enqueue", "jobs", "x"}, c.args...)
		r := b.run("", args...)
		if r.code != exitUsage || !strings.Contains(r.err, c.want) {
			t.Errorf("worqr %s: exit %d, stderr %q; want 2 and %q", strings.Join(args, " "), r.code, r.err, c.want)
		}
	}
	if qs, err := b.in.Queues(context.Background()); err != nil || len(qs) != 0 {
		t.Errorf("refused enqueues left queues %+v, %v", qs, err)
	}
}

func TestEnqueueFromStdinArgumentAndFile(t *testing.T) {
	b := setup(t)
	id := strings.TrimSpace(b.ok(`{"to":"ada"}`, "enqueue", "emails", "-"))
	ti, err := b.in.Task(context.Background(), "emails", id)
	if err != nil {
		t.Fatalf("the printed id %q is not a task: %v", id, err)
	}
	if string(ti.Payload) != `{"to":"ada"}` {
		t.Errorf("payload %q", ti.Payload)
	}
	id2 := strings.TrimSpace(b.ok("", "enqueue", "emails", "literal"))
	file := filepath.Join(t.TempDir(), "p.bin")
	if err := os.WriteFile(file, []byte{0, 1, 2}, 0o600); err != nil {
		t.Fatal(err)
	}
	id3 := strings.TrimSpace(b.ok("", "enqueue", "emails", "@"+file))
	for id, want := range map[string]string{id2: "literal", id3: "\x00\x01\x02"} {
		ti, err := b.in.Task(context.Background(), "emails", id)
		if err != nil || string(ti.Payload) != want {
			t.Errorf("task %s: %v, payload %q, want %q", id, err, ti.Payload, want)
		}
	}
	r := b.run("", "enqueue", "emails", "@"+filepath.Join(t.TempDir(), "missing"))
	if r.code != 2 || !strings.Contains(r.err, "<payload> @") {
		t.Errorf("missing file: exit %d, stderr %q", r.code, r.err)
	}
}

// --unique-key needs --unique-ttl (the key's longest hold): refused, naming
// the flag, before anything is sent; with it, a second enqueue of the key
// is refused while the first task waits.
func TestEnqueueUniqueKeyNeedsTTL(t *testing.T) {
	b := setup(t)
	if r := b.run("", "enqueue", "emails", "x", "--unique-key", "k1"); r.code != 2 || !strings.Contains(r.err, "--unique-key needs --unique-ttl") {
		t.Errorf("--unique-key alone: exit %d, stderr %q; want 2 naming --unique-ttl", r.code, r.err)
	}
	b.ok("", "enqueue", "emails", "x", "--unique-key", "k1", "--unique-ttl", "1m")
	if r := b.run("", "enqueue", "emails", "y", "--unique-key", "k1", "--unique-ttl", "1m"); r.code == 0 {
		t.Errorf("a second enqueue of key k1 while the first waits: exit 0, stdout %q", r.out)
	}
	if qi := b.queue("emails"); qi.Waiting != 1 {
		t.Errorf("emails holds %d waiting, want 1", qi.Waiting)
	}
}
