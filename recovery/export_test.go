package recovery

import "time"

// SetCallTimeout sets the bound of each of r's calls of the lease and the
// mover (CallTimeout by default).
func (r *Reaper) SetCallTimeout(d time.Duration) { r.callTimeout = d }
