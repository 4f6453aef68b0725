package main

import (
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/worqr/worqr-go/worqr"
)

// The worker subcommand's stdout protocol: one event per line, words separated
// by one space, written with a single write as soon as it happens. Other
// processes (the demo, the integration and chaos tests) read it by words, so
// a new word is only ever added at the end of a line.
//
//	registered <worker_id>
//	took <queue> <task_id> <pid> <attempt> <crashes>
//	done <queue> <task_id> <pid>
//	cancelled <queue> <task_id>
//	lost <queue> <task_id> <pid>
//	retry <queue> <task_id>
//	dead <queue> <task_id>
//	keepalive_lost <worker_id>
//	recovered <queue> <count> <worker_id>[,<worker_id>...]
//
// <pid> names one taking of a task: a task taken again after a crash or a
// lost keepalive has a new pid, so a zombie's lines can be told apart from
// its successor's. <attempt> counts failed attempts plus one; <crashes>
// counts earlier runs lost because their worker died. The worker ids of a
// recovered line are the dead workers whose tasks were put back.
//
// The flow adds (see flow.go) forwarded and fanned_out lines, and took lines
// for stages whose pid and crashes words are "-" (a stage handler sees
// neither).
//
// With worker --timestamps every line starts with one more word, the time it
// was written in RFC3339Nano, UTC (2006-01-02T15:04:05.999999999Z); the words
// above follow it unchanged.
//
// Queue names, task ids, pids and worker ids never hold spaces; a word that
// would be empty is written "-".
const (
	lineRegistered    = "registered"
	lineTook          = "took"
	lineDone          = "done"
	lineCancelled     = "cancelled"
	lineLost          = "lost"
	lineKeepaliveLost = "keepalive_lost"
	lineRecovered     = "recovered"
)

// lineWriter writes whole lines to w, one at a time, so that lines from
// concurrent handlers never interleave. It does not buffer: each line is one
// Write, so an *os.File gets it at once.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
	// now, when set, stamps each line: its first word is now() in UTC,
	// RFC3339Nano. It is read under the lock, so stamps never go backwards
	// from one line to the next (unless the clock does).
	now func() time.Time
}

func (l *lineWriter) line(words ...string) error {
	s := strings.Join(words, " ") + "\n"
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.now != nil {
		s = l.now().UTC().Format(time.RFC3339Nano) + " " + s
	}
	_, err := io.WriteString(l.w, s)
	return err
}

// word returns s, or "-" when s is empty, so that a line keeps its words.
func word(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// tookLine is the line a handler prints when it starts.
func tookLine(t *worqr.Task) []string {
	return []string{lineTook, t.Queue, t.ID, word(t.PID()), strconv.Itoa(t.Attempt), strconv.Itoa(t.Crashes)}
}

// inFlow is queue as a task's lines name it: a flow's stage or child queue
// ("<flow>/<queue>" in events) without its flow, as the took lines (the
// Task's and the Run's names) do.
func inFlow(queue string) string {
	if i := strings.IndexByte(queue, '/'); i >= 0 {
		return queue[i+1:]
	}
	return queue
}

// eventLine returns the line of a worker event, or nil for the events the
// protocol leaves to the logs.
func eventLine(e worqr.Event) []string {
	switch e.Kind {
	case worqr.EventRegistered:
		return []string{lineRegistered, e.WorkerID}
	case worqr.EventDone:
		return []string{lineDone, inFlow(e.Queue), e.TaskID, word(e.PID)}
	case worqr.EventCancelled:
		return []string{lineCancelled, inFlow(e.Queue), e.TaskID}
	case worqr.EventLost:
		return []string{lineLost, inFlow(e.Queue), e.TaskID, word(e.PID)}
	case worqr.EventKeepaliveLost:
		return []string{lineKeepaliveLost, e.WorkerID}
	case worqr.EventRecovered:
		return []string{lineRecovered, e.Queue, strconv.Itoa(e.Count), word(strings.Join(e.DeadWorkers, ","))}
	case worqr.EventRetry:
		return []string{"retry", inFlow(e.Queue), e.TaskID}
	case worqr.EventDead:
		return []string{"dead", inFlow(e.Queue), e.TaskID}
	}
	return nil
}
