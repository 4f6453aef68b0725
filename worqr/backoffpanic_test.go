package worqr_test

import (
	"context"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// A QueueConfig.Backoff that panics (a type assertion on the error that
// did not hold, a nil map) was called on the handler goroutine outside the
// handler's recover: the whole worker process crashed at each failed
// attempt, every other running handler with it, and the task ran again
// elsewhere until MaxCrashes buried it as crashed. A panic in the handler
// is a failed attempt; one in its Backoff now is too, retried after the
// default backoff. The worker runs in a child process (a crash would end
// the test binary).
func TestBackoffThatPanicsIsNoCrash(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	ch := startChild(t, "backoffpanic", ns)
	id, err := c.Enqueue(ctx, "bp", []byte("p"), nil)
	if err != nil {
		t.Fatal(err)
	}
	// The default backoff after a first failure is 0.5 to 1 s.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := c.Wait(wctx, "bp", id)
	if err != nil || info.State != worqr.StateDone || info.Failures != 1 {
		t.Fatalf("Wait = %+v, %v; want done after one failed attempt (worker exited: %v)", info, err, ch.cmd.ProcessState)
	}
	if ch.cmd.ProcessState != nil {
		t.Fatalf("the worker process exited: %v", ch.cmd.ProcessState)
	}
}
