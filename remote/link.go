package remote

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/worqr/worqr-go/internal/engine"
	"github.com/worqr/worqr-go/internal/link"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/recovery"
	"github.com/worqr/worqr-go/worqr"
)

// The rules a Server shares with a worqr.Worker, as package worqr hands
// them over (see internal/link). worqr is initialised before this package,
// so each is set; a type that no longer matches panics here, when the
// package is initialised, not when it runs.
var (
	configDefaults = link.ConfigDefaults.(func(worqr.Config) (worqr.Config, error))
	fillQueue      = link.FillQueue.(func(string, worqr.QueueConfig) (worqr.QueueConfig, error))
	validateFlows  = link.ValidateFlows.(func([]*worqr.Flow, func(worqr.Flow) worqr.Flow) ([]*worqr.Flow, error))
	checkName      = link.CheckName.(func(string, string) error)
	parseQueue     = link.ParseQueue.(func(string) (rdb.QueueRef, error))
	warnPool       = link.WarnPool.(func(worqr.ConnGetter, *slog.Logger))
	newEvents      = link.NewEvents.(func(*rdb.Store, worqr.Config) (func(worqr.Event), func()))
	newReaper      = link.NewReaper.(func(worqr.ConnGetter, worqr.Config, time.Duration, func(worqr.Event), func() string) (*recovery.Reaper, error))
	initEngine     = link.InitEngine.(func(*engine.Queue, rdb.Kind, string, rdb.QueueKeys, *worqr.QueueConfig, *worqr.Flow, int))
	writeSettings  = link.WriteSettings.(func(context.Context, *rdb.Store, rdb.QueueKeys, *worqr.QueueConfig) error)
	unwrap         = link.Unwrap.(func([]byte) ([]byte, string, []worqr.Payload))
	splitTyped     = link.SplitTyped.(func([]byte) (string, []byte, bool))
	childResults   = link.ChildResults.(func([]rdb.ChildRecord) []worqr.ChildResult)
	eventOf        = link.EventOf.(func(rdb.Outcome) worqr.EventKind)
)

// callTimeout bounds one Redis call a Server makes on its own behalf.
const callTimeout = engine.CallTimeout

// invalid is bad input, as worqr reports it.
func invalid(field, format string, args ...any) error {
	return &worqr.InvalidError{Field: field, Rule: fmt.Sprintf(format, args...)}
}

// asInvalid is an engine's *engine.InputError as an *worqr.InvalidError.
func asInvalid(err error) error {
	if ie := (*engine.InputError)(nil); errors.As(err, &ie) {
		return invalid(ie.Field, "%s", ie.Rule)
	}
	return err
}

// emitCancelled reports the takings of queue that a requeue or a release
// ended as cancelled (their cancel was asked while they were held).
func emitCancelled(emit func(worqr.Event), queue string, cs []rdb.Cancelled) {
	for _, c := range cs {
		emit(worqr.Event{Kind: worqr.EventCancelled, Queue: queue, TaskID: c.ID, PID: c.PID, WorkerID: c.Worker})
	}
}

// emitTakenOut reports the cancels of tasks ks of a flow's tag that a
// stop took out of where they waited.
func emitTakenOut(emit func(worqr.Event), tag string, ks []rdb.QueuedTask) {
	for _, k := range ks {
		emit(worqr.Event{Kind: worqr.EventCancelled, Queue: rdb.QueueRef{Tag: tag, Name: k.Queue}.Member(), TaskID: k.ID})
	}
}
