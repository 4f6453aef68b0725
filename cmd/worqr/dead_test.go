package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestDeadRetryAllMovesEveryDeadTaskBack(t *testing.T) {
	b := setup(t)
	b.bury("emails", "e1", "e2", "e3", "e4")
	b.enqueue("emails", "waiting")
	out := b.ok("", "dead", "retry", "emails", "--all", "--yes")
	if !strings.Contains(out, "requeued 4 dead tasks of emails") {
		t.Errorf("stdout %q", out)
	}
	qi := b.queue("emails")
	if qi.Dead != 0 || qi.Waiting != 5 {
		t.Errorf("after retry: %d dead, %d waiting; want 0 and 5", qi.Dead, qi.Waiting)
	}
}

func TestDeadRetryNeedsAll(t *testing.T) {
	b := setup(t)
	b.bury("emails", "e1")
	r := b.run("", "dead", "retry", "emails", "--yes")
	if r.code != 2 || !strings.Contains(r.err, "--all or --error is required") {
		t.Errorf("exit %d, stderr %q", r.code, r.err)
	}
	if b.queue("emails").Dead != 1 {
		t.Error("the dead task moved")
	}
}

func TestDeadErrorsGroupsNormalisedErrors(t *testing.T) {
	b := setup(t)
	b.bury("emails",
		"timeout after 3s", "timeout after 5s", "timeout after 12s",
		"user 0f8fad5b-d9cb-469f-a165-70867728950e not found",
		"user 7c9e6679-7425-40de-944b-e07fc1f90ae7 not found",
		"connection refused")
	out := b.ok("", "dead", "errors", "emails", "-o", "json")
	var got struct {
		Total  int
		Groups []struct {
			Error string
			Count int
		}
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err, out)
	}
	type g struct {
		text  string
		count int
	}
	var groups []g
	for _, x := range got.Groups {
		groups = append(groups, g{x.Error, x.Count})
	}
	want := []g{{"timeout after <n>s", 3}, {"user <uuid> not found", 2}, {"connection refused", 1}}
	if !reflect.DeepEqual(groups, want) || got.Total != 6 {
		t.Errorf("groups %v (total %d), want %v (total 6)", groups, got.Total, want)
	}
	table := b.ok("", "dead", "errors", "emails")
	if !strings.Contains(table, "timeout after <n>s") || !strings.HasPrefix(strings.Split(table, "\n")[1], "3 ") {
		t.Errorf("table:\n%s", table)
	}
}

// dead retry --error requeues the dead tasks of one error group, as dead
// errors prints it (whole, clipped or as a raw error of it), and leaves
// the others dead; dead delete --error deletes them.
func TestDeadRetryAndDeleteByErrorGroup(t *testing.T) {
	b := setup(t)
	long := "upstream refused the request because " + strings.Repeat("the quota is spent ", 6) + "(code 429)"
	b.bury("emails", "timeout after 3s", "timeout after 5s", "no such user 42", "no such user 7", long)

	out := b.ok("", "dead", "retry", "emails", "--error", "timeout after <n>s", "--yes")
	if !strings.Contains(out, `requeued 2 dead tasks of emails in error group "timeout after <n>s"`) {
		t.Errorf("dead retry --error printed %q", out)
	}
	if qi := b.queue("emails"); qi.Dead != 3 || qi.Waiting != 2 {
		t.Fatalf("after retrying one group: %d dead, %d waiting; want 3 and 2", qi.Dead, qi.Waiting)
	}
	// The group as a table clips it.
	clipped := clip("upstream refused the request because the quota is spent the quota is spent the quota is spent the quota is spent the quota is spent the quota is spent (code <n>)", 100)
	if out := b.ok("", "dead", "retry", "emails", "--error", clipped, "--yes"); !strings.Contains(out, "requeued 1 dead tasks") {
		t.Errorf("dead retry --error of a clipped group printed %q", out)
	}
	// A raw error text stands for its group.
	if out := b.ok("", "dead", "delete", "emails", "--error", "no such user 1", "--yes"); !strings.Contains(out, "deleted 2 dead tasks") {
		t.Errorf("dead delete --error printed %q", out)
	}
	if qi := b.queue("emails"); qi.Dead != 0 || qi.Waiting != 3 {
		t.Fatalf("at the end: %d dead, %d waiting; want 0 and 3", qi.Dead, qi.Waiting)
	}

	b.bury("sms", "boom")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--error", "nope", "--yes"}, exitFail, `no dead task of sms is in error group "nope"`},
		{[]string{"--error", "boom", "--all", "--yes"}, exitUsage, "--all and --error: give one of them"},
		{[]string{"--error", " ", "--yes"}, exitUsage, "--error: must not be empty"},
		{[]string{"--all", "--scan", "5", "--yes"}, exitUsage, "--scan: only with --error"},
		{[]string{"--error", "boom"}, exitUsage, "without --yes: stdin is not a terminal"},
	} {
		args := append([]string{"dead", "retry", "sms"}, c.args...)
		if r := b.run("", args...); r.code != c.code || !strings.Contains(r.err, c.want) {
			t.Errorf("worqr %s: exit %d, stderr %q; want %d and %q", strings.Join(args, " "), r.code, r.err, c.code, c.want)
		}
	}
	if qi := b.queue("sms"); qi.Dead != 1 {
		t.Errorf("refused commands moved sms's dead task: %d dead", qi.Dead)
	}
}
