package worqr_test

import (
	"context"
	"time"

	"github.com/gomodule/redigo/redis"
)

// hookPool hands out the connections of pool with hooks a test sets to see
// or change what goes through them (each may be nil):
//   - sent runs on each command sent in a pipeline (Send); the func it
//     returns, if any, runs after the next Flush;
//   - done runs after each command of a Do, with its reply, and returns the
//     reply the caller gets (and may close the connection first, to lose
//     it);
//   - refuse runs before each command of a Do: when it returns an error,
//     the command is not sent and the caller gets that error (as when the
//     connection broke before the call went out).
type hookPool struct {
	pool   *redis.Pool
	sent   func(cmd string, args []any) (afterFlush func())
	done   func(c redis.Conn, cmd string, args []any, r any, err error) (any, error)
	refuse func(cmd string, args []any) error
}

func (p *hookPool) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := p.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return &hookConn{Conn: c, p: p}, nil
}

type hookConn struct {
	redis.Conn
	p     *hookPool
	after func()
}

func (c *hookConn) Send(cmd string, args ...any) error {
	if c.p.sent != nil {
		if f := c.p.sent(cmd, args); f != nil {
			c.after = f
		}
	}
	return c.Conn.Send(cmd, args...)
}

func (c *hookConn) Flush() error {
	err := c.Conn.Flush()
	if f := c.after; f != nil {
		c.after = nil
		f()
	}
	return err
}

func (c *hookConn) hook(cmd string, args []any, r any, err error) (any, error) {
	if c.p.done == nil || cmd == "" {
		return r, err
	}
	return c.p.done(c.Conn, cmd, args, r, err)
}

func (c *hookConn) refused(cmd string, args []any) error {
	if c.p.refuse == nil || cmd == "" {
		return nil
	}
	return c.p.refuse(cmd, args)
}

func (c *hookConn) Do(cmd string, args ...any) (any, error) {
	if err := c.refused(cmd, args); err != nil {
		return nil, err
	}
	r, err := c.Conn.Do(cmd, args...)
	return c.hook(cmd, args, r, err)
}

func (c *hookConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	if err := c.refused(cmd, args); err != nil {
		return nil, err
	}
	r, err := redis.DoContext(c.Conn, ctx, cmd, args...)
	return c.hook(cmd, args, r, err)
}

func (c *hookConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	if err := c.refused(cmd, args); err != nil {
		return nil, err
	}
	r, err := redis.DoWithTimeout(c.Conn, d, cmd, args...)
	return c.hook(cmd, args, r, err)
}

func (c *hookConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

func (c *hookConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}
