package worqr_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// commands returns the total number of commands Redis has run (INFO
// commandstats), including those run inside scripts.
func commands(b *testing.B, pool *redis.Pool) int64 { return count(b, pool, "") }

// scriptCalls returns the number of EVALSHA and EVAL calls Redis has run.
func scriptCalls(b *testing.B, pool *redis.Pool) int64 {
	return count(b, pool, "cmdstat_evalsha:") + count(b, pool, "cmdstat_eval:")
}

func count(b *testing.B, pool *redis.Pool, only string) int64 {
	c := pool.Get()
	defer c.Close()
	info, err := redis.String(c.Do("INFO", "commandstats"))
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_") || strings.HasPrefix(line, "cmdstat_info:") ||
			only != "" && !strings.HasPrefix(line, only) {
			continue
		}
		i := strings.Index(line, "calls=")
		j := strings.IndexByte(line[i:], ',')
		n, _ := strconv.ParseInt(line[i+6:i+j], 10, 64)
		total += n
	}
	return total
}

// redisCPU returns Redis's used CPU (user + sys) in microseconds.
func redisCPU(b *testing.B, pool *redis.Pool) float64 {
	c := pool.Get()
	defer c.Close()
	info, err := redis.String(c.Do("INFO", "cpu"))
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		for _, k := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if strings.HasPrefix(line, k) {
				v, _ := strconv.ParseFloat(line[len(k):], 64)
				total += v * 1e6
			}
		}
	}
	return total
}

var payload100 = []byte(strings.Repeat("p", 100))

// BenchmarkEnqueueParallel10 enqueues one task per call from 10 goroutines.
func BenchmarkEnqueueParallel10(b *testing.B) {
	pool := srv.Pool()
	defer pool.Close()
	pool.MaxIdle = 32
	c := newClient(b, pool, &worqr.Config{Namespace: redistest.Namespace()})
	ctx := context.Background()
	before := commands(b, pool)
	cpu := redisCPU(b, pool)
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
	b.StopTimer()
	b.ReportMetric(float64(commands(b, pool)-before)/float64(b.N), "cmds/op")
	b.ReportMetric((redisCPU(b, pool)-cpu)/float64(b.N), "redis-µs/op")
}

// BenchmarkDrain50 drains b.N pre-enqueued tasks with a no-op handler at
// concurrency 50.
func BenchmarkDrain50(b *testing.B) {
	pool := srv.Pool()
	defer pool.Close()
	pool.MaxIdle = 64
	ns := redistest.Namespace()
	c := newClient(b, pool, &worqr.Config{Namespace: ns})
	ctx := context.Background()
	for left := b.N; left > 0; left -= 1000 {
		batch := make([][]byte, min(left, 1000))
		for i := range batch {
			batch[i] = payload100
		}
		if _, err := c.EnqueueBatch(ctx, "bench", batch, nil); err != nil {
			b.Fatal(err)
		}
	}
	drain(b, pool, ns, worqr.QueueConfig{Concurrency: 50, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
		return nil
	})})
}

// drain runs a worker with queue "bench" configured as qc until b.N tasks
// are done, timing that and reporting Redis commands, script calls and
// Redis CPU per task.
func drain(b *testing.B, pool *redis.Pool, ns string, qc worqr.QueueConfig) {
	ctx := context.Background()
	var done atomic.Int64
	all := make(chan struct{})
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{
		Config: worqr.Config{Namespace: ns},
		Queues: map[string]worqr.QueueConfig{"bench": qc},
		OnEvent: func(e worqr.Event) {
			if e.Kind == worqr.EventDone && done.Add(1) == int64(b.N) {
				close(all)
			}
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	before := commands(b, pool)
	scripts := scriptCalls(b, pool)
	cpu := redisCPU(b, pool)
	b.ResetTimer()
	if err := w.Start(ctx); err != nil {
		b.Fatal(err)
	}
	<-all
	b.StopTimer()
	b.ReportMetric(float64(commands(b, pool)-before)/float64(b.N), "cmds/op")
	b.ReportMetric(float64(scriptCalls(b, pool)-scripts)/float64(b.N), "scripts/op")
	b.ReportMetric((redisCPU(b, pool)-cpu)/float64(b.N), "redis-µs/op")
	w.Stop(ctx)
}

// BenchmarkKeyedDrain drains b.N pre-enqueued tasks spread over 100 keys at
// concurrency 50, one task per handler call (Handler) or in batches of up to
// 10 per key (BatchHandler, KeyBatch 10).
func BenchmarkKeyedDrain(b *testing.B) {
	for _, batch := range []int{0, 10} {
		name := "handler"
		if batch > 0 {
			name = "batch" + strconv.Itoa(batch)
		}
		b.Run(name, func(b *testing.B) { keyedDrain(b, 100, batch) })
	}
}

func keyedDrain(b *testing.B, keys, batch int) {
	pool := srv.Pool()
	defer pool.Close()
	pool.MaxIdle = 64
	ns := redistest.Namespace()
	c := newClient(b, pool, &worqr.Config{Namespace: ns})
	ctx := context.Background()
	per := make([][][]byte, keys)
	for i := 0; i < b.N; i++ {
		per[i%keys] = append(per[i%keys], payload100)
	}
	for k, ps := range per {
		for lo := 0; lo < len(ps); lo += 1000 {
			if _, err := c.EnqueueBatch(ctx, "bench", ps[lo:min(lo+1000, len(ps))], &worqr.EnqueueOpts{Key: "k" + strconv.Itoa(k)}); err != nil {
				b.Fatal(err)
			}
		}
	}
	qc := worqr.QueueConfig{Concurrency: 50, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil })}
	if batch > 0 {
		qc.Handler, qc.KeyBatch = nil, batch
		qc.BatchHandler = worqr.BatchHandlerFunc(func(context.Context, *worqr.Batch) error { return nil })
	}
	drain(b, pool, ns, qc)
}

// BenchmarkMemoryPerWaitingTask reports Redis memory per waiting task
// (100-byte payloads, enqueued in batches).
func BenchmarkMemoryPerWaitingTask(b *testing.B) {
	pool := srv.Pool()
	defer pool.Close()
	c := newClient(b, pool, &worqr.Config{Namespace: redistest.Namespace()})
	ctx := context.Background()
	used := func() float64 {
		conn := pool.Get()
		defer conn.Close()
		info, _ := redis.String(conn.Do("INFO", "memory"))
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
				n, _ := strconv.ParseFloat(v, 64)
				return n
			}
		}
		return 0
	}
	before := used()
	for left := b.N; left > 0; left -= 1000 {
		batch := make([][]byte, min(left, 1000))
		for i := range batch {
			batch[i] = payload100
		}
		if _, err := c.EnqueueBatch(ctx, "mem", batch, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric((used()-before)/float64(b.N), "B/task")
}

// BenchmarkEnqueueBatch enqueues b.N distinct 100-byte payloads in one
// EnqueueBatch call (run it with -benchtime 1000000x for issue 11's bulk
// figure): tasks/s, Redis CPU and commands per task, with nothing else
// measuring (workload h of cmd/worqr-bench adds SLOWLOG, a prober and a live
// worker, which cost Redis about as much again).
func BenchmarkEnqueueBatch(b *testing.B) {
	pool := srv.Pool()
	defer pool.Close()
	c := newClient(b, pool, &worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true})
	ps := make([][]byte, b.N)
	for i := range ps {
		ps[i] = []byte(strconv.Itoa(i) + strings.Repeat("p", 100))[:100]
	}
	before, cpu := commands(b, pool), redisCPU(b, pool)
	b.ResetTimer()
	if _, err := c.EnqueueBatch(context.Background(), "bulk", ps, nil); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
	b.ReportMetric(float64(commands(b, pool)-before)/float64(b.N), "cmds/op")
	b.ReportMetric((redisCPU(b, pool)-cpu)/float64(b.N), "redis-µs/op")
}

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

// BenchmarkWait measures a round trip through a worker as a caller sees
// it: Enqueue, then Wait for the task's end, one task at a time, with the
// default Config.EventInterval (250 ms). The handler works 2 ms, so that
// the Wait has begun when the task ends (a task that ended before its Wait
// began, with no retention to keep it, is known only by its end's event);
// the queue keeps ended tasks a minute. ns/op is the latency, cmds/op the
// Redis commands per task (enqueue, take, end, the Wait's reads, events).
func BenchmarkWait(b *testing.B) {
	pool := srv.Pool()
	defer pool.Close()
	ns := redistest.Namespace()
	ctx := context.Background()
	cfg := worqr.Config{Namespace: ns}
	c := newClient(b, pool, &cfg)
	defer c.Flush() // its events, before the pool closes
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg, Queues: map[string]worqr.QueueConfig{
		"bench": {Concurrency: 1, Retention: time.Minute, Handler: worqr.HandlerFunc(func(ctx context.Context, _ *worqr.Task) error {
			select { // the task's work
			case <-time.After(2 * time.Millisecond):
			case <-ctx.Done():
			}
			return nil
		})}}})
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer w.Stop(ctx)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	before := commands(b, pool)
	b.ResetTimer()
	for range b.N {
		id, err := c.Enqueue(ctx, "bench", payload100, nil)
		if err != nil {
			b.Fatal(err)
		}
		if info, err := c.Wait(wctx, "bench", id); err != nil || info.State != worqr.StateDone {
			b.Fatalf("Wait = %+v, %v", info, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(commands(b, pool)-before)/float64(b.N), "cmds/op")
}
