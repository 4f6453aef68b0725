package worqr_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// periodicBundle is what a schedule test needs: peers sharing one
// namespace, a client and an inspector on it.
type periodicBundle struct {
	ns    string
	peers []*worqr.Scheduler
	c     *worqr.Client
	in    *worqr.Inspector
}

func newPeriodic(t *testing.T, peers int) *periodicBundle {
	t.Helper()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	b := &periodicBundle{ns: redistest.Namespace()}
	cfg := worqr.Config{Namespace: b.ns, DisableEvents: true}
	for i := 0; i < peers; i++ {
		s, err := worqr.NewScheduler(pool, &worqr.SchedulerConfig{Config: cfg})
		if err != nil {
			t.Fatal(err)
		}
		b.peers = append(b.peers, s)
	}
	var err error
	if b.c, err = worqr.NewClient(pool, &cfg); err != nil {
		t.Fatal(err)
	}
	if b.in, err = worqr.NewInspector(pool, &cfg); err != nil {
		t.Fatal(err)
	}
	return b
}

// ids returns the ids waiting in queue, front first.
func (b *periodicBundle) ids(t *testing.T, queue string) []string {
	t.Helper()
	infos, _, err := b.in.Tasks(context.Background(), queue, worqr.StateQueued, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(infos))
	for i, info := range infos {
		out[i] = info.ID
	}
	return out
}

func tickIDs(name string, ticks ...time.Time) []string {
	out := make([]string, len(ticks))
	for i, t := range ticks {
		out[i] = rdb.TickTaskID(name, t)
	}
	return out
}

// base is a time on a whole minute, as a test's Redis clock.
var base = time.Date(2030, 1, 7, 10, 0, 0, 0, time.UTC)

func TestSchedulerThreePeersEnqueueOneTaskPerTick(t *testing.T) {
	for _, tc := range []struct {
		name string
		sc   worqr.Schedule
		step time.Duration
	}{
		{"every", worqr.Schedule{Every: time.Second}, time.Second},
		{"cron with seconds and zone", worqr.Schedule{Cron: "*/2 * * * * *", TimeZone: "Europe/Paris"}, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			b := newPeriodic(t, 3)
			sc := tc.sc
			sc.Name, sc.Queue, sc.Payload = "beat", "ticks", []byte("tick")
			for _, p := range b.peers { // every process registers its schedules at start
				if err := p.RegisterAt(ctx, sc, base); err != nil {
					t.Fatal(err)
				}
			}
			var want []time.Time
			for k := 1; k <= 8; k++ {
				tick := base.Add(time.Duration(k) * tc.step)
				want = append(want, tick)
				// The three peers race on each tick, at slightly different
				// Redis times, each pass twice.
				var wg sync.WaitGroup
				for i, p := range b.peers {
					for rep := 0; rep < 2; rep++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							if _, err := p.PassAt(ctx, tick.Add(time.Duration(i*40+rep*5)*time.Millisecond)); err != nil {
								t.Error(err)
							}
						}()
					}
				}
				wg.Wait()
			}
			got := b.ids(t, "ticks")
			if w := tickIDs("beat", want...); strings.Join(got, " ") != strings.Join(w, " ") {
				t.Fatalf("queue holds\n%v\nwant one task per tick\n%v", got, w)
			}
			info, err := b.in.Schedule(ctx, "beat")
			if err != nil {
				t.Fatal(err)
			}
			if info.Fired != 8 || !info.LastFired.Equal(want[7]) || !info.Next.Equal(want[7].Add(tc.step)) {
				t.Fatalf("schedule: fired %d, last %s, next %s; want 8, %s, %s", info.Fired, info.LastFired, info.Next, want[7], want[7].Add(tc.step))
			}
		})
	}
}

func TestSchedulerCronReadsItsTimeZone(t *testing.T) {
	ctx := context.Background()
	b := newPeriodic(t, 1)
	// 09:30 in Paris on 7 Jan 2030 is 08:30 UTC.
	sc := worqr.Schedule{Name: "morning", Queue: "q", Cron: "0 30 9 * * *", TimeZone: "Europe/Paris"}
	if err := b.peers[0].RegisterAt(ctx, sc, base.Add(-3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	info, err := b.in.Schedule(ctx, "morning")
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2030, 1, 7, 8, 30, 0, 0, time.UTC); !info.Next.Equal(want) {
		t.Fatalf("next tick %s, want %s", info.Next.UTC(), want)
	}
	// The same expression with CRON_TZ= in it.
	sc = worqr.Schedule{Name: "morning2", Queue: "q", Cron: "CRON_TZ=America/New_York 0 30 9 * * *"}
	if err := b.peers[0].RegisterAt(ctx, sc, base.Add(-3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if info, err = b.in.Schedule(ctx, "morning2"); err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2030, 1, 7, 14, 30, 0, 0, time.UTC); !info.Next.Equal(want) {
		t.Fatalf("next tick %s, want %s", info.Next.UTC(), want)
	}
}

func TestSchedulerMissedTicks(t *testing.T) {
	minute := func(k int) time.Time { return base.Add(time.Duration(k) * time.Minute) }
	for _, tc := range []struct {
		name   string
		policy worqr.MissedPolicy
		at     time.Time // the first pass after the outage
		want   []time.Time
	}{
		// Ticks 1..9 were missed; tick 10 is 5s late, within the grace.
		{"skip, latest on time", worqr.MissedSkip, minute(10).Add(5 * time.Second), []time.Time{minute(10)}},
		{"run once, latest on time", worqr.MissedRunOnce, minute(10).Add(5 * time.Second), []time.Time{minute(9), minute(10)}},
		// Every tick up to 10 was missed (the pass is 30s late).
		{"skip, all missed", worqr.MissedSkip, minute(10).Add(30 * time.Second), nil},
		{"run once, all missed", worqr.MissedRunOnce, minute(10).Add(30 * time.Second), []time.Time{minute(10)}},
		{"default is skip", "", minute(10).Add(30 * time.Second), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			b := newPeriodic(t, 1)
			s := b.peers[0]
			sc := worqr.Schedule{Name: "m", Queue: "q", Every: time.Minute, Missed: tc.policy}
			if err := s.RegisterAt(ctx, sc, base); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 2; i++ { // a second pass changes nothing
				if _, err := s.PassAt(ctx, tc.at); err != nil {
					t.Fatal(err)
				}
			}
			got := b.ids(t, "q")
			if w := tickIDs("m", tc.want...); strings.Join(got, " ") != strings.Join(w, " ") {
				t.Fatalf("queue holds %v, want %v", got, w)
			}
			// The schedule goes on from the next tick.
			if _, err := s.PassAt(ctx, minute(11)); err != nil {
				t.Fatal(err)
			}
			got = b.ids(t, "q")
			if len(got) != len(tc.want)+1 || got[len(got)-1] != rdb.TickTaskID("m", minute(11)) {
				t.Fatalf("after the next tick the queue holds %v", got)
			}
		})
	}
}

func TestSchedulerLateTicksWithinGraceAllRun(t *testing.T) {
	ctx := context.Background()
	b := newPeriodic(t, 1)
	s := b.peers[0]
	if err := s.RegisterAt(ctx, worqr.Schedule{Name: "g", Queue: "q", Every: time.Second, Grace: 5 * time.Second}, base); err != nil {
		t.Fatal(err)
	}
	// A pass 3.5s after tick 1 (a slow peer): ticks 1..4 are late but within
	// the grace, so each runs once, even with the skip policy.
	n, err := s.PassAt(ctx, base.Add(4500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	want := tickIDs("g", base.Add(time.Second), base.Add(2*time.Second), base.Add(3*time.Second), base.Add(4*time.Second))
	if got := b.ids(t, "q"); n != 4 || strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("pass enqueued %d: %v, want %v", n, got, want)
	}
}

func TestSchedulePauseResumeRemove(t *testing.T) {
	ctx := context.Background()
	b := newPeriodic(t, 1)
	s := b.peers[0]
	sec := func(k int) time.Time { return base.Add(time.Duration(k) * time.Second) }
	for _, name := range []string{"a", "b"} {
		if err := s.RegisterAt(ctx, worqr.Schedule{Name: name, Queue: "q-" + name, Every: time.Second, Missed: worqr.MissedRunOnce}, base); err != nil {
			t.Fatal(err)
		}
	}
	list, err := b.in.Schedules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "a" || list[1].Name != "b" || list[0].Every != time.Second || list[0].Queue != "q-a" {
		t.Fatalf("schedules: %+v", list)
	}
	if _, err := s.PassAt(ctx, sec(1)); err != nil {
		t.Fatal(err)
	}
	if err := b.in.PauseSchedule(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if info, _ := b.in.Schedule(ctx, "a"); info == nil || !info.Paused {
		t.Fatalf("a not paused: %+v", info)
	}
	for k := 2; k <= 30; k++ {
		if _, err := s.PassAt(ctx, sec(k)); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.ids(t, "q-a"); strings.Join(got, " ") != strings.Join(tickIDs("a", sec(1)), " ") {
		t.Fatalf("paused schedule fired: %v", got)
	}
	if got := b.ids(t, "q-b"); len(got) != 30 {
		t.Fatalf("the other schedule fired %d ticks, want 30", len(got))
	}
	// Resumed at 30.5s: the ticks of the pause are skipped, even with
	// run-once (they were not missed: nobody was meant to run them).
	if err := b.in.ResumeScheduleAt(ctx, "a", sec(30).Add(500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PassAt(ctx, sec(31)); err != nil {
		t.Fatal(err)
	}
	if got := b.ids(t, "q-a"); strings.Join(got, " ") != strings.Join(tickIDs("a", sec(1), sec(31)), " ") {
		t.Fatalf("after resume: %v", got)
	}
	if err := b.in.RemoveSchedule(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PassAt(ctx, sec(32)); err != nil {
		t.Fatal(err)
	}
	if got := b.ids(t, "q-a"); len(got) != 2 {
		t.Fatalf("removed schedule fired: %v", got)
	}
	for _, f := range []func() error{
		func() error { return b.in.PauseSchedule(ctx, "a") },
		func() error { return b.in.ResumeSchedule(ctx, "a") },
		func() error { return b.in.RemoveSchedule(ctx, "a") },
		func() error { _, err := b.in.Schedule(ctx, "a"); return err },
	} {
		if err := f(); !errors.Is(err, worqr.ErrScheduleNotFound) {
			t.Fatalf("on a removed schedule: %v, want ErrScheduleNotFound", err)
		}
	}
	if list, _ = b.in.Schedules(ctx); len(list) != 1 || list[0].Name != "b" {
		t.Fatalf("schedules after remove: %+v", list)
	}
}

func TestScheduleReRegisterKeepsOrResetsTheTicks(t *testing.T) {
	ctx := context.Background()
	b := newPeriodic(t, 1)
	s := b.peers[0]
	sc := worqr.Schedule{Name: "r", Queue: "q", Every: time.Minute, Payload: []byte("v1")}
	if err := s.RegisterAt(ctx, sc, base); err != nil {
		t.Fatal(err)
	}
	// Same timing, new payload, registered later: the next tick stays.
	sc.Payload = []byte("v2")
	if err := s.RegisterAt(ctx, sc, base.Add(5*time.Minute+time.Second)); err != nil {
		t.Fatal(err)
	}
	info, _ := b.in.Schedule(ctx, "r")
	if !info.Next.Equal(base.Add(time.Minute)) || string(info.Payload) != "v2" {
		t.Fatalf("same timing: next %s payload %q", info.Next, info.Payload)
	}
	// A new timing starts after the registration time.
	sc.Every = time.Hour
	if err := s.RegisterAt(ctx, sc, base.Add(5*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if info, _ = b.in.Schedule(ctx, "r"); !info.Next.Equal(base.Add(time.Hour)) {
		t.Fatalf("new timing: next %s", info.Next)
	}
}

// A schedule's options (Schedule.Opts, StartWithin) are stored with it:
// every tick's task carries them, whichever Scheduler of the namespace
// fires it, and the Inspector shows them.
func TestScheduleOptsReachTheTicksTasks(t *testing.T) {
	ctx := context.Background()
	b := newPeriodic(t, 2)
	meta := map[string]string{"team": "ops"}
	sc := worqr.Schedule{Name: "report", Queue: "reports", Every: time.Minute, Payload: []byte(`{"kind":"daily"}`),
		Opts: &worqr.EnqueueOpts{Type: "report", Priority: 2, MaxAttempts: 3, Timeout: 90 * time.Second,
			Retention: time.Hour, Meta: meta},
		StartWithin: 30 * time.Second}
	// One peer registers; the other, which has no schedule of its own,
	// fires the ticks.
	if err := b.peers[0].RegisterAt(ctx, sc, base); err != nil {
		t.Fatal(err)
	}
	info, err := b.in.Schedule(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	if o := info.Opts; o == nil || o.Type != "report" || o.Priority != 2 || o.MaxAttempts != 3 || o.Timeout != 90*time.Second ||
		o.Retention != time.Hour || o.Meta["team"] != "ops" || info.StartWithin != 30*time.Second {
		t.Errorf("Inspector.Schedule: Opts %+v, StartWithin %s; want the options registered", info.Opts, info.StartWithin)
	}
	for k, late := range []time.Duration{0, 5 * time.Second} { // the second tick fired within Grace, late
		tick := base.Add(time.Duration(k+1) * time.Minute)
		if _, err := b.peers[1].PassAt(ctx, tick.Add(late)); err != nil {
			t.Fatal(err)
		}
		id := rdb.TickTaskID("report", tick)
		task, err := b.in.Task(ctx, "reports", id)
		if err != nil {
			t.Fatalf("the task of tick %s: %v", tick, err)
		}
		if task.Type != "report" || string(task.HandlerPayload()) != `{"kind":"daily"}` || task.Priority != 2 || task.MaxAttempts != 3 ||
			task.Timeout != 90*time.Second || task.Retention != time.Hour || task.Meta["team"] != "ops" {
			t.Errorf("the task of tick %s: type %q payload %q priority %d max attempts %d timeout %s retention %s meta %v; want the schedule's",
				tick, task.Type, task.HandlerPayload(), task.Priority, task.MaxAttempts, task.Timeout, task.Retention, task.Meta)
		}
		// The deadline is relative to the tick, not to the pass.
		if want := tick.Add(30 * time.Second); !task.Deadline.Equal(want) {
			t.Errorf("the task of tick %s fired %s late: deadline %s, want %s", tick, late, task.Deadline, want)
		}
	}
	// Without options, a tick's task has none.
	if err := b.peers[0].RegisterAt(ctx, worqr.Schedule{Name: "plain", Queue: "plain", Every: time.Minute}, base); err != nil {
		t.Fatal(err)
	}
	if _, err := b.peers[1].PassAt(ctx, base.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	task, err := b.in.Task(ctx, "plain", rdb.TickTaskID("plain", base.Add(time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	if task.Type != "" || task.Priority != 0 || !task.Deadline.IsZero() || len(task.Meta) != 0 {
		t.Errorf("the task of a schedule without options: %+v", task)
	}
	if info, _ := b.in.Schedule(ctx, "plain"); info == nil || info.Opts != nil || info.StartWithin != 0 {
		t.Errorf("Inspector.Schedule of a schedule without options: %+v", info)
	}
}

func TestScheduleBadInput(t *testing.T) {
	pool := srv.Pool()
	defer pool.Close()
	s, err := worqr.NewScheduler(pool, &worqr.SchedulerConfig{Config: worqr.Config{Namespace: redistest.Namespace()}})
	if err != nil {
		t.Fatal(err)
	}
	ok := worqr.Schedule{Name: "n", Queue: "q", Every: time.Minute}
	with := func(f func(*worqr.Schedule)) worqr.Schedule { sc := ok; f(&sc); return sc }
	for _, tc := range []struct {
		sc    worqr.Schedule
		field string
		rule  string
	}{
		{with(func(s *worqr.Schedule) { s.Name = "" }), "Schedule.Name", "is empty"},
		{with(func(s *worqr.Schedule) { s.Name = "a b" }), "Schedule.Name", "forbidden character"},
		{with(func(s *worqr.Schedule) { s.Name = strings.Repeat("n", 81) }), "Schedule.Name", "at most 80"},
		{with(func(s *worqr.Schedule) { s.Queue = "" }), "Schedule.Queue", "is empty"},
		{with(func(s *worqr.Schedule) { s.Queue = "a{b}" }), "Schedule.Queue", "forbidden character"},
		{with(func(s *worqr.Schedule) { s.Every = 0 }), "Schedule.Cron", "set one"},
		{with(func(s *worqr.Schedule) { s.Cron = "* * * * * *" }), "Schedule.Every", "together with Cron"},
		{with(func(s *worqr.Schedule) { s.Every = -time.Second }), "Schedule.Every", "negative"},
		{with(func(s *worqr.Schedule) { s.Every = 500 * time.Millisecond }), "Schedule.Every", "at least 1s"},
		{with(func(s *worqr.Schedule) { s.Every = time.Second + time.Microsecond }), "Schedule.Every", "whole number of milliseconds"},
		{with(func(s *worqr.Schedule) { s.TimeZone = "UTC" }), "Schedule.TimeZone", "applies to Cron"},
		{with(func(s *worqr.Schedule) { s.Every, s.Cron = 0, "61 * * * * *" }), "Schedule.Cron", "not a valid cron expression"},
		{with(func(s *worqr.Schedule) { s.Every, s.Cron = 0, "* * *" }), "Schedule.Cron", "not a valid cron expression"},
		{with(func(s *worqr.Schedule) { s.Every, s.Cron = 0, "@every 5s" }), "Schedule.Cron", "use Schedule.Every"},
		{with(func(s *worqr.Schedule) { s.Every, s.Cron = 0, "0 0 0 30 2 *" }), "Schedule.Cron", "never fires"},
		{with(func(s *worqr.Schedule) { s.Every, s.Cron, s.TimeZone = 0, "* * * * *", "Mars/Olympus" }), "Schedule.TimeZone", "not a known time zone"},
		{with(func(s *worqr.Schedule) { s.Every, s.Cron, s.TimeZone = 0, "CRON_TZ=UTC * * * * *", "UTC" }), "Schedule.TimeZone", "CRON_TZ="},
		{with(func(s *worqr.Schedule) { s.Missed = "twice" }), "Schedule.Missed", "not one of"},
		{with(func(s *worqr.Schedule) { s.Grace = time.Millisecond }), "Schedule.Grace", "at least 1s"},
		{with(func(s *worqr.Schedule) { s.Payload = make([]byte, worqr.DefaultMaxPayloadBytes+1) }), "Schedule.Payload", "over MaxPayloadBytes"},
		{with(func(s *worqr.Schedule) { s.StartWithin = -time.Second }), "Schedule.StartWithin", "negative"},
		{with(func(s *worqr.Schedule) { s.StartWithin = time.Microsecond }), "Schedule.StartWithin", "at least 1ms"},
		// The options a tick cannot take, and the others as Enqueue checks them.
		{with(func(s *worqr.Schedule) { s.Opts = &worqr.EnqueueOpts{ID: "mine"} }), "Schedule.Opts.ID", "its own id"},
		{with(func(s *worqr.Schedule) { s.Opts = &worqr.EnqueueOpts{IDTTL: time.Hour} }), "Schedule.Opts.IDTTL", "cannot be set"},
		{with(func(s *worqr.Schedule) { s.Opts = &worqr.EnqueueOpts{UniqueKey: "u", UniqueTTL: time.Hour} }), "Schedule.Opts.UniqueKey", "tick's own id"},
		{with(func(s *worqr.Schedule) { s.Opts = &worqr.EnqueueOpts{UniqueKeys: []string{"u"}} }), "Schedule.Opts.UniqueKeys", "tick's own id"},
		{with(func(s *worqr.Schedule) { s.Opts = &worqr.EnqueueOpts{UniqueTTL: time.Hour} }), "Schedule.Opts.UniqueTTL", "tick's own id"},
		{with(func(s *worqr.Schedule) { s.Opts = &worqr.EnqueueOpts{Key: "k"} }), "Schedule.Opts.Key", "takes no id"},
		{with(func(s *worqr.Schedule) { s.Opts = &worqr.EnqueueOpts{Score: 1} }), "Schedule.Opts.Score", "takes no id"},
		{with(func(s *worqr.Schedule) { s.Opts = &worqr.EnqueueOpts{Delay: time.Second} }), "Schedule.Opts.Delay", "due at its tick"},
		{with(func(s *worqr.Schedule) { s.Opts = &worqr.EnqueueOpts{At: base} }), "Schedule.Opts.At", "due at its tick"},
		{with(func(s *worqr.Schedule) { s.Opts = &worqr.EnqueueOpts{Deadline: base} }), "Schedule.Opts.Deadline", "StartWithin"},
		{with(func(s *worqr.Schedule) { s.Opts = &worqr.EnqueueOpts{Type: "a b"} }), "Schedule.Opts.Type", "forbidden character"},
		{with(func(s *worqr.Schedule) { s.Opts = &worqr.EnqueueOpts{Priority: worqr.MaxPriority + 1} }), "Schedule.Opts.Priority", "between 0 and"},
		{with(func(s *worqr.Schedule) { s.Opts = &worqr.EnqueueOpts{MaxAttempts: -1} }), "Schedule.Opts.MaxAttempts", "negative"},
		{with(func(s *worqr.Schedule) { s.Opts = &worqr.EnqueueOpts{Retention: time.Microsecond} }), "Schedule.Opts.Retention", "at least 1ms"},
		{with(func(s *worqr.Schedule) { s.Opts = &worqr.EnqueueOpts{Meta: map[string]string{"": "v"}} }), "Schedule.Opts.Meta", ""},
	} {
		err := s.Register(context.Background(), tc.sc)
		var ie *worqr.InvalidError
		if !errors.As(err, &ie) || ie.Field != tc.field || !strings.Contains(ie.Rule, tc.rule) {
			t.Errorf("Register(%+v) = %v, want %s %q", tc.sc, err, tc.field, tc.rule)
		}
	}
	// In the config, the field names the schedule's index.
	_, err = worqr.NewScheduler(pool, &worqr.SchedulerConfig{Schedules: []worqr.Schedule{ok, with(func(s *worqr.Schedule) { s.Every, s.Cron = 0, "bad" })}})
	var ie *worqr.InvalidError
	if !errors.As(err, &ie) || ie.Field != "Schedules[1].Cron" {
		t.Errorf("NewScheduler with a bad schedule: %v", err)
	}
	_, err = worqr.NewScheduler(pool, &worqr.SchedulerConfig{Schedules: []worqr.Schedule{ok, with(func(s *worqr.Schedule) { s.Name, s.Opts = "o", &worqr.EnqueueOpts{Priority: -1} })}})
	if !errors.As(err, &ie) || ie.Field != "Schedules[1].Opts.Priority" {
		t.Errorf("NewScheduler with a bad option of a schedule: %v", err)
	}
	_, err = worqr.NewScheduler(pool, &worqr.SchedulerConfig{Schedules: []worqr.Schedule{ok, ok}})
	if !errors.As(err, &ie) || ie.Field != "Schedules[1].Name" {
		t.Errorf("NewScheduler with a schedule twice: %v", err)
	}
	_, err = worqr.NewScheduler(pool, &worqr.SchedulerConfig{PollInterval: time.Millisecond})
	if !errors.As(err, &ie) || ie.Field != "PollInterval" {
		t.Errorf("NewScheduler with a short poll: %v", err)
	}
}

// TestSchedulerPeerProcess is not a test: it is the peer process that
// TestSchedulerPeersKilled starts (the test binary run again).
func TestSchedulerPeerProcess(t *testing.T) {
	ns := os.Getenv("WORQR_PERIODIC_PEER_NS")
	if ns == "" {
		t.Skip("a helper process of TestSchedulerPeersKilled")
	}
	pool := srv.Pool()
	s, err := worqr.NewScheduler(pool, &worqr.SchedulerConfig{
		Config:       worqr.Config{Namespace: ns, DisableEvents: true},
		PollInterval: 20 * time.Millisecond,
		Schedules:    []worqr.Schedule{{Name: "beat", Queue: "ticks", Every: time.Second}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	fmt.Println("peer started")
	select {} // until killed
}

// TestSchedulerPeersKilled runs three scheduler processes on real Redis
// time, kills one with SIGKILL, and checks that every tick from the first to
// the last was enqueued exactly once.
func TestSchedulerPeersKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for several seconds of real ticks")
	}
	ns := redistest.Namespace()
	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSchedulerPeerProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), "WORQR_PERIODIC_PEER_NS="+ns, "WORQR_TEST_REDIS_URL="+srv.URL)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	b := newPeriodic(t, 0)
	b.ns = ns
	pool := srv.Pool()
	defer pool.Close()
	b.in = newInspector(t, pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	waitTicks := func(n int) {
		t.Helper()
		l := 0
		if !redistest.Within(30*time.Second, func() bool { l = queueLen(t, b.in, "ticks"); return l >= n }) {
			t.Fatalf("%d ticks after 30s, want %d", l, n)
		}
	}
	peers := []*exec.Cmd{start(), start(), start()}
	waitTicks(3)
	// Kill one peer mid-flight (it may be between an enqueue and its
	// advance: the others must neither lose nor double that tick).
	peers[0].Process.Signal(syscall.SIGKILL)
	peers[0].Wait()
	waitTicks(7)
	for _, p := range peers[1:] {
		p.Process.Signal(syscall.SIGKILL)
		p.Wait()
	}
	ids := b.ids(t, "ticks")
	var ticks []int64
	for _, id := range ids {
		ms, err := strconv.ParseInt(strings.TrimPrefix(id, "beat."), 10, 64)
		if err != nil {
			t.Fatalf("unexpected task id %q", id)
		}
		ticks = append(ticks, ms)
	}
	sort.Slice(ticks, func(i, j int) bool { return ticks[i] < ticks[j] })
	for i := 1; i < len(ticks); i++ {
		if ticks[i]-ticks[i-1] != 1000 {
			t.Fatalf("ticks %v: %d then %d (a tick lost or doubled)", ids, ticks[i-1], ticks[i])
		}
	}
	if len(ticks) < 7 {
		t.Fatalf("%d ticks", len(ticks))
	}
}

// A peer killed after it enqueued a tick's task and before it advanced the
// schedule leaves the tick due: the next pass (any peer) finds the task
// already there, creates nothing new and advances.
func TestSchedulerPeerDiedBetweenEnqueueAndAdvance(t *testing.T) {
	ctx := context.Background()
	b := newPeriodic(t, 1)
	s := b.peers[0]
	sc := worqr.Schedule{Name: "d", Queue: "q", Every: time.Second, Payload: []byte("x")}
	if err := s.RegisterAt(ctx, sc, base); err != nil {
		t.Fatal(err)
	}
	tick := base.Add(time.Second)
	// What the dead peer did: the tick's enqueue, nothing after.
	id, err := b.c.Enqueue(ctx, "q", []byte("x"), &worqr.EnqueueOpts{ID: rdb.TickTaskID("d", tick), IDTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := b.in.Schedule(ctx, "d"); !info.Next.Equal(tick) {
		t.Fatalf("next tick %s, want %s (not advanced)", info.Next, tick)
	}
	if _, err := s.PassAt(ctx, tick.Add(300*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if got := b.ids(t, "q"); len(got) != 1 || got[0] != id {
		t.Fatalf("queue holds %v, want only %s", got, id)
	}
	if info, _ := b.in.Schedule(ctx, "d"); !info.Next.Equal(tick.Add(time.Second)) || !info.LastFired.Equal(tick) {
		t.Fatalf("schedule after the pass: %+v", info)
	}
}

// A peer whose pass runs at an older Redis time than its peers' last one
// (it read TIME before they advanced the schedule) finds nothing due and
// changes nothing. (A peer that read the due schedule itself before another
// advanced it is covered by the compare-and-set: see the periodic script's
// test in internal/rdb, and the racing peers above.)
func TestSchedulerStalePeerChangesNothing(t *testing.T) {
	ctx := context.Background()
	b := newPeriodic(t, 2)
	fast, slow := b.peers[0], b.peers[1]
	sc := worqr.Schedule{Name: "s", Queue: "q", Every: time.Second}
	if err := fast.RegisterAt(ctx, sc, base); err != nil {
		t.Fatal(err)
	}
	sec := func(k int) time.Time { return base.Add(time.Duration(k) * time.Second) }
	for k := 1; k <= 3; k++ {
		if _, err := fast.PassAt(ctx, sec(k)); err != nil {
			t.Fatal(err)
		}
	}
	// The slow peer's view: Redis time of tick 3 again (its pass read the
	// due set late): the schedule's next tick is 4, so nothing is due.
	if n, err := slow.PassAt(ctx, sec(3).Add(100*time.Millisecond)); err != nil || n != 0 {
		t.Fatalf("stale pass: %d, %v", n, err)
	}
	if got := b.ids(t, "q"); strings.Join(got, " ") != strings.Join(tickIDs("s", sec(1), sec(2), sec(3)), " ") {
		t.Fatalf("queue holds %v", got)
	}
	if info, _ := b.in.Schedule(ctx, "s"); info.Fired != 3 || !info.Next.Equal(sec(4)) {
		t.Fatalf("schedule: %+v", info)
	}
}

// A tick's id is remembered past its next tick and the grace (an hour
// more): a daily tick whose scheduler died between the enqueue and the
// advance, back after more than an hour, finds it remembered, and a
// MissedRunOnce pass does not fire it again (it was remembered an hour).
func TestTickIDRememberedPastItsNextTick(t *testing.T) {
	ctx := context.Background()
	b := newPeriodic(t, 1)
	s := b.peers[0]
	sc := worqr.Schedule{Name: "daily", Queue: "reports", Every: 24 * time.Hour, Missed: worqr.MissedRunOnce}
	if err := s.RegisterAt(ctx, sc, base); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PassAt(ctx, base.Add(24*time.Hour+time.Second)); err != nil {
		t.Fatal(err)
	}
	ids := b.ids(t, "reports")
	if len(ids) != 1 || !strings.HasPrefix(ids[0], "daily.") {
		t.Fatalf("after a day: %v, want one tick", ids)
	}
	id := ids[0]
	conn := srv.Pool().Get()
	defer conn.Close()
	ms, err := redis.Int64(conn.Do("PTTL", rdb.NewKeys(b.ns).Queue(rdb.Standalone("reports")).IDPrefix+id))
	if err != nil || ms < (24*time.Hour+time.Hour).Milliseconds()-60000 {
		t.Fatalf("the tick's id is remembered %d ms (%v), want about 25 h (its next tick, the grace, an hour)", ms, err)
	}
}

// "Local" is each peer's own zone, and the cron library read it as UTC:
// refused, naming the field, in both forms.
func TestScheduleRefusesTheLocalZone(t *testing.T) {
	ctx := context.Background()
	b := newPeriodic(t, 1)
	for _, sc := range []worqr.Schedule{
		{Name: "l1", Queue: "q", Cron: "0 0 9 * * *", TimeZone: "Local"},
		{Name: "l2", Queue: "q", Cron: "CRON_TZ=Local 0 0 9 * * *"},
	} {
		err := b.peers[0].RegisterAt(ctx, sc, base)
		if !errors.Is(err, worqr.ErrInvalid) || !strings.Contains(err.Error(), "IANA") {
			t.Errorf("%s: %v, want ErrInvalid asking for an IANA zone", sc.Name, err)
		}
	}
}

// A schedule re-registered with a new timing while a pass is under way: the
// pass read the old definition and the next tick, and the registration (its
// Redis time read just before that tick) kept the same next tick. The pass's
// advance must not move the schedule to the next tick of the old timing:
// the new schedule would fire a tick that is not one of its own (1m -> 2m),
// or skip ticks of its own (2m -> 1m).
func TestSchedulePassDoesNotAdvanceANewTiming(t *testing.T) {
	minute := func(k int) time.Time { return base.Add(time.Duration(k) * time.Minute) }
	for _, tc := range []struct {
		name     string
		old, new time.Duration
		want     []time.Time // ticks enqueued by passes at minutes 2..6
	}{
		{"1m to 2m", time.Minute, 2 * time.Minute, []time.Time{minute(2), minute(4), minute(6)}},
		{"2m to 1m", 2 * time.Minute, time.Minute, []time.Time{minute(2), minute(3), minute(4), minute(5), minute(6)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			b := newPeriodic(t, 1)
			s := b.peers[0]
			sc := worqr.Schedule{Name: "r", Queue: "q", Every: tc.old}
			if err := s.RegisterAt(ctx, sc, minute(1)); err != nil {
				t.Fatal(err)
			}
			sc.Every = tc.new
			if _, err := s.PassSplitAt(ctx, minute(2).Add(100*time.Millisecond), func() {
				// Another process registers the new timing; its Redis time
				// was read 1 ms before the tick, so the next tick stays 2.
				if err := s.RegisterAt(ctx, sc, minute(2).Add(-time.Millisecond)); err != nil {
					t.Error(err)
				}
			}); err != nil {
				t.Fatal(err)
			}
			for k := 2; k <= 6; k++ {
				if _, err := s.PassAt(ctx, minute(k).Add(200*time.Millisecond)); err != nil {
					t.Fatal(err)
				}
			}
			if got, w := b.ids(t, "q"), tickIDs("r", tc.want...); strings.Join(got, " ") != strings.Join(w, " ") {
				t.Fatalf("queue holds\n%v\nwant the new timing's ticks\n%v", got, w)
			}
		})
	}
}

// A resume works out the next tick from the timing it read: when the
// schedule is re-registered with another timing in between, the resume
// reads it again rather than put it on a tick of the old timing (it did:
// a schedule of every 7 minutes then fired on the old minute).
func TestResumeAcrossAReRegistration(t *testing.T) {
	ctx := context.Background()
	b := newPeriodic(t, 1)
	s := b.peers[0]
	sc := worqr.Schedule{Name: "r", Queue: "q", Every: time.Minute}
	if err := s.RegisterAt(ctx, sc, base); err != nil {
		t.Fatal(err)
	}
	if err := b.in.PauseSchedule(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	at := base.Add(30 * time.Second)
	var newNext time.Time
	once := false
	undo := b.in.OnResumeRead(func(string) {
		if once {
			return
		}
		once = true
		sc.Every = 7 * time.Minute
		if err := s.RegisterAt(ctx, sc, at); err != nil {
			t.Error(err)
		}
		info, _ := b.in.Schedule(ctx, "r")
		newNext = info.Next
	})
	defer undo()
	if err := b.in.ResumeScheduleAt(ctx, "r", at); err != nil {
		t.Fatal(err)
	}
	info, err := b.in.Schedule(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if info.Paused || info.Every != 7*time.Minute || !info.Next.Equal(newNext) || info.Next.Equal(base.Add(time.Minute)) {
		t.Fatalf("after the resume: paused %v, every %s, next %s; want the new timing's next tick %s", info.Paused, info.Every, info.Next, newNext)
	}
}

// The Scheduler follows the lifecycle every long-running type shares
// (internal/startstop).
func TestSchedulerLifecycle(t *testing.T) {
	ctx := context.Background()
	stoppedWithin := func(t *testing.T, s *worqr.Scheduler) {
		t.Helper()
		select {
		case <-s.Stopped():
		case <-time.After(10 * time.Second):
			t.Fatal("Stopped not closed")
		}
	}

	t.Run("StartTwiceIsAnError", func(t *testing.T) {
		s := newPeriodic(t, 1).peers[0]
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Stop(ctx) })
		if err := s.Start(ctx); err == nil || err.Error() != "worqr: scheduler already started" {
			t.Fatalf("second Start = %v, want worqr: scheduler already started", err)
		}
	})

	// A Stop before Start (a signal during setup) is final, as a Worker's
	// is: before, a later Start ran a scheduler whose Stop had returned.
	t.Run("StopBeforeStartIsFinal", func(t *testing.T) {
		s := newPeriodic(t, 1).peers[0]
		if err := s.Stop(ctx); err != nil {
			t.Fatalf("Stop before Start = %v, want nil", err)
		}
		stoppedWithin(t, s)
		err := s.Start(ctx)
		if err == nil {
			_ = s.Stop(ctx)
		}
		if err == nil || err.Error() != "worqr: scheduler stopped before it was started" {
			t.Fatalf("Start after Stop = %v, want worqr: scheduler stopped before it was started", err)
		}
	})

	// A Stop whose ctx ran out still stops the loop, and Stopped closes
	// once it has: before, only a Stop that returned nil closed it.
	t.Run("StoppedClosesAfterAStopThatRanOut", func(t *testing.T) {
		s := newPeriodic(t, 1).peers[0]
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		done, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.Stop(done); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Stop with an ended ctx = %v, want nil or context.Canceled", err)
		}
		stoppedWithin(t, s)
		if err := s.Stop(done); err != nil {
			t.Errorf("Stop once stopped = %v, want nil whatever its ctx", err)
		}
	})

	t.Run("StartContextThatEndsStopsIt", func(t *testing.T) {
		s := newPeriodic(t, 1).peers[0]
		life, cancel := context.WithCancel(ctx)
		if err := s.Start(life); err != nil {
			t.Fatal(err)
		}
		cancel()
		stoppedWithin(t, s)
		if err := s.Stop(ctx); err != nil {
			t.Errorf("Stop after the Start context ended = %v, want nil", err)
		}
	})
}
