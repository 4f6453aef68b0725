package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/rdb/cluster"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// batchLedger records what the batch handlers of TestKeyBatchOnCluster ran.
type batchLedger struct {
	mu       sync.Mutex
	running  map[string]bool  // "<queue>/<key>" -> a batch of it runs
	done     map[string][]int // "<queue>/<key>" -> indexes done, in order
	runs     map[string]int   // "<queue>/<key>/<index>" -> successful runs
	failed   map[string][]int // "<queue>/<key>/<first index>" -> the batch that failed
	sizes    map[int]int      // batch size -> batches of that size
	inflight map[string]int   // queue -> batches in their handler
	retried  int              // failed batches that ran again
	moving   bool             // the slot move is under way
	duringMv int              // batches of the moved queue that ended while it was
	// waitMove, when set, holds the moved queue's next batch in its
	// handler until it is closed (the move has begun).
	waitMove chan struct{}
	bad      []string
}

func newBatchLedger() *batchLedger {
	return &batchLedger{running: map[string]bool{}, done: map[string][]int{}, runs: map[string]int{},
		failed: map[string][]int{}, sizes: map[int]int{}, inflight: map[string]int{}}
}

// handler returns queue q's BatchHandler: it checks that a batch holds
// consecutive tasks of one key, starting right after the key's last done
// one, with no other batch of the key running; a batch holding an index
// equal to 3 mod 7 fails its first attempt, and its retry must start with
// the same tasks in the same order.
func (l *batchLedger) handler(q, moveQ string, size int) worqr.BatchHandler {
	return worqr.BatchHandlerFunc(func(_ context.Context, b *worqr.Batch) error {
		qk := q + "/" + b.Key
		idx := make([]int, len(b.Tasks))
		l.mu.Lock()
		for i, t := range b.Tasks {
			k, n, _ := strings.Cut(string(t.Payload), "/")
			idx[i], _ = strconv.Atoi(n)
			if k != b.Key || t.Key != b.Key {
				l.bad = append(l.bad, fmt.Sprintf("batch of %s holds %s (key %q)", qk, t.Payload, t.Key))
			}
		}
		if l.running[qk] {
			l.bad = append(l.bad, "two batches of "+qk+" at once")
		}
		if want := len(l.done[qk]); idx[0] != want {
			l.bad = append(l.bad, fmt.Sprintf("batch %v of %s starts at %d, want %d", idx, qk, idx[0], want))
		}
		for i := 1; i < len(idx); i++ {
			if idx[i] != idx[i-1]+1 {
				l.bad = append(l.bad, fmt.Sprintf("batch %v of %s is not in order", idx, qk))
				break
			}
		}
		if len(idx) > size {
			l.bad = append(l.bad, fmt.Sprintf("batch %v of %s holds more than %d", idx, qk, size))
		}
		l.running[qk] = true
		l.sizes[len(idx)]++
		l.inflight[q]++
		first := fmt.Sprintf("%s/%d", qk, idx[0])
		prev, again := l.failed[first]
		var wait chan struct{}
		if q == moveQ {
			wait, l.waitMove = l.waitMove, nil
		}
		l.mu.Unlock()

		if wait != nil {
			<-wait
		}
		time.Sleep(15 * time.Millisecond)

		l.mu.Lock()
		defer l.mu.Unlock()
		l.running[qk] = false
		l.inflight[q]--
		if q == moveQ && l.moving {
			l.duringMv++
		}
		if again {
			if len(idx) < len(prev) || !slices.Equal(idx[:len(prev)], prev) {
				l.bad = append(l.bad, fmt.Sprintf("%s: the retry of batch %v runs %v", qk, prev, idx))
			}
			delete(l.failed, first)
			l.retried++
		} else if b.Attempt == 1 && slices.ContainsFunc(idx, func(i int) bool { return i%7 == 3 }) {
			l.failed[first] = idx
			return errors.New("the batch fails its first attempt")
		}
		for _, i := range idx {
			l.runs[fmt.Sprintf("%s/%d", qk, i)]++
		}
		l.done[qk] = append(l.done[qk], idx...)
		return nil
	})
}

func (l *batchLedger) doneCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, d := range l.done {
		n += len(d)
	}
	return n
}

// TestKeyBatchOnCluster runs batches per key (QueueConfig.KeyBatch) on a
// queue on each master: each key runs in order, in batches of up to
// KeyBatch tasks taken and ended in one script each (their keys all under
// the queue's tag), a failed batch runs again whole and in order, and the
// slot of one queue moves to another master while its batches run and
// keyed tasks keep coming: every task is done exactly once.
func TestKeyBatchOnCluster(t *testing.T) {
	pool := needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns := redistest.Namespace()
	queues := spread(t, "kbatch-")
	moveQ := queues[0]
	const keys, per, size = 4, 24, 4
	client, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	l := newBatchLedger()
	qcfg := map[string]worqr.QueueConfig{}
	for _, q := range queues {
		qcfg[q] = worqr.QueueConfig{BatchHandler: l.handler(q, moveQ, size), KeyBatch: size, Concurrency: 3,
			Backoff: func(int, error) time.Duration { return 10 * time.Millisecond }}
	}
	// Every key's tasks wait before the worker starts: its first takes
	// find full batches.
	next := map[string]int{} // "<queue>/<key>" -> next index to enqueue
	enqueue := func(q, key string, n int) error {
		ps := make([][]byte, n)
		for i := range ps {
			ps[i] = []byte(fmt.Sprintf("%s/%d", key, next[q+"/"+key]+i))
		}
		if _, err := client.EnqueueBatch(ctx, q, ps, &worqr.EnqueueOpts{Key: key}); err != nil {
			return err
		}
		next[q+"/"+key] += n
		return nil
	}
	for _, q := range queues {
		for k := range keys {
			if err := enqueue(q, fmt.Sprintf("k%d", k), per); err != nil {
				t.Fatal(err)
			}
		}
	}
	w, err := worqr.NewWorker(pool, fastWorker(ns, qcfg))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background())

	// Keyed tasks keep coming to moveQ (one per key a round, so each key's
	// order is the enqueue order) until the slot has moved.
	stopEnq := make(chan struct{})
	enqDone := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stopEnq:
				enqDone <- nil
				return
			case <-time.After(5 * time.Millisecond):
			}
			for k := range keys {
				if err := enqueue(moveQ, fmt.Sprintf("k%d", k), 1); err != nil {
					enqDone <- fmt.Errorf("enqueue during the move: %w", err)
					return
				}
			}
		}
	}()

	from := ownerOf(t, moveQ)
	to := otherNode(from)
	// The move starts while a batch of moveQ is held in its handler (once
	// the slot is split, no take of moveQ can run): its end meets the split
	// slot.
	moveBegun := make(chan struct{})
	var begin sync.Once
	defer begin.Do(func() { close(moveBegun) })
	l.mu.Lock()
	l.waitMove = moveBegun
	l.mu.Unlock()
	if !poll(10*time.Second, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.waitMove == nil // a batch of moveQ holds it
	}) {
		t.Fatal("no batch of the moved queue ran")
	}
	stats, err := cl.MoveTagSlot(ctx, cluster.TagSlot(moveQ), to, redistest.MoveOpts{Batch: 5, Pause: 10 * time.Millisecond,
		Between: func() {
			l.mu.Lock()
			l.moving = true
			l.mu.Unlock()
			begin.Do(func() { close(moveBegun) })
		}})
	if err != nil {
		t.Fatalf("moving the slot of %s: %v", moveQ, err)
	}
	l.mu.Lock()
	l.moving = false
	l.mu.Unlock()
	_ = redistest.Pause(ctx, 100*time.Millisecond) // a few enqueues after the move too
	close(stopEnq)
	if err := <-enqDone; err != nil {
		t.Fatal(err)
	}
	if got := ownerOf(t, moveQ); got != to.Addr {
		t.Fatalf("%s is served by %s after the move, want %s", moveQ, got, to.Addr)
	}
	total := 0
	for _, n := range next {
		total += n
	}
	t.Logf("slot of %s moved %s -> %s: %d keys in %d batches, %v; %d tasks enqueued in all",
		moveQ, from, to.Addr, stats.Keys, stats.Batches, stats.Duration.Round(time.Millisecond), total)
	redistest.WaitFor(t, 30*time.Second, "every task done", func() bool { return l.doneCount() == total })

	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 10*time.Second, "every key forgotten", func() bool {
		for _, q := range queues {
			_, _, n, err := in.Keys(ctx, q, 0, 100)
			if err != nil || n != 0 {
				return false
			}
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.bad) > 0 {
		t.Fatalf("%d violations: %v", len(l.bad), l.bad[:min(10, len(l.bad))])
	}
	for qk, n := range next {
		if d := l.done[qk]; !slices.Equal(d, seq(n)) {
			t.Errorf("%s done %v, want 0..%d in order", qk, d, n-1)
		}
		for i := range n {
			if r := l.runs[fmt.Sprintf("%s/%d", qk, i)]; r != 1 {
				t.Errorf("%s/%d done %d times, want once", qk, i, r)
			}
		}
	}
	big := 0
	for n, c := range l.sizes {
		if n > 1 {
			big += c
		}
	}
	t.Logf("batch sizes %v; %d failed batches ran again; %d batches of %s ended while its slot moved",
		l.sizes, l.retried, l.duringMv, moveQ)
	if big == 0 {
		t.Errorf("no batch held more than one task: %v", l.sizes)
	}
	if l.retried == 0 || len(l.failed) > 0 {
		t.Errorf("%d failed batches ran again, %d did not", l.retried, len(l.failed))
	}
	if l.duringMv == 0 {
		t.Error("no batch of the moved queue ended while its slot moved")
	}
	for _, q := range queues {
		if qi, err := in.Queue(ctx, q); err != nil || qi.Waiting != 0 {
			t.Errorf("%s: %+v, %v; want none waiting", q, qi, err)
		}
	}
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
