package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Options say how to reach a cluster.
type Options struct {
	// Seeds are host:port addresses of some of the cluster's nodes; the
	// topology is read from the first that answers.
	Seeds []string
	// NewPool returns a connection pool to the node at addr (host:port).
	// The Pool closes it when the node leaves the map or on Close.
	NewPool func(addr string) *redis.Pool
	// TLS says the nodes are reached over TLS: their tls-port is used.
	TLS bool
	// RefreshInterval is how often the slot map is read again even when no
	// redirection said it changed. Default 30s; negative: never.
	RefreshInterval time.Duration
	// MaxRedirects bounds the MOVED and ASK redirections one command
	// follows. Default 8.
	MaxRedirects int
	// RetryFor bounds how long TRYAGAIN and CLUSTERDOWN are retried for a
	// call that carries no deadline of its own. Default 2s.
	RetryFor time.Duration
}

// Pool is a connection source for a Redis Cluster: GetContextForTag returns
// a connection to the master serving a hash tag's slot. It is safe for
// concurrent use.
type Pool struct {
	o Options

	mu      sync.RWMutex
	slots   []string // slot -> master address ("" while unknown)
	masters []string // sorted
	pools   map[string]*redis.Pool
	closed  bool

	refreshMu   sync.Mutex // one refresh at a time
	lastRefresh time.Time
	refreshes   int64 // completed topology reads (for tests)

	followed [7]atomic.Int64 // redirections acted on, by kind
	// onFollow, when set (by a test), sees every redirection a Conn of
	// the pool acts on.
	onFollow atomic.Pointer[func(redirect)]
	switches atomic.Uint64 // maps installed without a master of the one before
	switched chan struct{} // closed (and replaced) at each switch; guarded by mu

	stop chan struct{}
	wg   sync.WaitGroup
}

// Redirections returns how many MOVED, ASK, TRYAGAIN and CLUSTERDOWN
// replies the pool's connections acted on.
func (p *Pool) Redirections() (moved, ask, tryagain, clusterdown int64) {
	return p.followed[movedRedirect].Load(), p.followed[askRedirect].Load(),
		p.followed[tryAgain].Load(), p.followed[clusterDown].Load()
}

// Switches counts the slot maps read that lack a master of the map before
// (a failover promoted its replica, or its last slot moved away). Writes a
// dead master acknowledged may not have reached its replica (replication
// is asynchronous), so a worker that sees the count change checks what it
// holds (rdb.Store.Switches).
func (p *Pool) Switches() uint64 { return p.switches.Load() }

// Switched returns a channel closed at the next switch (when Switches
// grows), so that a worker notices a failover at once.
func (p *Pool) Switched() <-chan struct{} {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.switched
}

// ErrClosed is returned by a closed Pool.
var ErrClosed = errors.New("cluster: pool closed")

// New reads the topology from the seeds (bounded by ctx) and returns the
// pool. It fails when no seed answers CLUSTER SHARDS.
func New(ctx context.Context, o Options) (*Pool, error) {
	if len(o.Seeds) == 0 {
		return nil, errors.New("cluster: no seed address")
	}
	if o.NewPool == nil {
		return nil, errors.New("cluster: Options.NewPool is nil")
	}
	if o.RefreshInterval == 0 {
		o.RefreshInterval = 30 * time.Second
	}
	if o.MaxRedirects <= 0 {
		o.MaxRedirects = 8
	}
	if o.RetryFor <= 0 {
		o.RetryFor = 2 * time.Second
	}
	p := &Pool{o: o, slots: make([]string, Slots), pools: map[string]*redis.Pool{}, stop: make(chan struct{}), switched: make(chan struct{})}
	if err := p.Refresh(ctx); err != nil {
		p.Close()
		return nil, err
	}
	if o.RefreshInterval > 0 {
		p.wg.Add(1)
		go p.refreshLoop()
	}
	return p, nil
}

func (p *Pool) refreshLoop() {
	defer p.wg.Done()
	t := time.NewTicker(p.o.RefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = p.Refresh(ctx)
			cancel()
		}
	}
}

// Close stops the refreshes and closes every node's pool.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	pools := p.pools
	p.pools = map[string]*redis.Pool{}
	p.mu.Unlock()
	close(p.stop)
	p.wg.Wait()
	for _, np := range pools {
		np.Close()
	}
	return nil
}

// Masters returns the addresses of the masters that serve slots.
func (p *Pool) Masters() []string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return append([]string(nil), p.masters...)
}

// Addr returns the address of the master serving slot ("" when unknown).
func (p *Pool) Addr(slot int) string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.slots[slot]
}

// Refreshes returns how many times the slot map was read.
func (p *Pool) Refreshes() int64 {
	p.refreshMu.Lock()
	defer p.refreshMu.Unlock()
	return p.refreshes
}

// Refresh reads the slot map (CLUSTER SHARDS) from a known master or a
// seed, the first that answers, and installs it.
func (p *Pool) Refresh(ctx context.Context) error {
	p.refreshMu.Lock()
	defer p.refreshMu.Unlock()
	return p.refreshLocked(ctx)
}

func (p *Pool) refreshLocked(ctx context.Context) error {
	cands := p.Masters()
	rand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	cands = append(cands, p.o.Seeds...)
	var errs []error
	tried := map[string]bool{}
	uniq := 0
	for _, addr := range cands {
		if !tried[addr] {
			tried[addr] = true
			uniq++
		}
	}
	clear(tried)
	for _, addr := range cands {
		if tried[addr] {
			continue
		}
		tried[addr] = true
		// Each node asked has its share of the time left: one that hangs
		// (frozen, or cut off by a partition) must not use up the time of
		// the others.
		nctx, cancel := context.WithTimeout(ctx, askTimeout(ctx, uniq-len(tried)+1))
		shards, err := p.readShards(nctx, addr)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		p.install(shards)
		p.lastRefresh = time.Now()
		p.refreshes++
		return nil
	}
	return fmt.Errorf("cluster: no node answered CLUSTER SHARDS: %w", errors.Join(errs...))
}

// askTimeout is how long one node asked for the slot map may take when
// left nodes (it included) are still to be asked: its share of ctx's time
// left (at least 100 ms), or a second without a deadline.
func askTimeout(ctx context.Context, left int) time.Duration {
	dl, ok := ctx.Deadline()
	if !ok {
		return time.Second
	}
	return max(time.Until(dl)/time.Duration(max(left, 1)), 100*time.Millisecond)
}

// refreshSoon refreshes the map in the background unless a refresh ran in
// the last 100ms or one is running.
func (p *Pool) refreshSoon() {
	if !p.refreshMu.TryLock() {
		return
	}
	if time.Since(p.lastRefresh) < 100*time.Millisecond {
		p.refreshMu.Unlock()
		return
	}
	p.mu.RLock()
	closed := p.closed
	if !closed {
		p.wg.Add(1)
	}
	p.mu.RUnlock()
	if closed {
		p.refreshMu.Unlock()
		return
	}
	go func() {
		defer p.wg.Done()
		defer p.refreshMu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.refreshLocked(ctx)
	}()
}

// Shard is one shard of a CLUSTER SHARDS reply: the slot ranges it
// serves and the address of its master.
type Shard struct {
	Ranges []int // start, end, start, end ...
	Addr   string
}

func (p *Pool) readShards(ctx context.Context, addr string) ([]Shard, error) {
	np, err := p.nodePool(addr)
	if err != nil {
		return nil, err
	}
	c, err := np.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return ReadShards(ctx, c, p.o.TLS)
}

// ReadShards reads the slot map from the node c reaches (CLUSTER SHARDS,
// RESP2): the shards that serve slots and have a master up, each with its
// master's address (its tls-port with tls). A shard whose master is down
// is left out (its slots are CLUSTERDOWN until a replica takes over); a
// map with no such shard is an error. It is the one reader of the map, for
// Pool and for the pools of other clients (contrib/goredis).
func ReadShards(ctx context.Context, c redis.Conn, tls bool) ([]Shard, error) {
	reply, err := redis.Values(redis.DoContext(c, ctx, "CLUSTER", "SHARDS"))
	if err != nil {
		return nil, err
	}
	var out []Shard
	for _, r := range reply {
		m, err := fieldMap(r)
		if err != nil {
			return nil, err
		}
		ranges, err := redis.Ints(m["slots"], nil)
		if err != nil || len(ranges)%2 != 0 {
			return nil, fmt.Errorf("CLUSTER SHARDS: bad slots %v", m["slots"])
		}
		if len(ranges) == 0 {
			continue
		}
		nodes, _ := redis.Values(m["nodes"], nil)
		master := ""
		for _, n := range nodes {
			nm, err := fieldMap(n)
			if err != nil {
				return nil, err
			}
			role, _ := redis.String(nm["role"], nil)
			health, _ := redis.String(nm["health"], nil)
			// A failed master is "fail" in Redis 7.0's CLUSTER SHARDS and
			// "failed" in its documentation (and later versions).
			if role != "master" || health == "fail" || health == "failed" {
				continue
			}
			host, _ := redis.String(nm["endpoint"], nil)
			if host == "" || host == "?" {
				host, _ = redis.String(nm["ip"], nil)
			}
			portField := "port"
			if tls {
				portField = "tls-port"
			}
			port, err := redis.Int(nm[portField], nil)
			if err != nil || host == "" {
				continue
			}
			master = net.JoinHostPort(host, strconv.Itoa(port))
		}
		if master == "" {
			continue // no master is up: CLUSTERDOWN until one is
		}
		out = append(out, Shard{Ranges: ranges, Addr: master})
	}
	if len(out) == 0 {
		return nil, errors.New("CLUSTER SHARDS: no master serves a slot")
	}
	return out, nil
}

// fieldMap reads a flat name/value array (RESP2 form of a map).
func fieldMap(v any) (map[string]any, error) {
	vals, err := redis.Values(v, nil)
	if err != nil {
		return nil, err
	}
	m := make(map[string]any, len(vals)/2)
	for i := 0; i+1 < len(vals); i += 2 {
		k, err := redis.String(vals[i], nil)
		if err != nil {
			return nil, err
		}
		m[k] = vals[i+1]
	}
	return m, nil
}

// install replaces the slot map and closes the pools of nodes that serve
// no slot any more.
func (p *Pool) install(shards []Shard) {
	slots := make([]string, Slots)
	set := map[string]bool{}
	for _, s := range shards {
		for i := 0; i+1 < len(s.Ranges); i += 2 {
			for sl := max(s.Ranges[i], 0); sl <= min(s.Ranges[i+1], Slots-1); sl++ {
				slots[sl] = s.Addr
			}
		}
		set[s.Addr] = true
	}
	masters := make([]string, 0, len(set))
	for a := range set {
		masters = append(masters, a)
	}
	sort.Strings(masters)
	var drop []*redis.Pool
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	for _, a := range p.masters {
		if !set[a] {
			// A master left the map: a failover (its replica serves its
			// slots now) or its last slot moved away. Either way count it:
			// writes the old master acknowledged may not have reached its
			// replica.
			p.switches.Add(1)
			close(p.switched)
			p.switched = make(chan struct{})
			break
		}
	}
	p.slots, p.masters = slots, masters
	for a, np := range p.pools {
		if !set[a] {
			drop = append(drop, np)
			delete(p.pools, a)
		}
	}
	p.mu.Unlock()
	for _, np := range drop {
		np.Close() // connections in use close when they are returned
	}
}

// moved records that slot is served by addr (a MOVED reply) and refreshes
// the whole map in the background.
func (p *Pool) moved(slot int, addr string) {
	p.mu.Lock()
	if slot >= 0 && slot < Slots && !p.closed {
		p.slots[slot] = addr
	}
	p.mu.Unlock()
	p.refreshSoon()
}

// nodePool returns the pool of the node at addr, creating it.
func (p *Pool) nodePool(addr string) (*redis.Pool, error) {
	p.mu.RLock()
	np, ok := p.pools[addr]
	closed := p.closed
	p.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if ok {
		return np, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if np, ok := p.pools[addr]; ok {
		return np, nil
	}
	np = p.o.NewPool(addr)
	p.pools[addr] = np
	return np, nil
}

// dropNode closes the pool of the node at addr after a connection to it
// failed (not a timeout): its idle connections are likely dead too (a
// killed master), and each would fail one more call. The next call dials
// anew, which get retries until the replica is promoted.
func (p *Pool) dropNode(addr string) {
	p.mu.Lock()
	np := p.pools[addr]
	delete(p.pools, addr)
	p.mu.Unlock()
	if np != nil {
		np.Close() // connections in use close when they are returned
	}
}

// dial returns a pooled connection to the node at addr.
func (p *Pool) dial(ctx context.Context, addr string) (redis.Conn, error) {
	np, err := p.nodePool(addr)
	if err != nil {
		return nil, err
	}
	return np.GetContext(ctx)
}

// DialNode opens a new connection to the node at addr, outside its pool
// (for a long-lived subscriber); the caller closes it.
func (p *Pool) DialNode(ctx context.Context, addr string) (redis.Conn, error) {
	np, err := p.nodePool(addr)
	if err != nil {
		return nil, err
	}
	if np.DialContext != nil {
		return np.DialContext(ctx)
	}
	return np.Dial()
}

// addrFor returns the master of slot, reading the map again (in the
// caller's context) when the slot is not covered; -1 means any master.
// While no master serves it (a failover under way: the dead master is
// marked failed and its replica not promoted yet) it waits and reads again,
// with backoff, until the call's deadline (Options.RetryFor without one),
// as for a CLUSTERDOWN reply. *rt paces those waits; it is made on the
// first and shared with the caller's, so that one call's retries, of
// either kind, stop at one deadline.
func (p *Pool) addrFor(ctx context.Context, slot int, rt **retrier) (string, error) {
	for attempt := 0; ; attempt++ {
		p.mu.RLock()
		var addr string
		if slot >= 0 {
			addr = p.slots[slot]
		} else if len(p.masters) > 0 {
			addr = p.masters[rand.IntN(len(p.masters))]
		}
		closed := p.closed
		p.mu.RUnlock()
		switch {
		case closed:
			return "", ErrClosed
		case addr != "":
			return addr, nil
		case attempt > 0:
			if *rt == nil {
				*rt = p.newRetrier(ctx)
			}
			if !(*rt).pause() {
				return "", fmt.Errorf("cluster: no master serves slot %d (CLUSTERDOWN)", slot)
			}
		}
		if err := p.Refresh(ctx); err != nil {
			return "", err
		}
	}
}

// GetContextForTag returns a connection to the master serving the slot of
// hash tag tag. It follows redirections (see Conn).
func (p *Pool) GetContextForTag(ctx context.Context, tag string) (redis.Conn, error) {
	return p.get(ctx, TagSlot(tag))
}

// GetContextForSlot returns a connection to the master serving slot.
func (p *Pool) GetContextForSlot(ctx context.Context, slot int) (redis.Conn, error) {
	return p.get(ctx, slot)
}

// GetContext returns a connection to any master, for calls that touch no
// key (or whose keys the redirections route: a MOVED reply is followed).
func (p *Pool) GetContext(ctx context.Context) (redis.Conn, error) {
	return p.get(ctx, -1)
}

// Get is GetContext without a context.
func (p *Pool) Get() redis.Conn {
	c, err := p.GetContext(context.Background())
	if err != nil {
		return errorConn{err}
	}
	return c
}

// get returns a connection to the master of slot. A node that cannot be
// dialed may be a dead master whose replica is not promoted yet: nothing
// was sent, so it reads the map again and dials again, with backoff, until
// the call's deadline (Options.RetryFor without one), then returns the
// dial error.
func (p *Pool) get(ctx context.Context, slot int) (redis.Conn, error) {
	var rt *retrier // one deadline for every retry of this call
	for {
		addr, err := p.addrFor(ctx, slot, &rt)
		if err != nil {
			return nil, err
		}
		c, err := p.dial(ctx, addr)
		if err == nil {
			return &Conn{p: p, slot: slot, addr: addr, c: c}, nil
		}
		if errors.Is(err, ErrClosed) || ctx.Err() != nil {
			return nil, err
		}
		if rt == nil {
			rt = p.newRetrier(ctx)
		}
		if !rt.pause() {
			p.refreshSoon()
			return nil, err
		}
		p.refreshMu.Lock()
		if time.Since(p.lastRefresh) >= 100*time.Millisecond {
			_ = p.refreshLocked(ctx) // the node may be gone: read the map again
		}
		p.refreshMu.Unlock()
	}
}

type errorConn struct{ err error }

func (e errorConn) Close() error                   { return e.err }
func (e errorConn) Err() error                     { return e.err }
func (e errorConn) Do(string, ...any) (any, error) { return nil, e.err }
func (e errorConn) Send(string, ...any) error      { return e.err }
func (e errorConn) Flush() error                   { return e.err }
func (e errorConn) Receive() (any, error)          { return nil, e.err }

// EachMaster calls f with a connection to each master in turn (for calls
// that concern every key, such as a SCAN), stopping at the first error.
func (p *Pool) EachMaster(ctx context.Context, f func(c redis.Conn) error) error {
	for _, addr := range p.Masters() {
		c, err := p.dial(ctx, addr)
		if err != nil {
			return err
		}
		err = f(c)
		c.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
