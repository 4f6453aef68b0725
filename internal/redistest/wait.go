package redistest

import (
	"context"
	"time"
)

// PollEvery is how often Poll, WaitFor and Eventually check their condition.
const PollEvery = 10 * time.Millisecond

// Poll calls cond every PollEvery until it returns true (Poll returns nil)
// or ctx ends (Poll returns ctx.Err()). It is the one polling loop of the
// tests: use it only for a state the code sends no signal about (a key's
// TTL running out in Redis, a row in a report); wait on the code's event,
// channel or returned call when there is one.
func Poll(ctx context.Context, cond func() bool) error {
	t := time.NewTicker(PollEvery)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// WaitFor polls cond (see Poll) and fails the test when it does not hold
// within d; what names the condition in the failure.
func WaitFor(t TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if Poll(ctx, cond) != nil {
		t.Fatalf("timed out after %s waiting for %s", d, what)
	}
}

// Eventually polls cond (see Poll) until it returns "", and fails the test
// with cond's last answer when that takes longer than d.
func Eventually(t TB, d time.Duration, cond func() string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var why string
	if Poll(ctx, func() bool { why = cond(); return why == "" }) != nil {
		t.Fatalf("after %s: %s", d, why)
	}
}

// Pause waits d, or less when ctx ends first (Pause then returns
// ctx.Err()). Fault suites pace their faults with it (the time between two
// kills, how long a process stays frozen), so a test that is stopped stops
// at once instead of sleeping out its schedule.
func Pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Within polls cond (see Poll) and reports whether it held within d, for a
// test that says itself what it waited for when it did not.
func Within(d time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return Poll(ctx, cond) == nil
}
