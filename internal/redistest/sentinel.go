package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// SentinelMaster is the name the sentinels of StartSentinel monitor.
const SentinelMaster = "worqr-test"

// Sentinel is a primary, its replicas and the sentinels that monitor them
// (down after 1 s unless SentinelOptions say otherwise, quorum: a majority
// of the sentinels).
type Sentinel struct {
	Nodes     []*Server // the primary first, then its replicas (roles change on failover)
	Sentinels []*Server
	// Proxies, with SentinelOptions.Proxied, are the proxies in front of
	// Nodes (same order): the addresses the nodes, the sentinels and the
	// clients know them by.
	Proxies []*Proxy
}

// SentinelOptions shape the group StartSentinelWith starts.
type SentinelOptions struct {
	Replicas, Sentinels int
	// DownAfter is the sentinels' down-after-milliseconds (default 1 s).
	DownAfter time.Duration
	// Proxied puts a Proxy in front of each node: its replicas, the
	// sentinels and the clients reach it only through it (the nodes
	// announce the proxy's address), so that Proxy.Hold cuts a node off
	// from everyone.
	Proxied bool
	// Args are more redis-server arguments for every node.
	Args []string
}

// StartSentinel starts a primary, replicas replicas of it and sentinels
// sentinels monitoring it as SentinelMaster, and waits until the sentinels
// know the replicas.
func StartSentinel(ctx context.Context, replicas, sentinels int) (*Sentinel, error) {
	return StartSentinelWith(ctx, SentinelOptions{Replicas: replicas, Sentinels: sentinels})
}

// StartSentinelWith is StartSentinel shaped by o.
func StartSentinelWith(ctx context.Context, o SentinelOptions) (*Sentinel, error) {
	if _, err := exec.LookPath("redis-sentinel"); err != nil {
		return nil, errors.New("redis-sentinel not found: install it (Debian/Ubuntu: sudo apt-get install -y redis-sentinel)")
	}
	replicas, sentinels := o.Replicas, o.Sentinels
	downAfter := o.DownAfter
	if downAfter <= 0 {
		downAfter = time.Second
	}
	st := &Sentinel{}
	fail := func(err error) (*Sentinel, error) { st.Stop(); return nil, err }
	// startNode starts one node (a replica of the primary, at its known
	// address, unless it is the first).
	startNode := func() error {
		args := append([]string{"--appendonly", "no"}, o.Args...)
		if len(st.Nodes) > 0 {
			host, port, _ := net.SplitHostPort(st.AddrOf(st.Nodes[0]))
			args = append(args, "--replicaof", host, port)
		}
		var px *Proxy
		if o.Proxied {
			var err error
			if px, err = StartProxy(); err != nil {
				return err
			}
			_, pport, _ := net.SplitHostPort(px.Addr())
			args = append(args, "--replica-announce-ip", "127.0.0.1", "--replica-announce-port", pport)
		}
		n, err := Start(args...)
		if err != nil {
			if px != nil {
				px.Close()
			}
			return err
		}
		if px != nil {
			px.SetTarget(n.Addr)
			st.Proxies = append(st.Proxies, px)
		}
		st.Nodes = append(st.Nodes, n)
		return nil
	}
	for i := 0; i <= replicas; i++ {
		if err := startNode(); err != nil {
			return fail(err)
		}
	}
	host, port, _ := net.SplitHostPort(st.AddrOf(st.Nodes[0]))
	for _, r := range st.Nodes[1:] {
		if err := waitInfo(ctx, r.Addr, "replication", "master_link_status:up"); err != nil {
			return fail(fmt.Errorf("replica %s: %w", r.Addr, err))
		}
	}
	quorum := sentinels/2 + 1
	for i := 0; i < sentinels; i++ {
		dir, err := os.MkdirTemp("", "worqr-sentinel-")
		if err != nil {
			return fail(err)
		}
		sp, err := freePort()
		if err != nil {
			return fail(err)
		}
		conf := filepath.Join(dir, "sentinel.conf")
		body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nprotected-mode no\n"+
			"sentinel monitor %s %s %s %d\n"+
			"sentinel down-after-milliseconds %[3]s %[7]d\n"+
			"sentinel failover-timeout %[3]s 5000\n"+
			"sentinel parallel-syncs %[3]s 1\n", sp, dir, SentinelMaster, host, port, quorum, downAfter.Milliseconds())
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			return fail(err)
		}
		s := &Server{Dir: dir, Addr: "127.0.0.1:" + strconv.Itoa(sp), bin: "redis-sentinel", args: []string{conf}, ready: "+monitor master"}
		s.URL = "redis://" + s.Addr
		if err := s.launch(); err != nil {
			os.RemoveAll(dir)
			return fail(fmt.Errorf("redis-sentinel: %w", err))
		}
		st.Sentinels = append(st.Sentinels, s)
	}
	// Each sentinel must know every replica (from the primary's INFO) and
	// the other sentinels (hello messages) before it can fail over.
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range st.Sentinels {
		for {
			ok, err := s.knows(ctx, replicas, sentinels-1)
			if err == nil && ok {
				break
			}
			if time.Now().After(deadline) {
				return fail(fmt.Errorf("sentinel %s does not know the %d replicas and %d other sentinels after 30 s (%v)", s.Addr, replicas, sentinels-1, err))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return st, nil
}

// knows reports whether sentinel s sees the primary with replicas replicas
// and others other sentinels.
func (s *Server) knows(ctx context.Context, replicas, others int) (bool, error) {
	c, err := redis.DialContext(ctx, "tcp", s.Addr)
	if err != nil {
		return false, err
	}
	defer c.Close()
	m, err := redis.StringMap(redis.DoContext(c, ctx, "SENTINEL", "MASTER", SentinelMaster))
	if err != nil {
		return false, err
	}
	nr, _ := strconv.Atoi(m["num-slaves"])
	ns, _ := strconv.Atoi(m["num-other-sentinels"])
	return nr >= replicas && ns >= others, nil
}

// Addrs returns the sentinels' addresses.
func (st *Sentinel) Addrs() []string {
	var out []string
	for _, s := range st.Sentinels {
		out = append(out, s.Addr)
	}
	return out
}

// Primary returns the address the first sentinel names as the primary.
func (st *Sentinel) Primary(ctx context.Context) (string, error) {
	c, err := redis.DialContext(ctx, "tcp", st.Sentinels[0].Addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	r, err := redis.Strings(redis.DoContext(c, ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMaster))
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(r[0], r[1]), nil
}

// Node returns the node at addr (its own or its proxy's).
func (st *Sentinel) Node(addr string) *Server {
	for i, n := range st.Nodes {
		if n.Addr == addr || i < len(st.Proxies) && st.Proxies[i].Addr() == addr {
			return n
		}
	}
	return nil
}

// AddrOf returns the address node n is known by: its proxy's when the
// group is proxied, else its own.
func (st *Sentinel) AddrOf(n *Server) string {
	if p := st.ProxyOf(n); p != nil {
		return p.Addr()
	}
	return n.Addr
}

// ProxyOf returns the proxy in front of node n, or nil.
func (st *Sentinel) ProxyOf(n *Server) *Proxy {
	for i, m := range st.Nodes {
		if m == n && i < len(st.Proxies) {
			return st.Proxies[i]
		}
	}
	return nil
}

// Failover asks the first sentinel to fail over (SENTINEL FAILOVER: it
// promotes a replica without the others' agreement) and returns the new
// primary's address once the sentinel names it and it says it is one.
func (st *Sentinel) Failover(ctx context.Context) (string, error) {
	old, err := st.Primary(ctx)
	if err != nil {
		return "", err
	}
	c, err := redis.DialContext(ctx, "tcp", st.Sentinels[0].Addr)
	if err != nil {
		return "", err
	}
	_, err = redis.DoContext(c, ctx, "SENTINEL", "FAILOVER", SentinelMaster)
	c.Close()
	if err != nil {
		return "", err
	}
	return st.WaitNewPrimary(ctx, old)
}

// WaitNewPrimary waits until the sentinels name a primary other than old
// that says it is one, and returns it.
func (st *Sentinel) WaitNewPrimary(ctx context.Context, old string) (string, error) {
	for {
		now, err := st.Primary(ctx)
		if err == nil && now != old && waitInfo(ctx, now, "replication", "role:master") == nil {
			return now, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no new primary in place of %s: %w", old, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop stops every process.
func (st *Sentinel) Stop() {
	for _, s := range st.Sentinels {
		s.Stop()
	}
	for _, n := range st.Nodes {
		n.Stop()
	}
	for _, p := range st.Proxies {
		p.Close()
	}
}

// waitInfo waits until INFO section of the node at addr contains line.
func waitInfo(ctx context.Context, addr, section, line string) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := redis.DialContext(ctx, "tcp", addr)
		if err == nil {
			info, ierr := redis.String(redis.DoContext(c, ctx, "INFO", section))
			c.Close()
			if ierr == nil && strings.Contains(info, line) {
				return nil
			}
			err = ierr
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("INFO %s of %s has no %q after 20 s (%v)", section, addr, line, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Info returns INFO section of the node at addr.
func Info(ctx context.Context, addr, section string) (string, error) {
	c, err := redis.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return redis.String(redis.DoContext(c, ctx, "INFO", section))
}

// StartAuthSentinel starts one redis-sentinel that requires password and
// monitors primary as SentinelMaster (quorum 1): a sentinel to
// authenticate to. It is stopped with Stop.
func StartAuthSentinel(primary *Server, password string) (*Server, error) {
	if _, err := exec.LookPath("redis-sentinel"); err != nil {
		return nil, errors.New("redis-sentinel not found: install it (Debian/Ubuntu: sudo apt-get install -y redis-sentinel)")
	}
	host, port, err := net.SplitHostPort(primary.Addr)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "worqr-sentinel-")
	if err != nil {
		return nil, err
	}
	sp, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nprotected-mode no\nrequirepass %s\n"+
		"sentinel monitor %s %s %s 1\n", sp, dir, password, SentinelMaster, host, port)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{Dir: dir, Addr: "127.0.0.1:" + strconv.Itoa(sp), bin: "redis-sentinel", args: []string{conf}, ready: "+monitor master"}
	s.URL = "redis://" + s.Addr
	if err := s.launch(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("redis-sentinel: %w", err)
	}
	return s, nil
}

// StartSentinelConf starts one redis-sentinel whose configuration is lines,
// after its port, bind and dir lines; lines must hold a "sentinel monitor"
// line: it returns once the sentinel logged that it monitors its master.
// It is stopped with Stop.
func StartSentinelConf(lines ...string) (*Server, error) {
	if _, err := exec.LookPath("redis-sentinel"); err != nil {
		return nil, errors.New("redis-sentinel not found: install it (Debian/Ubuntu: sudo apt-get install -y redis-sentinel)")
	}
	dir, err := os.MkdirTemp("", "worqr-sentinel-")
	if err != nil {
		return nil, err
	}
	sp, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nprotected-mode no\n%s\n", sp, dir, strings.Join(lines, "\n"))
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{Dir: dir, Addr: "127.0.0.1:" + strconv.Itoa(sp), bin: "redis-sentinel", args: []string{conf}, ready: "+monitor master"}
	s.URL = "redis://" + s.Addr
	if err := s.launch(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("redis-sentinel: %w", err)
	}
	return s, nil
}

// WaitReplica waits until node n is a replica of the primary known as
// primary, in sync with it (master_link_status:up), and every sentinel
// names primary and lists n as its replica with no s_down or disconnected
// flag: a replica the sentinels can promote at the next failover (they
// read its link's state again, every second, once the primary is down).
func (st *Sentinel) WaitReplica(ctx context.Context, n *Server, primary string) error {
	host, port, _ := net.SplitHostPort(primary)
	want := st.AddrOf(n)
	why := ""
	err := pollUntil(ctx, func() (bool, error) {
		info, err := Info(ctx, n.Addr, "replication")
		if err != nil || !strings.Contains(info, "role:slave") || !strings.Contains(info, "master_host:"+host+"\r\n") ||
			!strings.Contains(info, "master_port:"+port+"\r\n") || !strings.Contains(info, "master_link_status:up") {
			why = fmt.Sprintf("%s: %q %v", n.Addr, info, err)
			return false, nil
		}
		for _, s := range st.Sentinels {
			if ok, err := s.seesReplica(ctx, primary, want); !ok {
				why = fmt.Sprintf("sentinel %s: %v", s.Addr, err)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%w (%s)", err, why)
	}
	return nil
}

// seesReplica reports whether sentinel s names primary as the primary and
// lists replica in good standing.
func (s *Server) seesReplica(ctx context.Context, primary, replica string) (bool, error) {
	c, err := redis.DialContext(ctx, "tcp", s.Addr, redis.DialReadTimeout(time.Second))
	if err != nil {
		return false, err
	}
	defer c.Close()
	r, err := redis.Strings(redis.DoContext(c, ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMaster))
	if err != nil || len(r) != 2 || net.JoinHostPort(r[0], r[1]) != primary {
		return false, fmt.Errorf("names %v, not %s (%v)", r, primary, err)
	}
	reps, err := redis.Values(redis.DoContext(c, ctx, "SENTINEL", "REPLICAS", SentinelMaster))
	if err != nil {
		return false, err
	}
	for _, rep := range reps {
		m, err := redis.StringMap(rep, nil)
		if err != nil || m["name"] != replica {
			continue
		}
		if m["flags"] != "slave" {
			return false, fmt.Errorf("flags %s", m["flags"])
		}
		return true, nil
	}
	return false, fmt.Errorf("names %s, without the replica %s", primary, replica)
}
