package redisconn

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/dial"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/worqr"
)

// Options say how NewPool reaches Redis. The zero value is right for
// most uses.
type Options struct {
	// CAFile is a PEM file of CAs to verify the server with (rediss://);
	// empty means the system's.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, for a
	// server that requires client authentication.
	CertFile, KeyFile string
	// MaxIdle is how many idle connections the pool keeps. Set it to at
	// least the sum of your workers' concurrency plus your concurrent
	// enqueuers: a pool that keeps too few dials a new TCP connection for
	// most calls. Default 64.
	MaxIdle int
	// MaxActive caps the open connections. Default 0: no cap.
	MaxActive int
	// ConnectTimeout bounds a dial. Default 5s. Set, it also bounds (twice
	// over) each sentinel's answer to a Sentinel (default 1s).
	ConnectTimeout time.Duration

	// SentinelUser and SentinelPassword authenticate to the sentinels of a
	// NewSentinel (the primary's own come from its URL).
	SentinelUser, SentinelPassword string
	// SentinelCheck is how often a Sentinel asks the sentinels for the
	// primary even without news. Default 5s.
	SentinelCheck time.Duration
	// Logger gets a Sentinel's switches of primary and its failures to
	// reach the sentinels. Default: none.
	Logger *slog.Logger
}

// checkPoolOptions fills in the defaults and checks the rest.
func checkOptions(o *Options) error {
	switch {
	case o.MaxIdle == 0:
		o.MaxIdle = 64
	case o.MaxIdle < 0:
		return invalidf("Options.MaxIdle", "(%d) must not be negative", o.MaxIdle)
	}
	if o.MaxActive < 0 {
		return invalidf("Options.MaxActive", "(%d) must not be negative", o.MaxActive)
	}
	if o.ConnectTimeout < 0 {
		return invalidf("Options.ConnectTimeout", "(%s) must not be negative", o.ConnectTimeout)
	}
	if o.SentinelCheck < 0 {
		return invalidf("Options.SentinelCheck", "(%s) must not be negative", o.SentinelCheck)
	}
	return nil
}

// NewPool returns a redigo pool for url: redis://[user:password@]host:port/db
// (Redis 6 ACL users included) or rediss:// for TLS. Errors never show the
// password. worqr never closes the pool: close it when you are done.
func NewPool(url string, opts *Options) (*redis.Pool, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if err := checkOptions(&o); err != nil {
		return nil, err
	}
	p, err := dial.Pool(dial.Options{URL: url, CAFile: o.CAFile, CertFile: o.CertFile, KeyFile: o.KeyFile,
		MaxIdle: o.MaxIdle, MaxActive: o.MaxActive, ConnectTimeout: o.ConnectTimeout})
	if err != nil {
		return nil, &worqr.InvalidError{Field: "url", Rule: err.Error()}
	}
	return p, nil
}

// invalidf is a *worqr.InvalidError: field breaks the rule.
func invalidf(field, format string, args ...any) error {
	return &worqr.InvalidError{Field: field, Rule: fmt.Sprintf(format, args...)}
}

// ClusterMode reports whether the server pool reaches runs in cluster
// mode: a plain pool (NewPool) on one node of a Redis Cluster reaches only
// that node's slots (the others answer MOVED), where a Cluster follows
// the whole cluster. One INFO call.
func ClusterMode(ctx context.Context, pool worqr.ConnGetter) (bool, error) {
	on, err := rdb.ClusterMode(ctx, pool)
	if err != nil {
		return false, fmt.Errorf("redisconn: cluster mode: %w", err)
	}
	return on, nil
}
