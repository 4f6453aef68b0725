package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// AddReplica starts one more cluster-enabled redis-server and makes it a
// replica of master (CLUSTER MEET, then CLUSTER REPLICATE), then waits until
// it has synced with master (master_link_status:up) and every node of the
// cluster lists it as master's replica, so that a CLUSTER FAILOVER on it,
// or master's death, promotes it. It is not added to cl.Nodes (the
// masters); the caller stops it.
func (cl *Cluster) AddReplica(ctx context.Context, master *Server) (*Server, error) {
	s, err := startClusterNode([]string{"--cluster-node-timeout", "2000"})
	if err != nil {
		return nil, err
	}
	if err := cl.joinAsReplica(ctx, s, master); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func (cl *Cluster) joinAsReplica(ctx context.Context, s, master *Server) error {
	mc, masterID, err := dialID(ctx, master)
	if err != nil {
		return err
	}
	defer mc.Close()
	rc, replicaID, err := dialID(ctx, s)
	if err != nil {
		return err
	}
	defer rc.Close()
	// The master's bus port (not port + 10000 here): CLUSTER NODES' myself
	// line reads ip:port@busport.
	nodes, err := redis.String(mc.Do("CLUSTER", "NODES"))
	if err != nil {
		return err
	}
	var host, port, bus string
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && strings.Contains(f[2], "myself") {
			addr, busPart, _ := strings.Cut(f[1], "@")
			busPart, _, _ = strings.Cut(busPart, ",")
			host, port, _ = strings.Cut(addr, ":")
			bus = busPart
		}
	}
	if bus == "" {
		return fmt.Errorf("redistest: no myself line in CLUSTER NODES of %s", master.Addr)
	}
	if _, err := rc.Do("CLUSTER", "MEET", host, port, bus); err != nil {
		return fmt.Errorf("cluster meet: %w", err)
	}
	// REPLICATE needs the master known (the handshake over the bus).
	err = pollUntil(ctx, func() (bool, error) {
		_, err := rc.Do("CLUSTER", "REPLICATE", masterID)
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("redistest: cluster replicate %s: %w", masterID, err)
	}
	err = pollUntil(ctx, func() (bool, error) {
		info, err := redis.String(rc.Do("INFO", "replication"))
		return err == nil && strings.Contains(info, "master_link_status:up"), nil
	})
	if err != nil {
		return fmt.Errorf("redistest: replica of %s never synced: %w", master.Addr, err)
	}
	for _, n := range cl.Nodes {
		err := pollUntil(ctx, func() (bool, error) {
			c, err := redis.DialContext(ctx, "tcp", n.Addr)
			if err != nil {
				return false, err
			}
			defer c.Close()
			nodes, err := redis.String(c.Do("CLUSTER", "NODES"))
			if err != nil {
				return false, err
			}
			for _, line := range strings.Split(nodes, "\n") {
				f := strings.Fields(line)
				if len(f) > 3 && f[0] == replicaID && strings.Contains(f[2], "slave") && f[3] == masterID {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("redistest: %s never listed the replica: %w", n.Addr, err)
		}
	}
	return nil
}

// dialID dials node s and reads its cluster node id (CLUSTER MYID); the
// caller closes the connection.
func dialID(ctx context.Context, s *Server) (redis.Conn, string, error) {
	c, err := redis.DialContext(ctx, "tcp", s.Addr)
	if err != nil {
		return nil, "", err
	}
	id, err := redis.String(c.Do("CLUSTER", "MYID"))
	if err != nil {
		c.Close()
		return nil, "", err
	}
	return c, id, nil
}

// pollUntil calls cond every 50ms until it returns true or an error, or ctx
// ends.
func pollUntil(ctx context.Context, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// StartReplicated starts a primary and n replicas of it (no sentinel) and
// waits until every replica's link is up. Stop each server when done.
func StartReplicated(ctx context.Context, n int) (primary *Server, replicas []*Server, err error) {
	primary, err = Start("--appendonly", "no")
	if err != nil {
		return nil, nil, err
	}
	host, port, _ := net.SplitHostPort(primary.Addr)
	for i := 0; i < n; i++ {
		r, err := Start("--replicaof", host, port)
		if err != nil {
			stopAll(primary, replicas)
			return nil, nil, err
		}
		replicas = append(replicas, r)
	}
	for _, r := range replicas {
		if err := waitInfo(ctx, r.Addr, "replication", "master_link_status:up"); err != nil {
			stopAll(primary, replicas)
			return nil, nil, fmt.Errorf("replica %s: %w", r.Addr, err)
		}
	}
	return primary, replicas, nil
}

func stopAll(primary *Server, replicas []*Server) {
	primary.Stop()
	for _, r := range replicas {
		r.Stop()
	}
}

// Signal sends sig to the server process (SIGSTOP freezes it, SIGCONT
// resumes it).
func (s *Server) Signal(sig os.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("redistest: the server is not running")
	}
	return s.cmd.Process.Signal(sig)
}

// RestartReplicaOf kills the server (if it runs) and starts it again on
// the same port and data directory as a replica of the node at primary
// (host:port), with extra as more flag-and-value pairs (each replacing
// the same flag of an earlier restart).
func (s *Server) RestartReplicaOf(primary string, extra ...string) error {
	if s.Dir == "" {
		return errors.New("redistest: cannot restart an external server")
	}
	host, port, err := net.SplitHostPort(primary)
	if err != nil {
		return err
	}
	s.Kill()
	var args []string
	for i := 0; i < len(s.args); i++ {
		if s.args[i] == "--replicaof" && i+2 < len(s.args) {
			i += 2
			continue
		}
		if slices.Contains(extra, s.args[i]) && i+1 < len(s.args) {
			i++
			continue
		}
		args = append(args, s.args[i])
	}
	s.args = append(append(args, "--replicaof", host, port), extra...)
	return s.launch()
}
