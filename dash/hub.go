package dash

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/worqr/worqr-go/worqr"
)

// queuesFunc is Inspector.Queues (tests count its calls).
type queuesFunc func(ctx context.Context) ([]worqr.QueueInfo, error)

// historyFunc is Inspector.History.
type historyFunc func(ctx context.Context, queue string, minutes int) ([]worqr.HistoryMinute, error)

// tickerFunc starts the poll loop's ticker: its channel and its Stop (tests
// drive the ticks and see the loop stop).
type tickerFunc func(d time.Duration) (c <-chan time.Time, stop func())

// systemTicker is a time.Ticker.
func systemTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// chartMinutes is how many per-minute buckets the throughput chart keeps.
const chartMinutes = 60

// maxRelayed caps the worqr events relayed to browsers per broadcast.
const maxRelayed = 50

// message is one server-sent event, encoded once for every client.
type message struct {
	event string
	data  []byte
}

// hub is the one broadcaster of a Dashboard. While at least one browser is
// subscribed it polls the queues' counts and the last two minutes of the
// throughput history (the minute before may still get late publications)
// once per interval and, on the same tick, relays the worqr events gathered
// from Follow since the last one;
// every message is encoded once and fanned out to every subscriber. A
// subscriber that does not keep up loses messages (never blocks the hub).
type hub struct {
	queues   queuesFunc
	history  historyFunc
	ticker   tickerFunc
	interval time.Duration
	log      *slog.Logger

	mu      sync.Mutex
	subs    map[chan message]struct{}
	stop    chan struct{} // closes the running poll loop; nil when none runs
	last    *message      // latest queues snapshot, for new subscribers
	status  *message      // latest Redis status, for new subscribers
	down    time.Time     // when the polls began to fail; zero while Redis answers
	pending []eventJSON   // events since the last broadcast
	skipped int           // events beyond maxRelayed since the last broadcast
	closed  bool
	polled  time.Time // when the last poll started: a new loop waits out the interval
}

// bucket is one minute of the chart, from Inspector.History.
type bucket struct {
	Minute   int64 `json:"t"` // unix minute
	Enqueued int64 `json:"enqueued"`
	Done     int64 `json:"done"`
	Failed   int64 `json:"failed"` // retries and deaths
}

// statusJSON tells the browser whether the last poll reached Redis: its
// live indicator turns red while it does not (the counts on the page are
// then as of Since).
type statusJSON struct {
	Redis bool  `json:"redis"`
	Since int64 `json:"since,omitempty"` // unix ms of the first failed poll
}

// pollTimeout bounds one poll, so that a Redis that hangs (rather than
// refuses) is reported down within a few seconds too.
const pollTimeout = 3 * time.Second

type eventJSON struct {
	Kind   string `json:"kind"`
	At     int64  `json:"at"`
	Queue  string `json:"queue,omitempty"`
	TaskID string `json:"task,omitempty"`
	Worker string `json:"worker,omitempty"`
	Err    string `json:"err,omitempty"`
	Count  int    `json:"count,omitempty"`
}

func newHub(queues queuesFunc, history historyFunc, ticker tickerFunc, interval time.Duration, log *slog.Logger) *hub {
	return &hub{queues: queues, history: history, ticker: ticker, interval: interval, log: log, subs: map[chan message]struct{}{}}
}

// event is Follow's callback: it keeps e for the next broadcast while a
// browser watches.
func (h *hub) event(e worqr.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stop == nil {
		return // nobody watches
	}
	if len(h.pending) >= maxRelayed {
		h.skipped++
		return
	}
	ej := eventJSON{Kind: string(e.Kind), At: e.At.UnixMilli(), Queue: e.Queue, TaskID: e.TaskID, Worker: e.WorkerID, Count: e.Count}
	if e.Err != nil {
		ej.Err = e.Err.Error()
	}
	h.pending = append(h.pending, ej)
}

// bucketsOf turns Inspector.History into the chart's buckets.
func bucketsOf(hs []worqr.HistoryMinute) []bucket {
	out := make([]bucket, len(hs))
	for i, m := range hs {
		out[i] = bucket{Minute: m.Minute.Unix() / 60, Enqueued: m.Enqueued, Done: m.Done, Failed: m.Failed()}
	}
	return out
}

// emptyChart is the chart of an hour with nothing in it (when History
// fails).
func emptyChart(now time.Time) []bucket {
	out := make([]bucket, chartMinutes)
	m := now.Unix()/60 - chartMinutes + 1
	for i := range out {
		out[i].Minute = m + int64(i)
	}
	return out
}

// subscribe registers a browser; the returned channel gets the latest
// snapshot first. The first subscriber starts the poll loop.
func (h *hub) subscribe() (chan message, bool) {
	ch := make(chan message, 16)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, false
	}
	h.subs[ch] = struct{}{}
	if h.last != nil {
		ch <- *h.last
	}
	if h.status != nil {
		ch <- *h.status
	}
	if h.stop == nil {
		h.stop = make(chan struct{})
		go h.loop(h.stop)
	}
	return ch, true
}

// unsubscribe removes a browser; the last one stops the poll loop.
func (h *hub) unsubscribe(ch chan message) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[ch]; !ok {
		return
	}
	delete(h.subs, ch)
	close(ch)
	if len(h.subs) == 0 && h.stop != nil {
		close(h.stop)
		h.stop, h.last, h.status, h.pending, h.skipped = nil, nil, nil, nil, 0
	}
}

func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for ch := range h.subs {
		delete(h.subs, ch)
		close(ch)
	}
	if h.stop != nil {
		close(h.stop)
		h.stop = nil
	}
}

// loop polls at once, then once per interval, until stop closes.
func (h *hub) loop(stop chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-stop
		cancel()
	}()
	h.mu.Lock()
	wait := h.interval - time.Since(h.polled)
	h.mu.Unlock()
	if wait > 0 { // a loop stopped and restarted within one interval
		select {
		case <-stop:
			return
		case <-time.After(wait):
		}
	}
	tick, stopTicker := h.ticker(h.interval)
	defer stopTicker()
	for {
		h.poll(ctx, stop)
		select {
		case <-stop:
			return
		case <-tick:
		}
	}
}

// poll reads the counts and the last two minutes of history once and
// broadcasts them with the pending events, then Redis's status: whether
// the counts could be read.
func (h *hub) poll(ctx context.Context, stop chan struct{}) {
	h.mu.Lock()
	h.polled = time.Now()
	h.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	qs, err := h.queues(pctx)
	if ctx.Err() != nil {
		return
	}
	var hs []worqr.HistoryMinute
	if err == nil { // Redis answered: the history is worth asking
		var herr error
		if hs, herr = h.history(pctx, "", 2); herr != nil && ctx.Err() == nil {
			h.log.Warn("dash: reading the history failed", "err", herr)
		}
	}
	if ctx.Err() != nil {
		return
	}
	var snap *message
	if err == nil {
		data, _ := json.Marshal(queuesJSON(qs))
		snap = &message{event: "queues", data: data}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stop != stop {
		return
	}
	st := statusJSON{Redis: err == nil}
	switch {
	case err != nil && h.down.IsZero():
		h.down = h.polled
		h.log.Warn("dash: reading queues failed: the browsers are told Redis is down", "err", err)
	case err == nil && !h.down.IsZero():
		h.log.Info("dash: Redis answers again", "down_for", time.Since(h.down).Round(time.Millisecond).String())
		h.down = time.Time{}
	}
	if !h.down.IsZero() {
		st.Since = h.down.UnixMilli()
	}
	data, _ := json.Marshal(st)
	h.status = &message{event: "status", data: data}
	var msgs []message
	if snap != nil {
		h.last = snap
		msgs = append(msgs, *snap)
	}
	if len(h.pending) > 0 || h.skipped > 0 {
		data, _ := json.Marshal(struct {
			Events  []eventJSON `json:"events"`
			Skipped int         `json:"skipped"`
		}{h.pending, h.skipped})
		msgs = append(msgs, message{event: "events", data: data})
		h.pending, h.skipped = nil, 0
	}
	for _, b := range bucketsOf(hs) {
		data, _ := json.Marshal(b)
		msgs = append(msgs, message{event: "minute", data: data})
	}
	msgs = append(msgs, *h.status)
	for ch := range h.subs {
		for _, m := range msgs {
			select {
			case ch <- m:
			default: // a slow browser misses this one
			}
		}
	}
}

// queueJSON is one queue as the browser gets it.
type queueJSON struct {
	Name           string `json:"name"`
	Waiting        int64  `json:"waiting"`
	Behind         int64  `json:"behind"`
	Scheduled      int64  `json:"scheduled"`
	Active         int64  `json:"active"`
	OldestActiveMS int64  `json:"oldest_active_ms"`
	Dead           int64  `json:"dead"`
	Paused         bool   `json:"paused"`
	LatencyMS      int64  `json:"latency_ms"`
}

func queuesJSON(qs []worqr.QueueInfo) []queueJSON {
	out := make([]queueJSON, len(qs))
	for i, q := range qs {
		out[i] = queueJSON{Name: q.Name, Waiting: q.Waiting, Behind: q.Behind, Scheduled: q.Scheduled, Active: q.Active,
			OldestActiveMS: q.OldestActive.Milliseconds(), Dead: q.Dead, Paused: q.Paused, LatencyMS: q.Latency.Milliseconds()}
	}
	return out
}
