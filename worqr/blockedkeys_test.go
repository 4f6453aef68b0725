package worqr_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// BlockedKeys reads the dead set newest first, 1,000 entries a page: a task
// that died between two pages moved every entry down one, and the last
// blocked key of the first page was listed again at the top of the next.
func TestBlockedKeysListsAKeyOnceWhenATaskDiesBetweenPages(t *testing.T) {
	ctx := context.Background()
	base := srv.Pool()
	t.Cleanup(func() { base.Close() })
	ns := redistest.Namespace()
	cfg := worqr.Config{Namespace: ns, DisableEvents: true}
	c, err := worqr.NewClient(base, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	reader := newInspector(t, base, &cfg)
	const n = 1005
	for i := 0; i < n; i++ {
		if _, err := c.Enqueue(ctx, "blk", []byte("x"), &worqr.EnqueueOpts{Key: fmt.Sprintf("k%04d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	wc := fastTimings(ns)
	wc.DisableEvents = true
	wc.Queues = map[string]worqr.QueueConfig{"blk": {Concurrency: 50,
		Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
			return worqr.SkipRetry(errors.New("bad"))
		})}}
	startWorker(t, ctx, base, &wc)
	wait(t, 20*time.Second, "every task dead", func() bool {
		_, total, err := reader.Tasks(ctx, "blk", worqr.StateDead, 0, 1)
		return err == nil && total == n
	})
	// Before the second page is read, one more entry tops the dead set.
	side := base.Get()
	defer side.Close()
	var deadKey string
	pool := &hookPool{pool: base, sent: func(cmd string, args []any) func() {
		if cmd != "ZREVRANGE" || len(args) < 2 || fmt.Sprint(args[1]) != "1000" {
			return nil
		}
		deadKey = fmt.Sprint(args[0])
		if _, err := side.Do("ZADD", deadKey, 1e15, "a-task-that-just-died"); err != nil {
			t.Error(err)
		}
		return nil
	}}
	in, err := worqr.NewInspector(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := in.BlockedKeys(ctx, "blk", n+10)
	if err != nil {
		t.Fatal(err)
	}
	if deadKey == "" || !strings.Contains(deadKey, "dead") {
		t.Fatalf("the second page was not read (%q)", deadKey)
	}
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k.Key] {
			t.Fatalf("key %s listed twice (%d listed)", k.Key, len(keys))
		}
		seen[k.Key] = true
	}
	if len(keys) < n-1 {
		t.Fatalf("%d keys listed, want at least %d (one may be missed when the set moves)", len(keys), n-1)
	}
}
