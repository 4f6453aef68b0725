package cluster

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Conn is a connection handed out by a Pool. It sends to one node at a
// time and follows the cluster's answers:
//
//   - Do, DoContext and DoWithTimeout of a command with no pipelined
//     command before it: a MOVED reply updates the slot map (and refreshes
//     it in the background) and the command is sent again to the node
//     named, on a connection of that node, which the Conn then keeps; an
//     ASK reply sends ASKING and the command to the node named without
//     changing the map; TRYAGAIN (a multi-key command during a slot
//     migration) and CLUSTERDOWN are retried with backoff (5ms doubling to
//     200ms) within the call's context or timeout (Options.RetryFor for a
//     call with neither). At most Options.MaxRedirects redirections per
//     command. A redirection reply means the command did not run, so
//     sending it again never runs it twice.
//   - Pipeline (used by worqr's store for every pipeline): when every reply
//     is a redirection (nothing ran on that node) the whole pipeline is sent
//     again as above, with ASKING before each command for an ASK; when only
//     some are, the replies are returned as they are (the error in its
//     slot, for the caller to retry) and the map is refreshed.
//   - Send, Flush and Receive used directly, and anything after a
//     SUBSCRIBE: passed through; a MOVED reply only refreshes the map, so a
//     retry by the caller goes to the right node.
type Conn struct {
	p          *Pool
	slot       int // -1: none (GetContext)
	addr       string
	c          redis.Conn
	pending    int // commands sent whose replies are not read
	subscribed bool
}

// Node returns the address of the node the connection talks to now.
func (c *Conn) Node() string { return c.addr }

type redirectKind int

const (
	noRedirect redirectKind = iota
	movedRedirect
	askRedirect
	tryAgain
	clusterDown
	loading  // LOADING: a node (a restarted master) still loading its data
	readOnly // READONLY: a write reached a replica (a master demoted under us)
)

type redirect struct {
	kind redirectKind
	slot int
	addr string
}

func parseRedirect(err error, from string) redirect {
	var re redis.Error
	if !errors.As(err, &re) {
		return redirect{}
	}
	msg := string(re)
	switch {
	case strings.HasPrefix(msg, "MOVED "), strings.HasPrefix(msg, "ASK "):
		f := strings.Fields(msg)
		if len(f) < 3 {
			return redirect{}
		}
		slot, err := strconv.Atoi(f[1])
		if err != nil {
			return redirect{}
		}
		addr := f[2]
		if strings.HasPrefix(addr, ":") { // the node does not know its own IP
			host, _, _ := net.SplitHostPort(from)
			addr = host + addr
		}
		k := movedRedirect
		if f[0] == "ASK" {
			k = askRedirect
		}
		return redirect{kind: k, slot: slot, addr: addr}
	case strings.HasPrefix(msg, "TRYAGAIN"):
		return redirect{kind: tryAgain}
	case strings.HasPrefix(msg, "CLUSTERDOWN"):
		return redirect{kind: clusterDown}
	case strings.HasPrefix(msg, "LOADING"):
		return redirect{kind: loading}
	case strings.HasPrefix(msg, "READONLY"):
		return redirect{kind: readOnly}
	}
	return redirect{}
}

func isSubscribe(cmd string) bool {
	switch strings.ToUpper(cmd) {
	case "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE":
		return true
	}
	return false
}

// notice updates the slot map on a MOVED reply read without a retry, and
// reads it again after a connection error (the node may be gone).
func (c *Conn) notice(err error) {
	if err != nil && !isReply(err) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			// Refused, reset or closed: the node may be dead (a failover),
			// and then every idle connection to it is too.
			c.p.dropNode(c.addr)
		}
		c.p.refreshSoon()
		return
	}
	if rd := parseRedirect(err, c.addr); rd.kind == movedRedirect {
		c.p.moved(rd.slot, rd.addr)
	}
}

// switchTo moves the connection to the node at addr.
func (c *Conn) switchTo(ctx context.Context, addr string) error {
	if addr == c.addr {
		return nil
	}
	nc, err := c.p.dial(ctx, addr)
	if err != nil {
		return err
	}
	c.c.Close()
	c.c, c.addr = nc, addr
	return nil
}

// retrier paces the TRYAGAIN and CLUSTERDOWN retries of one call.
type retrier struct {
	ctx       context.Context
	redirects int
	until     time.Time
	backoff   time.Duration
}

func (c *Conn) newRetrier(ctx context.Context) *retrier { return c.p.newRetrier(ctx) }

func (p *Pool) newRetrier(ctx context.Context) *retrier {
	until, ok := ctx.Deadline()
	if !ok {
		until = time.Now().Add(p.o.RetryFor)
	}
	return &retrier{ctx: ctx, until: until, backoff: 5 * time.Millisecond}
}

// pause waits the next backoff (5 ms doubling to 200 ms); false when that
// would pass the call's deadline or its context ended.
func (r *retrier) pause() bool {
	wait := r.backoff
	r.backoff = min(2*r.backoff, 200*time.Millisecond)
	if time.Now().Add(wait).After(r.until) {
		return false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-r.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// follow acts on rd; it reports whether to send again (asking: with ASKING
// first).
func (c *Conn) follow(r *retrier, rd redirect) (again, asking bool, err error) {
	c.p.followed[rd.kind].Add(1)
	if f := c.p.onFollow.Load(); f != nil {
		(*f)(rd)
	}
	switch rd.kind {
	case movedRedirect, askRedirect:
		r.redirects++
		if r.redirects > c.p.o.MaxRedirects {
			return false, false, nil
		}
		if r.redirects > 2 {
			// Redirected back and forth: the nodes do not agree yet (the
			// end of a slot migration reaches them one after the other).
			// Give them a moment, as for TRYAGAIN.
			if !r.pause() {
				return false, false, nil
			}
		}
		if rd.kind == movedRedirect {
			c.p.moved(rd.slot, rd.addr)
		}
		if err := c.switchTo(r.ctx, rd.addr); err != nil {
			return false, false, err
		}
		return true, rd.kind == askRedirect, nil
	case tryAgain, clusterDown, loading, readOnly:
		if rd.kind == clusterDown || rd.kind == readOnly {
			c.p.refreshSoon()
		}
		if !r.pause() {
			return false, false, nil
		}
		// Back to the slot's owner in the map: after a TRYAGAIN from the
		// node an ASK named (the slot is still moving), sending there again
		// without ASKING would only be answered MOVED; after CLUSTERDOWN or
		// READONLY the map may name a new master. The redirections so far
		// led to this wait, which the call's deadline bounds: they are not
		// counted against MaxRedirects, else a slot that moves for longer
		// than a few waits would fail its calls with ASK.
		r.redirects = 0
		if rd.kind != loading && c.slot >= 0 {
			if addr := c.p.Addr(c.slot); addr != "" {
				if err := c.switchTo(r.ctx, addr); err != nil {
					return false, false, err
				}
			}
		}
		return true, false, nil
	}
	return false, false, nil
}

type callFn func(rc redis.Conn, cmd string, args []any) (any, error)

func (c *Conn) exec(ctx context.Context, cmd string, args []any, call callFn) (any, error) {
	if cmd == "" || c.pending > 0 || c.subscribed || isSubscribe(cmd) {
		if isSubscribe(cmd) {
			c.subscribed = true
		}
		r, err := call(c.c, cmd, args)
		c.pending = 0
		c.notice(err)
		return r, err
	}
	var rt *retrier
	asking := false
	for {
		if asking {
			if err := c.c.Send("ASKING"); err != nil {
				return nil, err
			}
		}
		r, err := call(c.c, cmd, args)
		rd := parseRedirect(err, c.addr)
		if rd.kind == noRedirect {
			if err != nil && !isReply(err) {
				c.notice(err)
			}
			return r, err
		}
		if rt == nil {
			rt = c.newRetrier(ctx)
		}
		again, ask, ferr := c.follow(rt, rd)
		if ferr != nil {
			return nil, ferr
		}
		if !again {
			return r, err
		}
		asking = ask
	}
}

// Do sends a command and returns its reply, following redirections.
func (c *Conn) Do(cmd string, args ...any) (any, error) {
	return c.exec(context.Background(), cmd, args, func(rc redis.Conn, cmd string, args []any) (any, error) {
		return rc.Do(cmd, args...)
	})
}

// DoContext is Do bounded by ctx.
func (c *Conn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	return c.exec(ctx, cmd, args, func(rc redis.Conn, cmd string, args []any) (any, error) {
		return redis.DoContext(rc, ctx, cmd, args...)
	})
}

// DoWithTimeout is Do with a read timeout for the whole call, redirections
// included.
func (c *Conn) DoWithTimeout(timeout time.Duration, cmd string, args ...any) (any, error) {
	deadline := time.Now().Add(timeout)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	return c.exec(ctx, cmd, args, func(rc redis.Conn, cmd string, args []any) (any, error) {
		left := time.Until(deadline)
		if left <= 0 {
			return nil, context.DeadlineExceeded
		}
		return redis.DoWithTimeout(rc, left, cmd, args...)
	})
}

// Send queues a command (passed through).
func (c *Conn) Send(cmd string, args ...any) error {
	// A subscribed connection has a reader and a writer at once (redigo
	// allows that): neither touches the Conn's fields then.
	if c.subscribed {
		return c.c.Send(cmd, args...)
	}
	if isSubscribe(cmd) {
		c.subscribed = true
	}
	c.pending++
	return c.c.Send(cmd, args...)
}

// Flush sends what Send queued.
func (c *Conn) Flush() error { return c.c.Flush() }

func (c *Conn) received(r any, err error) (any, error) {
	if c.subscribed {
		return r, err
	}
	if c.pending > 0 {
		c.pending--
	}
	c.notice(err)
	return r, err
}

// Receive reads one reply (passed through).
func (c *Conn) Receive() (any, error) { return c.received(c.c.Receive()) }

// ReceiveContext is Receive bounded by ctx.
func (c *Conn) ReceiveContext(ctx context.Context) (any, error) {
	return c.received(redis.ReceiveContext(c.c, ctx))
}

// ReceiveWithTimeout is Receive with a read timeout.
func (c *Conn) ReceiveWithTimeout(timeout time.Duration) (any, error) {
	return c.received(redis.ReceiveWithTimeout(c.c, timeout))
}

// Err returns the connection's fatal error, if any.
func (c *Conn) Err() error { return c.c.Err() }

// Close returns the connection to its node's pool.
func (c *Conn) Close() error { return c.c.Close() }

// Pipeline sends the commands (names[i] with args[i]) in one round trip and
// returns their replies in order, a Redis error reply in its slot. When
// every reply is a redirection (the node ran none of them) it follows it and
// sends the whole pipeline again; see Conn.
func (c *Conn) Pipeline(ctx context.Context, names []string, args [][]any) ([]any, error) {
	var rt *retrier
	asking := false
	for {
		out, err := c.pipelineOnce(ctx, names, args, asking)
		if err != nil {
			c.notice(err)
			return nil, err
		}
		rd, all := pipelineRedirect(names, out, c.addr)
		if !all {
			for _, r := range out {
				if e, ok := r.(redis.Error); ok {
					c.notice(e)
				}
			}
			return out, nil
		}
		if rt == nil {
			rt = c.newRetrier(ctx)
		}
		again, ask, ferr := c.follow(rt, rd)
		if ferr != nil {
			return nil, ferr
		}
		if !again {
			return out, nil
		}
		asking = ask
	}
}

func (c *Conn) pipelineOnce(ctx context.Context, names []string, args [][]any, asking bool) ([]any, error) {
	// ASKING before each command; inside MULTI ... EXEC the flag set before
	// MULTI lasts until EXEC (an ASKING there would be queued).
	ask := make([]bool, len(names))
	inMulti := false
	for i, n := range names {
		switch strings.ToUpper(n) {
		case "MULTI":
			ask[i] = asking && !inMulti
			inMulti = true
		case "EXEC", "DISCARD":
			inMulti = false
		default:
			ask[i] = asking && !inMulti
		}
	}
	for i, n := range names {
		if ask[i] {
			if err := c.c.Send("ASKING"); err != nil {
				return nil, err
			}
		}
		if err := c.c.Send(n, args[i]...); err != nil {
			return nil, err
		}
	}
	if err := c.c.Flush(); err != nil {
		return nil, err
	}
	out := make([]any, len(names))
	for i := range names {
		if ask[i] {
			if _, err := redis.ReceiveContext(c.c, ctx); err != nil && !isReply(err) {
				return nil, err
			}
		}
		r, err := redis.ReceiveContext(c.c, ctx)
		if err != nil {
			var re redis.Error
			if !errors.As(err, &re) {
				return nil, err
			}
			r = re
		}
		out[i] = r
	}
	return out, nil
}

func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// rerunnable are the keyless commands a node runs whatever the slots it
// serves, and that may run twice: a pipeline of them and of redirected
// commands is sent again whole (worqr's heartbeat pipelines TIME with its
// SET).
var rerunnable = map[string]bool{"TIME": true, "PING": true, "ECHO": true}

// pipelineRedirect returns the first redirection among the replies and
// whether every reply that counts is one of that kind. MULTI's reply and
// EXEC's EXECABORT (the transaction was refused because its commands were)
// do not count, nor do the replies of rerunnable commands.
func pipelineRedirect(names []string, out []any, from string) (redirect, bool) {
	var first redirect
	counted := 0
	for i, r := range out {
		n := strings.ToUpper(names[i])
		if n == "MULTI" || rerunnable[n] {
			continue
		}
		e, isErr := r.(redis.Error)
		if n == "EXEC" && isErr && strings.HasPrefix(string(e), "EXECABORT") {
			continue
		}
		counted++
		if !isErr {
			return redirect{}, false
		}
		rd := parseRedirect(e, from)
		if rd.kind == noRedirect || (first.kind != noRedirect && rd.kind != first.kind) {
			return redirect{}, false
		}
		if first.kind == noRedirect {
			first = rd
		}
	}
	return first, counted > 0
}
