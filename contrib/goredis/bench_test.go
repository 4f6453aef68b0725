package goredis_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	redigo "github.com/gomodule/redigo/redis"
	"github.com/redis/go-redis/v9"

	"github.com/worqr/worqr-go/contrib/goredis"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// BenchmarkClients runs worqr's enqueue and drain benchmarks (as in
// worqr/bench_test.go) on a redigo pool and on a go-redis client, against
// the same Redis in the same run: time, Redis commands (INFO
// commandstats, those run by scripts included), Redis CPU and the test
// process's CPU (user + sys: the client's work, which waits on nothing
// else and so varies less than time on a busy machine) per task.
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
	before, cpu, own := commands(b, admin), redisCPU(b, admin), processCPU()
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
	b.ReportMetric((processCPU()-own)/float64(b.N), "client-µs/op")
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
	before, cpu, own := commands(b, admin), redisCPU(b, admin), processCPU()
	b.ResetTimer()
	if err := w.Start(ctx); err != nil {
		b.Fatal(err)
	}
	<-all
	_ = w.Stop(ctx) // its last ends and events count too
	b.StopTimer()
	b.ReportMetric((processCPU()-own)/float64(b.N), "client-µs/op")
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

// processCPU returns the CPU time (user + sys) of this process so far, in
// microseconds.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e3
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

// BenchmarkCall runs one script call (EVALSHA, a reply of 3 values, one
// an array) through a redigo pool's connection, through the adapter's,
// and through go-redis alone (client.Conn, one Cmd, Close): what each costs
// per worqr call, allocations included (-benchmem).
func BenchmarkCall(b *testing.B) {
	ctx := context.Background()
	rp := srv.Pool()
	defer rp.Close()
	c0 := rp.Get()
	sha, err := redigo.String(c0.Do("SCRIPT", "LOAD", "return {ARGV[1], 42, {ARGV[2], ARGV[3]}}"))
	c0.Close()
	if err != nil {
		b.Fatal(err)
	}
	args := []any{sha, 1, redistest.Namespace() + ":{bench}:x", strings.Repeat("a", 64), []byte(strings.Repeat("b", 28)), int64(12345)}
	call := func(b *testing.B, pool worqr.ConnGetter) {
		for i := 0; i < b.N; i++ {
			c, err := pool.GetContext(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.(redigo.ConnWithTimeout).DoWithTimeout(time.Second, "EVALSHA", args...); err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	}
	b.Run("redigo", func(b *testing.B) { call(b, rp) })
	client := newClient(b, nil)
	b.Run("goredis", func(b *testing.B) {
		p, err := goredis.NewPool(client)
		if err != nil {
			b.Fatal(err)
		}
		call(b, p)
	})
	b.Run("goredis-alone", func(b *testing.B) {
		full := append([]any{"EVALSHA"}, args...)
		for i := 0; i < b.N; i++ {
			c := client.Conn()
			if err := c.Process(ctx, redis.NewCmd(ctx, full...)); err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	})
}
