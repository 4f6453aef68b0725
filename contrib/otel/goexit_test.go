package otelworqr_test

import (
	"context"
	"runtime"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	otelworqr "github.com/worqr/worqr-go/contrib/otel"
	"github.com/worqr/worqr-go/worqr"
)

// goexits runs f on a goroutine of its own and waits for it to end.
func goexits(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

// A handler (or a stage) that ends its goroutine with runtime.Goexit (as
// testing's t.FailNow does) fails its attempt (worqr.ErrHandlerExited):
// its span ended with status Unset and no error, as a success (found by an
// audit).
func TestGoexitMarksSpanError(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	h := otelworqr.Middleware(tp)(worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
		runtime.Goexit()
		return nil
	}))
	goexits(func() {
		_ = h.HandleTask(context.Background(), &worqr.Task{ID: "t1", Queue: "q", Payload: []byte("p"), Attempt: 1})
	})
	s := otelworqr.StageMiddleware(tp)(worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
		runtime.Goexit()
		return nil, nil
	}))
	goexits(func() {
		_, _ = s.HandleStage(context.Background(), &worqr.Run{ID: "r", Flow: "f", Stage: "s", Attempt: 1})
	})
	ended := sr.Ended()
	if len(ended) != 2 {
		t.Fatalf("%d spans ended, want 2", len(ended))
	}
	for _, sp := range ended {
		if sp.Status().Code != codes.Error {
			t.Errorf("span %q: status %v %q, want Error (the attempt failed: %v)", sp.Name(), sp.Status().Code, sp.Status().Description, worqr.ErrHandlerExited)
		}
		recorded := false
		for _, ev := range sp.Events() {
			for _, a := range ev.Attributes {
				if a.Key == "exception.message" && a.Value.AsString() == worqr.ErrHandlerExited.Error() {
					recorded = true
				}
			}
		}
		if !recorded {
			t.Errorf("span %q: no exception event for %v (events %v)", sp.Name(), worqr.ErrHandlerExited, sp.Events())
		}
	}
}
