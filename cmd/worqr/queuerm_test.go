package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/worqr/worqr-go/worqr"
)

// `queue rm` refuses a queue that holds tasks (saying what and how to
// force it), asks before it removes, and with --force deletes the tasks
// with progress lines, then forgets the queue: `queue ls` no longer lists
// it, and a second removal says it is not known.
func TestQueueRm(t *testing.T) {
	b := setup(t)
	b.bury("emails", "e1")
	b.enqueue("emails", "w1", "w2", "w3")
	r := b.run("", "queue", "rm", "emails", "--yes")
	if r.code != 1 || !strings.Contains(r.err, "3 waiting, 1 dead") || !strings.Contains(r.err, "only when forced") ||
		!strings.Contains(r.err, "--force") {
		t.Errorf("rm of a queue with tasks: exit %d, stderr %q; want 1 and the rule", r.code, r.err)
	}
	r = b.run("y\n", "queue", "rm", "emails", "--force")
	if r.code != 2 || !strings.Contains(r.err, "without --yes: stdin is not a terminal") {
		t.Errorf("rm --force without --yes: exit %d, stderr %q; want 2", r.code, r.err)
	}
	if qi := b.queue("emails"); qi.Waiting != 3 || qi.Dead != 1 {
		t.Fatalf("a refused rm changed the queue: %+v", qi)
	}
	r = b.run("", "queue", "rm", "emails", "--force", "--yes")
	if r.code != 0 || !strings.Contains(r.out, "removed queue emails (deleted 4 tasks)") {
		t.Fatalf("rm --force --yes: exit %d, stdout %q, stderr %q", r.code, r.out, r.err)
	}
	if !strings.Contains(r.err, "deleted 4 of about 4") {
		t.Errorf("rm --force printed no progress line on stderr: %q", r.err)
	}
	if out := b.ok("", "queue", "ls"); strings.Contains(out, "emails") {
		t.Errorf("queue ls after rm:\n%s", out)
	}
	if r := b.run("", "queue", "rm", "emails", "--yes"); r.code != 1 || !strings.Contains(r.err, `queue "emails" is not known`) {
		t.Errorf("rm again: exit %d, stderr %q", r.code, r.err)
	}
	if r := b.run("", "queue", "rm", "flow/stage", "--yes"); r.code != 2 || !strings.Contains(r.err, "flow's queue") {
		t.Errorf("rm of a flow queue: exit %d, stderr %q", r.code, r.err)
	}
}

// An empty queue goes without --force; one a live worker serves is
// refused, --force or not, naming the worker.
func TestQueueRmEmptyAndServed(t *testing.T) {
	b := setup(t)
	b.enqueue("typo", "x")
	if _, err := b.in.DeleteAllWaiting(context.Background(), "typo", nil); err != nil {
		t.Fatal(err)
	}
	if out := b.ok("", "queue", "rm", "typo", "--yes"); !strings.Contains(out, "removed queue typo\n") {
		t.Errorf("rm of an empty queue: %q", out)
	}
	if out := b.ok("", "queue", "ls"); strings.Contains(out, "typo") {
		t.Errorf("queue ls after rm:\n%s", out)
	}

	w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{Config: worqr.Config{Namespace: b.ns},
		Queues: map[string]worqr.QueueConfig{"busy": {Concurrency: 1, Handler: worqr.HandlerFunc(
			func(context.Context, *worqr.Task) error { return nil })}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	}()
	r := b.run("", "queue", "rm", "busy", "--force", "--yes")
	if r.code != 1 || !strings.Contains(r.err, "served by 1 live worker") || !strings.Contains(r.err, w.ID()) {
		t.Errorf("rm of a served queue: exit %d, stderr %q", r.code, r.err)
	}
}
