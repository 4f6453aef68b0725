package worqr_test

import (
	"context"
	"testing"

	"github.com/worqr/worqr-go/worqr"
)

// Inspector.CancelAll (worqr queue cancel) publishes what it cancelled:
// the history's Cancelled counted only the task cancelled by Client.Cancel
// (found by an audit).
func TestCancelAllCountedInHistory(t *testing.T) {
	ctx := context.Background()
	_, _, c, in := freshNamespace(t)
	var ids []string
	for i := 0; i < 4; i++ {
		id, err := c.Enqueue(ctx, "hc", []byte("x"), nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if _, err := c.Cancel(ctx, "hc", ids[0]); err != nil {
		t.Fatal(err)
	}
	n, err := in.CancelAll(ctx, "hc", nil)
	if err != nil || n != 3 {
		t.Fatalf("CancelAll = %d, %v", n, err)
	}
	c.Flush() // each waits for its publication
	in.Flush()
	got := waitHistory(t, in, "hc", func(s worqr.Throughput) bool { return s.Enqueued >= 4 && s.Cancelled >= 4 })
	if got.Enqueued != 4 || got.Cancelled != 4 {
		t.Errorf("history of hc: %+v, want 4 enqueued and 4 cancelled", got)
	}
}
