package main

import (
	"strings"
	"testing"
	"time"
)

// runQuick runs the binary in b's namespace for at most d: a command that
// should have refused its input at once is killed (exit -1) instead of
// hanging the test.
func (b *bundle) runQuick(d time.Duration, args ...string) result {
	b.t.Helper()
	return b.runFor(d, []string{"WORQR_REDIS_URL=" + redisURL, "WORQR_NAMESPACE=" + b.ns}, "", args...)
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

// TestPeriodicRefusesANameLongerThanASchedulesCan: the help and the error
// say schedule names are 1 to 80 characters, but a name of 81 to 100 was
// looked up and reported "not found" (exit 1) instead of breaking the rule.
func TestPeriodicRefusesANameLongerThanASchedulesCan(t *testing.T) {
	b := setup(t)
	name := strings.Repeat("n", 90)
	for _, verb := range []string{"pause", "resume", "rm"} {
		r := b.run("", "periodic", verb, name)
		if r.code != 2 || !strings.Contains(r.err, "<name>") || !strings.Contains(r.err, "1 to 80") {
			t.Errorf("periodic %s <90 characters>: exit %d, stderr %q; want exit 2 naming <name> and the 80-character rule", verb, r.code, r.err)
		}
	}
}

// TestDashRefusesAPrefixThatIsNotAPlainPath: a --prefix with a space made
// the server's mux panic (a stack trace, exit 2 without the flag named); one
// with {braces} served a wildcard pattern the dashboard never matched.
func TestDashRefusesAPrefixThatIsNotAPlainPath(t *testing.T) {
	b := setup(t)
	for _, p := range []string{"/ops team", "/ops/{id}"} {
		r := b.runQuick(5*time.Second, "dash", "--addr", "127.0.0.1:0", "--prefix", p)
		if r.code != 2 || !strings.Contains(r.err, "--prefix") || strings.Contains(r.err, "panic") {
			t.Errorf("dash --prefix %q: exit %d, stderr %q; want exit 2 naming --prefix", p, r.code, r.err)
		}
	}
}
