package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/worqr/worqr-go/consumer"
)

// A Stop that comes before Start (a signal during the program's setup, or
// after a Start that failed) returns nil: the consumer is stopped. Its
// Stopped must then be closed, and a later Start refused, as a Worker's
// are: otherwise a late Start would run a consumer, dispatching and
// working jobs, whose Stop had already returned, with nobody left to stop
// it.
func TestStopBeforeStartIsFinal(t *testing.T) {
	b := setup(t)
	cfg := consumer.Config[uint64]{Name: "early", Source: newSource(9), Worker: b.fast(),
		Process: func(context.Context, uint64, uint64) error { return nil }}
	c, err := consumer.New(b.pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(context.Background()); err != nil {
		t.Fatalf("Stop before Start = %v, want nil", err)
	}
	if err := c.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop before Start = %v, want nil", err)
	}
	select {
	case <-c.Stopped():
	case <-time.After(time.Second):
		t.Error("Stopped is not closed after Stop returned")
	}
	if err := c.Start(context.Background()); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
		t.Fatal("Start after Stop = nil: a consumer runs after its Stop returned")
	}
	if p := progress(t, c); p.Next != 0 {
		t.Errorf("progress after a refused Start = %+v, want nothing dispatched", p)
	}
}
