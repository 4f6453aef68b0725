package worqr_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// replyLossPool is a pool on url whose connections lose the replies of the
// commands lose picks: Redis receives and applies such a command (and
// every command flushed with it), answers, and the connection breaks
// before the answers reach the caller (io.ErrUnexpectedEOF), as when a
// connection is reset after a request was forwarded. A broken connection
// is dropped by the pool, so the caller's next call dials a new one.
type replyLossPool struct {
	*redis.Pool
	mu   sync.Mutex
	lose func(cmd string, args []any) bool
	// sendOnly: lose only commands sent in a pipeline (Send), not those
	// of a Do.
	sendOnly bool
}

func newReplyLossPool(url string) *replyLossPool {
	p := &replyLossPool{}
	p.Pool = &redis.Pool{
		MaxIdle:     8,
		IdleTimeout: time.Minute,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			c, err := redis.DialURLContext(ctx, url)
			if err != nil {
				return nil, err
			}
			return &replyLossConn{c: c, p: p}, nil
		},
	}
	return p
}

// replyLossClient returns a replyLossPool on the test server (closed with
// the test), the configuration of a new namespace, and a client and an
// inspector of it.
func replyLossClient(t *testing.T) (*replyLossPool, worqr.Config, *worqr.Client, *worqr.Inspector) {
	t.Helper()
	pool := newReplyLossPool(srv.URL)
	t.Cleanup(func() { pool.Close() })
	cfg := worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true}
	c, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	return pool, cfg, c, newInspector(t, pool, &cfg)
}

// setLose sets the predicate (nil: lose nothing).
func (p *replyLossPool) setLose(f func(cmd string, args []any) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lose = f
}

func (p *replyLossPool) picks(cmd string, args []any, send bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lose != nil && (send || !p.sendOnly) && p.lose(cmd, args)
}

// calls returns a predicate true for the nth call (1-based) of a script
// whose function or script name contains name (FCALL worqr_<lib>_<name>),
// and for none after it.
func nthCall(name string, nth int) func(cmd string, args []any) bool {
	seen := 0
	return func(cmd string, args []any) bool {
		if cmd != "FCALL" || len(args) == 0 {
			return false
		}
		fn, _ := args[0].(string)
		if !strings.HasSuffix(fn, "_"+name) {
			return false
		}
		seen++
		return seen == nth
	}
}

var errLostReply = io.ErrUnexpectedEOF

type replyLossConn struct {
	c       redis.Conn
	p       *replyLossPool
	pending int  // commands sent and not flushed or received
	drop    bool // a command sent since the last flush loses its reply
	broken  bool
}

func (c *replyLossConn) Close() error { return c.c.Close() }

func (c *replyLossConn) Err() error {
	if c.broken {
		return errLostReply
	}
	return c.c.Err()
}

func (c *replyLossConn) Do(cmd string, args ...any) (any, error) {
	return c.DoWithTimeout(0, cmd, args...)
}

func (c *replyLossConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	if c.broken {
		return nil, errLostReply
	}
	if cmd == "" {
		return c.c.(redis.ConnWithContext).DoContext(ctx, cmd, args...)
	}
	if c.p.picks(cmd, args, false) {
		return c.loseDo(cmd, args)
	}
	return c.c.(redis.ConnWithContext).DoContext(ctx, cmd, args...)
}

func (c *replyLossConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	if c.broken {
		return nil, errLostReply
	}
	if cmd != "" && c.p.picks(cmd, args, false) {
		return c.loseDo(cmd, args)
	}
	return c.c.(redis.ConnWithTimeout).DoWithTimeout(d, cmd, args...)
}

// loseDo sends cmd after whatever was sent before it, reads every answer,
// and breaks the connection.
func (c *replyLossConn) loseDo(cmd string, args []any) (any, error) {
	if err := c.c.Send(cmd, args...); err != nil {
		return nil, err
	}
	c.pending++
	c.drop = true
	return nil, c.Flush()
}

func (c *replyLossConn) Send(cmd string, args ...any) error {
	if c.broken {
		return errLostReply
	}
	if c.p.picks(cmd, args, true) {
		c.drop = true
	}
	c.pending++
	return c.c.Send(cmd, args...)
}

func (c *replyLossConn) Flush() error {
	if c.broken {
		return errLostReply
	}
	if err := c.c.Flush(); err != nil {
		return err
	}
	if !c.drop {
		return nil
	}
	// Redis applies and answers everything flushed; the answers are lost.
	for ; c.pending > 0; c.pending-- {
		if _, err := c.c.Receive(); err != nil {
			var re redis.Error
			if !errors.As(err, &re) {
				break
			}
		}
	}
	c.broken = true
	_ = c.c.Close()
	return errLostReply
}

func (c *replyLossConn) Receive() (any, error) { return c.ReceiveWithTimeout(0) }

func (c *replyLossConn) ReceiveContext(ctx context.Context) (any, error) {
	if c.broken {
		return nil, errLostReply
	}
	r, err := c.c.(redis.ConnWithContext).ReceiveContext(ctx)
	c.pending--
	return r, err
}

func (c *replyLossConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	if c.broken {
		return nil, errLostReply
	}
	r, err := c.c.(redis.ConnWithTimeout).ReceiveWithTimeout(d)
	c.pending--
	return r, err
}
