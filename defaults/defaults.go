// Package defaults holds the defaults and bounds of worqr's configuration
// and inputs, for tools that show them or check a value before a call
// (worqr's CLI and example binary do). A program rarely needs it: a zero
// field takes its default, and a value out of bounds is refused with an
// InvalidError that names the bound. Each is documented on the field or
// call it applies to, in package worqr.
package defaults

import (
	"time"

	"github.com/worqr/worqr-go/internal/engine"
	"github.com/worqr/worqr-go/internal/rdb"
)

// Defaults of Config, WorkerConfig and SchedulerConfig.
const (
	Namespace         = "worqr"
	HeartbeatInterval = time.Second
	HeartbeatTTL      = 3 * time.Second
	ReaperInterval    = time.Second
	PollInterval      = time.Second
	EventInterval     = 250 * time.Millisecond
	ReplicaTimeout    = time.Second
	// RunRetention is how long an ended flow run is kept.
	RunRetention = 24 * time.Hour
)

// Bounds.
const (
	// MinInterval is the shortest heartbeat, reaper and poll interval:
	// leases and keepalives are set in whole milliseconds.
	MinInterval = 10 * time.Millisecond
	// MaxReplicaTimeout is the longest Config.ReplicaTimeout: a worker
	// bounds an end call at 5 s.
	MaxReplicaTimeout = 4 * time.Second
	// MaxNameLen is the longest queue name, namespace or task type, in bytes.
	MaxNameLen = 100
	// MaxScheduleNameLen is the longest schedule name, in bytes.
	MaxScheduleNameLen = 80
	// MaxKeyLen is the longest task key (EnqueueOpts.Key), in bytes.
	MaxKeyLen = 512
	// MaxProgressLen is the longest progress report, in bytes.
	MaxProgressLen = 1024
	// MaxKeyBatch is the largest QueueConfig.KeyBatch.
	MaxKeyBatch = rdb.MaxKeyBatch
	// MaxAttemptHistory is how many failed attempts a task keeps.
	MaxAttemptHistory = rdb.HistoryMax
	// HistoryMaxMinutes is the most minutes of history Redis keeps (and
	// Inspector.History reads).
	HistoryMaxMinutes = rdb.HistoryMaxMinutes
	// MaxMetaBytes, MaxStateFields, MaxStageBytes and MaxChildren bound a
	// task's or run's metadata, and what a start or a stage's end writes.
	MaxMetaBytes   = engine.MaxMetaBytes
	MaxStateFields = engine.MaxStateFields
	MaxStageBytes  = engine.MaxStageBytes
	MaxChildren    = engine.MaxChildren
)
