package worqr_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/worqr/worqr-go/worqr"
)

// A keyed EnqueueBatch is sent in steps of at most 1,000 tasks (one call
// each, in order). When the reply of a step is lost after Redis applied it
// (a connection reset), the BatchError must still say how many tasks are
// in (BatchError: "the first Enqueued tasks are in the queue, and none
// after them", short of Redis being out of reach): a caller that resends
// the rest, as the error invites, otherwise enqueues the step's tasks
// twice, each key running them again.
func TestKeyedBatchWithALostReplySaysWhatIsIn(t *testing.T) {
	ctx := context.Background()
	pool, in, c := keyedLossClient(t)
	ps := batchPayloads(2500) // three steps: 1,000, 1,000, 500
	for step := 1; step <= 3; step++ {
		key := fmt.Sprintf("K%d", step)
		pool.setLose(nthCall("enqueue_key", step))
		ids, err := c.EnqueueBatch(ctx, "kb", ps, &worqr.EnqueueOpts{Key: key})
		pool.setLose(nil)
		var be *worqr.BatchError
		if !errors.As(err, &be) {
			t.Fatalf("step %d lost: EnqueueBatch: %v; want a *BatchError", step, err)
		}
		if len(ids) != be.Enqueued {
			t.Errorf("step %d lost: %d ids returned, BatchError.Enqueued %d", step, len(ids), be.Enqueued)
		}
		k, err := in.Key(ctx, "kb", key)
		if err != nil || k == nil {
			t.Fatalf("Key: %+v %v", k, err)
		}
		if n := k.Behind + 1; n != be.Enqueued {
			t.Errorf("step %d lost: %d tasks of the key in Redis, BatchError says %d of %d enqueued (%v): a retry of the rest, as the error advises, enqueues %d twice",
				step, n, be.Enqueued, be.Total, be.Err, n-be.Enqueued)
		}
	}
}

// A keyed EnqueueBatch of one call (10 tasks) whose reply was lost after
// Redis applied it said 0 of 10 enqueued, as a plain one did
// (TestBatchOfOneCallWithItsReplyLostSaysWhatIsIn).
func TestKeyedBatchOfOneCallWithItsReplyLostSaysWhatIsIn(t *testing.T) {
	ctx := context.Background()
	pool, in, c := keyedLossClient(t)
	ps := batchPayloads(10)
	pool.setLose(nthCall("enqueue_key", 1))
	ids, err := c.EnqueueBatch(ctx, "kb", ps, &worqr.EnqueueOpts{Key: "K"})
	pool.setLose(nil)
	var be *worqr.BatchError
	if !errors.As(err, &be) || len(ids) != be.Enqueued {
		t.Fatalf("EnqueueBatch: %v, %d ids; want a *BatchError saying as many", err, len(ids))
	}
	k, err := in.Key(ctx, "kb", "K")
	if err != nil || k == nil {
		t.Fatalf("Key: %+v %v", k, err)
	}
	if n := k.Behind + 1; n != be.Enqueued {
		t.Errorf("%d tasks of the key in Redis, BatchError says %d of %d enqueued (%v): a retry, as the error advises, enqueues %d twice",
			n, be.Enqueued, be.Total, be.Err, n-be.Enqueued)
	}
}

// keyedLossClient is replyLossClient with the scripts loaded (the nth
// call of a test is then the batch's nth step, applied).
func keyedLossClient(t *testing.T) (*replyLossPool, *worqr.Inspector, *worqr.Client) {
	t.Helper()
	pool, _, c, in := replyLossClient(t)
	if _, err := c.Enqueue(context.Background(), "warm", []byte("x"), &worqr.EnqueueOpts{Key: "K"}); err != nil {
		t.Fatal(err)
	}
	return pool, in, c
}
