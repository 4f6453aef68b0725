package browser

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/worqr/worqr-go/worqr"
)

// rows returns the ids of the task list's rows.
func rows(ctx context.Context) ([]string, error) {
	var ids []string
	err := chromedp.Run(ctx, chromedp.Evaluate(`Array.from(document.querySelectorAll("#tasks tbody tr[data-id]")).map(r => r.dataset.id)`, &ids))
	return ids, err
}

// filterBy sets one field of the queue page's filter form and submits it,
// then waits for the page it leads to.
func filterBy(ctx context.Context, field, value string) error {
	return submitAndWait(ctx, `(function () {
		var f = document.getElementById("filters");
		f.elements[`+strconv.Quote(field)+`].value = `+strconv.Quote(value)+`;
		f.querySelector("button[type=submit]").click();
	})()`)
}

// submitAndWait runs js, which leaves the page, and waits for the next
// page to load.
func submitAndWait(ctx context.Context, js string) error {
	// The new page says it is there: its load event.
	loaded := make(chan struct{}, 1)
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	chromedp.ListenTarget(lctx, func(ev any) {
		if _, ok := ev.(*page.EventLoadEventFired); ok {
			select {
			case loaded <- struct{}{}:
			default:
			}
		}
	})
	if err := chromedp.Run(ctx, chromedp.Evaluate(`window.__old = true`, nil), chromedp.Evaluate(js, nil)); err != nil {
		return err
	}
	select {
	case <-loaded:
	case <-time.After(10 * time.Second):
		return errors.New("no new page within 10s")
	}
	var old, ready bool
	err := chromedp.Run(ctx, chromedp.Evaluate(`window.__old === true`, &old),
		chromedp.Evaluate(`document.readyState === "complete"`, &ready))
	if err != nil || old || !ready {
		return fmt.Errorf("after the load event: the old page %v, ready %v (%v)", old, ready, err)
	}
	return nil
}

// TestFiltersAndBulkActions: the queue page filters a state's tasks by
// payload text, error, type and key on the server; rows are selected and
// acted on together (delete dead, cancel waiting); every match of a filter
// is cancelled at once; the dead page retries a whole error group.
func TestFiltersAndBulkActions(t *testing.T) {
	s := newSite(t, nil)
	ctx := context.Background()
	s.kill("reports", 9, "render invoice 4411: template \"footer\" missing", "upload s3://b/r.pdf: timeout after 30s", "db: deadlock detected")
	// kill's errors go round from the second: 3 of each.
	b := browser(t)
	// Payload text.
	if err := chromedp.Run(b, chromedp.Navigate(s.url+"/queue?name=reports&state=dead"), chromedp.WaitVisible(`#filters`, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	if err := filterBy(b, "q", `"report":1003`); err != nil {
		t.Fatal(err)
	}
	if ids, err := rows(b); err != nil || len(ids) != 1 {
		t.Fatalf("payload filter: rows %v (%v), want 1", ids, err)
	}
	// Words of the error.
	if err := filterBy(b, "q", ""); err != nil {
		t.Fatal(err)
	}
	if err := filterBy(b, "error", "DEADLOCK"); err != nil {
		t.Fatal(err)
	}
	ids, err := rows(b)
	if err != nil || len(ids) != 3 {
		t.Fatalf("error filter: rows %v (%v), want 3", ids, err)
	}
	// Select two of them and delete them.
	err = chromedp.Run(b,
		chromedp.Evaluate(`window.confirm = function () { return true; }`, nil),
		chromedp.Click(`#tasks tr[data-id="`+ids[0]+`"] input.pick`, chromedp.ByQuery),
		chromedp.Click(`#tasks tr[data-id="`+ids[1]+`"] input.pick`, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := textWithin(b, "#nsel", "2", 0); err != nil {
		t.Fatal(err)
	}
	var flash string
	if err := chromedp.Run(b, chromedp.Click(`button[data-op="delete_selected"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#flash`, chromedp.ByQuery), chromedp.Text(`#flash`, &flash, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(flash, "Deleted 2 of 2 selected") {
		t.Fatalf("flash %q", flash)
	}
	if q := s.queue("reports"); q.Dead != 7 {
		t.Fatalf("after deleting 2 selected: %d dead, want 7", q.Dead)
	}
	for _, id := range ids[:2] {
		if _, err := s.in.Task(ctx, "reports", id); err == nil {
			t.Fatalf("selected task %s still there", id)
		}
	}
	// The page came back filtered: one deadlock left.
	if left, err := rows(b); err != nil || len(left) != 1 || left[0] != ids[2] {
		t.Fatalf("after the delete the filtered list is %v (%v), want [%s]", left, err, ids[2])
	}

	// The dead page retries a whole error group.
	group := worqr.ErrorShape("upload s3://b/r.pdf: timeout after 30s")
	sel := `#groups tr[data-group="` + group + `"] button[data-op="retry_matching"]`
	flash, err = clickConfirmed(b, s.url+"/dead", sel)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(flash, "Requeued 3 of 3 matching dead tasks of reports") {
		t.Fatalf("flash %q", flash)
	}
	if q := s.queue("reports"); q.Dead != 4 || q.Waiting != 3 {
		t.Fatalf("after retrying the group: dead %d waiting %d, want 4 and 3", q.Dead, q.Waiting)
	}
	// Its link lists the group's tasks.
	var n int
	if err := chromedp.Run(b, chromedp.Navigate(s.url+"/queue?name=reports&state=dead&group="+url.QueryEscape(worqr.ErrorShape("db: deadlock detected"))),
		chromedp.WaitVisible(`#summary`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("#tasks tbody tr[data-id]").length`, &n)); err != nil || n != 1 {
		t.Fatalf("the deadlock group lists %d tasks (%v), want 1", n, err)
	}

	// Waiting tasks of two types: filter by type, select the page, cancel.
	for i := 0; i < 6; i++ {
		typ := []string{"welcome", "digest"}[i%2]
		if _, err := s.client.Enqueue(ctx, "emails", []byte(fmt.Sprintf(`{"to":"user%d@example.com"}`, i)), &worqr.EnqueueOpts{Type: typ}); err != nil {
			t.Fatal(err)
		}
	}
	if err := chromedp.Run(b, chromedp.Navigate(s.url+"/queue?name=emails"), chromedp.WaitVisible(`#filters`, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	if err := filterBy(b, "type", "welcome"); err != nil {
		t.Fatal(err)
	}
	if ids, err := rows(b); err != nil || len(ids) != 3 {
		t.Fatalf("type filter: rows %v (%v), want 3", ids, err)
	}
	var payload string
	if err := chromedp.Run(b, chromedp.Text(`#tasks tbody tr[data-id] td.payload`, &payload, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(payload, "welcome ") || strings.ContainsRune(payload, '\uFFFD') || strings.Contains(payload, "wqt") {
		t.Fatalf("a typed task's payload cell reads %q, want its type apart", payload)
	}
	if err := chromedp.Run(b, chromedp.Evaluate(`window.confirm = function () { return true; }`, nil),
		chromedp.Click(`#select-all`, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Run(b, chromedp.Click(`button[data-op="cancel_selected"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#flash`, chromedp.ByQuery), chromedp.Text(`#flash`, &flash, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(flash, "Cancelled 3 of 3 selected") {
		t.Fatalf("flash %q", flash)
	}
	waiting, _, err := s.in.Tasks(ctx, "emails", worqr.StateQueued, 0, 10)
	if err != nil || len(waiting) != 3 {
		t.Fatalf("after cancelling the welcome tasks: %d waiting (%v), want 3", len(waiting), err)
	}
	for _, w := range waiting {
		if !strings.Contains(string(w.Payload), "digest") {
			t.Fatalf("a %q task is left, want only digests", w.Payload)
		}
	}
	// Every match of a filter at once: the three digests left.
	if err := chromedp.Run(b, chromedp.Navigate(s.url+"/queue?name=emails"), chromedp.WaitVisible(`#filters`, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	if err := filterBy(b, "q", "user"); err != nil {
		t.Fatal(err)
	}
	if err := filterBy(b, "type", "digest"); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Run(b, chromedp.Evaluate(`window.confirm = function () { return true; }`, nil),
		chromedp.Click(`button[data-op="cancel_matching"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#flash`, chromedp.ByQuery), chromedp.Text(`#flash`, &flash, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(flash, "Cancelled 3 of 3 matching queued tasks of emails") {
		t.Fatalf("flash %q", flash)
	}
	if q := s.queue("emails"); q.Waiting != 0 {
		t.Fatalf("after cancel all matching: %d waiting, want 0", q.Waiting)
	}
}

// TestFilterByKey: an ordered queue's waiting heads are filtered by key.
func TestFilterByKey(t *testing.T) {
	s := newSite(t, nil)
	s.seedKeys()
	b := browser(t)
	if err := chromedp.Run(b, chromedp.Navigate(s.url+"/queue?name=orders&state=dead&key=order-3"), chromedp.WaitVisible(`#summary`, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	if ids, err := rows(b); err != nil || len(ids) != 1 {
		t.Fatalf("dead of key order-3: rows %v (%v), want 1", ids, err)
	}
	if err := chromedp.Run(b, chromedp.Navigate(s.url+"/queue?name=orders"), chromedp.WaitVisible(`#filters`, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	if err := filterBy(b, "key", "order-2"); err != nil {
		t.Fatal(err)
	}
	ids, err := rows(b)
	if err != nil || len(ids) != 1 {
		t.Fatalf("waiting heads of key order-2: rows %v (%v), want 1", ids, err)
	}
	if ti, err := s.in.Task(context.Background(), "orders", ids[0]); err != nil || ti.Key != "order-2" {
		t.Fatalf("the row is %+v (%v), want order-2's head", ti, err)
	}
}
