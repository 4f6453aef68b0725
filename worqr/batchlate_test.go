package worqr_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// The first step of a large EnqueueBatch that has not reached Redis when
// its call fails: the client closes the batch's
// guard, finds no step applied and says 0 enqueued. When that step
// reaches Redis afterwards it must be refused (step 0 applies only where
// no guard is), or 250 tasks are in the queue that the BatchError said
// were not, and a caller that resends the batch runs them twice. Both
// first-step scripts (enqueue_packed here, enqueue with options) check it.
//
// A batch of one call (10 tasks) whose call has not reached Redis when it
// fails is refused the same way when it arrives late (it carries the guard
// of TestBatchOfOneCallWithItsReplyLostSaysWhatIsIn).
func TestBatchFirstStepArrivingAfterTheCloseIsRefused(t *testing.T) {
	cases := []struct {
		name, script string
		opts         *worqr.EnqueueOpts
		n            int
	}{
		{"packed", "enqueue_packed", nil, 10 * 250}, // ten steps
		{"with options", "enqueue", &worqr.EnqueueOpts{MaxAttempts: 3}, 10 * 250},
	}
	for _, b := range oneCallBatches() {
		cases = append(cases, struct {
			name, script string
			opts         *worqr.EnqueueOpts
			n            int
		}{"one call, " + b.name, b.script, b.opts, 10})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			base := srv.Pool()
			defer base.Close()
			// The call picked is not sent, and fails as a broken
			// connection would; the test sends it later, as a request
			// stuck in a proxy or a kernel buffer reaches Redis after
			// the client gave up on it.
			var (
				mu   sync.Mutex
				pick func(cmd string, args []any) bool
				held []any // the command held: its name, then its arguments
			)
			pool := &hookPool{pool: base, refuse: func(cmd string, args []any) error {
				mu.Lock()
				defer mu.Unlock()
				if pick == nil || held != nil || !pick(cmd, args) {
					return nil
				}
				held = append([]any{cmd}, args...)
				return errLostReply
			}}
			cfg := worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true}
			c, err := worqr.NewClient(pool, &cfg)
			if err != nil {
				t.Fatal(err)
			}
			in := newInspector(t, pool, &cfg)
			// The library loaded: the held call runs when sent late.
			if _, err := c.Enqueue(ctx, "warm", []byte("x"), nil); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			pick = nthCall(tc.script, 1)
			mu.Unlock()
			ps := batchPayloads(tc.n)
			ids, err := c.EnqueueBatch(ctx, "late", ps, tc.opts)
			var be *worqr.BatchError
			if !errors.As(err, &be) || be.Enqueued != 0 || held == nil {
				t.Fatalf("EnqueueBatch: %v (held %v); want a *BatchError saying 0 enqueued", err, held != nil)
			}
			// The first step reaches Redis now.
			rc, err := redis.DialURL(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			r, err := rc.Do(held[0].(string), held[1:]...)
			t.Logf("the late first step: %v %v", r, err)
			checkBatchError(t, in, "late", ps, ids, be)
		})
	}
}
