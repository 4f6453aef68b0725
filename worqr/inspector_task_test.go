package worqr_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/worqr/worqr-go/worqr"
)

// Inspector.Task reads a task whole: its type apart from its payload, the
// options it was enqueued with, when its latest attempt started and how
// long it ran, and its failed attempts.
func TestInspectorTaskReadWhole(t *testing.T) {
	ctx := context.Background()

	t.Run("a typed task: its type apart, its payload as stored and as its handler sees it", func(t *testing.T) {
		b := setup(t)
		id, err := b.client.Enqueue(ctx, "mail", []byte(`{"to":"ada"}`), &worqr.EnqueueOpts{Type: "welcome"})
		if err != nil {
			t.Fatal(err)
		}
		info, err := b.in.Task(ctx, "mail", id)
		if err != nil {
			t.Fatal(err)
		}
		stored := "\x00wqt:welcome\x00" + `{"to":"ada"}` // docs/PROTOCOL.md, "Task types"
		if info.Type != "welcome" || string(info.HandlerPayload()) != `{"to":"ada"}` || string(info.Payload) != stored {
			t.Errorf("Type %q, HandlerPayload %q, Payload %q; want welcome, the payload without its envelope, the payload as stored",
				info.Type, info.HandlerPayload(), info.Payload)
		}
		plain, _ := b.client.Enqueue(ctx, "mail", []byte("plain"), nil)
		if info, _ := b.in.Task(ctx, "mail", plain); info == nil || info.Type != "" || string(info.HandlerPayload()) != "plain" {
			t.Errorf("untyped task: %+v; want no type, its payload", info)
		}
	})

	t.Run("the options it was enqueued with", func(t *testing.T) {
		b := setup(t)
		deadline := time.Now().Add(time.Hour).Truncate(time.Millisecond)
		before := time.Now().Add(-time.Second) // Redis's clock, this host's: the same here
		id, err := b.client.Enqueue(ctx, "opts", []byte("p"), &worqr.EnqueueOpts{ID: "mine", Priority: 2,
			MaxAttempts: 7, Timeout: 90 * time.Second, Deadline: deadline})
		if err != nil {
			t.Fatal(err)
		}
		info, err := b.in.Task(ctx, "opts", id)
		if err != nil {
			t.Fatal(err)
		}
		if info.Priority != 2 || info.MaxAttempts != 7 || info.Timeout != 90*time.Second || !info.Deadline.Equal(deadline) {
			t.Errorf("priority %d, max attempts %d, timeout %s, deadline %s; want 2, 7, 1m30s, %s",
				info.Priority, info.MaxAttempts, info.Timeout, info.Deadline, deadline)
		}
		if info.EnqueuedAt.Before(before) || info.EnqueuedAt.After(time.Now().Add(time.Second)) {
			t.Errorf("an id of the caller's: enqueued at %s, want about now", info.EnqueuedAt)
		}
		if !info.StartedAt.IsZero() || info.RanFor != 0 || info.Attempts != nil {
			t.Errorf("never ran: started %s, ran for %s, attempts %+v; want none", info.StartedAt, info.RanFor, info.Attempts)
		}
		uid, err := b.client.Enqueue(ctx, "opts", []byte("u"), &worqr.EnqueueOpts{UniqueKey: "order:42", UniqueTTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if info, err := b.in.Task(ctx, "opts", uid); err != nil || info.UniqueKey != "order:42" {
			t.Errorf("unique key %q, %v; want order:42", info.UniqueKey, err)
		}
		if info, _ := b.in.Task(ctx, "opts", id); info.UniqueKey != "" {
			t.Errorf("a task with no unique key shows %q", info.UniqueKey)
		}
	})

	t.Run("its failed attempts, oldest first; done, it keeps them and shows how long its last run took", func(t *testing.T) {
		b := setup(t)
		w := b.startWorker(worqr.WorkerConfig{Queues: map[string]worqr.QueueConfig{"hist": {Concurrency: 1,
			Retention: time.Minute, MaxAttempts: 5,
			Backoff: func(int, error) time.Duration { return time.Millisecond },
			Handler: worqr.HandlerFunc(func(ctx context.Context, task *worqr.Task) error {
				if task.Attempt < 3 {
					return fmt.Errorf("attempt %d failed", task.Attempt)
				}
				time.Sleep(20 * time.Millisecond)
				return nil
			})}}})
		id, err := b.client.Enqueue(ctx, "hist", []byte("p"), nil)
		if err != nil {
			t.Fatal(err)
		}
		var info *worqr.TaskInfo
		wait(t, 10*time.Second, "the task done", func() bool {
			info, err = b.in.Task(ctx, "hist", id)
			return err == nil && info.State == worqr.StateDone
		})
		if len(info.Attempts) != 2 {
			t.Fatalf("attempts %+v, want the 2 failed ones", info.Attempts)
		}
		for i, a := range info.Attempts {
			if a.Number != i+1 || a.Outcome != "retry" || a.WorkerID != w.ID() || a.Error != fmt.Sprintf("attempt %d failed", i+1) {
				t.Errorf("attempt %d: %+v; want number %d, retry, on %s, its error", i, a, i+1, w.ID())
			}
			if a.StartedAt.IsZero() || a.EndedAt.Before(a.StartedAt) {
				t.Errorf("attempt %d: %s .. %s; want a start and an end after it", i, a.StartedAt, a.EndedAt)
			}
		}
		if !info.StartedAt.After(info.Attempts[1].EndedAt) && !info.StartedAt.Equal(info.Attempts[1].EndedAt) {
			t.Errorf("the done run started %s, before the last failure ended (%s)", info.StartedAt, info.Attempts[1].EndedAt)
		}
		if info.RanFor < 20*time.Millisecond || info.RanFor > 5*time.Second {
			t.Errorf("ran for %s, want the done run's 20ms and more", info.RanFor)
		}
		if info.LastError != "attempt 2 failed" || info.Failures != 2 {
			t.Errorf("last error %q, failures %d; want the last failure's, 2", info.LastError, info.Failures)
		}
		// A listing reads no history, and tells how long it ran all the same.
		ts, _, err := b.in.Tasks(ctx, "hist", worqr.StateDone, 0, 10)
		if err != nil || len(ts) != 1 || ts[0].Attempts != nil || ts[0].RanFor != info.RanFor {
			t.Errorf("Tasks = %+v, %v; want the task without its history, ran for %s", ts, err, info.RanFor)
		}
	})

	t.Run("while it runs: when it started, how long so far", func(t *testing.T) {
		b := setup(t)
		started := make(chan struct{})
		release := make(chan struct{})
		defer close(release)
		b.startWorker(worqr.WorkerConfig{Queues: map[string]worqr.QueueConfig{"run": {Concurrency: 1,
			Handler: worqr.HandlerFunc(func(ctx context.Context, task *worqr.Task) error {
				close(started)
				select {
				case <-release:
				case <-ctx.Done():
				}
				return nil
			})}}})
		id, err := b.client.Enqueue(ctx, "run", []byte("p"), nil)
		if err != nil {
			t.Fatal(err)
		}
		<-started
		time.Sleep(30 * time.Millisecond)
		info, err := b.in.Task(ctx, "run", id)
		if err != nil || info.State != worqr.StateActive {
			t.Fatalf("Task = %+v, %v; want it active", info, err)
		}
		if info.StartedAt.IsZero() || info.RanFor < 30*time.Millisecond {
			t.Errorf("started %s, ran for %s; want a start and at least 30ms so far", info.StartedAt, info.RanFor)
		}
	})

	t.Run("dead: the attempt that killed it", func(t *testing.T) {
		b := setup(t)
		b.startWorker(worqr.WorkerConfig{Queues: map[string]worqr.QueueConfig{"die": {Concurrency: 1,
			Handler: worqr.HandlerFunc(func(ctx context.Context, task *worqr.Task) error {
				return worqr.SkipRetry(errors.New("bad input"))
			})}}})
		id, err := b.client.Enqueue(ctx, "die", []byte("p"), nil)
		if err != nil {
			t.Fatal(err)
		}
		var info *worqr.TaskInfo
		wait(t, 10*time.Second, "the task dead", func() bool {
			info, err = b.in.Task(ctx, "die", id)
			return err == nil && info.State == worqr.StateDead
		})
		if len(info.Attempts) != 1 || info.Attempts[0].Outcome != "dead" || info.Attempts[0].Number != 1 {
			t.Errorf("attempts %+v, want the one dead attempt", info.Attempts)
		}
		if want := info.Attempts[0].EndedAt.Sub(info.Attempts[0].StartedAt); info.RanFor != want {
			t.Errorf("ran for %s, want its attempt's %s", info.RanFor, want)
		}
	})
}
