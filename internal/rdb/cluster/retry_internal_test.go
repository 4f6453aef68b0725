package cluster

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// shardsConn answers CLUSTER SHARDS with the map its function gives.
type shardsConn struct{ reply func() []any }

func (c shardsConn) Close() error { return nil }
func (c shardsConn) Err() error   { return nil }
func (c shardsConn) Do(cmd string, args ...any) (any, error) {
	if cmd == "CLUSTER" && len(args) == 1 && args[0] == "SHARDS" {
		return c.reply(), nil
	}
	return nil, errors.New("shardsConn: only CLUSTER SHARDS")
}
func (c shardsConn) DoContext(_ context.Context, cmd string, args ...any) (any, error) {
	return c.Do(cmd, args...)
}
func (c shardsConn) ReceiveContext(context.Context) (any, error) { return c.Receive() }
func (c shardsConn) Send(string, ...any) error                   { return errors.New("shardsConn: no pipelining") }
func (c shardsConn) Flush() error                                { return nil }
func (c shardsConn) Receive() (any, error)                       { return nil, errors.New("shardsConn: no pipelining") }

// shardOf is one shard of a CLUSTER SHARDS reply: slots first..last served
// by the master at host:port.
func shardOf(first, last int64, host string, port int64) any {
	return []any{"slots", []any{first, last}, "nodes", []any{
		[]any{"id", "n-" + host, "port", port, "ip", host, "endpoint", host, "role", "master", "health", "online"},
	}}
}

// A call without a deadline of its own retries for at most RetryFor in
// all, whatever it waits for: first a slot no master serves (a failover
// under way), then a master that cannot be dialed. Each wait had its own
// RetryFor before, so such a call could hang for twice as long.
func TestOneRetryDeadlinePerCall(t *testing.T) {
	const retryFor = time.Second
	var promoted atomic.Bool
	var start time.Time
	reply := func() []any {
		// The slot gets a master (which cannot be dialed) once most of
		// the call's RetryFor went by: decided by the refresh that asks,
		// not by a timer a loaded machine may run late. Past half of
		// RetryFor, a second wait with a RetryFor of its own would pass
		// the bound checked below.
		if !start.IsZero() && time.Since(start) >= retryFor*6/10 {
			promoted.Store(true)
		}
		if promoted.Load() {
			return []any{shardOf(0, Slots-1, "a", 1)}
		}
		return []any{shardOf(0, 100, "a", 1)} // slot 5000 is served by no one
	}
	p, err := New(context.Background(), Options{
		Seeds: []string{"seed:1"},
		NewPool: func(addr string) *redis.Pool {
			return &redis.Pool{Dial: func() (redis.Conn, error) {
				if addr == "seed:1" {
					return shardsConn{reply: reply}, nil
				}
				return nil, errors.New("connection refused")
			}}
		},
		RefreshInterval: -1,
		RetryFor:        retryFor,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	start = time.Now()
	c, err := p.GetContextForSlot(context.Background(), 5000)
	took := time.Since(start)
	if err == nil {
		c.Close()
		t.Fatal("got a connection to a master that cannot be dialed")
	}
	if !promoted.Load() {
		t.Fatalf("gave up after %v, before the slot had a master: %v", took, err)
	}
	if took > retryFor*3/2 {
		t.Fatalf("the call retried for %v, want at most about RetryFor (%v): each wait had a deadline of its own", took, retryFor)
	}
}
