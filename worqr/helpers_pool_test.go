package worqr_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// Connection pools that see or break what goes to Redis, for the tests of
// lost replies, refused calls and bounded calls: cmdPool counts commands,
// replyLossPool loses replies after Redis applied the call, takeCounter
// counts takes (redistest has the pools with hooks and faults).

// cmdPool is a pool that counts the commands sent through it by name and
// can be broken: while broken it hands out no connection (nothing is sent).
type cmdPool struct {
	pool   *redis.Pool
	broken atomic.Bool
	refuse atomic.Int64 // GetContext calls refused while broken
	mu     sync.Mutex
	n      map[string]int
	// onSend, when set (before the pool is used), runs before every
	// command sent with Send, and may hold it.
	onSend func(cmd string)
}

func newCmdPool() *cmdPool { return &cmdPool{pool: srv.Pool(), n: map[string]int{}} }

func (p *cmdPool) GetContext(ctx context.Context) (redis.Conn, error) {
	if p.broken.Load() {
		p.refuse.Add(1)
		return nil, errors.New("test: connection refused")
	}
	c, err := p.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return &cmdConn{Conn: c, p: p}, nil
}

func (p *cmdPool) count(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[name]
}

type cmdConn struct {
	redis.Conn
	p *cmdPool
}

func (c *cmdConn) add(cmd string) {
	c.p.mu.Lock()
	c.p.n[strings.ToUpper(cmd)]++
	c.p.mu.Unlock()
}

func (c *cmdConn) Do(cmd string, args ...any) (any, error) {
	if cmd != "" {
		c.add(cmd)
	}
	return c.Conn.Do(cmd, args...)
}

func (c *cmdConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	if cmd != "" {
		c.add(cmd)
	}
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

func (c *cmdConn) Send(cmd string, args ...any) error {
	if c.p.onSend != nil {
		c.p.onSend(cmd)
	}
	c.add(cmd)
	return c.Conn.Send(cmd, args...)
}

func (c *cmdConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

func (c *cmdConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

func (c *cmdConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	c.add(cmd)
	return redis.DoWithTimeout(c.Conn, d, cmd, args...)
}

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

// takeCounter is a pool that counts the take script calls sent through it.
type takeCounter struct {
	pool  *redis.Pool
	takes atomic.Int64
}

func (p *takeCounter) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := p.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, p: p}, nil
}

type countingConn struct {
	redis.Conn
	p *takeCounter
}

func (c *countingConn) count(cmd string, args []any) {
	if cmd == "FCALL" && len(args) > 0 {
		if s, ok := args[0].(string); ok && len(s) > 5 && s[len(s)-5:] == "_take" {
			c.p.takes.Add(1)
		}
	}
}

func (c *countingConn) Do(cmd string, args ...any) (any, error) {
	c.count(cmd, args)
	return c.Conn.Do(cmd, args...)
}

func (c *countingConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	c.count(cmd, args)
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

func (c *countingConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

func (c *countingConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

func (c *countingConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	c.count(cmd, args)
	return redis.DoWithTimeout(c.Conn, d, cmd, args...)
}
