package redistest

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards TCP connections to a Redis node. Hold stops the bytes in
// both directions without closing anything: they wait in the kernel's
// buffers and in the proxy, new connections are accepted and not dialed
// on, as across a network partition; Release lets everything through
// again, as when the partition heals and TCP delivers what it held.
type Proxy struct {
	ln     net.Listener
	target atomic.Value // string: the node's host:port

	mu     sync.Mutex
	held   bool
	open   chan struct{} // closed while not held
	links  map[net.Conn]net.Conn
	closed bool
	wg     sync.WaitGroup
}

// StartProxy listens on a free loopback port. It forwards to the target
// set with SetTarget (a connection accepted before waits for it).
func StartProxy() (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, open: make(chan struct{}), links: map[net.Conn]net.Conn{}}
	close(p.open)
	p.target.Store("")
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address to dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetTarget sets the node the proxy forwards to.
func (p *Proxy) SetTarget(addr string) { p.target.Store(addr) }

// Hold stops forwarding (see Proxy).
func (p *Proxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.held {
		p.held = true
		p.open = make(chan struct{})
	}
}

// Release forwards again what Hold stopped, and what came meanwhile.
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held {
		p.held = false
		close(p.open)
	}
}

// gate returns a channel closed while the proxy forwards.
func (p *Proxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

// Close stops listening and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	links := p.links
	p.links = map[net.Conn]net.Conn{}
	p.mu.Unlock()
	p.Release()
	_ = p.ln.Close()
	for c, s := range links {
		_ = c.Close()
		if s != nil {
			_ = s.Close()
		}
	}
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		p.links[c] = nil
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(c)
	}
}

func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.links, c)
		p.mu.Unlock()
	}()
	<-p.gate() // no SYN crosses a partition
	target, _ := p.target.Load().(string)
	s, err := net.DialTimeout("tcp", target, 2*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = c.Close()
		_ = s.Close()
		return
	}
	p.links[c] = s
	p.mu.Unlock()
	var done sync.WaitGroup
	done.Add(2)
	go func() { defer done.Done(); p.pipe(s, c) }()
	go func() { defer done.Done(); p.pipe(c, s) }()
	done.Wait()
}

// pipe copies from src to dst while the gate is open; an end closes both.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-p.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			<-p.gate() // nor does a FIN or a reset
			return
		}
	}
}
