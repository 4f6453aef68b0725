package redisconn

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/dial"
	"github.com/worqr/worqr-go/internal/rdb/sentinel"
	"github.com/worqr/worqr-go/worqr"
)

// Sentinel is a connection source for a Redis primary managed by Redis
// Sentinel: give it to NewClient, NewWorker, NewInspector, registry.New or
// recovery.New as you would a *redis.Pool. It asks the sentinels for the
// primary (SENTINEL MASTER), checks with ROLE that the node is one (and
// does not go back to a node named at an older configuration epoch while
// the one in use still is), follows +switch-master on one sentinel, asks again every 5 seconds
// and at once when a reply says the node is no longer the primary
// (READONLY), and then sends every new call to the new primary. Workers keep
// running through a failover: calls that fail meanwhile are retried as after
// any connection error. What a failover can lose is what Redis replication
// loses (docs/guide/sentinel.md). Close it when you are done.
type Sentinel struct {
	p         *sentinel.Pool
	maxActive int // Options.MaxActive
}

// NewSentinel finds the primary that the sentinels monitor under master
// and returns its pool. A sentinel is host:port, or a redis:// or rediss://
// URL whose scheme (TLS), user, password and database (/db) apply to the
// primary, as a WORQR_REDIS_URL would (the first URL's); the sentinels are
// dialed with the same TLS and, when set, Options.SentinelUser and
// SentinelPassword. opts are as for NewPool.
func NewSentinel(master string, sentinels []string, opts *Options) (*Sentinel, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if err := checkOptions(&o); err != nil {
		return nil, err
	}
	if strings.TrimSpace(master) == "" {
		return nil, invalidf("master", "is empty (the name the sentinels monitor the primary under)")
	}
	base, addrs, err := parseSeeds(sentinels, true)
	if err != nil {
		return nil, &worqr.InvalidError{Field: "sentinels", Rule: strings.ReplaceAll(err.Error(), "seed", "sentinel")}
	}
	nodes := nodePools{base: base, o: &o}
	if err := nodes.options(addrs[0]).Check(); err != nil {
		return nil, &worqr.InvalidError{Field: "sentinels", Rule: err.Error()}
	}
	// One dialer per sentinel, made on first use: the pool also asks the
	// sentinels that those given name as their peers.
	var spMu sync.Mutex
	sentinelPools := map[string]*redis.Pool{}
	sentinelPool := func(a string) (*redis.Pool, error) {
		spMu.Lock()
		defer spMu.Unlock()
		if sp := sentinelPools[a]; sp != nil {
			return sp, nil
		}
		u := url.URL{Scheme: base.Scheme, Host: a}
		switch {
		case o.SentinelUser != "":
			u.User = url.UserPassword(o.SentinelUser, o.SentinelPassword)
		case o.SentinelPassword != "":
			u.User = url.UserPassword("", o.SentinelPassword)
		}
		sp, err := dial.Pool(dial.Options{URL: u.String(), CAFile: o.CAFile, CertFile: o.CertFile, KeyFile: o.KeyFile,
			MaxIdle: 0, ConnectTimeout: o.ConnectTimeout})
		if err != nil {
			return nil, err
		}
		sentinelPools[a] = sp
		return sp, nil
	}
	for _, a := range addrs {
		if _, err := sentinelPool(a); err != nil {
			return nil, &worqr.InvalidError{Field: "sentinels", Rule: err.Error()}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*nodes.timeout())
	defer cancel()
	p, err := sentinel.New(ctx, sentinel.Options{
		Master:    master,
		Sentinels: addrs,
		NewPool:   nodes.pool,
		DialSentinel: func(ctx context.Context, addr string) (redis.Conn, error) {
			sp, err := sentinelPool(addr)
			if err != nil {
				return nil, err
			}
			return sp.DialContext(ctx) // a connection of its own, not pooled
		},
		Check:  o.SentinelCheck,
		Logger: o.Logger,
		// A ConnectTimeout set for a slow link bounds a sentinel's
		// answer too (a dial, then the question and the ROLE).
		AskTimeout: 2 * o.ConnectTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("worqr: %w", err)
	}
	return &Sentinel{p: p, maxActive: o.MaxActive}, nil
}

// ParseSentinel splits the WORQR_REDIS_SENTINEL form
// "master-name@host:port,host:port" (a sentinel may be a redis:// URL) into
// the master's name and the sentinels.
func ParseSentinel(s string) (master string, sentinels []string, err error) {
	name, list, ok := strings.Cut(s, "@")
	if !ok || strings.TrimSpace(name) == "" || strings.Contains(name, "/") {
		return "", nil, invalidf("sentinel", "%q: want master-name@host:port,host:port", dial.Redact(s))
	}
	for _, part := range strings.Split(list, ",") {
		if part = strings.TrimSpace(part); part != "" {
			sentinels = append(sentinels, part)
		}
	}
	if len(sentinels) == 0 {
		return "", nil, invalidf("sentinel", "%q names no sentinel (want master-name@host:port,host:port)", dial.Redact(s))
	}
	return strings.TrimSpace(name), sentinels, nil
}

// GetContext returns a connection to the current primary.
func (s *Sentinel) GetContext(ctx context.Context) (redis.Conn, error) {
	return s.p.GetContext(ctx)
}

// Primary returns the address of the primary in use.
func (s *Sentinel) Primary() string { return s.p.Primary() }

// Switches returns how many times the pool moved to another primary. A
// worker on the pool watches it: after a switch it puts back any taking it
// holds in Redis but does not run (an end that the old primary acknowledged
// and never passed on to the replica left it there).
func (s *Sentinel) Switches() uint64 { return s.p.Switches() }

// Switched returns a channel closed at the next switch: a worker on the
// pool looks at its takings as soon as a failover is seen.
func (s *Sentinel) Switched() <-chan struct{} { return s.p.Switched() }

// Close stops following the sentinels and closes the connections.
func (s *Sentinel) Close() error { return s.p.Close() }

// MaxActive is Options.MaxActive: the most connections the pool opens to
// one server (0: no cap).
func (s *Sentinel) MaxActive() int { return s.maxActive }
