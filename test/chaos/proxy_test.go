package chaos_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
)

// proxy is a small toxiproxy-style TCP proxy in front of Redis. Every client
// connection gets its own upstream connection; bytes are copied chunk by
// chunk in both directions, each chunk delayed by the current latency. On
// command it cuts every live connection (with a reset, as a failed network
// would), or refuses new ones (accepting and resetting them at once) for a
// while.
type proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // ends at Close: a link's delays end with it
	cancel context.CancelFunc

	mu     sync.Mutex
	links  map[*link]struct{}
	closed bool

	refusing atomic.Bool
	latMin   atomic.Int64 // ns
	latMax   atomic.Int64 // ns
	dropPPM  atomic.Int64 // chance per million that a request's reply is dropped
	dropped  atomic.Int64 // replies dropped

	accepted atomic.Int64
	refused  atomic.Int64
	cut      atomic.Int64 // connections cut by Cut

	wg sync.WaitGroup
}

type link struct {
	client, server net.Conn
	ctx            context.Context // ends when the link is closed
	cancel         context.CancelFunc
	once           sync.Once
	subscriber     atomic.Bool // the client sent SUBSCRIBE: a pub/sub connection
	dropNext       atomic.Bool // drop the server's next chunk and reset the link
}

// close resets both ends: no FIN, the peer sees a reset, as after a network
// failure.
func (l *link) close() {
	l.once.Do(func() {
		l.cancel()
		for _, c := range []net.Conn{l.client, l.server} {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
		}
	})
}

// startProxy listens on a free loopback port and forwards to target.
func startProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &proxy{target: target, ln: ln, ctx: ctx, cancel: cancel, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

// URL is the redis:// URL of the proxy.
func (p *proxy) URL() string { return "redis://" + p.Addr() }

// SetLatency delays every chunk, in each direction, by a uniformly random
// time in [min, max]. Zero turns it off.
func (p *proxy) SetLatency(min, max time.Duration) {
	p.latMin.Store(int64(min))
	p.latMax.Store(int64(max))
}

// DropReplies makes the proxy lose, with probability p per request chunk a
// client sends, the server's reply to it: the request reaches Redis and runs,
// then the connection is reset before the reply gets back, as when a network
// fails at the wrong moment. Zero turns it off.
func (p *proxy) DropReplies(prob float64) { p.dropPPM.Store(int64(prob * 1e6)) }

// Refuse makes the proxy reset every new connection at once (on) or forward
// them again (off).
func (p *proxy) Refuse(on bool) { p.refusing.Store(on) }

// Cut resets every live connection and returns how many it cut.
func (p *proxy) Cut() int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
	p.cut.Add(int64(len(links)))
	return len(links)
}

// CutSubscribers resets only the pub/sub connections (those whose client sent
// SUBSCRIBE) and returns how many it cut.
func (p *proxy) CutSubscribers() int {
	p.mu.Lock()
	var links []*link
	for l := range p.links {
		if l.subscriber.Load() {
			links = append(links, l)
		}
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
	p.cut.Add(int64(len(links)))
	return len(links)
}

// Live returns the number of live connections.
func (p *proxy) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Close stops listening and cuts everything.
func (p *proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || redistest.Pause(p.ctx, 10*time.Millisecond) != nil {
				return
			}
			continue
		}
		if p.refusing.Load() {
			p.refused.Add(1)
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
			continue
		}
		p.accepted.Add(1)
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *proxy) serve(c net.Conn) {
	defer p.wg.Done()
	s, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
		return
	}
	lctx, cancel := context.WithCancel(p.ctx)
	l := &link{client: c, server: s, ctx: lctx, cancel: cancel}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.close()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	var done sync.WaitGroup
	done.Add(2)
	go func() { defer done.Done(); p.pipe(l, s, c, true) }()
	go func() { defer done.Done(); p.pipe(l, c, s, false) }()
	done.Wait()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// pipe copies src to dst chunk by chunk, delaying each chunk, until either
// side fails; then it closes the whole link.
func (p *proxy) pipe(l *link, dst, src net.Conn, fromClient bool) {
	defer l.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if fromClient && !l.subscriber.Load() && bytes.Contains(buf[:n], []byte("SUBSCRIBE")) {
				l.subscriber.Store(true)
			}
			if !fromClient && l.dropNext.Swap(false) {
				p.dropped.Add(1)
				return // the deferred close resets both ends: the reply is gone
			}
			if d := p.delay(); d > 0 && redistest.Pause(l.ctx, d) != nil {
				return // cut while the chunk was delayed: it is gone, as on a failed network
			}
			// Decide before forwarding: once the request is written, its
			// reply may come back before a later decision is seen.
			if fromClient {
				if ppm := p.dropPPM.Load(); ppm > 0 && rand.Int64N(1e6) < ppm {
					l.dropNext.Store(true)
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *proxy) delay() time.Duration {
	lo, hi := p.latMin.Load(), p.latMax.Load()
	if hi <= 0 {
		return 0
	}
	if hi <= lo {
		return time.Duration(lo)
	}
	return time.Duration(lo + rand.Int64N(hi-lo+1))
}

// TestProxy checks the proxy itself: it forwards, delays, cuts and refuses.
func TestProxy(t *testing.T) {
	t.Parallel()
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	p, err := startProxy(echo.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	roundTrip := func(c net.Conn) (time.Duration, error) {
		start := time.Now()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			return 0, err
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil {
			return 0, err
		}
		if string(buf) != "ping" {
			return 0, errors.New("echo returned " + string(buf))
		}
		return time.Since(start), nil
	}

	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(c); err != nil {
		t.Fatalf("forwarding: %v", err)
	}
	p.SetLatency(50*time.Millisecond, 50*time.Millisecond)
	if d, err := roundTrip(c); err != nil || d < 100*time.Millisecond {
		t.Fatalf("latency: round trip %s, %v; want >= 100ms (50ms each way)", d, err)
	}
	p.SetLatency(0, 0)
	if n := p.Cut(); n != 1 {
		t.Fatalf("Cut cut %d connections, want 1", n)
	}
	if _, err := roundTrip(c); err == nil {
		t.Fatal("a cut connection still works")
	}
	c.Close()

	p.DropReplies(1)
	c, err = net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(c); err == nil {
		t.Fatal("a reply the proxy should drop came back")
	}
	c.Close()
	if p.dropped.Load() != 1 {
		t.Fatalf("dropped %d replies, want 1", p.dropped.Load())
	}
	p.DropReplies(0)

	p.Refuse(true)
	c, err = net.Dial("tcp", p.Addr())
	if err == nil {
		_, err = roundTrip(c)
		c.Close()
	}
	if err == nil {
		t.Fatal("a connection made while refusing works")
	}
	p.Refuse(false)
	c, err = net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := roundTrip(c); err != nil {
		t.Fatalf("after refusing ended: %v", err)
	}
}
