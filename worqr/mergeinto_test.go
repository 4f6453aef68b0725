package worqr_test

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/worqr/worqr-go/worqr"
)

// EnqueueMerge into a key's waiting task that carries several payloads
// (merged by KeyPolicy.Merge) merges into the last one and keeps the
// others: it kept only what MergeFunc returned, and the earlier payloads
// were lost (found by an audit).
func TestEnqueueMergeKeepsEarlierPayloads(t *testing.T) {
	_, _, c, in := freshNamespace(t)
	ctx := context.Background()
	if err := c.SetKeyPolicy(ctx, "am", worqr.KeyPolicy{Merge: true}); err != nil {
		t.Fatal(err)
	}
	id, err := c.Enqueue(ctx, "am", []byte("a"), &worqr.EnqueueOpts{Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, "am", []byte("b"), &worqr.EnqueueOpts{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	ti, err := in.Task(ctx, "", id)
	if err != nil {
		t.Fatal(err)
	}
	if len(ti.Payloads) != 2 {
		t.Fatalf("setup: %d payloads, want 2", len(ti.Payloads))
	}
	var seen []byte
	got, merged, err := c.EnqueueMerge(ctx, "am", "k", []byte("c"), func(waiting, incoming []byte) ([]byte, error) {
		seen = append([]byte(nil), waiting...)
		return append(append([]byte(nil), waiting...), incoming...), nil
	}, nil)
	if err != nil || !merged || got != id {
		t.Fatalf("EnqueueMerge: %s %v %v", got, merged, err)
	}
	ti, err = in.Task(ctx, "", id)
	if err != nil {
		t.Fatal(err)
	}
	var ps []string
	for _, p := range ti.Payloads {
		ps = append(ps, string(p.Data))
	}
	if string(seen) != "b" || !reflect.DeepEqual(ps, []string{"a", "bc"}) {
		t.Errorf("MergeFunc saw %q and the task holds %q; want it to see the last payload \"b\" and hold [a bc]", seen, ps)
	}
}

// A payload's Score must be a finite number: NaN sorted anywhere, and +Inf
// made that payload Task.Payload for good.
func TestKeyedScoreMustBeFinite(t *testing.T) {
	_, _, c, _ := freshNamespace(t)
	ctx := context.Background()
	for _, score := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		_, err := c.Enqueue(ctx, "am", []byte("a"), &worqr.EnqueueOpts{Key: "k", Score: score})
		if !errors.Is(err, worqr.ErrInvalid) || !strings.Contains(err.Error(), "EnqueueOpts.Score") {
			t.Errorf("Enqueue with Score %v: %v, want ErrInvalid naming EnqueueOpts.Score", score, err)
		}
	}
}
