package dash

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/worqr/worqr-go/internal/rdb"

	"github.com/worqr/worqr-go/defaults"

	"github.com/worqr/worqr-go/worqr"
)

// pageSize is how many tasks or runs a page lists.
const pageSize = 50

// page is what every template gets.
type page struct {
	App       string
	Title     string
	Nav       string
	Base      string
	CSRF      string
	ReadOnly  bool
	CanCancel bool // an Options.Client cancels tasks
	Flash     string
	Error     string
	Data      any
}

var pageNames = []string{"overview", "queue", "task", "dead", "workers", "flows", "run", "schedules", "keys", "error"}

func parseTemplates(o Options) map[string]*template.Template {
	funcs := template.FuncMap{
		"ago":         ago,
		"dur":         dur,
		"when":        when,
		"text":        func(b []byte) string { return printable(b) },
		"maxAttempts": func() int { return defaults.MaxAttemptHistory },
		"clip":        clip,
		"add":         func(a, b int) int { return a + b },
		"neg":         func(a int) int { return -a },
		"qesc":        url.QueryEscape,
		"commas":      commas,
		"json":        func(v any) (string, error) { b, err := json.Marshal(v); return string(b), err },
		"sortedq":     sortedHeld,
		"until":       until,
		"spec":        spec,
		"tickOpts":    tickOpts,
		"tickID":      func(name string, t time.Time) string { return rdb.TickTaskID(name, t) },
		"flowq":       func(q string) bool { return strings.Contains(q, "/") },
		"cancelNote": func(st worqr.TaskState) string {
			if st == worqr.StateActive {
				return "Its worker is told to stop it; it ends as cancelled."
			}
			return "It is removed and will not run."
		},
		// back names the page (a path of this dashboard, without the
		// prefix) an action returns to, when not its default one.
		"back": func(m map[string]string, path string) map[string]string { m["Back"] = path; return m },
		"dict": func(p *page, op, queue, id, label, class, confirm string) map[string]string {
			return map[string]string{"Base": p.Base, "CSRF": p.CSRF, "Op": op, "Queue": queue, "ID": id,
				"Label": label, "Class": class, "Confirm": confirm}
		},
	}
	base := template.Must(template.New("layout").Funcs(funcs).ParseFS(assets, "assets/layout.html"))
	out := map[string]*template.Template{}
	for _, n := range pageNames {
		t := template.Must(template.Must(base.Clone()).ParseFS(assets, "assets/"+n+".html"))
		out[n] = t
	}
	return out
}

// render writes one page. Errors from Redis are logged and shown as a
// generic message: their text could name the server.
func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, status int, name string, p *page) {
	p.App = d.opts.Title
	p.Base = d.opts.Prefix
	p.ReadOnly = d.opts.ReadOnly
	p.CanCancel = d.opts.Client != nil && !d.opts.ReadOnly
	p.CSRF = d.csrfToken(w, r)
	if p.Flash == "" {
		// Only a message this server signed after an action is shown: a
		// crafted link cannot put words in the banner.
		q := r.URL.Query()
		if msg := q.Get("msg"); msg != "" && hmac.Equal([]byte(q.Get("sig")), []byte(d.sign("flash:"+msg))) {
			p.Flash = clip(msg, 200)
		}
	}
	if p.Nav == "" {
		p.Nav = name
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if err := d.tmpl[name].ExecuteTemplate(w, "layout", p); err != nil {
		d.log.Error("dash: rendering failed", "page", name, "err", err)
	}
}

// fail renders an error page for err.
func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, err error) {
	var inv *worqr.InvalidError
	switch {
	case errors.As(err, &inv):
		d.render(w, r, http.StatusBadRequest, "error", &page{Title: "Bad request", Error: inv.Error()})
	case errors.Is(err, worqr.ErrTaskNotFound):
		d.render(w, r, http.StatusNotFound, "error", &page{Title: "Not found", Error: "No such task or run (it may have ended longer ago than its retention)."})
	default:
		d.log.Error("dash: redis call failed", "path", r.URL.Path, "err", err)
		d.render(w, r, http.StatusBadGateway, "error", &page{Title: "Redis error", Error: "Reading from Redis failed; the server log has the details."})
	}
}

// known reports whether the namespace knows queue name (a worker or a
// client used it): the pages and actions of a queue are for known ones. A
// name that is not a queue name is not known.
func (d *Dashboard) known(ctx context.Context, name string) (bool, error) {
	ok, err := d.in.Known(ctx, name)
	if errors.Is(err, worqr.ErrInvalid) {
		return false, nil
	}
	return ok, err
}

// unknownQueue answers a request about a queue the namespace does not know
// (404), or the error that kept known from telling.
func (d *Dashboard) unknownQueue(w http.ResponseWriter, r *http.Request, name string, err error) {
	if err != nil {
		d.fail(w, r, err)
		return
	}
	d.render(w, r, http.StatusNotFound, "error", &page{Title: "Not found",
		Error: fmt.Sprintf("No queue named %q in this namespace: the queue list shows the known ones.", name)})
}

// --- CSRF: a random cookie (SameSite=Strict, HttpOnly) and, in every form,
// its HMAC under a secret of this server. A POST needs both.

const csrfCookie = "worqr_csrf"

func (d *Dashboard) cookiePath() string {
	if d.opts.Prefix == "" {
		return "/"
	}
	return d.opts.Prefix + "/"
}

// csrfToken returns the form token for r's cookie, setting a cookie first
// when r has none.
func (d *Dashboard) csrfToken(w http.ResponseWriter, r *http.Request) string {
	c, err := r.Cookie(csrfCookie)
	val := ""
	if err == nil && len(c.Value) >= 32 {
		val = c.Value
	} else {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		val = base64.RawURLEncoding.EncodeToString(b)
		http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: val, Path: d.cookiePath(), HttpOnly: true,
			SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	}
	return d.sign(val)
}

func (d *Dashboard) sign(v string) string {
	m := hmac.New(sha256.New, d.secret)
	m.Write([]byte(v))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// csrfOK reports whether r carries a cookie and a matching form token.
func (d *Dashboard) csrfOK(r *http.Request) bool {
	c, err := r.Cookie(csrfCookie)
	if err != nil || c.Value == "" {
		return false
	}
	got := r.PostFormValue("csrf")
	return got != "" && hmac.Equal([]byte(got), []byte(d.sign(c.Value)))
}

// --- pages

type overviewData struct {
	Queues []worqr.QueueInfo
	Chart  []bucket
	Totals struct{ Waiting, Behind, Scheduled, Active, Dead int64 }
}

func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request) {
	qs, err := d.in.Queues(r.Context())
	if err != nil {
		d.fail(w, r, err)
		return
	}
	od := overviewData{Queues: qs, Chart: emptyChart(time.Now())}
	if hs, err := d.in.History(r.Context(), "", chartMinutes); err != nil {
		d.log.Warn("dash: reading the history failed", "err", err)
	} else {
		od.Chart = bucketsOf(hs)
	}
	for _, q := range qs {
		od.Totals.Waiting += q.Waiting
		od.Totals.Behind += q.Behind
		od.Totals.Scheduled += q.Scheduled
		od.Totals.Active += q.Active
		od.Totals.Dead += q.Dead
	}
	d.render(w, r, http.StatusOK, "overview", &page{Title: "Overview", Data: od})
}

var states = []worqr.TaskState{worqr.StateQueued, worqr.StateScheduled, worqr.StateActive, worqr.StateDead, worqr.StateDone}

type queueData struct {
	Q      *worqr.QueueInfo
	State  worqr.TaskState
	States []worqr.TaskState
	Tasks  []*worqr.TaskInfo
	Total  int
	Page   int
	Pages  int
	Flow   bool
	Chart  []bucket // the queue's last hour
	// Filter narrows the list; Scan says how far it read.
	Filter filter
	Scan   *scan
	// CanCancel: this dashboard cancels tasks, and this list's can be.
	CanCancel bool
}

func (d *Dashboard) queue(w http.ResponseWriter, r *http.Request) {
	qv := r.URL.Query()
	name := qv.Get("name")
	if id := strings.TrimSpace(qv.Get("id")); id != "" {
		http.Redirect(w, r, d.opts.Prefix+"/task?id="+url.QueryEscape(id), http.StatusSeeOther)
		return
	}
	ctx := r.Context()
	if ok, err := d.known(ctx, name); err != nil || !ok {
		d.unknownQueue(w, r, name, err)
		return
	}
	q, err := d.in.Queue(ctx, name)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	state := worqr.TaskState(qv.Get("state"))
	if state == "" {
		state = worqr.StateQueued
	}
	pg, _ := strconv.Atoi(qv.Get("page"))
	pg = max(pg, 1)
	qd := queueData{Q: q, State: state, States: states, Page: pg, Flow: q.Flow != "", Filter: filterOf(qv)}
	qd.CanCancel = d.opts.Client != nil && !d.opts.ReadOnly && !qd.Flow &&
		(state == worqr.StateQueued || state == worqr.StateScheduled || state == worqr.StateActive)
	if qd.Filter.On() {
		sc, err := d.scanTasks(ctx, name, state, qd.Filter, (pg-1)*pageSize, pageSize)
		if err != nil {
			d.fail(w, r, err)
			return
		}
		qd.Scan, qd.Tasks, qd.Total = sc, sc.Page, sc.Matches
	} else {
		qd.Tasks, qd.Total, err = d.in.Tasks(ctx, name, state, (pg-1)*pageSize, pageSize)
		if err != nil {
			d.fail(w, r, err)
			return
		}
	}
	qd.Pages = max(1, (qd.Total+pageSize-1)/pageSize)
	qd.Chart = emptyChart(time.Now())
	if hs, err := d.in.History(ctx, name, chartMinutes); err != nil {
		d.log.Warn("dash: reading the history failed", "queue", name, "err", err)
	} else {
		qd.Chart = bucketsOf(hs)
	}
	d.render(w, r, http.StatusOK, "queue", &page{Title: q.Name, Nav: "overview", Data: qd})
}

func (d *Dashboard) task(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimSpace(r.URL.Query().Get("id"))
	t, err := d.in.Task(r.Context(), "", id)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	d.render(w, r, http.StatusOK, "task", &page{Title: "Task " + t.ID, Nav: "overview", Data: t})
}

type errorGroup struct {
	Queue     string
	Error     string
	Count     int
	Example   string
	ExampleID string
	Newest    time.Time
}

type deadData struct {
	Groups  []*errorGroup
	Scanned int
	Total   int64
}

// deadScan caps how many dead tasks of one queue the grouping reads.
const deadScan = 2000

func (d *Dashboard) dead(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	only := r.URL.Query().Get("queue")
	qs, err := d.in.Queues(ctx)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	var dd deadData
	for _, q := range qs {
		if q.Dead == 0 || (only != "" && q.Name != only) {
			continue
		}
		dd.Total += q.Dead
		groups, n, err := d.groupDead(ctx, q.Name)
		if err != nil {
			d.fail(w, r, err)
			return
		}
		dd.Scanned += n
		dd.Groups = append(dd.Groups, groups...)
	}
	sort.SliceStable(dd.Groups, func(i, j int) bool { return dd.Groups[i].Count > dd.Groups[j].Count })
	d.render(w, r, http.StatusOK, "dead", &page{Title: "Dead tasks", Data: dd})
}

func (d *Dashboard) groupDead(ctx context.Context, queue string) ([]*errorGroup, int, error) {
	by := map[string]*errorGroup{}
	var out []*errorGroup
	scanned := 0
	for scanned < deadScan {
		ts, _, err := d.in.Tasks(ctx, queue, worqr.StateDead, scanned, 1000)
		if err != nil {
			return nil, 0, err
		}
		for _, t := range ts {
			text := t.LastError
			if text == "" {
				text = t.DeadReason
			}
			norm := worqr.ErrorShape(text)
			g := by[norm]
			if g == nil {
				g = &errorGroup{Queue: queue, Error: norm, Example: text, ExampleID: t.ID, Newest: t.DiedAt}
				by[norm] = g
				out = append(out, g)
			}
			g.Count++
		}
		scanned += len(ts)
		if len(ts) < 1000 {
			break
		}
	}
	return out, scanned, nil
}

func (d *Dashboard) workers(w http.ResponseWriter, r *http.Request) {
	ws, err := d.in.Workers(r.Context())
	if err != nil {
		d.fail(w, r, err)
		return
	}
	d.render(w, r, http.StatusOK, "workers", &page{Title: "Workers", Data: ws})
}

type flowsData struct {
	Flows    []string
	Flow     string
	Status   worqr.RunStatus
	Statuses []worqr.RunStatus
	Runs     []*worqr.RunInfo
	Page     int
	More     bool
}

func (d *Dashboard) flows(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	qs, err := d.in.Queues(ctx)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	fd := flowsData{Statuses: []worqr.RunStatus{"", worqr.RunRunning, worqr.RunDone, worqr.RunFailed, worqr.RunCancelled}}
	seen := map[string]bool{}
	for _, q := range qs {
		if q.Flow != "" && !seen[q.Flow] {
			seen[q.Flow] = true
			fd.Flows = append(fd.Flows, q.Flow)
		}
	}
	qv := r.URL.Query()
	fd.Flow = qv.Get("flow")
	if fd.Flow == "" && len(fd.Flows) > 0 {
		fd.Flow = fd.Flows[0]
	}
	fd.Status = worqr.RunStatus(qv.Get("status"))
	fd.Page, _ = strconv.Atoi(qv.Get("page"))
	fd.Page = max(fd.Page, 1)
	if fd.Flow != "" {
		runs, err := d.in.Runs(ctx, fd.Flow, fd.Status, (fd.Page-1)*pageSize, pageSize+1)
		if err != nil {
			d.fail(w, r, err)
			return
		}
		if len(runs) > pageSize {
			fd.More, runs = true, runs[:pageSize]
		}
		fd.Runs = runs
	}
	d.render(w, r, http.StatusOK, "flows", &page{Title: "Flows", Data: fd})
}

type runData struct {
	Run    *worqr.RunInfo
	Groups []childGroup
	State  []kv
}

type childGroup struct {
	Queue    string
	Children []worqr.ChildResult
	Counts   map[string]int
}

type kv struct{ K, V string }

func (d *Dashboard) run(w http.ResponseWriter, r *http.Request) {
	qv := r.URL.Query()
	run, err := d.in.Run(r.Context(), qv.Get("flow"), strings.TrimSpace(qv.Get("id")))
	if err != nil {
		d.fail(w, r, err)
		return
	}
	rd := runData{Run: run}
	idx := map[string]int{}
	for _, c := range run.Children {
		i, ok := idx[c.Queue]
		if !ok {
			i = len(rd.Groups)
			idx[c.Queue] = i
			rd.Groups = append(rd.Groups, childGroup{Queue: c.Queue, Counts: map[string]int{}})
		}
		rd.Groups[i].Children = append(rd.Groups[i].Children, c)
		rd.Groups[i].Counts[c.Status]++
	}
	for k, v := range run.State {
		rd.State = append(rd.State, kv{k, v})
	}
	sort.Slice(rd.State, func(i, j int) bool { return rd.State[i].K < rd.State[j].K })
	d.render(w, r, http.StatusOK, "run", &page{Title: "Run " + run.ID, Nav: "flows", Data: rd})
}

func (d *Dashboard) schedules(w http.ResponseWriter, r *http.Request) {
	list, err := d.in.Schedules(r.Context())
	if err != nil {
		d.fail(w, r, err)
		return
	}
	d.render(w, r, http.StatusOK, "schedules", &page{Title: "Schedules", Data: list})
}

type keysData struct {
	Queues []string // the queues with keys that have tasks (ordered or fair)
	Queue  string
	// Fair: the queue's keys share it (KeyPolicy.Fair): they have no head,
	// and show their tasks running and their limits instead.
	Fair    bool
	Total   int // keys with tasks
	Keys    []worqr.KeyInfo
	Cursor  uint64 // this page's
	Next    uint64 // the next page's; 0 after the last
	Blocked []worqr.KeyInfo
	// Key is the key looked up (Find), with the first tasks behind its
	// head; Missing when it has no task.
	Key     *worqr.KeyInfo
	Find    string
	Missing bool
	Behind  []string
}

// keysPage is how many keys one page of the keys page reads (one HSCAN).
const keysPage = 100

// blockedScan is how many blocked keys the keys page lists.
const blockedScan = 50

func (d *Dashboard) keys(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	qv := r.URL.Query()
	qs, err := d.in.Queues(ctx)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	var kd keysData
	for _, q := range qs {
		if q.Keys > 0 && q.Flow == "" {
			kd.Queues = append(kd.Queues, q.Name)
		}
	}
	kd.Queue = qv.Get("queue")
	if kd.Queue == "" && len(kd.Queues) > 0 {
		kd.Queue = kd.Queues[0]
	}
	if kd.Queue == "" {
		d.render(w, r, http.StatusOK, "keys", &page{Title: "Keys", Data: kd})
		return
	}
	if ok, err := d.known(ctx, kd.Queue); err != nil || !ok {
		d.unknownQueue(w, r, kd.Queue, err)
		return
	}
	if kd.Find = strings.TrimSpace(qv.Get("key")); kd.Find != "" {
		if kd.Key, err = d.in.Key(ctx, kd.Queue, kd.Find); err != nil {
			d.fail(w, r, err)
			return
		}
		kd.Missing = kd.Key == nil
		if kd.Key != nil && kd.Key.Behind > 0 {
			if kd.Behind, err = d.in.TasksBehind(ctx, kd.Queue, kd.Find, 0, pageSize); err != nil {
				d.fail(w, r, err)
				return
			}
		}
	}
	kd.Cursor, _ = strconv.ParseUint(qv.Get("cursor"), 10, 64)
	if kd.Keys, kd.Next, kd.Total, err = d.in.Keys(ctx, kd.Queue, kd.Cursor, keysPage); err != nil {
		d.fail(w, r, err)
		return
	}
	// One HSCAN page may list a key twice.
	seen := map[string]bool{}
	uniq := kd.Keys[:0]
	for _, k := range kd.Keys {
		if !seen[k.Key] {
			seen[k.Key] = true
			uniq = append(uniq, k)
		}
	}
	kd.Keys = uniq
	sort.Slice(kd.Keys, func(i, j int) bool { return kd.Keys[i].Key < kd.Keys[j].Key })
	// A fair queue's keys have no head (KeyInfo.Head), nor a dead one
	// that blocks them: their Blocked column says what holds them.
	for _, k := range kd.Keys {
		kd.Fair = kd.Fair || k.Head == nil
	}
	kd.Fair = kd.Fair || kd.Key != nil && kd.Key.Head == nil
	if !kd.Fair {
		if kd.Blocked, err = d.in.BlockedKeys(ctx, kd.Queue, blockedScan); err != nil {
			d.fail(w, r, err)
			return
		}
	}
	d.render(w, r, http.StatusOK, "keys", &page{Title: "Keys of " + kd.Queue, Nav: "keys", Data: kd})
}

// --- actions

// action runs one POSTed operation and redirects back (303) with a message.
func (d *Dashboard) action(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if d.opts.ReadOnly {
		http.Error(w, "read-only dashboard: actions are disabled", http.StatusForbidden)
		return
	}
	if !d.csrfOK(r) {
		http.Error(w, "missing or invalid CSRF token: reload the page and try again", http.StatusForbidden)
		return
	}
	op, queue, id := r.PostFormValue("op"), r.PostFormValue("queue"), r.PostFormValue("id")
	ctx := r.Context()
	var (
		n   int
		err error
		msg string
	)
	back := d.opts.Prefix + "/queue?name=" + url.QueryEscape(queue)
	if op == "pause_schedule" || op == "resume_schedule" {
		// A schedule is named by id; it has no queue page of its own.
		d.scheduleAction(w, r, op, id)
		return
	}
	if ok, err := d.known(ctx, queue); err != nil || !ok {
		// A typo (or a forged form) would act on nothing, or create the
		// queue's settings (a pause).
		d.unknownQueue(w, r, queue, err)
		return
	}
	switch op {
	case "pause":
		err, msg = d.in.Pause(ctx, queue), "Paused "+queue
	case "resume":
		err, msg = d.in.Resume(ctx, queue), "Resumed "+queue
	case "retry_dead":
		n, err = d.in.RequeueAllDead(ctx, queue, nil)
		msg = fmt.Sprintf("Requeued %d dead tasks of %s", n, queue)
	case "delete_dead":
		n, err = d.in.DeleteAllDead(ctx, queue, nil)
		msg = fmt.Sprintf("Deleted %d dead tasks of %s", n, queue)
	case "delete_waiting":
		n, err = d.in.DeleteAllWaiting(ctx, queue, nil)
		msg = fmt.Sprintf("Deleted %d waiting and scheduled tasks of %s", n, queue)
	case "retry_task":
		n, err = d.in.RequeueDead(ctx, queue, id)
		msg = fmt.Sprintf("Requeued %d task", n)
		back = d.opts.Prefix + "/task?id=" + url.QueryEscape(id)
	case "run_now":
		var ok bool
		ok, err = d.in.RunNow(ctx, queue, id)
		msg = "Moved " + id + " to its queue"
		if !ok {
			msg = "Task " + id + " was not scheduled: nothing moved"
		}
		back = d.opts.Prefix + "/task?id=" + url.QueryEscape(id)
	case "delete_task":
		n, err = d.in.DeleteDead(ctx, queue, id)
		msg = fmt.Sprintf("Deleted %d dead task", n)
	case "cancel_task":
		if d.opts.Client == nil {
			http.Error(w, "this dashboard cannot cancel tasks (no Options.Client)", http.StatusBadRequest)
			return
		}
		var st worqr.CancelStatus
		st, err = d.opts.Client.Cancel(ctx, queue, id)
		switch st {
		case worqr.CancelRemoved:
			msg = "Cancelled " + id + ": it will not run"
		case worqr.CancelRequested:
			msg = "Asked the worker running " + id + " to stop it: it ends as cancelled"
			back = d.opts.Prefix + "/task?id=" + url.QueryEscape(id)
		default:
			msg = "Task " + id + " was not waiting or running: nothing cancelled"
			back = d.opts.Prefix + "/task?id=" + url.QueryEscape(id)
		}
	case "cancel_all":
		n, err = d.in.CancelAll(ctx, queue, nil)
		msg = fmt.Sprintf("Cancelled %d tasks of %s (waiting, scheduled and running)", n, queue)
	case "retry_selected", "delete_selected", "cancel_selected", "run_now_selected":
		state := worqr.TaskState(r.PostFormValue("state"))
		back += "&state=" + url.QueryEscape(string(state)) + filterOf(r.PostForm).Query()
		ids := selected(r)
		if len(ids) == 0 {
			msg = "No task selected: tick the tasks to act on"
			break
		}
		if op == "cancel_selected" && d.opts.Client == nil {
			http.Error(w, "this dashboard cannot cancel tasks (no Options.Client)", http.StatusBadRequest)
			return
		}
		n, err = d.onIDs(ctx, op, queue, ids)
		msg = fmt.Sprintf("%s %d of %d selected tasks", bulkVerb[op], n, len(ids))
	case "retry_matching", "delete_matching", "cancel_matching":
		state, f := worqr.TaskState(r.PostFormValue("state")), filterOf(r.PostForm)
		back += "&state=" + url.QueryEscape(string(state)) + f.Query()
		if want := matchingState(op, state); want != "" {
			http.Error(w, op+" acts on "+want+" tasks, not "+string(state), http.StatusBadRequest)
			return
		}
		if op == "cancel_matching" && d.opts.Client == nil {
			http.Error(w, "this dashboard cannot cancel tasks (no Options.Client)", http.StatusBadRequest)
			return
		}
		var sc *scan
		if sc, err = d.scanTasks(ctx, queue, state, f, 0, -1); err != nil {
			break
		}
		ids := make([]string, len(sc.Page))
		for i, t := range sc.Page {
			ids[i] = t.ID
		}
		if len(ids) > 0 {
			n, err = d.onIDs(ctx, strings.Replace(op, "_matching", "_selected", 1), queue, ids)
		}
		msg = fmt.Sprintf("%s %d of %d matching %s tasks of %s", bulkVerb[op], n, len(ids), state, queue)
		if sc.Capped {
			msg += fmt.Sprintf(" (the first %d read of %d: do it again for the rest)", sc.Scanned, sc.Total)
		}
		if f.Group != "" && state == worqr.StateDead {
			// The group is gone from the dead tab: go back to the groups.
			back = d.opts.Prefix + "/dead?queue=" + url.QueryEscape(queue)
		}
	case "wake_run":
		// queue is the run's stage queue, "<flow>/<stage>": its sleeping
		// stage task moves to the queue now.
		flow, _, _ := strings.Cut(queue, "/")
		var ok bool
		ok, err = d.in.RunNow(ctx, queue, id)
		msg = "Woke run " + id
		if !ok {
			msg = "Run " + id + " does not sleep: nothing woken"
		}
		back = d.opts.Prefix + "/run?flow=" + url.QueryEscape(flow) + "&id=" + url.QueryEscape(id)
	case "signal_run":
		flow, _, _ := strings.Cut(queue, "/")
		back = d.opts.Prefix + "/run?flow=" + url.QueryEscape(flow) + "&id=" + url.QueryEscape(id)
		if d.opts.Client == nil {
			http.Error(w, "this dashboard has no Client: it sends no signal", http.StatusForbidden)
			return
		}
		name := r.PostFormValue("name")
		var now bool
		now, err = d.opts.Client.Signal(ctx, &worqr.Flow{Name: flow}, id, name, []byte(r.PostFormValue("payload")), "")
		switch {
		case errors.Is(err, worqr.ErrTaskNotFound):
			err, msg = nil, "Run "+id+" is not running: no signal sent"
		case now:
			msg = "Signal " + name + " delivered: run " + id + " moves on"
		default:
			msg = "Signal " + name + " kept for run " + id + " until it waits for it"
		}
	case "cancel_run", "retry_run":
		// queue is the run's stage queue, "<flow>/<stage>".
		flow, _, _ := strings.Cut(queue, "/")
		act, did, not := d.in.CancelRun, "Cancelled run ", " was not running: nothing cancelled"
		if op == "retry_run" {
			act, did, not = d.in.RetryRun, "Retried run ", " was not failed: nothing retried"
		}
		var ok bool
		ok, err = act(ctx, flow, id)
		msg = did + id
		if !ok {
			msg = "Run " + id + not
		}
		back = d.opts.Prefix + "/run?flow=" + url.QueryEscape(flow) + "&id=" + url.QueryEscape(id)
	default:
		http.Error(w, "unknown action", http.StatusBadRequest)
		return
	}
	if b := r.PostFormValue("back"); localPath(b) {
		back = d.opts.Prefix + b
	}
	if err != nil {
		var inv *worqr.InvalidError
		if errors.As(err, &inv) {
			msg = "Failed: " + inv.Error()
		} else {
			d.log.Error("dash: action failed", "op", op, "queue", queue, "err", err)
			msg = "Failed: Redis error (see the server log)"
		}
	}
	d.redirect(w, r, back, msg)
}

// bulkVerb says what an action on several tasks did.
var bulkVerb = map[string]string{
	"retry_selected": "Requeued", "delete_selected": "Deleted", "cancel_selected": "Cancelled", "run_now_selected": "Moved to their queue",
	"retry_matching": "Requeued", "delete_matching": "Deleted", "cancel_matching": "Cancelled",
}

// matchingState returns "" when op may act on the tasks of state, else
// the states it acts on.
func matchingState(op string, state worqr.TaskState) string {
	switch op {
	case "retry_matching", "delete_matching":
		if state != worqr.StateDead {
			return "dead"
		}
	case "cancel_matching":
		if state != worqr.StateQueued && state != worqr.StateScheduled && state != worqr.StateActive {
			return "queued, scheduled or active"
		}
	}
	return ""
}

// selected returns the task ids of an action's selection (the ids fields),
// each once, at most maxSelected.
func selected(r *http.Request) []string {
	seen := map[string]bool{}
	var out []string
	for _, id := range r.PostForm["ids"] {
		id = strings.TrimSpace(id)
		if id == "" || seen[id] {
			continue
		}
		seen[id] = true
		out = append(out, id)
		if len(out) == maxSelected {
			break
		}
	}
	return out
}

// onIDs runs a selection's op on tasks ids of queue and returns how many
// it acted on: requeue or delete dead ones (Inspector.RequeueDead,
// DeleteDead: ids that are not dead are left), cancel waiting, scheduled
// or running ones (Client.Cancel, one call each), or move scheduled ones
// to their queue now (Inspector.RunNow, one call each).
func (d *Dashboard) onIDs(ctx context.Context, op, queue string, ids []string) (int, error) {
	switch op {
	case "retry_selected":
		return d.in.RequeueDead(ctx, queue, ids...)
	case "delete_selected":
		return d.in.DeleteDead(ctx, queue, ids...)
	}
	n := 0
	for _, id := range ids {
		switch op {
		case "cancel_selected":
			st, err := d.opts.Client.Cancel(ctx, queue, id)
			if err != nil {
				return n, err
			}
			if st != worqr.CancelNotFound {
				n++
			}
		case "run_now_selected":
			ok, err := d.in.RunNow(ctx, queue, id)
			if err != nil {
				return n, err
			}
			if ok {
				n++
			}
		}
	}
	return n, nil
}

// localPath reports whether p is a path of this dashboard ("/keys?..."),
// not a link elsewhere ("//host", "/\\host", "https:...").
func localPath(p string) bool {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.ContainsAny(p, "\\\r\n") {
		return false
	}
	u, err := url.Parse(p)
	return err == nil && u.Scheme == "" && u.Host == ""
}

// redirect goes back to back (303) with msg, signed, for its banner.
func (d *Dashboard) redirect(w http.ResponseWriter, r *http.Request, back, msg string) {
	sep := "?"
	if strings.Contains(back, "?") {
		sep = "&"
	}
	http.Redirect(w, r, back+sep+"msg="+url.QueryEscape(msg)+"&sig="+d.sign("flash:"+msg), http.StatusSeeOther)
}

// scheduleAction pauses or resumes schedule name.
func (d *Dashboard) scheduleAction(w http.ResponseWriter, r *http.Request, op, name string) {
	ctx := r.Context()
	var err error
	msg := "Paused schedule " + name
	if op == "pause_schedule" {
		err = d.in.PauseSchedule(ctx, name)
	} else {
		err, msg = d.in.ResumeSchedule(ctx, name), "Resumed schedule "+name+": it fires from its next tick"
	}
	var inv *worqr.InvalidError
	switch {
	case errors.Is(err, worqr.ErrScheduleNotFound):
		msg = "No schedule named " + name
	case errors.As(err, &inv):
		msg = "Failed: " + inv.Error()
	case err != nil:
		d.log.Error("dash: action failed", "op", op, "schedule", name, "err", err)
		msg = "Failed: Redis error (see the server log)"
	}
	d.redirect(w, r, d.opts.Prefix+"/schedules", msg)
}

// --- live stream

func (d *Dashboard) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	ch, ok := d.hub.subscribe()
	if !ok {
		http.Error(w, "dashboard closed", http.StatusServiceUnavailable)
		return
	}
	defer d.hub.unsubscribe(ch)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 2000\n\n")
	fl.Flush()
	keep := time.NewTicker(15 * time.Second)
	defer keep.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keep.C:
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil {
				return
			}
		case m, ok := <-ch:
			if !ok {
				return
			}
			if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", m.event, m.data); err != nil {
				return
			}
		}
		fl.Flush()
	}
}

// --- template helpers

func dur(d time.Duration) string {
	switch {
	case d <= 0:
		return "–"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	return dur(time.Since(t)) + " ago"
}

// until says how long until t ("in 4m10s"); a time just past is "due
// now" (a Scheduler fires it on its next pass), one long past is overdue
// (no Scheduler runs, or none reaches Redis).
func until(t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	d := time.Until(t)
	switch {
	case d > 0:
		return "in " + dur(d)
	case d > -dueGrace:
		return "due now"
	}
	return "overdue by " + dur(-d)
}

// dueGrace is how long past its time a next run reads "due now".
const dueGrace = 10 * time.Second

// spec is a schedule's timing as written: its cron expression (and zone)
// or its interval.
func spec(s worqr.ScheduleInfo) string {
	if s.Cron == "" {
		return "every " + s.Every.String()
	}
	if s.TimeZone != "" {
		return s.Cron + " (" + s.TimeZone + ")"
	}
	return s.Cron
}

// tickOpts lists the options a schedule's ticks' tasks are enqueued with
// (Schedule.Opts, StartWithin), one "name value" each.
func tickOpts(s worqr.ScheduleInfo) []string {
	var out []string
	if o := s.Opts; o != nil {
		if o.Type != "" {
			out = append(out, "type "+o.Type)
		}
		if o.Priority != 0 {
			out = append(out, fmt.Sprintf("priority %d", o.Priority))
		}
		if o.MaxAttempts != 0 {
			out = append(out, fmt.Sprintf("max attempts %d", o.MaxAttempts))
		}
		switch {
		case o.Timeout > 0:
			out = append(out, "timeout "+o.Timeout.String())
		case o.Timeout < 0:
			out = append(out, "no timeout")
		}
		if o.Retention != 0 {
			out = append(out, "kept "+o.Retention.String())
		}
		keys := make([]string, 0, len(o.Meta))
		for k := range o.Meta {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			out = append(out, "meta "+k+"="+o.Meta[k])
		}
	}
	if s.StartWithin > 0 {
		out = append(out, "starts within "+s.StartWithin.String())
	}
	return out
}

func when(t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// printable shows a payload as text when it is UTF-8 (pretty JSON when it
// is JSON), else as a hex summary. html/template escapes it.
func printable(b []byte) string {
	if !utf8.Valid(b) {
		return fmt.Sprintf("(%d bytes of binary) %x", len(b), b[:min(len(b), 256)])
	}
	// json.Indent keeps the payload's own text (numbers beyond 2^53,
	// key order, "<" and "&"), which a decode and re-encode would change.
	var out bytes.Buffer
	if json.Valid(b) && json.Indent(&out, bytes.TrimSpace(b), "", "  ") == nil {
		return out.String()
	}
	return string(b)
}

func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func sortedHeld(m map[string]int) []kvn {
	out := make([]kvn, 0, len(m))
	for k, v := range m {
		out = append(out, kvn{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].K < out[j].K })
	return out
}

type kvn struct {
	K string
	N int
}
