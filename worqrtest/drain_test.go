package worqrtest_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/worqr/worqr-go/worqr"
	"github.com/worqr/worqr-go/worqrtest"
)

// kinds lists the kinds of events.
func kinds(evs []worqr.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = string(ev.Kind)
	}
	return out
}

func TestDrainRunsWhatHandlersEnqueue(t *testing.T) {
	ctx := context.Background()
	env := worqrtest.New(t, nil)
	var sent atomic.Int64
	cfg := &worqr.WorkerConfig{Queues: map[string]worqr.QueueConfig{
		"signups": {Concurrency: 4, Handler: worqr.HandlerFunc(func(ctx context.Context, task *worqr.Task) error {
			// Each signup enqueues two emails, on a queue the worker serves.
			for i := range 2 {
				if _, err := env.Client().Enqueue(ctx, "emails", fmt.Appendf(nil, "%s-%d", task.Payload, i), nil); err != nil {
					return err
				}
			}
			return nil
		})},
		"emails": {Concurrency: 4, Handler: worqr.HandlerFunc(func(ctx context.Context, task *worqr.Task) error {
			sent.Add(1)
			return nil
		})},
	}}
	for i := range 10 {
		if _, err := env.Client().Enqueue(ctx, "signups", fmt.Appendf(nil, "user%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	ends := env.Drain(ctx, t, cfg)
	if sent.Load() != 20 || len(ends) != 30 {
		t.Fatalf("sent %d emails, %d ends (%v); want 20, 30", sent.Load(), len(ends), kinds(ends))
	}
	env.RequireNotEnqueued(t, "signups", worqrtest.Match{})
	env.RequireNotEnqueued(t, "emails", worqrtest.Match{})
}

func TestDrainLeavesRetriesToAdvance(t *testing.T) {
	ctx := context.Background()
	env := worqrtest.New(t, &worqrtest.Options{InProcess: true})
	cfg := &worqr.WorkerConfig{Queues: map[string]worqr.QueueConfig{
		"charges": {Concurrency: 1, Retention: time.Hour, Handler: worqr.HandlerFunc(func(ctx context.Context, task *worqr.Task) error {
			if task.Attempt < 3 {
				return worqr.RetryAfter(10*time.Minute, errors.New("bank busy"))
			}
			return nil
		})},
	}}
	id, err := env.Client().Enqueue(ctx, "charges", []byte("order-1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []worqr.EventKind{worqr.EventRetry, worqr.EventRetry, worqr.EventDone} {
		ends := env.Drain(ctx, t, cfg)
		if len(ends) != 1 || ends[0].Kind != want || ends[0].TaskID != id {
			t.Fatalf("drain %d ended %v, want [%s]", i+1, kinds(ends), want)
		}
		if want == worqr.EventRetry {
			env.RequireEnqueued(t, "charges", worqrtest.Match{Delay: 10 * time.Minute})
			// A retry not yet due is not run by a drain.
			if ends := env.Drain(ctx, t, cfg); len(ends) != 0 {
				t.Fatalf("a drain before the retry was due ran it: %v", kinds(ends))
			}
			env.Advance(t, 10*time.Minute)
		}
	}
	info, err := env.Inspector().Task(ctx, "charges", id)
	if err != nil || info.State != worqr.StateDone || info.Failures != 2 {
		t.Fatalf("task %+v, %v; want done after 2 failures", info, err)
	}
}

func TestDrainRunsAFlowToItsEnd(t *testing.T) {
	ctx := context.Background()
	env := worqrtest.New(t, nil)
	stage := func(f func(r *worqr.Run) *worqr.StageResult) worqr.StageHandler {
		return worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) { return f(r), nil })
	}
	send := worqr.HandlerFunc(func(ctx context.Context, task *worqr.Task) error {
		task.SetResult(append([]byte("sent "), task.Payload...))
		return nil
	})
	flow := &worqr.Flow{Name: "welcome", Stages: []worqr.Stage{
		{Name: "notify", Queue: worqr.QueueConfig{Concurrency: 2},
			Children: map[string]worqr.QueueConfig{"mail": {Concurrency: 2, Handler: send}},
			Handler: stage(func(r *worqr.Run) *worqr.StageResult {
				return &worqr.StageResult{Children: []worqr.ChildSpec{{Queue: "mail", Payload: []byte("a")}, {Queue: "mail", Payload: []byte("b")}}}
			})},
		{Name: "record", Queue: worqr.QueueConfig{Concurrency: 2}, Handler: stage(func(r *worqr.Run) *worqr.StageResult {
			return &worqr.StageResult{Fields: map[string]string{"children": fmt.Sprint(len(r.Children))}}
		})},
	}}
	id, err := env.Client().StartRun(ctx, flow, map[string]string{"user": "ada"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ends := env.Drain(ctx, t, &worqr.WorkerConfig{Flows: []*worqr.Flow{flow}})
	run, err := env.Inspector().Run(ctx, "welcome", id)
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != worqr.RunDone || run.State["children"] != "2" {
		t.Fatalf("run %s with state %v after the drain (ends %v), want done with 2 children", run.Status, run.State, kinds(ends))
	}
}

func TestDrainRunsAJoinToItsEnd(t *testing.T) {
	ctx := context.Background()
	env := worqrtest.New(t, nil)
	branch := func(field string) worqr.Branch {
		return worqr.Branch{Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				return &worqr.StageResult{Fields: map[string]string{field: "ok"}}, nil
			})}
	}
	flow := &worqr.Flow{Name: "checks", Stages: []worqr.Stage{
		{Name: "join", Queue: worqr.QueueConfig{Concurrency: 1},
			Branches: map[string]worqr.Branch{"fraud": branch("fraud"), "stock": branch("stock")},
			Handler: worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				return &worqr.StageResult{Fields: map[string]string{"both": r.State["fraud"] + r.State["stock"]}}, nil
			})},
	}}
	id, err := env.Client().StartRun(ctx, flow, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	env.Drain(ctx, t, &worqr.WorkerConfig{Flows: []*worqr.Flow{flow}})
	run, err := env.Inspector().Run(ctx, "checks", id)
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != worqr.RunDone || run.State["both"] != "okok" {
		t.Fatalf("run %s with state %v after the drain, want done with both branches' fields", run.Status, run.State)
	}
}

func TestDrainFailsAtItsBound(t *testing.T) {
	env := worqrtest.New(t, nil)
	if _, err := env.Client().Enqueue(context.Background(), "stuck", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	cfg := &worqr.WorkerConfig{Queues: map[string]worqr.QueueConfig{
		"stuck": {Concurrency: 1, Handler: worqr.HandlerFunc(func(ctx context.Context, task *worqr.Task) error {
			<-ctx.Done()
			return ctx.Err()
		})},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	mustFail(t, func(tb testing.TB) { env.Drain(ctx, tb, cfg) },
		"worqrtest: Drain: not drained before context deadline exceeded", `queue "stuck" holds 0 waiting and 1 running`)
}
