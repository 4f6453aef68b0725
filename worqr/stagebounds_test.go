package worqr_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

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
	if _, err := c.StartRun(ctx, flow, manyFields(worqr.MaxStateFields+1, 1)); invalidField(t, "StartRun of MaxStateFields+1 fields", err) != "state" {
		t.Fatalf("StartRun of too many fields: %v, want the field named state", err)
	}
	if _, err := c.StartRun(ctx, flow, manyFields(5, 1<<20)); invalidField(t, "StartRun of 5 MiB of state", err) != "state" {
		t.Fatalf("StartRun of 5 MiB: %v, want the field named state", err)
	}
	if n := queueLen(t, in, "sb/s1"); n != 0 {
		t.Fatalf("%d runs waiting after refused starts, want none", n)
	}
	// At the bounds: accepted.
	if _, err := c.StartRun(ctx, flow, manyFields(worqr.MaxStateFields, 1)); err != nil {
		t.Fatalf("StartRun of MaxStateFields fields: %v", err)
	}
	if _, err := c.StartRun(ctx, flow, manyFields(3, 1<<20)); err != nil {
		t.Fatalf("StartRun of 3 MiB: %v", err)
	}
	// A larger MaxPayloadBytes allows one such value.
	big, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true, MaxPayloadBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := big.StartRun(ctx, flow, manyFields(1, 6<<20)); err != nil {
		t.Fatalf("StartRun of one 6 MiB value with MaxPayloadBytes 8 MiB: %v", err)
	}
}

// A stage's end writes its fields and creates its children in one atomic
// step: a result past the bounds is refused (the stage goes to the dead
// set with the reason, nothing written), as one naming an undeclared child
// queue is. A fan-out of 1,000 children of 1 MiB held Redis for 4 s.
func TestStageResultIsBounded(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	cfg := fastTimings(ns)
	cfg.DisableEvents = true
	results := map[string]*worqr.StageResult{
		"fields": {Fields: manyFields(worqr.MaxStateFields+1, 1)},
		"bytes":  {Fields: manyFields(5, 1<<20)},
		"children": {Fields: map[string]string{"a": strings.Repeat("x", 1<<20)}, Children: func() []worqr.ChildSpec {
			cs := make([]worqr.ChildSpec, 4)
			for i := range cs {
				cs[i] = worqr.ChildSpec{Queue: "kid", Payload: make([]byte, 1<<20)}
			}
			return cs
		}()},
		"fine": {Fields: manyFields(worqr.MaxStateFields, 1), Children: []worqr.ChildSpec{{Queue: "kid", Payload: make([]byte, 2<<20-100)}}},
	}
	flow := &worqr.Flow{Name: "sb", Retention: time.Minute, Stages: []worqr.Stage{
		{Name: "s1", Queue: worqr.QueueConfig{Concurrency: 4, MaxAttempts: 3},
			Handler: worqr.StageHandlerFunc(func(_ context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				return results[r.State["case"]], nil
			}),
			Children: map[string]worqr.QueueConfig{"kid": {Concurrency: 1, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil })}}},
	}}
	cfg.Flows = []*worqr.Flow{flow}
	cfg.MaxPayloadBytes = 2 << 20
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for name := range results {
		id, err := c.StartRun(ctx, flow, map[string]string{"case": name})
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = id
	}
	startWorker(t, ctx, pool, &cfg)
	want := map[string]string{"fields": "StageResult.Fields of stage s1", "bytes": "StageResult.Fields of stage s1", "children": "StageResult.Children"}
	for name, id := range ids {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		info, err := c.WaitRun(wctx, flow, id)
		cancel()
		if err != nil {
			t.Fatalf("%s: run never ended: %v", name, err)
		}
		if name == "fine" {
			if info.Status != worqr.RunDone || len(info.Children) != 1 {
				t.Errorf("%s: run %s with %d children (%s), want done with its child", name, info.Status, len(info.Children), info.LastError)
			}
			continue
		}
		if info.Status != worqr.RunFailed || !strings.Contains(info.LastError, want[name]) || len(info.Children) != 0 {
			t.Errorf("%s: run %s with %d children, last error %.200q; want failed, no child, the error naming %s",
				name, info.Status, len(info.Children), info.LastError, want[name])
		}
		if len(info.State) > 2 {
			t.Errorf("%s: the refused result wrote %d fields", name, len(info.State))
		}
	}
}

// The same bounds hold for a remote's Forward and FanOut (the gateway's
// forward and fan_out): refused, naming the field, the taking still held.
func TestRemoteStageResultIsBounded(t *testing.T) {
	ctx := context.Background()
	flow := &worqr.Flow{Name: "rb", Stages: []worqr.Stage{
		{Name: "split", Children: map[string]worqr.QueueConfig{"part": {}}},
	}}
	b := setupRemote(t, ctx, worqr.RemoteConfig{Flows: []*worqr.Flow{flow}})
	cf := &worqr.Flow{Name: "rb", Stages: []worqr.Stage{
		{Name: "split", Handler: worqr.StageHandlerFunc(nil), Queue: worqr.QueueConfig{Concurrency: 1},
			Children: map[string]worqr.QueueConfig{"part": {Handler: worqr.HandlerFunc(nil), Concurrency: 1}}},
	}}
	if _, err := b.client.StartRun(ctx, cf, nil); err != nil {
		t.Fatal(err)
	}
	s := open(t, b, "rb/split", "rb/part")
	k := takeOne(t, s, "rb/split", 0)
	if _, err := s.Forward(ctx, k.PID, manyFields(worqr.MaxStateFields+1, 1)); invalidField(t, "forward of too many fields", err) != "fields" {
		t.Fatalf("forward of too many fields: %v, want the field named fields", err)
	}
	if _, err := s.Forward(ctx, k.PID, manyFields(5, 1<<20)); invalidField(t, "forward of 5 MiB", err) != "fields" {
		t.Fatalf("forward of 5 MiB: %v, want the field named fields", err)
	}
	cs := make([]worqr.ChildSpec, 5)
	for i := range cs {
		cs[i] = worqr.ChildSpec{Queue: "part", Payload: make([]byte, 1<<20)}
	}
	if _, err := s.FanOut(ctx, k.PID, nil, cs); invalidField(t, "fan-out of 5 MiB", err) != "children" {
		t.Fatalf("fan-out of 5 MiB: %v, want the field named children", err)
	}
	// Still held: a fan-out within the bounds ends it.
	if out, err := s.FanOut(ctx, k.PID, map[string]string{"a": "b"}, cs[:3]); err != nil || out != worqr.EventFannedOut {
		t.Fatalf("fan-out of 3 MiB = %q, %v; want fanned out", out, err)
	}
}
