// Package redistest starts a real redis-server for a test binary and hands out
// isolated namespaces, so tests run in parallel on one server without FLUSHDB.
//
// It also holds the tests' one polling loop (Poll, WaitFor, Eventually: for
// a state no code signals) and their one pause (Pause: wall time that is the
// point, as between two faults, cut short when the test's context ends).
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"

	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/xid"

	"github.com/worqr/worqr-go/internal/rdb"
)

// InstallHint is printed when redis-server cannot be found.
const InstallHint = "redis-server not found: install it (Debian/Ubuntu: sudo apt-get install -y redis-server; macOS: brew install redis) or set WORQR_TEST_REDIS_URL"

// Server is a redis-server for tests: one this package started, or the one
// WORQR_TEST_REDIS_URL points at.
type Server struct {
	URL  string
	Addr string
	Dir  string // data directory of a started server; "" for an external one

	cmd *exec.Cmd
	bin string // "" means redis-server
	// ready is the log line that says the process serves ("" means
	// redis-server's "Ready to accept connections").
	ready string
	args  []string
	mu    sync.Mutex
}

// Start returns the server named by WORQR_TEST_REDIS_URL, or starts a private
// redis-server on a free loopback port with persistence off. extra are more
// redis-server arguments (for example "--appendonly", "yes").
func Start(extra ...string) (*Server, error) {
	if url := os.Getenv("WORQR_TEST_REDIS_URL"); url != "" && len(extra) == 0 {
		return &Server{URL: url}, nil
	}
	dir, err := os.MkdirTemp("", "worqr-redis-")
	if err != nil {
		return nil, err
	}
	return start(dir, extra, false)
}

// start launches redis-server with its data in dir; with tls, the free port
// is its TLS port and plain TCP is off.
func start(dir string, extra []string, tls bool) (*Server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		os.RemoveAll(dir)
		return nil, errors.New(InstallHint)
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{Dir: dir, Addr: "127.0.0.1:" + strconv.Itoa(port)}
	s.URL = "redis://" + s.Addr
	portArgs := []string{"--port", strconv.Itoa(port)}
	if tls {
		s.URL = "rediss://" + s.Addr
		portArgs = []string{"--port", "0", "--tls-port", strconv.Itoa(port)}
	}
	s.args = append(append(portArgs, "--bind", "127.0.0.1",
		"--dir", dir, "--save", "", "--appendonly", "no",
		"--protected-mode", "no", "--maxclients", "10000"), extra...)
	if err := s.launch(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// MustStart is Start for TestMain: it exits the test binary on failure.
func MustStart(extra ...string) *Server {
	s, err := Start(extra...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "redistest:", err)
		os.Exit(2)
	}
	return s
}

func (s *Server) launch() error {
	bin := s.bin
	if bin == "" {
		bin = "redis-server"
	}
	readyLine := s.ready
	if readyLine == "" {
		readyLine = "Ready to accept connections"
	}
	cmd := exec.Command(bin, s.args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return err
	}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		var log []string
		for sc.Scan() {
			line := sc.Text()
			log = append(log, line)
			if strings.Contains(line, readyLine) {
				ready <- nil
				// The rest of the log goes to Dir/out.log (OutLog),
				// for a test that wants to say what a server did.
				var f *os.File
				if s.Dir != "" {
					f, _ = os.OpenFile(filepath.Join(s.Dir, "out.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
				}
				for sc.Scan() {
					if f != nil {
						fmt.Fprintln(f, sc.Text())
					}
				}
				if f != nil {
					f.Close()
				}
				return
			}
		}
		ready <- fmt.Errorf("redis-server exited before it was ready:\n%s", strings.Join(log, "\n"))
	}()
	select {
	case err := <-ready:
		if err != nil {
			_ = cmd.Wait()
			return err
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		return errors.New("redis-server did not start within 20s")
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	return nil
}

// Main runs a package's tests against a private redis-server: it starts
// one (exiting the process when it cannot), stores it in *srv, sets
// WORQR_REDIS_URL to its URL (the examples read it as a program would),
// runs m (a *testing.M), stops the server and exits with m's code. Call
// it from TestMain.
func Main(m interface{ Run() int }, srv **Server) {
	*srv = MustStart()
	os.Setenv("WORQR_REDIS_URL", (*srv).URL)
	code := m.Run()
	(*srv).Stop()
	os.Exit(code)
}

// Stop stops a server this package started and removes its data.
func (s *Server) Stop() {
	s.Kill()
	if s.Dir != "" {
		os.RemoveAll(s.Dir)
	}
}

// Kill stops the server process (SIGKILL) and keeps its data directory.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

// Restart kills the server and starts it again on the same port and data
// directory (what survives depends on the persistence arguments).
func (s *Server) Restart() error {
	if s.Dir == "" {
		return errors.New("redistest: cannot restart an external server")
	}
	s.Kill()
	return s.launch()
}

// Pool returns a new connection pool to the server. The caller closes it.
func (s *Server) Pool() *redis.Pool {
	p := s.pool()
	if Serve.URL != nil {
		poolURLs.Store(p, servedAs{url: s.URL})
	}
	return p
}

func (s *Server) pool() *redis.Pool {
	return &redis.Pool{
		MaxIdle:     64,
		IdleTimeout: time.Minute,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialURLContext(ctx, s.URL)
		},
	}
}

// Serve, when its fields are set, makes the pools the code under test runs
// on: a test binary built with another client's overlay sets them in an
// init function (contrib/goredis: the same tests on a go-redis client; see
// its README). Unset: the tests run on the redigo pools themselves.
var Serve struct {
	// URL: in place of a pool of Server.Pool, one on the server at url
	// (see Served).
	URL func(t TB, url string) rdb.ConnGetter
	// Open: URL for a process that is no test (a worker process a test
	// runs); closeConns releases what it opened.
	Open func(url string) (conns rdb.ConnGetter, closeConns func(), err error)
	// Cluster: in place of a redisconn.Cluster on seeds.
	Cluster func(t TB, seeds []string) rdb.ConnGetter
	// Sentinel: in place of a redisconn.Sentinel on the primary the
	// sentinels name master.
	Sentinel func(t TB, master string, sentinels []string) rdb.ConnGetter
}

// poolURLs holds what Served needs of each pool Server.Pool or
// TagCheckedPool made while Serve.URL is set.
var poolURLs sync.Map // *redis.Pool -> servedAs

// servedAs is the server a pool reaches and, for a tag-checked pool, the
// TB its checks report to.
type servedAs struct {
	url      string
	tagCheck TB
}

// Served returns the pool that the code under test runs on in place of
// pool: pool itself, unless Serve.URL is set and pool is one that
// Server.Pool or TagCheckedPool made (a pool wrapped with faults or hooks
// stays as it is). The pool of a TagCheckedPool is checked as it is. The
// tests' own checks of Redis keep using pool.
func Served(t TB, pool rdb.ConnGetter) rdb.ConnGetter {
	if Serve.URL == nil {
		return pool
	}
	p, ok := pool.(*redis.Pool)
	if !ok {
		return pool
	}
	v, ok := poolURLs.Load(p)
	if !ok {
		return pool
	}
	as := v.(servedAs)
	served := Serve.URL(t, as.url)
	if as.tagCheck != nil {
		return &tagChecked{ConnGetter: served, t: as.tagCheck}
	}
	return served
}

// tagChecked is a served pool whose connections check script calls' KEYS
// as TagCheckedPool's do.
type tagChecked struct {
	rdb.ConnGetter
	t TB
}

func (p *tagChecked) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := p.ConnGetter.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	tc := &tagConn{Conn: c, t: p.t}
	if pc, ok := c.(rdb.Pipeliner); ok {
		return &tagPipeConn{tagConn: tc, pipe: pc}, nil
	}
	return tc, nil
}

// MaxActive is the served pool's, when it has one (worqr sizes its reads
// by it).
func (p *tagChecked) MaxActive() int {
	if m, ok := p.ConnGetter.(interface{ MaxActive() int }); ok {
		return m.MaxActive()
	}
	return 0
}

// TB is the part of testing.TB the helpers use (Ginkgo's GinkgoT satisfies it).
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// TagCheckedPool returns a pool whose connections fail the test when a script
// call's KEYS do not all share one hash tag. The pool is closed at cleanup.
func (s *Server) TagCheckedPool(t TB) *redis.Pool {
	p := s.pool()
	dial := p.DialContext
	p.DialContext = func(ctx context.Context) (redis.Conn, error) {
		c, err := dial(ctx)
		if err != nil {
			return nil, err
		}
		return &tagConn{Conn: c, t: t}, nil
	}
	if Serve.URL != nil {
		poolURLs.Store(p, servedAs{url: s.URL, tagCheck: t})
	}
	t.Cleanup(func() { p.Close() })
	return p
}

type tagConn struct {
	redis.Conn
	t TB
}

func (c *tagConn) check(cmd string, args []any) {
	cmd = strings.ToUpper(cmd)
	if (cmd != "EVALSHA" && cmd != "EVAL" && cmd != "FCALL") || len(args) < 2 {
		return
	}
	n, err := strconv.Atoi(fmt.Sprint(args[1]))
	if err != nil || n < 2 || len(args) < 2+n {
		return
	}
	first := rdb.HashTag(fmt.Sprint(args[2]))
	for _, k := range args[3 : 2+n] {
		if tag := rdb.HashTag(fmt.Sprint(k)); tag != first {
			c.t.Errorf("redistest: script KEYS span hash tags %q and %q: %v", first, tag, args[2:2+n])
			return
		}
	}
}

func (c *tagConn) Do(cmd string, args ...any) (any, error) {
	c.check(cmd, args)
	return c.Conn.Do(cmd, args...)
}

func (c *tagConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	c.check(cmd, args)
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

func (c *tagConn) Send(cmd string, args ...any) error {
	c.check(cmd, args)
	return c.Conn.Send(cmd, args...)
}

// tagPipeConn is a tagConn over a connection that runs pipelines itself
// (rdb.Pipeliner), which it keeps doing.
type tagPipeConn struct {
	*tagConn
	pipe rdb.Pipeliner
}

func (c *tagPipeConn) Pipeline(ctx context.Context, names []string, args [][]any) ([]any, error) {
	for i := range names {
		c.check(names[i], args[i])
	}
	return c.pipe.Pipeline(ctx, names, args)
}

var nsCounter atomic.Int64

// Namespace returns a namespace no other test of this run uses.
func Namespace() string {
	return "t" + strconv.FormatInt(nsCounter.Add(1), 10) + "-" + xid.New().String()
}

// Keys returns every key of namespace ns, sorted by Redis's SCAN order.
func Keys(ctx context.Context, c redis.Conn, ns string) ([]string, error) {
	var out []string
	cursor := 0
	for {
		vals, err := redis.Values(redis.DoContext(c, ctx, "SCAN", cursor, "MATCH", ns+":*", "COUNT", 1000))
		if err != nil {
			return nil, err
		}
		cursor, _ = redis.Int(vals[0], nil)
		keys, _ := redis.Strings(vals[1], nil)
		out = append(out, keys...)
		if cursor == 0 {
			return out, nil
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (c *tagConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	c.check(cmd, args)
	return redis.DoWithTimeout(c.Conn, d, cmd, args...)
}

func (c *tagConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

func (c *tagConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

// OutLog returns the last n lines the server logged after it was ready
// (kept in Dir/out.log across restarts), or "" when there are none.
func (s *Server) OutLog(n int) string {
	if s.Dir == "" {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(s.Dir, "out.log"))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
