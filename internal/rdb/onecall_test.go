package rdb_test

import (
	"context"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/rdb"
)

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
