package eventbus

import (
	"context"
	"sync"

	"github.com/worqr/worqr-go/internal/engine"
)

// Hub is a process's one subscription to its namespace's events channel,
// shared by every wait it runs (worqr's Client.Wait and WaitRun), and to
// the channels its waits add (Waiter.Channel: a queue's ended channel, on
// which the end of a task a wait marked is published at once). There is
// one events channel per namespace, so one subscription serves every wait:
// on a single Redis (or a Sentinel's primary) one SUBSCRIBE connection of
// the pool; on a Redis Cluster the same, on the node that serves the
// registry's slot (the events are published with plain PUBLISH, which a
// cluster broadcasts), and one SSUBSCRIBE connection per master that
// serves an added channel (see rdb.Store.Listen). A wait that adds a
// channel the subscription lacks makes it again with that channel too
// (every wait then reads again, as after a failure); the channels stay
// until the subscription stops.
//
// The subscription starts with the first wait and stops when the last one
// leaves (a Client with no wait running holds no connection). It is made
// again after a failure, and each time it is confirmed (the first time
// and after every resubscribe) every wait reads what it waits for: an end
// published before the subscription was active, or while it was down, was
// not heard, and is read. A wait reads only once the subscription is
// active, so an end that comes after its read is heard.
//
// The waits' reads go through a gate of a few at once (Acquire), so that
// however many waits a process runs they take a bounded share of a pool
// capped by MaxActive.
type Hub[E any] struct {
	follow func(ctx context.Context, channels []string, ready, down func(), fn func(E)) // subscribes until ctx ends
	idOf   func(E) string                                                               // the task id an event is about
	reads  chan struct{}                                                                // the read gate: one token per read under way

	mu      sync.Mutex
	waiters map[string]map[*Waiter[E]]struct{} // by the id waited for
	n       int                                // waiters registered
	sub     *hubSub                            // the running subscription; nil with no waiter
}

// hubSub is one run of the shared subscription, from its start to the
// departure of the last waiter.
type hubSub struct {
	cancel   context.CancelFunc
	ready    bool     // subscribed, and not known to have failed since (hub.mu)
	channels []string // the channels the waiters added, beside the events
}

// has reports whether s listens to channel ("" : the events only).
func (s *hubSub) has(channel string) bool {
	if channel == "" {
		return true
	}
	for _, c := range s.channels {
		if c == channel {
			return true
		}
	}
	return false
}

// Waiter is one wait registered with the hub.
type Waiter[E any] struct {
	ID      string        // the task or run id waited for
	Channel string        // a channel to listen to beside the events ("": none)
	Wake    func(E) bool  // whether an event about ID (or a child of it) is an end to read
	Woken   chan struct{} // poked (capacity 1): read now
}

// NewHub returns a hub whose subscription is follow, whose events are
// about the task idOf says, and whose read gate lets width reads at once.
func NewHub[E any](width int, idOf func(E) string, follow func(ctx context.Context, channels []string, ready, down func(), fn func(E))) *Hub[E] {
	return &Hub[E]{follow: follow, idOf: idOf, reads: make(chan struct{}, width), waiters: map[string]map[*Waiter[E]]struct{}{}}
}

// Add registers w, starting the subscription when none runs, or making it
// again when it lacks w's channel. When it is active already (and has the
// channel), w is poked at once to read.
func (h *Hub[E]) Add(w *Waiter[E]) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ws := h.waiters[w.ID]
	if ws == nil {
		ws = map[*Waiter[E]]struct{}{}
		h.waiters[w.ID] = ws
	}
	ws[w] = struct{}{}
	h.n++
	switch {
	case h.sub == nil:
		h.start(nil, w.Channel)
	case !h.sub.has(w.Channel):
		// The old subscription ends on its own; the new one pokes every
		// waiter once it is confirmed (what ended in between is read).
		h.sub.cancel()
		h.start(h.sub.channels, w.Channel)
	case h.sub.ready:
		engine.Poke(w.Woken)
	}
}

// start runs a subscription to the events and to channels and add ("":
// none). h.mu held.
func (h *Hub[E]) start(channels []string, add string) {
	chs := append([]string(nil), channels...)
	if add != "" {
		chs = append(chs, add)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &hubSub{cancel: cancel, channels: chs}
	h.sub = s
	go h.run(ctx, s)
}

// Remove unregisters w, and stops the subscription when it was the last.
func (h *Hub[E]) Remove(w *Waiter[E]) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ws := h.waiters[w.ID]
	if _, ok := ws[w]; !ok {
		return
	}
	delete(ws, w)
	if len(ws) == 0 {
		delete(h.waiters, w.ID)
	}
	if h.n--; h.n == 0 && h.sub != nil {
		h.sub.cancel() // it unsubscribes and gives its connection back on its own
		h.sub = nil
	}
}

// run is the goroutine of subscription s, until its context ends.
func (h *Hub[E]) run(ctx context.Context, s *hubSub) {
	h.follow(ctx, s.channels, func() { h.ready(s) }, func() { h.down(s) }, h.dispatch)
}

// ready marks s active and pokes every waiter to read: on the first
// subscription what ended before it, after a resubscribe what ended while
// the subscription was down (its events were lost).
func (h *Hub[E]) ready(s *hubSub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sub != s {
		return // stopped meanwhile
	}
	s.ready = true
	for _, ws := range h.waiters {
		for w := range ws {
			engine.Poke(w.Woken)
		}
	}
}

// down marks s failed: a waiter that comes before it is active again reads
// once it is.
func (h *Hub[E]) down(s *hubSub) {
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
func (h *Hub[E]) dispatch(e E) {
	id := h.idOf(e)
	if id == "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.offer(id, e)
	for i := 0; i < len(id); i++ {
		if id[i] == '.' {
			h.offer(id[:i], e)
		}
	}
}

// offer pokes the waiters of id that accept e. h.mu held.
func (h *Hub[E]) offer(id string, e E) {
	for w := range h.waiters[id] {
		if w.Wake(e) {
			engine.Poke(w.Woken)
		}
	}
}

// Acquire takes a token of the read gate, or returns false (holding none)
// when ctx ended first.
func (h *Hub[E]) Acquire(ctx context.Context) bool {
	select {
	case h.reads <- struct{}{}:
		if ctx.Err() != nil {
			h.Release()
			return false
		}
		return true
	case <-ctx.Done():
		return false
	}
}

// Release gives a token of the read gate back.
func (h *Hub[E]) Release() { <-h.reads }
