package worqr_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

func TestSmokeRetryThenDone(t *testing.T) {
	pool := srv.TagCheckedPool(t)
	ns := redistest.Namespace()
	ctx := context.Background()
	c, _ := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	var runs atomic.Int32
	events := make(chan worqr.Event, 100)
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{
		Config:         worqr.Config{Namespace: ns},
		ReaperInterval: 50 * time.Millisecond,
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 2, MaxAttempts: 3, Retention: time.Minute,
			Backoff: func(int, error) time.Duration { return 100 * time.Millisecond },
			Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
				if runs.Add(1) < 3 {
					return errors.New("boom")
				}
				t.SetResult([]byte("ok"))
				return nil
			})}},
		OnEvent: func(e worqr.Event) { events <- e },
	})
	if err != nil {
		t.Fatal(err)
	}
	w.Start(ctx)
	defer w.Stop(ctx)
	id, err := c.Enqueue(ctx, "q", []byte("p"), nil)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(5 * time.Second)
	for {
		select {
		case e := <-events:
			t.Log(e.Kind, e.TaskID, e.Err)
			if e.Kind == worqr.EventDone {
				info, err := c.Task(ctx, "q", id)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%+v", info)
				if runs.Load() != 3 || string(info.Result) != "ok" || info.State != worqr.StateDone {
					t.Fatal("bad")
				}
				return
			}
		case <-deadline:
			t.Fatal("timeout")
		}
	}
}
