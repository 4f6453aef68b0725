package worqr

import (
	"testing"

	"github.com/gomodule/redigo/redis"
)

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
		{&ClusterPool{maxActive: 4}, 1},
		{&SentinelPool{maxActive: 7}, 3},
	} {
		if got := waitReadWidth(c.pool); got != c.want {
			t.Errorf("case %d: waitReadWidth(%T) = %d, want %d", i, c.pool, got, c.want)
		}
	}
}
