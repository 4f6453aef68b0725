package worqr_test

import (
	"context"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/internal/seam"
	"github.com/worqr/worqr-go/worqr"
)

// Events are best effort: a task that ends with no event published (here
// its cancel comes from a client that publishes none; in production, the
// process that ended it was killed first) is still seen by Wait, which
// reads the task again every WaitRecheck.
func TestWaitRereadsWithoutEvents(t *testing.T) {
	ctx := context.Background()
	pool := newCmdPool()
	cfg := worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true}
	c, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.Enqueue(ctx, "q", []byte("p"), &worqr.EnqueueOpts{Retention: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	clock := seam.NewManualClock(time.Now())
	waitCtx, cancel := context.WithTimeout(seam.WithHeartbeatClock(ctx, clock), 30*time.Second)
	defer cancel()
	reads := pool.count("HGETALL")
	waited := make(chan *worqr.TaskInfo, 1)
	go func() {
		info, err := c.Wait(waitCtx, "q", id)
		if err != nil {
			t.Error(err)
		}
		waited <- info
	}()
	// Its first read (once subscribed) finds the task waiting.
	for pool.count("HGETALL") == reads {
		select {
		case <-waited:
			t.Fatal("Wait returned before the task ended")
		case <-waitCtx.Done():
			t.Fatal("Wait never read the task")
		case <-time.After(time.Millisecond):
		}
	}
	if st, err := c.Cancel(ctx, "q", id); err != nil || st != worqr.CancelRemoved {
		t.Fatalf("Cancel = %v, %v", st, err)
	}
	stop := clock.Run(worqr.WaitRecheck, 10*time.Millisecond)
	defer stop()
	select {
	case info := <-waited:
		if info == nil || info.State != worqr.StateCancelled {
			t.Fatalf("Wait returned %+v, want the cancelled task", info)
		}
	case <-waitCtx.Done():
		t.Fatal("Wait did not see the task end: no event came, and it did not read it again")
	}
}
