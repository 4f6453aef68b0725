package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
)

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
