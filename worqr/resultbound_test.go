package worqr_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

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
