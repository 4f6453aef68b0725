package worqr_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// Past its IDTTL, an id that still names a task (here, one scheduled for
// later) is refused, with the same payload too: writing over it left one
// id waiting and scheduled at once, one copy buried as corrupt. Once the
// task is gone, the id is free again.
func TestIDReusedPastItsTTLWhileItsTaskExists(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	cfg := worqr.Config{Namespace: ns, DisableEvents: true}
	c, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, pool, &cfg)
	opts := &worqr.EnqueueOpts{ID: "order-42", IDTTL: 50 * time.Millisecond, Delay: time.Hour}
	if _, err := c.Enqueue(ctx, "q", []byte("p"), opts); err != nil {
		t.Fatal(err)
	}
	conn := pool.Get()
	defer conn.Close()
	lock := rdb.NewKeys(ns).Queue(rdb.Standalone("q")).IDPrefix + "order-42"
	wait(t, 5*time.Second, "the id's lock to expire", func() bool {
		n, err := redis.Int(conn.Do("EXISTS", lock))
		return err == nil && n == 0
	})
	_, err = c.Enqueue(ctx, "q", []byte("p"), &worqr.EnqueueOpts{ID: "order-42"})
	if !errors.Is(err, worqr.ErrDuplicate) {
		t.Fatalf("an enqueue past IDTTL of the id of a scheduled task: %v, want ErrDuplicate", err)
	}
	if n := queueLen(t, in, "q"); n != 0 {
		t.Fatalf("waiting: %d, want 0: the task is scheduled only", n)
	}
	if _, err := c.Cancel(ctx, "q", "order-42"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, "q", []byte("p"), &worqr.EnqueueOpts{ID: "order-42"}); err != nil {
		t.Fatalf("the id once its task is gone: %v", err)
	}
}

// A Delay that ends after the Deadline is refused, naming the field, as
// an At after it is: the task could never start.
func TestDelayPastDeadlineIsRefused(t *testing.T) {
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Enqueue(context.Background(), "q", []byte("p"), &worqr.EnqueueOpts{Delay: time.Hour, Deadline: time.Now().Add(time.Minute)})
	if !errors.Is(err, worqr.ErrInvalid) || !strings.Contains(err.Error(), "EnqueueOpts.Deadline") {
		t.Fatalf("Delay past Deadline: %v, want ErrInvalid naming EnqueueOpts.Deadline", err)
	}
}
