package goredis

import (
	"context"
	"errors"
	"strings"
	"time"

	redigo "github.com/gomodule/redigo/redis"
	"github.com/redis/go-redis/v9"
	"github.com/worqr/worqr-go/internal/engine"
)

// conn is a redigo connection over one go-redis connection, taken from the
// client's pool at its first command and given back by Close: the commands
// of one worqr call travel on one connection, in order, as on a redigo
// connection (a pipeline, a MULTI/EXEC, a script and the WAIT after it).
//
// The go-redis connection is a *redis.Conn (a "sticky" connection): once it
// failed (a broken connection, a timeout) every later command fails
// without being sent. So a command whose reply was lost is never sent
// again behind worqr's back, as a go-redis client's own retries would
// (MaxRetries): worqr decides what a lost reply means (a take or an end
// that may have been applied), as it does with redigo.
//
// Commands go out as redigo's would, with one difference of timing: go-redis
// cannot write a pipeline and read its replies later, so the commands Send
// queues (Flush sends nothing itself) go out, all in one round trip, at the
// first Receive or Do after them. A window of pipelined chunks (Send,
// Flush, then a Receive per chunk) so costs a round trip per window, not
// per chunk. Commands sent and never received when the connection closes
// are not sent at all.
//
// After a SUBSCRIBE or SSUBSCRIBE the connection is a go-redis PubSub on a
// connection of its own, and its replies are the arrays redigo's pub/sub
// reads (message, smessage, subscribe, unsubscribe, pong).
type conn struct {
	node *redis.Client // whose pool lends the connection
	// ctxDeadlines: node applies a context's deadline to reads and writes
	// (Options.ContextTimeoutEnabled); else its ReadTimeout and
	// WriteTimeout bound them and a deadline is not made into a context.
	ctxDeadlines bool
	cluster      *clusterRunner // on a cluster: where a refused call goes
	// subs and ssubs open a subscription: its first SUBSCRIBE, and its
	// first SSUBSCRIBE.
	subs, ssubs subscriber

	sc      *redis.Conn
	pending [][]any  // sent, not yet run
	replies []result // run, not received
	err     error    // the connection failed: every call returns it

	ps      *redis.PubSub
	sharded bool
}

// subscriber opens subscriptions: a *redis.Client or a *redis.ClusterClient.
type subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
	SSubscribe(ctx context.Context, channels ...string) *redis.PubSub
}

type result struct {
	v   any
	err error
}

var (
	_ redigo.Conn            = (*conn)(nil)
	_ redigo.ConnWithContext = (*conn)(nil)
	_ redigo.ConnWithTimeout = (*conn)(nil)
)

// errUsedAfterClose is returned by a connection used after Close.
var errUsedAfterClose = errors.New("goredis: connection used after Close")

// errSubscribed is returned by a command other than a subscription's on a
// connection that subscribed.
var errSubscribed = errors.New("goredis: only (S)SUBSCRIBE, (S)UNSUBSCRIBE and PING on a subscribed connection")

func (c *conn) sticky() *redis.Conn {
	if c.sc == nil {
		c.sc = c.node.Conn()
	}
	return c.sc
}

// bound returns the context a call bounded by timeout runs with (ctx
// itself unless the client applies deadlines: a context with a deadline
// costs a timer and a few allocations per call) and the deadline, zero
// for none.
func (c *conn) bound(timeout time.Duration) (context.Context, context.CancelFunc, time.Time) {
	if timeout <= 0 {
		return context.Background(), func() {}, time.Time{}
	}
	until := time.Now().Add(timeout)
	if !c.ctxDeadlines {
		return context.Background(), func() {}, until
	}
	ctx, cancel := context.WithDeadline(context.Background(), until)
	return ctx, cancel, until
}

// deadline is ctx's deadline, zero for none.
func deadline(ctx context.Context) time.Time {
	dl, _ := ctx.Deadline()
	return dl
}

// Do sends cmd (after the commands sent and not received) and returns its
// reply. With cmd "" it runs the commands sent and returns every reply not
// received.
func (c *conn) Do(cmd string, args ...any) (any, error) {
	return c.do(context.Background(), time.Time{}, 0, cmd, args)
}

// DoWithTimeout is Do bounded by timeout.
func (c *conn) DoWithTimeout(timeout time.Duration, cmd string, args ...any) (any, error) {
	ctx, cancel, until := c.bound(timeout)
	defer cancel()
	return c.do(ctx, until, timeout, cmd, args)
}

// DoContext is Do bounded by ctx (go-redis applies ctx's deadline to the
// connection when the client has ContextTimeoutEnabled; else its
// ReadTimeout and WriteTimeout bound the call).
func (c *conn) DoContext(ctx context.Context, cmd string, a ...any) (any, error) {
	return c.do(ctx, deadline(ctx), 0, cmd, a)
}

// do is Do bounded by ctx and until (a subscription's wait by timeout).
// As redigo's Do: the replies of the commands sent before cmd are dropped,
// and the first error reply among them and cmd's is the error returned.
func (c *conn) do(ctx context.Context, until time.Time, timeout time.Duration, cmd string, a []any) (any, error) {
	if c.ps != nil || isSubscribe(cmd) {
		if cmd == "" {
			return nil, nil
		}
		if err := c.Send(cmd, a...); err != nil {
			return nil, err
		}
		return c.pubsubReceive(ctx, timeout)
	}
	if c.err != nil {
		return nil, c.err
	}
	if cmd == "" {
		if err := c.runPending(ctx, until); err != nil {
			return nil, err
		}
		out := make([]any, len(c.replies))
		for i, r := range c.replies {
			out[i] = r.v
			if r.err != nil {
				out[i] = r.err
			}
		}
		c.replies = nil
		return out, nil
	}
	c.replies = nil
	cmds := append(c.pending, args(cmd, a))
	c.pending = nil
	rs, err := c.exec(ctx, until, cmds)
	if err != nil {
		return nil, err
	}
	last := rs[len(rs)-1]
	for _, r := range rs {
		if r.err != nil {
			return last.v, r.err
		}
	}
	return last.v, nil
}

// Send queues cmd: it goes out at the next Receive or Do.
func (c *conn) Send(cmd string, a ...any) error {
	if c.err != nil {
		return c.err
	}
	if c.ps != nil || isSubscribe(cmd) {
		return c.pubsubSend(cmd, a)
	}
	c.pending = append(c.pending, args(cmd, a))
	return nil
}

// Flush returns the connection's error, if it failed: the commands sent go
// out at the next Receive (see conn).
func (c *conn) Flush() error { return c.err }

// runPending runs the commands sent and keeps their replies for Receive.
func (c *conn) runPending(ctx context.Context, until time.Time) error {
	if c.err != nil {
		return c.err
	}
	if len(c.pending) == 0 {
		return nil
	}
	cmds := c.pending
	c.pending = nil
	rs, err := c.exec(ctx, until, cmds)
	if err != nil {
		return err
	}
	c.replies = append(c.replies, rs...)
	return nil
}

// Receive returns the reply of the oldest command sent and not received,
// running the commands sent first if none has run.
func (c *conn) Receive() (any, error) { return c.receive(context.Background(), time.Time{}, 0) }

// ReceiveWithTimeout is Receive bounded by timeout (on a subscribed
// connection: the wait for the next message).
func (c *conn) ReceiveWithTimeout(timeout time.Duration) (any, error) {
	ctx, cancel, until := c.bound(timeout)
	defer cancel()
	return c.receive(ctx, until, timeout)
}

// ReceiveContext is Receive bounded by ctx.
func (c *conn) ReceiveContext(ctx context.Context) (any, error) {
	return c.receive(ctx, deadline(ctx), 0)
}

func (c *conn) receive(ctx context.Context, until time.Time, timeout time.Duration) (any, error) {
	if c.ps != nil {
		return c.pubsubReceive(ctx, timeout)
	}
	if len(c.replies) == 0 {
		if err := c.runPending(ctx, until); err != nil {
			return nil, err
		}
	}
	if len(c.replies) == 0 {
		if c.err != nil {
			return nil, c.err
		}
		return nil, errors.New("goredis: Receive with no command sent")
	}
	r := c.replies[0]
	c.replies = c.replies[1:]
	return r.v, r.err
}

// Err returns the error that broke the connection, if one did.
func (c *conn) Err() error { return c.err }

// Close gives the connection back to the client's pool (go-redis closes it
// instead when it failed) and ends a subscription. Commands sent and not
// received are dropped unsent.
func (c *conn) Close() error {
	var err error
	if c.ps != nil {
		err = c.ps.Close()
	}
	if c.sc != nil {
		if e := c.sc.Close(); err == nil && !errors.Is(e, redis.ErrClosed) {
			err = e
		}
	}
	if c.err == nil {
		c.err = errUsedAfterClose
	}
	c.sc, c.ps, c.pending, c.replies = nil, nil, nil, nil
	return err
}

// Pipeline sends the commands in one round trip and returns their replies
// in order, an error reply in its slot (worqr's store pipelines through it).
func (c *conn) Pipeline(ctx context.Context, names []string, as [][]any) ([]any, error) {
	if c.err != nil {
		return nil, c.err
	}
	if c.ps != nil {
		return nil, errSubscribed
	}
	if err := c.runPending(ctx, deadline(ctx)); err != nil {
		return nil, err
	}
	c.replies = nil
	cmds := make([][]any, len(names))
	for i := range names {
		cmds[i] = args(names[i], as[i])
	}
	rs, err := c.exec(ctx, deadline(ctx), cmds)
	if err != nil {
		return nil, err
	}
	out := make([]any, len(rs))
	for i, r := range rs {
		if r.err != nil {
			out[i] = r.err
		} else {
			out[i] = r.v
		}
	}
	return out, nil
}

// exec runs cmds on the connection, one command alone or all of them as one
// pipeline, and returns one result per command: a Redis error reply is the
// result's error; a connection error fails the call and the connection.
//
// On a cluster, a call every command of which the node refused ran
// nowhere, and is sent again: after MOVED on a connection to the master
// named, which the connection keeps (what follows, a WAIT after a write,
// goes there too); after ASK through the ClusterClient, which sends ASKING
// to the node named; after TRYAGAIN or CLUSTERDOWN (a slot moving, a
// failover) after a pause (5 ms doubling to 200 ms) until until (retryFor
// when zero).
func (c *conn) exec(ctx context.Context, until time.Time, cmds [][]any) ([]result, error) {
	backoff := 5 * time.Millisecond
	for moves := 0; ; {
		rs, err := runRaw(ctx, c.sticky(), cmds)
		if err != nil {
			c.err = err
			if c.cluster != nil && !errors.Is(err, context.Canceled) {
				c.cluster.p.watch.soon() // the node may be gone
			}
			return nil, err
		}
		if readOnly(rs) {
			// The node is a replica now: dial again (a failover client
			// asks the sentinels where the primary is).
			c.discard()
			if c.cluster != nil {
				c.cluster.p.watch.soon()
			}
		}
		if c.cluster == nil {
			return rs, nil
		}
		kind, addr := redirectOf(cmds, rs)
		if kind == "MOVED" || kind == "CLUSTERDOWN" {
			c.cluster.p.watch.soon() // the map changed, or is changing
		}
		switch kind {
		case "MOVED":
			c.cluster.ReloadState(ctx)
			node := c.cluster.master(ctx, addr)
			if moves++; node == nil || moves > maxMoves {
				return c.runCluster(ctx, cmds)
			}
			_ = c.sc.Close()
			c.sc, c.node = nil, node
		case "ASK":
			return c.runCluster(ctx, cmds)
		case "TRYAGAIN", "CLUSTERDOWN":
			if until.IsZero() {
				until = time.Now().Add(retryFor)
			}
			if !pause(ctx, backoff, until) {
				return rs, nil
			}
			backoff = min(2*backoff, 200*time.Millisecond)
		default:
			return rs, nil
		}
	}
}

// readOnly reports a READONLY reply among rs.
func readOnly(rs []result) bool {
	for _, r := range rs {
		if r.err != nil && strings.HasPrefix(r.err.Error(), "READONLY ") {
			return true
		}
	}
	return false
}

// discard gives the go-redis connection back to be closed rather than
// reused, as go-redis itself does after a READONLY reply it reads (the
// adapter reads replies raw, so go-redis does not see it). go-redis has no
// call for it, but drops a connection after a command fails otherwise than
// by a Redis reply: discard runs one that fails before any byte of it is
// written (its only argument does not marshal, not even a name), so
// nothing is sent and no Redis command is named here: the commands are
// internal/rdb's. A hook on the client sees a failed, nameless command.
func (c *conn) discard() {
	if c.sc == nil {
		return
	}
	ctx := context.Background()
	_ = c.sc.Process(ctx, redis.NewCmd(ctx, unsendable{}))
	_ = c.sc.Close()
	c.sc = nil
}

// unsendable is an argument go-redis cannot write.
type unsendable struct{}

func (unsendable) MarshalBinary() ([]byte, error) {
	return nil, errors.New("goredis: the connection is dropped")
}

// runCluster runs cmds through the ClusterClient (see exec); a connection
// error fails the connection, as on the connection itself.
func (c *conn) runCluster(ctx context.Context, cmds [][]any) ([]result, error) {
	rs, err := run(ctx, c.cluster, cmds)
	if err != nil {
		c.err = err
	}
	return rs, err
}

// maxMoves bounds the MOVED replies one call follows on its own.
const maxMoves = 5

// retryFor bounds the TRYAGAIN and CLUSTERDOWN retries of a call whose
// context has no deadline.
const retryFor = 10 * time.Second

// pause waits d; false when that would pass until or ctx ended.
func pause(ctx context.Context, d time.Duration, until time.Time) bool {
	if time.Now().Add(d).After(until) {
		return false
	}
	return engine.Sleep(ctx, d)
}

// runRaw runs cmds on sc, one command alone, else as one pipeline, and
// returns their replies as redigo reads them (see parse). A MULTI ... EXEC
// block is a pipeline like any other: its replies are OK, QUEUED and EXEC's
// array, on the one connection.
func runRaw(ctx context.Context, sc *redis.Conn, cmds [][]any) ([]result, error) {
	if len(cmds) == 1 {
		cmd := redis.NewRawCmd(ctx, cmds[0]...)
		if err := sc.Process(ctx, cmd); err != nil {
			return nil, err // a raw reply is never an error: a connection's
		}
		v, err := parseReply(cmd.Val())
		if err != nil {
			return nil, err
		}
		return []result{v}, nil
	}
	p := sc.Pipeline()
	cs := make([]*redis.RawCmd, len(cmds))
	for i, a := range cmds {
		cs[i] = redis.NewRawCmd(ctx, a...)
		_ = p.Process(ctx, cs[i])
	}
	if _, err := p.Exec(ctx); err != nil {
		return nil, err
	}
	out := make([]result, len(cs))
	for i, cmd := range cs {
		r, err := parseReply(cmd.Val())
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

// runner is a ClusterClient.
type runner interface {
	Process(ctx context.Context, cmd redis.Cmder) error
	Pipeline() redis.Pipeliner
	TxPipeline() redis.Pipeliner
}

// onceCmd is a command the client never sends again after an error
// (MaxRetries): a command whose reply was lost may have run.
type onceCmd struct{ *redis.Cmd }

func (onceCmd) NoRetry() bool { return true }

// run runs cmds through r (a ClusterClient, for a call it sends where the
// slot is: ASK, or MOVED more than maxMoves times): one command alone, a
// MULTI ... EXEC block as a go-redis transaction, else as one pipeline.
// go-redis reads a simple string as it reads a bulk one: both are []byte
// here.
func run(ctx context.Context, r runner, cmds [][]any) ([]result, error) {
	if len(cmds) == 1 {
		cmd := redis.NewCmd(ctx, cmds[0]...)
		_ = r.Process(ctx, onceCmd{cmd})
		v, err := reply(cmd)
		if err != nil && !isReply(err) {
			return nil, err
		}
		return []result{{v, err}}, nil
	}
	if isTx(cmds) {
		return runTx(ctx, r, cmds)
	}
	p := r.Pipeline()
	cs := make([]*redis.Cmd, len(cmds))
	for i, a := range cmds {
		cs[i] = redis.NewCmd(ctx, a...)
		_ = p.Process(ctx, onceCmd{cs[i]})
	}
	_, _ = p.Exec(ctx)
	out := make([]result, len(cs))
	for i, cmd := range cs {
		v, err := reply(cmd)
		if err != nil && !isReply(err) {
			return nil, err
		}
		out[i] = result{v, err}
	}
	return out, nil
}

// isTx reports a pipeline that is one transaction: MULTI, commands, EXEC.
func isTx(cmds [][]any) bool {
	return len(cmds) >= 2 && strings.EqualFold(cmds[0][0].(string), "MULTI") &&
		strings.EqualFold(cmds[len(cmds)-1][0].(string), "EXEC")
}

// runTx runs a MULTI ... EXEC pipeline as a go-redis transaction (which on
// a cluster client goes to the slot's node) and returns the replies redigo
// reads: OK, QUEUED for each command, then EXEC's array of their replies
// (an error reply of one in its place). A command Redis refused to queue
// fails the transaction: EXEC's reply is then that error.
func runTx(ctx context.Context, r runner, cmds [][]any) ([]result, error) {
	inner := cmds[1 : len(cmds)-1]
	p := r.TxPipeline()
	cs := make([]*redis.Cmd, len(inner))
	for i, a := range inner {
		cs[i] = redis.NewCmd(ctx, a...)
		_ = p.Process(ctx, onceCmd{cs[i]})
	}
	_, err := p.Exec(ctx)
	out := make([]result, 0, len(cmds))
	out = append(out, result{v: []byte("OK")})
	exec := make([]any, len(cs))
	var execErr error
	for i, cmd := range cs {
		v, e := reply(cmd)
		switch {
		case e != nil && !isReply(e):
			return nil, e
		case e != nil && strings.HasPrefix(e.Error(), "EXECABORT"):
			execErr = e
		case e != nil && execErr == nil && parseRedirectKind(e.Error()) != "":
			// Refused when queued: EXEC is refused too.
			execErr = redigo.Error("EXECABORT Transaction discarded because of previous errors: " + e.Error())
		case e != nil:
			exec[i] = e
		default:
			exec[i] = v
		}
		out = append(out, result{v: []byte("QUEUED")})
	}
	if execErr == nil && err != nil && isReply(replyErr(err)) && len(cs) == 0 {
		execErr = replyErr(err)
	}
	if execErr != nil {
		return append(out, result{err: execErr}), nil
	}
	return append(out, result{v: exec}), nil
}

// redirectOf returns the redirection (MOVED, ASK, TRYAGAIN, CLUSTERDOWN)
// that every reply of rs is, with the address a MOVED or ASK names, or ""
// when one is not: then something ran, and the replies are the call's. A
// transaction the node refused is an EXECABORT after the refusals of its
// commands (in place of QUEUED).
func redirectOf(cmds [][]any, rs []result) (kind, addr string) {
	if isTx(cmds) {
		last := rs[len(rs)-1].err
		if last == nil || !strings.HasPrefix(last.Error(), "EXECABORT") {
			return "", ""
		}
		for _, r := range rs[1 : len(rs)-1] {
			if r.err != nil {
				if k, a := parseRedirect(r.err.Error()); k != "" {
					return k, a
				}
			}
		}
		return "", ""
	}
	for i, r := range rs {
		if r.err == nil {
			return "", ""
		}
		k, a := parseRedirect(r.err.Error())
		if k == "" || i > 0 && k != kind {
			return "", ""
		}
		kind, addr = k, a
	}
	return kind, addr
}

var redirects = []string{"MOVED ", "ASK ", "TRYAGAIN", "CLUSTERDOWN"}

// parseRedirect returns the kind of a redirection reply and the address it
// names ("MOVED 866 127.0.0.1:7001").
func parseRedirect(msg string) (kind, addr string) {
	for _, k := range redirects {
		if strings.HasPrefix(msg, k) {
			f := strings.Fields(msg)
			if len(f) >= 3 && (f[0] == "MOVED" || f[0] == "ASK") {
				addr = f[2]
			}
			return strings.TrimSpace(k), addr
		}
	}
	return "", ""
}

func parseRedirectKind(msg string) string {
	k, _ := parseRedirect(msg)
	return k
}

func isReply(err error) bool {
	var re redigo.Error
	return errors.As(err, &re)
}

func isSubscribe(cmd string) bool {
	return strings.EqualFold(cmd, "SUBSCRIBE") || strings.EqualFold(cmd, "SSUBSCRIBE")
}
