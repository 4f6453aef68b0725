package worqr_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// BenchmarkReplicas measures what Config.Replicas 1 costs on a local
// primary with one replica: enqueues from 10 goroutines and a drain at
// concurrency 50, each without it (off) and with it (wait1). The figures
// are in docs/BENCHMARKS.md "Waiting for replicas".
//
//	go test -run '^$' -bench BenchmarkReplicas -benchtime 20000x -count 5 ./worqr
func BenchmarkReplicas(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	primary, replicas, err := redistest.StartReplicated(ctx, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer primary.Stop()
	defer replicas[0].Stop()
	pool := primary.Pool()
	defer pool.Close()
	pool.MaxIdle = 64
	for _, n := range []int{0, 1} {
		mode := "off"
		if n > 0 {
			mode = "wait" + strconv.Itoa(n)
		}
		cfg := func() worqr.Config {
			return worqr.Config{Namespace: redistest.Namespace(), Replicas: n, DisableEvents: true}
		}
		b.Run("enqueue/"+mode, func(b *testing.B) {
			cfg := cfg()
			c, err := worqr.NewClient(pool, &cfg)
			if err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			b.ResetTimer()
			var wg sync.WaitGroup
			for g := 0; g < 10; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						if _, err := c.Enqueue(ctx, "bench", payload100, nil); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
		b.Run("drain/"+mode, func(b *testing.B) {
			cfg := cfg()
			c, err := worqr.NewClient(pool, &cfg)
			if err != nil {
				b.Fatal(err)
			}
			for left := b.N; left > 0; left -= 1000 {
				batch := make([][]byte, min(left, 1000))
				for i := range batch {
					batch[i] = payload100
				}
				if _, err := c.EnqueueBatch(ctx, "bench", batch, nil); err != nil {
					b.Fatal(err)
				}
			}
			var done atomic.Int64
			all := make(chan struct{})
			w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg,
				Queues: map[string]worqr.QueueConfig{"bench": {Concurrency: 50, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
					return nil
				})}},
				OnEvent: func(e worqr.Event) {
					if e.Kind == worqr.EventError {
						b.Error(e.Err)
					}
					if e.Kind == worqr.EventDone && done.Add(1) == int64(b.N) {
						close(all)
					}
				},
			})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			if err := w.Start(ctx); err != nil {
				b.Fatal(err)
			}
			<-all
			b.StopTimer()
			_ = w.Stop(ctx)
		})
	}
}
