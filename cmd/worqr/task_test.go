package main

import (
	"context"
	"encoding/json"
	"errors"
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

func TestTaskGet(t *testing.T) {
	b := setup(t)
	id := b.enqueue("emails", `{"to":"ada"}`)[0]
	out := b.ok("", "task", "get", "emails", id, "-o", "json")
	var got taskJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err, out)
	}
	if got.ID != id || got.Queue != "emails" || got.State != "queued" || deref(got.Payload) != `{"to":"ada"}` {
		t.Errorf("got %+v", got)
	}
	// Found by id alone in any queue; a table of key value lines.
	table := b.ok("", "task", "get", id)
	for _, want := range []string{"id  ", id, "state", "queued", `{"to":"ada"}`} {
		if !strings.Contains(table, want) {
			t.Errorf("table has no %q:\n%s", want, table)
		}
	}
	r := b.run("", "task", "get", "emails", "cv3k1s1hhc2s73b0o3ng")
	if r.code != 1 || r.out != "" || !strings.Contains(r.err, "not found") {
		t.Errorf("unknown task: exit %d, stdout %q, stderr %q", r.code, r.out, r.err)
	}
	// Metadata is shown apart from the payload, which is as enqueued.
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	mid, err := b.client.Enqueue(context.Background(), "emails", []byte("hi"), &worqr.EnqueueOpts{Meta: map[string]string{"traceparent": tp}})
	if err != nil {
		t.Fatal(err)
	}
	got = taskJSON{}
	if out := b.ok("", "task", "get", "emails", mid, "-o", "json"); json.Unmarshal([]byte(out), &got) != nil ||
		deref(got.Payload) != "hi" || got.Meta["traceparent"] != tp {
		t.Errorf("task with metadata: %s", out)
	}
	table = b.ok("", "task", "get", mid)
	if !strings.Contains(table, `traceparent="`+tp+`"`) || !regexp.MustCompile(`(?m)^payload +hi$`).MatchString(table) {
		t.Errorf("task with metadata, table:\n%s", table)
	}
}

func TestTaskRetryDeleteAndCancel(t *testing.T) {
	b := setup(t)
	dead := b.bury("emails", "e1", "e2")
	b.ok("", "task", "retry", "emails", dead[0])
	b.ok("", "task", "delete", "emails", dead[1])
	if qi := b.queue("emails"); qi.Dead != 0 || qi.Waiting != 1 {
		t.Errorf("%d dead, %d waiting; want 0 and 1", qi.Dead, qi.Waiting)
	}
	if r := b.run("", "task", "retry", "emails", dead[1]); r.code != 1 || !strings.Contains(r.err, "not in the dead set") ||
		!strings.Contains(r.err, "it is unknown") {
		t.Errorf("retry of a deleted task: exit %d, stderr %q", r.code, r.err)
	}
	// Run again (as after an error whose reply was lost): it says where
	// the task is now.
	if r := b.run("", "task", "retry", "emails", dead[0]); r.code != 1 || !strings.Contains(r.err, "(it is queued)") {
		t.Errorf("a second retry: exit %d, stderr %q", r.code, r.err)
	}
	if out := b.ok("", "task", "cancel", "emails", dead[0]); out != "removed "+dead[0]+"\n" {
		t.Errorf("cancel: %q", out)
	}
	if r := b.run("", "task", "cancel", "emails", dead[0]); r.code != 1 || !strings.Contains(r.err, "nothing to cancel") ||
		!strings.Contains(r.err, ": it is unknown") {
		t.Errorf("a second cancel: exit %d, stderr %q", r.code, r.err)
	}
	if b.queue("emails").Waiting != 0 {
		t.Error("the cancelled task still waits")
	}
}

func TestTaskLsByState(t *testing.T) {
	b := setup(t)
	ids := b.enqueue("emails", "a", "b", "c")
	out := b.ok("", "task", "ls", "emails", "--state", "queued", "--limit", "2", "--offset", "1", "-o", "json")
	var got struct {
		Total int
		Tasks []taskJSON
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.Total != 3 || len(got.Tasks) != 2 || got.Tasks[0].ID != ids[1] || got.Tasks[1].ID != ids[2] {
		t.Errorf("got %+v", got)
	}
	r := b.run("", "task", "ls", "emails", "--state", "sleeping")
	if r.code != 2 || !strings.Contains(r.err, `--state "sleeping"`) {
		t.Errorf("bad state: exit %d, stderr %q", r.code, r.err)
	}
}

func TestTaskLsExpired(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	id, err := b.client.Enqueue(ctx, "reports", []byte("late"), &worqr.EnqueueOpts{
		Deadline: time.Now().Add(-time.Minute), Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{
		Config: worqr.Config{Namespace: b.ns},
		Queues: map[string]worqr.QueueConfig{"reports": {Concurrency: 1, Handler: worqr.HandlerFunc(
			func(context.Context, *worqr.Task) error { return errors.New("must not run") })}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(ctx)
	redistest.WaitFor(b.t, patience, "the task expired", func() bool {
		info, err := b.in.Task(ctx, "reports", id)
		return err == nil && info.State == worqr.StateExpired
	})
	out := b.ok("", "task", "ls", "reports", "--state", "expired")
	if !strings.Contains(out, id) {
		t.Fatalf("task ls --state expired:\n%s", out)
	}
	var got taskJSON
	if err := json.Unmarshal([]byte(b.ok("", "task", "get", "reports", id, "-o", "json")), &got); err != nil {
		t.Fatal(err)
	}
	if got.State != "expired" || got.Deadline == nil || got.FinishedAt == nil {
		t.Fatalf("task get -o json: %+v", got)
	}
}

// `task run-now` moves a delayed task to its queue at once; a second one
// (the task waits now) exits 1.
func TestTaskRunNow(t *testing.T) {
	b := setup(t)
	id, err := b.client.Enqueue(context.Background(), "emails", []byte("x"), &worqr.EnqueueOpts{Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if qi := b.queue("emails"); qi.Scheduled != 1 || qi.Waiting != 0 {
		t.Fatalf("before: %+v, want 1 scheduled", qi)
	}
	if out := b.ok("", "task", "run-now", "emails", id); strings.TrimSpace(out) != "moved "+id {
		t.Errorf("task run-now: %q", out)
	}
	if qi := b.queue("emails"); qi.Scheduled != 0 || qi.Waiting != 1 {
		t.Errorf("after: %+v, want 1 waiting", qi)
	}
	if r := b.run("", "task", "run-now", "emails", id); r.code != 1 || !strings.Contains(r.err, "is not scheduled (it is queued)") {
		t.Errorf("a second run-now: exit %d, stderr %q", r.code, r.err)
	}
}
