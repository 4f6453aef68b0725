package worqr_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/worqr/worqr-go/worqr"
)

// On a merging ordered queue, a Mux hands its handler every merged payload
// out of its type's tag (Task.Payloads, as Task.Payload is): they came
// still tagged, so a handler decoding them failed on every one. A task
// whose merged payloads are of several types (or some of none) is not run
// by the handler of the last one's type, which was given the others'
// payloads: it goes to the dead set, naming the types, its payloads kept.
func TestMuxUnwrapsMergedPayloads(t *testing.T) {
	bundle := setup(t)
	pool, ns, c := bundle.pool, bundle.ns, bundle.client
	ctx := context.Background()
	if err := c.SetKeyPolicy(ctx, "mm", worqr.KeyPolicy{Merge: true}); err != nil {
		t.Fatal(err)
	}
	enqueue := func(key, typ, p string) string {
		t.Helper()
		id, err := worqr.EnqueueTyped(ctx, c, "mm", typ, []byte(p), &worqr.EnqueueOpts{Key: key})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	same := enqueue("same", "a", "1")
	enqueue("same", "a", "2")
	mixed := enqueue("mixed", "a", "3")
	enqueue("mixed", "b", "4")
	var mu sync.Mutex
	ran := map[string][]string{}
	record := worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range t.Payloads {
			ran[t.ID] = append(ran[t.ID], t.Type+":"+string(p.Data))
		}
		return nil
	})
	mux := worqr.NewMux()
	mux.Handle("a", record)
	mux.Handle("b", record)
	startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: worqr.Config{Namespace: ns},
		Queues: map[string]worqr.QueueConfig{"mm": {Handler: mux, Concurrency: 1, Retention: time.Minute, Keys: worqr.KeyPolicy{Merge: true}}}})
	for _, id := range []string{same, mixed} {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		info, err := c.Wait(wctx, "mm", id)
		cancel()
		if err != nil {
			t.Fatalf("Wait %s: %v", id, err)
		}
		switch id {
		case same:
			if info.State != worqr.StateDone {
				t.Errorf("two payloads of type a: %s (%s)", info.State, info.LastError)
			}
		case mixed:
			if info.State != worqr.StateDead || !strings.Contains(info.LastError, `"a"`) || !strings.Contains(info.LastError, `"b"`) || len(info.Payloads) != 2 {
				t.Errorf("payloads of types a and b: %s, error %q, %d payloads kept; want dead naming both types, both kept",
					info.State, info.LastError, len(info.Payloads))
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(ran[same], " "); got != "a:1 a:2" {
		t.Errorf("the handler of a saw %q, want \"a:1 a:2\"", got)
	}
	if got := ran[mixed]; got != nil {
		t.Errorf("a handler ran the mixed task with %q", got)
	}
}
