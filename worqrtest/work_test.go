package worqrtest_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
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
	if left := time.Until(res.Deadline); res.Kind != worqr.EventDone || res.Err != nil || res.Attempt != 1 ||
		left > 30*time.Minute || left < 29*time.Minute {
		t.Fatalf("got %+v, want done on attempt 1 under the queue's 30-minute time limit", res)
	}
	if res.Task == nil || res.Task.State != worqr.StateDone || string(res.Task.Result) != "hi bob" {
		t.Fatalf("task %+v, want done with result %q", res.Task, "hi bob")
	}
}

func TestWorkOutcomes(t *testing.T) {
	env := worqrtest.New(t, &worqrtest.Options{InProcess: true})
	boom := errors.New("boom")
	hour := func(int, error) time.Duration { return time.Hour }
	for _, tc := range []struct {
		name    string
		handler func(ctx context.Context, task *worqr.Task) error
		opts    *worqrtest.WorkOpts
		kind    worqr.EventKind
		state   worqr.TaskState
		attempt int
		retryIn time.Duration // 0: no retry
	}{
		{"error", func(context.Context, *worqr.Task) error { return boom },
			&worqrtest.WorkOpts{QueueConfig: worqr.QueueConfig{Backoff: hour}}, worqr.EventRetry, worqr.StateScheduled, 1, time.Hour},
		{"retry after", func(context.Context, *worqr.Task) error { return worqr.RetryAfter(5*time.Minute, boom) },
			nil, worqr.EventRetry, worqr.StateScheduled, 1, 5 * time.Minute},
		{"third attempt", func(context.Context, *worqr.Task) error { return boom },
			&worqrtest.WorkOpts{QueueConfig: worqr.QueueConfig{Backoff: hour}, Attempt: 3}, worqr.EventRetry, worqr.StateScheduled, 3, time.Hour},
		{"last attempt", func(context.Context, *worqr.Task) error { return boom },
			&worqrtest.WorkOpts{Enqueue: &worqr.EnqueueOpts{MaxAttempts: 2}, Attempt: 2}, worqr.EventDead, worqr.StateDead, 2, 0},
		{"skip retry", func(context.Context, *worqr.Task) error { return worqr.SkipRetry(boom) },
			nil, worqr.EventDead, worqr.StateDead, 1, 0},
		{"panic", func(context.Context, *worqr.Task) error { panic("oops") },
			&worqrtest.WorkOpts{QueueConfig: worqr.QueueConfig{MaxAttempts: 1}}, worqr.EventDead, worqr.StateDead, 1, 0},
		{"give back", func(context.Context, *worqr.Task) error { return worqr.ErrGiveBack },
			nil, worqr.EventGivenBack, worqr.StateQueued, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs atomic.Int64
			h := worqr.HandlerFunc(func(ctx context.Context, task *worqr.Task) error {
				runs.Add(1)
				return tc.handler(ctx, task)
			})
			res := env.Work(context.Background(), t, h, []byte("x"), tc.opts)
			if res.Kind != tc.kind || res.Attempt != tc.attempt || res.Task == nil || res.Task.State != tc.state {
				t.Fatalf("got %+v (task %+v); want %s on attempt %d, task %s", res, res.Task, tc.kind, tc.attempt, tc.state)
			}
			if runs.Load() != 1 {
				t.Errorf("the handler ran %d times, want once", runs.Load())
			}
			if tc.retryIn != 0 && !res.RetryAt.Equal(env.Now().Add(tc.retryIn)) {
				t.Errorf("retry at %s, want now + %s", res.RetryAt, tc.retryIn)
			}
			if tc.retryIn == 0 && !res.RetryAt.IsZero() {
				t.Errorf("retry at %s, want none", res.RetryAt)
			}
			if tc.kind != worqr.EventGivenBack && res.Err == nil {
				t.Errorf("no error recorded")
			}
		})
	}
}

func TestWorkTimeoutIsTheHandlersDeadline(t *testing.T) {
	env := worqrtest.New(t, nil)
	before := time.Now()
	res := env.Work(context.Background(), t, worqr.HandlerFunc(func(ctx context.Context, task *worqr.Task) error {
		<-ctx.Done()
		return ctx.Err()
	}), nil, &worqrtest.WorkOpts{Enqueue: &worqr.EnqueueOpts{Timeout: 50 * time.Millisecond}})
	var te *worqr.TimeoutError
	if res.Kind != worqr.EventRetry || !errors.As(res.Err, &te) {
		t.Fatalf("got %+v, want a retry with a *worqr.TimeoutError", res)
	}
	if res.Deadline.Before(before.Add(50*time.Millisecond)) || res.Deadline.After(time.Now()) {
		t.Fatalf("deadline %s, want 50ms after the start (%s)", res.Deadline, before)
	}
}

func TestWorkPastItsDeadlineExpires(t *testing.T) {
	env := worqrtest.New(t, &worqrtest.Options{InProcess: true})
	// A deadline the local clock has not passed (so the enqueue takes it)
	// and Redis's clock has: the take ends the task expired, unrun.
	env.Advance(t, time.Hour)
	var runs atomic.Int64
	res := env.Work(context.Background(), t, worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
		runs.Add(1)
		return nil
	}), nil, &worqrtest.WorkOpts{Enqueue: &worqr.EnqueueOpts{Deadline: time.Now().Add(time.Minute)}})
	if res.Kind != worqr.EventExpired || res.Attempt != 0 || runs.Load() != 0 {
		t.Fatalf("got %+v after %d runs, want expired, never run", res, runs.Load())
	}
}

func TestDrainExpiresTasksPastTheirDeadline(t *testing.T) {
	ctx := context.Background()
	env := worqrtest.New(t, &worqrtest.Options{InProcess: true})
	var runs atomic.Int64
	cfg := &worqr.WorkerConfig{Queues: map[string]worqr.QueueConfig{
		"offers": {Concurrency: 1, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
			runs.Add(1)
			return nil
		})},
	}}
	if _, err := env.Client().Enqueue(ctx, "offers", []byte("x"), &worqr.EnqueueOpts{Deadline: env.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	env.Advance(t, time.Minute)
	if ends := env.Drain(ctx, t, cfg); len(ends) != 1 || ends[0].Kind != worqr.EventExpired || runs.Load() != 0 {
		t.Fatalf("ends %v after %d runs, want [expired] and none", kinds(ends), runs.Load())
	}
}

func TestWorkLeavesOtherTasksOfItsQueue(t *testing.T) {
	env := worqrtest.New(t, nil)
	var runs atomic.Int64
	res := env.Work(context.Background(), t, worqr.HandlerFunc(func(ctx context.Context, task *worqr.Task) error {
		runs.Add(1)
		// A follow-up on the handler's own queue: Work runs only its task.
		_, err := env.Client().Enqueue(ctx, task.Queue, []byte("follow-up"), nil)
		return err
	}), []byte("first"), &worqrtest.WorkOpts{Queue: "chain"})
	if res.Kind != worqr.EventDone || runs.Load() != 1 {
		t.Fatalf("got %+v after %d runs, want done after one", res, runs.Load())
	}
	env.RequireEnqueuedMany(t, "chain", worqrtest.Match{Payload: "follow-up"})
	// The queue is no longer Work's alone.
	mustFail(t, func(tb testing.TB) {
		env.Work(context.Background(), tb, worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil }), nil,
			&worqrtest.WorkOpts{Queue: "chain"})
	}, `queue "chain" holds 1 waiting and 0 running tasks; Work needs it to itself`)
}

func TestWorkRefusesBadOptions(t *testing.T) {
	env := worqrtest.New(t, nil)
	ok := worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil })
	for _, tc := range []struct {
		opts *worqrtest.WorkOpts
		want string
	}{
		{&worqrtest.WorkOpts{Enqueue: &worqr.EnqueueOpts{Delay: time.Second}}, "Delay and At must be zero"},
		{&worqrtest.WorkOpts{QueueConfig: worqr.QueueConfig{Handler: ok}}, "Handler and BatchHandler must be nil"},
		{&worqrtest.WorkOpts{Attempt: 3, Enqueue: &worqr.EnqueueOpts{MaxAttempts: 2}}, "before WorkOpts.Attempt 3: is that over the task's MaxAttempts?"},
	} {
		msg := mustFail(t, func(tb testing.TB) { env.Work(context.Background(), tb, ok, nil, tc.opts) }, tc.want)
		if !strings.HasPrefix(msg, "worqrtest: Work: ") {
			t.Errorf("failure %q does not name Work", msg)
		}
	}
}
