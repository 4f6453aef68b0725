package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/gomodule/redigo/redis"
	"github.com/rs/xid"

	"github.com/worqr/worqr-go/dash"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// site is one namespace served by a dashboard, with a client and an
// inspector of its own.
type site struct {
	t      *testing.T
	cfg    worqr.Config
	pool   *redis.Pool
	client *worqr.Client
	in     *worqr.Inspector
	url    string
	ts     *httptest.Server
}

func newSite(t *testing.T, opts *dash.Options) *site {
	t.Helper()
	return newSiteOn(t, redisURL, opts, nil)
}

// newSiteOn is newSite on the Redis server at url, its dashboard wrapped in
// wrap when not nil.
func newSiteOn(t *testing.T, url string, opts *dash.Options, wrap func(http.Handler) http.Handler) *site {
	t.Helper()
	if browserPath == "" {
		t.Skip("no chromium or google-chrome binary on the PATH (Debian: apt-get install -y chromium)")
	}
	s := &site{t: t, cfg: worqr.Config{Namespace: "browser-" + xid.New().String(), EventInterval: 50 * time.Millisecond}}
	s.pool = s.newPoolOn(url)
	var err error
	if s.client, err = worqr.NewClient(s.pool, &s.cfg); err != nil {
		t.Fatal(err)
	}
	if s.in, err = worqr.NewInspector(s.pool, &s.cfg); err != nil {
		t.Fatal(err)
	}
	var o dash.Options
	if opts != nil {
		o = *opts
	}
	if o.Client == nil {
		o.Client = s.client
	}
	d := dash.New(s.in, &o)
	var h http.Handler = d
	if wrap != nil {
		h = wrap(d)
	}
	s.ts = httptest.NewServer(h)
	t.Cleanup(func() { d.Close(); s.ts.Close() })
	s.url = s.ts.URL
	return s
}

func (s *site) newPool() *redis.Pool {
	s.t.Helper()
	return s.newPoolOn(redisURL)
}

func (s *site) newPoolOn(url string) *redis.Pool {
	s.t.Helper()
	p, err := redisconn.NewPool(url, &redisconn.Options{ConnectTimeout: time.Second})
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { p.Close() })
	return p
}

// browser starts a headless Chromium for one test.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browserPath),
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1366, 900),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelC := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, 45*time.Second)
	t.Cleanup(func() { cancelT(); cancelC(); cancelA() })
	if err := chromedp.Run(ctx); err != nil { // starts the browser
		t.Fatalf("starting %s: %v", browserPath, err)
	}
	return ctx
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// until waits up to d for the JavaScript expression js to be true in the
// page, evaluated by the browser at each frame it renders (chromedp.Poll).
func until(ctx context.Context, js string, d time.Duration) error {
	var ok bool
	return chromedp.Run(ctx, chromedp.Poll(js, &ok, chromedp.WithPollingTimeout(d)))
}

// textWithin waits up to d for the text of sel, visible, to equal want.
func textWithin(ctx context.Context, sel, want string, d time.Duration) error {
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%s); return !!e && e.getClientRects().length > 0 && e.innerText.trim() === %s })()`,
		jsString(sel), jsString(want))
	err := until(ctx, js, d)
	if err != nil {
		var got string
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_ = chromedp.Run(sctx, chromedp.Text(sel, &got, chromedp.ByQuery, chromedp.NodeVisible))
		return fmt.Errorf("%s: text %q, want %q within %s (%v)", sel, got, want, d, err)
	}
	return nil
}

// kill makes n dead tasks of queue: a worker refuses them with errs in turn.
func (s *site) kill(queue string, n int, errs ...string) {
	s.t.Helper()
	ctx := context.Background()
	before := s.queue(queue).Dead
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = []byte(fmt.Sprintf(`{"report":%d,"format":"pdf"}`, 1000+i))
	}
	if _, err := s.client.EnqueueBatch(ctx, queue, payloads, nil); err != nil {
		s.t.Fatal(err)
	}
	if len(errs) == 0 {
		errs = []string{"boom"}
	}
	var i int
	died := make(chan struct{}, n)
	w, err := worqr.NewWorker(s.pool, &worqr.WorkerConfig{Config: s.cfg, Queues: map[string]worqr.QueueConfig{
		queue: {Concurrency: 1, Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			i++
			return worqr.SkipRetry(errors.New(errs[i%len(errs)]))
		})},
	}, OnEvent: func(e worqr.Event) {
		if e.Kind == worqr.EventDead {
			died <- struct{}{}
		}
	}})
	if err != nil {
		s.t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		s.t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	for k := 0; k < n; k++ {
		select {
		case <-died:
		case <-timeout:
			s.t.Fatalf("%d of %d tasks of %s died within 10s", k, n, queue)
		}
	}
	if got := s.queue(queue).Dead; got != before+int64(n) {
		s.t.Fatalf("%s has %d dead tasks after %d dead events, want %d", queue, got, n, before+int64(n))
	}
	if err := w.Stop(ctx); err != nil {
		s.t.Fatal(err)
	}
}

func (s *site) queue(q string) worqr.QueueInfo {
	s.t.Helper()
	qi, err := s.in.Queue(context.Background(), q)
	if err != nil {
		s.t.Fatal(err)
	}
	return *qi
}

// waitFor waits up to 10 s for a state of Redis nothing signals (a
// queue's history, a schedule's last fire).
func (s *site) waitFor(what string, ok func() bool) {
	s.t.Helper()
	redistest.WaitFor(s.t, 10*time.Second, what, ok)
}

// TestOverviewUpdatesLive: the overview lists a queue, and its waiting
// count follows an enqueue made by another Client (on a pool of its own,
// as another process would) within 2 s, without a reload.
func TestOverviewUpdatesLive(t *testing.T) {
	s := newSite(t, nil)
	ctx := context.Background()
	if _, err := s.client.Enqueue(ctx, "emails", []byte(`{"to":"ada@example.com"}`), nil); err != nil {
		t.Fatal(err)
	}
	b := browser(t)
	cell := `#queues tr[data-queue="emails"] td[data-k="waiting"]`
	if err := chromedp.Run(b, chromedp.Navigate(s.url+"/"), chromedp.WaitVisible(cell, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	if err := textWithin(b, cell, "1", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	// Mark the document: a reload would lose the mark.
	if err := chromedp.Run(b, chromedp.Evaluate(`window.__mark = 42`, nil)); err != nil {
		t.Fatal(err)
	}
	// Wait for the live stream, so the enqueue below is not in the first snapshot.
	if err := chromedp.Run(b, chromedp.WaitVisible(`#live.on`, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	other, err := worqr.NewClient(s.newPool(), &s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.EnqueueBatch(ctx, "emails", [][]byte{[]byte("b"), []byte("c")}, nil); err != nil {
		t.Fatal(err)
	}
	if err := textWithin(b, cell, "3", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := textWithin(b, "#t-waiting", "3", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	var mark int
	if err := chromedp.Run(b, chromedp.Evaluate(`window.__mark || 0`, &mark)); err != nil || mark != 42 {
		t.Fatalf("the page was reloaded (mark %d, %v)", mark, err)
	}
}

// TestBulkRetryFromThePage clicks "Retry all dead" (confirming the dialog):
// every dead task is back in the queue in Redis.
func TestBulkRetryFromThePage(t *testing.T) {
	s := newSite(t, nil)
	s.kill("reports", 4, "render: template missing")
	b := browser(t)
	btn := `button[data-op="retry_dead"]`
	err := chromedp.Run(b,
		chromedp.Navigate(s.url+"/queue?name=reports&state=dead"),
		chromedp.WaitVisible(btn, chromedp.ByQuery),
		chromedp.Evaluate(`window.confirm = function () { window.__asked = true; return true; }`, nil),
		chromedp.Click(btn, chromedp.ByQuery),
		chromedp.WaitVisible(`#flash`, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatal(err)
	}
	var flash string
	if err := chromedp.Run(b, chromedp.Text(`#flash`, &flash, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(flash, "Requeued 4 dead tasks of reports") {
		t.Fatalf("flash %q", flash)
	}
	if q := s.queue("reports"); q.Dead != 0 || q.Waiting != 4 {
		t.Fatalf("after retry all from the page: dead=%d waiting=%d, want 0 and 4", q.Dead, q.Waiting)
	}
}

// TestReadOnlyRefusesActions: a read-only dashboard shows no action, and a
// POST made from the page anyway is refused (403) with nothing changed.
func TestReadOnlyRefusesActions(t *testing.T) {
	s := newSite(t, &dash.Options{ReadOnly: true})
	s.kill("reports", 2)
	b := browser(t)
	var buttons int
	var status int
	err := chromedp.Run(b,
		chromedp.Navigate(s.url+"/queue?name=reports&state=dead"),
		chromedp.WaitVisible(`#readonly`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("form[action$='/action'], button[data-op]").length`, &buttons),
		chromedp.Evaluate(`fetch("/action", {method: "POST", body: new URLSearchParams({op: "retry_dead", queue: "reports", csrf: "x"})}).then(r => r.status)`,
			&status, func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }),
	)
	if err != nil {
		t.Fatal(err)
	}
	if buttons != 0 {
		t.Fatalf("read-only page shows %d actions", buttons)
	}
	if status != 403 {
		t.Fatalf("POST from a read-only page: %d, want 403", status)
	}
	if q := s.queue("reports"); q.Dead != 2 || q.Waiting != 0 {
		t.Fatalf("read-only dashboard changed the queue: dead=%d waiting=%d", q.Dead, q.Waiting)
	}
}

// chartFailed sums the failed counts the chart's minutes show (their
// tooltips), as drawn in the page.
func chartFailed(ctx context.Context) (int, error) {
	var n int
	err := chromedp.Run(ctx, chromedp.Evaluate(chartFailedJS, &n))
	return n, err
}

// chartFailedJS sums the "<n> failed" of the chart's bar titles.
const chartFailedJS = `Array.from(document.querySelectorAll("#chart title")).` +
	`map(t => /(\d+) failed/.exec(t.textContent)).reduce((n, m) => n + (m ? Number(m[1]) : 0), 0)`

// TestChartShowsHistoryAfterRestart: work done before a dashboard starts
// (on an inspector that publishes nothing, as after `worqr dash` restarts)
// is in its chart at load, and work done while the page is open is added
// live, without a reload.
func TestChartShowsHistoryAfterRestart(t *testing.T) {
	s := newSite(t, nil)
	s.kill("reports", 3)
	in, err := worqr.NewInspector(s.newPool(), &worqr.Config{Namespace: s.cfg.Namespace, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	// The workers' last publication lands within an EventInterval of Stop.
	s.waitFor("the history", func() bool {
		hs, err := in.History(context.Background(), "reports", 3)
		var dead int64
		for _, h := range hs {
			dead += h.Dead
		}
		return err == nil && dead == 3
	})
	d := dash.New(in, nil)
	ts := httptest.NewServer(d)
	defer func() { d.Close(); ts.Close() }()
	b := browser(t)
	if err := chromedp.Run(b, chromedp.Navigate(ts.URL+"/"), chromedp.WaitVisible(`#live.on`, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	if n, err := chartFailed(b); err != nil || n != 3 {
		t.Fatalf("the chart of a new dashboard shows %d failed (%v), want 3", n, err)
	}
	s.kill("reports", 2)
	if err := until(b, chartFailedJS+" === 5", 5*time.Second); err != nil {
		n, cerr := chartFailed(b)
		t.Fatalf("the chart shows %d failed (%v) 5 s after 2 more deaths, want 5 (%v)", n, cerr, err)
	}
}

// liveState waits up to d for the live indicator to be in state (on,
// down or off) and returns its text.
func liveState(ctx context.Context, state string, d time.Duration) (string, error) {
	werr := until(ctx, `(document.getElementById("live").dataset.state || "") === `+jsString(state), d)
	var got, text string
	err := chromedp.Run(ctx, chromedp.Evaluate(`document.getElementById("live").dataset.state || ""`, &got),
		chromedp.Text(`#live`, &text, chromedp.ByQuery))
	if werr != nil || err != nil || got != state {
		return "", fmt.Errorf("live indicator %q (%q), want %q within %s (%v, %v)", got, text, state, d, werr, err)
	}
	return strings.TrimSpace(text), nil
}

// TestLiveIndicatorFollowsRedis: on a dashboard whose Redis is killed the
// live indicator turns red ("Redis down") within a few seconds, without a
// reload, and green again once Redis is back.
func TestLiveIndicatorFollowsRedis(t *testing.T) {
	if browserPath == "" {
		t.Skip("no chromium or google-chrome binary on the PATH (Debian: apt-get install -y chromium)")
	}
	own, err := redistest.Start("--databases", "16") // a server of its own, to kill
	if err != nil {
		t.Fatal(err)
	}
	defer own.Stop()
	s := newSiteOn(t, own.URL, nil, nil)
	if _, err := s.client.Enqueue(context.Background(), "emails", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	b := browser(t)
	if err := chromedp.Run(b, chromedp.Navigate(s.url+"/"), chromedp.WaitVisible(`#live.on`, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	own.Kill()
	text, err := liveState(b, "down", 6*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "Redis down") {
		t.Fatalf("live indicator says %q while Redis is down", text)
	}
	if err := own.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := liveState(b, "on", 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestLiveIndicatorFollowsTheStream: when the dashboard's event stream
// breaks (its connections dropped, a proxy answering 502 meanwhile) the
// indicator leaves green, and it comes back by itself once the stream
// answers again (a browser gives up an EventSource after a non-200 answer).
func TestLiveIndicatorFollowsTheStream(t *testing.T) {
	var broken atomic.Bool
	refused := make(chan struct{}, 1) // a value once a stream was answered 502
	s := newSiteOn(t, redisURL, nil, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if broken.Load() && strings.HasSuffix(r.URL.Path, "/events") {
				http.Error(w, "bad gateway", http.StatusBadGateway)
				select {
				case refused <- struct{}{}:
				default:
				}
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	b := browser(t)
	if err := chromedp.Run(b, chromedp.Navigate(s.url+"/"), chromedp.WaitVisible(`#live.on`, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	broken.Store(true)
	s.ts.CloseClientConnections()
	if _, err := liveState(b, "off", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// The browser's own retry of the stream meets the 502, and it gives
	// the stream up.
	select {
	case <-refused:
	case <-time.After(10 * time.Second):
		t.Fatal("the browser did not try the stream again within 10 s")
	}
	broken.Store(false)
	if _, err := liveState(b, "on", 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// seedHistory adds n of outcome to queue's history counters of the minute
// ago minutes back, as the processes' publications do.
func (s *site) seedHistory(queue, outcome string, ago int, n int64) {
	s.t.Helper()
	c := s.pool.Get()
	defer c.Close()
	m := time.Now().Unix()/60 - int64(ago)
	if _, err := c.Do("HINCRBY", rdb.NewKeys(s.cfg.Namespace).History(m), queue+"|"+outcome, n); err != nil {
		s.t.Fatal(err)
	}
}

var reCompact = regexp.MustCompile(`^\d+(\.\d)?[kMG]?$`)

// yAxis returns the chart's y-axis labels, bottom up, and whether every
// one lies whole inside the chart.
func yAxis(ctx context.Context) (labels []string, inside bool, err error) {
	var r struct {
		Labels []string
		Inside bool
	}
	err = chromedp.Run(ctx, chromedp.Evaluate(`(function () {
		var svg = document.getElementById("chart").getBoundingClientRect();
		var ts = Array.from(document.querySelectorAll('#chart text[text-anchor="end"]')).filter(t => t.textContent !== "now");
		ts.sort((a, b) => b.getBoundingClientRect().top - a.getBoundingClientRect().top);
		return {Labels: ts.map(t => t.textContent), Inside: ts.length > 0 && ts.every(function (t) {
			var b = t.getBoundingClientRect();
			return b.left >= svg.left && b.right <= svg.right && b.width > 0;
		})};
	})()`, &r))
	return r.Labels, r.Inside, err
}

// TestChartAxisReadableAtScale: with millions of tasks a minute the
// chart's y-axis says 1M, 2M... whole inside the chart (its labels were
// clipped to "00000"), and with a handful it counts in whole numbers.
func TestChartAxisReadableAtScale(t *testing.T) {
	s := newSite(t, nil)
	if _, err := s.client.Enqueue(context.Background(), "thumbs", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	s.seedHistory("thumbs", "done", 3, 2_345_678)
	s.seedHistory("thumbs", "retried", 3, 12_000)
	s.seedHistory("thumbs", "enqueued", 2, 2_400_000)
	b := browser(t)
	for _, path := range []string{"/", "/queue?name=thumbs"} {
		if err := chromedp.Run(b, chromedp.Navigate(s.url+path), chromedp.WaitVisible(`#chart text`, chromedp.ByQuery)); err != nil {
			t.Fatal(err)
		}
		labels, inside, err := yAxis(b)
		if err != nil {
			t.Fatal(err)
		}
		if !inside {
			t.Errorf("%s: y-axis labels %q do not all lie inside the chart", path, labels)
		}
		if len(labels) < 3 || labels[0] != "0" || !strings.HasSuffix(labels[len(labels)-1], "M") {
			t.Errorf("%s: y-axis labels %q, want 0 up to some M", path, labels)
		}
		for _, l := range labels {
			if !reCompact.MatchString(l) {
				t.Errorf("%s: y-axis label %q is not compact (950, 1.2k, 3.4M)", path, l)
			}
		}
	}
	// A narrow window keeps them inside too.
	if err := chromedp.Run(b, chromedp.EmulateViewport(700, 900), chromedp.Navigate(s.url+"/"),
		chromedp.WaitVisible(`#chart text`, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	if labels, inside, err := yAxis(b); err != nil || !inside {
		t.Errorf("at 700 px: y-axis labels %q inside %v (%v)", labels, inside, err)
	}
	// A handful of tasks: whole numbers, no repeated label.
	s2 := newSite(t, nil)
	if _, err := s2.client.Enqueue(context.Background(), "few", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	s2.seedHistory("few", "done", 1, 7)
	if err := chromedp.Run(b, chromedp.Navigate(s2.url+"/"), chromedp.WaitVisible(`#chart text`, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	labels, _, err := yAxis(b)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, l := range labels {
		if _, err := strconv.Atoi(l); err != nil || seen[l] {
			t.Errorf("with 7 tasks a minute: y-axis labels %q, want distinct whole numbers", labels)
			break
		}
		seen[l] = true
	}
}

// TestOverviewShowsStuckWork: a handler hangs on the head of a key of an
// ordered queue. The overview shows the tasks waiting behind it (Waiting
// counts only heads: 0) in the queue's row and under the waiting total,
// and how long the hung task has been running, growing without a reload;
// a keyed task enqueued by another process joins the count live.
func TestOverviewShowsStuckWork(t *testing.T) {
	s := newSite(t, nil)
	ctx := context.Background()
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	w, err := worqr.NewWorker(s.pool, &worqr.WorkerConfig{Config: s.cfg, Queues: map[string]worqr.QueueConfig{
		"orders": {Concurrency: 1, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
			started <- struct{}{}
			<-release
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
	if _, err := s.client.EnqueueBatch(ctx, "orders", [][]byte{[]byte("1"), []byte("2"), []byte("3")},
		&worqr.EnqueueOpts{Key: "customer-7"}); err != nil {
		t.Fatal(err)
	}
	<-started
	b := browser(t)
	row := `#queues tr[data-queue="orders"] `
	if err := chromedp.Run(b, chromedp.Navigate(s.url+"/"), chromedp.WaitVisible(row+`td[data-k="behind"]`, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	for sel, want := range map[string]string{row + `td[data-k="waiting"]`: "0", row + `td[data-k="behind"]`: "2",
		row + `td[data-k="active"]`: "1", "#t-behind": "2"} {
		if err := textWithin(b, sel, want, 2*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// The running time: a duration, which changes as the live counts come.
	cell := row + `td[data-k="oldest_active"]`
	var first string
	if err := chromedp.Run(b, chromedp.Text(cell, &first, chromedp.ByQuery, chromedp.NodeVisible)); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9.]+(ms|s)$`).MatchString(strings.TrimSpace(first)) {
		t.Fatalf("oldest active %q, want a running time", first)
	}
	if err := until(b, fmt.Sprintf(`document.querySelector(%s).innerText.trim() !== %s`, jsString(cell), jsString(first)), 5*time.Second); err != nil {
		t.Fatalf("oldest active stayed %q: %v", first, err)
	}
	if err := chromedp.Run(b, chromedp.WaitVisible(`#live.on`, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	other, err := worqr.NewClient(s.newPool(), &s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Enqueue(ctx, "orders", []byte("4"), &worqr.EnqueueOpts{Key: "customer-7"}); err != nil {
		t.Fatal(err)
	}
	for _, sel := range []string{row + `td[data-k="behind"]`, "#t-behind"} {
		if err := textWithin(b, sel, "3", 2*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// The queue's own page shows both too.
	var behind, oldest string
	if err := chromedp.Run(b, chromedp.Navigate(s.url+"/queue?name=orders"),
		chromedp.Text("#q-behind", &behind, chromedp.ByQuery, chromedp.NodeVisible),
		chromedp.Text("#q-oldest", &oldest, chromedp.ByQuery, chromedp.NodeVisible)); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(behind) != "3 behind keys" {
		t.Errorf("queue page: %q, want 3 behind keys", behind)
	}
	if !regexp.MustCompile(`^oldest active [0-9.]+(ms|s)$`).MatchString(strings.TrimSpace(oldest)) {
		t.Errorf("queue page: %q, want the oldest active task's running time", oldest)
	}
}
