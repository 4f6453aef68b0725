package engine

import "sync"

// Unsure is a queue's need for a release: whether a session of its driver
// may hold takings of the queue that nobody runs, and so must put them
// back (rdb.Store.ReleaseCheck, with the pids it does run) before it takes
// from the queue again. Two things make a queue unsure:
//   - a take (or a hand-off) whose takings were not all handed to a
//     runner: its reply was lost after Redis applied it, or a taking found
//     no room. Mark names the session.
//   - a switch of server (a failover: rdb.Store.Switches counts them). An
//     end the old server acknowledged may not have reached the new one, so
//     the taking is still held there with nobody running it; and a take
//     the old server acknowledged may be missing there, so a taking being
//     run is no longer the session's (the release's check finds it).
//     Switched records it against the current session and asks for a
//     confirmation: until a beat of the session reached the new server,
//     its keepalive may be missing there and a reaper may be requeueing
//     what it holds. A driver that releases only after a good beat (a
//     remote session) has that confirmation by construction.
//
// Only the current session is ever unsure: a session that is no longer
// current is dead, and the reaper requeues what it held. The zero Unsure
// is sure, and has seen no switch (call Init with the pool's count).
// Safe for concurrent use; it never calls out while it holds its lock.
type Unsure struct {
	mu       sync.Mutex
	owner    string // the session that may hold takings nobody runs; "" none
	switches uint64 // the pool's switch count when last seen
	confirm  bool   // a switch was seen and no confirmation came since
}

// Init records the pool's switch count at the start: switches before it
// concern no taking of this queue.
func (u *Unsure) Init(switches uint64) {
	u.mu.Lock()
	u.switches = switches
	u.mu.Unlock()
}

// Mark records that session may hold takings nobody runs ("" clears it:
// a release of the session's takings succeeded).
func (u *Unsure) Mark(session string) {
	u.mu.Lock()
	u.owner = session
	u.mu.Unlock()
}

// Switched records the pool's switch count n, read before the call that
// will act on it. A count above the last one seen makes current unsure
// and asks for a confirmation; it reports whether it did.
func (u *Unsure) Switched(n uint64, current string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if n <= u.switches {
		return false
	}
	u.switches, u.owner, u.confirm = n, current, true
	return true
}

// For returns the unsure session when it is s, the caller's, and "" when
// the queue is sure or s is not the one. An unsure session that is no
// longer current is forgotten (the reaper requeues what it held), never
// one that the caller's stale s says is another.
func (u *Unsure) For(s, current string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.owner != current {
		u.owner = ""
	}
	if u.owner != s {
		return ""
	}
	return u.owner
}

// Owner returns the unsure session, "" when the queue is sure.
func (u *Unsure) Owner() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.owner
}

// NeedsConfirm reports whether a switch awaits its confirmation, and the
// switch count it was seen at.
func (u *Unsure) NeedsConfirm() (bool, uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.confirm, u.switches
}

// Confirmed ends the wait for a confirmation of the switch seen at count
// seen (a beat begun after it was acknowledged), unless a later switch
// came meanwhile: that one needs a beat of its own, begun after it. It
// reports whether the wait ended.
func (u *Unsure) Confirmed(seen uint64) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.switches != seen {
		return false
	}
	u.confirm = false
	return true
}
