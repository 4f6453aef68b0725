package worqr

import (
	"context"
	"errors"
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
