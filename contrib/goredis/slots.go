package goredis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/worqr/worqr-go/internal/rdb/cluster"
)

// slotMap is the cluster's slot map as one CLUSTER SHARDS read: the master
// that serves each slot, "" for a slot whose master is down (marked failed)
// or that no node serves.
type slotMap struct {
	slots   []string // cluster.Slots entries
	masters map[string]bool
	read    time.Time
}

// slotWatch keeps a Cluster's own slot map, for what the ClusterClient
// does not tell: which slots no master serves (MasterOf "") and when a
// master left the map (Switches: a failover, or its last slot moved away;
// writes it acknowledged may not have reached its replica).
//
// The map is read (CLUSTER SHARDS of one master after another, after the
// ClusterClient read its own) when the Cluster is made, by Refresh, soon
// after a connection saw MOVED, CLUSTERDOWN, TRYAGAIN or a broken
// connection, and when a map older than mapMaxAge is looked at. A read in
// the background waits at least refreshGap after the one before.
type slotWatch struct {
	c            *redis.ClusterClient
	tls          bool // the nodes are reached on their TLS ports
	ctxDeadlines bool // the client's ContextTimeoutEnabled

	m atomic.Pointer[slotMap]

	// refreshMu is held by the one read running; last is when the last
	// one ended, guarded by it.
	refreshMu sync.Mutex
	last      time.Time

	mu       sync.Mutex
	switched chan struct{} // closed (and replaced) at each switch; guarded by mu
	switches atomic.Uint64
}

const (
	// mapMaxAge is the age past which a map looked at is read again in
	// the background (redisconn.Cluster reads its map every 30 s too).
	mapMaxAge = 30 * time.Second
	// refreshGap is the least time between two reads in the background.
	refreshGap = 100 * time.Millisecond
	// refreshFor bounds a read in the background, every master asked.
	refreshFor = 5 * time.Second
)

func newSlotWatch(c *redis.ClusterClient) *slotWatch {
	w := &slotWatch{c: c, tls: c.Options().TLSConfig != nil, ctxDeadlines: c.Options().ContextTimeoutEnabled,
		switched: make(chan struct{})}
	w.soon() // the first map: switches count from there
	return w
}

// masterOf returns the master that serves slot, as last read; the first
// call reads the map if no read ended yet.
func (w *slotWatch) masterOf(slot int) string {
	m := w.m.Load()
	if m == nil {
		w.refreshMu.Lock() // after the first read, if it is running
		if m = w.m.Load(); m == nil {
			ctx, cancel := context.WithTimeout(context.Background(), refreshFor)
			_ = w.refreshLocked(ctx)
			cancel()
			m = w.m.Load()
		}
		w.refreshMu.Unlock()
		if m == nil {
			return ""
		}
	}
	w.checkAge(m)
	return m.slots[slot]
}

// checkAge reads the map again, in the background, when m is old.
func (w *slotWatch) checkAge(m *slotMap) {
	if m == nil || time.Since(m.read) > mapMaxAge {
		w.soon()
	}
}

// soon reads the map in the background unless a read is running or one
// ended less than refreshGap ago.
func (w *slotWatch) soon() {
	if !w.refreshMu.TryLock() {
		return
	}
	if time.Since(w.last) < refreshGap {
		w.refreshMu.Unlock()
		return
	}
	go func() {
		defer w.refreshMu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), refreshFor)
		defer cancel()
		_ = w.refreshLocked(ctx)
	}()
}

// refresh reads the map now (after the read running, if one is).
func (w *slotWatch) refresh(ctx context.Context) error {
	w.refreshMu.Lock()
	defer w.refreshMu.Unlock()
	return w.refreshLocked(ctx)
}

func (w *slotWatch) refreshLocked(ctx context.Context) error {
	defer func() { w.last = time.Now() }()
	var nodes []*redis.Client
	var mu sync.Mutex
	// ForEachMaster reads the ClusterClient's own map first: the masters
	// asked, and the nodes the connections go to, are those of a fresh
	// map.
	err := w.c.ForEachMaster(ctx, func(_ context.Context, node *redis.Client) error {
		mu.Lock()
		nodes = append(nodes, node)
		mu.Unlock()
		return nil
	})
	if err != nil && len(nodes) == 0 {
		return fmt.Errorf("goredis: read the slot map: %w", err)
	}
	rand.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	var errs []error
	for i, node := range nodes {
		// Each node asked has its share of the time left: one that hangs
		// (frozen, cut off) must not use up the time of the others.
		share := time.Second
		if dl, ok := ctx.Deadline(); ok {
			share = max(time.Until(dl)/time.Duration(len(nodes)-i), 100*time.Millisecond)
		}
		m, err := w.read(ctx, node, share)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", node.Options().Addr, err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		w.install(m)
		return nil
	}
	return fmt.Errorf("goredis: no master answered CLUSTER SHARDS: %w", errors.Join(errs...))
}

// read reads the map from node within timeout, on a connection of the
// adapter (cluster.ReadShards, the reader redisconn.Cluster uses): sent
// once, as every call on it (another node is asked rather than this one
// again).
func (w *slotWatch) read(ctx context.Context, node *redis.Client, timeout time.Duration) (*slotMap, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// node.WithTimeout bounds the reply when the client does not apply a
	// context's deadline (ContextTimeoutEnabled false).
	c := &conn{node: node.WithTimeout(timeout), ctxDeadlines: w.ctxDeadlines, subs: node, ssubs: node}
	defer c.Close()
	shards, err := cluster.ReadShards(ctx, c, w.tls)
	if err != nil {
		return nil, err
	}
	m := &slotMap{slots: make([]string, cluster.Slots), masters: map[string]bool{}, read: time.Now()}
	for _, sh := range shards {
		for i := 0; i+1 < len(sh.Ranges); i += 2 {
			for s := max(sh.Ranges[i], 0); s <= min(sh.Ranges[i+1], cluster.Slots-1); s++ {
				m.slots[s] = sh.Addr
			}
		}
		m.masters[sh.Addr] = true
	}
	return m, nil
}

// install makes m the map, and counts a switch when a master of the map
// before is not in m.
func (w *slotWatch) install(m *slotMap) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if old := w.m.Load(); old != nil {
		for a := range old.masters {
			if !m.masters[a] {
				w.switches.Add(1)
				close(w.switched)
				w.switched = make(chan struct{})
				break
			}
		}
	}
	w.m.Store(m)
}
