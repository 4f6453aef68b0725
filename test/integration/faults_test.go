package integration_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/worqr/worqr-go/worqr"
)

// lossyConn runs every command, but drops the reply of the next script call
// whose first key is the waiting list named suffix with keyCount keys (the
// take script has 6): as if the connection died after Redis applied it.
type lossyConn struct {
	redis.Conn
	armed    *atomic.Int32
	suffix   string
	keyCount int
}

func (c *lossyConn) lose(cmd string, args []any) bool {
	if cmd != "EVALSHA" && cmd != "EVAL" || len(args) < 3 {
		return false
	}
	if fmt.Sprint(args[1]) != fmt.Sprint(c.keyCount) || !strings.HasSuffix(fmt.Sprint(args[2]), c.suffix) {
		return false
	}
	return c.armed.Add(-1) >= 0
}

func (c *lossyConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	r, err := redis.DoWithTimeout(c.Conn, d, cmd, args...)
	if err == nil && c.lose(cmd, args) {
		return nil, errors.New("injected: the reply was lost")
	}
	return r, err
}

func (c *lossyConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	r, err := redis.DoContext(c.Conn, ctx, cmd, args...)
	if err == nil && c.lose(cmd, args) {
		return nil, errors.New("injected: the reply was lost")
	}
	return r, err
}

func (c *lossyConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

func (c *lossyConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

var _ = Describe("Connection faults", func() {
	It("puts back the takings of a take whose reply was lost, so a live worker never strands them", func(ctx SpecContext) {
		e := newEnv()
		ids := e.enqueueN("lossy", 3)

		var armed atomic.Int32
		armed.Store(1) // the first take's reply is lost
		pool := &redis.Pool{
			MaxIdle: 8,
			DialContext: func(ctx context.Context) (redis.Conn, error) {
				c, err := redis.DialURLContext(ctx, srv.URL)
				if err != nil {
					return nil, err
				}
				return &lossyConn{Conn: c, armed: &armed, suffix: ":q:lossy", keyCount: 6}, nil
			},
		}
		DeferCleanup(pool.Close)

		var done trail
		cfg := e.workerConfig(map[string]worqr.QueueConfig{
			"lossy": one(worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
				done.add(t.ID)
				return nil
			}), 4),
		}, nil)
		cfg.DisableReaper = true // only the worker itself can put the takings back
		e.start(pool, cfg)

		// The lost take moved all three to the worker's worker-queue set;
		// the worker, alive, must notice and release them itself.
		Eventually(ctx, done.get).WithTimeout(5 * time.Second).Should(ConsistOf(ids))
		Expect(armed.Load()).To(BeNumerically("<", 0), "the fault was injected")
		Consistently(ctx, done.get).WithTimeout(300 * time.Millisecond).Should(HaveLen(3))
		Expect(e.waiting("lossy")).To(BeEmpty())
	}, SpecTimeout(15*time.Second))
})
