package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/worqr/worqr-go/worqr"
)

func TestPeriodicLsPauseResumeRm(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	s, err := worqr.NewScheduler(b.pool, &worqr.SchedulerConfig{Config: worqr.Config{Namespace: b.ns}})
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range []worqr.Schedule{
		{Name: "nightly", Queue: "reports", Cron: "0 0 2 * * *", TimeZone: "Europe/Paris", Missed: worqr.MissedRunOnce},
		{Name: "beat", Queue: "pings", Every: time.Minute, StartWithin: 30 * time.Second, Opts: &worqr.EnqueueOpts{
			Type: "ping", Priority: 2, Timeout: -1, Meta: map[string]string{"team": "ops a"}}},
	} {
		if err := s.Register(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	out := b.ok("", "periodic", "ls")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.HasPrefix(lines[1], "beat") ||
		!strings.Contains(lines[1], "every 1m0s") || !strings.Contains(lines[2], "0 0 2 * * * (Europe/Paris)") ||
		!strings.Contains(lines[2], "run_once") || !strings.Contains(lines[0], "TASK OPTIONS") ||
		!strings.HasSuffix(lines[1], `type=ping priority=2 timeout=none meta.team="ops a" start_within=30s`) ||
		!strings.HasSuffix(lines[2], " -") {
		t.Fatalf("periodic ls:\n%s", out)
	}
	if out := b.ok("", "periodic", "pause", "nightly"); out != "paused nightly\n" {
		t.Errorf("pause printed %q", out)
	}
	var got []scheduleJSON
	if err := json.Unmarshal([]byte(b.ok("", "periodic", "ls", "-o", "json")), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1].Name != "nightly" || !got[1].Paused || got[1].Cron != "0 0 2 * * *" ||
		got[1].TimeZone != "Europe/Paris" || got[0].EveryMs != 60000 || got[0].Paused || got[0].Next == nil ||
		got[0].Type != "ping" || got[0].Priority != 2 || got[0].TimeoutMS != -1 || got[0].Meta["team"] != "ops a" ||
		got[0].StartWithinMS != 30000 || got[1].Type != "" || got[1].Meta != nil {
		t.Fatalf("periodic ls -o json: %+v", got)
	}
	b.ok("", "periodic", "resume", "nightly")
	if info, err := b.in.Schedule(ctx, "nightly"); err != nil || info.Paused {
		t.Fatalf("after resume: %+v %v", info, err)
	}
	if out := b.ok("", "periodic", "rm", "nightly"); out != "removed nightly\n" {
		t.Errorf("rm printed %q", out)
	}
	if _, err := b.in.Schedule(ctx, "nightly"); !errors.Is(err, worqr.ErrScheduleNotFound) {
		t.Fatalf("after rm: %v", err)
	}
	r := b.run("", "periodic", "pause", "nightly")
	if r.code != 1 || !strings.Contains(r.err, `schedule "nightly" not found`) {
		t.Errorf("pause of a removed schedule: exit %d, stderr %q", r.code, r.err)
	}
	r = b.run("", "periodic", "rm", "a{b}")
	if r.code != 2 || !strings.Contains(r.err, "<name>") {
		t.Errorf("rm of a bad name: exit %d, stderr %q", r.code, r.err)
	}
	if r := b.run("", "periodic", "--help"); r.code != 0 || !strings.Contains(r.out, "worqr periodic pause nightly-report") {
		t.Errorf("periodic --help: exit %d\n%s", r.code, r.out)
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
