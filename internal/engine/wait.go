package engine

import (
	"context"
	"time"
)

// Poke signals c (of capacity 1) without blocking: a signal already
// pending stands for this one.
func Poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Sleep waits d, or until ctx ends; it reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
