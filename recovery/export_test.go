package recovery

import "time"

// SetCallTimeout sets the bound of each of r's calls of the lease and the
// mover (CallTimeout by default).
func (r *Reaper) SetCallTimeout(d time.Duration) { r.callTimeout = d }

// OnTick sets a test signal: f is called once Run has handled each tick,
// after the lease attempt and, when it held the lease (leased), the pass.
// Set it before Run.
func (r *Reaper) OnTick(f func(leased bool)) { r.ticked = f }
