package consumer_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/consumer"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// commandsProcessed reads the server's total_commands_processed (commands
// inside scripts included).
func commandsProcessed(b *testing.B, pool *redis.Pool) int64 {
	b.Helper()
	c := pool.Get()
	defer c.Close()
	info, err := redis.String(c.Do("INFO", "stats"))
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "total_commands_processed:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Fatal("no total_commands_processed in INFO")
	return 0
}

// BenchmarkDrain: one process works b.N jobs that do nothing, MaxProcessing
// 64; reports jobs/s and Redis commands per job (a server of its own, so
// the count is this benchmark's: heartbeats, reaper and polls included).
func BenchmarkDrain(b *testing.B) {
	s, err := redistest.Start("--save", "")
	if err != nil {
		b.Fatal(err)
	}
	defer s.Stop()
	pool := s.Pool()
	defer pool.Close()
	ns := redistest.Namespace()
	drained := make(chan struct{})
	cfg := consumer.Config[uint64]{Name: "bench", Source: newSource(int64(b.N - 1)), MaxProcessing: 64,
		Process: func(context.Context, uint64, uint64) error { return nil },
		OnProcessed: func(p uint64) {
			if p == uint64(b.N) {
				close(drained)
			}
		},
		Worker: worqr.WorkerConfig{Config: worqr.Config{Namespace: ns, DisableEvents: true}}}
	c, err := consumer.New(pool, &cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	before := commandsProcessed(b, pool)
	b.ResetTimer()
	start := time.Now()
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	<-drained // told once: the calls of one process go up
	elapsed := time.Since(start)
	b.StopTimer()
	after := commandsProcessed(b, pool)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
	b.ReportMetric(float64(after-before)/float64(b.N), "cmds/job")
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = c.Stop(sctx)
}
