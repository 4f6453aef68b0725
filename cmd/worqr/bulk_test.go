package main

import (
	"strings"
	"testing"
)

func TestBulkActionsRefuseWithoutYesWhenStdinIsNotATerminal(t *testing.T) {
	b := setup(t)
	b.bury("emails", "e1", "e2")
	b.enqueue("emails", "w1", "w2", "w3")
	for _, args := range [][]string{
		{"dead", "retry", "emails", "--all"},
		{"dead", "delete", "emails", "--all"},
		{"queue", "purge", "emails"},
	} {
		r := b.run("y\n", args...)
		if r.code != 2 {
			t.Errorf("%v: exit %d, want 2", args, r.code)
		}
		if !strings.Contains(r.err, "without --yes: stdin is not a terminal") {
			t.Errorf("%v: stderr %q does not say why", args, r.err)
		}
		if r.out != "" {
			t.Errorf("%v: stdout %q, want nothing", args, r.out)
		}
	}
	if qi := b.queue("emails"); qi.Dead != 2 || qi.Waiting != 3 {
		t.Errorf("something changed: %d dead, %d waiting; want 2 and 3", qi.Dead, qi.Waiting)
	}
}

func TestDeadDeleteAllAndPurge(t *testing.T) {
	b := setup(t)
	b.bury("emails", "e1", "e2")
	b.enqueue("emails", "w1", "w2", "w3")
	if out := b.ok("", "dead", "delete", "emails", "--all", "--yes"); !strings.Contains(out, "deleted 2 dead tasks") {
		t.Errorf("dead delete: %q", out)
	}
	r := b.run("", "queue", "purge", "emails", "--yes")
	if r.code != 0 || !strings.Contains(r.out, "deleted 3 waiting and scheduled tasks of emails") {
		t.Errorf("purge: exit %d, stdout %q, stderr %q", r.code, r.out, r.err)
	}
	// Not a terminal: progress comes as plain lines on stderr.
	if !strings.Contains(r.err, "deleted 3 of about 3") {
		t.Errorf("purge printed no progress line on stderr: %q", r.err)
	}
	if qi := b.queue("emails"); qi.Dead != 0 || qi.Waiting != 0 {
		t.Errorf("after delete and purge: %d dead, %d waiting", qi.Dead, qi.Waiting)
	}
}
