package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// ClusterHint is the reason cluster tests skip when redis-cli is missing.
const ClusterHint = "redis-cli not found: the Redis Cluster tests need it to create the cluster " +
	"(Debian/Ubuntu: sudo apt-get install -y redis-tools, or redis-server, which brings it)"

// ErrNoRedisCLI is returned by StartCluster when redis-cli cannot be found.
var ErrNoRedisCLI = errors.New(ClusterHint)

// Cluster is a local Redis Cluster of masters (no replicas) started from
// redis-server processes on free loopback ports, each stopped by its pid.
type Cluster struct {
	Nodes []*Server // the masters, in creation order
}

// StartCluster starts masters redis-server processes with cluster mode on and
// joins them into one cluster with redis-cli --cluster create (the slots
// split evenly), then waits until every node reports cluster_state:ok and
// agrees on the slot map. It returns ErrNoRedisCLI when redis-cli is
// missing (tests skip on it).
func StartCluster(masters int) (*Cluster, error) {
	if masters < 3 {
		return nil, fmt.Errorf("redistest: a cluster needs at least 3 masters, not %d", masters)
	}
	if _, err := exec.LookPath("redis-cli"); err != nil {
		return nil, ErrNoRedisCLI
	}
	cl := &Cluster{}
	for i := 0; i < masters; i++ {
		dir, err := os.MkdirTemp("", "worqr-cluster-")
		if err != nil {
			cl.Stop()
			return nil, err
		}
		// The bus port is chosen too: by default it is the port + 10000,
		// out of range for a free port above 55535.
		var s *Server
		for attempt := 0; ; attempt++ {
			bus, err := freePort()
			if err != nil {
				cl.Stop()
				return nil, err
			}
			s, err = start(dir, []string{"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(bus),
				"--cluster-config-file", dir + "/nodes.conf", "--cluster-node-timeout", "2000"}, false)
			if err == nil {
				break
			}
			if attempt == 3 { // a port taken between its choice and its use
				cl.Stop()
				return nil, err
			}
			if dir, err = os.MkdirTemp("", "worqr-cluster-"); err != nil {
				cl.Stop()
				return nil, err
			}
		}
		cl.Nodes = append(cl.Nodes, s)
	}
	args := []string{"--cluster", "create"}
	args = append(args, cl.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		cl.Stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := cl.WaitOK(ctx); err != nil {
		cl.Stop()
		return nil, err
	}
	return cl, nil
}

// Addrs returns the nodes' host:port addresses.
func (cl *Cluster) Addrs() []string {
	out := make([]string, len(cl.Nodes))
	for i, n := range cl.Nodes {
		out[i] = n.Addr
	}
	return out
}

// WaitOK polls every node until each says cluster_state:ok and all agree
// on which node serves every slot (CLUSTER SHARDS), or ctx ends.
func (cl *Cluster) WaitOK(ctx context.Context) error {
	var last string
	for {
		ok, why := cl.ready(ctx)
		if ok {
			return nil
		}
		last = why
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: cluster not ready: %s", last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (cl *Cluster) ready(ctx context.Context) (bool, string) {
	var first string
	for _, n := range cl.Nodes {
		c, err := redis.DialContext(ctx, "tcp", n.Addr)
		if err != nil {
			return false, err.Error()
		}
		info, err := redis.String(c.Do("CLUSTER", "INFO"))
		if err != nil {
			c.Close()
			return false, err.Error()
		}
		if !strings.Contains(info, "cluster_state:ok") {
			c.Close()
			return false, n.Addr + ": " + info
		}
		slots, err := redis.Values(c.Do("CLUSTER", "SLOTS"))
		c.Close()
		if err != nil {
			return false, err.Error()
		}
		view := fmt.Sprint(slotView(slots))
		if first == "" {
			first = view
		} else if view != first {
			return false, "nodes disagree on the slot map"
		}
	}
	return true, ""
}

// slotView is a CLUSTER SLOTS reply reduced to ranges and master ports.
func slotView(slots []any) []string {
	var out []string
	for _, s := range slots {
		v, _ := redis.Values(s, nil)
		if len(v) < 3 {
			continue
		}
		lo, _ := redis.Int(v[0], nil)
		hi, _ := redis.Int(v[1], nil)
		m, _ := redis.Values(v[2], nil)
		port := 0
		if len(m) > 1 {
			port, _ = redis.Int(m[1], nil)
		}
		out = append(out, fmt.Sprintf("%d-%d:%d", lo, hi, port))
	}
	sort.Strings(out)
	return out
}

// Stop stops every node (by pid) and removes their data.
func (cl *Cluster) Stop() {
	for _, n := range cl.Nodes {
		n.Stop()
	}
}

// NodeOf returns the node serving slot (by CLUSTER SHARDS of the first
// node), or nil.
func (cl *Cluster) NodeOf(ctx context.Context, slot int) (*Server, error) {
	c, err := redis.DialContext(ctx, "tcp", cl.Nodes[0].Addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	slots, err := redis.Values(c.Do("CLUSTER", "SLOTS"))
	if err != nil {
		return nil, err
	}
	for _, s := range slots {
		v, _ := redis.Values(s, nil)
		lo, _ := redis.Int(v[0], nil)
		hi, _ := redis.Int(v[1], nil)
		if slot < lo || slot > hi {
			continue
		}
		m, _ := redis.Values(v[2], nil)
		port, _ := redis.Int(m[1], nil)
		for _, n := range cl.Nodes {
			if strings.HasSuffix(n.Addr, fmt.Sprintf(":%d", port)) {
				return n, nil
			}
		}
	}
	return nil, fmt.Errorf("redistest: no node serves slot %d", slot)
}

// MoveSlot moves slot from its owner to node to, as redis-cli --cluster
// reshard does: IMPORTING on the target, MIGRATING on the source, MIGRATE
// of its keys (batches of up to batch keys; during the move clients get
// ASK or TRYAGAIN), then SETSLOT NODE on both. between, when not nil, runs
// after the slot is marked and before its keys move, so a test can work
// while the slot is half moved.
func (cl *Cluster) MoveSlot(ctx context.Context, slot int, to *Server, batch int, between func()) error {
	from, err := cl.NodeOf(ctx, slot)
	if err != nil {
		return err
	}
	if from == to {
		return fmt.Errorf("redistest: slot %d is already on %s", slot, to.Addr)
	}
	src, err := redis.DialContext(ctx, "tcp", from.Addr)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := redis.DialContext(ctx, "tcp", to.Addr)
	if err != nil {
		return err
	}
	defer dst.Close()
	srcID, err := redis.String(src.Do("CLUSTER", "MYID"))
	if err != nil {
		return err
	}
	dstID, err := redis.String(dst.Do("CLUSTER", "MYID"))
	if err != nil {
		return err
	}
	if _, err := dst.Do("CLUSTER", "SETSLOT", slot, "IMPORTING", srcID); err != nil {
		return fmt.Errorf("importing: %w", err)
	}
	if _, err := src.Do("CLUSTER", "SETSLOT", slot, "MIGRATING", dstID); err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	if between != nil {
		between()
	}
	host, port, _ := strings.Cut(to.Addr, ":")
	for {
		keys, err := redis.Strings(src.Do("CLUSTER", "GETKEYSINSLOT", slot, batch))
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			break
		}
		args := []any{host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if _, err := src.Do("MIGRATE", args...); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	// The target first, then the source, then the others (as redis-cli).
	if _, err := dst.Do("CLUSTER", "SETSLOT", slot, "NODE", dstID); err != nil {
		return err
	}
	if _, err := src.Do("CLUSTER", "SETSLOT", slot, "NODE", dstID); err != nil {
		return err
	}
	for _, n := range cl.Nodes {
		if n == from || n == to {
			continue
		}
		c, err := redis.DialContext(ctx, "tcp", n.Addr)
		if err != nil {
			return err
		}
		_, err = c.Do("CLUSTER", "SETSLOT", slot, "NODE", dstID)
		c.Close()
		if err != nil {
			return err
		}
	}
	return cl.WaitOK(ctx)
}
