package worqr

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
)

// A payload that merely starts like a typed one ("\x00wqt:", then a nul
// far in) is not a task type's tag: MaxPayloadBytes counts all of it. Only
// what followed the first nul was counted, so a payload of any size went
// through Enqueue (and the gateway's), EnqueueBatch and EnqueueMerge.
func TestForgedTypeTagDoesNotEscapeTheLimit(t *testing.T) {
	ctx := context.Background()
	pool := internalPool(t)
	c, err := NewClient(pool, &Config{Namespace: redistest.Namespace(), MaxPayloadBytes: 16})
	if err != nil {
		t.Fatal(err)
	}
	forged := []byte(typeMark + strings.Repeat("x", 4096) + "\x00p")
	want := "is 4103 bytes, over MaxPayloadBytes (16)"
	_, err = c.Enqueue(ctx, "forged", forged, nil)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Errorf("Enqueue of a forged typed payload of 4,103 bytes: %v, want an InvalidError %q", err, want)
	}
	_, err = c.EnqueueBatch(ctx, "forged", [][]byte{forged}, &EnqueueOpts{MaxAttempts: 1})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Errorf("EnqueueBatch of it: %v, want an InvalidError %q", err, want)
	}
	bad := []byte(typeMark + "bad type\x00p")
	_, err = c.Enqueue(ctx, "forged", append(bad, strings.Repeat("q", 8)...), nil)
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("Enqueue of a 23-byte payload whose tag names no valid type: %v, want an InvalidError", err)
	}
	if n, err := c.st.Len(ctx, c.st.Queue(rdb.Standalone("forged"))); err != nil || n != 0 {
		t.Errorf("%d tasks enqueued (%v), want none", n, err)
	}
	if _, err := EnqueueTyped(ctx, c, "forged", "email.send", []byte(strings.Repeat("p", 16)), nil); err != nil {
		t.Errorf("a real typed payload of MaxPayloadBytes: %v", err)
	}
}
