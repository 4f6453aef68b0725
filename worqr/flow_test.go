package worqr_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/worqr/worqr-go/defaults"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// A run started with RunOpts.ID is started once: a start repeated with the
// same id (after its reply was lost) starts nothing and says ErrDuplicate
// with the id.
func TestStartRunWithIDIsIdempotent(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	cfg := worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true}
	c, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, pool, &cfg)
	flow := newDeadChildFlow(false).flow
	opts := &worqr.RunOpts{ID: "order-42"}
	if id, err := c.StartRun(ctx, flow, map[string]string{"n": "1"}, opts); err != nil || id != "order-42" {
		t.Fatalf("first start = %q, %v", id, err)
	}
	if id, err := c.StartRun(ctx, flow, map[string]string{"n": "2"}, opts); !errors.Is(err, worqr.ErrDuplicate) || id != "order-42" {
		t.Fatalf("repeated start = %q, %v; want order-42 and ErrDuplicate", id, err)
	}
	if n := queueLen(t, in, "fl/fan"); n != 1 {
		t.Fatalf("runs waiting in the first stage: %d; want 1", n)
	}
	if r, err := in.Run(ctx, flow.Name, "order-42"); err != nil || r.State["n"] != "1" {
		t.Fatalf("the run: %+v, %v; want the first start's state", r, err)
	}
	if _, err := c.StartRun(ctx, flow, nil, &worqr.RunOpts{ID: "no spaces"}); !errors.Is(err, worqr.ErrInvalid) || !strings.Contains(err.Error(), "RunOpts.ID") {
		t.Errorf("a bad id: %v, want ErrInvalid naming RunOpts.ID", err)
	}
}

// manyFields is n state fields whose values are each size bytes.
func manyFields(n, size int) map[string]string {
	v := strings.Repeat("v", size)
	m := make(map[string]string, n)
	for i := 0; i < n; i++ {
		m[fmt.Sprintf("f%05d", i)] = v
	}
	return m
}

// invalidField returns the field an *InvalidError names, or fails.
func invalidField(t *testing.T, what string, err error) string {
	t.Helper()
	var ie *worqr.InvalidError
	if !errors.As(err, &ie) {
		t.Fatalf("%s = %v, want an *InvalidError", what, err)
	}
	return ie.Field
}

// The state a run starts with is written in one atomic step: its number of
// fields and its bytes are bounded (1,000,000 fields held Redis for 1.4 s
// in one call, 64 fields of 1 MiB for 190 ms).
func TestStartRunStateIsBounded(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	flow := &worqr.Flow{Name: "sb", Stages: []worqr.Stage{{Name: "s1", Queue: worqr.QueueConfig{Concurrency: 1},
		Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return nil, nil })}}}
	cfg := worqr.Config{Namespace: ns, DisableEvents: true}
	c, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, pool, &cfg)
	if _, err := c.StartRun(ctx, flow, manyFields(defaults.MaxStateFields+1, 1), nil); invalidField(t, "StartRun of defaults.MaxStateFields+1 fields", err) != "state" {
		t.Fatalf("StartRun of too many fields: %v, want the field named state", err)
	}
	if _, err := c.StartRun(ctx, flow, manyFields(5, 1<<20), nil); invalidField(t, "StartRun of 5 MiB of state", err) != "state" {
		t.Fatalf("StartRun of 5 MiB: %v, want the field named state", err)
	}
	if n := queueLen(t, in, "sb/s1"); n != 0 {
		t.Fatalf("%d runs waiting after refused starts, want none", n)
	}
	// At the bounds: accepted.
	if _, err := c.StartRun(ctx, flow, manyFields(defaults.MaxStateFields, 1), nil); err != nil {
		t.Fatalf("StartRun of 1,000 fields: %v", err)
	}
	if _, err := c.StartRun(ctx, flow, manyFields(3, 1<<20), nil); err != nil {
		t.Fatalf("StartRun of 3 MiB: %v", err)
	}
	// A larger MaxPayloadBytes allows one such value.
	big, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true, MaxPayloadBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := big.StartRun(ctx, flow, manyFields(1, 6<<20), nil); err != nil {
		t.Fatalf("StartRun of one 6 MiB value with MaxPayloadBytes 8 MiB: %v", err)
	}
}
