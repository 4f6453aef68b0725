package worqr_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/worqr/worqr-go/worqr"
)

// EnqueueOpts.Type makes a task of that type, whichever way it is
// enqueued: a Mux routes it, its handler sees the payload as given, and the
// Inspector shows the type apart.
func TestEnqueueOptsType(t *testing.T) {
	ctx := context.Background()

	t.Run("Enqueue, EnqueueBatch and EnqueueValue enqueue typed tasks a Mux routes", func(t *testing.T) {
		b := setup(t)
		type signup struct{ Email string }
		got := make(chan string, 8)
		mux := worqr.NewMux()
		mux.Handle("welcome", worqr.Handle(func(_ context.Context, t *worqr.Task, s signup) error {
			got <- t.Type + " " + s.Email
			return nil
		}, nil))
		mux.Handle("bill", worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
			got <- t.Type + " " + string(t.Payload)
			return nil
		}))
		one, err := b.client.Enqueue(ctx, "typed", []byte("inv-1"), &worqr.EnqueueOpts{Type: "bill", MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.client.EnqueueBatch(ctx, "typed", [][]byte{[]byte("inv-2"), []byte("inv-3")}, &worqr.EnqueueOpts{Type: "bill"}); err != nil {
			t.Fatal(err)
		}
		if _, err := worqr.EnqueueValue(ctx, b.client, "typed", signup{Email: "ada@example.com"}, nil, &worqr.EnqueueOpts{Type: "welcome"}); err != nil {
			t.Fatal(err)
		}
		info, err := b.in.Task(ctx, "typed", one)
		if err != nil || info.Type != "bill" || string(info.HandlerPayload()) != "inv-1" || info.MaxAttempts != 1 {
			t.Fatalf("Inspector.Task = %+v, %v; want type bill, payload inv-1, its other options kept", info, err)
		}
		b.startWorker(worqr.WorkerConfig{Queues: map[string]worqr.QueueConfig{"typed": {Handler: mux, Concurrency: 1}}})
		var ran []string
		for range 4 {
			select {
			case r := <-got:
				ran = append(ran, r)
			case <-time.After(10 * time.Second):
				t.Fatalf("the Mux ran %q, want 4 tasks", ran)
			}
		}
		if s := strings.Join(ran, ", "); s != "bill inv-1, bill inv-2, bill inv-3, welcome ada@example.com" {
			t.Errorf("the Mux ran %q", s)
		}
	})

	t.Run("a bad type is refused by its field, EnqueueMerge refuses one", func(t *testing.T) {
		b := setup(t)
		bad := &worqr.EnqueueOpts{Type: "bad type"}
		_, err := b.client.Enqueue(ctx, "typed", []byte("p"), bad)
		if f := invalidField(t, "Enqueue with a bad type", err); f != "EnqueueOpts.Type" {
			t.Errorf("Enqueue with a bad type names %q", f)
		}
		_, err = b.client.EnqueueBatch(ctx, "typed", [][]byte{[]byte("p")}, bad)
		if f := invalidField(t, "EnqueueBatch with a bad type", err); f != "EnqueueOpts.Type" {
			t.Errorf("EnqueueBatch with a bad type names %q", f)
		}
		_, _, err = b.client.EnqueueMerge(ctx, "typed", "k", []byte("p"),
			func(_, in []byte) ([]byte, error) { return in, nil }, &worqr.EnqueueOpts{Type: "bill"})
		if f := invalidField(t, "EnqueueMerge with a type", err); f != "EnqueueOpts.Type" {
			t.Errorf("EnqueueMerge with a type names %q", f)
		}
		if q, err := b.in.Queue(ctx, "typed"); err != nil || q.Waiting != 0 || q.Keys != 0 {
			t.Errorf("Queue = %+v, %v; want nothing enqueued", q, err)
		}
	})
}

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
		id, err := c.Enqueue(ctx, "mm", []byte(p), &worqr.EnqueueOpts{Key: key, Type: typ})
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
