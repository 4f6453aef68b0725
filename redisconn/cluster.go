package redisconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/dial"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/rdb/cluster"
	"github.com/worqr/worqr-go/worqr"
)

// Cluster is a connection source for Redis Cluster (Redis 7 or later):
// give it to NewClient, NewWorker, NewInspector, registry.New or
// recovery.New as you would a *redis.Pool. Every worqr call touches the
// keys of one hash tag (a stand-alone queue's name, a flow's name, or
// "reg" for the registry), so each call goes to the master that serves that
// tag's slot. It keeps one redigo pool per master, reads the slot map with
// CLUSTER SHARDS from the seeds, reads it again on a MOVED reply and every
// 30 seconds, answers ASK with ASKING on the node named, and retries
// TRYAGAIN and CLUSTERDOWN with backoff within the call's deadline. See
// docs/guide/cluster.md. Close it when you are done.
type Cluster struct {
	p         *cluster.Pool
	maxActive int // Options.MaxActive (per node)
}

// NewCluster reads the topology of the cluster from the first seed that
// answers and returns its pool. A seed is host:port, or a redis:// or
// rediss:// URL (redis://[user:password@]host:port): the scheme (TLS) and
// the user and password of the first URL seed apply to every node, and
// opts (TLS files, MaxIdle and MaxActive per node, ConnectTimeout) as for
// NewPool. A cluster has one database: a URL naming another is refused.
// The nodes are reached at the addresses the cluster announces (CLUSTER
// SHARDS endpoint, or ip; tls-port with TLS).
func NewCluster(seeds []string, opts *Options) (*Cluster, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if err := checkOptions(&o); err != nil {
		return nil, err
	}
	base, addrs, err := parseSeeds(seeds, false)
	if err != nil {
		return nil, &worqr.InvalidError{Field: "seeds", Rule: err.Error()}
	}
	nodes := nodePools{base: base, o: &o}
	if err := nodes.options(addrs[0]).Check(); err != nil {
		return nil, &worqr.InvalidError{Field: "seeds", Rule: err.Error()}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*nodes.timeout())
	defer cancel()
	p, err := cluster.New(ctx, cluster.Options{
		Seeds:   addrs,
		TLS:     base.Scheme == "rediss",
		NewPool: nodes.pool,
	})
	if err != nil {
		return nil, err
	}
	return &Cluster{p: p, maxActive: o.MaxActive}, nil
}

// nodePools makes the pools of the nodes of a cluster or of the primaries a
// sentinel names: base with the node's address, and o's TLS and sizes.
type nodePools struct {
	base *url.URL
	o    *Options
}

func (n nodePools) options(addr string) dial.Options {
	u := *n.base
	u.Host = addr
	return dial.Options{URL: u.String(), CAFile: n.o.CAFile, CertFile: n.o.CertFile, KeyFile: n.o.KeyFile,
		MaxIdle: n.o.MaxIdle, MaxActive: n.o.MaxActive, ConnectTimeout: n.o.ConnectTimeout}
}

// pool returns the pool of the node at addr (options were checked first).
func (n nodePools) pool(addr string) *redis.Pool {
	np, err := dial.Pool(n.options(addr))
	if err != nil { // checked by the constructor: cannot happen
		return &redis.Pool{Dial: func() (redis.Conn, error) { return nil, err }}
	}
	return np
}

// timeout is the dial timeout (default 5 s).
func (n nodePools) timeout() time.Duration {
	if n.o.ConnectTimeout == 0 {
		return 5 * time.Second
	}
	return n.o.ConnectTimeout
}

// parseSeeds returns the URL every node is dialed with (its host left to
// fill in) and the seeds' host:port addresses. Only withDB allows a
// database other than 0 (a cluster has one).
func parseSeeds(seeds []string, withDB bool) (*url.URL, []string, error) {
	var base *url.URL
	var addrs []string
	for _, s := range seeds {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !strings.Contains(s, "://") {
			if _, _, err := net.SplitHostPort(s); err != nil {
				return nil, nil, fmt.Errorf("seed %q: want host:port or a redis:// URL", s)
			}
			addrs = append(addrs, s)
			continue
		}
		u, err := url.Parse(s)
		if err != nil {
			return nil, nil, fmt.Errorf("seed %s does not parse", dial.Redact(s))
		}
		if u.Scheme != "redis" && u.Scheme != "rediss" {
			return nil, nil, fmt.Errorf("seed %s: scheme must be redis or rediss", dial.Redact(s))
		}
		if db := strings.Trim(u.Path, "/"); db != "" && db != "0" && !withDB {
			return nil, nil, fmt.Errorf("seed %s: a cluster has only database 0", dial.Redact(s))
		}
		if u.Port() == "" {
			u.Host = net.JoinHostPort(u.Hostname(), "6379")
		}
		if base == nil {
			base = &url.URL{Scheme: u.Scheme, User: u.User, Path: u.Path}
		}
		addrs = append(addrs, u.Host)
	}
	if len(addrs) == 0 {
		return nil, nil, errors.New("no seed address (host:port)")
	}
	if base == nil {
		base = &url.URL{Scheme: "redis"}
	}
	return base, addrs, nil
}

// GetContext returns a connection to any master (for calls that touch no
// key; a MOVED reply is followed).
func (c *Cluster) GetContext(ctx context.Context) (redis.Conn, error) {
	return c.p.GetContext(ctx)
}

// GetContextForTag returns a connection to the master that serves hash tag
// tag's slot; it follows MOVED and ASK replies.
func (c *Cluster) GetContextForTag(ctx context.Context, tag string) (redis.Conn, error) {
	return c.p.GetContextForTag(ctx, tag)
}

// EachMaster calls f with a connection to each master in turn (used for
// calls that concern every key of a namespace, such as
// Inspector.DeleteNamespace).
func (c *Cluster) EachMaster(ctx context.Context, f func(conn redis.Conn) error) error {
	return c.p.EachMaster(ctx, f)
}

// MasterOf returns the address of the master that serves hash tag tag's
// slot, as last read ("" when unknown). With DialMaster and Refresh it is
// how worqr's workers listen to sharded pub/sub (see docs/guide/cluster.md).
func (c *Cluster) MasterOf(tag string) string { return c.p.Addr(cluster.TagSlot(tag)) }

// DialMaster opens a new connection to the node at addr (host:port, as
// MasterOf or Masters return it), outside the pool, with the pool's
// options (TLS, user, password); the caller closes it.
func (c *Cluster) DialMaster(ctx context.Context, addr string) (redis.Conn, error) {
	return c.p.DialNode(ctx, addr)
}

// Refresh reads the slot map again (CLUSTER SHARDS of a known master or a
// seed). The pool does so on its own on a MOVED reply and every 30 s.
func (c *Cluster) Refresh(ctx context.Context) error { return c.p.Refresh(ctx) }

// Masters returns the addresses of the masters that serve slots, as last
// read.
func (c *Cluster) Masters() []string { return c.p.Masters() }

// Switches returns how many times a master left the cluster's slot map (a
// failover, or its last slot moved away). A worker on the pool that sees
// it change puts back the takings it holds and does not run: an end the
// dead master acknowledged may never have reached its replica.
func (c *Cluster) Switches() uint64 { return c.p.Switches() }

// Switched returns a channel closed at the next switch: a worker on the
// pool looks at its takings as soon as a failover is seen.
func (c *Cluster) Switched() <-chan struct{} { return c.p.Switched() }

// Close closes the connections to every node.
func (c *Cluster) Close() error { return c.p.Close() }

// A Cluster makes a Store publish and listen with sharded pub/sub.
var _ rdb.ShardedPubSub = (*Cluster)(nil)

// MaxActive is Options.MaxActive: the most connections the pool opens to
// one server (0: no cap).
func (c *Cluster) MaxActive() int { return c.maxActive }
