// Package link hands packages remote and load what package worqr keeps
// unexported:
// the defaults and checks of its configuration, its event delivery, its
// recovery set-up and the readers of what it stores. remote serves worqr's
// queues as a Worker does, so it must apply the same rules; they are not
// worqr's public API.
//
// Each value is set by worqr when it is initialised (remote and load import
// worqr, so before they run) and holds a func of the type its comment
// gives; they assert each once, when they are initialised. The values are typed
// any because their types name worqr's, which this package cannot import.
package link

import (
	"context"

	"github.com/worqr/worqr-go/internal/rdb"
)

// Target is a queue a bulk load writes to, as a worqr.Client resolves it.
type Target struct {
	Store      *rdb.Store
	QK         rdb.QueueKeys
	MaxPayload int
	// MarkKnown records the queue among the known queues.
	MarkKnown func(context.Context) error
	// Enqueued reports n tasks enqueued (an EventEnqueued).
	Enqueued func(n int)
}

var (
	// ConfigDefaults: func(worqr.Config) (worqr.Config, error).
	ConfigDefaults any
	// FillQueue: func(field string, q worqr.QueueConfig) (worqr.QueueConfig, error),
	// a queue's defaults filled in and checked, batches refused.
	FillQueue any
	// ValidateFlows: func([]*worqr.Flow, func(worqr.Flow) worqr.Flow) ([]*worqr.Flow, error).
	ValidateFlows any
	// CheckName: func(field, name string) error.
	CheckName any
	// ParseQueue: func(name string) (rdb.QueueRef, error).
	ParseQueue any
	// WarnPool: func(worqr.ConnGetter, *slog.Logger).
	WarnPool any
	// NewEvents: func(*rdb.Store, worqr.Config) (emit func(worqr.Event), flush func()).
	NewEvents any
	// NewReaper: func(worqr.ConnGetter, worqr.Config, time.Duration, func(worqr.Event), func() string) (*recovery.Reaper, error).
	NewReaper any
	// InitEngine: func(*engine.Queue, rdb.Kind, string, rdb.QueueKeys, *worqr.QueueConfig, *worqr.Flow, int).
	InitEngine any
	// WriteSettings: func(context.Context, *rdb.Store, rdb.QueueKeys, *worqr.QueueConfig) error.
	WriteSettings any
	// Unwrap: func([]byte) (payload []byte, key string, payloads []worqr.Payload).
	Unwrap any
	// SplitTyped: func([]byte) (typ string, payload []byte, ok bool).
	SplitTyped any
	// ChildResults: func([]rdb.ChildRecord) []worqr.ChildResult.
	ChildResults any
	// EventOf: func(rdb.Outcome) worqr.EventKind.
	EventOf any
	// LoadTarget: func(*worqr.Client, string) (link.Target, error).
	LoadTarget any
	// CheckPayloadPrefix: func(field string, p []byte) error, refusing a
	// payload that starts as an ordered queue's envelope.
	CheckPayloadPrefix any
)
