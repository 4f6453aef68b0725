// Package sentinel is worqr's connection source for a Redis primary that
// Redis Sentinel manages: it asks the sentinels which node is the primary,
// confirms it with ROLE, follows +switch-master, and moves every new call to
// the new primary after a failover.
package sentinel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Options configure a Pool.
type Options struct {
	// Master is the name the sentinels monitor the primary under.
	Master string
	// Sentinels are the sentinels' host:port addresses, asked in turn;
	// those the sentinels name as their peers (SENTINEL SENTINELS) are
	// learned and asked after them.
	Sentinels []string
	// NewPool returns a pool of connections to the node at addr (a primary
	// candidate), with the caller's credentials, TLS and database.
	NewPool func(addr string) *redis.Pool
	// DialSentinel dials the sentinel at addr: a plain connection, not a
	// pooled one (the subscription is closed while a Receive waits on it).
	DialSentinel func(ctx context.Context, addr string) (redis.Conn, error)
	// Check is how often the sentinels are asked again even without news
	// (default 5s): a missed +switch-master costs at most this long.
	Check time.Duration
	// AskTimeout bounds one sentinel's answer with the ROLE of the node it
	// names (default: a second, or the sentinel's share of Check if that
	// is longer), so that a sentinel that hangs does not keep the others
	// from being asked.
	AskTimeout time.Duration
	// Logger gets the switches and the sentinels' failures (default: none).
	Logger *slog.Logger
}

// Pool hands out connections to the current primary.
type Pool struct {
	o Options

	mu    sync.Mutex
	known []string // the sentinels to ask: Options.Sentinels, then those learned
	addr  string
	pool  *redis.Pool
	// epoch is the highest configuration epoch a sentinel gave with addr
	// (SENTINEL MASTER's config-epoch): each failover raises it.
	epoch    int64
	closed   bool
	refresh  chan struct{}
	stop     chan struct{}
	wg       sync.WaitGroup
	switches atomic.Uint64
	switched chan struct{} // closed (and replaced) at each switch; guarded by mu
}

// ErrNoPrimary is returned when no sentinel names a node that confirms it is
// the primary.
var ErrNoPrimary = errors.New("sentinel: no primary found")

// New asks the sentinels for the primary, confirms it, and starts watching
// for failovers. Close it when done.
func New(ctx context.Context, o Options) (*Pool, error) {
	if o.Master == "" {
		return nil, errors.New("sentinel: master name is empty")
	}
	if len(o.Sentinels) == 0 {
		return nil, errors.New("sentinel: no sentinel address")
	}
	if o.Check <= 0 {
		o.Check = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(discard{})
	}
	p := &Pool{o: o, known: append([]string(nil), o.Sentinels...), refresh: make(chan struct{}, 1), stop: make(chan struct{}), switched: make(chan struct{})}
	if err := p.discover(ctx); err != nil {
		return nil, err
	}
	p.wg.Add(1)
	go p.watch()
	return p, nil
}

// Primary returns the address of the primary in use.
func (p *Pool) Primary() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// GetContext returns a connection to the primary. A reply that says the
// node is no longer the primary (READONLY, MASTERDOWN, LOADING) or a failed
// dial makes the pool ask the sentinels again at once.
func (p *Pool) GetContext(ctx context.Context) (redis.Conn, error) {
	p.mu.Lock()
	pool, closed := p.pool, p.closed
	p.mu.Unlock()
	if closed {
		return nil, errors.New("sentinel: pool closed")
	}
	c, err := pool.GetContext(ctx)
	if err != nil {
		p.Refresh()
		return nil, err
	}
	return &conn{Conn: c, p: p}, nil
}

// Switches returns how many times the pool moved to another primary.
func (p *Pool) Switches() uint64 { return p.switches.Load() }

// Switched returns a channel closed at the next switch (when Switches
// grows), so that a worker notices a failover at once.
func (p *Pool) Switched() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.switched
}

// Refresh asks the watcher to ask the sentinels again (it does not wait).
func (p *Pool) Refresh() {
	select {
	case p.refresh <- struct{}{}:
	default:
	}
}

// Close stops watching and closes the connections.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	close(p.stop)
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pool.Close()
}

// askTimeout bounds one sentinel's answer and the ROLE of the node it
// names, so that a sentinel that accepts connections but never answers (a
// stopped process, a black-holed host) does not use up the time of the
// sentinels after it (see Options.AskTimeout).
func (p *Pool) askTimeout() time.Duration {
	if p.o.AskTimeout > 0 {
		return p.o.AskTimeout
	}
	return max(time.Second, p.o.Check/time.Duration(len(p.sentinels())))
}

// maxSentinels bounds the sentinels the pool knows: those given and those
// learned.
const maxSentinels = 64

// sentinels returns the sentinels to ask, in order.
func (p *Pool) sentinels() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.known
}

// learn adds the peers sentinel s knows for the master (SENTINEL
// SENTINELS) to the sentinels to ask, so that the pool follows a set of
// sentinels that is replaced over time. Best effort: a failure changes
// nothing.
func (p *Pool) learn(ctx context.Context, s string) {
	ctx, cancel := context.WithTimeout(ctx, p.askTimeout())
	defer cancel()
	c, err := p.o.DialSentinel(ctx, s)
	if err != nil {
		return
	}
	defer c.Close()
	peers, err := redis.Values(redis.DoContext(c, ctx, "SENTINEL", "SENTINELS", p.o.Master))
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, peer := range peers {
		m, err := redis.StringMap(peer, nil)
		if err != nil || m["ip"] == "" || m["port"] == "" {
			continue
		}
		addr := net.JoinHostPort(m["ip"], m["port"])
		if len(p.known) < maxSentinels && !slices.Contains(p.known, addr) {
			// A new slice: sentinels() hands the old one out unlocked.
			p.known = append(slices.Clip(p.known), addr)
			p.o.Logger.Info("sentinel: learned a sentinel", "master", p.o.Master, "sentinel", addr)
		}
	}
}

// discover asks each sentinel in turn for the primary's address, and uses
// the first one that the node itself confirms (ROLE says master), the node
// in use included: a sentinel that has not seen a failover still names the
// old primary, which may be a replica by now, or may still act as a primary
// (a split brain: cut off from the sentinels that moved on, nobody demoted
// it). Such a sentinel gives an older configuration epoch than the one the
// pool moved on with: while the node in use confirms, the pool does not go
// back (see discoverFrom).
func (p *Pool) discover(ctx context.Context) error {
	var errs []error
	for _, s := range p.sentinels() {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		if p.discoverFrom(ctx, s, &errs) {
			p.learn(ctx, s)
			return nil
		}
	}
	return fmt.Errorf("%w for %q: %w", ErrNoPrimary, p.o.Master, errors.Join(errs...))
}

// discoverFrom asks sentinel s, within askTimeout, and reports whether the
// pool now uses a primary that s names and that confirms it.
func (p *Pool) discoverFrom(ctx context.Context, s string, errs *[]error) bool {
	ctx, cancel := context.WithTimeout(ctx, p.askTimeout())
	defer cancel()
	addr, epoch, err := p.ask(ctx, s)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("sentinel %s: %w", s, err))
		return false
	}
	p.mu.Lock()
	cur, curPool, curEpoch := p.addr, p.pool, p.epoch
	p.mu.Unlock()
	if cur == addr {
		if err := confirm(ctx, curPool); err != nil {
			*errs = append(*errs, fmt.Errorf("sentinel %s names %s, in use: %w", s, addr, err))
			return false
		}
		p.mu.Lock()
		if p.addr == addr {
			p.epoch = max(p.epoch, epoch)
		}
		p.mu.Unlock()
		return true // nothing changed
	}
	if curPool != nil && epoch < curEpoch {
		// A sentinel behind a failover the pool followed. Its node is
		// not used while the one in use still confirms (sentinels reset
		// to epoch 0 while the primary in use was demoted are followed).
		if err := confirm(ctx, curPool); err == nil {
			p.o.Logger.Warn("sentinel: a sentinel names an older primary, which is not used (a sentinel cut off from the others, maybe a split brain)",
				"master", p.o.Master, "sentinel", s, "names", addr, "epoch", epoch, "in_use", cur, "in_use_epoch", curEpoch)
			*errs = append(*errs, fmt.Errorf("sentinel %s names %s at configuration epoch %d, older than %s's (%d), which still confirms", s, addr, epoch, cur, curEpoch))
			return false
		}
	}
	pool := p.o.NewPool(addr)
	if err := confirm(ctx, pool); err != nil {
		pool.Close()
		*errs = append(*errs, fmt.Errorf("sentinel %s names %s: %w", s, addr, err))
		return false
	}
	p.use(addr, pool, epoch)
	return true
}

// ask returns the primary's address according to sentinel s, and the
// configuration epoch s knows it at (SENTINEL MASTER).
func (p *Pool) ask(ctx context.Context, s string) (string, int64, error) {
	c, err := p.o.DialSentinel(ctx, s)
	if err != nil {
		return "", 0, err
	}
	defer c.Close()
	m, err := redis.StringMap(redis.DoContext(c, ctx, "SENTINEL", "MASTER", p.o.Master))
	if err != nil {
		if e, ok := err.(redis.Error); ok && strings.Contains(string(e), "No such master") {
			return "", 0, fmt.Errorf("does not monitor %q", p.o.Master)
		}
		return "", 0, err
	}
	epoch, err := strconv.ParseInt(m["config-epoch"], 10, 64)
	if m["ip"] == "" || m["port"] == "" || err != nil {
		return "", 0, fmt.Errorf("unexpected SENTINEL MASTER reply %q", m)
	}
	return net.JoinHostPort(m["ip"], m["port"]), epoch, nil
}

// confirm checks that the node of pool says it is a primary, on a
// connection of its own: the pool's may all be in use (MaxActive), which
// says nothing of the node.
func confirm(ctx context.Context, pool *redis.Pool) error {
	var c redis.Conn
	var err error
	if pool.DialContext != nil {
		c, err = pool.DialContext(ctx)
	} else {
		c, err = pool.Dial()
	}
	if err != nil {
		return err
	}
	defer c.Close()
	r, err := redis.Values(redis.DoContext(c, ctx, "ROLE"))
	if err != nil {
		return err
	}
	if len(r) == 0 {
		return errors.New("empty ROLE reply")
	}
	if role, _ := redis.String(r[0], nil); role != "master" {
		return fmt.Errorf("it says it is a %s", role)
	}
	return nil
}

// use makes addr the primary; the old pool is closed, so that its
// connections close as they come back.
func (p *Pool) use(addr string, pool *redis.Pool, epoch int64) {
	p.mu.Lock()
	if p.closed && p.pool != nil {
		p.mu.Unlock()
		pool.Close()
		return
	}
	old, oldAddr := p.pool, p.addr
	p.addr, p.pool, p.epoch = addr, pool, epoch
	var switched chan struct{}
	if old != nil {
		p.switches.Add(1)
		switched, p.switched = p.switched, make(chan struct{})
	}
	p.mu.Unlock()
	if old != nil {
		close(switched)
		old.Close()
		p.o.Logger.Warn("sentinel: primary switched", "master", p.o.Master, "from", oldAddr, "to", addr)
	}
}

// watch follows +switch-master on one sentinel at a time (the next one
// after a failure) until the pool closes.
func (p *Pool) watch() {
	defer p.wg.Done()
	pause := 100 * time.Millisecond
	for next := 0; ; next++ {
		known := p.sentinels()
		s := known[next%len(known)]
		err := p.follow(s)
		select {
		case <-p.stop:
			return
		default:
		}
		p.o.Logger.Warn("sentinel: watching failed; trying the next sentinel", "sentinel", s, "err", err)
		select {
		case <-p.stop:
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// follow subscribes to +switch-master on sentinel s and asks the sentinels
// again on each switch of this master, on each Refresh, after a failed
// discovery and every Check, until the subscription fails or the pool
// stops.
func (p *Pool) follow(s string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := p.o.DialSentinel(ctx, s)
	if err != nil {
		return err
	}
	psc := redis.PubSubConn{Conn: c}
	if err := psc.Subscribe("+switch-master"); err != nil {
		psc.Close()
		return err
	}
	failed := make(chan error, 1)
	pongs := make(chan struct{}, 1)
	var reader sync.WaitGroup
	defer reader.Wait()
	defer psc.Close() // ends the reader's Receive
	reader.Add(1)
	go func() {
		defer reader.Done()
		for {
			switch m := psc.Receive().(type) {
			case redis.Message:
				// "<name> <old ip> <old port> <new ip> <new port>"
				if f := strings.Fields(string(m.Data)); len(f) == 5 && f[0] == p.o.Master {
					p.Refresh()
				}
			case redis.Pong:
				select {
				case pongs <- struct{}{}:
				default:
				}
			case error:
				failed <- m
				return
			}
		}
	}()
	tick := time.NewTicker(p.o.Check)
	defer tick.Stop()
	// A sentinel that hangs (a stopped process, a host gone behind a
	// firewall) never ends the subscription: a PING on each Check that is
	// not answered by the next one moves the watch to the next sentinel.
	pinged := false
	for {
		select {
		case <-p.stop:
			return nil
		case err := <-failed:
			return err
		case <-pongs:
			pinged = false
			continue
		case <-p.refresh:
		case <-tick.C:
			select {
			case <-pongs:
				pinged = false
			default:
			}
			if pinged {
				return fmt.Errorf("sentinel %s: no answer to PING within %s", s, p.o.Check)
			}
			if err := psc.Ping(""); err != nil {
				return err
			}
			pinged = true
		}
		dctx, dcancel := context.WithTimeout(ctx, max(p.o.Check, time.Duration(len(p.sentinels()))*p.askTimeout()))
		err := p.discover(dctx)
		dcancel()
		if err == nil {
			continue
		}
		// During a failover the sentinels name the old primary until they
		// agree: try again shortly.
		p.o.Logger.Warn("sentinel: discovery failed", "err", err)
		select {
		case <-p.stop:
			return nil
		case <-time.After(200 * time.Millisecond):
			p.Refresh()
		}
	}
}

// conn notices replies that say its node is no longer the primary.
type conn struct {
	redis.Conn
	p *Pool
}

// stale reports a reply that means the node is not (or no longer) a
// usable primary.
func stale(err error) bool {
	var e redis.Error
	if !errors.As(err, &e) {
		return false
	}
	msg := string(e)
	return strings.HasPrefix(msg, "READONLY") || strings.HasPrefix(msg, "MASTERDOWN") || strings.HasPrefix(msg, "LOADING")
}

func (c *conn) notice(r any, err error) (any, error) {
	if stale(err) {
		c.p.Refresh()
	}
	return r, err
}

func (c *conn) Do(cmd string, args ...any) (any, error) { return c.notice(c.Conn.Do(cmd, args...)) }

func (c *conn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	return c.notice(redis.DoContext(c.Conn, ctx, cmd, args...))
}

func (c *conn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	return c.notice(redis.DoWithTimeout(c.Conn, d, cmd, args...))
}

func (c *conn) Receive() (any, error) { return c.notice(c.Conn.Receive()) }

func (c *conn) ReceiveContext(ctx context.Context) (any, error) {
	return c.notice(redis.ReceiveContext(c.Conn, ctx))
}

func (c *conn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return c.notice(redis.ReceiveWithTimeout(c.Conn, d))
}

// discard is a slog handler that drops everything.
type discard struct{}

func (discard) Enabled(context.Context, slog.Level) bool  { return false }
func (discard) Handle(context.Context, slog.Record) error { return nil }
func (d discard) WithAttrs([]slog.Attr) slog.Handler      { return d }
func (d discard) WithGroup(string) slog.Handler           { return d }
