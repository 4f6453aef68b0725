package main

import (
	"context"
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

func TestStatsJSONHasExactlyTheDocumentedFields(t *testing.T) {
	b := setup(t)
	b.bury("emails", "boom")
	b.enqueue("emails", "a", "b", "c")
	b.enqueue("sms", "x")
	if err := b.in.Pause(context.Background(), "sms"); err != nil {
		t.Fatal(err)
	}

	out := b.ok("", "stats", "-o", "json")
	var raw []map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("stats -o json is not a JSON list: %v\n%s", err, out)
	}
	if len(raw) != 2 {
		t.Fatalf("want 2 queues, got %d:\n%s", len(raw), out)
	}
	want := []string{"active", "behind", "dead", "latency_ms", "name", "oldest_active_ms", "paused", "scheduled", "waiting"}
	for _, q := range raw {
		var keys []string
		for k := range q {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if !reflect.DeepEqual(keys, want) {
			t.Errorf("fields of %v: got %v, want exactly %v", q["name"], keys, want)
		}
	}
	var qs []queueStats
	if err := json.Unmarshal([]byte(out), &qs); err != nil {
		t.Fatal(err)
	}
	if got := qs[0]; got.Name != "emails" || got.Waiting != 3 || got.Dead != 1 || got.Active != 0 || got.Scheduled != 0 || got.Paused {
		t.Errorf("emails: got %+v, want 3 waiting, 1 dead, not paused", got)
	}
	if got := qs[1]; got.Name != "sms" || got.Waiting != 1 || !got.Paused {
		t.Errorf("sms: got %+v, want 1 waiting, paused", got)
	}
	if qs[0].LatencyMs < 0 {
		t.Errorf("latency_ms %d is negative", qs[0].LatencyMs)
	}
}

// A handler that hangs on the head of a key: stats shows the tasks
// waiting behind it (WAITING is 0) and how long it has been running.
func TestStatsShowStuckWork(t *testing.T) {
	b := setup(t)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{
		Config: worqr.Config{Namespace: b.ns},
		Queues: map[string]worqr.QueueConfig{"orders": {Concurrency: 1, Handler: worqr.HandlerFunc(
			func(context.Context, *worqr.Task) error { started <- struct{}{}; <-release; return nil })}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background()) //nolint:errcheck
	defer close(release)
	c, err := worqr.NewClient(b.pool, &worqr.Config{Namespace: b.ns})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueBatch(context.Background(), "orders", [][]byte{[]byte("1"), []byte("2"), []byte("3")},
		&worqr.EnqueueOpts{Key: "customer-7"}); err != nil {
		t.Fatal(err)
	}
	<-started
	var qs []queueStats
	redistest.WaitFor(t, 10*time.Second, "stats to show the running task's age", func() bool {
		qs = nil
		return json.Unmarshal([]byte(b.ok("", "stats", "-o", "json")), &qs) == nil && len(qs) == 1 && qs[0].OldestActiveMs >= 2
	})
	if q := qs[0]; q.Waiting != 0 || q.Behind != 2 || q.Active != 1 {
		t.Errorf("stats -o json: %+v; want waiting 0, behind 2, active 1", q)
	}
	lines := strings.Split(strings.TrimRight(b.ok("", "stats"), "\n"), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "BEHIND") || !strings.Contains(lines[0], "OLDEST_ACTIVE") {
		t.Fatalf("stats table:\n%s", strings.Join(lines, "\n"))
	}
	if f := strings.Fields(lines[1]); len(f) != 9 || f[1] != "0" || f[2] != "2" || f[4] != "1" || f[5] == "0s" {
		t.Errorf("stats row %q; want waiting 0, behind 2, active 1 and a running time", lines[1])
	}
}

func TestStatsJSONOfAnEmptyNamespaceIsAnEmptyList(t *testing.T) {
	b := setup(t)
	if out := strings.TrimSpace(b.ok("", "stats", "-o", "json")); out != "[]" {
		t.Errorf("got %q, want []", out)
	}
}

func TestStatsTableIsAligned(t *testing.T) {
	b := setup(t)
	b.enqueue("emails", "a", "b")
	b.enqueue("a-much-longer-queue-name", "x")
	out := b.ok("", "stats")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and 2 rows, got:\n%s", out)
	}
	if !strings.HasPrefix(lines[0], "QUEUE") || !strings.Contains(lines[0], "WAITING") || !strings.Contains(lines[0], "LATENCY") {
		t.Errorf("header: %q", lines[0])
	}
	// Every row's WAITING column starts where the header's does.
	col := strings.Index(lines[0], "WAITING")
	for _, l := range lines[1:] {
		if len(l) <= col || l[col-1] != ' ' || l[col] == ' ' {
			t.Errorf("row not aligned with the WAITING column at %d: %q", col, l)
		}
	}
	if !strings.HasPrefix(lines[2], "emails ") || strings.Fields(lines[2])[1] != "2" {
		t.Errorf("emails row: %q", lines[2])
	}
}
