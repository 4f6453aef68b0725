// Package ticks places the ticks of worqr's periodic schedules: every
// multiple of an interval, or the times a cron expression names in a time
// zone, and which due ticks one pass of a Scheduler fires. Pure functions
// of unix milliseconds: no Redis, no clock.
package ticks

import (
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/worqr/worqr-go/internal/engine"
)

const (
	// MaxTicksPerPass is how many on-time ticks of one schedule one pass
	// enqueues (the rest are enqueued by the next pass, at once).
	MaxTicksPerPass = 100
	// MaxScan bounds the ticks walked to find the due ones.
	MaxScan = 10000
)

// Ticker places the ticks of a schedule.
type Ticker interface {
	// Next returns the first tick strictly after t (unix ms), 0 if none.
	Next(t int64) int64
}

// Every ticks at every multiple of its interval (ms) since the Unix epoch.
type Every int64

// Next returns the first multiple of e after t.
func (e Every) Next(t int64) int64 {
	n := int64(e)
	if t < 0 {
		return 0
	}
	return (t/n + 1) * n
}

type cronTicker struct{ s cron.Schedule }

// Next returns the first time after t whose wall clock in the schedule's
// zone matches it.
func (c cronTicker) Next(t int64) int64 {
	ss, ok := c.s.(*cron.SpecSchedule)
	if !ok {
		n := c.s.Next(time.UnixMilli(t).UTC())
		if n.IsZero() {
			return 0
		}
		return n.UnixMilli()
	}
	// The cron library walks a day's hours by adding an hour of real time
	// and rebuilds times with time.Date: across a change of the zone's
	// offset by other than one hour (Australia/Lord_Howe's 30 minutes,
	// Antarctica/Troll's two hours) it steps over matching times, even a
	// day's or a month's only one (a daily 00:00 would miss the day after
	// the change, a monthly one a whole month). Near such a change the
	// ticks are found minute by minute instead; elsewhere its answer stands.
	from := t
	for {
		n := ss.Next(time.UnixMilli(from).UTC())
		if n.IsZero() {
			return 0
		}
		end := n.UnixMilli()
		lo, hi, odd := oddZoneChange(ss.Location, from, end)
		if !odd || end < lo {
			return end
		}
		if m := scanTicks(ss, max(from, lo-1), hi); m != 0 {
			return m
		}
		from = hi
	}
}

// oddZoneWindow is how far on either side of an odd change of offset the
// ticks are looked for minute by minute: the cron library's walk goes
// wrong on the days around it.
const oddZoneWindow = 48 * time.Hour

// oddZoneChange returns the window [lo, hi] (unix ms) around the first
// change of loc's offset by other than one hour whose window reaches
// into [from, to], if any.
func oddZoneChange(loc *time.Location, from, to int64) (lo, hi int64, ok bool) {
	w := oddZoneWindow.Milliseconds()
	at := time.UnixMilli(from - w).In(loc)
	for {
		_, end := at.ZoneBounds()
		if end.IsZero() || end.UnixMilli()-w > to {
			return 0, 0, false
		}
		_, before := end.Add(-time.Second).Zone()
		_, after := end.Zone()
		if d := after - before; d != 3600 && d != -3600 {
			return end.UnixMilli() - w, end.UnixMilli() + w, true
		}
		at = end
	}
}

// scanTicks returns the first time after from and at most to (unix ms)
// whose wall clock in the schedule's zone matches it, 0 if none, looking
// at every minute (zone offsets are whole minutes).
func scanTicks(s *cron.SpecSchedule, from, to int64) int64 {
	const starBit = 1 << 63
	minute := time.Minute.Milliseconds()
	for m := from - ((from%minute)+minute)%minute; m <= to; m += minute {
		lt := time.UnixMilli(m).In(s.Location)
		if 1<<uint(lt.Month())&s.Month == 0 || 1<<uint(lt.Hour())&s.Hour == 0 || 1<<uint(lt.Minute())&s.Minute == 0 {
			continue
		}
		dom := 1<<uint(lt.Day())&s.Dom != 0
		dow := 1<<uint(lt.Weekday())&s.Dow != 0
		if s.Dom&starBit != 0 || s.Dow&starBit != 0 {
			if !dom || !dow {
				continue
			}
		} else if !dom && !dow {
			continue
		}
		for sec := int64(0); sec < 60; sec++ {
			if x := m + sec*1000; 1<<uint(sec)&s.Second != 0 && x > from && x <= to {
				return x
			}
		}
	}
	return 0
}

var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Cron reads expr in zone tz ("" = UTC, unless expr names its own); an
// error is an *engine.InputError naming field (or Schedule.TimeZone).
func Cron(field, expr, tz string) (Ticker, error) {
	expr = strings.TrimSpace(expr)
	hasTZ := strings.HasPrefix(expr, "CRON_TZ=") || strings.HasPrefix(expr, "TZ=")
	if hasTZ && tz != "" {
		return nil, engine.Invalid("Schedule.TimeZone", "(%q) cannot be set when Cron starts with CRON_TZ= or TZ=", tz)
	}
	if tz != "" {
		if _, err := time.LoadLocation(tz); err != nil {
			return nil, engine.Invalid("Schedule.TimeZone", "%q is not a known time zone: %v", tz, err)
		}
		if tz == "Local" {
			// Each peer's own zone (ticks would differ between peers), and
			// the cron library would read it as UTC's.
			return nil, engine.Invalid("Schedule.TimeZone", "(%q) must be an IANA zone name, such as Europe/Paris", tz)
		}
	}
	if hasTZ {
		if z, _, _ := strings.Cut(strings.SplitN(expr, "=", 2)[1], " "); z == "Local" {
			return nil, engine.Invalid(field, "(%q): the zone must be an IANA name, such as CRON_TZ=Europe/Paris", expr)
		}
	}
	full := expr
	if !hasTZ {
		if tz == "" {
			tz = "UTC"
		}
		full = "CRON_TZ=" + tz + " " + expr
	}
	if strings.Contains(expr, "@every") {
		return nil, engine.Invalid(field, "(%q): @every is not accepted: use Schedule.Every", expr)
	}
	s, err := cronParser.Parse(full)
	if err != nil {
		return nil, engine.Invalid(field, "(%q) is not a valid cron expression: %v", expr, err)
	}
	return cronTicker{s}, nil
}

// Plan is what a pass does with one due schedule.
type Plan struct {
	Fire []int64 // ticks to enqueue, in order
	Next int64   // the schedule's next tick after them (0: never again)
}

// PlanTicks places the due ticks of a schedule whose next tick is first, at
// Redis time now: ticks late by at most grace are fired; older ones were
// missed (with runOnce, the latest of them is fired once).
func PlanTicks(tk Ticker, first, now, grace int64, runOnce bool) Plan {
	var p Plan
	var lastMissed int64
	t := first
	for steps := 0; t != 0 && t <= now && now-t > grace; steps++ {
		lastMissed = t
		if steps == MaxScan {
			// Many missed ticks: jump to the first on-time one, and find
			// the latest missed one by looking back from it.
			t = tk.Next(now - grace - 1)
			if l := lastTickBy(tk, now-grace-1); l != 0 {
				lastMissed = l
			}
			break
		}
		t = tk.Next(t)
	}
	if lastMissed != 0 && runOnce {
		p.Fire = append(p.Fire, lastMissed)
	}
	for t != 0 && t <= now && len(p.Fire) < MaxTicksPerPass {
		p.Fire = append(p.Fire, t)
		t = tk.Next(t)
	}
	p.Next = t
	return p
}

// lastTickBy returns the latest tick of tk at or before limit, found in
// the shortest window back from limit (a minute, doubled up to about two
// years) that holds one, walking at most MaxScan ticks; 0 if none.
func lastTickBy(tk Ticker, limit int64) int64 {
	for w := time.Minute.Milliseconds(); w <= (1<<20)*time.Minute.Milliseconds(); w *= 2 {
		last := tk.Next(limit - w)
		if last == 0 || last > limit {
			continue
		}
		for steps := 0; steps < MaxScan; steps++ {
			n := tk.Next(last)
			if n == 0 || n > limit {
				break
			}
			last = n
		}
		return last
	}
	return 0
}
