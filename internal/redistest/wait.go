package redistest

import "time"

// Eventually reports whether cond holds within d, checking it every 10 ms:
// for state that only Redis or another process can show (no signal to wait
// on). A test states what it waited for when it fails.
func Eventually(d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		if time.Now().After(end) {
			return false
		}
		<-t.C
	}
	return true
}
