package goredis_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	redigo "github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/contrib/goredis"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// BenchmarkClients runs worqr's enqueue and drain benchmarks (as in
// worqr/bench_test.go) on a redigo pool and on a go-redis client, against
// the same Redis in the same run: time, Redis commands (INFO
// commandstats, those run by scripts included) and Redis CPU per task.
func BenchmarkClients(b *testing.B) {
	admin := srv.Pool()
	defer admin.Close()
	clients := []struct {
		name string
		pool func(b *testing.B) worqr.ConnGetter
	}{
		{"redigo", func(b *testing.B) worqr.ConnGetter {
			p := srv.Pool()
			p.MaxIdle = 64
			b.Cleanup(func() { p.Close() })
			return p
		}},
		{"goredis", func(b *testing.B) worqr.ConnGetter {
			p, err := goredis.NewPool(newClient(b, nil))
			if err != nil {
				b.Fatal(err)
			}
			return p
		}},
	}
	for _, c := range clients {
		b.Run(c.name+"/EnqueueParallel10", func(b *testing.B) { enqueueParallel(b, admin, c.pool(b), 10) })
	}
	for _, c := range clients {
		b.Run(c.name+"/Drain50", func(b *testing.B) { drain(b, admin, c.pool(b), 50) })
	}
}

var payload100 = []byte(strings.Repeat("p", 100))

func enqueueParallel(b *testing.B, admin *redigo.Pool, pool worqr.ConnGetter, goroutines int) {
	cl, err := worqr.NewClient(pool, &worqr.Config{Namespace: redistest.Namespace()})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	before, cpu := commands(b, admin), redisCPU(b, admin)
	var next atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if _, err := cl.Enqueue(ctx, "bench", payload100, nil); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	cl.Flush() // the events of the enqueues count too
	b.StopTimer()
	b.ReportMetric(float64(commands(b, admin)-before)/float64(b.N), "cmds/op")
	b.ReportMetric((redisCPU(b, admin)-cpu)/float64(b.N), "redis-µs/op")
}

func drain(b *testing.B, admin *redigo.Pool, pool worqr.ConnGetter, concurrency int) {
	ns := redistest.Namespace()
	ctx := context.Background()
	cl, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		b.Fatal(err)
	}
	for left := b.N; left > 0; left -= 1000 {
		batch := make([][]byte, min(left, 1000))
		for i := range batch {
			batch[i] = payload100
		}
		if _, err := cl.EnqueueBatch(ctx, "bench", batch, nil); err != nil {
			b.Fatal(err)
		}
	}
	var done atomic.Int64
	all := make(chan struct{})
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{
		Config: worqr.Config{Namespace: ns},
		Queues: map[string]worqr.QueueConfig{"bench": {Concurrency: concurrency,
			Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil })}},
		OnEvent: func(e worqr.Event) {
			if e.Kind == worqr.EventDone && done.Add(1) == int64(b.N) {
				close(all)
			}
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	before, cpu := commands(b, admin), redisCPU(b, admin)
	b.ResetTimer()
	if err := w.Start(ctx); err != nil {
		b.Fatal(err)
	}
	<-all
	_ = w.Stop(ctx) // its last ends and events count too
	b.StopTimer()
	b.ReportMetric(float64(commands(b, admin)-before)/float64(b.N), "cmds/op")
	b.ReportMetric((redisCPU(b, admin)-cpu)/float64(b.N), "redis-µs/op")
	cl.Flush()
}

// commands returns how many commands Redis ran (INFO commandstats), INFO
// aside.
func commands(b *testing.B, admin *redigo.Pool) int64 {
	return infoSum(b, admin, "commandstats", func(line string) (float64, bool) {
		if !strings.HasPrefix(line, "cmdstat_") || strings.HasPrefix(line, "cmdstat_info:") {
			return 0, false
		}
		i := strings.Index(line, "calls=")
		j := strings.IndexByte(line[i:], ',')
		n, _ := strconv.ParseFloat(line[i+6:i+j], 64)
		return n, true
	})
}

// redisCPU returns Redis's CPU time (user + sys) in microseconds.
func redisCPU(b *testing.B, admin *redigo.Pool) float64 {
	return float64(infoSum(b, admin, "cpu", func(line string) (float64, bool) {
		for _, k := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(line, k); ok {
				f, _ := strconv.ParseFloat(v, 64)
				return f * 1e6, true
			}
		}
		return 0, false
	}))
}

func infoSum(b *testing.B, admin *redigo.Pool, section string, of func(string) (float64, bool)) int64 {
	c := admin.Get()
	defer c.Close()
	info, err := redigo.String(c.Do("INFO", section))
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		if v, ok := of(strings.TrimSpace(line)); ok {
			total += v
		}
	}
	return int64(total)
}
