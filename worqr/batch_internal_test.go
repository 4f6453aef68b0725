package worqr

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// The internal tests of batch.go.

func TestHandleBatchOfDecodesInOrderOrSkipsRetry(t *testing.T) {
	var got []order
	h := HandleBatchOf(func(_ context.Context, _ *Batch, vs []order) error { got = vs; return nil }, nil)
	b := &Batch{Key: "k", Tasks: []*Task{
		{ID: "a", Payload: []byte(`{"id":1}`)}, {ID: "b", Payload: []byte(`{"id":2}`)},
	}}
	if err := h.HandleBatch(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != 1 || got[1].ID != 2 {
		t.Fatalf("decoded %+v", got)
	}
	got = nil
	b.Tasks[1].Payload = []byte("not json")
	err := h.HandleBatch(context.Background(), b)
	if !errors.Is(err, ErrSkipRetry) || !strings.Contains(err.Error(), "task b") || got != nil {
		t.Fatalf("bad payload: err %v, fn called with %+v", err, got)
	}
}
