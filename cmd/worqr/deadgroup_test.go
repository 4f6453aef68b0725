package main

import (
	"strings"
	"testing"
)

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
