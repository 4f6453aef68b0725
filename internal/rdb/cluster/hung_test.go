package cluster

import (
	"context"
	"net"
	"sync"
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
