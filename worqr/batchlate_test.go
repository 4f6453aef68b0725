package worqr_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// latePool is a pool on url whose connections hold back the command hold
// picks: it is not sent, the call fails as a broken connection would, and
// the test sends it later (late), as a request stuck in a proxy or a
// kernel buffer reaches Redis after the client gave up on it.
type latePool struct {
	*redis.Pool
	mu   sync.Mutex
	hold func(cmd string, args []any) bool
	held []any // the command held: its name, then its arguments
}

func newLatePool(url string) *latePool {
	p := &latePool{}
	p.Pool = &redis.Pool{MaxIdle: 8, IdleTimeout: time.Minute,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			c, err := redis.DialURLContext(ctx, url)
			if err != nil {
				return nil, err
			}
			return &lateConn{Conn: c, p: p}, nil
		}}
	return p
}

func (p *latePool) picks(cmd string, args []any) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold == nil || p.held != nil || !p.hold(cmd, args) {
		return false
	}
	p.held = append([]any{cmd}, args...)
	return true
}

type lateConn struct {
	redis.Conn
	p      *latePool
	broken bool
}

func (c *lateConn) Err() error {
	if c.broken {
		return errLostReply
	}
	return c.Conn.Err()
}

func (c *lateConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	if c.broken {
		return nil, errLostReply
	}
	if cmd != "" && c.p.picks(cmd, args) {
		c.broken = true
		return nil, errLostReply
	}
	return c.Conn.(redis.ConnWithContext).DoContext(ctx, cmd, args...)
}

func (c *lateConn) Do(cmd string, args ...any) (any, error) {
	return c.DoContext(context.Background(), cmd, args...)
}

func (c *lateConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	return c.DoContext(context.Background(), cmd, args...)
}

func (c *lateConn) ReceiveContext(ctx context.Context) (any, error) {
	return c.Conn.(redis.ConnWithContext).ReceiveContext(ctx)
}

func (c *lateConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return c.Conn.(redis.ConnWithTimeout).ReceiveWithTimeout(d)
}

// The first step of a large EnqueueBatch that has not reached Redis when
// its call fails (RELIABILITY row 73): the client closes the batch's
// guard, finds no step applied and says 0 enqueued. When that step
// reaches Redis afterwards it must be refused (step 0 applies only where
// no guard is), or 250 tasks are in the queue that the BatchError said
// were not, and a caller that resends the batch runs them twice. Both
// first-step scripts (enqueue_packed here, enqueue with options) check it.
func TestBatchFirstStepArrivingAfterTheCloseIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		opts         *worqr.EnqueueOpts
	}{
		{"packed", "enqueue_packed", nil},
		{"with options", "enqueue", &worqr.EnqueueOpts{MaxAttempts: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			pool := newLatePool(srv.URL)
			defer pool.Close()
			cfg := worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true}
			c, err := worqr.NewClient(pool, &cfg)
			if err != nil {
				t.Fatal(err)
			}
			// The library loaded: the held call runs when sent late.
			if _, err := c.Enqueue(ctx, "warm", []byte("x"), nil); err != nil {
				t.Fatal(err)
			}
			pool.mu.Lock()
			pool.hold = nthCall(tc.script, 1)
			pool.mu.Unlock()
			ps := batchPayloads(10 * 250) // ten steps
			ids, err := c.EnqueueBatch(ctx, "late", ps, tc.opts)
			var be *worqr.BatchError
			if !errors.As(err, &be) || be.Enqueued != 0 || pool.held == nil {
				t.Fatalf("EnqueueBatch: %v (held %v); want a *BatchError saying 0 enqueued", err, pool.held != nil)
			}
			// The first step reaches Redis now.
			rc, err := redis.DialURL(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			r, err := rc.Do(pool.held[0].(string), pool.held[1:]...)
			t.Logf("the late first step: %v %v", r, err)
			checkBatchError(t, c, "late", ps, ids, be)
		})
	}
}
