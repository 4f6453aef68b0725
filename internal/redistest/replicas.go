package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
)

// ReplicaCluster is a local Redis Cluster whose masters each have one
// replica, started from redis-server processes on free loopback ports and
// stopped by pid. Masters can be SIGKILLed (KillMaster: the replica is
// promoted) and slots moved while clients run (MoveTagSlot).
type ReplicaCluster struct {
	// Nodes are every node, masters and replicas, in creation order; a
	// killed node stays in the list (its Server is stopped).
	Nodes []*Server

	mu     sync.Mutex
	killed map[*Server]bool
}

// ReplicaNodeTimeout is the cluster-node-timeout of a ReplicaCluster: a
// killed master is marked failed about this long after it died, and its
// replica is promoted within a second or two more.
const ReplicaNodeTimeout = 1500 * time.Millisecond

// StartClusterWithReplicas starts 2*masters redis-server processes in
// cluster mode and joins them with redis-cli --cluster create
// --cluster-replicas 1 (one replica per master), then waits until every
// node says cluster_state:ok, they agree on the slot map and every replica
// is in sync with its master. It returns ErrNoRedisCLI when redis-cli is
// missing (tests skip on it).
func StartClusterWithReplicas(masters int) (*ReplicaCluster, error) {
	nodes, err := startClusterNodes(masters, 2*masters, []string{
		"--cluster-node-timeout", strconv.Itoa(int(ReplicaNodeTimeout / time.Millisecond)),
		// A replica syncs at once (the default waits 5 s for more
		// replicas), and stays a replica of its own master.
		"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0",
		"--cluster-allow-replica-migration", "no",
	})
	if err != nil {
		return nil, err
	}
	rc := &ReplicaCluster{Nodes: nodes, killed: map[*Server]bool{}}
	if err := createCluster(rc.Addrs(), 1, rc.WaitOK); err != nil {
		rc.Stop()
		return nil, err
	}
	return rc, nil
}

// startClusterNode starts one redis-server in cluster mode on a free port
// and a free bus port, trying again when a port was taken in between.
func startClusterNode(extra []string) (*Server, error) {
	for attempt := 0; ; attempt++ {
		dir, err := os.MkdirTemp("", "worqr-cluster-")
		if err != nil {
			return nil, err
		}
		bus, err := freePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s, err := start(dir, append([]string{"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(bus),
			"--cluster-config-file", dir + "/nodes.conf"}, extra...), false)
		if err == nil {
			return s, nil
		}
		if attempt == 3 {
			return nil, err
		}
	}
}

// Addrs returns every node's host:port address (killed ones too).
func (rc *ReplicaCluster) Addrs() []string {
	out := make([]string, len(rc.Nodes))
	for i, n := range rc.Nodes {
		out[i] = n.Addr
	}
	return out
}

// Stop stops every node (by pid) and removes their data.
func (rc *ReplicaCluster) Stop() {
	for _, n := range rc.Nodes {
		n.Stop()
	}
}

// live returns the nodes not killed.
func (rc *ReplicaCluster) live() []*Server {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []*Server
	for _, n := range rc.Nodes {
		if !rc.killed[n] {
			out = append(out, n)
		}
	}
	return out
}

func (rc *ReplicaCluster) byAddr(addr string) *Server {
	for _, n := range rc.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// nodeLine is one line of CLUSTER NODES.
type nodeLine struct {
	id, addr, master string
	flags            map[string]bool
	slots            []string
}

// clusterNodes reads CLUSTER NODES from node n.
func clusterNodes(ctx context.Context, n *Server) ([]nodeLine, error) {
	c, err := redis.DialContext(ctx, "tcp", n.Addr, redis.DialConnectTimeout(time.Second),
		redis.DialReadTimeout(2*time.Second))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	s, err := redis.String(c.Do("CLUSTER", "NODES"))
	if err != nil {
		return nil, err
	}
	var out []nodeLine
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		nl := nodeLine{id: f[0], addr: addr, master: f[3], flags: map[string]bool{}, slots: f[8:]}
		for _, fl := range strings.Split(f[2], ",") {
			nl.flags[fl] = true
		}
		out = append(out, nl)
	}
	return out, nil
}

// WaitOK polls every live node until each says cluster_state:ok, all agree
// on which master serves every slot, every live master has a replica in
// sync (master_link_status:up) unless its replica was killed, or ctx ends.
func (rc *ReplicaCluster) WaitOK(ctx context.Context) error {
	return waitReady(ctx, rc.ready)
}

func (rc *ReplicaCluster) ready(ctx context.Context) (bool, string) {
	var first string
	for _, n := range rc.live() {
		c, err := redis.DialContext(ctx, "tcp", n.Addr, redis.DialConnectTimeout(time.Second),
			redis.DialReadTimeout(2*time.Second))
		if err != nil {
			return false, err.Error()
		}
		info, err := redis.String(c.Do("CLUSTER", "INFO"))
		if err == nil && !strings.Contains(info, "cluster_state:ok") {
			err = errors.New("cluster_state not ok")
		}
		var repl string
		if err == nil {
			repl, err = redis.String(c.Do("INFO", "replication"))
		}
		var slots []any
		if err == nil {
			slots, err = redis.Values(c.Do("CLUSTER", "SLOTS"))
		}
		c.Close()
		if err != nil {
			return false, n.Addr + ": " + err.Error()
		}
		if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
			return false, n.Addr + ": replica not in sync"
		}
		if why := rc.rolesSettled(ctx, n); why != "" {
			return false, why
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

// rolesSettled says why node n's view of the others is not settled yet:
// a live node it sees as a master without slots (a replica whose role has
// not reached n), or "" when there is none.
func (rc *ReplicaCluster) rolesSettled(ctx context.Context, n *Server) string {
	lines, err := clusterNodes(ctx, n)
	if err != nil {
		return n.Addr + ": " + err.Error()
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, l := range lines {
		s := rc.byAddr(l.addr)
		if s == nil || rc.killed[s] || l.flags["fail"] || l.flags["fail?"] {
			continue
		}
		if l.flags["master"] && len(l.slots) == 0 {
			return n.Addr + " sees " + l.addr + " as a master without slots"
		}
	}
	return ""
}

// Masters returns the live masters that serve slots, as a live node sees
// them.
func (rc *ReplicaCluster) Masters(ctx context.Context) ([]*Server, error) {
	lines, err := rc.nodes(ctx)
	if err != nil {
		return nil, err
	}
	var out []*Server
	for _, l := range lines {
		if l.flags["master"] && !l.flags["fail"] && len(l.slots) > 0 {
			if s := rc.byAddr(l.addr); s != nil {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// nodes reads CLUSTER NODES from the first live node that answers.
func (rc *ReplicaCluster) nodes(ctx context.Context) ([]nodeLine, error) {
	var errs []error
	for _, n := range rc.live() {
		lines, err := clusterNodes(ctx, n)
		if err == nil {
			return lines, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("redistest: no live node answered CLUSTER NODES: %w", errors.Join(errs...))
}

// NodeOf returns the master serving slot, as a live node sees it.
func (rc *ReplicaCluster) NodeOf(ctx context.Context, slot int) (*Server, error) {
	for _, n := range rc.live() {
		c, err := redis.DialContext(ctx, "tcp", n.Addr)
		if err != nil {
			continue
		}
		slots, err := redis.Values(c.Do("CLUSTER", "SLOTS"))
		c.Close()
		if err != nil {
			continue
		}
		if x := slotOwner(slots, slot, rc.Nodes); x != nil {
			return x, nil
		}
		return nil, fmt.Errorf("redistest: no node serves slot %d", slot)
	}
	return nil, errors.New("redistest: no live node answered CLUSTER SLOTS")
}

// ReplicaOf returns the replica of master m, as m's ROLE lists it.
func (rc *ReplicaCluster) ReplicaOf(ctx context.Context, m *Server) (*Server, error) {
	c, err := redis.DialContext(ctx, "tcp", m.Addr, redis.DialConnectTimeout(time.Second),
		redis.DialReadTimeout(time.Second))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	v, err := redis.Values(c.Do("ROLE"))
	if err != nil {
		return nil, err
	}
	if len(v) == 3 {
		reps, _ := redis.Values(v[2], nil)
		for _, r := range reps {
			f, _ := redis.Strings(r, nil)
			if len(f) >= 2 {
				if s := rc.byAddr(f[0] + ":" + f[1]); s != nil {
					return s, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("redistest: %s has no replica", m.Addr)
}

// KillMaster SIGKILLs master m and waits until its replica is promoted
// (the replica says role master and serves m's slots), every live node
// says cluster_state:ok and agrees on the slot map. It returns the new
// master and the time from the kill to its promotion being seen. The
// killed node keeps its data directory; it is not restarted.
func (rc *ReplicaCluster) KillMaster(ctx context.Context, m *Server) (*Server, time.Duration, error) {
	return rc.KillMasterThen(ctx, m, nil)
}

// KillMasterThen is KillMaster that runs afterKill (when not nil) once m
// is dead and before waiting for the promotion (a test that froze the
// replica resumes it there).
func (rc *ReplicaCluster) KillMasterThen(ctx context.Context, m *Server, afterKill func()) (*Server, time.Duration, error) {
	rep, err := rc.ReplicaOf(ctx, m)
	if err != nil {
		return nil, 0, err
	}
	at := time.Now()
	rc.mu.Lock()
	rc.killed[m] = true
	rc.mu.Unlock()
	m.Kill()
	if afterKill != nil {
		afterKill()
	}
	for {
		if role, err := roleOf(ctx, rep); err == nil && role == "master" {
			break
		}
		select {
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("redistest: replica %s of %s never promoted", rep.Addr, m.Addr)
		case <-time.After(20 * time.Millisecond):
		}
	}
	took := time.Since(at)
	return rep, took, rc.WaitOK(ctx)
}

func roleOf(ctx context.Context, s *Server) (string, error) {
	c, err := redis.DialContext(ctx, "tcp", s.Addr, redis.DialConnectTimeout(time.Second),
		redis.DialReadTimeout(time.Second))
	if err != nil {
		return "", err
	}
	defer c.Close()
	v, err := redis.Values(c.Do("ROLE"))
	if err != nil || len(v) == 0 {
		return "", err
	}
	return redis.String(v[0], nil)
}

// MoveOpts say how MoveTagSlot moves a slot's keys.
type MoveOpts struct {
	// Batch is the number of keys per MIGRATE (default 10, as redis-cli's
	// --cluster-pipeline).
	Batch int
	// Pause is the wait after each MIGRATE, so that clients meet the slot
	// half moved (keys on both nodes: ASK for a moved key, TRYAGAIN for a
	// multi-key call that spans both).
	Pause time.Duration
	// Between, when set, runs after the slot is marked IMPORTING and
	// MIGRATING and before any key moves.
	Between func()
}

// MoveStats is what a slot move did.
type MoveStats struct {
	Keys     int           // keys migrated
	Batches  int           // MIGRATE calls
	Duration time.Duration // from IMPORTING to the last SETSLOT NODE
}

// MoveTagSlot moves the slot of hash tag slot (computed by the caller:
// cluster.TagSlot) from the master serving it to master to, as redis-cli
// --cluster reshard does, while clients keep running: CLUSTER SETSLOT
// IMPORTING on to, MIGRATING on the owner, then MIGRATE of the slot's keys
// in batches with a pause after each (keys created on the owner meanwhile
// move too), then SETSLOT NODE on to, on the owner and on every other live
// master. Clients meet ASK while the slot is half moved and MOVED after.
func (rc *ReplicaCluster) MoveTagSlot(ctx context.Context, slot int, to *Server, o MoveOpts) (MoveStats, error) {
	from, err := rc.NodeOf(ctx, slot)
	if err != nil {
		return MoveStats{}, err
	}
	masters, err := rc.Masters(ctx)
	if err != nil {
		return MoveStats{}, err
	}
	return migrateSlot(ctx, slot, from, to, masters, o, rc.ready)
}

// MoveTagSlot is ReplicaCluster.MoveTagSlot on a cluster without replicas.
func (cl *Cluster) MoveTagSlot(ctx context.Context, slot int, to *Server, o MoveOpts) (MoveStats, error) {
	from, err := cl.NodeOf(ctx, slot)
	if err != nil {
		return MoveStats{}, err
	}
	return migrateSlot(ctx, slot, from, to, cl.Nodes, o, cl.ready)
}

// migrateSlot moves slot from from to to, then waits until ready says every
// node agrees.
func migrateSlot(ctx context.Context, slot int, from, to *Server, masters []*Server, o MoveOpts,
	ready func(context.Context) (bool, string)) (MoveStats, error) {
	var st MoveStats
	if from == to {
		return st, fmt.Errorf("redistest: slot %d is already on %s", slot, to.Addr)
	}
	if o.Batch <= 0 {
		o.Batch = 10
	}
	begin := time.Now()
	src, srcID, err := dialID(ctx, from)
	if err != nil {
		return st, err
	}
	defer src.Close()
	dst, dstID, err := dialID(ctx, to)
	if err != nil {
		return st, err
	}
	defer dst.Close()
	if _, err := dst.Do("CLUSTER", "SETSLOT", slot, "IMPORTING", srcID); err != nil {
		return st, fmt.Errorf("importing: %w", err)
	}
	if _, err := src.Do("CLUSTER", "SETSLOT", slot, "MIGRATING", dstID); err != nil {
		return st, fmt.Errorf("migrating: %w", err)
	}
	if o.Between != nil {
		o.Between()
	}
	host, port, _ := strings.Cut(to.Addr, ":")
	for {
		keys, err := redis.Strings(src.Do("CLUSTER", "GETKEYSINSLOT", slot, o.Batch))
		if err != nil {
			return st, err
		}
		if len(keys) == 0 {
			break
		}
		args := []any{host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if _, err := src.Do("MIGRATE", args...); err != nil {
			return st, fmt.Errorf("migrate: %w", err)
		}
		st.Keys += len(keys)
		st.Batches++
		if o.Pause > 0 {
			select {
			case <-ctx.Done():
				return st, ctx.Err()
			case <-time.After(o.Pause):
			}
		}
	}
	// The target's config epoch first becomes the greatest in the cluster
	// (BUMPEPOCH), so that no stale claim of the slot by the source, still
	// in flight in the gossip (a slot moved away and back leaves some), can
	// win it back: a node that already took the move could otherwise flip
	// back to the source, which no longer claims the slot, and the two
	// would each say the other serves it for good.
	if _, err := dst.Do("CLUSTER", "BUMPEPOCH"); err != nil {
		return st, fmt.Errorf("bumpepoch: %w", err)
	}
	// The target first, then the source, then the others (as redis-cli).
	if err := setSlotNode(ctx, slot, dstID, []*Server{to, from}); err != nil {
		return st, err
	}
	var others []*Server
	for _, n := range masters {
		if n != from && n != to {
			others = append(others, n)
		}
	}
	if err := setSlotNode(ctx, slot, dstID, others); err != nil {
		return st, err
	}
	st.Duration = time.Since(begin)
	// While the nodes disagree, the target bumps its epoch again and the
	// slot is set again on every master, once a second (as redis-cli
	// --cluster fix would). Agreement must hold twice, 300 ms apart (a few
	// gossip rounds), so that a late flip is caught here and mended rather
	// than left to the next test.
	last, again := time.Now(), 0
	agreed := time.Time{}
	err = waitReady(ctx, func(ctx context.Context) (bool, string) {
		ok, why := ready(ctx)
		if ok {
			if agreed.IsZero() {
				agreed = time.Now()
			}
			if time.Since(agreed) < 300*time.Millisecond {
				return false, "agreed, checking that it holds"
			}
			return true, ""
		}
		agreed = time.Time{}
		if time.Since(last) > time.Second {
			last = time.Now()
			again++
			if _, err := dst.Do("CLUSTER", "BUMPEPOCH"); err != nil {
				why += "; bumpepoch: " + err.Error()
			}
			if err := setSlotNode(ctx, slot, dstID, masters); err != nil {
				why += "; setting the slot again: " + err.Error()
			}
		}
		if again > 0 {
			why += fmt.Sprintf(" (slot %d set again %d times)", slot, again)
		}
		return ok, why
	})
	return st, err
}

// setSlotNode tells each of nodes that node id serves slot.
func setSlotNode(ctx context.Context, slot int, id string, nodes []*Server) error {
	for _, n := range nodes {
		c, err := redis.DialContext(ctx, "tcp", n.Addr)
		if err != nil {
			return err
		}
		_, err = c.Do("CLUSTER", "SETSLOT", slot, "NODE", id)
		c.Close()
		if err != nil {
			return fmt.Errorf("%s: setslot %d node: %w", n.Addr, slot, err)
		}
	}
	return nil
}

// Pid returns the process id of a server this package started (0 when it
// is not running), for tests that freeze it (SIGSTOP, SIGCONT).
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}
