package worqr

import (
	"context"
	"fmt"
	"time"

	"github.com/worqr/worqr-go/defaults"
)

// The outcomes the history counts (the fields of Throughput).
const (
	histEnqueued  = "enqueued"
	histDone      = "done"
	histRetried   = "retried"
	histDead      = "dead"
	histCancelled = "cancelled"
	histExpired   = "expired"
	histRecovered = "recovered"
)

var histOutcomes = []string{histEnqueued, histDone, histRetried, histDead, histCancelled, histExpired, histRecovered}

// historyOutcome is the history counter an event of kind k adds to, or "".
func historyOutcome(k EventKind) string {
	switch k {
	case EventEnqueued:
		return histEnqueued
	case EventDone, EventForwarded, EventFannedOut:
		return histDone
	case EventRetry:
		return histRetried
	case EventDead:
		return histDead
	case EventCancelled:
		return histCancelled
	case EventExpired:
		return histExpired
	case EventRecovered:
		return histRecovered
	}
	return ""
}

// Throughput counts what happened to the tasks of a queue (or of every
// queue) during one minute.
type Throughput struct {
	// Enqueued counts tasks a Client enqueued (Enqueue, EnqueueBatch,
	// ordered enqueues and bulk loads; not retries, requeues or children).
	Enqueued int64 `json:"enqueued"`
	// Done counts takings whose handler succeeded: done, and for a flow
	// stage forwarded to the next stage or fanned out.
	Done int64 `json:"done"`
	// Retried counts failed attempts scheduled to run again.
	Retried int64 `json:"retried"`
	// Dead counts tasks that went to the dead set.
	Dead int64 `json:"dead"`
	// Cancelled counts tasks cancelled (queued, scheduled or running).
	Cancelled int64 `json:"cancelled"`
	// Expired counts takings ended as expired (taken past their deadline).
	Expired int64 `json:"expired"`
	// Recovered counts tasks a reaper requeued from dead workers.
	Recovered int64 `json:"recovered"`
}

// Failed is Retried + Dead: the failed attempts.
func (t Throughput) Failed() int64 { return t.Retried + t.Dead }

func (t *Throughput) add(outcome string, n int64) {
	switch outcome {
	case histEnqueued:
		t.Enqueued += n
	case histDone:
		t.Done += n
	case histRetried:
		t.Retried += n
	case histDead:
		t.Dead += n
	case histCancelled:
		t.Cancelled += n
	case histExpired:
		t.Expired += n
	case histRecovered:
		t.Recovered += n
	}
}

// HistoryMinute is one minute of Inspector.History.
type HistoryMinute struct {
	// Minute is the minute's start.
	Minute time.Time
	// Throughput sums the minute over the queues read.
	Throughput
	// Queues holds each queue's counts (only queues that had any).
	Queues map[string]Throughput
}

// History returns the last minutes (1 to 120: Redis keeps each minute for
// two hours) of throughput, oldest first, ending
// with the current minute (which is still counting): one entry per minute,
// zeros included. queue "" reads every queue; else only that queue (a flow
// stage as "<flow>/<queue>"). It reads Redis once (one pipelined read of a
// hash per minute).
//
// Every process that publishes events (Config.DisableEvents unset) adds
// what it observed to per-minute counters in Redis with each publication,
// so the history is the sum over every worker, client and remote session
// of the namespace, whichever process reads it. A minute is the one the
// observing process's clock was in when it saw the event: the history is as
// precise as the clocks agree. A process killed (or cut off from Redis past
// its publication) loses what it observed since its last publication, at
// most one Config.EventInterval; a publication whose reply is lost is not
// sent again, so a count is never doubled, but may be missing.
func (in *Inspector) History(ctx context.Context, queue string, minutes int) ([]HistoryMinute, error) {
	if minutes < 1 || minutes > defaults.HistoryMaxMinutes {
		return nil, invalid("minutes", "(%d) must be between 1 and %d", minutes, defaults.HistoryMaxMinutes)
	}
	if queue != "" {
		if _, err := parseQueue(queue); err != nil {
			return nil, err
		}
	}
	last := time.Now().Unix() / 60
	first := last - int64(minutes) + 1
	var outcomes []string
	if queue != "" {
		outcomes = histOutcomes
	}
	counts, err := in.st.History(ctx, first, minutes, queue, outcomes)
	if err != nil {
		return nil, fmt.Errorf("worqr: history: %w", err)
	}
	out := make([]HistoryMinute, minutes)
	for i := range out {
		out[i].Minute = time.Unix((first+int64(i))*60, 0)
	}
	for _, c := range counts {
		m := &out[c.Minute-first]
		m.Throughput.add(c.Outcome, c.N)
		if m.Queues == nil {
			m.Queues = map[string]Throughput{}
		}
		q := m.Queues[c.Queue]
		q.add(c.Outcome, c.N)
		m.Queues[c.Queue] = q
	}
	return out, nil
}
