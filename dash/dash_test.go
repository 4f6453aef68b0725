package dash

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/load"
	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

var srv *redistest.Server

func TestMain(m *testing.M) {
	redistest.Main(m, &srv)
}

// env is one namespace with a client, an inspector and a dashboard server.
type env struct {
	t      *testing.T
	cfg    worqr.Config
	client *worqr.Client
	in     *worqr.Inspector
	d      *Dashboard
	ts     *httptest.Server
	http   *http.Client
}

func newEnv(t *testing.T, opts *Options) *env {
	t.Helper()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	e := &env{t: t, cfg: worqr.Config{Namespace: redistest.Namespace(), EventInterval: 50 * time.Millisecond}}
	var err error
	if e.client, err = worqr.NewClient(pool, &e.cfg); err != nil {
		t.Fatal(err)
	}
	if e.in, err = worqr.NewInspector(pool, &e.cfg); err != nil {
		t.Fatal(err)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Client == nil {
		o.Client = e.client
	}
	e.d = New(e.in, &o)
	e.start()
	return e
}

func (e *env) start() {
	e.ts = httptest.NewServer(e.d)
	e.t.Cleanup(func() { e.d.Close(); e.ts.Close() })
	jar, _ := cookiejar.New(nil)
	e.http = &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (e *env) get(path string) (int, string) {
	e.t.Helper()
	resp, err := e.http.Get(e.ts.URL + path)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (e *env) post(path string, form url.Values) (*http.Response, string) {
	e.t.Helper()
	resp, err := e.http.PostForm(e.ts.URL+path, form)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

var reCSRF = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// token reads the CSRF token from a page holding a form.
func (e *env) token(path string) string {
	e.t.Helper()
	_, body := e.get(path)
	m := reCSRF.FindStringSubmatch(body)
	if m == nil {
		e.t.Fatalf("no csrf token in %s", path)
	}
	return m[1]
}

// kill makes n dead tasks of queue with a worker that refuses them.
func (e *env) kill(queue string, n int, msg string) {
	e.t.Helper()
	ctx := context.Background()
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = []byte(fmt.Sprintf(`{"n":%d}`, i))
	}
	if _, err := e.client.EnqueueBatch(ctx, queue, payloads, nil); err != nil {
		e.t.Fatal(err)
	}
	died := make(chan struct{}, n)
	w, err := worqr.NewWorker(srv.Pool(), &worqr.WorkerConfig{Config: e.cfg, Queues: map[string]worqr.QueueConfig{
		queue: {Concurrency: 4, Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			return worqr.SkipRetry(errors.New(msg))
		})},
	}, OnEvent: func(ev worqr.Event) {
		if ev.Kind == worqr.EventDead {
			died <- struct{}{}
		}
	}})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		e.t.Fatal(err)
	}
	timeout := time.After(5 * time.Second)
	for i := 0; i < n; i++ {
		select {
		case <-died:
		case <-timeout:
			e.t.Fatalf("%d of %d tasks died within 5s", i, n)
		}
	}
	if q, err := e.in.Queue(ctx, queue); err != nil || q.Dead != int64(n) {
		e.t.Fatalf("after %d dead events: %s has %d dead, %v; want %d", n, queue, q.Dead, err, n)
	}
	if err := w.Stop(ctx); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) deadID(queue string) string {
	e.t.Helper()
	ts, _, err := e.in.Tasks(context.Background(), queue, worqr.StateDead, 0, 1)
	if err != nil || len(ts) == 0 {
		e.t.Fatalf("no dead task in %s: %v", queue, err)
	}
	return ts[0].ID
}

func TestPayloadAndErrorAreEscaped(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	const evil = `<script>alert("x")</script>`
	id, err := e.client.Enqueue(ctx, "mail", []byte(evil), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/task?id=" + id, "/queue?name=mail", "/"} {
		code, body := e.get(path)
		if code != http.StatusOK {
			t.Fatalf("%s: %d\n%s", path, code, body)
		}
		if strings.Contains(body, "<script>alert") {
			t.Fatalf("%s renders the payload unescaped", path)
		}
	}
	_, body := e.get("/task?id=" + id)
	if !strings.Contains(body, `&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;`) {
		t.Fatalf("task page does not show the payload as text:\n%s", body)
	}
	e.kill("jobs", 1, "<img src=x onerror=alert(1)>")
	for _, path := range []string{"/dead", "/queue?name=jobs&state=dead", "/task?id=" + e.deadID("jobs"),
		"/queue?name=" + url.QueryEscape("evil<b>q"), "/task?id=" + url.QueryEscape("<i>x")} {
		_, body := e.get(path)
		if strings.Contains(body, "<img src=x") || strings.Contains(body, "<b>q") || strings.Contains(body, "<i>x") {
			t.Fatalf("%s renders an error, queue name or id unescaped", path)
		}
	}
}

func TestActionsNeedCSRFToken(t *testing.T) {
	e := newEnv(t, nil)
	e.kill("jobs", 3, "boom")
	waiting, err := e.client.Enqueue(context.Background(), "jobs", []byte("w"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, form := range map[string]url.Values{
		"no token":          {"op": {"retry_dead"}, "queue": {"jobs"}},
		"wrong token":       {"op": {"retry_dead"}, "queue": {"jobs"}, "csrf": {"AAAA"}},
		"cancel, no token":  {"op": {"cancel_task"}, "queue": {"jobs"}, "id": {waiting}},
		"cancel, bad token": {"op": {"cancel_task"}, "queue": {"jobs"}, "id": {waiting}, "csrf": {"AAAA"}},
	} {
		e.get("/") // the cookie alone is not enough
		resp, _ := e.post("/action", form)
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("%s: status %d, want 403", name, resp.StatusCode)
		}
	}
	if ti, err := e.in.Task(context.Background(), "jobs", waiting); err != nil || ti.State != worqr.StateQueued {
		t.Fatalf("a refused cancel changed the task: %+v %v", ti, err)
	}
	// A token without its cookie (another browser's) is refused too.
	tok := e.token("/queue?name=jobs")
	other, _ := cookiejar.New(nil)
	c := &http.Client{Jar: other}
	resp, err := c.PostForm(e.ts.URL+"/action", url.Values{"op": {"retry_dead"}, "queue": {"jobs"}, "csrf": {tok}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("token without cookie: status %d, want 403", resp.StatusCode)
	}
	// GET never acts.
	e.get("/action?op=retry_dead&queue=jobs")
	q, _ := e.in.Queue(context.Background(), "jobs")
	if q.Dead != 3 {
		t.Fatalf("dead = %d after refused actions, want 3", q.Dead)
	}
}

func TestBulkRetryRequeuesDead(t *testing.T) {
	e := newEnv(t, nil)
	e.kill("jobs", 5, "boom 17")
	tok := e.token("/queue?name=jobs&state=dead")
	resp, _ := e.post("/action", url.Values{"op": {"retry_dead"}, "queue": {"jobs"}, "csrf": {tok}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("status %d, want 303", resp.StatusCode)
	}
	q, err := e.in.Queue(context.Background(), "jobs")
	if err != nil {
		t.Fatal(err)
	}
	if q.Dead != 0 || q.Waiting != 5 {
		t.Fatalf("after retry all: dead=%d waiting=%d, want 0 and 5", q.Dead, q.Waiting)
	}
	_, body := e.get(resp.Header.Get("Location"))
	if !strings.Contains(body, "Requeued 5 dead tasks of jobs") {
		t.Fatal("no confirmation message")
	}
	// A crafted link cannot put words in the banner: only messages the
	// server signed are shown.
	_, body = e.get("/queue?name=jobs&msg=" + url.QueryEscape("Your session expired: call +1 555 0100"))
	if strings.Contains(body, "session expired") {
		t.Fatal("an unsigned message from the URL was shown")
	}
}

func TestReadOnlyRefusesActions(t *testing.T) {
	e := newEnv(t, &Options{ReadOnly: true})
	e.kill("jobs", 2, "boom")
	_, body := e.get("/queue?name=jobs&state=dead")
	if strings.Contains(body, `action="/action"`) || strings.Contains(body, "Retry all") {
		t.Fatal("read-only page shows actions")
	}
	if !strings.Contains(body, "read-only") {
		t.Fatal("read-only page does not say so")
	}
	// Even with a valid token (from a read-write dashboard with the same secret).
	e.http.Jar.SetCookies(mustURL(e.ts.URL), []*http.Cookie{{Name: csrfCookie, Value: strings.Repeat("a", 43)}})
	waiting, err := e.client.Enqueue(context.Background(), "jobs", []byte("w"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, body := e.get("/task?id=" + waiting); strings.Contains(body, `data-op="cancel_task"`) {
		t.Fatal("read-only task page shows Cancel")
	}
	for _, op := range []string{"retry_dead", "delete_dead", "delete_waiting", "pause", "cancel_task"} {
		resp, _ := e.post("/action", url.Values{"op": {op}, "queue": {"jobs"}, "id": {waiting}, "csrf": {e.d.sign(strings.Repeat("a", 43))}})
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("%s: status %d, want 403", op, resp.StatusCode)
		}
	}
	q, _ := e.in.Queue(context.Background(), "jobs")
	if q.Dead != 2 || q.Paused || q.Waiting != 1 {
		t.Fatalf("read-only dashboard changed the queue: %+v", q)
	}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

func TestPrefixLinks(t *testing.T) {
	e := newEnv(t, &Options{Prefix: "/ops/worqr/"})
	if _, err := e.client.Enqueue(context.Background(), "mail", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/ops/worqr/", "/"} { // with the prefix, and as behind http.StripPrefix
		code, body := e.get(path)
		if code != 200 || !strings.Contains(body, `href="/ops/worqr/queue?name=mail"`) ||
			!strings.Contains(body, `src="/ops/worqr/assets/app.js"`) {
			t.Fatalf("%s: %d, links without the prefix:\n%s", path, code, body)
		}
	}
	code, _ := e.get("/ops/worqr/assets/app.css")
	if code != 200 {
		t.Fatalf("assets under prefix: %d", code)
	}
}

func TestRedisErrorsDoNotLeakTheURL(t *testing.T) {
	pool, err := redisconn.NewPool("redis://admin:hunter2secret@127.0.0.1:1/0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	in, err := worqr.NewInspector(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := New(in, &Options{Logger: discardLogger()})
	defer d.Close()
	for _, path := range []string{"/", "/queue?name=x", "/workers", "/dead"} {
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != http.StatusBadGateway {
			t.Fatalf("%s: %d, want 502", path, rec.Code)
		}
		if b := rec.Body.String(); strings.Contains(b, "hunter2") || strings.Contains(b, "127.0.0.1:1") {
			t.Fatalf("%s echoes the Redis address or password", path)
		}
	}
}

// sse reads one server-sent event stream.
type sse struct {
	resp *http.Response
	r    *bufio.Reader
}

func openSSE(t *testing.T, base string) *sse {
	t.Helper()
	resp, err := http.Get(base + "/events")
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("events: %d %s", resp.StatusCode, ct)
	}
	s := &sse{resp: resp, r: bufio.NewReader(resp.Body)}
	t.Cleanup(func() { resp.Body.Close() })
	return s
}

// next returns the next event's name and data.
func (s *sse) next() (string, string, error) {
	var ev, data string
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return "", "", err
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "" && ev != "":
			return ev, data, nil
		case strings.HasPrefix(line, "event: "):
			ev = line[7:]
		case strings.HasPrefix(line, "data: "):
			data = line[6:]
		}
	}
}

func TestSSEDeliversQueueUpdate(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if _, err := e.client.Enqueue(ctx, "mail", []byte("a"), nil); err != nil {
		t.Fatal(err)
	}
	s := openSSE(t, e.ts.URL)
	waitWaiting := func(want int64) {
		t.Helper()
		got := make(chan error, 1)
		go func() {
			for {
				ev, data, err := s.next()
				if err != nil {
					got <- err
					return
				}
				if ev != "queues" {
					continue
				}
				var qs []queueJSON
				if err := json.Unmarshal([]byte(data), &qs); err != nil {
					got <- err
					return
				}
				for _, q := range qs {
					if q.Name == "mail" && q.Waiting == want {
						got <- nil
						return
					}
				}
			}
		}()
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("no queues event with mail waiting=%d within 3s", want)
		}
	}
	waitWaiting(1)
	if _, err := e.client.Enqueue(ctx, "mail", []byte("b"), nil); err != nil {
		t.Fatal(err)
	}
	waitWaiting(2)
}

// TestBroadcasterPollsOncePerTick connects many SSE clients and drives the
// broadcaster's ticker by hand: Inspector.Queues is called once per tick
// (plus the first poll), not once per client, and not at all once every
// client is gone.
func TestBroadcasterPollsOncePerTick(t *testing.T) {
	pool := srv.Pool()
	defer pool.Close()
	cfg := worqr.Config{Namespace: redistest.Namespace()}
	in, err := worqr.NewInspector(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	polled := make(chan struct{}, 100)
	counted := func(ctx context.Context) ([]worqr.QueueInfo, error) {
		calls.Add(1)
		defer func() { polled <- struct{}{} }()
		return in.Queues(ctx)
	}
	tick := make(chan time.Time)
	var mu sync.Mutex
	tickers := 0
	stopped := make(chan struct{}) // closed when the loop stops its ticker
	manual := func(time.Duration) (<-chan time.Time, func()) {
		mu.Lock()
		tickers++
		mu.Unlock()
		return tick, func() { close(stopped) }
	}
	d := newDashboard(in, nil, counted, manual)
	defer d.Close()
	ts := httptest.NewServer(d)
	defer ts.Close()

	const clients, ticks = 8, 5
	streams := make([]*sse, clients)
	for i := range streams {
		streams[i] = openSSE(t, ts.URL)
	}
	<-polled // the first subscriber's poll
	for i := 0; i < ticks; i++ {
		tick <- time.Now()
		<-polled
	}
	if got := calls.Load(); got != ticks+1 {
		t.Fatalf("%d clients, %d ticks: Queues called %d times, want %d", clients, ticks, got, ticks+1)
	}
	// Every client got the snapshots.
	for i, s := range streams {
		ev, _, err := s.next()
		if err != nil || ev != "queues" {
			t.Fatalf("client %d: %q %v", i, ev, err)
		}
	}
	mu.Lock()
	if tickers != 1 {
		t.Fatalf("%d poll loops started, want 1", tickers)
	}
	mu.Unlock()
	for _, s := range streams {
		s.resp.Body.Close()
	}
	// Once nobody listens the loop stops (its last act stops the ticker):
	// a tick is no longer received.
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		t.Fatal("the poll loop still runs with no client connected")
	}
	select {
	case tick <- time.Now():
		t.Fatal("a tick was received after the poll loop stopped its ticker")
	default:
	}
}

var reChart = regexp.MustCompile(`data-chart="([^"]*)"`)

// chartSums reads the chart of a page (the overview when path is "/")
// and sums its hour.
func (e *env) chartSums(ts *httptest.Server, path string) (enq, done, failed int64, minutes int) {
	e.t.Helper()
	resp, err := e.http.Get(ts.URL + path)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := reChart.FindSubmatch(body)
	if m == nil {
		e.t.Fatal("no chart on the overview")
	}
	var bs []bucket
	if err := json.Unmarshal([]byte(html.UnescapeString(string(m[1]))), &bs); err != nil {
		e.t.Fatal(err)
	}
	for _, b := range bs {
		enq, done, failed = enq+b.Enqueued, done+b.Done, failed+b.Failed
	}
	return enq, done, failed, len(bs)
}

// TestChartReadsHistory: the chart is the namespace's history in Redis,
// not what one dashboard saw: a dashboard started after the work (on an
// inspector that publishes nothing) shows it at load, and its live stream
// sends the current minutes.
func TestChartReadsHistory(t *testing.T) {
	e := newEnv(t, nil)
	began := time.Now().Unix() / 60
	e.kill("jobs", 3, "boom")
	// Wait for the workers' and the client's publications to land (they
	// are written to the history in the background).
	redistest.WaitFor(t, 5*time.Second, "history on the first dashboard", func() bool {
		enq, _, failed, _ := e.chartSums(e.ts, "/")
		return enq == 3 && failed == 3
	})
	e.d.Close()

	in, err := worqr.NewInspector(srv.Pool(), &worqr.Config{Namespace: e.cfg.Namespace, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	d2 := New(in, nil)
	defer d2.Close()
	ts2 := httptest.NewServer(d2)
	defer ts2.Close()
	for _, path := range []string{"/", "/queue?name=jobs"} {
		enq, done, failed, minutes := e.chartSums(ts2, path)
		if enq != 3 || done != 0 || failed != 3 || minutes != chartMinutes {
			t.Fatalf("a new dashboard's chart of %s: enqueued %d, done %d, failed %d over %d minutes; want 3, 0, 3 over %d",
				path, enq, done, failed, minutes, chartMinutes)
		}
	}
	// A queue known (an empty load names it) with no work.
	if _, err := load.Run(context.Background(), e.client, "other", strings.NewReader(""), &load.Options{Name: "none"}); err != nil {
		t.Fatal(err)
	}
	if enq, _, failed, _ := e.chartSums(ts2, "/queue?name=other"); enq != 0 || failed != 0 {
		t.Errorf("the chart of a queue with no work shows %d enqueued, %d failed", enq, failed)
	}
	s := openSSE(t, ts2.URL)
	defer s.resp.Body.Close()
	var live int64
	for i := 0; i < 10; i++ { // the first broadcast: queues, then 2 minutes
		ev, data, err := s.next()
		if err != nil {
			t.Fatal(err)
		}
		if ev != "minute" {
			continue
		}
		var b bucket
		if err := json.Unmarshal([]byte(data), &b); err != nil {
			t.Fatal(err)
		}
		live += b.Failed
		if b.Minute == time.Now().Unix()/60 {
			break
		}
	}
	if live != 3 && time.Now().Unix()/60-began <= 1 { // else the work is older than the 2 live minutes
		t.Errorf("the live minutes counted %d failed, want 3", live)
	}
}

func TestPagesRender(t *testing.T) {
	e := newEnv(t, nil)
	e.kill("jobs", 2, "timeout after 30s")
	for _, path := range []string{"/", "/queue?name=jobs&state=dead", "/dead", "/workers", "/flows", "/assets/app.js"} {
		code, body := e.get(path)
		if code != 200 {
			t.Fatalf("%s: %d\n%s", path, code, body)
		}
	}
	_, body := e.get("/dead")
	if !strings.Contains(body, "timeout after &lt;n&gt;s") {
		t.Fatalf("dead page does not group by normalised error:\n%s", body)
	}
	if code, _ := e.get("/nope"); code != 404 {
		t.Fatalf("unknown page: %d", code)
	}
}

func TestBasicAuth(t *testing.T) {
	h := BasicAuth("ops", "pw", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "in") }))
	for _, c := range []struct {
		user, pass string
		set        bool
		want       int
	}{{"ops", "pw", true, 200}, {"ops", "nope", true, 401}, {"x", "pw", true, 401}, {"", "", false, 401}} {
		r := httptest.NewRequest("GET", "/", nil)
		if c.set {
			r.SetBasicAuth(c.user, c.pass)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != c.want {
			t.Fatalf("%+v: %d", c, rec.Code)
		}
	}
}

// docs/guide/dashboard.md mounts the dashboard behind BasicAuth("ops",
// os.Getenv("DASH_PASSWORD"), d): with the variable unset, the password is
// empty, and a request with the user and an empty password must not get in.
func TestBasicAuthWithAnEmptyPasswordRefusesEveryone(t *testing.T) {
	in := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "in") })
	for _, c := range []struct{ user, pass, sentUser, sentPass string }{
		{"ops", "", "ops", ""}, {"", "", "", ""}, {"", "pw", "", "pw"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.SetBasicAuth(c.sentUser, c.sentPass)
		rec := httptest.NewRecorder()
		BasicAuth(c.user, c.pass, in).ServeHTTP(rec, r)
		if rec.Code != http.StatusUnauthorized {
			t.Errorf("BasicAuth(%q, %q) let in %q:%q (status %d), want 401", c.user, c.pass, c.sentUser, c.sentPass, rec.Code)
		}
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A queue the namespace does not know has no page, and no action acts on
// it: a typo would act on nothing, and a pause would create its settings.
func TestUnknownQueueIsNotFound(t *testing.T) {
	e := newEnv(t, nil)
	e.kill("jobs", 1, "boom")
	if code, body := e.get("/queue?name=nosuch"); code != http.StatusNotFound || !strings.Contains(body, "No queue named") {
		t.Fatalf("page of an unknown queue: status %d, want 404 and a message", code)
	}
	tok := e.token("/queue?name=jobs")
	for _, op := range []string{"pause", "retry_dead", "delete_waiting"} {
		resp, _ := e.post("/action", url.Values{"op": {op}, "queue": {"nosuch"}, "csrf": {tok}})
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("%s of an unknown queue: status %d, want 404", op, resp.StatusCode)
		}
	}
	c := srv.Pool().Get()
	defer c.Close()
	if keys, _ := redis.Strings(c.Do("KEYS", e.cfg.Namespace+":{nosuch}:*")); len(keys) != 0 {
		t.Fatalf("actions on an unknown queue wrote %v", keys)
	}
	if resp, _ := e.post("/action", url.Values{"op": {"pause"}, "queue": {"jobs"}, "csrf": {tok}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("pause of a known queue: status %d, want 303", resp.StatusCode)
	}
}

// An ordered queue's page says how many keys have tasks, and its "Delete
// all waiting" deletes the tasks behind the keys' heads too.
func TestOrderedQueueDeleteAllWaiting(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	for _, key := range []string{"order-1", "order-2"} {
		if _, err := e.client.EnqueueBatch(ctx, "orders", [][]byte{[]byte("a"), []byte("b"), []byte("c")}, &worqr.EnqueueOpts{Key: key}); err != nil {
			t.Fatal(err)
		}
	}
	if _, body := e.get("/queue?name=orders"); !strings.Contains(body, "2 keys with tasks") {
		t.Fatal("the queue page does not say how many keys have tasks")
	}
	tok := e.token("/queue?name=orders")
	resp, _ := e.post("/action", url.Values{"op": {"delete_waiting"}, "queue": {"orders"}, "csrf": {tok}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("status %d, want 303", resp.StatusCode)
	}
	if _, body := e.get(resp.Header.Get("Location")); !strings.Contains(body, "Deleted 6") {
		t.Fatalf("no message of 6 deleted in:\n%s", body)
	}
	if q, err := e.in.Queue(ctx, "orders"); err != nil || q.Waiting != 0 || q.Keys != 0 {
		t.Fatalf("after delete all waiting: %+v, %v; want nothing left", q, err)
	}
}

// A running run's page has a Cancel run action (the flow's name is enough:
// the dashboard holds no definition); it ends the run as cancelled.
func TestCancelRunFromItsPage(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	flow := &worqr.Flow{Name: "signup", Retention: time.Minute, Stages: []worqr.Stage{{Name: "only", Queue: worqr.QueueConfig{Concurrency: 1},
		Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return &worqr.StageResult{}, nil })}}}
	id, err := e.client.StartRun(ctx, flow, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	page := "/run?flow=signup&id=" + id
	if _, body := e.get(page); !strings.Contains(body, "Cancel run") {
		t.Fatal("a running run's page has no Cancel run action")
	}
	tok := e.token(page)
	resp, _ := e.post("/action", url.Values{"op": {"cancel_run"}, "queue": {"signup/only"}, "id": {id}, "csrf": {tok}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("status %d, want 303", resp.StatusCode)
	}
	_, body := e.get(resp.Header.Get("Location"))
	if !strings.Contains(body, "Cancelled run "+id) || strings.Contains(body, ">Cancel run<") {
		t.Fatalf("after the cancel, the run's page:\n%s", body)
	}
	if r, err := e.in.Run(ctx, "signup", id); err != nil || r.Status != worqr.RunCancelled {
		t.Fatalf("run after the cancel: %+v, %v", r, err)
	}
}

// A failed run's page has a Retry run action (the flow's name is enough);
// it runs the run again from the stage it failed in.
func TestRetryRunFromItsPage(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	var fail atomic.Bool
	fail.Store(true)
	flow := &worqr.Flow{Name: "signup", Retention: time.Minute, Stages: []worqr.Stage{{Name: "only",
		Queue: worqr.QueueConfig{Concurrency: 1, MaxAttempts: 1},
		Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
			if fail.Load() {
				return nil, errors.New("down")
			}
			return &worqr.StageResult{}, nil
		})}}}
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: e.cfg, Flows: []*worqr.Flow{flow}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) }) //nolint:errcheck
	id, err := e.client.StartRun(ctx, flow, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if r, err := e.client.WaitRun(wctx, flow, id); err != nil || r.Status != worqr.RunFailed {
		t.Fatalf("run = %+v, %v; want failed", r, err)
	}
	page := "/run?flow=signup&id=" + id
	if _, body := e.get(page); !strings.Contains(body, ">Retry run<") || strings.Contains(body, ">Cancel run<") {
		t.Fatalf("a failed run's page has no Retry run action (or a Cancel run one):\n%s", body)
	}
	fail.Store(false)
	tok := e.token(page)
	resp, _ := e.post("/action", url.Values{"op": {"retry_run"}, "queue": {"signup/only"}, "id": {id}, "csrf": {tok}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("status %d, want 303", resp.StatusCode)
	}
	if _, body := e.get(resp.Header.Get("Location")); !strings.Contains(body, "Retried run "+id) {
		t.Fatalf("after the retry, the run's page:\n%s", body)
	}
	if r, err := e.client.WaitRun(wctx, flow, id); err != nil || r.Status != worqr.RunDone {
		t.Fatalf("retried run = %+v, %v; want done", r, err)
	}
}

// A scheduled task's page has a Run now action: the task moves to its
// queue at once.
func TestRunNowFromItsPage(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	id, err := e.client.Enqueue(ctx, "later", []byte("x"), &worqr.EnqueueOpts{Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	page := "/task?id=" + id
	if _, body := e.get(page); !strings.Contains(body, ">Run now<") {
		t.Fatalf("a scheduled task's page has no Run now action:\n%s", body)
	}
	tok := e.token(page)
	resp, _ := e.post("/action", url.Values{"op": {"run_now"}, "queue": {"later"}, "id": {id}, "csrf": {tok}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("status %d, want 303", resp.StatusCode)
	}
	if _, body := e.get(resp.Header.Get("Location")); !strings.Contains(body, "Moved "+id) || strings.Contains(body, ">Run now<") {
		t.Fatalf("after Run now, the task's page:\n%s", body)
	}
	if ti, err := e.in.Task(ctx, "later", id); err != nil || ti.State != worqr.StateQueued {
		t.Fatalf("the task after Run now: %+v, %v; want queued", ti, err)
	}
}

// TestJSONPayloadShownAsItIs: the task page pretty-prints a JSON payload,
// but did so by decoding it into Go values and encoding them again: an
// integer beyond 2^53 was shown rounded (9007199254740993 as
// 9007199254740992), keys were sorted, and < > & became \u003c \u003e
// \u0026.
func TestJSONPayloadShownAsItIs(t *testing.T) {
	e := newEnv(t, nil)
	id, err := e.client.Enqueue(context.Background(), "mail", []byte(`{"z":9007199254740993,"a":"<b>&"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	code, body := e.get("/task?id=" + id)
	if code != http.StatusOK {
		t.Fatalf("task page: %d", code)
	}
	m := regexp.MustCompile(`(?s)<pre class="code" id="payload">(.*?)</pre>`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no payload on the task page:\n%s", body)
	}
	got := html.UnescapeString(m[1])
	want := "{\n  \"z\": 9007199254740993,\n  \"a\": \"<b>&\"\n}"
	if got != want {
		t.Fatalf("payload shown as\n%s\nwant\n%s", got, want)
	}
}

// A task page shows a Last error box only for a task with an error, and
// a Cancel action only for a task that waits, is scheduled or runs, on a
// dashboard given a Client; without one, a cancel is refused.
func TestTaskPageErrorBoxAndCancel(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	waiting, err := e.client.Enqueue(ctx, "jobs", []byte("w"), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, body := e.get("/task?id=" + waiting)
	if strings.Contains(body, "last-error") || strings.Contains(body, "Last error") {
		t.Fatal("the page of a task without an error shows a Last error box")
	}
	if !strings.Contains(body, `data-op="cancel_task"`) {
		t.Fatal("the page of a waiting task has no Cancel")
	}
	e.kill("dead", 1, "boom <b>")
	_, body = e.get("/task?id=" + e.deadID("dead"))
	if !strings.Contains(body, `id="last-error">boom &lt;b&gt;`) {
		t.Fatalf("the page of a dead task does not show its error:\n%s", body)
	}
	if strings.Contains(body, `data-op="cancel_task"`) {
		t.Fatal("the page of a dead task offers Cancel")
	}

	plain := New(e.in, nil) // no Client
	defer plain.Close()
	ts := httptest.NewServer(plain)
	defer ts.Close()
	e2 := &env{t: t, cfg: e.cfg, client: e.client, in: e.in, d: plain, ts: ts, http: e.http}
	if _, body := e2.get("/task?id=" + waiting); strings.Contains(body, `data-op="cancel_task"`) {
		t.Fatal("a dashboard without a Client offers Cancel")
	}
	tok := e2.token("/queue?name=jobs")
	if resp, _ := e2.post("/action", url.Values{"op": {"cancel_task"}, "queue": {"jobs"}, "id": {waiting}, "csrf": {tok}}); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("cancel without a Client: status %d, want 400", resp.StatusCode)
	}
	tok = e.token("/task?id=" + waiting)
	resp, _ := e.post("/action", url.Values{"op": {"cancel_task"}, "queue": {"jobs"}, "id": {waiting}, "csrf": {tok}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("cancel: status %d, want 303", resp.StatusCode)
	}
	if _, body := e.get(resp.Header.Get("Location")); !strings.Contains(body, "Cancelled "+waiting) {
		t.Fatal("no confirmation of the cancel")
	}
	if q, _ := e.in.Queue(ctx, "jobs"); q.Waiting != 0 {
		t.Fatalf("after cancel: %d waiting, want 0", q.Waiting)
	}
}

// registerSchedule registers an Every schedule named name in e's namespace
// (without firing it).
func (e *env) registerSchedule(name string) {
	e.t.Helper()
	sc, err := worqr.NewScheduler(srv.Pool(), &worqr.SchedulerConfig{Config: e.cfg})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := sc.Register(context.Background(), worqr.Schedule{Name: name, Queue: "pings", Every: time.Hour}); err != nil {
		e.t.Fatal(err)
	}
}

// The schedules page shows the options each schedule's ticks enqueue
// their tasks with, "none" for a schedule without.
func TestSchedulesPageShowsTickOptions(t *testing.T) {
	e := newEnv(t, nil)
	e.registerSchedule("plain")
	sc, err := worqr.NewScheduler(srv.Pool(), &worqr.SchedulerConfig{Config: e.cfg})
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Register(context.Background(), worqr.Schedule{Name: "report", Queue: "reports", Every: time.Hour,
		StartWithin: time.Minute, Opts: &worqr.EnqueueOpts{Type: "report", Priority: 2, Timeout: -1,
			Meta: map[string]string{"team": "<ops>"}}}); err != nil {
		t.Fatal(err)
	}
	_, body := e.get("/schedules")
	for _, want := range []string{
		`<td data-k="opts" class="sub">type report · priority 2 · no timeout · meta team=&lt;ops&gt; · starts within 1m0s</td>`,
		`<td data-k="opts" class="sub">none</td>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the schedules page lacks %s", want)
		}
	}
}

// The schedules' pause and resume need the CSRF token and are refused by a
// read-only dashboard; an unknown schedule is said so.
func TestScheduleActions(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	e.registerSchedule("hourly")
	if code, body := e.get("/schedules"); code != 200 || !strings.Contains(body, "every 1h0m0s") || !strings.Contains(body, `data-op="pause_schedule"`) {
		t.Fatalf("schedules page: %d\n%s", code, body)
	}
	e.get("/")
	for _, form := range []url.Values{
		{"op": {"pause_schedule"}, "id": {"hourly"}},
		{"op": {"pause_schedule"}, "id": {"hourly"}, "csrf": {"AAAA"}},
	} {
		if resp, _ := e.post("/action", form); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("pause without a valid token: status %d, want 403", resp.StatusCode)
		}
	}
	if sc, _ := e.in.Schedule(ctx, "hourly"); sc.Paused {
		t.Fatal("a refused pause paused the schedule")
	}
	tok := e.token("/schedules")
	resp, _ := e.post("/action", url.Values{"op": {"pause_schedule"}, "id": {"hourly"}, "csrf": {tok}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("pause: status %d", resp.StatusCode)
	}
	if sc, _ := e.in.Schedule(ctx, "hourly"); !sc.Paused {
		t.Fatal("pause did not pause")
	}
	resp, _ = e.post("/action", url.Values{"op": {"resume_schedule"}, "id": {"nosuch"}, "csrf": {tok}})
	if _, body := e.get(resp.Header.Get("Location")); !strings.Contains(body, "No schedule named nosuch") {
		t.Fatal("resuming an unknown schedule does not say so")
	}

	ro := newEnv(t, &Options{ReadOnly: true})
	ro.registerSchedule("daily")
	if _, body := ro.get("/schedules"); strings.Contains(body, `data-op=`) {
		t.Fatal("a read-only schedules page shows actions")
	}
	ro.http.Jar.SetCookies(mustURL(ro.ts.URL), []*http.Cookie{{Name: csrfCookie, Value: strings.Repeat("a", 43)}})
	for _, op := range []string{"pause_schedule", "resume_schedule"} {
		resp, _ := ro.post("/action", url.Values{"op": {op}, "id": {"daily"}, "csrf": {ro.d.sign(strings.Repeat("a", 43))}})
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("read-only %s: status %d, want 403", op, resp.StatusCode)
		}
	}
	if sc, _ := ro.in.Schedule(ctx, "daily"); sc.Paused {
		t.Fatal("a read-only dashboard paused a schedule")
	}
}

// The keys page escapes key names, shows no action when read-only, and an
// action's return page is one of the dashboard's own, never another site.
func TestKeysPageEscapesAndReturns(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if _, err := e.client.EnqueueBatch(ctx, "orders", [][]byte{[]byte("a"), []byte("b")}, &worqr.EnqueueOpts{Key: `<b>k</b>`}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/keys", "/keys?queue=orders", "/keys?queue=orders&key=" + url.QueryEscape(`<b>k</b>`)} {
		code, body := e.get(path)
		if code != 200 || strings.Contains(body, "<b>k") || !strings.Contains(body, "&lt;b&gt;k") {
			t.Fatalf("%s: %d, key unescaped or missing:\n%s", path, code, body)
		}
	}
	if code, _ := e.get("/keys?queue=nosuch"); code != http.StatusNotFound {
		t.Fatalf("keys of an unknown queue: %d, want 404", code)
	}
	tok := e.token("/queue?name=orders")
	for back, want := range map[string]string{
		"/keys?queue=orders":     "/keys?queue=orders",
		"//evil.example/x":       "/queue?name=orders",
		"/\\evil.example":        "/queue?name=orders",
		"https://evil.example/x": "/queue?name=orders",
	} {
		resp, _ := e.post("/action", url.Values{"op": {"pause"}, "queue": {"orders"}, "csrf": {tok}, "back": {back}})
		if loc := resp.Header.Get("Location"); !strings.HasPrefix(loc, want) {
			t.Errorf("back %q: redirected to %q, want %s", back, loc, want)
		}
	}
	ro := newEnv(t, &Options{ReadOnly: true})
	if _, err := ro.client.EnqueueBatch(ctx, "orders", [][]byte{[]byte("a")}, &worqr.EnqueueOpts{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	if _, body := ro.get("/keys?queue=orders"); strings.Contains(body, "data-op=") {
		t.Fatal("a read-only keys page shows actions")
	}
}

// The bulk actions (on a selection, on a filter's matches, cancel all)
// need the CSRF token, are refused read-only, check the state they act on,
// and the filter's values are escaped where the page shows them.
func TestBulkActionsGuarded(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	e.kill("jobs", 3, "boom 1")
	dead := e.deadID("jobs")
	bulk := []url.Values{
		{"op": {"retry_selected"}, "queue": {"jobs"}, "state": {"dead"}, "ids": {dead}},
		{"op": {"delete_selected"}, "queue": {"jobs"}, "state": {"dead"}, "ids": {dead}},
		{"op": {"retry_matching"}, "queue": {"jobs"}, "state": {"dead"}, "group": {"boom <n>"}},
		{"op": {"delete_matching"}, "queue": {"jobs"}, "state": {"dead"}},
		{"op": {"cancel_selected"}, "queue": {"jobs"}, "state": {"queued"}, "ids": {dead}},
		{"op": {"run_now_selected"}, "queue": {"jobs"}, "state": {"scheduled"}, "ids": {dead}},
		{"op": {"cancel_matching"}, "queue": {"jobs"}, "state": {"queued"}},
		{"op": {"cancel_all"}, "queue": {"jobs"}},
	}
	e.get("/")
	for _, form := range bulk {
		for _, tok := range []string{"", "AAAA"} {
			f := url.Values{}
			for k, v := range form {
				f[k] = v
			}
			if tok != "" {
				f.Set("csrf", tok)
			}
			if resp, _ := e.post("/action", f); resp.StatusCode != http.StatusForbidden {
				t.Fatalf("%s with token %q: status %d, want 403", form.Get("op"), tok, resp.StatusCode)
			}
		}
	}
	if q, _ := e.in.Queue(ctx, "jobs"); q.Dead != 3 {
		t.Fatalf("refused bulk actions changed the queue: %+v", q)
	}
	tok := e.token("/queue?name=jobs&state=dead")
	for op, state := range map[string]string{"retry_matching": "queued", "delete_matching": "active", "cancel_matching": "dead"} {
		resp, _ := e.post("/action", url.Values{"op": {op}, "queue": {"jobs"}, "state": {state}, "csrf": {tok}})
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s of %s tasks: status %d, want 400", op, state, resp.StatusCode)
		}
	}
	resp, _ := e.post("/action", url.Values{"op": {"retry_selected"}, "queue": {"jobs"}, "state": {"dead"}, "csrf": {tok}})
	if _, body := e.get(resp.Header.Get("Location")); !strings.Contains(body, "No task selected") {
		t.Error("an empty selection is not said so")
	}
	// A filter's words come back in the form and the links, escaped.
	const evil = `"><script>alert(1)</script>`
	_, body := e.get("/queue?name=jobs&state=dead&q=" + url.QueryEscape(evil) + "&group=" + url.QueryEscape(evil))
	if strings.Contains(body, "<script>alert(1)") {
		t.Fatal("a filter value is rendered unescaped")
	}
	if !strings.Contains(body, "No dead task matches") {
		t.Fatal("a filter that matches nothing does not say so")
	}

	ro := newEnv(t, &Options{ReadOnly: true})
	ro.kill("jobs", 2, "boom")
	if _, body := ro.get("/queue?name=jobs&state=dead"); strings.Contains(body, `id="bulk"`) || strings.Contains(body, `class="pick"`) {
		t.Fatal("a read-only queue page offers a selection")
	}
	if _, body := ro.get("/dead"); strings.Contains(body, "data-op=") {
		t.Fatal("a read-only dead page offers group actions")
	}
	ro.http.Jar.SetCookies(mustURL(ro.ts.URL), []*http.Cookie{{Name: csrfCookie, Value: strings.Repeat("a", 43)}})
	for _, form := range bulk {
		form.Set("csrf", ro.d.sign(strings.Repeat("a", 43)))
		form.Set("ids", ro.deadID("jobs"))
		if resp, _ := ro.post("/action", form); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("read-only %s: status %d, want 403", form.Get("op"), resp.StatusCode)
		}
	}
	if q, _ := ro.in.Queue(ctx, "jobs"); q.Dead != 2 {
		t.Fatalf("a read-only dashboard changed the queue: %+v", q)
	}
}

func TestFilterMatch(t *testing.T) {
	typed := []byte("\x00wqt:welcome\x00" + `{"to":"ada@example.com"}`) // a typed task as stored (docs/PROTOCOL.md)
	task := &worqr.TaskInfo{Payload: typed, Type: "welcome", Key: "k1", LastError: "timeout after 30s"}
	for _, c := range []struct {
		f    filter
		want bool
	}{
		{filter{}, true},
		{filter{Type: "welcome"}, true},
		{filter{Type: "digest"}, false},
		{filter{Key: "k1"}, true},
		{filter{Key: "k2"}, false},
		{filter{Group: "timeout after <n>s"}, true},
		{filter{Group: "timeout"}, false},
		{filter{Error: "TIMEOUT"}, true},
		{filter{Error: "refused"}, false},
		{filter{Text: `"to":"ada@`}, true},  // the payload's own text
		{filter{Text: `"to": "ada@`}, true}, // as the page shows it
		{filter{Text: "wqt"}, false},        // not the type's wrapping
		{filter{Type: "welcome", Text: "grace"}, false},
	} {
		if got := c.f.match(task); got != c.want {
			t.Errorf("%+v matches: %v, want %v", c.f, got, c.want)
		}
	}
}

// A typed task's page shows its type apart and the payload its handler
// sees, not the type's wrapping.
func TestTaskPageShowsTheType(t *testing.T) {
	e := newEnv(t, nil)
	id, err := e.client.Enqueue(context.Background(), "mail", []byte(`{"to":"ada"}`), &worqr.EnqueueOpts{Type: "welcome"})
	if err != nil {
		t.Fatal(err)
	}
	_, body := e.get("/task?id=" + id)
	if !strings.Contains(body, `id="task-type"><span class="badge">welcome</span>`) {
		t.Fatal("the task page does not show the type")
	}
	if !strings.Contains(body, `id="payload">{
  &#34;to&#34;: &#34;ada&#34;
}</pre>`) || strings.Contains(body, "wqt") {
		t.Fatalf("the payload is not shown as its handler sees it:\n%s", body)
	}
}

// The task page shows a task's metadata (EnqueueOpts.Meta) apart from its
// payload, which it shows as enqueued; escaped.
func TestTaskPageShowsTheMeta(t *testing.T) {
	e := newEnv(t, nil)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	id, err := e.client.Enqueue(context.Background(), "mail", []byte("hi"),
		&worqr.EnqueueOpts{Meta: map[string]string{"traceparent": tp, "x": "<b>"}})
	if err != nil {
		t.Fatal(err)
	}
	_, body := e.get("/task?id=" + id)
	if !strings.Contains(body, `id="task-meta"><div>traceparent: `+tp+`</div><div>x: &lt;b&gt;</div></dd>`) {
		t.Fatalf("the task page does not show the metadata:\n%s", body)
	}
	if !strings.Contains(body, `id="payload">hi</pre>`) {
		t.Fatalf("the payload is not shown as enqueued:\n%s", body)
	}
	plain, err := e.client.Enqueue(context.Background(), "mail", []byte("hi"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, body := e.get("/task?id=" + plain); strings.Contains(body, "task-meta") {
		t.Fatal("a task without metadata shows a Metadata row")
	}
}

func TestUntil(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		t    time.Time
		want string
	}{
		{time.Time{}, "–"},
		{now.Add(90*time.Second + 500*time.Millisecond), "in 1m30s"},
		{now.Add(-2 * time.Second), "due now"},
		{now.Add(-3*time.Hour - time.Second), "overdue by 3h00m"},
	} {
		if got := until(c.t); got != c.want {
			t.Errorf("until(now%+v) = %q, want %q", c.t.Sub(now).Round(time.Second), got, c.want)
		}
	}
}

// A queue removed with Inspector.RemoveQueue leaves the overview and the
// pages that list queues, and its own page is not found.
func TestRemovedQueueLeavesTheLists(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	for _, q := range []string{"typo", "jobs"} {
		if _, err := e.client.Enqueue(ctx, q, []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, body := e.get("/"); !strings.Contains(body, "name=typo") {
		t.Fatalf("the overview does not list typo before its removal:\n%s", body)
	}
	if _, err := e.in.RemoveQueue(ctx, "typo", &worqr.RemoveQueueOpts{Force: true}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/", "/dead", "/keys"} {
		code, body := e.get(path)
		if code != 200 || strings.Contains(body, "name=typo") {
			t.Errorf("%s after the removal: status %d, lists typo: %v", path, code, strings.Contains(body, "name=typo"))
		}
	}
	if _, body := e.get("/"); !strings.Contains(body, "name=jobs") {
		t.Error("the overview lost the other queue")
	}
	if code, _ := e.get("/queue?name=typo"); code != http.StatusNotFound {
		t.Errorf("the removed queue's page: status %d, want 404", code)
	}
}
