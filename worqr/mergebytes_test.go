package worqr_test

import (
	"context"
	"testing"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// A task of a merging queue (KeyPolicy.Merge) gathers at most 1 MiB of
// distinct payloads, as it gathers at most 100: each merge reads, sorts and
// writes the whole envelope, and 100 merges of 1 MiB payloads took a
// minute of Redis time, the last ones 1.3 s each (at 4 MiB, a dead task's
// requeue merging into its key's tail took 15 to 27 ms). A payload that would pass
// the bound starts a new task behind the full one (merging is a may: the
// order holds), where the next ones merge.
func TestMergedPayloadsAreBoundedByBytes(t *testing.T) {
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
	if err := c.SetKeyPolicy(ctx, "m", worqr.KeyPolicy{Merge: true}); err != nil {
		t.Fatal(err)
	}
	const n, size = 10, 300 << 10
	var ids []string
	seen := map[string]bool{}
	for i := 0; i < n; i++ {
		p := make([]byte, size)
		p[0] = byte(i)
		id, err := c.Enqueue(ctx, "m", p, &worqr.EnqueueOpts{Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	total := 0
	for _, id := range ids {
		info, err := in.Task(ctx, "m", id)
		if err != nil {
			t.Fatal(err)
		}
		bytes := 0
		for _, p := range info.Payloads {
			bytes += len(p.Data)
		}
		total += len(info.Payloads)
		if bytes > 1<<20 {
			t.Errorf("task %s gathered %d payloads, %d bytes; want at most 1 MiB", id, len(info.Payloads), bytes)
		}
	}
	if total != n {
		t.Fatalf("%d tasks hold %d payloads, want all %d", len(ids), total, n)
	}
	t.Logf("%d payloads of 300 KiB in %d tasks", n, len(ids))
}
