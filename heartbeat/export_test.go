package heartbeat

// Beaten returns a channel closed when the beat under way, or else the next
// one, is over (good or not): its renewal is in Redis and, when it was good,
// Session.Until and Fresh have moved on. Tests wait on it instead of polling.
func (k *Keeper) Beaten() <-chan struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.beaten
}
