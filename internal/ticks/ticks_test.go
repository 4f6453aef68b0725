package ticks

import (
	"sort"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

// MissedRunOnce fires the latest missed tick, however many were missed:
// past MaxScan of them the walk jumps ahead, and the latest is found by
// looking back (it fired the MaxScan+1st before).
func TestMissedRunOnceFiresTheLatestMissedTick(t *testing.T) {
	minute := time.Minute.Milliseconds()
	cronMin, err := Cron("Cron", "* * * * *", "")
	if err != nil {
		t.Fatal(err)
	}
	grace := 10 * time.Second.Milliseconds()
	for name, c := range map[string]struct {
		tk     Ticker
		period int64
	}{"every minute": {Every(minute), minute}, "cron every minute": {cronMin, minute}, "every second": {Every(1000), 1000}} {
		for _, missed := range []int64{3, MaxScan - 1, MaxScan, MaxScan + 1, 5 * MaxScan} {
			now := int64(1_800_000_000_000) + 7_000 // 7 s past a minute
			first := c.tk.Next(now - grace - missed*c.period - 1)
			want := first // the oracle: every tick walked
			for n := c.tk.Next(want); n <= now-grace-1; n = c.tk.Next(n) {
				want = n
			}
			p := PlanTicks(c.tk, first, now, grace, true)
			if len(p.Fire) == 0 || p.Fire[0] != want {
				t.Errorf("%s, %d missed: fired %v first, want the latest missed %d", name, missed, p.Fire[:min(len(p.Fire), 1)], want)
			}
			if p.Next <= now-grace || p.Next > now+c.period {
				t.Errorf("%s, %d missed: next %d, want the first on-time tick after %d", name, missed, p.Next, now-grace)
			}
		}
	}
}

// A cron schedule fires at every time whose wall clock in its zone matches
// it (docs/guide/scheduling.md: a time that occurs twice fires twice, one
// that does not exist does not fire), also around a change of offset by
// other than one hour, where the cron library's own walk stepped over ticks:
// in Australia/Lord_Howe (30 minutes) a daily 00:00 skipped 8 April 2024 and
// a monthly one 1 November 2023; in Antarctica/Troll (2 hours) a 02:00 after
// 01:00 on the night the offset goes back.
func TestCronTicksAroundZoneChanges(t *testing.T) {
	const starBit = 1 << 63
	// matches is the oracle: the wall clock of t in s's zone matches s.
	matches := func(s *cron.SpecSchedule, t time.Time) bool {
		if 1<<uint(t.Second())&s.Second == 0 || 1<<uint(t.Minute())&s.Minute == 0 || 1<<uint(t.Hour())&s.Hour == 0 || 1<<uint(t.Month())&s.Month == 0 {
			return false
		}
		dom, dow := 1<<uint(t.Day())&s.Dom != 0, 1<<uint(t.Weekday())&s.Dow != 0
		if s.Dom&starBit != 0 || s.Dow&starBit != 0 {
			return dom && dow
		}
		return dom || dow
	}
	specs := []string{"0 0 0 * * *", "0 0 1 * * *", "0 0 2 * * *", "0 30 2 * * *", "0 0 3 * * *", "0 0 23 * * *", "0 0 * * * *", "0 */15 * * * *", "0 0 0 * * SUN", "0 0 0 1 * *"}
	for _, zone := range []string{"Australia/Lord_Howe", "Antarctica/Troll", "Europe/Paris", "America/New_York"} {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Skipf("no zone data: %v", err)
		}
		for _, spec := range specs {
			tk, err := Cron("Cron", spec, zone)
			if err != nil {
				t.Fatal(err)
			}
			s := tk.(cronTicker).s.(*cron.SpecSchedule)
			start := time.Date(2023, 9, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
			end := time.Date(2024, 11, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
			var want []int64
			for m := start + 60000; m < end+40*24*3600*1000; m += 60000 {
				if matches(s, time.UnixMilli(m).In(loc)) {
					want = append(want, m)
				}
			}
			// From tick to tick, as a schedule advances.
			var got []int64
			for x := tk.Next(start); x != 0 && x < end; x = tk.Next(x) {
				got = append(got, x)
			}
			for i, w := range want {
				if w >= end {
					break
				}
				if i >= len(got) || got[i] != w {
					g := "none"
					if i < len(got) {
						g = time.UnixMilli(got[i]).In(loc).String()
					}
					t.Errorf("%s %q: tick %d is %s, want %s", zone, spec, i, g, time.UnixMilli(w).In(loc))
					break
				}
			}
			// From any time (a registration, a resume), around each
			// change of offset.
			for at := time.UnixMilli(start).In(loc); ; {
				_, ch := at.ZoneBounds()
				if ch.IsZero() || ch.UnixMilli() >= end {
					break
				}
				at = ch
				for x := ch.UnixMilli() - 30*3600*1000 + 777; x < ch.UnixMilli()+30*3600*1000; x += 7 * 60000 {
					i := sort.Search(len(want), func(i int) bool { return want[i] > x })
					if g := tk.Next(x); g != want[i] {
						t.Errorf("%s %q: next(%s) = %s, want %s", zone, spec, time.UnixMilli(x).In(loc), time.UnixMilli(g).In(loc), time.UnixMilli(want[i]).In(loc))
						break
					}
				}
			}
		}
	}
}
