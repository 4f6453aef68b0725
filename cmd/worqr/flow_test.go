package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

func TestFlowRunsGetAndTree(t *testing.T) {
	b := setup(t)
	flow := &worqr.Flow{Name: "signup", Stages: []worqr.Stage{
		{Name: "fanout", Queue: worqr.QueueConfig{Concurrency: 2},
			Children: map[string]worqr.QueueConfig{"mail": {Concurrency: 2, Handler: worqr.HandlerFunc(
				func(context.Context, *worqr.Task) error { return nil })}},
			Handler: worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				return &worqr.StageResult{Fields: map[string]string{"seen": "yes"},
					Children: []worqr.ChildSpec{{Queue: "mail", Payload: []byte("1")}, {Queue: "mail", Payload: []byte("2")}}}, nil
			})},
		{Name: "finish", Queue: worqr.QueueConfig{Concurrency: 2}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) { return &worqr.StageResult{}, nil })},
	}}
	w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{Config: worqr.Config{Namespace: b.ns}, Flows: []*worqr.Flow{flow}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background()) //nolint:errcheck
	id, err := b.client.StartRun(context.Background(), flow, map[string]string{"user": "42"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(b.t, patience, "the run to end", func() bool {
		r, err := b.in.Run(context.Background(), flow.Name, id)
		return err == nil && r.Status == worqr.RunDone
	})
	var runs []runJSON
	if err := json.Unmarshal([]byte(b.ok("", "flow", "runs", "signup", "--status", "done", "-o", "json")), &runs); err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].ID != id || runs[0].State["seen"] != "yes" || len(runs[0].Children) != 2 {
		t.Errorf("runs: %+v", runs)
	}
	if out := b.ok("", "flow", "runs", "signup", "--status", "failed", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("failed runs: %s", out)
	}
	get := b.ok("", "flow", "get", "signup", id)
	for _, want := range []string{"status", "done", "user", "42", "children: 2"} {
		if !strings.Contains(get, want) {
			t.Errorf("flow get has no %q:\n%s", want, get)
		}
	}
	tree := b.ok("", "flow", "tree", "signup", id)
	if !strings.HasPrefix(tree, "run "+id+"  flow signup  done") || !strings.Contains(tree, "queue mail") ||
		strings.Count(tree, "  done\n") != 4 {
		t.Errorf("tree:\n%s", tree)
	}
	if r := b.run("", "flow", "get", "signup", "cv3k1s1hhc2s73b0o3ng"); r.code != 1 || !strings.Contains(r.err, "not found") {
		t.Errorf("unknown run: exit %d, stderr %q", r.code, r.err)
	}
}

// `flow cancel` cancels a run that waits (no worker serves the flow) with
// only the flow's name; a second cancel (as after a lost reply: it says
// the run is cancelled), or one of an unknown run, exits 1.
func TestFlowCancel(t *testing.T) {
	b := setup(t)
	flow := &worqr.Flow{Name: "signup", Retention: time.Minute, Stages: []worqr.Stage{{Name: "only", Queue: worqr.QueueConfig{Concurrency: 1},
		Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return &worqr.StageResult{}, nil })}}}
	id, err := b.client.StartRun(context.Background(), flow, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out := b.ok("", "flow", "cancel", "signup", id); strings.TrimSpace(out) != "cancelled "+id {
		t.Errorf("flow cancel: %q", out)
	}
	if r, err := b.in.Run(context.Background(), flow.Name, id); err != nil || r.Status != worqr.RunCancelled {
		t.Fatalf("run after flow cancel: %+v, %v", r, err)
	}
	for run, want := range map[string]string{id: "is not running: it is cancelled", "nosuchrun": "is not running (it ended and expired, or never existed)"} {
		if r := b.run("", "flow", "cancel", "signup", run); r.code != 1 || !strings.Contains(r.err, want) {
			t.Errorf("flow cancel of %s: exit %d, stderr %q; want 1, %q", run, r.code, r.err, want)
		}
	}
}

// `flow retry` runs a failed run again from the stage it failed in, with
// only the flow's name; a second retry (as after a lost reply: it says the
// run is running), or one of an unknown run, exits 1.
func TestFlowRetry(t *testing.T) {
	b := setup(t)
	var fail atomic.Bool
	fail.Store(true)
	flow := &worqr.Flow{Name: "signup", Retention: time.Minute, Stages: []worqr.Stage{{Name: "only",
		Queue: worqr.QueueConfig{Concurrency: 1, MaxAttempts: 1},
		Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
			if fail.Load() {
				return nil, errors.New("down")
			}
			return &worqr.StageResult{}, nil
		})}}}
	w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{Config: worqr.Config{Namespace: b.ns}, Flows: []*worqr.Flow{flow}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background()) //nolint:errcheck
	id, err := b.client.StartRun(context.Background(), flow, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	status := func() worqr.RunStatus {
		r, err := b.in.Run(context.Background(), flow.Name, id)
		if err != nil {
			return ""
		}
		return r.Status
	}
	redistest.WaitFor(b.t, patience, "the run to fail", func() bool { return status() == worqr.RunFailed })
	if r := b.run("", "flow", "retry", "signup", "nosuchrun"); r.code != 1 || !strings.Contains(r.err, "is not failed (it ended and expired, or never existed)") {
		t.Errorf("flow retry of an unknown run: exit %d, stderr %q", r.code, r.err)
	}
	fail.Store(false)
	if out := b.ok("", "flow", "retry", "signup", id); strings.TrimSpace(out) != "retried "+id {
		t.Errorf("flow retry: %q", out)
	}
	redistest.WaitFor(b.t, patience, "the retried run to end done", func() bool { return status() == worqr.RunDone })
	if r := b.run("", "flow", "retry", "signup", id); r.code != 1 || !strings.Contains(r.err, "is not failed: it is done") {
		t.Errorf("flow retry of a done run: exit %d, stderr %q", r.code, r.err)
	}
}

// `flow signal` delivers a signal to a run that waits for it and keeps
// one for a run that does not yet; `flow wake` wakes a sleeping run; `flow
// get` shows what a run waits for and when it wakes.
func TestFlowSignalAndWake(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	next := func(string) worqr.StageHandler {
		return worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return nil, nil })
	}
	flow := &worqr.Flow{Name: "order", Retention: time.Minute, Stages: []worqr.Stage{
		{Name: "charge", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(_ context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				if r.State["mode"] == "sleep" {
					return &worqr.StageResult{Sleep: time.Hour}, nil
				}
				return &worqr.StageResult{Await: "paid", Sleep: time.Hour}, nil
			})},
		{Name: "ship", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: next("ship")},
	}}
	w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{Config: worqr.Config{Namespace: b.ns}, Flows: []*worqr.Flow{flow}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(ctx) //nolint:errcheck
	run := func(mode string) string {
		id, err := b.client.StartRun(ctx, flow, map[string]string{"mode": mode}, nil)
		if err != nil {
			t.Fatal(err)
		}
		redistest.WaitFor(b.t, patience, "run "+id+" to sleep", func() bool {
			r, err := b.in.Run(ctx, flow.Name, id)
			return err == nil && r.Stage == "ship" && r.TaskState == "scheduled"
		})
		return id
	}
	status := func(id string) worqr.RunStatus {
		r, err := b.in.Run(ctx, flow.Name, id)
		if err != nil {
			return ""
		}
		return r.Status
	}
	awaits := run("await")
	if out := b.ok("", "flow", "get", "order", awaits); !strings.Contains(out, "awaiting     paid") || strings.Contains(out, "wake_at      -") {
		t.Errorf("flow get of a run awaiting paid:\n%s", out)
	}
	if out := b.ok("", "flow", "signal", "order", awaits, "paid", `{"amount":12}`, "--id", "evt_1"); strings.TrimSpace(out) != "delivered "+awaits {
		t.Errorf("flow signal: %q", out)
	}
	redistest.WaitFor(b.t, patience, "the signalled run to end", func() bool { return status(awaits) == worqr.RunDone })
	if r, err := b.in.Run(ctx, flow.Name, awaits); err != nil || r.State["paid"] != `{"amount":12}` {
		t.Errorf("the signalled run: %+v, %v; want paid in its state", r, err)
	}
	if r := b.run("", "flow", "signal", "order", awaits, "paid", "again", "--id", "evt_1"); r.code != 1 || !strings.Contains(r.err, "is not running") {
		t.Errorf("a signal of an ended run: exit %d, stderr %q", r.code, r.err)
	}
	sleeps := run("sleep")
	if out := b.ok("", "flow", "signal", "order", sleeps, "later"); strings.TrimSpace(out) != "kept "+sleeps {
		t.Errorf("flow signal of a run that does not await it: %q", out)
	}
	if out := b.ok("", "flow", "wake", "order", sleeps); strings.TrimSpace(out) != "woke "+sleeps {
		t.Errorf("flow wake: %q", out)
	}
	redistest.WaitFor(b.t, patience, "the woken run to end", func() bool { return status(sleeps) == worqr.RunDone })
	if r := b.run("", "flow", "wake", "order", sleeps); r.code != 1 || !strings.Contains(r.err, "does not sleep: it is done") {
		t.Errorf("flow wake of an ended run: exit %d, stderr %q", r.code, r.err)
	}
}

// flow ls lists the flows Redis knows, with their queues, counts and
// newest run, and nothing of the stand-alone queues.
func TestFlowLs(t *testing.T) {
	b := setup(t)
	if out := b.ok("", "flow", "ls"); out != `no flows in namespace "`+b.ns+`"`+"\n" {
		t.Errorf("flow ls of an empty namespace printed %q", out)
	}
	b.enqueue("emails", "a")
	flow := &worqr.Flow{Name: "signup", Stages: []worqr.Stage{
		{Name: "check", Queue: worqr.QueueConfig{Concurrency: 1},
			Children: map[string]worqr.QueueConfig{"mail": {Concurrency: 1, Handler: worqr.HandlerFunc(
				func(context.Context, *worqr.Task) error { return nil })}},
			Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
				return &worqr.StageResult{}, nil
			})},
		{Name: "finish", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return &worqr.StageResult{}, nil })},
	}}
	// No worker serves it: the run waits in its first stage.
	id, err := b.client.StartRun(context.Background(), flow, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var flows []flowJSON
	out := b.ok("", "flow", "ls", "-o", "json")
	if err := json.Unmarshal([]byte(out), &flows); err != nil {
		t.Fatalf("flow ls -o json: %v\n%s", err, out)
	}
	if len(flows) != 1 || flows[0].Flow != "signup" || flows[0].Waiting != 1 || flows[0].NewestRun == nil ||
		flows[0].NewestRun.ID != id || flows[0].NewestRun.Stage != "check" || flows[0].NewestRun.Status != "running" {
		t.Fatalf("flow ls -o json: %s", out)
	}
	if names := queueNames(flows[0].Queues); !strings.Contains(names, "signup/check") {
		t.Errorf("the queues of signup are %s; want signup/check among them", names)
	}
	table := b.ok("", "flow", "ls")
	lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "FLOW") || !strings.HasPrefix(lines[1], "signup ") ||
		!strings.Contains(lines[1], "check") || !strings.Contains(lines[1], "running at check") {
		t.Errorf("flow ls:\n%s", table)
	}
}

func queueNames(qs []queueStats) string {
	var s []string
	for _, q := range qs {
		s = append(s, q.Name)
	}
	return strings.Join(s, ",")
}
