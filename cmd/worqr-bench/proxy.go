package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// proxyMode is the hidden first argument that makes the binary the delay
// proxy of -rtt: it listens on a free loopback port, prints "listening
// <addr>" and forwards every connection to -target, each chunk of bytes in
// each direction delayed by -delay, until stdin closes or SIGTERM. A line
// "delay <duration>" on stdin changes the delay; it answers "ok".
//
// It runs as a process of its own so that its CPU is counted in neither
// system's client CPU (the worqr side runs in the bench process, the asynq
// side in another).
const proxyMode = "delay-proxy"

// delayProxy forwards TCP connections to target. Each direction of each
// connection has a queue of (deadline, bytes): a reader goroutine stamps
// every chunk it reads with now+delay and queues it at once, a writer drains
// the queue in order, waiting for each chunk's deadline. So a pipelined burst
// arrives delay later as a burst, order is kept, and throughput is not bound
// by the delay (a reader never waits for a writer unless the queue is full).
type delayProxy struct {
	target string
	delay  atomic.Int64 // ns, each direction
	ln     net.Listener

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// chunk is bytes read from one side and due at the other at deadline.
type chunk struct {
	deadline time.Time
	data     []byte
}

// queueLen bounds the chunks in flight per direction: at 64 KiB reads, more
// than any bench workload keeps in flight over one connection.
const queueLen = 4096

func runProxy(args []string) int {
	fs := flag.NewFlagSet(proxyMode, flag.ContinueOnError)
	target := fs.String("target", "", "host:port to forward to")
	delay := fs.Duration("delay", 0, "delay of every chunk, each direction")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", proxyMode, err)
		return 1
	}
	p := &delayProxy{target: *target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.delay.Store(int64(*delay))
	go func() {
		defer stop()
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "delay "); ok {
				if d, err := time.ParseDuration(v); err == nil && d >= 0 {
					p.delay.Store(int64(d))
				}
				fmt.Println("ok")
			}
		}
	}()
	fmt.Printf("listening %s\n", ln.Addr())
	go p.accept()
	<-ctx.Done()
	p.close()
	return 0
}

func (p *delayProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *delayProxy) track(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
}

func (p *delayProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

func (p *delayProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *delayProxy) serve(c net.Conn) {
	defer p.wg.Done()
	s, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	p.track(c, s)
	defer p.untrack(c, s)
	var done sync.WaitGroup
	done.Add(2)
	go func() { defer done.Done(); p.pipe(s, c) }()
	go func() { defer done.Done(); p.pipe(c, s) }()
	done.Wait()
}

// pipe copies src to dst, each chunk delayed, until either side fails; then
// it closes both (the other direction's pipe ends too).
func (p *delayProxy) pipe(dst, src net.Conn) {
	q := make(chan chunk, queueLen)
	go func() {
		defer close(q)
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{deadline: time.Now().Add(time.Duration(p.delay.Load())), data: append([]byte(nil), buf[:n]...)}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		sleepUntil(c.deadline)
		if _, err := dst.Write(c.data); err != nil {
			break
		}
	}
	_ = src.Close()
	_ = dst.Close()
	for range q { // let the reader see its closed connection and exit
	}
}

// sleepUntil blocks until t, or a little later. A sub-millisecond
// time.Sleep is not precise enough: a Go process with nothing else to do
// waits in epoll with a millisecond timeout, so 300 µs becomes about 1 ms.
// nanosleep(2) holds this goroutine's thread instead (the runtime hands its P
// to another thread if it needs one) and returns within the kernel's timer
// slack and wake-up latency (on a VM, often over 100 µs); calibrate makes
// up for that lateness.
func sleepUntil(t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil) // EINTR: wake early, once
}

// proxyProc is the delay proxy process.
type proxyProc struct {
	url   string // redis:// URL of the proxy
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
	delay time.Duration // each direction, as last set
}

// startProxy starts this binary in proxy mode in front of the Redis at
// redisURL, each direction delayed by delay.
func startProxy(redisURL string, delay time.Duration) (*proxyProc, error) {
	u, err := url.Parse(redisURL)
	if err != nil {
		return nil, fmt.Errorf("-rtt: parse %q: %w", redisURL, err)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, proxyMode, "-target", u.Host, "-delay", delay.String())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe() // the proxy exits when this closes
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proxyProc{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout), delay: delay}
	if !p.out.Scan() {
		p.stop()
		return nil, errors.New("the delay proxy exited before it listened")
	}
	addr, ok := strings.CutPrefix(p.out.Text(), "listening ")
	if !ok {
		p.stop()
		return nil, fmt.Errorf("the delay proxy said %q", p.out.Text())
	}
	u.Host = addr
	p.url = u.String()
	return p, nil
}

// setDelay changes the delay of each direction and waits until the proxy
// applies it.
func (p *proxyProc) setDelay(d time.Duration) error {
	if _, err := fmt.Fprintf(p.stdin, "delay %s\n", d); err != nil {
		return err
	}
	if !p.out.Scan() || p.out.Text() != "ok" {
		return fmt.Errorf("the delay proxy did not take the new delay (%q)", p.out.Text())
	}
	p.delay = d
	return nil
}

func (p *proxyProc) stop() {
	p.stdin.Close()
	_ = p.cmd.Wait()
}

// calibrate sets the proxy's delay so that the median PING through it is rtt
// more than the median PING straight to Redis: the proxy's own hops (two more
// wake-ups per direction) and nanosleep's lateness come off the delay.
// nanosleep's lateness is not linear in the time asked for (on a VM, every
// short request takes about as long), so it bisects on [0, rtt/2] rather than
// subtracting what it measured. It returns the medians measured at the delay
// it settled on.
func (p *proxyProc) calibrate(ctx context.Context, directURL string, rtt time.Duration) (direct, via time.Duration, err error) {
	type point struct{ delay, direct, via time.Duration }
	var best point
	bestErr := time.Duration(math.MaxInt64)
	lo, hi := time.Duration(0), rtt/2
	for i := 0; i < 7; i++ {
		mid := (lo + hi) / 2
		if i == 0 {
			mid = hi
		}
		if err := p.setDelay(mid); err != nil {
			return 0, 0, err
		}
		d, err := pingRTT(ctx, directURL, 300)
		if err != nil {
			return 0, 0, err
		}
		v, err := pingRTT(ctx, p.url, 300)
		if err != nil {
			return 0, 0, err
		}
		excess := v - d - rtt
		if excess.Abs() < bestErr {
			best, bestErr = point{mid, d, v}, excess.Abs()
		}
		if excess > 0 {
			hi = mid
		} else {
			lo = mid
		}
	}
	if err := p.setDelay(best.delay); err != nil {
		return 0, 0, err
	}
	return best.direct, best.via, nil
}
