// Package eventbus publishes the events a process observes, in batches,
// with the per-minute history counters they add to, and decodes what was
// published. Package worqr turns its Events into Wire events and back;
// this package knows their JSON, the bounds of a publication and the
// best-effort timing of the bus.
package eventbus

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/worqr/worqr-go/internal/rdb"
)

// maxBuffered caps the events a process keeps between two
// publications; more are counted in one dropped-count event.
const maxBuffered = 10000

// maxKeptBytes bounds the JSON buffer the bus keeps between two
// publications: 10,000 ordinary events take about 1.3 MB.
const maxKeptBytes = 4 << 20

// maxBatchBytes bounds the events of one publication, about their
// JSON's size (Wire.Size): more are counted in one dropped-count event,
// as past maxBuffered. Events carry their error (up to 8 KiB each): without this bound one PUBLISH could hold Redis for long
// and pass the 32 MiB a subscriber may fall behind by default, which
// disconnects every follower.
const maxBatchBytes = 4 << 20

// Wire is an event as it travels between processes (JSON).
type Wire struct {
	Kind        string   `json:"kind"`
	At          int64    `json:"at"` // unix ms, the observing process's clock
	WorkerID    string   `json:"worker,omitempty"`
	Queue       string   `json:"queue,omitempty"`
	TaskID      string   `json:"task,omitempty"`
	PID         string   `json:"pid,omitempty"`
	Err         string   `json:"err,omitempty"`
	Count       int      `json:"count,omitempty"`
	DeadWorkers []string `json:"dead_workers,omitempty"`
	RunningMs   int64    `json:"running_ms,omitempty"`
}

// Size is about the size of w's JSON: its strings as escaped
// (jsonLen), the rest estimated.
func (w Wire) Size() int {
	n := 96 + len(w.Kind) + jsonLen(w.WorkerID) + jsonLen(w.Queue) + jsonLen(w.TaskID) + jsonLen(w.PID) + jsonLen(w.Err)
	for _, d := range w.DeadWorkers {
		n += jsonLen(d) + 3
	}
	return n
}

// jsonLen is the length of s in JSON, quotes left out, as
// appendJSONString (encoding/json) escapes it: an error's '<', '>', '&',
// control bytes and bytes that are not UTF-8 take 6 bytes each (\u003c,
// \ufffd), and an error of 8 KiB of them 48 KiB.
func jsonLen(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f':
				n += 2
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || r == '\u2028' || r == '\u2029' {
			n += 6
		} else {
			n += size
		}
		i += size
	}
	return n
}

// appendWires appends batch as a JSON array to dst: the bytes
// json.Marshal makes of it, without its reflection, and into a buffer the
// bus keeps from one publication to the next, so that a busy worker
// (thousands of events four times a second) does not grow and clear a
// fresh megabyte buffer each time. A string that needs escaping goes
// through json.Marshal.
func appendWires(dst []byte, batch []Wire) ([]byte, error) {
	dst = append(dst, '[')
	var err error
	for i, w := range batch {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"kind":`...)
		if dst, err = appendJSONString(dst, w.Kind); err != nil {
			return dst, err
		}
		dst = append(dst, `,"at":`...)
		dst = strconv.AppendInt(dst, w.At, 10)
		for _, f := range [...]struct{ name, v string }{
			{`,"worker":`, w.WorkerID}, {`,"queue":`, w.Queue}, {`,"task":`, w.TaskID}, {`,"pid":`, w.PID}, {`,"err":`, w.Err},
		} {
			if f.v == "" {
				continue
			}
			dst = append(dst, f.name...)
			if dst, err = appendJSONString(dst, f.v); err != nil {
				return dst, err
			}
		}
		if w.Count != 0 {
			dst = append(dst, `,"count":`...)
			dst = strconv.AppendInt(dst, int64(w.Count), 10)
		}
		if len(w.DeadWorkers) > 0 {
			dst = append(dst, `,"dead_workers":[`...)
			for j, d := range w.DeadWorkers {
				if j > 0 {
					dst = append(dst, ',')
				}
				if dst, err = appendJSONString(dst, d); err != nil {
					return dst, err
				}
			}
			dst = append(dst, ']')
		}
		if w.RunningMs != 0 {
			dst = append(dst, `,"running_ms":`...)
			dst = strconv.AppendInt(dst, w.RunningMs, 10)
		}
		dst = append(dst, '}')
	}
	return append(dst, ']'), nil
}

// appendJSONString appends s as a JSON string, as json.Marshal writes it.
func appendJSONString(dst []byte, s string) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, err := json.Marshal(s)
			return append(dst, q...), err
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"'), nil
}

// Decode decodes one published batch.
func Decode(data []byte) ([]Wire, error) {
	var ws []Wire
	if err := json.Unmarshal(data, &ws); err != nil {
		return nil, err
	}
	return ws, nil
}

// Bus collects the events a process observes and publishes them in
// batches: at most one message per interval, sent by a timer armed by the
// first event after a publication, so an idle process sends nothing and
// needs no goroutine of its own. Publication is best effort: a batch that
// fails to publish is dropped (and logged). The same publication adds the
// per-minute history counters gathered since the last one (see Add);
// they are kept for the next one only when nothing reached Redis.
type Bus struct {
	st          *rdb.Store
	interval    time.Duration
	logLen      int
	logger      *slog.Logger
	droppedKind string // the kind of the event that counts those dropped

	mu      sync.Mutex
	buf     []Wire
	size    int    // about the bytes of buf's JSON (Wire.Size)
	spare   []Wire // the array of the last publication's batch, for the next one
	dropped int
	counts  map[histKey]int64 // history counters since the last publication
	armed   bool
	sendMu  sync.Mutex // one publication at a time, in order
	failed  bool       // the last publication failed (logged once per outage)
	wbuf    []byte     // the last publication's JSON, reused (sendMu held)
}

// histKey is one per-minute counter a process adds up between two
// publications of its events.
type histKey struct {
	minute  int64 // unix minute, on the observing process's clock
	queue   string
	outcome string
}

// New returns a bus that publishes to st at most once per interval, keeps
// logLen events in the namespace's log, and names the event that counts
// those dropped (past the buffer's bounds) of kind dropped.
func New(st *rdb.Store, interval time.Duration, logLen int, logger *slog.Logger, dropped string) *Bus {
	return &Bus{st: st, interval: interval, logLen: logLen, logger: logger, droppedKind: dropped}
}

// Add queues w for the next publication, and adds max(w.Count, 1) to the
// history counter outcome of w's queue and minute ("" adds to none).
func (b *Bus) Add(w Wire, outcome string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.buf) >= maxBuffered {
		b.dropped++
	} else if n := w.Size(); b.size+n > maxBatchBytes {
		b.dropped++
	} else {
		b.buf = append(b.buf, w)
		b.size += n
	}
	if outcome != "" && w.Queue != "" {
		if b.counts == nil {
			b.counts = map[histKey]int64{}
		}
		b.counts[histKey{minute: w.At / 60_000, queue: w.Queue, outcome: outcome}] += int64(max(w.Count, 1))
	}
	b.arm()
}

// arm schedules the next publication, unless one is scheduled. b.mu held.
func (b *Bus) arm() {
	if !b.armed {
		b.armed = true
		time.AfterFunc(b.interval, b.Flush)
	}
}

// Flush publishes what is buffered.
func (b *Bus) Flush() {
	b.sendMu.Lock()
	defer b.sendMu.Unlock()
	b.mu.Lock()
	batch, dropped, counts := b.buf, b.dropped, b.counts
	b.buf, b.size, b.dropped, b.counts, b.armed = b.spare, 0, 0, nil, false
	b.spare = nil
	b.mu.Unlock()
	defer func() {
		// The batch's array serves again (a busy process would grow a new
		// one of thousands of events four times a second).
		clear(batch)
		b.mu.Lock()
		b.spare = batch[:0]
		b.mu.Unlock()
		if cap(b.wbuf) > maxKeptBytes {
			b.wbuf = nil // a burst of long errors (stack traces) is not kept for good
		}
	}()
	if dropped > 0 {
		batch = append(batch, Wire{Kind: b.droppedKind, At: time.Now().UnixMilli(), Count: dropped})
	}
	if len(batch) == 0 && len(counts) == 0 {
		return
	}
	var data []byte
	var err error
	if len(batch) > 0 {
		b.wbuf, err = appendWires(b.wbuf[:0], batch)
		data = b.wbuf
	}
	if err == nil {
		hist := make([]rdb.HistCount, 0, len(counts))
		for k, n := range counts {
			hist = append(hist, rdb.HistCount{Minute: k.minute, Queue: k.queue, Outcome: k.outcome, N: n})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = b.st.PublishEvents(ctx, data, b.logLen, hist...)
		cancel()
		if errors.Is(err, rdb.ErrNotSent) {
			b.keep(counts) // nothing reached Redis: count them next time
		}
	}
	switch {
	case err != nil && !b.failed:
		b.failed = true
		b.logger.Warn("worqr: publishing events failed (they are dropped until it works again)", "events", len(batch), "err", err)
	case err == nil:
		b.failed = false
	}
}

// keep puts counts that were not sent back for the next publication (the
// events themselves are dropped), and arms it: a process that observes
// nothing more still sends them once Redis answers again. Minutes older
// than the history keeps are dropped.
func (b *Bus) keep(counts map[histKey]int64) {
	oldest := time.Now().Unix()/60 - rdb.HistoryMaxMinutes
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, n := range counts {
		if k.minute <= oldest {
			continue
		}
		if b.counts == nil {
			b.counts = map[histKey]int64{}
		}
		b.counts[k] += n
	}
	if len(b.counts) > 0 {
		b.arm()
	}
}
