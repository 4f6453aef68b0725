package rdb_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
)

// stepIDs returns n ids, 250 a step (rdb.EnqueueStep), each step's ids
// sharing a packed hash of their own ("s<step>-"), so that a test can make
// one step fail.
func stepIDs(n int) ([]string, [][]byte) {
	ids := make([]string, n)
	ps := make([][]byte, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%d-%03d", i/rdb.EnqueueStep, i%rdb.EnqueueStep)
		ps[i] = []byte("p" + ids[i])
	}
	return ids, ps
}

// A batch split into steps and sent many at once stops at a step Redis
// refuses (an error reply: OOM under maxmemory, here a key of the wrong
// type), and the steps sent behind it are not applied: what is enqueued is
// the first `done` tasks, as EnqueueBatch (and worqr.BatchError: "none
// after it was") says. Before, the steps already on the wire ran all the
// same: the queue held the tasks of the steps after the refused one, with
// a hole where it was, and a caller that sent the rest again (from done)
// enqueued them twice.
func TestBatchStepsAfterARefusedOneAreNotApplied(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args *rdb.EnqueueArgs
		bad  func(e *env, ids []string) string // the key that makes step 3 fail
	}{
		{"packed", nil, func(e *env, ids []string) string { k, _ := e.q.Packed(ids[3*rdb.EnqueueStep]); return k }},
		{"a hash per task", &rdb.EnqueueArgs{MaxAttempts: 3}, func(e *env, ids []string) string { return e.q.Task(ids[3*rdb.EnqueueStep]) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ids, ps := stepIDs(8 * rdb.EnqueueStep)
			e.do(t, "SET", tc.bad(e, ids), "not a hash")
			done, _, err := e.st.EnqueueBatch(e.ctx, e.q, ids, ps, tc.args)
			if err == nil {
				t.Fatal("a batch with a refused step succeeded")
			}
			if done != 3*rdb.EnqueueStep {
				t.Fatalf("done = %d (%v), want %d: the steps before the refused one", done, err, 3*rdb.EnqueueStep)
			}
			got, _ := redis.Strings(e.c.Do("LRANGE", e.q.Waiting, 0, -1))
			if len(got) != done {
				t.Fatalf("the queue holds %d tasks after a batch that reports %d done (%v): the steps sent behind the refused one were applied", len(got), done, err)
			}
			for i, id := range got {
				if id != ids[i] {
					t.Fatalf("waiting %d is %s, want %s", i, id, ids[i])
				}
			}
		})
	}
}

// A client that took the first step's reply for lost closes the batch's
// guard and reads how far it got: a first step still on its way must then
// be refused, or it would apply after the client said it had not.
func TestStepZeroAfterTheGuardClosedIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	guard := e.q.StepsPrefix + "b1"
	if last, ok := e.st.StepsApplied(e.ctx, e.q, guard, io.ErrUnexpectedEOF); !ok || last != -1 {
		t.Fatalf("StepsApplied = %d, %v; want -1 (no step applied)", last, ok)
	}
	_, err := e.st.EnqueueKeyStep(e.ctx, e.q, "k", []string{"a1"}, [][]byte{[]byte("p")}, nil, nil,
		&rdb.StepGuard{Key: guard, Step: 0})
	if !errors.Is(err, rdb.ErrStepRefused) {
		t.Fatalf("step 0 after the close: %v; want ErrStepRefused", err)
	}
	if n, err := redis.Int(e.c.Do("EXISTS", e.q.Task("a1"))); err != nil || n != 0 {
		t.Fatalf("the refused step wrote its task (%d, %v)", n, err)
	}
	// Without a closed guard, step 0 applies and opens it.
	g2 := e.q.StepsPrefix + "b2"
	if _, err := e.st.EnqueueKeyStep(e.ctx, e.q, "k", []string{"a2"}, [][]byte{[]byte("p")}, nil, nil,
		&rdb.StepGuard{Key: g2, Step: 0}); err != nil {
		t.Fatal(err)
	}
	if last, ok := e.st.StepsApplied(e.ctx, e.q, g2, io.ErrUnexpectedEOF); !ok || last != 0 {
		t.Fatalf("StepsApplied after step 0 = %d, %v; want 0", last, ok)
	}
}

// The guard of a batch of one call (EnqueueBatch, plain or keyed) must
// outlive the call: after a lost reply the client closes it and reads
// whether the call applied, and a guard gone reads as "not applied". Its
// TTL is 30 s past the call's deadline (the call's own at most 30 s); a call with no
// deadline, or a later one, waited on a connection gone silent until TCP
// gave up (about 15 minutes), and a call applied was then reported as
// not: 0 enqueued, and a resend ran every task twice. The call is bounded
// so that its deadline always comes 30 s before its guard expires.
func TestOneCallGuardOutlivesTheCall(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration // 0: none
	}{
		{"no deadline", 0},
		{"a deadline in 10 s", 10 * time.Second},
		{"a deadline in 4 min", 4 * time.Minute},
		{"a deadline in 10 min", 10 * time.Minute},
		{"a deadline in an hour", time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			if tc.timeout > 0 {
				ctx, cancel = context.WithTimeout(context.Background(), tc.timeout)
			}
			defer cancel()
			cctx, ccancel := rdb.OneCallContext(ctx)
			defer ccancel()
			ttl := rdb.OneCallGuardTTL
			dl, ok := cctx.Deadline()
			if !ok {
				t.Fatalf("the call has no deadline; its guard lives %v", ttl)
			}
			if left := time.Until(dl); ttl < left+29*time.Second {
				t.Errorf("the guard lives %v, the call up to %v: a reply lost near its deadline finds it gone", ttl, left)
			}
			if odl, ok := ctx.Deadline(); ok && dl.After(odl) {
				t.Errorf("the call's deadline %v is later than its caller's %v", dl, odl)
			}
		})
	}
}
