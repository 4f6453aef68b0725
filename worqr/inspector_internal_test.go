package worqr

import (
	"context"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/rdb"
)

// A task that ran when CancelAll's pass over the waiting tasks went by and
// was given back to its queue (here by the reaper's requeue of a dead
// worker) before CancelAll read the running ones was in neither, and was
// left waiting (found by an audit).
func TestCancelAllCancelsATaskGivenBackMeanwhile(t *testing.T) {
	ctx := context.Background()
	pool, ns, c := internalClient(t)
	in, err := NewInspector(pool, &Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.Enqueue(ctx, "ca", []byte("x"), &EnqueueOpts{Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	qk := in.st.Queue(rdb.Standalone("ca"))
	conn := pool.Get()
	defer conn.Close()
	// id runs for a worker that died: its taking is held, the list empty.
	if _, err := conn.Do("LREM", qk.Waiting, 0, id); err != nil {
		t.Fatal(err)
	}
	strandTaking(t, conn, qk, "ghost", id)
	if _, err := conn.Do("SADD", qk.Holders, "ghost"); err != nil {
		t.Fatal(err)
	}
	defer in.hooks.cancelAllActive.set(func() {
		if n, _, err := in.st.Requeue(ctx, qk, []string{"ghost"}, true); err != nil || n != 1 {
			t.Errorf("requeue of ghost = %d, %v", n, err)
		}
	})()
	n, err := in.CancelAll(ctx, "ca", nil)
	if err != nil || n != 1 {
		t.Errorf("CancelAll = %d, %v; want 1", n, err)
	}
	got, err := in.Task(ctx, "ca", id)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StateCancelled {
		t.Errorf("%s is %s after CancelAll, want cancelled", id, got.State)
	}
}
