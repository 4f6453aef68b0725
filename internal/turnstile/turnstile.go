// Package turnstile hands out a fixed number of slots to numbered
// tickets in ticket order, whatever order the tickets come to wait in: a
// worker's read-ahead takes tasks before a handler slot is free, and the
// slots must still go to its takings in the order they were launched.
package turnstile

import "sync"

// Turnstile hands out a queue's handler slots to its takings in launch
// order: each taking has a ticket (numbered from 1 as launched), and a
// slot goes to the lowest ticket that still waits for one.
type Turnstile struct {
	mu      sync.Mutex
	free    int                      // slots not held
	next    uint64                   // the ticket served next
	waiting map[uint64]chan struct{} // tickets waiting, closed when served
	gone    map[uint64]bool          // tickets past next that will never wait
}

// New returns a turnstile of slots slots, serving ticket 1 first.
func New(slots int) *Turnstile {
	return &Turnstile{free: slots, next: 1, waiting: map[uint64]chan struct{}{}, gone: map[uint64]bool{}}
}

// Wait returns nil when ticket k holds a slot at once, or a channel closed
// when it gets one.
func (t *Turnstile) Wait(k uint64) chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if k == t.next && t.free > 0 {
		t.free--
		t.next++
		t.serve()
		return nil
	}
	c := make(chan struct{})
	t.waiting[k] = c
	return c
}

// Leave gives up ticket k's wait and reports true, or false when k was
// served meanwhile (it holds a slot).
func (t *Turnstile) Leave(k uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.waiting[k]; !ok {
		return false
	}
	delete(t.waiting, k)
	t.gone[k] = true
	t.serve()
	return true
}

// Skip says that ticket k will never wait (its taking is not run).
func (t *Turnstile) Skip(k uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if k >= t.next {
		t.gone[k] = true
		t.serve()
	}
}

// Done frees a slot.
func (t *Turnstile) Done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.free++
	t.serve()
}

// serve hands free slots to the waiting tickets in order, passing over
// those gone; it stops at a ticket that has not come to wait yet.
func (t *Turnstile) serve() {
	for {
		if t.gone[t.next] {
			delete(t.gone, t.next)
			t.next++
			continue
		}
		c, ok := t.waiting[t.next]
		if !ok || t.free == 0 {
			return
		}
		delete(t.waiting, t.next)
		close(c)
		t.free--
		t.next++
	}
}
