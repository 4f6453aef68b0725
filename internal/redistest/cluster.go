package redistest

import (
	"context"
	"errors"
	"fmt"
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
	nodes, err := startClusterNodes(masters, masters, []string{"--cluster-node-timeout", "2000"})
	if err != nil {
		return nil, err
	}
	cl := &Cluster{Nodes: nodes}
	if err := createCluster(cl.Addrs(), 0, cl.WaitOK); err != nil {
		cl.Stop()
		return nil, err
	}
	return cl, nil
}

// startClusterNodes checks that a cluster of masters can be made (at least
// 3 masters, redis-cli found: ErrNoRedisCLI otherwise), then starts n
// cluster-enabled nodes (startClusterNode with extra); on an error it stops
// those it started.
func startClusterNodes(masters, n int, extra []string) ([]*Server, error) {
	if masters < 3 {
		return nil, fmt.Errorf("redistest: a cluster needs at least 3 masters, not %d", masters)
	}
	if _, err := exec.LookPath("redis-cli"); err != nil {
		return nil, ErrNoRedisCLI
	}
	var nodes []*Server
	for i := 0; i < n; i++ {
		s, err := startClusterNode(extra)
		if err != nil {
			for _, s := range nodes {
				s.Stop()
			}
			return nil, err
		}
		nodes = append(nodes, s)
	}
	return nodes, nil
}

// createCluster joins the nodes at addrs into one cluster with redis-cli
// --cluster create (the slots split evenly, replicas replicas per master),
// then calls wait; both share one 60 s deadline.
func createCluster(addrs []string, replicas int, wait func(context.Context) error) error {
	args := []string{"--cluster", "create"}
	args = append(args, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	return wait(ctx)
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
	return waitReady(ctx, cl.ready)
}

// waitReady calls ready every 50 ms until it says ok, or ctx ends (the
// error then gives its last reason).
func waitReady(ctx context.Context, ready func(context.Context) (bool, string)) error {
	var last string
	for {
		ok, why := ready(ctx)
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
	var first, firstAddr string
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
			first, firstAddr = view, n.Addr
		} else if view != first {
			return false, fmt.Sprintf("nodes disagree on the slot map: %s sees %s, %s sees %s", firstAddr, first, n.Addr, view)
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
	if n := slotOwner(slots, slot, cl.Nodes); n != nil {
		return n, nil
	}
	return nil, fmt.Errorf("redistest: no node serves slot %d", slot)
}

// slotOwner returns the node of nodes that a CLUSTER SLOTS reply says
// serves slot, or nil.
func slotOwner(slots []any, slot int, nodes []*Server) *Server {
	for _, s := range slots {
		v, _ := redis.Values(s, nil)
		lo, _ := redis.Int(v[0], nil)
		hi, _ := redis.Int(v[1], nil)
		if slot < lo || slot > hi {
			continue
		}
		m, _ := redis.Values(v[2], nil)
		port, _ := redis.Int(m[1], nil)
		for _, n := range nodes {
			if strings.HasSuffix(n.Addr, fmt.Sprintf(":%d", port)) {
				return n
			}
		}
	}
	return nil
}

// MoveSlot moves slot from its owner to node to, as redis-cli --cluster
// reshard does: IMPORTING on the target, MIGRATING on the source, MIGRATE
// of its keys (batches of up to batch keys, 10 when batch <= 0; during the
// move clients get ASK or TRYAGAIN), then SETSLOT NODE on every node.
// between, when not nil, runs after the slot is marked and before its keys
// move, so a test can work while the slot is half moved. It is MoveTagSlot
// without the stats.
func (cl *Cluster) MoveSlot(ctx context.Context, slot int, to *Server, batch int, between func()) error {
	_, err := cl.MoveTagSlot(ctx, slot, to, MoveOpts{Batch: batch, Between: between})
	return err
}
