package cluster_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/worqr/worqr-go/consumer"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

type span struct{ head uint64 }

func (s span) Head(context.Context) (uint64, error)                { return s.head, nil }
func (s span) AtIndex(_ context.Context, i uint64) (uint64, error) { return i, nil }

// Indexed consumers on the cluster: one per master (their tags spread),
// each run by two processes' worth of consumers, every index worked once
// and both scripts (consumer_dispatch, consumer_done) on the node of the
// consumer's tag.
func TestConsumersOnCluster(t *testing.T) {
	pool := needCluster(t)
	ns := redistest.Namespace()
	// Consumer names whose queues (their tags) live on different masters.
	var names []string
	for _, q := range spread(t, consumer.QueueName("c")) {
		names = append(names, q[len(consumer.QueueName("")):])
	}
	const n = 200
	var mu sync.Mutex
	runs := map[string]int{}
	ctx := context.Background()
	var readers []*consumer.Consumer[uint64]
	settings := *fastWorker(ns, nil)
	settings.HeartbeatTTL = 5 * time.Second // nothing dies here: no run again on a loaded machine
	for _, name := range names {
		for k := 0; k < 2; k++ {
			cfg := consumer.Config[uint64]{Name: name, Source: span{n - 1}, MaxProcessing: 8,
				Process: func(_ context.Context, i uint64, _ uint64) error {
					mu.Lock()
					runs[name+"/"+strconv.FormatUint(i, 10)]++
					mu.Unlock()
					return nil
				},
				Worker: settings}
			c, err := consumer.New(pool, &cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				_ = c.Stop(sctx)
			})
			if k == 0 {
				readers = append(readers, c)
			}
		}
	}
	redistest.WaitFor(t, 30*time.Second, "every consumer done", func() bool {
		for _, c := range readers {
			if p, err := c.ProcessedIndex(ctx); err != nil || p != n {
				return false
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != n*len(names) {
		t.Errorf("%d distinct jobs ran, want %d", len(runs), n*len(names))
	}
	for job, k := range runs {
		if k != 1 {
			t.Errorf("job %s ran %d times", job, k)
		}
	}
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	// The last index is marked done (consumer_done) before its taking
	// ends (the worker's end, a moment later): poll.
	for _, name := range names {
		if !poll(5*time.Second, func() bool {
			q, err := in.Queue(ctx, consumer.QueueName(name))
			return err == nil && q.Waiting+q.Active+q.Scheduled == 0
		}) {
			q, err := in.Queue(ctx, consumer.QueueName(name))
			t.Errorf("%s: %+v, %v", name, q, err)
		}
	}
}
