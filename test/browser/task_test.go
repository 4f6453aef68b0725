package browser

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/worqr/worqr-go/worqr"
)

// clickConfirmed clicks sel on the page at path, accepting its confirmation
// dialog, and returns the flash message of the page it leads to.
func clickConfirmed(ctx context.Context, url, sel string) (string, error) {
	var flash string
	err := chromedp.Run(ctx,
		chromedp.Navigate(url),
		chromedp.WaitVisible(sel, chromedp.ByQuery),
		chromedp.Evaluate(`window.confirm = function () { return true; }`, nil),
		chromedp.Click(sel, chromedp.ByQuery),
		chromedp.WaitVisible(`#flash`, chromedp.ByQuery),
		chromedp.Text(`#flash`, &flash, chromedp.ByQuery),
	)
	return flash, err
}

// exists reports whether sel matches an element of the page.
func exists(ctx context.Context, sel string) (bool, error) {
	var n int
	err := chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll(`+"`"+sel+"`"+`).length`, &n))
	return n > 0, err
}

// TestCancelFromTheTaskPage: a waiting task's page shows no Last error box
// (it has no error) and a Cancel button that removes it; a running task's
// Cancel stops its handler (its context ends with ErrTaskCancelled).
func TestCancelFromTheTaskPage(t *testing.T) {
	s := newSite(t, nil)
	ctx := context.Background()
	id, err := s.client.Enqueue(ctx, "emails", []byte(`{"to":"ada@example.com"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := browser(t)
	if err := chromedp.Run(b, chromedp.Navigate(s.url+"/task?id="+id), chromedp.WaitVisible(`#payload`, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	if box, err := exists(b, "#last-error"); err != nil || box {
		t.Fatalf("a waiting task's page shows a Last error box (%v)", err)
	}
	flash, err := clickConfirmed(b, s.url+"/task?id="+id, `button[data-op="cancel_task"]`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(flash, "Cancelled "+id) {
		t.Fatalf("flash %q", flash)
	}
	if q := s.queue("emails"); q.Waiting != 0 {
		t.Fatalf("after Cancel: %d waiting, want 0", q.Waiting)
	}

	// A running task.
	started := make(chan string, 1)
	ended := make(chan error, 1)
	w, err := worqr.NewWorker(s.pool, &worqr.WorkerConfig{Config: s.cfg, Queues: map[string]worqr.QueueConfig{
		"renders": {Concurrency: 1, Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			started <- t.ID
			<-ctx.Done()
			ended <- context.Cause(ctx)
			return ctx.Err()
		})},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	}()
	if _, err := s.client.Enqueue(ctx, "renders", []byte(`{"doc":7}`), nil); err != nil {
		t.Fatal(err)
	}
	var running string
	select {
	case running = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the task did not start")
	}
	flash, err = clickConfirmed(b, s.url+"/task?id="+running, `button[data-op="cancel_task"]`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(flash, "to stop it") {
		t.Fatalf("flash %q", flash)
	}
	select {
	case cause := <-ended:
		if !errors.Is(cause, worqr.ErrTaskCancelled) {
			t.Fatalf("the handler's context ended with %v, want ErrTaskCancelled", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the running task was not stopped within 10 s of Cancel")
	}
}

// TestTaskPageShowsAttempts: the page of a typed task done after two
// failed attempts shows its type, its attempts in a table (each one's
// error, escaped) and how long its last run took, and no Last error box.
func TestTaskPageShowsAttempts(t *testing.T) {
	s := newSite(t, nil)
	ctx := context.Background()
	w, err := worqr.NewWorker(s.pool, &worqr.WorkerConfig{Config: s.cfg, Queues: map[string]worqr.QueueConfig{
		"emails": {Concurrency: 1, Retention: time.Minute, Backoff: func(int, error) time.Duration { return time.Millisecond },
			Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
				if t.Attempt < 3 {
					return errors.New("smtp <421> try again")
				}
				// Work of a length the page can show: a run within one
				// millisecond of Redis's clock has no run time to show.
				time.Sleep(5 * time.Millisecond)
				return nil
			})},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	}()
	id, err := s.client.Enqueue(ctx, "emails", []byte(`{"to":"ada@example.com"}`), &worqr.EnqueueOpts{Type: "welcome"})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := s.in.Task(ctx, "emails", id)
		if err == nil && info.State == worqr.StateDone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task is not done within 10 s: %+v, %v", info, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b := browser(t)
	var rows int
	var errs []string
	var typ, ran string
	if err := chromedp.Run(b,
		chromedp.Navigate(s.url+"/task?id="+id),
		chromedp.WaitVisible(`#attempts`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("#attempts tbody tr").length`, &rows),
		chromedp.Evaluate(`Array.from(document.querySelectorAll("#attempts .attempt-error")).map(e => e.textContent)`, &errs),
		chromedp.Text(`#task-type`, &typ, chromedp.ByQuery),
		chromedp.Text(`#task-ran-for`, &ran, chromedp.ByQuery),
	); err != nil {
		t.Fatal(err)
	}
	if rows != 2 || len(errs) != 2 || errs[0] != "smtp <421> try again" || errs[1] != errs[0] {
		t.Errorf("attempts table: %d rows, errors %q; want 2 with the handler's error", rows, errs)
	}
	if typ != "welcome" || ran == "" || ran == "–" {
		t.Errorf("type %q, ran for %q; want welcome and a duration", typ, ran)
	}
	if box, err := exists(b, "#last-error"); err != nil || box {
		t.Errorf("a done task's page shows a Last error box (%v)", err)
	}
}
