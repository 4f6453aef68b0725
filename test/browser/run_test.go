package browser

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/worqr/worqr-go/worqr"
)

// TestRunPageShowsAndSteersASleepingRun: the page of a run waiting for a
// signal says which and when it wakes; Send signal delivers one (the run
// moves on with its payload); Wake now starts a sleeping run's stage at
// once.
func TestRunPageShowsAndSteersASleepingRun(t *testing.T) {
	s := newSite(t, nil)
	ctx := context.Background()
	flow := &worqr.Flow{Name: "order", Stages: []worqr.Stage{
		{Name: "charge", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(_ context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				if r.State["mode"] == "sleep" {
					return &worqr.StageResult{Sleep: time.Hour}, nil
				}
				return &worqr.StageResult{Await: "paid", Sleep: time.Hour}, nil
			})},
		{Name: "ship", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return nil, nil })},
	}}
	w, err := worqr.NewWorker(s.pool, &worqr.WorkerConfig{Config: s.cfg, Flows: []*worqr.Flow{flow}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	run := func(mode string) string {
		id, err := s.client.StartRun(ctx, flow, map[string]string{"mode": mode}, nil)
		if err != nil {
			t.Fatal(err)
		}
		s.waitFor("run "+id+" to sleep", func() bool {
			r, err := s.in.Run(ctx, flow.Name, id)
			return err == nil && r.Stage == "ship" && r.TaskState == "scheduled"
		})
		return id
	}
	runOf := func(id string) *worqr.RunInfo {
		r, err := s.in.Run(ctx, flow.Name, id)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	b := browser(t)

	awaits := run("await")
	var waitingFor, wakes string
	if err := chromedp.Run(b, chromedp.Navigate(s.url+"/run?flow=order&id="+awaits), chromedp.WaitVisible(`#run-awaiting`, chromedp.ByQuery),
		chromedp.Text(`#run-awaiting`, &waitingFor, chromedp.ByQuery), chromedp.Text(`#run-wake`, &wakes, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(waitingFor, "paid") || strings.TrimSpace(wakes) == "–" || strings.TrimSpace(wakes) == "" {
		t.Errorf("the page says waiting for %q, wakes %q; want signal paid and its bound", waitingFor, wakes)
	}
	var flash string
	if err := chromedp.Run(b, chromedp.SetValue(`#signal-form input[name="payload"]`, `{"amount":12}`, chromedp.ByQuery),
		chromedp.Click(`#signal-form button`, chromedp.ByQuery), chromedp.WaitVisible(`#flash`, chromedp.ByQuery),
		chromedp.Text(`#flash`, &flash, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(flash, "Signal paid delivered") {
		t.Errorf("flash %q after Send signal", flash)
	}
	s.waitFor("the signalled run to end", func() bool { return runOf(awaits).Status == worqr.RunDone })
	if got := runOf(awaits).State["paid"]; got != `{"amount":12}` {
		t.Errorf("the run's paid field is %q, want the payload sent", got)
	}

	sleeps := run("sleep")
	flash, err = clickConfirmed(b, s.url+"/run?flow=order&id="+sleeps, `button[data-op="wake_run"]`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(flash, "Woke run "+sleeps) {
		t.Errorf("flash %q after Wake now", flash)
	}
	s.waitFor("the woken run to end", func() bool { return runOf(sleeps).Status == worqr.RunDone })
}

// TestRunPageShowsWhatAJoinWaitsFor: the page of a run waiting at a join
// (Stage.Branches) lists each branch by name with its state, done or
// pending, and, once the last ends, each done and the run past the join.
func TestRunPageShowsWhatAJoinWaitsFor(t *testing.T) {
	s := newSite(t, nil)
	ctx := context.Background()
	release := make(chan struct{})
	branch := func(name string, wait bool) worqr.Branch {
		return worqr.Branch{Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, _ *worqr.Run) (*worqr.StageResult, error) {
				if wait {
					select {
					case <-release:
					case <-ctx.Done():
						return nil, ctx.Err()
					}
				}
				return &worqr.StageResult{Fields: map[string]string{name: "ok"}}, nil
			})}
	}
	flow := &worqr.Flow{Name: "quotes", Stages: []worqr.Stage{
		{Name: "quote", Queue: worqr.QueueConfig{Concurrency: 1},
			Branches: map[string]worqr.Branch{"price": branch("price", false), "stock": branch("stock", true)},
			Handler: worqr.StageHandlerFunc( // the join: the run then sleeps before send
				func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
					return &worqr.StageResult{Sleep: time.Hour}, nil
				})},
		{Name: "send", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return nil, nil })},
	}}
	w, err := worqr.NewWorker(s.pool, &worqr.WorkerConfig{Config: s.cfg, Flows: []*worqr.Flow{flow}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	id, err := s.client.StartRun(ctx, flow, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// branches reads the page's child groups: "<name> <badges>" by name.
	b := browser(t)
	branches := func() map[string]string {
		t.Helper()
		var groups map[string]string
		if err := chromedp.Run(b, chromedp.Navigate(s.url+"/run?flow=quotes&id="+id), chromedp.WaitVisible(`#tree`, chromedp.ByQuery),
			chromedp.Evaluate(`Object.fromEntries(Array.from(document.querySelectorAll('#tree .node')).
				filter(n => n.textContent.trim().startsWith('children ')).
				map(n => [n.querySelector('b').textContent, Array.from(n.querySelectorAll('.badge')).map(b => b.textContent).join(', ')]))`, &groups)); err != nil {
			t.Fatal(err)
		}
		return groups
	}
	s.waitFor("price done and stock running", func() bool {
		r, err := s.in.Run(ctx, flow.Name, id)
		if err != nil || r.Stage != "quote" || r.TaskState != "children" {
			return false
		}
		st := map[string]string{}
		for _, c := range r.Children {
			st[c.Queue] = c.Status
		}
		return st["price"] == "done" && st["stock"] == "pending"
	})
	var stage string
	if err := chromedp.Run(b, chromedp.Navigate(s.url+"/run?flow=quotes&id="+id), chromedp.WaitVisible(`#tree`, chromedp.ByQuery),
		chromedp.Text(`#tree > li > ul > li > .node`, &stage, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stage, "quote") || !strings.Contains(stage, "children") {
		t.Errorf("the run's stage reads %q, want quote waiting for its children", stage)
	}
	if got, want := branches(), map[string]string{"price": "done 1", "stock": "pending 1"}; !maps.Equal(got, want) {
		t.Errorf("the join's branches read %v, want %v", got, want)
	}
	close(release)
	s.waitFor("the run past the join", func() bool {
		r, err := s.in.Run(ctx, flow.Name, id)
		return err == nil && r.Stage == "send" && r.TaskState == "scheduled"
	})
	if got, want := branches(), map[string]string{"price": "done 1", "stock": "done 1"}; !maps.Equal(got, want) {
		t.Errorf("once the join ran, its branches read %v, want %v", got, want)
	}
}
