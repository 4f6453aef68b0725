package worqr_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// A dead child of an earlier fan-out (ContinueOnChildFailure) is not
// requeued while the run waits for the children of a later one: the run
// moved on from its fan-out. It was put back into the later fan-out, and
// the run went back to a stage it had run (found by a review): each
// fan-out is numbered in the run ('kg') and on its children ('pe').
func TestDeadChildOfAnEarlierFanOutIsRefused(t *testing.T) {
	ctx := context.Background()
	var fan2Runs, kid1Runs atomic.Int32
	var fail atomic.Bool
	fail.Store(true)
	hold2 := make(chan struct{})
	hold1 := make(chan struct{})
	flow := &worqr.Flow{Name: "fl", Retention: time.Minute, Stages: []worqr.Stage{
		{Name: "fan1", Queue: worqr.QueueConfig{Concurrency: 1}, ContinueOnChildFailure: true,
			Children: map[string]worqr.QueueConfig{"kids1": {Concurrency: 2, Handler: worqr.HandlerFunc(
				func(ctx context.Context, t *worqr.Task) error {
					if string(t.Payload) == "2" {
						return nil
					}
					kid1Runs.Add(1)
					if fail.Load() {
						return worqr.SkipRetry(errors.New("down"))
					}
					select {
					case <-hold1:
					case <-ctx.Done():
						return ctx.Err()
					}
					return nil
				})}},
			Handler: worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				return &worqr.StageResult{Children: []worqr.ChildSpec{{Queue: "kids1", Payload: []byte("1")}, {Queue: "kids1", Payload: []byte("2")}}}, nil
			})},
		{Name: "fan2", Queue: worqr.QueueConfig{Concurrency: 1},
			Children: map[string]worqr.QueueConfig{"kids2": {Concurrency: 2, Handler: worqr.HandlerFunc(
				func(ctx context.Context, t *worqr.Task) error {
					select {
					case <-hold2:
					case <-ctx.Done():
						return ctx.Err()
					}
					return nil
				})}},
			Handler: worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				fan2Runs.Add(1)
				return &worqr.StageResult{Children: []worqr.ChildSpec{{Queue: "kids2", Payload: []byte("x")}}}, nil
			})},
		{Name: "after", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) { return nil, nil })},
	}}
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	cfg := fastTimings(ns)
	cfg.Flows = []*worqr.Flow{flow}
	startWorker(t, ctx, pool, &cfg)
	t.Cleanup(func() {
		for _, c := range []chan struct{}{hold1, hold2} {
			select {
			case <-c:
			default:
				close(c)
			}
		}
	})
	ccfg := worqr.Config{Namespace: ns, DisableEvents: true}
	c, err := worqr.NewClient(pool, &ccfg)
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, pool, &ccfg)
	id, err := c.StartRun(ctx, flow, nil)
	if err != nil {
		t.Fatal(err)
	}
	var dead []string
	wait(t, 20*time.Second, "the kids1 child to die and fan2 to fan out", func() bool {
		dead = deadIDs(t, in, "fl/kids1")
		r, err := in.Run(ctx, flow.Name, id)
		return len(dead) == 1 && err == nil && r.Stage == "fan2" && r.TaskState == "children"
	})
	fail.Store(false)
	n, err := in.RequeueDead(ctx, "fl/kids1", dead[0])
	if n != 0 || !errors.Is(err, worqr.ErrInvalid) || !strings.Contains(err.Error(), dead[0]) {
		t.Fatalf("RequeueDead of a child of fan1 while the run waits in fan2 = %d, %v; want 0 and ErrInvalid naming it", n, err)
	}
	if got := deadIDs(t, in, "fl/kids1"); len(got) != 1 || got[0] != dead[0] {
		t.Fatalf("dead children of fan1 after the refused requeue: %v, want %v", got, dead)
	}
	if runs := kid1Runs.Load(); runs != 1 {
		t.Fatalf("the fan1 child ran %d times, want once", runs)
	}
}
