package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// task get shows a task whole: its type apart from its payload, the
// options it was enqueued with, its timing and its failed attempts.
func TestTaskGetShowsATaskWhole(t *testing.T) {
	t.Run("a typed task: its type apart, the payload without its envelope, its own options", func(t *testing.T) {
		b := setup(t)
		deadline := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
		id, err := b.client.Enqueue(context.Background(), "mail", []byte(`{"to":"ada"}`),
			&worqr.EnqueueOpts{Type: "welcome", ID: "mine", Priority: 2, MaxAttempts: 7, Timeout: 90 * time.Second, Deadline: deadline})
		if err != nil {
			t.Fatal(err)
		}
		out := b.ok("", "task", "get", "mail", id, "-o", "json")
		var got taskJSON
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err, out)
		}
		if got.Type != "welcome" || deref(got.Payload) != `{"to":"ada"}` || got.Priority != 2 || got.MaxAttempts != 7 ||
			got.TimeoutMS != 90000 || deref(got.Deadline) != deadline.Format(time.RFC3339Nano) || got.EnqueuedAt == nil ||
			got.StartedAt != nil || got.RanForMS != 0 {
			t.Errorf("task get -o json:\n%s", out)
		}
		if !strings.Contains(out, `"attempts": []`) {
			t.Errorf("no failed attempts: want \"attempts\": [] (every field present):\n%s", out)
		}
		table := b.ok("", "task", "get", "mail", id)
		for _, line := range []string{`type +welcome`, `payload +\{"to":"ada"\}`, `priority +2`, `max_attempts +7`,
			`timeout +1m30s`, `deadline +` + regexp.QuoteMeta(deadline.Format(time.RFC3339)), `started_at +-`, `ran_for +-`} {
			if !regexp.MustCompile(`(?m)^` + line + `$`).MatchString(table) {
				t.Errorf("table has no line %q:\n%s", line, table)
			}
		}
		if strings.Contains(table, "wqt") || strings.Contains(out, "wqt") || strings.Contains(table, "failed attempts") {
			t.Errorf("the type's envelope or an attempts table shows:\n%s\n%s", table, out)
		}
		// A listing shows the type before the payload.
		if ls := b.ok("", "task", "ls", "mail"); !strings.Contains(ls, `welcome {"to":"ada"}`) || strings.Contains(ls, "wqt") {
			t.Errorf("task ls:\n%s", ls)
		}
	})

	t.Run("its failed attempts, oldest first, with worker, times and errors", func(t *testing.T) {
		b := setup(t)
		id := b.enqueue("jobs", "p")[0]
		w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{
			Config: worqr.Config{Namespace: b.ns},
			Queues: map[string]worqr.QueueConfig{"jobs": {Concurrency: 1, MaxAttempts: 2,
				Backoff: func(int, error) time.Duration { return time.Millisecond },
				Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
					return fmt.Errorf("boom %d", t.Attempt)
				})}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		redistest.WaitFor(b.t, patience, "the task dead", func() bool { return b.queue("jobs").Dead == 1 })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		var got taskJSON
		out := b.ok("", "task", "get", "jobs", id, "-o", "json")
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err, out)
		}
		if len(got.Attempts) != 2 {
			t.Fatalf("attempts %+v, want 2:\n%s", got.Attempts, out)
		}
		for i, a := range got.Attempts {
			outcome := []string{"retry", "dead"}[i]
			if a.Number != i+1 || a.Outcome != outcome || a.Worker != w.ID() || a.Error != fmt.Sprintf("boom %d", i+1) ||
				a.StartedAt == nil || a.EndedAt == nil {
				t.Errorf("attempt %d: %+v; want number %d, %s, on %s, boom %d, its times", i, a, i+1, outcome, w.ID(), i+1)
			}
		}
		if got.StartedAt == nil {
			t.Errorf("started_at null for a task that ran:\n%s", out)
		}
		table := b.ok("", "task", "get", "jobs", id)
		if !strings.Contains(table, "failed attempts (the last 10 kept)") {
			t.Errorf("table has no attempts section:\n%s", table)
		}
		for i, outcome := range []string{"retry", "dead"} {
			row := regexp.MustCompile(fmt.Sprintf(`(?m)^%d +%s +%s +\S+ +\S+ +boom %d$`, i+1, outcome, regexp.QuoteMeta(w.ID()), i+1))
			if !row.MatchString(table) {
				t.Errorf("table has no row for attempt %d (%s):\n%s", i+1, outcome, table)
			}
		}
	})
}

// The active listing shows what runs: its worker, when it started and how
// long it has run, so a stuck handler shows before its timeout ends it.
func TestTaskLsActiveShowsRunningFor(t *testing.T) {
	b := setup(t)
	id := b.enqueue("jobs", "p")[0]
	started, release := make(chan struct{}), make(chan struct{})
	w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{
		Config: worqr.Config{Namespace: b.ns},
		Queues: map[string]worqr.QueueConfig{"jobs": {Concurrency: 1, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
			close(started)
			<-release
			return nil
		})}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background())
	defer close(release)
	<-started
	out := b.ok("", "task", "ls", "jobs", "--state", "active")
	row := regexp.MustCompile(`(?m)^` + id + ` +` + w.ID() + ` +\S+ +(\S+) +0 +p$`).FindStringSubmatch(out)
	if !strings.Contains(out, "RUNNING_FOR") || row == nil {
		t.Fatalf("task ls --state active:\n%s", out)
	}
	if d, err := time.ParseDuration(row[1]); err != nil || d < 0 || d > time.Minute {
		t.Errorf("running for %q, want a duration of the run so far", row[1])
	}
}
