package cluster

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// blackHole accepts connections and never answers (a frozen redis-server,
// SIGSTOPped, or a host whose packets are dropped: the kernel still
// completes the handshake, or the connection is made before the freeze);
// it returns its address.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// A master that hangs (frozen, or cut off by a partition that drops its
// packets) does not keep the pool from reading the slot map from the
// others: each node asked has its share of the read's time.
//
// It failed: the masters are asked in a random order, and the read gave
// the first one asked the whole of its time, then stopped (ctx expired):
// every time the hung master came first (one read in three here) the map
// was not read at all, and a refresh in the background (5 s) held the
// pool's refresh lock for its whole time, so that a failover of that
// master was seen seconds late.
func TestRefreshPastAHungMaster(t *testing.T) {
	c := needCluster(t)
	hung := c.Nodes[1].Addr
	hole := blackHole(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := New(ctx, Options{Seeds: c.Addrs()[:1], RefreshInterval: -1,
		NewPool: func(addr string) *redis.Pool {
			if addr == hung {
				return nodePool(hole)
			}
			return nodePool(addr)
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if got := len(p.Masters()); got != 3 {
		t.Fatalf("%d masters, want 3", got)
	}
	failed := 0
	for i := 0; i < 20; i++ {
		rctx, rcancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
		err := p.Refresh(rctx)
		rcancel()
		if err != nil {
			failed++
			t.Logf("read %d: %v", i, err)
		}
	}
	if failed > 0 {
		t.Fatalf("%d of 20 reads of the slot map failed while one master of 3 hung", failed)
	}
}

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
