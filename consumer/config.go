package consumer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/worqr/worqr-go/defaults"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/worqr"
)

// Source finds jobs by index. Jobs exist at every index from Config.First
// to the head, and a job found at an index stays the same job.
type Source[J any] interface {
	// Head returns the highest index at which a job exists, or ErrNotFound
	// when there is none yet.
	Head(ctx context.Context) (uint64, error)
	// AtIndex returns the job at index i. An error (ErrNotFound included)
	// fails the attempt: it is retried with backoff.
	AtIndex(ctx context.Context, i uint64) (J, error)
}

// ProcessFunc works the job at index i. Return nil when the job is done.
// An error or a panic fails the attempt: the job is retried with backoff,
// never skipped (worqr.RetryAfter picks the delay, worqr.ErrGiveBack puts
// it back at once without counting an attempt; worqr.SkipRetry is not
// honoured). ctx ends on the attempt's Timeout, when this process loses its
// keepalive and when Stop runs out of time.
//
// Execution is at-least-once: a job runs again when its process died
// before the consumer recorded it done, so ProcessFunc must be idempotent.
type ProcessFunc[J any] func(ctx context.Context, i uint64, job J) error

// Limits and defaults.
const (
	// MaxIndex is the largest index a consumer works (indexes are counted
	// exactly inside Redis scripts up to 2^53).
	MaxIndex = rdb.MaxConsumerIndex
	// MaxNameLen is the longest consumer name, in bytes.
	MaxNameLen = defaults.MaxNameLen - len(queuePrefix)
	// DefaultMaxProcessing is Config.MaxProcessing's default.
	DefaultMaxProcessing = 10
	// MaxSearchAheadLimit is the largest MaxSearchAhead: the finished
	// indexes above the processed one are kept in one Redis set.
	MaxSearchAheadLimit = 1_000_000
	// DefaultCheckInterval is Config.CheckInterval's default.
	DefaultCheckInterval = time.Second
)

// queuePrefix starts the name of a consumer's queue.
const queuePrefix = "consumer."

// QueueName returns the worqr queue that consumer name works its jobs in
// (one task per index in flight, id and payload the index in decimal): the
// queue to look at with worqr's Inspector and CLI.
func QueueName(name string) string { return queuePrefix + name }

// Config is what a Consumer needs. Name, Source and Process are required;
// every other field has a default, given in its comment.
type Config[J any] struct {
	// Name identifies the consumer: processes that run a consumer of the
	// same name (and namespace) share its progress and its jobs. Same rules
	// as queue names, at most MaxNameLen bytes.
	Name string
	// Source finds the jobs. Required.
	Source Source[J]
	// Process works one job. Required.
	Process ProcessFunc[J]
	// First is the index of the first job, used when Redis holds no
	// progress for this consumer yet (then the first process to dispatch
	// sets it). Default 0. At most MaxIndex.
	First uint64
	// MaxProcessing bounds the jobs in flight (dispatched and not done,
	// running or waiting for a retry) across every process of the
	// consumer. Default 10.
	MaxProcessing int
	// MaxSearchAhead bounds how far past the lowest unfinished index a job
	// may be dispatched: index i runs only when i < processed index +
	// MaxSearchAhead, so one slow job cannot let the finished ones above it
	// pile up. Default 10 × MaxProcessing, at most 1,000,000.
	MaxSearchAhead int
	// Concurrency is how many jobs this process runs at once. Default
	// MaxProcessing.
	Concurrency int
	// Backoff returns how long to wait before the next attempt of a job
	// after failed attempt number attempt (1-based). Default
	// DefaultBackoff.
	Backoff func(attempt int, err error) time.Duration
	// Timeout is the deadline of each attempt's context. Default 0: none.
	Timeout time.Duration
	// MaxCrashes is how many processes may die while running one job
	// before its task goes to the dead set of the consumer's queue (see
	// QueueName), so that a job that kills its process cannot take every
	// process down in turn. Progress then stops at that index until the
	// task is requeued (worqr.Inspector.RequeueDead) or purged (which
	// dispatches it afresh). Negative: no limit. Default 5.
	MaxCrashes int
	// CheckInterval is how often the consumer checks for new jobs without
	// being told (Check): it also retries a check that failed. Default 1s;
	// negative: never.
	CheckInterval time.Duration
	// OnProcessed, when set, is called with the processed index after a
	// job's record in this process, when the index has moved past the job
	// and above what the last call said (the next consumer of a pipeline
	// whose Source reads this one's progress checks then). It runs on the
	// job's goroutine, one call at a time, and must return quickly. With
	// Worker.Replicas, a record waits for the replicas as an end does, and
	// OnProcessed is told only of records they acknowledged in time (a
	// failover cannot take back a processed index it reported).
	OnProcessed func(processed uint64)
	// OnError, when set, is called with each check that failed (the
	// Source's Head, or Redis); the next check tries again. It runs on the
	// consumer's goroutine and must return quickly.
	OnError func(error)
	// Worker holds the settings of the worqr worker the consumer runs
	// (namespace, logger, heartbeat and reaper timings, events). Its Queues
	// and Flows must be empty.
	Worker worqr.WorkerConfig
}

// DefaultBackoff waits 1s after the first failed attempt and doubles each
// time up to a minute (a consumer's progress waits for the job), with
// equal jitter: the wait is uniformly random in [d/2, d].
func DefaultBackoff(attempt int, _ error) time.Duration {
	d := time.Minute
	if attempt < 7 {
		d = min(time.Second<<max(attempt-1, 0), time.Minute)
	}
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// invalid returns a worqr.InvalidError naming the field and the rule.
func invalid(field, format string, args ...any) error {
	return &worqr.InvalidError{Field: "consumer.Config." + field, Rule: fmt.Sprintf(format, args...)}
}

// withDefaults returns a validated copy of c with defaults filled in.
func (c *Config[J]) withDefaults() (Config[J], error) {
	if c == nil {
		return Config[J]{}, invalid("Config", "is nil")
	}
	out := *c
	if len(out.Name) > MaxNameLen {
		return out, invalid("Name", "is %d bytes long (at most %d)", len(out.Name), MaxNameLen)
	}
	var ie *worqr.InvalidError
	if err := worqr.CheckQueueName(out.Name); errors.As(err, &ie) {
		return out, invalid("Name", "%s", ie.Rule)
	}
	if out.Source == nil {
		return out, invalid("Source", "is nil")
	}
	if out.Process == nil {
		return out, invalid("Process", "is nil")
	}
	if out.First > MaxIndex {
		return out, invalid("First", "(%d) must be at most MaxIndex (%d)", out.First, uint64(MaxIndex))
	}
	switch {
	case out.MaxProcessing == 0:
		out.MaxProcessing = DefaultMaxProcessing
	case out.MaxProcessing < 0:
		return out, invalid("MaxProcessing", "(%d) must not be negative", out.MaxProcessing)
	}
	switch {
	case out.MaxSearchAhead == 0:
		out.MaxSearchAhead = min(10*out.MaxProcessing, MaxSearchAheadLimit)
	case out.MaxSearchAhead < 0 || out.MaxSearchAhead > MaxSearchAheadLimit:
		return out, invalid("MaxSearchAhead", "(%d) must be between 1 and %d", out.MaxSearchAhead, MaxSearchAheadLimit)
	}
	switch {
	case out.Concurrency == 0:
		out.Concurrency = out.MaxProcessing
	case out.Concurrency < 0:
		return out, invalid("Concurrency", "(%d) must not be negative", out.Concurrency)
	}
	if out.Backoff == nil {
		out.Backoff = DefaultBackoff
	}
	if out.Timeout < 0 {
		return out, invalid("Timeout", "(%s) must not be negative", out.Timeout)
	}
	if out.CheckInterval == 0 {
		out.CheckInterval = DefaultCheckInterval
	}
	if len(out.Worker.Queues) > 0 || len(out.Worker.Flows) > 0 {
		return out, invalid("Worker", "has Queues or Flows: a consumer's worker serves the consumer's queue alone")
	}
	return out, nil
}
