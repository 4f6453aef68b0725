package worqr

import (
	"testing"
	"time"
)

// MissedRunOnce fires the latest missed tick, however many were missed:
// past maxScan of them the walk jumps ahead, and the latest is found by
// looking back (it fired the maxScan+1st before).
func TestMissedRunOnceFiresTheLatestMissedTick(t *testing.T) {
	minute := time.Minute.Milliseconds()
	cronMin, err := parseCron("Cron", "* * * * *", "")
	if err != nil {
		t.Fatal(err)
	}
	grace := 10 * time.Second.Milliseconds()
	for name, c := range map[string]struct {
		tk     ticker
		period int64
	}{"every minute": {everyTicker(minute), minute}, "cron every minute": {cronMin, minute}, "every second": {everyTicker(1000), 1000}} {
		for _, missed := range []int64{3, maxScan - 1, maxScan, maxScan + 1, 5 * maxScan} {
			now := int64(1_800_000_000_000) + 7_000 // 7 s past a minute
			first := c.tk.next(now - grace - missed*c.period - 1)
			want := first // the oracle: every tick walked
			for n := c.tk.next(want); n <= now-grace-1; n = c.tk.next(n) {
				want = n
			}
			p := planTicks(c.tk, first, now, grace, MissedRunOnce)
			if len(p.fire) == 0 || p.fire[0] != want {
				t.Errorf("%s, %d missed: fired %v first, want the latest missed %d", name, missed, p.fire[:min(len(p.fire), 1)], want)
			}
			if p.next <= now-grace || p.next > now+c.period {
				t.Errorf("%s, %d missed: next %d, want the first on-time tick after %d", name, missed, p.next, now-grace)
			}
		}
	}
}
