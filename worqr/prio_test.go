package worqr_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// TestPriorityOrder10k drains 10,000 tasks of mixed priority levels with
// one worker taking one at a time: they run highest level first, in
// enqueue order within a level, and a task given back runs again at once
// (the front of its level) before anything else.
func TestPriorityOrder10k(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	const n = 10000
	r := rand.New(rand.NewPCG(1, 2))
	level := map[string]int{}
	seq := map[string]int{}
	// Runs of 1 to 50 tasks at a random level, levels interleaved.
	for i := 0; i < n; {
		k := min(1+r.IntN(50), n-i)
		l := r.IntN(worqr.MaxPriority + 1)
		ps := make([][]byte, k)
		for j := range ps {
			ps[j] = []byte(strconv.Itoa(i + j))
		}
		got, err := c.EnqueueBatch(ctx, "prio", ps, &worqr.EnqueueOpts{Priority: l})
		if err != nil {
			t.Fatal(err)
		}
		for j, id := range got {
			level[id], seq[id] = l, i+j
		}
		i += k
	}
	want := make([]string, 0, n)
	for id := range level {
		want = append(want, id)
	}
	sort.Slice(want, func(a, b int) bool {
		x, y := want[a], want[b]
		if level[x] != level[y] {
			return level[x] > level[y]
		}
		return seq[x] < seq[y]
	})
	var mu sync.Mutex
	var ran []string
	gaveBack := map[string]bool{}
	done := make(chan struct{})
	startWorker(t, ctx, pool, &worqr.WorkerConfig{
		Config: worqr.Config{Namespace: ns},
		Queues: map[string]worqr.QueueConfig{"prio": {Concurrency: 1, Handler: worqr.HandlerFunc(func(_ context.Context, tk *worqr.Task) error {
			mu.Lock()
			defer mu.Unlock()
			ran = append(ran, tk.ID)
			if seq[tk.ID]%97 == 0 && !gaveBack[tk.ID] {
				gaveBack[tk.ID] = true
				return worqr.ErrGiveBack
			}
			if len(ran) == n+len(gaveBack) {
				close(done)
			}
			return nil
		})}},
	})
	select {
	case <-done:
	case <-time.After(120 * time.Second):
		t.Fatal("10,000 tasks not drained in 2 minutes")
	}
	mu.Lock()
	defer mu.Unlock()
	var firsts []string
	for i, id := range ran {
		if gaveBack[id] && (i+1 >= len(ran) || ran[i+1] != id) && slices.Index(ran, id) == i {
			t.Fatalf("task %s (level %d) given back at %d did not run again next: the front of its level", id, level[id], i)
		}
		if slices.Index(ran, id) == i {
			firsts = append(firsts, id)
		}
	}
	if len(firsts) != n {
		t.Fatalf("%d distinct tasks ran, want %d", len(firsts), n)
	}
	bad := 0
	for i := range firsts {
		if firsts[i] != want[i] {
			bad++
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d tasks out of priority order", bad, n)
	}
	t.Logf("%d tasks ran in priority order (%d given back, each taken again next)", n, len(gaveBack))
}

// TestWeightedShares: a worker serving three queues of weights 6, 3 and 1,
// all with work, gives them about 60%, 30% and 10% of its takes.
func TestWeightedShares(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	c := newClient(t, pool, &worqr.Config{Namespace: ns})
	weights := map[string]int{"w6": 6, "w3": 3, "w1": 1}
	const each, sample = 4000, 4000
	for q := range weights {
		ps := make([][]byte, each)
		for i := range ps {
			ps[i] = []byte("x")
		}
		if _, err := c.EnqueueBatch(ctx, q, ps, nil); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	counts := map[string]int{}
	total := 0
	done := make(chan struct{})
	queues := map[string]worqr.QueueConfig{}
	for q, wt := range weights {
		q := q
		queues[q] = worqr.QueueConfig{Weight: wt, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
			mu.Lock()
			defer mu.Unlock()
			if total < sample {
				counts[q]++
				if total++; total == sample {
					close(done)
				}
			}
			return nil
		})}
	}
	startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: worqr.Config{Namespace: ns},
		Priority: worqr.PriorityWeighted, Concurrency: 8, Queues: queues})
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("not drained")
	}
	mu.Lock()
	defer mu.Unlock()
	for q, wt := range weights {
		share := float64(counts[q]) / sample
		if want := float64(wt) / 10; share < want-0.04 || share > want+0.04 {
			t.Errorf("queue %s (weight %d) got %.3f of %d takes, want %.2f ± 0.04 (counts %v)", q, wt, share, sample, want, counts)
		}
	}
	t.Logf("shares over %d takes: %v", sample, counts)
}

// TestStrictPriority: with strict priority, a lower queue runs only once
// every higher one is empty.
func TestStrictPriority(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	c := newClient(t, pool, &worqr.Config{Namespace: ns})
	weights := map[string]int{"hi": 3, "mid": 2, "lo": 1}
	for q := range weights {
		ps := make([][]byte, 300)
		for i := range ps {
			ps[i] = []byte("x")
		}
		if _, err := c.EnqueueBatch(ctx, q, ps, nil); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var order []int
	done := make(chan struct{})
	queues := map[string]worqr.QueueConfig{}
	for q, wt := range weights {
		wt := wt
		queues[q] = worqr.QueueConfig{Weight: wt, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
			mu.Lock()
			defer mu.Unlock()
			if order = append(order, wt); len(order) == 900 {
				close(done)
			}
			return nil
		})}
	}
	startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: worqr.Config{Namespace: ns},
		Priority: worqr.PriorityStrict, Concurrency: 1, Queues: queues})
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("not drained")
	}
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(order); i++ {
		if order[i] > order[i-1] {
			t.Fatalf("task %d of weight %d ran after one of weight %d: a lower queue ran while a higher one had work", i, order[i], order[i-1])
		}
	}
}

func TestPriorityOutOfRange(t *testing.T) {
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	c := newClient(t, pool, &worqr.Config{Namespace: redistest.Namespace()})
	for _, p := range []int{-1, worqr.MaxPriority + 1} {
		_, err := c.Enqueue(context.Background(), "q", []byte("x"), &worqr.EnqueueOpts{Priority: p})
		want := fmt.Sprintf("worqr: EnqueueOpts.Priority (%d) must be between 0 and 9", p)
		if err == nil || err.Error() != want {
			t.Errorf("Priority %d: err = %v, want %q", p, err, want)
		}
	}
}

// A weighted group whose queue has a Concurrency cap below its share: the
// group may plan that queue past its cap, and an end that takes again for
// it launched into a full channel under launchMu, waiting on handlers that
// waited on it: both queues stopped for good, and Stop never returned
// (found by a helper's audit). A launch never blocks now; what has no room
// is put back. Every task runs.
func TestPriorityGroupCapNeverDeadlocks(t *testing.T) {
	ctx := context.Background()
	bundle := setup(t)
	pool, ns, c := bundle.pool, bundle.ns, bundle.client
	const n = 3000
	for _, q := range []string{"high", "low"} {
		ps := make([][]byte, n)
		for i := range ps {
			ps[i] = []byte("x")
		}
		if _, err := c.EnqueueBatch(ctx, q, ps, nil); err != nil {
			t.Fatal(err)
		}
	}
	var done atomic.Int64
	hold := func(d time.Duration) worqr.Handler {
		return worqr.HandlerFunc(func(context.Context, *worqr.Task) error { time.Sleep(d); done.Add(1); return nil })
	}
	cfg := fastTimings(ns)
	cfg.Priority, cfg.Concurrency = worqr.PriorityWeighted, 8
	cfg.Queues = map[string]worqr.QueueConfig{
		"high": {Weight: 1, Concurrency: 2, Handler: hold(3 * time.Millisecond)},
		"low":  {Weight: 1, Handler: hold(time.Millisecond)},
	}
	w := startWorker(t, ctx, pool, &cfg)
	for last := int64(-1); done.Load() < 2*n; {
		time.Sleep(2 * time.Second)
		if d := done.Load(); d == last {
			stopped := make(chan error, 1)
			go func() {
				sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				stopped <- w.Stop(sctx)
			}()
			select {
			case <-stopped:
				t.Fatalf("the worker stalled at %d of %d tasks done", d, 2*n)
			case <-time.After(15 * time.Second):
				t.Fatalf("the worker stalled at %d of %d tasks done, and Stop(2s) did not return in 15 s: a deadlock", d, 2*n)
			}
		} else {
			last = d
		}
	}
}
