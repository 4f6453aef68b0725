package browser

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/worqr/worqr-go/dash"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// TestScreenshots seeds a namespace with realistic data (queues waiting,
// scheduled, running, paused and dead with several errors; two workers; a
// flow with runs fanned out to children; an ordered queue with a blocked
// key; periodic schedules) and writes one PNG per dashboard page into
// -screenshots DIR, and two in dark mode. Without the flag it skips.
//
//	go test ./test/browser -run Screenshots -screenshots=../../docs/img
func TestScreenshots(t *testing.T) {
	if *screenshots == "" {
		t.Skip("-screenshots DIR not given")
	}
	s := newSite(t, &dash.Options{Title: "worqr · production"})
	ctx := context.Background()

	// Failures of several kinds, grouped on the dead page.
	s.kill("reports", 23, "render invoice 4411: template \"footer\" missing",
		"upload s3://bucket/reports/7781.pdf: RequestTimeout after 30s",
		"render invoice 102: template \"footer\" missing",
		"db: deadlock detected (pid 5521)")
	s.kill("webhooks", 6, "POST https://hooks.example.com/v1/orders: 502 Bad Gateway")
	// An ordered queue with a blocked key, and periodic schedules.
	s.seedKeys()
	s.startScheduler(
		worqr.Schedule{Name: "heartbeat", Queue: "pings", Every: 5 * time.Second},
		worqr.Schedule{Name: "nightly-report", Queue: "reports", Cron: "0 30 2 * * *", TimeZone: "Europe/Paris", Missed: worqr.MissedRunOnce},
		worqr.Schedule{Name: "weekly-digest", Queue: "emails", Cron: "0 0 8 * * MON"},
		worqr.Schedule{Name: "cleanup", Queue: "maintenance", Every: 15 * time.Minute},
	)
	if err := s.in.PauseSchedule(ctx, "weekly-digest"); err != nil {
		t.Fatal(err)
	}

	// A flow whose stage fans out to two child queues.
	send := worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
		if strings.Contains(string(t.Payload), "bounce") && t.Queue == "sms" {
			return worqr.SkipRetry(errors.New("sms gateway: number unreachable"))
		}
		t.SetResult([]byte("sent"))
		return nil
	})
	stage := func(f func(r *worqr.Run) *worqr.StageResult) worqr.StageHandler {
		return worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) { return f(r), nil })
	}
	flow := &worqr.Flow{Name: "onboarding", Stages: []worqr.Stage{
		{Name: "verify", Queue: worqr.QueueConfig{Concurrency: 2}, Handler: stage(func(r *worqr.Run) *worqr.StageResult {
			return &worqr.StageResult{Fields: map[string]string{"verified": "yes", "plan": "team"}}
		})},
		{Name: "notify", Queue: worqr.QueueConfig{Concurrency: 2}, ContinueOnChildFailure: true,
			Children: map[string]worqr.QueueConfig{"mail": {Concurrency: 4, Handler: send}, "sms": {Concurrency: 4, Handler: send}},
			Handler: stage(func(r *worqr.Run) *worqr.StageResult {
				u := []byte(r.State["user"])
				return &worqr.StageResult{Children: []worqr.ChildSpec{{Queue: "mail", Payload: u}, {Queue: "mail", Payload: u}, {Queue: "sms", Payload: u}}}
			})},
		{Name: "record", Queue: worqr.QueueConfig{Concurrency: 2}, Handler: stage(func(r *worqr.Run) *worqr.StageResult {
			return &worqr.StageResult{Fields: map[string]string{"children": fmt.Sprint(len(r.Children))}}
		})},
	}}

	// Workers: one runs slow webhooks (so some are active) and a busy
	// thumbnails queue; another serves the flow.
	var n atomic.Int64
	w1, err := worqr.NewWorker(s.pool, &worqr.WorkerConfig{Config: s.cfg, Queues: map[string]worqr.QueueConfig{
		"webhooks": {Concurrency: 3, Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			<-ctx.Done()
			return ctx.Err()
		})},
		"thumbnails": {Concurrency: 8, MaxAttempts: 3, Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			time.Sleep(2 * time.Millisecond)
			if n.Add(1)%9 == 0 {
				return errors.New("resize: unsupported colour profile")
			}
			return nil
		})},
	}})
	if err != nil {
		t.Fatal(err)
	}
	w2, err := worqr.NewWorker(s.pool, &worqr.WorkerConfig{Config: s.cfg, Flows: []*worqr.Flow{flow}})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []*worqr.Worker{w1, w2} {
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	defer func() { // webhooks never end by themselves: give Stop a deadline
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_ = w1.Stop(sctx)
		_ = w2.Stop(sctx)
	}()
	var runID string
	for i, user := range []string{"ada", "grace", "bounce-linus", "edsger", "barbara", "bounce-ken"} {
		id, err := s.client.StartRun(ctx, flow, map[string]string{"user": user}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			runID = id
		}
	}
	for i := 0; i < 8; i++ {
		if _, err := s.client.Enqueue(ctx, "webhooks", []byte(fmt.Sprintf(`{"event":"order.paid","order":%d}`, 88120+i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	var mails [][]byte
	for i := 0; i < 140; i++ {
		mails = append(mails, []byte(fmt.Sprintf(`{"to":"user%d@example.com","template":"weekly-digest","locale":"en"}`, i)))
	}
	if _, err := s.client.EnqueueBatch(ctx, "emails", mails, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.EnqueueBatch(ctx, "emails", mails[:12], &worqr.EnqueueOpts{Delay: 20 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := s.in.Pause(ctx, "exports"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.EnqueueBatch(ctx, "exports", mails[:9], nil); err != nil {
		t.Fatal(err)
	}
	// Throughput for the chart: thumbnails keep coming for a few seconds.
	for round := 0; round < 6; round++ {
		batch := make([][]byte, 150)
		for i := range batch {
			batch[i] = []byte(fmt.Sprintf(`{"image":"img/%d.jpg","sizes":[64,256,1024]}`, round*1000+i))
		}
		if _, err := s.client.EnqueueBatch(ctx, "thumbnails", batch, nil); err != nil {
			t.Fatal(err)
		}
		_ = redistest.Pause(ctx, 300*time.Millisecond) // spread over the chart's seconds
	}
	s.waitFor("the flow runs to end", func() bool {
		runs, err := s.in.Runs(ctx, "onboarding", worqr.RunRunning, 0, 10)
		return err == nil && len(runs) == 0
	})
	deadTasks, _, err := s.in.Tasks(ctx, "reports", worqr.StateDead, 0, 1)
	if err != nil || len(deadTasks) == 0 {
		t.Fatalf("no dead report: %v", err)
	}

	if err := os.MkdirAll(*screenshots, 0o755); err != nil {
		t.Fatal(err)
	}
	b := browser(t)
	// The queue page's selection: a few dead tasks ticked.
	pick := `document.querySelectorAll("input.pick").forEach((c, i) => { if (i % 3 === 1) c.click(); })`
	pages := []struct{ name, path, wait, js string }{
		{"overview", "/", `#live.on`, ""},
		{"queue", "/queue?name=emails", `#tasks`, ""},
		{"queue-dead", "/queue?name=reports&state=dead", `#tasks`, pick},
		{"queue-filter", "/queue?name=reports&state=dead&group=" + url.QueryEscape(worqr.ErrorShape("render invoice 1: template \"footer\" missing")), `#tasks`, ""},
		{"task", "/task?id=" + deadTasks[0].ID, `#payload`, ""},
		{"dead", "/dead", `#groups`, ""},
		{"workers", "/workers", `#workers`, ""},
		{"flows", "/flows?flow=onboarding", `#runs`, ""},
		{"run", "/run?flow=onboarding&id=" + runID, `#tree`, ""},
		{"keys", "/keys?queue=orders&key=order-1", `#keys`, ""},
		{"schedules", "/schedules", `#schedules`, ""},
		{"overview-dark", "/", `#live.on`, ""},
		{"queue-dead-dark", "/queue?name=reports&state=dead", `#tasks`, pick},
	}
	for _, p := range pages {
		scheme := "light"
		if strings.HasSuffix(p.name, "-dark") {
			scheme = "dark"
		}
		var png []byte
		err := chromedp.Run(b,
			emulation.SetEmulatedMedia().WithFeatures([]*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}),
			chromedp.Navigate(s.url+p.path),
			chromedp.WaitVisible(p.wait, chromedp.ByQuery),
			chromedp.WaitVisible(`#live.on`, chromedp.ByQuery), // not "connecting"
			chromedp.ActionFunc(func(ctx context.Context) error {
				if p.js == "" {
					return nil
				}
				return chromedp.Evaluate(p.js, nil).Do(ctx)
			}),
			chromedp.Sleep(1200*time.Millisecond), // let the live counts settle (their highlight fades in 1 s)
			chromedp.FullScreenshot(&png, 100),    // 100: PNG (less is JPEG)
		)
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		file := filepath.Join(*screenshots, "dash-"+p.name+".png")
		if err := os.WriteFile(file, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", file, len(png))
	}
}
