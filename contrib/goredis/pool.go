package goredis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	redigo "github.com/gomodule/redigo/redis"
	"github.com/redis/go-redis/v9"

	"github.com/worqr/worqr-go/internal/rdb/cluster"
	"github.com/worqr/worqr-go/worqr"
)

// New returns the worqr pool of client: a *Pool for a *redis.Client (one
// Redis, or a primary that Sentinel names: redis.NewFailoverClient), a
// *Cluster for a *redis.ClusterClient. Give it to worqr.NewClient,
// NewWorker, NewInspector, NewScheduler, registry.New, recovery.New,
// consumer.New or remote.NewServer as a *redis.Pool. worqr never closes
// client.
//
// client must speak RESP2 (Options.Protocol: 2): worqr reads the replies
// redigo reads, and RESP3 replies differ in shape (a map for HGETALL, a
// double for ZSCORE). Other client types (a *redis.Ring, a wrapper) are
// refused.
func New(client redis.UniversalClient) (worqr.ConnGetter, error) {
	switch c := client.(type) {
	case *redis.Client:
		return NewPool(c)
	case *redis.ClusterClient:
		return NewCluster(c)
	case nil:
		return nil, errors.New("goredis: client is nil")
	}
	return nil, fmt.Errorf("goredis: client is a %T: want a *redis.Client (NewClient, NewFailoverClient) or a *redis.ClusterClient", client)
}

func checkProtocol(p int) error {
	if p != 2 {
		return fmt.Errorf("goredis: Options.Protocol is %d (3 is go-redis's default): worqr reads RESP2 replies; set Protocol: 2", p)
	}
	return nil
}

// Pool serves worqr from a *redis.Client: each connection worqr takes is a
// connection of the client's pool (client.Conn), given back when worqr is
// done with it. A subscription (a Worker's wake-ups and cancels) holds a
// connection of its own, as redigo's would.
//
// For a failover client (redis.NewFailoverClient) the pool also tells
// worqr when the primary changed (Switches, Switched): it sees the address
// each new connection reaches. A worker then checks the takings it holds,
// as with redisconn.Sentinel: an end the old primary acknowledged may have
// been lost on the way to the new one.
type Pool struct {
	c            *redis.Client
	ctxDeadlines bool // the client's ContextTimeoutEnabled

	mu       sync.Mutex
	addr     string // the address the last connection reached
	switched chan struct{}
	switches atomic.Uint64
}

// NewPool returns the pool of client. See New.
func NewPool(client *redis.Client) (*Pool, error) {
	if client == nil {
		return nil, errors.New("goredis: client is nil")
	}
	if err := checkProtocol(client.Options().Protocol); err != nil {
		return nil, err
	}
	p := &Pool{c: client, ctxDeadlines: client.Options().ContextTimeoutEnabled, switched: make(chan struct{})}
	if client.Options().Addr == "FailoverClient" {
		client.AddHook(dialWatch{p.dialed})
	}
	return p, nil
}

// GetContext returns a connection of the client's pool; it is taken at the
// first command sent on it. Close gives it back.
func (p *Pool) GetContext(ctx context.Context) (redigo.Conn, error) {
	return &conn{node: p.c, ctxDeadlines: p.ctxDeadlines, subs: p.c, ssubs: p.c}, nil
}

// MaxActive is the client's PoolSize: the most connections it opens.
func (p *Pool) MaxActive() int { return p.c.Options().PoolSize }

// Switches returns how many times a new connection of a failover client
// reached another address than the one before (0 for another client).
func (p *Pool) Switches() uint64 { return p.switches.Load() }

// Switched returns a channel closed at the next switch.
func (p *Pool) Switched() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.switched
}

// dialed records the address a new connection reached.
func (p *Pool) dialed(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.addr != "" && addr != p.addr {
		p.switches.Add(1)
		close(p.switched)
		p.switched = make(chan struct{})
	}
	p.addr = addr
}

// dialWatch is a go-redis hook that reports the remote address of each
// connection dialed.
type dialWatch struct{ dialed func(addr string) }

func (h dialWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err == nil && c.RemoteAddr() != nil {
			h.dialed(c.RemoteAddr().String())
		}
		return c, err
	}
}

func (dialWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (dialWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Cluster serves worqr from a *redis.ClusterClient. Every worqr call
// touches the keys of one hash tag; the connection it takes for that tag is
// one of the pool of the master that serves the tag's slot
// (ClusterClient.MasterForKey). When that node answers a call with MOVED or
// ASK (the slot moved, or is moving), or TRYAGAIN or CLUSTERDOWN, nothing
// ran, and the cluster client sends the call again, where its own slot map
// says (it follows MOVED and ASK and retries the others, up to
// ClusterOptions.MaxRedirects). The wake-up and cancel channels are
// listened to with sharded pub/sub (SSUBSCRIBE) on a connection to each
// master, as with redisconn.Cluster.
//
// A Cluster also reads the slot map itself (CLUSTER SHARDS), for what the
// ClusterClient does not tell: which slots no master serves while one is
// down (MasterOf returns ""), and when a master left the map (Switches,
// Switched), as redisconn.Cluster does. The map is read when the Cluster
// is made, by Refresh, soon after a call met MOVED, ASK, TRYAGAIN,
// CLUSTERDOWN or a broken connection, and when one older than 30 s is
// looked at.
type Cluster struct {
	c            *redis.ClusterClient
	ctxDeadlines bool // the client's ContextTimeoutEnabled
	runner       *clusterRunner
	watch        *slotWatch
}

// NewCluster returns the pool of client. See New. It reads the slot map in
// the background.
func NewCluster(client *redis.ClusterClient) (*Cluster, error) {
	if client == nil {
		return nil, errors.New("goredis: client is nil")
	}
	if err := checkProtocol(client.Options().Protocol); err != nil {
		return nil, err
	}
	p := &Cluster{c: client, ctxDeadlines: client.Options().ContextTimeoutEnabled, watch: newSlotWatch(client)}
	p.runner = &clusterRunner{client, p}
	return p, nil
}

// GetContext returns a connection to a master (for calls that touch no
// key).
func (p *Cluster) GetContext(ctx context.Context) (redigo.Conn, error) {
	return p.GetContextForTag(ctx, "")
}

// GetContextForTag returns a connection to the master that serves hash tag
// tag's slot.
func (p *Cluster) GetContextForTag(ctx context.Context, tag string) (redigo.Conn, error) {
	node, err := p.c.MasterForKey(ctx, "{"+tag+"}")
	if err != nil {
		p.watch.soon()
		return nil, err
	}
	return &conn{node: node, ctxDeadlines: p.ctxDeadlines, cluster: p.runner, subs: p.c, ssubs: node}, nil
}

// MasterOf returns the address of the master that serves hash tag tag's
// slot, as last read: "" while no master serves it (its master is down
// and no replica took over), or before the first read answered.
func (p *Cluster) MasterOf(tag string) string { return p.watch.masterOf(cluster.TagSlot(tag)) }

// Switches returns how many times a master left the slot map (a failover,
// or its last slot moved away). A worker on the pool that sees it change
// puts back the takings it holds and does not run: an end the dead master
// acknowledged may never have reached its replica.
func (p *Cluster) Switches() uint64 {
	p.watch.checkAge(p.watch.m.Load())
	return p.watch.switches.Load()
}

// Switched returns a channel closed at the next switch.
func (p *Cluster) Switched() <-chan struct{} {
	p.watch.mu.Lock()
	defer p.watch.mu.Unlock()
	return p.watch.switched
}

// DialMaster returns a connection to the master at addr (as MasterOf
// returns it) for a sharded subscription.
func (p *Cluster) DialMaster(ctx context.Context, addr string) (redigo.Conn, error) {
	masters, err := p.masters(ctx)
	if err != nil {
		return nil, err
	}
	for _, node := range masters {
		if node.Options().Addr == addr {
			return &conn{node: node, ctxDeadlines: p.ctxDeadlines, subs: node, ssubs: node}, nil
		}
	}
	return nil, fmt.Errorf("goredis: no master at %s in the slot map", addr)
}

// Refresh reads the slot map again, the ClusterClient's and the Cluster's
// own.
func (p *Cluster) Refresh(ctx context.Context) error { return p.watch.refresh(ctx) }

// EachMaster calls f with a connection to each master in turn.
func (p *Cluster) EachMaster(ctx context.Context, f func(c redigo.Conn) error) error {
	masters, err := p.masters(ctx)
	if err != nil {
		return err
	}
	for _, node := range masters {
		c := &conn{node: node, ctxDeadlines: p.ctxDeadlines, subs: node, ssubs: node}
		err := f(c)
		c.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// clusterRunner is the ClusterClient a connection sends a refused call
// again through, and the pool that finds a master's client by address.
type clusterRunner struct {
	*redis.ClusterClient
	p *Cluster
}

// master returns the client of the master at addr, or nil.
func (r *clusterRunner) master(ctx context.Context, addr string) *redis.Client {
	masters, err := r.p.masters(ctx)
	if err != nil {
		return nil
	}
	for _, m := range masters {
		if m.Options().Addr == addr {
			return m
		}
	}
	return nil
}

// masters returns the client of each master.
func (p *Cluster) masters(ctx context.Context) ([]*redis.Client, error) {
	var mu sync.Mutex
	var out []*redis.Client
	err := p.c.ForEachMaster(ctx, func(_ context.Context, node *redis.Client) error {
		mu.Lock()
		out = append(out, node)
		mu.Unlock()
		return nil
	})
	return out, err
}

// MaxActive is the client's PoolSize: the most connections it opens to
// one node.
func (p *Cluster) MaxActive() int { return p.c.Options().PoolSize }
