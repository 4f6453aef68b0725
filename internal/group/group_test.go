package group

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
)

// Every caller gets its own result, batches form under concurrency, and at
// most MaxInFlight batches run at once.
func TestGroupBatchesAndAnswersEachCaller(t *testing.T) {
	var running, maxRunning, batches, items atomic.Int64
	g := &Group[int, int]{MaxInFlight: 2, MaxBatch: 8, Run: func(_ context.Context, in []int) ([]int, error) {
		n := running.Add(1)
		for {
			m := maxRunning.Load()
			if n <= m || maxRunning.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(time.Millisecond)
		running.Add(-1)
		batches.Add(1)
		items.Add(int64(len(in)))
		if len(in) > 8 {
			t.Errorf("batch of %d over MaxBatch", len(in))
		}
		out := make([]int, len(in))
		for i, v := range in {
			out[i] = v * 2
		}
		return out, nil
	}}
	var wg sync.WaitGroup
	for i := 0; i < 400; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			got, err := g.Call(context.Background(), i)
			if err != nil || got != 2*i {
				t.Errorf("Do(%d) = %d, %v", i, got, err)
			}
		}(i)
	}
	wg.Wait()
	if items.Load() != 400 {
		t.Fatalf("%d items run, want 400", items.Load())
	}
	if maxRunning.Load() > 2 {
		t.Fatalf("%d batches at once, want at most 2", maxRunning.Load())
	}
	if batches.Load() >= 400 {
		t.Fatalf("no batching: %d batches for 400 items", batches.Load())
	}
	if g.inFlight != 0 || len(g.pending) != 0 {
		t.Fatalf("left in flight %d, pending %d", g.inFlight, len(g.pending))
	}
}

func TestGroupErrorReachesEveryCallerOfTheBatch(t *testing.T) {
	boom := errors.New("boom")
	g := &Group[int, int]{Run: func(context.Context, []int) ([]int, error) { return nil, boom }}
	if _, err := g.Call(context.Background(), 1); !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
}

// A waiting caller whose context ends is removed and never run; the lead it
// may have been handed is passed on, so later callers still complete. Each
// step waits for the state it needs (the first batch running, a caller
// waiting), not for a fixed time: on a loaded machine a caller started 20ms
// earlier may not have arrived yet, and the abandoned one then ran a batch
// of its own.
func TestGroupAbandonedCallerIsNotRunAndLeadIsPassedOn(t *testing.T) {
	release := make(chan struct{})
	holding := make(chan struct{})
	var ran sync.Map
	g := &Group[int, int]{MaxInFlight: 1, Run: func(_ context.Context, in []int) ([]int, error) {
		for _, v := range in {
			ran.Store(v, true)
			if v == 0 {
				close(holding)
				<-release
			}
		}
		return in, nil
	}}
	go g.Call(context.Background(), 0) // holds the only lead until released
	<-holding
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := g.Call(ctx, 1); errc <- err }()
	waitPending(t, g, 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned call returned %v", err)
	}
	done := make(chan int, 1)
	go func() { v, _ := g.Call(context.Background(), 2); done <- v }()
	waitPending(t, g, 1)
	close(release)
	select {
	case v := <-done:
		if v != 2 {
			t.Fatalf("got %d", v)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a later caller never completed: the lead was lost")
	}
	if _, ok := ran.Load(1); ok {
		t.Fatal("the abandoned item was run")
	}
}

// waitPending waits until n callers of g wait for a batch (a caller's
// arrival is a state of g, not an event it reports).
func waitPending[T, R any](t *testing.T, g *Group[T, R], n int) {
	t.Helper()
	redistest.Eventually(t, 10*time.Second, func() string {
		if k := g.Waiting(); k != n {
			return fmt.Sprintf("%d callers waiting, want %d", k, n)
		}
		return ""
	})
}

func TestGroupWeightCapsABatch(t *testing.T) {
	var sizes []int
	g := &Group[int, int]{MaxBatch: 10, Weight: func(w int) int { return w }, MaxWeight: 5}
	for _, w := range []int{3, 2, 1, 7, 1} {
		g.pending = append(g.pending, &call[int, int]{item: w})
	}
	for len(g.pending) > 0 {
		sizes = append(sizes, len(g.take()))
	}
	// 3+2 = 5; 1 (then 1+7 > 5); 7 alone (a batch takes its first item); 1.
	if want := []int{2, 1, 1, 1}; !reflect.DeepEqual(sizes, want) {
		t.Fatalf("batch sizes %v, want %v", sizes, want)
	}
}
