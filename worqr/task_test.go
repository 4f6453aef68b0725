package worqr_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// The tests of task.go: what a handler's Task records (SetResult,
// Progress) and what it says of its taking (PID, WorkerID).

// A handler's result is bounded by MaxPayloadBytes, as a remote's Finish
// is (which refuses a larger one, naming result): a Worker wrote whatever
// Task.SetResult was given, in the end call of the task and of every end
// grouped with it.
func TestResultOverMaxPayloadBytesIsRefused(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	const limit = 1024
	ccfg := worqr.Config{Namespace: ns, DisableEvents: true, MaxPayloadBytes: limit}
	c, err := worqr.NewClient(pool, &ccfg)
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, pool, &ccfg)
	big, err := c.Enqueue(ctx, "res", []byte("big"), nil)
	if err != nil {
		t.Fatal(err)
	}
	fits, err := c.Enqueue(ctx, "res", []byte("fits"), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fastTimings(ns)
	cfg.DisableEvents = true
	cfg.MaxPayloadBytes = limit
	cfg.Queues = map[string]worqr.QueueConfig{"res": {Concurrency: 1, Retention: time.Minute,
		Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			n := limit
			if string(t.Payload) == "big" {
				n++
			}
			t.SetResult([]byte(strings.Repeat("r", n)))
			return nil
		})}}
	startWorker(t, ctx, pool, &cfg)
	var info *worqr.TaskInfo
	wait(t, 10*time.Second, "both tasks ended", func() bool {
		a, err1 := in.Task(ctx, "res", big)
		b, err2 := in.Task(ctx, "res", fits)
		info = a
		return err1 == nil && err2 == nil && b.State == worqr.StateDone && a.State != worqr.StateQueued && a.State != worqr.StateActive
	})
	if info.State != worqr.StateDead || !strings.Contains(info.LastError, "Task.SetResult") || len(info.Result) != 0 {
		t.Fatalf("task with a result of %d bytes: state %s, result %d bytes, last error %q; want dead, no result, the error naming Task.SetResult",
			limit+1, info.State, len(info.Result), info.LastError)
	}
	if got, _ := in.Task(ctx, "res", fits); len(got.Result) != limit {
		t.Fatalf("task with a result of %d bytes recorded %d", limit, len(got.Result))
	}
}

// What a handler's Task records: its SetResult and its last Progress are
// readable with Inspector.Task, and PID and WorkerID name the taking
// (those of its EventStarted).
func TestTaskRecords(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	id, err := b.client.Enqueue(ctx, "q", []byte("p"), nil)
	if err != nil {
		t.Fatal(err)
	}
	type taking struct{ pid, worker string }
	took := make(chan taking, 1)
	b.startWorker(worqr.WorkerConfig{Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 1, Retention: time.Minute,
		Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			took <- taking{t.PID(), t.WorkerID()}
			if err := t.Progress(ctx, "half"); err != nil {
				return err
			}
			if err := t.Progress(ctx, "all"); err != nil {
				return err
			}
			t.SetResult([]byte("first"))
			t.SetResult([]byte("last"))
			return nil
		})}}})
	started := b.events.waitFor(t, 10*time.Second, "the task started", func(e worqr.Event) bool {
		return e.Kind == worqr.EventStarted && e.TaskID == id
	})
	b.events.waitFor(t, 10*time.Second, "the task done", func(e worqr.Event) bool {
		return e.Kind == worqr.EventDone && e.TaskID == id
	})
	if tk := <-took; tk.pid == "" || tk.pid != started.PID || tk.worker != started.WorkerID {
		t.Errorf("Task.PID %q, WorkerID %q; want those of the taking started (%q, %q)", tk.pid, tk.worker, started.PID, started.WorkerID)
	}
	info, err := b.in.Task(ctx, "q", id)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != worqr.StateDone || string(info.Result) != "last" || info.Progress != "all" {
		t.Fatalf("task: state %s, result %q, progress %q; want done, the last SetResult (last), the last Progress (all)",
			info.State, info.Result, info.Progress)
	}
	var outside worqr.Task
	if err := outside.Progress(ctx, "x"); err == nil || !strings.Contains(err.Error(), "not a running task") {
		t.Errorf("Progress on a Task no worker handed = %v, want an error saying it is not a running task", err)
	}
}
