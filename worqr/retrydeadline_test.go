package worqr_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/worqr"
)

// A failed attempt whose retry would be due after the task's Deadline is
// due at the deadline, so that the task ends (expired: the take finds it
// past its deadline) without waiting out the whole backoff (here 3 s; up to
// an hour by default). It waited it out (found by an audit).
func TestRetryPastDeadlineIsDueAtIt(t *testing.T) {
	ctx := context.Background()
	pool, ns, c, _ := freshNamespace(t)
	wc := fastTimings(ns)
	wc.Queues = map[string]worqr.QueueConfig{"q": {Concurrency: 1, Retention: time.Minute,
		Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
			return worqr.RetryAfter(3*time.Second, errors.New("again"))
		})}}
	startWorker(t, ctx, pool, &wc)
	deadline := time.Now().Add(time.Second)
	id, err := c.Enqueue(ctx, "q", []byte("p"), &worqr.EnqueueOpts{Deadline: deadline})
	if err != nil {
		t.Fatal(err)
	}
	conn := pool.Get()
	defer conn.Close()
	sched := rdb.NewKeys(ns).Queue(rdb.Standalone("q")).Scheduled
	var due int64
	wait(t, 10*time.Second, "the retry to be scheduled", func() bool {
		due, err = redis.Int64(conn.Do("ZSCORE", sched, id))
		return err == nil
	})
	if due > deadline.UnixMilli() {
		t.Fatalf("the retry is due %d ms past the task's deadline", due-deadline.UnixMilli())
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := c.Wait(wctx, "q", id)
	if err != nil || info.State != worqr.StateExpired || !strings.Contains(info.LastError, "again") {
		t.Fatalf("Wait = %+v, %v; want expired, with the last error kept", info, err)
	}
}
