package sentinel_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/redisconn"
)

// The sentinels the pool was given are replaced one by one (new ones join,
// the old ones go), as happens to sentinels on rescheduled containers; then
// the primary fails over. The pool learns the peers of the sentinels it
// asks (SENTINEL SENTINELS) and follows the failover through them. It
// asked only the sentinels it was given, and stayed on the old primary,
// now a replica: every write refused with READONLY (found by an audit).
func TestReplacedSentinelsAreLearned(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, _ := startSentinel(ctx, t)
	// A pool of its own, whose log says what it learned.
	learned := make(chan string, 16)
	pool, err := redisconn.NewSentinel(redistest.SentinelMaster, st.Addrs(), &redisconn.Options{SentinelCheck: time.Second,
		Logger: slog.New(logHook(func(r slog.Record) {
			if r.Message == "sentinel: learned a sentinel" {
				learned <- r.Message
			}
		}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	old := pool.Primary()
	host, port, _ := net.SplitHostPort(old)
	var fresh []string
	for i := 0; i < 3; i++ {
		a := startExtraSentinel(t,
			fmt.Sprintf("sentinel monitor %s %s %s 2", redistest.SentinelMaster, host, port),
			fmt.Sprintf("sentinel down-after-milliseconds %s 1000", redistest.SentinelMaster),
			fmt.Sprintf("sentinel failover-timeout %s 5000", redistest.SentinelMaster))
		fresh = append(fresh, a)
	}
	// The new sentinels meet the old ones, then the old ones go and the new
	// ones forget them.
	// What a sentinel knows, it says when asked.
	waitOthers := func(want int) {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for _, a := range fresh {
			n := -1
			if redistest.Poll(wctx, func() bool {
				c, err := redis.Dial("tcp", a)
				r := 0
				n = -1
				if err == nil {
					m, _ := redis.StringMap(c.Do("SENTINEL", "MASTER", redistest.SentinelMaster))
					c.Close()
					n, _ = strconv.Atoi(m["num-other-sentinels"])
					r, _ = strconv.Atoi(m["num-slaves"])
				}
				return n == want && r >= 1
			}) != nil {
				t.Fatalf("sentinel %s knows %d other sentinels, want %d", a, n, want)
			}
		}
	}
	waitOthers(5)
	// The pool learns the newcomers from the sentinels it asks, once those
	// have met them.
	for i := 0; i < len(fresh); i++ {
		select {
		case <-learned:
		case <-time.After(30 * time.Second):
			t.Fatalf("the pool learned %d of the %d new sentinels in 30 s", i, len(fresh))
		}
	}
	for _, s := range st.Sentinels {
		s.Stop()
	}
	for _, a := range fresh {
		c, err := redis.Dial("tcp", a)
		if err != nil {
			t.Fatal(err)
		}
		c.Do("SENTINEL", "RESET", redistest.SentinelMaster)
		c.Close()
	}
	waitOthers(2)
	second := failoverVia(ctx, t, fresh[0], old)
	waitPrimary(t, pool, second, 20*time.Second) // it fails when the pool asks only the sentinels it was given, all gone
}

// logHook is a slog.Handler that hands each record to f.
type logHook func(slog.Record)

func (h logHook) Enabled(context.Context, slog.Level) bool      { return true }
func (h logHook) Handle(_ context.Context, r slog.Record) error { h(r); return nil }
func (h logHook) WithAttrs([]slog.Attr) slog.Handler            { return h }
func (h logHook) WithGroup(string) slog.Handler                 { return h }
