package worqr_test

import (
	"context"
	"errors"
	"testing"

	"github.com/worqr/worqr-go/worqr"
)

func TestInspectorTask(t *testing.T) {
	ctx := context.Background()
	_, _, c, in := freshNamespace(t)
	if _, err := c.Enqueue(ctx, "ta", []byte("a"), &worqr.EnqueueOpts{ID: "one"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, "tb", []byte("b"), &worqr.EnqueueOpts{ID: "two"}); err != nil {
		t.Fatal(err)
	}
	t.Run("in its queue", func(t *testing.T) {
		info, err := in.Task(ctx, "ta", "one")
		if err != nil || info.ID != "one" || info.Queue != "ta" || string(info.Payload) != "a" || info.State != worqr.StateQueued {
			t.Fatalf("Task(ta, one) = %+v, %v; want the queued task of ta", info, err)
		}
	})
	t.Run("not in another queue", func(t *testing.T) {
		if info, err := in.Task(ctx, "ta", "two"); !errors.Is(err, worqr.ErrTaskNotFound) {
			t.Fatalf("Task(ta, two) = %+v, %v; want ErrTaskNotFound (two is tb's)", info, err)
		}
	})
	t.Run("no queue searches every known queue", func(t *testing.T) {
		info, err := in.Task(ctx, "", "two")
		if err != nil || info.Queue != "tb" || string(info.Payload) != "b" {
			t.Fatalf("Task(\"\", two) = %+v, %v; want tb's task", info, err)
		}
		if _, err := in.Task(ctx, "", "three"); !errors.Is(err, worqr.ErrTaskNotFound) {
			t.Fatalf("Task(\"\", three) = %v; want ErrTaskNotFound", err)
		}
	})
	t.Run("bad input", func(t *testing.T) {
		var ie *worqr.InvalidError
		if _, err := in.Task(ctx, "ta", ""); !errors.As(err, &ie) || ie.Field != "id" {
			t.Errorf("empty id: %v; want an InvalidError on id", err)
		}
		if _, err := in.Task(ctx, "no spaces", "one"); !errors.Is(err, worqr.ErrInvalid) {
			t.Errorf("bad queue name: %v; want ErrInvalid", err)
		}
	})
}
