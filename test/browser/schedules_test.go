package browser

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/worqr/worqr-go/worqr"
)

// startScheduler registers and fires schedules in s's namespace until the
// test ends.
func (s *site) startScheduler(schedules ...worqr.Schedule) *worqr.Scheduler {
	s.t.Helper()
	ctx := context.Background()
	sc, err := worqr.NewScheduler(s.pool, &worqr.SchedulerConfig{Config: s.cfg, Schedules: schedules})
	if err != nil {
		s.t.Fatal(err)
	}
	if err := sc.Start(ctx); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_ = sc.Stop(sctx)
	})
	return sc
}

// TestSchedulesPage: the schedules page lists each schedule with its
// timing, the options of its ticks' tasks, next and last run and status;
// Pause and Resume act on it.
func TestSchedulesPage(t *testing.T) {
	s := newSite(t, nil)
	ctx := context.Background()
	s.startScheduler(
		worqr.Schedule{Name: "heartbeat", Queue: "pings", Every: time.Second, Opts: &worqr.EnqueueOpts{Type: "ping", Priority: 1}},
		worqr.Schedule{Name: "nightly-report", Queue: "reports", Cron: "0 30 2 * * *", TimeZone: "Europe/Paris", Missed: worqr.MissedRunOnce},
	)
	s.waitFor("the heartbeat to fire", func() bool {
		sc, err := s.in.Schedule(ctx, "heartbeat")
		return err == nil && sc.Fired > 0
	})
	b := browser(t)
	row := func(name string) string { return `#schedules tr[data-schedule="` + name + `"]` }
	var timing, opts, next, last string
	err := chromedp.Run(b,
		chromedp.Navigate(s.url+"/schedules"),
		chromedp.WaitVisible(row("nightly-report"), chromedp.ByQuery),
		chromedp.Text(row("nightly-report")+` td:nth-child(3)`, &timing, chromedp.ByQuery),
		chromedp.Text(row("heartbeat")+` td[data-k="opts"]`, &opts, chromedp.ByQuery),
		chromedp.Text(row("nightly-report")+` td[data-k="next"]`, &next, chromedp.ByQuery),
		chromedp.Text(row("heartbeat")+` td[data-k="last"]`, &last, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(timing, "0 30 2 * * * (Europe/Paris)") || !strings.HasPrefix(strings.TrimSpace(next), "in ") {
		t.Fatalf("nightly-report: timing %q, next %q", timing, next)
	}
	if strings.TrimSpace(opts) != "type ping · priority 1" {
		t.Fatalf("heartbeat: task options %q, want type ping · priority 1", opts)
	}
	if !strings.HasSuffix(strings.TrimSpace(last), "ago") {
		t.Fatalf("heartbeat: last run %q, want some time ago", last)
	}
	// The last run links to the task of that tick.
	var href string
	if err := chromedp.Run(b, chromedp.AttributeValue(row("heartbeat")+` td[data-k="last"] a`, "href", &href, nil, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(href, "/task?id=heartbeat.") {
		t.Fatalf("last run links to %q", href)
	}

	flash, err := clickConfirmed(b, s.url+"/schedules", row("heartbeat")+` button[data-op="pause_schedule"]`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(flash, "Paused schedule heartbeat") {
		t.Fatalf("flash %q", flash)
	}
	if sc, err := s.in.Schedule(ctx, "heartbeat"); err != nil || !sc.Paused {
		t.Fatalf("after Pause: %+v, %v", sc, err)
	}
	if err := textWithin(b, row("heartbeat")+` td[data-k="status"]`, "paused", time.Second); err != nil {
		t.Fatal(err)
	}
	flash, err = clickConfirmed(b, s.url+"/schedules", row("heartbeat")+` button[data-op="resume_schedule"]`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(flash, "Resumed schedule heartbeat") {
		t.Fatalf("flash %q", flash)
	}
	if sc, err := s.in.Schedule(ctx, "heartbeat"); err != nil || sc.Paused {
		t.Fatalf("after Resume: %+v, %v", sc, err)
	}
}
