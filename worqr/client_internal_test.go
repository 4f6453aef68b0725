package worqr

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// FuzzEnqueueOpts: validation never panics, and what it accepts is coherent.
func FuzzEnqueueOpts(f *testing.F) {
	f.Add(int64(0), int64(0), 0, int64(0), "", int64(0), 1)
	f.Add(int64(-1), int64(5), 3, int64(1000), "k", int64(1000), 1)
	f.Add(int64(5), int64(1e12), -1, int64(-5), strings.Repeat("k", 600), int64(0), 2)
	f.Fuzz(func(t *testing.T, delay, at int64, maxAttempts int, timeout int64, key string, ttl int64, n int) {
		o := &EnqueueOpts{Delay: time.Duration(delay), MaxAttempts: maxAttempts, Timeout: time.Duration(timeout),
			UniqueKey: key, UniqueTTL: time.Duration(ttl)}
		if at != 0 {
			o.At = time.UnixMilli(at)
		}
		a, err := o.args(n)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("non-InvalidError %v", err)
			}
			return
		}
		if a.DelayMillis < 0 || a.TimeoutMs < 0 || a.MaxAttempts < 0 {
			t.Fatalf("accepted negative values: %+v", a)
		}
		if a.UniqueKey != "" && (n != 1 || a.UniqueTTL < 1 || a.UniqueKey != key) {
			t.Fatalf("accepted a bad unique key: %+v (n=%d)", a, n)
		}
	})
}

// The waits' read gate leaves the pool's cap room for the subscription and
// the Client's other calls.
func TestWaitReadWidth(t *testing.T) {
	for i, c := range []struct {
		pool ConnGetter
		want int
	}{
		{&redis.Pool{}, 8},
		{&redis.Pool{MaxActive: 1}, 1},
		{&redis.Pool{MaxActive: 2}, 1},
		{&redis.Pool{MaxActive: 4}, 1},
		{&redis.Pool{MaxActive: 5}, 2},
		{&redis.Pool{MaxActive: 10}, 4},
		{&redis.Pool{MaxActive: 100}, 8},
		{cappedPool{4}, 1}, // a redisconn.Cluster or Sentinel: MaxActive per node
		{cappedPool{7}, 3},
		{cappedPool{0}, 8},
	} {
		if got := waitReadWidth(c.pool); got != c.want {
			t.Errorf("case %d: waitReadWidth(%T) = %d, want %d", i, c.pool, got, c.want)
		}
	}
}

// cappedPool is a connection source with a per-node cap, as a
// redisconn.Cluster or Sentinel is.
type cappedPool struct{ max int }

func (p cappedPool) MaxActive() int { return p.max }

func (cappedPool) GetContext(context.Context) (redis.Conn, error) {
	return nil, errors.New("not dialed")
}
