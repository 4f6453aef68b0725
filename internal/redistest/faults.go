package redistest

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Connections that see or break what goes to Redis, for the tests of
// lost replies and held calls: HookPool runs a test's hooks on each
// command, FaultPool cuts or holds calls, LossyConn loses the replies of
// script calls Redis applied.

// FaultPool is a pool whose connections can hold back the function calls
// whose name ends with a suffix (a call slow on its way, its arguments
// built), and can cut the worker off from Redis right after Redis applied
// an end whose reply is then lost. Cut off, every command fails but PING
// and the pub/sub ones: the worker still hears its messages.
type FaultPool struct {
	*redis.Pool
	suffix atomic.Value // string: hold the calls of functions ending so
	delay  atomic.Int64 // ns: for this long
	// Holding receives the function's name when a held call begins, and
	// held when it has returned (see NewFaultPool).
	Holding, Held chan string
	// LoseEnd: the next end is applied, its reply lost, and the pool
	// is cut (Cut set) until the test clears Cut.
	LoseEnd atomic.Bool
	Cut     atomic.Bool
	// Refuse: a command (say "HSCAN") every connection refuses while set.
	Refuse atomic.Value // string
}

var errFaultCut = errors.New("test: cut off from Redis")

// NewFaultPool returns a FaultPool over p.
func NewFaultPool(p *redis.Pool) *FaultPool {
	return &FaultPool{Pool: p, Holding: make(chan string, 100), Held: make(chan string, 100)}
}

func (p *FaultPool) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := p.Pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return &faultConn{Conn: c, p: p}, nil
}

// Hold delays the calls of functions ending with suffix by d (0: none).
func (p *FaultPool) Hold(suffix string, d time.Duration) {
	p.suffix.Store(suffix)
	p.delay.Store(int64(d))
}

type faultConn struct {
	redis.Conn
	p *FaultPool
}

// do sends cmd through f unless the pool is cut, after holding it back
// if asked.
func (c *faultConn) do(cmd string, args []any, f func() (any, error)) (any, error) {
	switch cmd {
	case "", "PING", "SUBSCRIBE", "UNSUBSCRIBE", "PSUBSCRIBE", "PUNSUBSCRIBE":
		return f()
	}
	if c.p.Cut.Load() {
		return nil, errFaultCut
	}
	if r, _ := c.p.Refuse.Load().(string); r != "" && cmd == r {
		return nil, errors.New("test: " + cmd + " refused")
	}
	name := ""
	if cmd == "FCALL" && len(args) > 0 {
		name, _ = args[0].(string)
	}
	if suf, _ := c.p.suffix.Load().(string); suf != "" && name != "" && strings.HasSuffix(name, suf) {
		if d := time.Duration(c.p.delay.Load()); d > 0 {
			c.p.Holding <- name
			time.Sleep(d)
			defer func() { c.p.Held <- name }()
		}
	}
	if strings.HasSuffix(name, "_end") && c.p.LoseEnd.CompareAndSwap(true, false) {
		_, _ = f()
		c.p.Cut.Store(true)
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

// LossyConn loses the reply of the next armed script calls that match:
// Redis applied them, the caller gets an error (a connection that died
// while the reply was on its way).
type LossyConn struct {
	redis.Conn
	Armed *atomic.Int32
	Match func(args []any) bool
}

func (c *LossyConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	r, err := redis.DoContext(c.Conn, ctx, cmd, args...)
	if err == nil && (cmd == "EVALSHA" || cmd == "EVAL" || cmd == "FCALL") && c.Match(args) && c.Armed.Add(-1) >= 0 {
		return nil, errors.New("injected: the reply was lost")
	}
	return r, err
}

func (c *LossyConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	return c.DoContext(context.Background(), cmd, args...)
}

func (c *LossyConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

func (c *LossyConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

// HasArg matches a script call with argument v.
func HasArg(v string) func(args []any) bool {
	return func(args []any) bool {
		for _, a := range args {
			if s, ok := a.(string); ok && s == v {
				return true
			}
		}
		return false
	}
}

// HookPool hands out the connections of Pool with hooks a test sets to see
// or change what goes through them (each may be nil):
//   - Sent runs on each command sent in a pipeline (Send); the func it
//     returns, if any, runs after the next Flush;
//   - Done runs after each command of a Do, with its reply, and returns the
//     reply the caller gets (and may close the connection first, to lose
//     it);
//   - Refuse runs before each command of a Do: when it returns an error,
//     the command is not sent and the caller gets that error (as when the
//     connection broke before the call went out).
type HookPool struct {
	Pool   *redis.Pool
	Sent   func(cmd string, args []any) (afterFlush func())
	Done   func(c redis.Conn, cmd string, args []any, r any, err error) (any, error)
	Refuse func(cmd string, args []any) error
}

// GetContext hands out a connection of Pool with the hooks.
func (p *HookPool) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := p.Pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return &hookConn{Conn: c, p: p}, nil
}

type hookConn struct {
	redis.Conn
	p     *HookPool
	after func()
}

func (c *hookConn) Send(cmd string, args ...any) error {
	if c.p.Sent != nil {
		if f := c.p.Sent(cmd, args); f != nil {
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
	if c.p.Done == nil || cmd == "" {
		return r, err
	}
	return c.p.Done(c.Conn, cmd, args, r, err)
}

func (c *hookConn) refused(cmd string, args []any) error {
	if c.p.Refuse == nil || cmd == "" {
		return nil
	}
	return c.p.Refuse(cmd, args)
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
