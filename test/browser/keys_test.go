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

// seedKeys fills ordered queue "orders": order-3's head dead (the key
// blocked, one task behind it), order-1 with 3 tasks and order-2 with 2
// waiting.
func (s *site) seedKeys() {
	s.t.Helper()
	ctx := context.Background()
	if _, err := s.client.EnqueueBatch(ctx, "orders", [][]byte{[]byte("bad"), []byte("next")}, &worqr.EnqueueOpts{Key: "order-3"}); err != nil {
		s.t.Fatal(err)
	}
	w, err := worqr.NewWorker(s.pool, &worqr.WorkerConfig{Config: s.cfg, Queues: map[string]worqr.QueueConfig{
		"orders": {Concurrency: 1, Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			return worqr.SkipRetry(errors.New("charge: card declined"))
		})},
	}})
	if err != nil {
		s.t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		s.t.Fatal(err)
	}
	s.waitFor("order-3's head to die", func() bool { return s.queue("orders").Dead == 1 })
	if err := w.Stop(ctx); err != nil {
		s.t.Fatal(err)
	}
	for key, n := range map[string]int{"order-1": 3, "order-2": 2} {
		ps := make([][]byte, n)
		for i := range ps {
			ps[i] = []byte(`{"line":` + string(rune('1'+i)) + `}`)
		}
		if _, err := s.client.EnqueueBatch(ctx, "orders", ps, &worqr.EnqueueOpts{Key: key}); err != nil {
			s.t.Fatal(err)
		}
	}
}

// TestKeysPage: the keys page of an ordered queue lists its keys with
// their heads and how many tasks wait behind each, the blocked ones apart;
// a key's own view lists the tasks behind its head; Retry head unblocks a
// key from the page.
func TestKeysPage(t *testing.T) {
	s := newSite(t, nil)
	s.seedKeys()
	b := browser(t)
	row := func(table, key string) string { return table + ` tr[data-key="` + key + `"]` }
	if err := chromedp.Run(b, chromedp.Navigate(s.url+"/queue?name=orders"), chromedp.WaitVisible(`#keys-link`, chromedp.ByQuery),
		chromedp.Click(`#keys-link`, chromedp.ByQuery), chromedp.WaitVisible(`#keys`, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	for key, behind := range map[string]string{"order-1": "2", "order-2": "1", "order-3": "1"} {
		if err := textWithin(b, row("#keys", key)+` td[data-k="behind"]`, behind, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	var blocked, state string
	if err := chromedp.Run(b, chromedp.Text(row("#blocked", "order-3"), &blocked, chromedp.ByQuery),
		chromedp.Text(row("#keys", "order-1")+` td:nth-child(3)`, &state, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(blocked, "charge: card declined") || strings.TrimSpace(state) != "queued" {
		t.Fatalf("blocked row %q, order-1's head %q", blocked, state)
	}
	var n int
	if err := chromedp.Run(b, chromedp.Evaluate(`document.querySelectorAll("#blocked tbody tr[data-key]").length`, &n)); err != nil || n != 1 {
		t.Fatalf("%d blocked keys listed (%v), want 1", n, err)
	}
	// One key: the tasks behind its head.
	if err := chromedp.Run(b, chromedp.Click(row("#keys", "order-1")+` a`, chromedp.ByQuery), chromedp.WaitVisible(`#key`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("#behind a").length`, &n)); err != nil || n != 2 {
		t.Fatalf("order-1 shows %d tasks behind its head (%v), want 2", n, err)
	}
	// Retry the dead head: the key is no longer blocked.
	if err := chromedp.Run(b, chromedp.Navigate(s.url+"/keys?queue=orders"),
		chromedp.Click(row("#blocked", "order-3")+` button[data-op="retry_task"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#flash`, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	var url string
	if err := chromedp.Run(b, chromedp.Location(&url)); err != nil || !strings.Contains(url, "/keys?queue=orders") {
		t.Fatalf("after Retry head the page is %s (%v), want the keys page", url, err)
	}
	ki, err := s.in.Key(context.Background(), "orders", "order-3")
	if err != nil || ki == nil || ki.Blocked {
		t.Fatalf("order-3 after Retry head: %+v, %v", ki, err)
	}
	if err := chromedp.Run(b, chromedp.Evaluate(`document.querySelectorAll("#blocked tbody tr[data-key]").length`, &n)); err != nil || n != 0 {
		t.Fatalf("%d blocked keys listed after the retry (%v), want 0", n, err)
	}
}

// TestKeysPageOfAFairQueue: the keys page of a fair queue lists each key's
// tasks waiting and running, whether it is held, and its limits (its own
// or the queue's); a key's own view lists the ids waiting in its list.
func TestKeysPageOfAFairQueue(t *testing.T) {
	s := newSite(t, nil)
	ctx := context.Background()
	pol := worqr.KeyPolicy{Fair: true, PerKey: worqr.KeyLimits{Limits: worqr.Limits{Concurrency: 1}}}
	if err := s.client.SetKeyPolicy(ctx, "tenants", pol); err != nil {
		t.Fatal(err)
	}
	if err := s.client.SetKeyLimits(ctx, "tenants", "acme", worqr.KeyLimits{Weight: 2,
		Limits: worqr.Limits{Concurrency: 3, Rate: 10, Period: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	for key, n := range map[string]int{"acme": 4, "beta": 2} {
		ps := make([][]byte, n)
		for i := range ps {
			ps[i] = []byte(`{"n":` + string(rune('1'+i)) + `}`)
		}
		if _, err := s.client.EnqueueBatch(ctx, "tenants", ps, &worqr.EnqueueOpts{Key: key}); err != nil {
			t.Fatal(err)
		}
	}
	// A worker with room for both keys' limits (3 + 1) holds what it takes
	// until the test ends: acme runs 3 with 1 waiting, beta 1 with 1.
	release := make(chan struct{})
	w, err := worqr.NewWorker(s.pool, &worqr.WorkerConfig{Config: s.cfg, Queues: map[string]worqr.QueueConfig{
		"tenants": {Concurrency: 4, Keys: pol, Handler: worqr.HandlerFunc(func(ctx context.Context, _ *worqr.Task) error {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		})},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(release)
		_ = w.Stop(context.Background())
	})
	running := func(key string) int {
		ki, err := s.in.Key(ctx, "tenants", key)
		if err != nil || ki == nil {
			return -1
		}
		return ki.Running
	}
	s.waitFor("acme to run 3 and beta 1", func() bool { return running("acme") == 3 && running("beta") == 1 })

	b := browser(t)
	row := func(key string) string { return `#keys tr[data-key="` + key + `"]` }
	if err := chromedp.Run(b, chromedp.Navigate(s.url+"/queue?name=tenants"), chromedp.WaitVisible(`#keys-link`, chromedp.ByQuery),
		chromedp.Click(`#keys-link`, chromedp.ByQuery), chromedp.WaitVisible(`#keys`, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ key, col, want string }{
		{"acme", "behind", "1"}, {"acme", "running", "3"}, {"acme", "weight", "2"}, {"acme", "concurrency", "3"},
		{"acme", "rate", "10/" + "1m"}, {"beta", "behind", "1"}, {"beta", "running", "1"}, {"beta", "weight", "1"},
		{"beta", "concurrency", "1"}, {"beta", "rate", "–"},
	} {
		var got string
		if err := chromedp.Run(b, chromedp.Text(row(c.key)+` td[data-k="`+c.col+`"]`, &got, chromedp.ByQuery)); err != nil {
			t.Fatal(err)
		}
		if got = strings.TrimSpace(got); !strings.HasPrefix(got, c.want) {
			t.Errorf("key %s, %s: %q, want %q", c.key, c.col, got, c.want)
		}
	}
	var held string
	var n int
	if err := chromedp.Run(b, chromedp.Text(row("beta"), &held, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("#blocked").length`, &n)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(held, "held") || n != 0 {
		t.Errorf("beta's row %q (want it held at its limit); %d blocked-keys tables (want none: a fair key has no dead head)", held, n)
	}
	// One key: the ids waiting in its list.
	if err := chromedp.Run(b, chromedp.Click(row("acme")+` a`, chromedp.ByQuery), chromedp.WaitVisible(`#key`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("#behind a").length`, &n)); err != nil || n != 1 {
		t.Fatalf("acme shows %d tasks waiting (%v), want 1", n, err)
	}
}
