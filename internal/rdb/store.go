// Package rdb is worqr's one owner of the Redis protocol: it alone sends
// Redis commands, builds key names and knows the fields of a task hash. Every
// call chooses its connection from the hash tag of the keys it touches
// (Router), so a single pool, a Sentinel-discovered primary or a Redis
// Cluster slot map plug in behind the same choice without touching callers.
// It is internal: the public API lives in packages worqr, registry,
// heartbeat and recovery.
package rdb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

// ConnGetter is satisfied by *redis.Pool. worqr never closes it.
type ConnGetter interface {
	GetContext(ctx context.Context) (redis.Conn, error)
}

// TagConnGetter is a ConnGetter that knows where each hash tag lives (a
// Redis Cluster client, for instance). When the pool given to worqr
// implements it, every call asks it for the connection of the call's tag.
type TagConnGetter interface {
	ConnGetter
	GetContextForTag(ctx context.Context, tag string) (redis.Conn, error)
}

// ShardedPubSub is a TagConnGetter for a Redis Cluster whose wake-ups and
// cancels go through sharded pub/sub: the scripts publish with SPUBLISH (to
// the shard of the channel's slot only, not to every node) and Listen
// subscribes with SSUBSCRIBE on a connection to each master that serves a
// listened channel's slot. redisconn.Cluster implements it.
type ShardedPubSub interface {
	TagConnGetter
	// MasterOf returns the address of the master that serves tag's slot,
	// as last read ("" when unknown).
	MasterOf(tag string) string
	// DialMaster opens a new connection to the master at addr, outside
	// any pool; the caller closes it.
	DialMaster(ctx context.Context, addr string) (redis.Conn, error)
	// Refresh reads the slot map again.
	Refresh(ctx context.Context) error
}

// Router chooses the connection a call runs on from the hash tag that all
// of the call's keys share.
type Router interface {
	Conn(ctx context.Context, tag string) (redis.Conn, error)
}

type poolRouter struct{ pool ConnGetter }

func (r poolRouter) Conn(ctx context.Context, _ string) (redis.Conn, error) {
	return r.pool.GetContext(ctx)
}

type tagRouter struct{ pool TagConnGetter }

func (r tagRouter) Conn(ctx context.Context, tag string) (redis.Conn, error) {
	return r.pool.GetContextForTag(ctx, tag)
}

// RouterFor returns the router of pool: by tag when it is a TagConnGetter,
// else one pool for every tag.
func RouterFor(pool ConnGetter) Router {
	if t, ok := pool.(TagConnGetter); ok {
		return tagRouter{t}
	}
	return poolRouter{pool}
}

// RegistryTag is the hash tag of the registry keys.
const RegistryTag = "reg"

// Store runs worqr's protocol in one namespace. It is safe for concurrent use
// and holds no connection between calls.
type Store struct {
	keys   Keys
	pool   ConnGetter
	router Router
	tagged bool          // the pool routes by tag (a Redis Cluster, maybe)
	shard  ShardedPubSub // the pool, when it is one (a Redis Cluster)
	mode   atomic.Int32  // modeFunctions until the server or user says no; | modeSharded

	// replicas, when > 0, is how many replicas an enqueue or an end waits
	// for before it is acknowledged, for at most replicaTimeout (see
	// SetReplicas).
	replicas       int
	replicaTimeout time.Duration
}

// NewStore returns the store of namespace ns on pool. When pool is a
// ShardedPubSub, the store's scripts publish with SPUBLISH and Listen uses
// sharded subscriptions.
func NewStore(pool ConnGetter, ns string) *Store {
	_, tagged := pool.(TagConnGetter)
	s := &Store{keys: NewKeys(ns), pool: pool, router: RouterFor(pool), tagged: tagged}
	if sp, ok := pool.(ShardedPubSub); ok {
		s.shard = sp
		s.mode.Store(modeSharded)
	}
	return s
}

// Queue returns the keys of queue q.
func (s *Store) Queue(q QueueRef) QueueKeys { return s.keys.Queue(q) }

// Switcher is a pool whose server can change under it (a primary that
// Sentinel replaced): Switches counts the changes so far.
type Switcher interface {
	Switches() uint64
}

// Switches returns how many times the pool's server changed (0 for a pool
// that is not a Switcher). Writes acknowledged by the old server may have
// been lost on the way to the new one (replication is asynchronous), so a
// worker that sees it move checks what it holds (Release).
func (s *Store) Switches() uint64 {
	if sw, ok := s.pool.(Switcher); ok {
		return sw.Switches()
	}
	return 0
}

// SwitchNotifier is a Switcher that says when its server changes: the
// channel Switched returns is closed at the next change.
type SwitchNotifier interface {
	Switcher
	Switched() <-chan struct{}
}

// Switched returns a channel closed at the pool's next change of server,
// or nil (never ready) when the pool does not say (not a SwitchNotifier).
func (s *Store) Switched() <-chan struct{} {
	if sw, ok := s.pool.(SwitchNotifier); ok {
		return sw.Switched()
	}
	return nil
}

// conn returns a connection for a call on the keys of tag.
func (s *Store) conn(ctx context.Context, tag string) (redis.Conn, error) {
	return s.router.Conn(ctx, tag)
}

// withConn runs f on a connection for tag and closes it.
func (s *Store) withConn(ctx context.Context, tag string, f func(c redis.Conn) error) error {
	c, err := s.conn(ctx, tag)
	if err != nil {
		return err
	}
	defer c.Close()
	return f(c)
}

// cmd sends one command on the keys of tag.
func (s *Store) cmd(ctx context.Context, tag, name string, args ...any) (any, error) {
	c, err := s.conn(ctx, tag)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return do(ctx, c, name, args...)
}

// pipeline sends cmds on one connection for tag in one round trip and
// returns their replies in order. A reply that is a Redis error is returned
// as such in its slot; a connection error fails the whole call.
func (s *Store) pipeline(ctx context.Context, tag string, cmds []command) ([]any, error) {
	if len(cmds) == 0 {
		return nil, nil
	}
	c, err := s.conn(ctx, tag)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return pipelineOn(ctx, c, cmds)
}

// pipelineOn is pipeline on connection c.
func pipelineOn(ctx context.Context, c redis.Conn, cmds []command) ([]any, error) {
	if pc, ok := c.(Pipeliner); ok {
		names := make([]string, len(cmds))
		args := make([][]any, len(cmds))
		for i, cm := range cmds {
			names[i], args[i] = cm.name, cm.args
		}
		return pc.Pipeline(ctx, names, args)
	}
	for _, cm := range cmds {
		if err := c.Send(cm.name, cm.args...); err != nil {
			return nil, err
		}
	}
	if err := c.Flush(); err != nil {
		return nil, err
	}
	out := make([]any, len(cmds))
	for i := range cmds {
		r, err := redis.ReceiveContext(c, ctx)
		var re redis.Error
		if err != nil && !errors.As(err, &re) {
			return nil, err
		}
		if err != nil {
			r = re
		}
		out[i] = r
	}
	return out, nil
}

// multi runs cmds on c in one MULTI/EXEC transaction (the keys of one
// tag), sent as one pipeline: on a cluster the connection sends the whole
// transaction again, ASKING first, if the slot moved. An error reply of one
// of the commands is returned.
func multi(ctx context.Context, c redis.Conn, cmds ...command) error {
	all := make([]command, 0, len(cmds)+2)
	all = append(all, cmdOf("MULTI"))
	all = append(all, cmds...)
	all = append(all, cmdOf("EXEC"))
	rs, err := pipelineOn(ctx, c, all)
	if err != nil {
		return err
	}
	if len(rs) != len(all) {
		return fmt.Errorf("rdb: transaction: %d replies for %d commands", len(rs), len(all))
	}
	exec, err := redis.Values(rs[len(rs)-1], nil)
	if err != nil {
		return fmt.Errorf("rdb: transaction: %w", err)
	}
	for _, r := range exec {
		if e, ok := r.(redis.Error); ok {
			return e
		}
	}
	return nil
}

// perTag calls f once per hash tag of qs with the indexes of its queues, in
// the order tags first appear.
func (s *Store) perTag(qs []QueueKeys, f func(tag string, idx []int) error) error {
	var tags []string
	by := map[string][]int{}
	for i, q := range qs {
		if _, ok := by[q.Ref.Tag]; !ok {
			tags = append(tags, q.Ref.Tag)
		}
		by[q.Ref.Tag] = append(by[q.Ref.Tag], i)
	}
	for _, t := range tags {
		if err := f(t, by[t]); err != nil {
			return err
		}
	}
	return nil
}

// Pipeliner is a connection that runs a pipeline itself: a Redis Cluster
// connection sends the whole pipeline again to the right node when the node
// it reached refused every command with a redirection (nothing ran). It
// returns the replies in order, a Redis error reply in its slot.
type Pipeliner interface {
	Pipeline(ctx context.Context, names []string, args [][]any) ([]any, error)
}

type command struct {
	name string
	args []any
}

func cmdOf(name string, args ...any) command { return command{name: name, args: args} }

// IsReplyError reports whether err is an error reply of Redis (the command
// reached Redis and was refused) rather than a connection error, after which
// the command may or may not have run.
func IsReplyError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// TestOnBorrow is a redis.Pool TestOnBorrowContext: a connection idle for a
// minute or more is pinged before it is handed out. The PING is bounded by
// the caller's context (and by IdlePingTimeout): behind a partition that
// drops packets its reply never comes, and a call without a bound would
// wait as long as TCP keeps the connection (minutes), a beat included:
// the keepalive's TTL check would never run while the reaper requeues
// the worker's takings to other workers.
func TestOnBorrow(ctx context.Context, c redis.Conn, idle time.Time) error {
	if time.Since(idle) < time.Minute {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, IdlePingTimeout)
	defer cancel()
	_, err := redis.DoContext(c, ctx, "PING")
	return err
}

// IdlePingTimeout bounds TestOnBorrow's PING when the caller's context
// allows longer.
const IdlePingTimeout = 5 * time.Second

// Ping checks that the server of tag answers.
func (s *Store) Ping(ctx context.Context, tag string) error {
	_, err := s.cmd(ctx, tag, "PING")
	return err
}

// ClusterMode reports whether the server pool reaches runs in cluster
// mode (INFO cluster), on a connection of its own: asked before a Store
// is made, to choose between a plain pool and a cluster client.
func ClusterMode(ctx context.Context, pool ConnGetter) (bool, error) {
	c, err := pool.GetContext(ctx)
	if err != nil {
		return false, err
	}
	defer c.Close()
	info, err := redis.String(redis.DoContext(c, ctx, "INFO", "cluster"))
	if err != nil {
		return false, err
	}
	return strings.Contains(info, "cluster_enabled:1"), nil
}

// eval runs script sc on a connection for tag.
func (s *Store) eval(ctx context.Context, tag string, sc *script, keysAndArgs ...any) (any, error) {
	c, err := s.conn(ctx, tag)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return s.run(ctx, c, sc, keysAndArgs...)
}
