package worqr_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

// faultPool is a pool whose connections can hold back the function calls
// whose name ends with a suffix (a call slow on its way, its arguments
// built), and can cut the worker off from Redis right after Redis applied
// an end whose reply is then lost. Cut off, every command fails but PING
// and the pub/sub ones: the worker still hears its messages.
type faultPool struct {
	*redis.Pool
	suffix atomic.Value // string: hold the calls of functions ending so
	delay  atomic.Int64 // ns: for this long
	// holding receives the function's name when a held call begins, and
	// held when it has returned (see newFaultPool).
	holding, held chan string
	// loseEnd: the next end is applied, its reply lost, and the pool
	// is cut (cut set) until the test clears cut.
	loseEnd atomic.Bool
	cut     atomic.Bool
	// refuse: a command (say "HSCAN") every connection refuses while set.
	refuse atomic.Value // string
}

var errFaultCut = errors.New("test: cut off from Redis")

func newFaultPool(p *redis.Pool) *faultPool {
	return &faultPool{Pool: p, holding: make(chan string, 100), held: make(chan string, 100)}
}

func (p *faultPool) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := p.Pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return &faultConn{Conn: c, p: p}, nil
}

// hold delays the calls of functions ending with suffix by d (0: none).
func (p *faultPool) hold(suffix string, d time.Duration) {
	p.suffix.Store(suffix)
	p.delay.Store(int64(d))
}

type faultConn struct {
	redis.Conn
	p *faultPool
}

// do sends cmd through f unless the pool is cut, after holding it back
// if asked.
func (c *faultConn) do(cmd string, args []any, f func() (any, error)) (any, error) {
	switch cmd {
	case "", "PING", "SUBSCRIBE", "UNSUBSCRIBE", "PSUBSCRIBE", "PUNSUBSCRIBE":
		return f()
	}
	if c.p.cut.Load() {
		return nil, errFaultCut
	}
	if r, _ := c.p.refuse.Load().(string); r != "" && cmd == r {
		return nil, errors.New("test: " + cmd + " refused")
	}
	name := ""
	if cmd == "FCALL" && len(args) > 0 {
		name, _ = args[0].(string)
	}
	if suf, _ := c.p.suffix.Load().(string); suf != "" && name != "" && strings.HasSuffix(name, suf) {
		if d := time.Duration(c.p.delay.Load()); d > 0 {
			c.p.holding <- name
			time.Sleep(d)
			defer func() { c.p.held <- name }()
		}
	}
	if strings.HasSuffix(name, "_end") && c.p.loseEnd.CompareAndSwap(true, false) {
		_, _ = f()
		c.p.cut.Store(true)
		return nil, errFaultCut
	}
	return f()
}

func (c *faultConn) Do(cmd string, args ...any) (any, error) {
	return c.do(cmd, args, func() (any, error) { return c.Conn.Do(cmd, args...) })
}

func (c *faultConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	return c.do(cmd, args, func() (any, error) { return redis.DoWithTimeout(c.Conn, d, cmd, args...) })
}

func (c *faultConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	return c.do(cmd, args, func() (any, error) { return redis.DoContext(c.Conn, ctx, cmd, args...) })
}

func (c *faultConn) Send(cmd string, args ...any) error {
	_, err := c.do(cmd, args, func() (any, error) { return nil, c.Conn.Send(cmd, args...) })
	return err
}

func (c *faultConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

func (c *faultConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}
