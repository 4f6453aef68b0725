package heartbeat_test

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/heartbeat"
	"github.com/worqr/worqr-go/internal/dial"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/registry"
)

// blackhole forwards TCP to target until cut, then swallows every byte in
// both directions, on the connections it has and on new ones: a network
// partition that drops packets (no reset), as the client sees it. Its
// writes succeed, and no reply ever comes.
type blackhole struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
}

func newBlackhole(t *testing.T, target string) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &blackhole{ln: ln, target: target}
	go h.accept()
	t.Cleanup(h.close)
	return h
}

func (h *blackhole) addr() string { return h.ln.Addr().String() }

func (h *blackhole) isCut() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cut
}

func (h *blackhole) setCut() {
	h.mu.Lock()
	h.cut = true
	h.mu.Unlock()
}

func (h *blackhole) track(c net.Conn) {
	h.mu.Lock()
	h.conns = append(h.conns, c)
	h.mu.Unlock()
}

func (h *blackhole) close() {
	h.ln.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		c.Close()
	}
}

func (h *blackhole) accept() {
	for {
		c, err := h.ln.Accept()
		if err != nil {
			return
		}
		h.track(c)
		if h.isCut() {
			go io.Copy(io.Discard, c)
			continue
		}
		up, err := net.Dial("tcp", h.target)
		if err != nil {
			c.Close()
			continue
		}
		h.track(up)
		go h.pipe(up, c)
		go h.pipe(c, up)
	}
}

// pipe copies src to dst until the hole is cut, then reads and drops.
func (h *blackhole) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		if h.isCut() {
			continue
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

// A worker cut off from Redis by a partition that drops packets must still
// find, a TTL after its last good beat, that its keepalive is lost, and
// cancel its handlers: by then the key has expired and a reaper on the
// other side requeues what it holds. The production pool (dial.Pool, as
// NewPool builds it) pings a connection idle for a minute or more before
// handing it out; that PING carried no deadline, so the beat that drew such
// a connection waited for its reply as long as TCP kept the connection
// (about 15 minutes of retransmissions on Linux; here, for ever), no later
// beat ran, the TTL check never came, and the handlers ran on beside the
// tasks' second owners.
func TestKeeperLostBehindABlackholeWithIdleConnections(t *testing.T) {
	t.Parallel()
	hole := newBlackhole(t, srv.Addr)
	pool, err := dial.Pool(dial.Options{URL: "redis://" + hole.addr(), MaxIdle: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// Every idle connection counts as idle for an hour: the state of a
	// pool after a burst of work, a minute later (the one thing the test
	// does not wait for in wall time).
	if f := pool.TestOnBorrow; f != nil {
		pool.TestOnBorrow = func(c redis.Conn, idle time.Time) error { return f(c, idle.Add(-time.Hour)) }
	}
	if f := pool.TestOnBorrowContext; f != nil {
		pool.TestOnBorrowContext = func(ctx context.Context, c redis.Conn, idle time.Time) error {
			return f(ctx, c, idle.Add(-time.Hour))
		}
	}
	reg, err := registry.New(pool, redistest.Namespace())
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, func(k *heartbeat.Keeper) { k.TTL = 5 * interval })
	b.keeper.Registry = reg
	s1 := b.start(t)
	// A burst of work leaves idle connections in the pool.
	var cs []redis.Conn
	for range 4 {
		c := pool.Get()
		if _, err := c.Do("PING"); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	for _, c := range cs {
		c.Close()
	}
	b.run(t, b.ctx)
	b.waitTicker(t)

	hole.setCut()
	lost := make(chan struct{})
	go func() {
		defer close(lost)
		for e := range b.events {
			if e.Kind == heartbeat.Lost && e.ID == s1.ID() {
				return
			}
		}
	}()
	// The keeper's clock moves a TTL on, one interval at a time, while
	// each beat has its interval of wall time to fail in.
	deadline := time.After(patience)
	for advanced := time.Duration(0); ; {
		select {
		case <-lost:
			checkRetired(t, s1, heartbeat.ErrLost)
			return
		case <-deadline:
			t.Fatalf("no Lost event %v after the partition (keeper clock moved %v, TTL %v): a beat hangs on an idle connection's check",
				patience, advanced, b.keeper.TTL)
		case <-time.After(2 * interval):
			if advanced < 2*b.keeper.TTL {
				b.clock.Advance(interval)
				advanced += interval
			}
		}
	}
}
