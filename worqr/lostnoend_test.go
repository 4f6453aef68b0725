package worqr_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/worqr/worqr-go/worqr"
)

// A worker whose keepalive is lost never ends anything under that id again
// (DESIGN, Liveness): the handler it cancelled may still return nil, but
// its taking is put back (the worker's own requeue, or a reaper's), not
// recorded as done by a worker the cluster counts as dead. The OnEvent of
// EventKeepaliveLost holds the worker's own requeue back until the
// handler's taking has been dealt with, so that an end sent anyway would
// land first and be applied.
func TestNoEndUnderALostKeepalive(t *testing.T) {
	outcome := make(chan worqr.Event, 8)
	dealt := make(chan struct{}) // closed at the first outcome of a taking
	var once sync.Once
	onEvent := func(e worqr.Event) {
		switch e.Kind {
		case worqr.EventKeepaliveLost:
			select {
			case <-dealt:
			case <-time.After(3 * time.Second):
			}
		case worqr.EventLost, worqr.EventDone, worqr.EventRetry, worqr.EventDead, worqr.EventCancelled:
			select {
			case outcome <- e:
			default:
			}
			once.Do(func() { close(dealt) })
		}
	}
	// The handler says done, though cancelled.
	l := lostMidTask(t, worqr.WorkerConfig{OnEvent: onEvent, PollInterval: time.Second},
		func(context.Context) error { return nil })
	select {
	case ev := <-outcome:
		if ev.Kind != worqr.EventLost || ev.TaskID != l.id || ev.WorkerID != l.dead {
			t.Fatalf("the cancelled taking of the lost id ended as %+v, want EventLost: nothing sent under a dead id", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no outcome for the taking of the lost id")
	}
	// Put back by the worker, run again under its new id.
	select {
	case got := <-l.started:
		if got != l.id {
			t.Fatalf("ran %s, want %s again", got, l.id)
		}
	case <-time.After(5 * time.Second):
		info, _ := l.in.Task(context.Background(), "q", l.id)
		t.Fatalf("the task was not run again under the new id: %+v", info)
	}
}
