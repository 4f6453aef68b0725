package main

import (
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/worqr/worqr-go/worqr"
)

// The worker subcommand's stdout protocol: one event per line, words separated
// by one space, written with a single write as soon as it happens. Other
// processes (the demo, the integration tests) read it.
//
//	registered <worker_id>
//	took <queue> <task_id> <pid> <attempt>
//	done <queue> <task_id>
//	cancelled <queue> <task_id>
//	lost <queue> <task_id> <pid>
//	keepalive_lost <worker_id>
//	recovered <queue> <count>
//
// Queue names, task ids, pids and worker ids never hold spaces.
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
}

func (l *lineWriter) line(words ...string) error {
	s := strings.Join(words, " ") + "\n"
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := io.WriteString(l.w, s)
	return err
}

// tookLine is the line a handler prints when it starts.
func tookLine(t *worqr.Task) []string {
	return []string{lineTook, t.Queue, t.ID, t.PID(), strconv.Itoa(t.Attempt)}
}

// eventLine returns the line of a worker event, or nil for the events the
// protocol leaves to the logs.
func eventLine(e worqr.Event) []string {
	switch e.Kind {
	case worqr.EventRegistered:
		return []string{lineRegistered, e.WorkerID}
	case worqr.EventDone:
		return []string{lineDone, e.Queue, e.TaskID}
	case worqr.EventCancelled:
		return []string{lineCancelled, e.Queue, e.TaskID}
	case worqr.EventLost:
		return []string{lineLost, e.Queue, e.TaskID, e.PID}
	case worqr.EventKeepaliveLost:
		return []string{lineKeepaliveLost, e.WorkerID}
	case worqr.EventRecovered:
		return []string{lineRecovered, e.Queue, strconv.Itoa(e.Count)}
	case worqr.EventRetry:
		return []string{"retry", e.Queue, e.TaskID}
	case worqr.EventDead:
		return []string{"dead", e.Queue, e.TaskID}
	}
	return nil
}
