package worqr

import (
	"context"
	"sync"

	"github.com/gomodule/redigo/redis"
)

// waitHub is a Client's one subscription to its namespace's events
// channel, shared by every Wait and WaitRun running on the Client. The
// events channel is the only channel a wait listens to, and there is one
// per namespace, so one subscription serves them all: on a single Redis (or
// a Sentinel's primary) one SUBSCRIBE connection of the pool; on a Redis
// Cluster the same, on the node that serves the registry's slot (the
// events are published with plain PUBLISH, which a cluster broadcasts; see
// rdb.Store.Listen).
//
// The subscription starts with the first wait and stops when the last one
// leaves (a Client with no wait running holds no connection). It is made
// again after a failure, and each time it is confirmed (the first time
// and after every resubscribe) every wait reads what it waits for: an end
// published before the subscription was active, or while it was down, was
// not heard, and is read. A wait reads only once the subscription is
// active, so an end that comes after its read is heard.
//
// The waits' reads go through a gate of a few at once, so that however
// many waits a Client runs they take a bounded share of a pool capped by
// MaxActive.
type waitHub struct {
	c     *Client
	reads chan struct{} // the read gate: one token per read under way

	mu      sync.Mutex
	waiters map[string]map[*waiter]struct{} // by the id waited for
	n       int                             // waiters registered
	sub     *waitSub                        // the running subscription; nil with no waiter
}

// waitSub is one run of the shared subscription, from its start to the
// departure of the last waiter.
type waitSub struct {
	cancel context.CancelFunc
	ready  bool // subscribed, and not known to have failed since (hub.mu)
}

// waiter is one Wait or WaitRun registered with the hub.
type waiter struct {
	id    string           // the task or run id waited for
	wake  func(Event) bool // whether an event about id (or a child of it) is an end to read
	woken chan struct{}    // poked: read now
}

// waitReadWidth is how many of a Client's waits may read at once: at most
// 8, and with a pool capped by MaxActive (a *redis.Pool, as
// redisconn.NewPool returns, or a redisconn.Cluster or Sentinel, per node)
// at most half of what
// the subscription leaves, at least 1.
func waitReadWidth(pool ConnGetter) int {
	capped := 0
	switch p := pool.(type) {
	case *redis.Pool:
		capped = p.MaxActive
	case interface{ MaxActive() int }: // a redisconn.Cluster or Sentinel
		capped = p.MaxActive()
	}
	if capped > 0 {
		return max(1, min(8, (capped-1)/2))
	}
	return 8
}

func newWaitHub(c *Client, pool ConnGetter) *waitHub {
	return &waitHub{c: c, reads: make(chan struct{}, waitReadWidth(pool)), waiters: map[string]map[*waiter]struct{}{}}
}

// add registers w, starting the subscription when none runs. When it is
// active already, w is poked at once to read.
func (h *waitHub) add(w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ws := h.waiters[w.id]
	if ws == nil {
		ws = map[*waiter]struct{}{}
		h.waiters[w.id] = ws
	}
	ws[w] = struct{}{}
	h.n++
	switch {
	case h.sub == nil:
		ctx, cancel := context.WithCancel(context.Background())
		s := &waitSub{cancel: cancel}
		h.sub = s
		go h.run(ctx, s)
	case h.sub.ready:
		poke(w.woken)
	}
}

// remove unregisters w, and stops the subscription when it was the last.
func (h *waitHub) remove(w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ws := h.waiters[w.id]
	if _, ok := ws[w]; !ok {
		return
	}
	delete(ws, w)
	if len(ws) == 0 {
		delete(h.waiters, w.id)
	}
	if h.n--; h.n == 0 && h.sub != nil {
		h.sub.cancel() // it unsubscribes and gives its connection back on its own
		h.sub = nil
	}
}

// run is the goroutine of subscription s, until its context ends.
func (h *waitHub) run(ctx context.Context, s *waitSub) {
	follow(ctx, h.c.st, h.c.cfg.Logger, func() { h.ready(s) }, func() { h.down(s) }, h.dispatch)
}

// ready marks s active and pokes every waiter to read: on the first
// subscription what ended before it, after a resubscribe what ended while
// the subscription was down (its events were lost).
func (h *waitHub) ready(s *waitSub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sub != s {
		return // stopped meanwhile
	}
	s.ready = true
	for _, ws := range h.waiters {
		for w := range ws {
			poke(w.woken)
		}
	}
}

// down marks s failed: a waiter that comes before it is active again reads
// once it is.
func (h *waitHub) down(s *waitSub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sub == s {
		s.ready = false
	}
}

// dispatch pokes the waiters that e concerns: those waiting for its task's
// id, and those waiting for a run of which it may be a child (a child's id
// is "<run id>.<xid>": the id is looked up up to each of its dots). Each
// waiter's wake decides.
func (h *waitHub) dispatch(e Event) {
	if e.TaskID == "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.offer(e.TaskID, e)
	for i := 0; i < len(e.TaskID); i++ {
		if e.TaskID[i] == '.' {
			h.offer(e.TaskID[:i], e)
		}
	}
}

// offer pokes the waiters of id that accept e. h.mu held.
func (h *waitHub) offer(id string, e Event) {
	for w := range h.waiters[id] {
		if w.wake(e) {
			poke(w.woken)
		}
	}
}

// acquire takes a token of the read gate, or returns false (holding none)
// when ctx ended first.
func (h *waitHub) acquire(ctx context.Context) bool {
	select {
	case h.reads <- struct{}{}:
		if ctx.Err() != nil {
			h.release()
			return false
		}
		return true
	case <-ctx.Done():
		return false
	}
}

// release gives a token of the read gate back.
func (h *waitHub) release() { <-h.reads }
