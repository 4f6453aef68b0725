// Package dash is worqr's web dashboard: an http.Handler that shows every
// queue with live counts and an hour of throughput, a queue's tasks by state,
// one task, dead tasks grouped by error, workers and flow runs, and runs the
// operator's actions (retry or delete all dead, delete all waiting and
// scheduled, pause, resume; requeue or delete one dead task, run a scheduled
// task now, cancel a waiting, scheduled or running task with
// Options.Client, cancel or retry a flow run) as POSTs protected against
// cross-site request forgery.
//
// Mount it under a prefix in your own server:
//
//	d := dash.New(inspector, &dash.Options{Prefix: "/worqr", Client: client})
//	defer d.Close()
//	mux.Handle("/worqr/", dash.BasicAuth("ops", secret, d))
//
// Live updates reach the browser as server-sent events from one broadcaster
// per Dashboard: it polls Inspector.Queues and the last two minutes of
// Inspector.History at most once per second, only while a browser is
// connected, and relays one Inspector.Follow, so the
// dashboard's Redis cost does not grow with the number of open tabs. Each
// poll also tells the browsers whether Redis answered: the page's live
// indicator is green while it does, red ("Redis down") while it does not,
// and grey while the stream itself is down or silent. It uses only the
// standard library and worqr's public API.
package dash

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"html/template"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/worqr/worqr-go/worqr"
)

//go:embed assets
var assets embed.FS

// Options configure a Dashboard. The zero value (or a nil *Options) is a
// read-write dashboard mounted at the root.
type Options struct {
	// ReadOnly hides every action and refuses them on the server (403).
	ReadOnly bool
	// Prefix is the path the dashboard is mounted under ("/worqr"), used
	// to build links. Requests may arrive with or without it (behind
	// http.StripPrefix). Default "" (the root).
	Prefix string
	// Title is shown in the header and the page titles. Default "worqr".
	Title string
	// Client, when set, runs the actions that are a producer's: cancelling
	// a task (Client.Cancel) from its page or a selection. Without it the
	// dashboard offers no per-task cancel (the Inspector's bulk actions
	// still work). The dashboard does not close it.
	Client *worqr.Client
	// Logger receives the dashboard's errors (Redis failures are logged
	// here and shown to the browser only as a generic message). A nil
	// logger means warn and above on stderr.
	Logger *slog.Logger
}

// pollInterval is how often the broadcaster reads the queues' counts while
// a browser is connected.
const pollInterval = time.Second

// Dashboard is the dashboard's http.Handler. It is safe for concurrent use.
type Dashboard struct {
	in     *worqr.Inspector
	opts   Options
	log    *slog.Logger
	tmpl   map[string]*template.Template
	secret []byte // signs CSRF tokens
	mux    *http.ServeMux
	hub    *hub

	cancel  context.CancelFunc
	closed  sync.Mutex // guards stopped
	stopped bool
	done    chan struct{}
}

// New returns a dashboard on in. It starts following in's event stream at
// once (one Redis connection, relayed to connected browsers); Close stops
// it. The throughput chart is read from Inspector.History: the page loads
// the last hour, the broadcaster refreshes the last two minutes.
func New(in *worqr.Inspector, opts *Options) *Dashboard {
	return newDashboard(in, opts, in.Queues, systemTicker)
}

// newDashboard lets tests count and pace the broadcaster's polls.
func newDashboard(in *worqr.Inspector, opts *Options, queues queuesFunc, ticker tickerFunc) *Dashboard {
	var o Options
	if opts != nil {
		o = *opts
	}
	o.Prefix = strings.TrimRight(o.Prefix, "/")
	if o.Prefix != "" && !strings.HasPrefix(o.Prefix, "/") {
		o.Prefix = "/" + o.Prefix
	}
	if o.Title == "" {
		o.Title = "worqr"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		panic("dash: no randomness: " + err.Error())
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Dashboard{in: in, opts: o, log: o.Logger, secret: secret, cancel: cancel, done: make(chan struct{})}
	d.tmpl = parseTemplates(o)
	d.hub = newHub(queues, in.History, ticker, pollInterval, o.Logger)
	go func() {
		defer close(d.done)
		_ = in.Follow(ctx, d.hub.event)
	}()
	d.routes()
	return d
}

// Close stops following events and ends the live streams of connected
// browsers. The Inspector (and its pool) stay open: the caller owns them.
func (d *Dashboard) Close() error {
	d.closed.Lock()
	defer d.closed.Unlock()
	if !d.stopped {
		d.stopped = true
		d.cancel()
		d.hub.close()
		<-d.done
	}
	return nil
}

func (d *Dashboard) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", d.overview)
	m.HandleFunc("GET /queue", d.queue)
	m.HandleFunc("GET /task", d.task)
	m.HandleFunc("GET /dead", d.dead)
	m.HandleFunc("GET /workers", d.workers)
	m.HandleFunc("GET /flows", d.flows)
	m.HandleFunc("GET /run", d.run)
	m.HandleFunc("GET /schedules", d.schedules)
	m.HandleFunc("GET /keys", d.keys)
	m.HandleFunc("GET /events", d.events)
	m.HandleFunc("POST /action", d.action)
	static := http.FileServerFS(assets)
	m.Handle("GET /assets/", static)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		d.render(w, r, http.StatusNotFound, "error", &page{Title: "Not found", Error: "No such page."})
	})
	d.mux = m
}

// ServeHTTP serves the dashboard. The path may carry Options.Prefix or
// have had it stripped already.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p := d.opts.Prefix; p != "" && (r.URL.Path == p || strings.HasPrefix(r.URL.Path, p+"/")) {
		r2 := new(http.Request)
		*r2 = *r
		u := *r.URL
		u.Path = strings.TrimPrefix(r.URL.Path, p)
		u.RawPath = ""
		r2.URL = &u
		r = r2
	}
	if r.URL.Path == "" {
		r.URL.Path = "/"
	}
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; form-action 'self'")
	d.mux.ServeHTTP(w, r)
}

// BasicAuth wraps h with HTTP basic authentication for one user, comparing
// both the user name and the password in constant time. An empty user or
// password (say, an environment variable that is not set) lets nobody in:
// every request is refused, rather than open to anyone who sends an empty
// password.
func BasicAuth(user, pass string, h http.Handler) http.Handler {
	wantU := sha256.Sum256([]byte(user))
	wantP := sha256.Sum256([]byte(pass))
	unset := user == "" || pass == ""
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		ok = ok && !unset
		gotU := sha256.Sum256([]byte(u))
		gotP := sha256.Sum256([]byte(p))
		okU := subtle.ConstantTimeCompare(gotU[:], wantU[:])
		okP := subtle.ConstantTimeCompare(gotP[:], wantP[:])
		if !ok || okU&okP != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="worqr", charset="UTF-8"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
