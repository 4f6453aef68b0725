package worqrtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/worqr/worqr-go/worqr"
	"github.com/worqr/worqr-go/worqrtest"
)

func TestWorkDone(t *testing.T) {
	env := worqrtest.New(t, nil)
	h := worqr.HandlerFunc(func(ctx context.Context, task *worqr.Task) error {
		task.SetResult(append([]byte("hi "), task.Payload...))
		return nil
	})
	res := env.Work(context.Background(), t, h, []byte("bob"), nil)
	if res.Kind != worqr.EventDone || res.Attempt != 1 || res.Task == nil || string(res.Task.Result) != "hi bob" {
		t.Fatalf("got %+v", res)
	}
}

func TestWorkRetry(t *testing.T) {
	env := worqrtest.New(t, nil)
	h := worqr.HandlerFunc(func(ctx context.Context, task *worqr.Task) error {
		return errors.New("boom")
	})
	start := time.Now()
	res := env.Work(context.Background(), t, h, []byte("bob"), &worqrtest.WorkOpts{
		QueueConfig: worqr.QueueConfig{Backoff: func(int, error) time.Duration { return time.Hour }},
		Attempt:     3,
	})
	t.Logf("%s %+v %+v", time.Since(start), res, res.Task)
	if res.Kind != worqr.EventRetry || res.Attempt != 3 || !res.RetryAt.Equal(env.Now().Add(time.Hour)) {
		t.Fatalf("got %+v", res)
	}
}
