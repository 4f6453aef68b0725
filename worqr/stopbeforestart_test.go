package worqr_test

import (
	"context"
	"testing"
	"time"

	"github.com/worqr/worqr-go/worqr"
)

// A Stop that comes before Start (a signal that arrives while the program
// is still setting up, or a Start that failed) returns nil at once: the
// worker is stopped. Stopped must then be closed, as its doc says ("Stop
// returned"), and a later Start must be refused: before, Stopped stayed
// open forever and the late Start ran a worker whose Stop had already
// returned, with nobody left to stop it.
func TestStopBeforeStartIsFinal(t *testing.T) {
	pool, ns, _, _ := freshNamespace(t)
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: worqr.Config{Namespace: ns},
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 1,
			Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil })}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatalf("Stop before Start = %v, want nil", err)
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop before Start = %v, want nil", err)
	}
	select {
	case <-w.Stopped():
	case <-time.After(time.Second):
		t.Error("Stopped is not closed after Stop returned")
	}
	if err := w.Start(context.Background()); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
		t.Fatal("Start after Stop = nil: a worker runs after its Stop returned")
	}
	if id := w.ID(); id != "" {
		t.Errorf("ID after a refused Start = %q, want \"\" (never registered)", id)
	}
}
