package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// TestOrderedOnCluster runs ordered queues on each master: keyed enqueues
// (merging on one queue), retries, a dead head that blocks its key until it
// is requeued, and checks that each key ran in order, one task at a time.
// The scripts reach a key's list and head hash by name (docs/PROTOCOL.md,
// "Keys a script cannot declare"): a cluster refuses them if they were in
// another slot.
func TestOrderedOnCluster(t *testing.T) {
	pool := needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	ns := redistest.Namespace()
	queues := spread(t, "ord-")
	client, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	running := map[string]bool{}
	done := map[string][]string{}
	var bad []string
	died := map[string]bool{} // queues whose doomed task died once
	handler := worqr.HandlerFunc(func(_ context.Context, task *worqr.Task) error {
		k := task.Queue + "/" + task.Key
		mu.Lock()
		if running[k] {
			bad = append(bad, "two runs of "+k)
		}
		running[k] = true
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		delete(running, k)
		p := string(task.Payload)
		if p == "p0" && task.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		if p == "doomed" && !died[task.Queue] {
			died[task.Queue] = true
			return worqr.SkipRetry(errors.New("dies"))
		}
		done[k] = append(done[k], p)
		return nil
	})
	qcfg := map[string]worqr.QueueConfig{}
	for _, q := range queues {
		qcfg[q] = worqr.QueueConfig{Handler: handler, Concurrency: 4,
			Backoff: func(int, error) time.Duration { return 10 * time.Millisecond }}
	}
	w, err := worqr.NewWorker(pool, fastWorker(ns, qcfg))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background())
	for _, q := range queues {
		for k := range 5 {
			key := fmt.Sprintf("k%d", k)
			payloads := [][]byte{[]byte("p0"), []byte("p1"), []byte("p2")}
			if k == 0 {
				payloads = append([][]byte{[]byte("doomed")}, payloads...)
			}
			if _, err := client.EnqueueBatch(ctx, q, payloads, &worqr.EnqueueOpts{Key: key}); err != nil {
				t.Fatal(err)
			}
		}
	}
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 15*time.Second, "every key but the blocked ones to finish", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, d := range done {
			n += len(d)
		}
		return n == len(queues)*4*3
	})
	for _, q := range queues {
		blocked, err := in.BlockedKeys(ctx, q, 10)
		if err != nil || len(blocked) != 1 || blocked[0].Key != "k0" || blocked[0].Behind != 3 {
			t.Fatalf("%s: blocked keys %+v, %v", q, blocked, err)
		}
		if n, err := in.RequeueDead(ctx, q, blocked[0].Head.ID); err != nil || n != 1 {
			t.Fatalf("%s: requeue dead: %d %v", q, n, err)
		}
	}
	redistest.WaitFor(t, 15*time.Second, "the unblocked keys to finish", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, d := range done {
			n += len(d)
		}
		return n == len(queues)*(4*3+4)
	})
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatal(bad)
	}
	for k, d := range done {
		want := "[p0 p1 p2]"
		if k[len(k)-2:] == "k0" {
			want = "[doomed p0 p1 p2]"
		}
		if fmt.Sprint(d) != want {
			t.Errorf("%s ran %v, want %s", k, d, want)
		}
	}
	// Merging on a cluster: a keyed enqueue behind a waiting task merges.
	// The worker stops first: one that had not yet read the pause below
	// could take the first task before the second came.
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	q := queues[1]
	if err := client.SetKeyPolicy(ctx, q, worqr.KeyPolicy{Merge: true}); err != nil {
		t.Fatal(err)
	}
	if err := in.Pause(ctx, q); err != nil {
		t.Fatal(err)
	}
	a, err := client.Enqueue(ctx, q, []byte("a"), &worqr.EnqueueOpts{Key: "m"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := client.Enqueue(ctx, q, []byte("b"), &worqr.EnqueueOpts{Key: "m"})
	if err != nil || b != a {
		t.Fatalf("merge: %s into %s, %v", b, a, err)
	}
	info, err := in.Task(ctx, q, a)
	if err != nil || len(info.Payloads) != 2 {
		t.Fatalf("merged task: %+v %v", info, err)
	}
}
