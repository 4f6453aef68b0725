package remote_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/worqr/worqr-go/remote"
	"github.com/worqr/worqr-go/worqr"
)

// A remote session takes from a fair queue as a Go worker does (the one
// engine): the keys in turn, each within its limit, its takings' slots
// given back by its ends and by its close.
func TestRemoteFairQueue(t *testing.T) {
	ctx := context.Background()
	pol := worqr.KeyPolicy{Fair: true, PerKey: worqr.KeyLimits{Limits: worqr.Limits{Concurrency: 2}}}
	b := setupRemote(t, ctx, remote.Config{Queues: map[string]worqr.QueueConfig{"fair": {Keys: pol}}})
	s := open(t, b, "fair")
	for _, key := range []string{"A", "A", "A", "A", "B"} {
		if _, err := b.client.Enqueue(ctx, "fair", []byte(key), &worqr.EnqueueOpts{Key: key}); err != nil {
			t.Fatal(err)
		}
	}
	take := func(max int) []remote.Taking {
		t.Helper()
		ks, err := s.Take(ctx, remote.TakeRequest{Queue: "fair", Max: max, Wait: 0})
		if err != nil {
			t.Fatal(err)
		}
		return ks
	}
	count := func(ks []remote.Taking) map[string]int {
		out := map[string]int{}
		for _, k := range ks {
			out[string(k.Payload)]++
		}
		return out
	}
	var held []remote.Taking
	wait(t, 10*time.Second, "the session to take A's 2 and B's 1", func() bool {
		held = append(held, take(10)...)
		return len(held) >= 3
	})
	if c := count(held); c["A"] != 2 || c["B"] != 1 || len(held) != 3 {
		t.Fatalf("took %v, want A twice (its limit) and B once", c)
	}
	if ks := take(10); len(ks) != 0 {
		t.Fatalf("took %v more while A runs its limit", count(ks))
	}
	for _, k := range held {
		if string(k.Payload) == "A" {
			if out, err := s.Finish(ctx, k.PID, nil); err != nil || out != worqr.EventDone {
				t.Fatalf("finish = %q, %v", out, err)
			}
			break
		}
	}
	if c := count(take(10)); c["A"] != 1 || len(c) != 1 {
		t.Fatalf("took %v once one of A's 2 ended, want A once", c)
	}
	// The close gives every slot back: a new session takes A's last 2.
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s2 := open(t, b, "fair")
	var again []remote.Taking
	wait(t, 10*time.Second, "a new session to take A's 2 again", func() bool {
		ks, err := s2.Take(ctx, remote.TakeRequest{Queue: "fair", Max: 10})
		if err != nil {
			t.Fatal(err)
		}
		again = append(again, ks...)
		return len(again) >= 2
	})
	if c := count(again); c["A"] != 2 {
		t.Fatalf("the new session took %v, want A twice (its limit, slots given back by the close)", c)
	}
}

// A fair queue's per-key limits hold across two Go workers and a remote
// session taking at once: counted by the handlers' own records, no key
// runs more than its Concurrency, and (read from the tasks' start times,
// Redis's clock) no key starts more than its Rate in any window of its
// Period.
func TestRemoteFairLimitsBesideWorkers(t *testing.T) {
	ctx := context.Background()
	const conc, rate, period, perKey = 2, 4, 300 * time.Millisecond, 12
	pol := worqr.KeyPolicy{Fair: true, PerKey: worqr.KeyLimits{Limits: worqr.Limits{Concurrency: conc, Rate: rate, Period: period}}}
	qc := worqr.QueueConfig{Keys: pol, Retention: time.Minute}
	b := setupRemote(t, ctx, remote.Config{Queues: map[string]worqr.QueueConfig{"fair": qc}})
	if err := b.client.SetKeyPolicy(ctx, "fair", pol); err != nil { // fair before the first keyed enqueue
		t.Fatal(err)
	}
	keys := []string{"A", "B", "C"}
	for _, key := range keys {
		ps := make([][]byte, perKey)
		for i := range ps {
			ps[i] = []byte(key)
		}
		if _, err := b.client.EnqueueBatch(ctx, "fair", ps, &worqr.EnqueueOpts{Key: key}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	running, most := map[string]int{}, map[string]int{}
	var remoteRan, done atomic.Int32
	run := func(key string) {
		mu.Lock()
		running[key]++
		most[key] = max(most[key], running[key])
		mu.Unlock()
		time.Sleep(5 * time.Millisecond) // the work
		mu.Lock()
		running[key]--
		mu.Unlock()
		done.Add(1)
	}
	for range 2 {
		wqc := qc
		wqc.Concurrency = 3
		wqc.Handler = worqr.HandlerFunc(func(_ context.Context, task *worqr.Task) error {
			run(task.Key)
			return nil
		})
		w, err := worqr.NewWorker(srv.TagCheckedPool(t), &worqr.WorkerConfig{Config: worqr.Config{Namespace: b.ns},
			Queues: map[string]worqr.QueueConfig{"fair": wqc}})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Stop(context.Background()) })
	}
	s := open(t, b, "fair")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			ks, err := s.Take(ctx, remote.TakeRequest{Queue: "fair", Max: 3, Wait: 50 * time.Millisecond})
			if err != nil {
				t.Error(err)
				return
			}
			for _, k := range ks {
				run(k.Key)
				remoteRan.Add(1)
				if _, err := s.Finish(ctx, k.PID, nil); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	wait(t, 60*time.Second, "every task to run", func() bool { return done.Load() == int32(perKey*len(keys)) })
	close(stop)
	wg.Wait()
	mu.Lock()
	for _, key := range keys {
		if most[key] > conc {
			t.Errorf("key %s ran %d tasks at once, over its Concurrency %d", key, most[key], conc)
		}
	}
	mu.Unlock()
	if remoteRan.Load() == 0 {
		t.Error("the remote session ran no task: the limits were not shared with it")
	}
	tasks, _, err := b.insp.Tasks(ctx, "fair", worqr.StateDone, 0, perKey*len(keys))
	if err != nil {
		t.Fatal(err)
	}
	starts := map[string][]time.Time{}
	for _, ti := range tasks {
		starts[ti.Key] = append(starts[ti.Key], ti.StartedAt)
	}
	for _, key := range keys {
		at := starts[key]
		slices.SortFunc(at, func(x, y time.Time) int { return x.Compare(y) })
		if len(at) != perKey {
			t.Fatalf("key %s: %d tasks done, want %d", key, len(at), perKey)
		}
		for i := rate; i < len(at); i++ {
			if d := at[i].Sub(at[i-rate]); d < period {
				t.Errorf("key %s: starts %d and %d are %s apart: %d starts within %s", key, i-rate, i, d, rate+1, period)
			}
		}
	}
	t.Logf("the remote session ran %d of %d tasks", remoteRan.Load(), perKey*len(keys))
}
