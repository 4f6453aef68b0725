package worqr_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

func TestSmokeFlowFanOut(t *testing.T) {
	pool := srv.TagCheckedPool(t)
	ns := redistest.Namespace()
	ctx := context.Background()
	c, _ := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	reward := worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
		t.SetResult(append([]byte("sent:"), t.Payload...))
		return nil
	})
	flow := &worqr.Flow{
		Name:    "membership",
		IndexBy: []string{"userId"},
		Stages: []worqr.Stage{
			{Name: "access-check", Queue: worqr.QueueConfig{Concurrency: 2}, Handler: worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				return &worqr.StageResult{Fields: map[string]string{"allowed": "yes"}}, nil
			})},
			{Name: "manage-reward", Queue: worqr.QueueConfig{Concurrency: 2},
				Children: map[string]worqr.QueueConfig{"discord": {Concurrency: 2, Handler: reward}, "telegram": {Concurrency: 2, Handler: reward}},
				Handler: worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
					return &worqr.StageResult{Children: []worqr.ChildSpec{{Queue: "discord", Payload: []byte(r.State["userId"])}, {Queue: "telegram", Payload: []byte("t")}}}, nil
				})},
			{Name: "notify", Queue: worqr.QueueConfig{Concurrency: 2}, Handler: worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				return &worqr.StageResult{Fields: map[string]string{"children": strconv.Itoa(len(r.Children)), "allowed_seen": r.State["allowed"]}}, nil
			})},
		},
	}
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: worqr.Config{Namespace: ns}, Flows: []*worqr.Flow{flow}})
	if err != nil {
		t.Fatal(err)
	}
	w.Start(ctx)
	defer w.Stop(ctx)
	id, err := c.StartRun(ctx, flow, map[string]string{"userId": "42"})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		info, err := c.Run(ctx, flow, id)
		if err != nil {
			t.Fatal(err)
		}
		if info.Status == worqr.RunDone {
			t.Logf("%+v", info)
			if info.State["children"] != "2" || info.State["allowed_seen"] != "yes" {
				t.Fatal("bad state")
			}
			runs, err := c.FindRuns(ctx, flow, "userId", "42")
			if err != nil || len(runs) != 1 {
				t.Fatal("find", runs, err)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("timeout")
}
