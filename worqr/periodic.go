package worqr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/worqr/worqr-go/defaults"
	"github.com/worqr/worqr-go/internal/ticks"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/startstop"
)

// MissedPolicy says what a schedule does with ticks that came while no
// Scheduler of the namespace ran (or none could reach Redis) for longer
// than the schedule's Grace.
type MissedPolicy string

// The missed-tick policies.
const (
	// MissedSkip (the default) drops missed ticks: nothing is enqueued for
	// them.
	MissedSkip MissedPolicy = "skip"
	// MissedRunOnce enqueues one task for all the ticks missed in a row
	// (the task of the latest of them), then goes on with the schedule.
	MissedRunOnce MissedPolicy = "run_once"
)

// Schedule describes a periodic task: at each tick of Cron or Every, one
// task with Payload (and Opts) is enqueued to Queue, once across every
// Scheduler of the namespace.
type Schedule struct {
	// Name identifies the schedule in the namespace: 1 to 80 characters of
	// A-Z a-z 0-9 _ - . (the task of a tick has id "<Name>.<tick unix ms>").
	Name string
	// Queue is the stand-alone queue the tasks go to. Required.
	Queue string
	// Cron is a cron expression with an optional leading seconds field
	// ("*/10 * * * * *": every ten seconds; "0 30 9 * * MON-FRI"; "0 9 * * *"
	// has no seconds field) or a descriptor (@hourly, @daily...; @every is
	// refused: use Every). It may start with CRON_TZ=<zone> (or TZ=<zone>).
	// Exactly one of Cron and Every is set.
	Cron string
	// Every ticks at every multiple of this interval since the Unix epoch
	// (Every: time.Minute ticks at each whole minute, UTC), at least 1s and
	// a whole number of milliseconds.
	Every time.Duration
	// TimeZone is the IANA zone (for example "Europe/Paris") Cron is read
	// in. Default UTC. Not with a CRON_TZ= prefix, nor with Every.
	TimeZone string
	// Payload is the payload of every task (at most Config.MaxPayloadBytes).
	Payload []byte
	// Missed is what happens to ticks missed for longer than Grace.
	// Default MissedSkip.
	Missed MissedPolicy
	// Grace is how late a tick may be enqueued and still count as on time.
	// A tick found later than that (every Scheduler was down, or could not
	// reach Redis) is missed and follows Missed. Keep it well above the
	// Schedulers' PollInterval. Default 10s, at least 1s.
	Grace time.Duration
	// Opts are the options of every task the schedule enqueues (nil:
	// none), stored with the schedule, so that every Scheduler of the
	// namespace enqueues the same: Type, Priority, MaxAttempts, Timeout,
	// Retention and Meta, as Client.Enqueue reads them. Refused, by field:
	// ID and IDTTL (a tick's task has its own, "<Name>.<tick unix ms>"),
	// UniqueKey, UniqueKeys and UniqueTTL (they would hold against the
	// tick's own id), Key and Score (a task of an ordered queue takes no
	// id, which enqueues a tick once), Delay and At (a tick's task is due
	// at its tick: place the tick with Cron or Every) and Deadline (a
	// time: use StartWithin).
	Opts *EnqueueOpts
	// StartWithin, when set, is how long after its tick a tick's task may
	// start: its EnqueueOpts.Deadline is the tick plus StartWithin (a task
	// not started by then ends as expired, StateExpired). At least 1ms.
	StartWithin time.Duration
}

// Limits and defaults of schedules.
const (
	// defaultScheduleGrace is Schedule.Grace's default.
	defaultScheduleGrace = 10 * time.Second
	// scheduleIDTTL is how long the id of a tick's task is remembered: a
	// peer that fires a tick again within it (a lost reply, a race, a peer
	// killed between the enqueue and the advance) creates nothing new.
	scheduleIDTTL = time.Hour
	// maxPassAge bounds how long a pass may act on what it read (and every
	// Redis call of a pass): a peer frozen longer than that abandons its
	// pass rather than enqueue a tick whose id lock may have expired.
	maxPassAge = time.Minute
	// dueBatch is how many due schedules one read returns.
	dueBatch = 100
)

// scheduleDef is how a schedule is stored (JSON, in its hash). A
// Scheduler of an earlier version ignores the fields it does not know: it
// enqueues the ticks without their options.
type scheduleDef struct {
	Queue   string       `json:"queue"`
	Cron    string       `json:"cron,omitempty"`
	EveryMs int64        `json:"every_ms,omitempty"`
	TZ      string       `json:"tz,omitempty"`
	Payload []byte       `json:"payload,omitempty"`
	Missed  MissedPolicy `json:"missed"`
	GraceMs int64        `json:"grace_ms"`
	// The options of the ticks' tasks (Schedule.Opts, StartWithin).
	Type          string            `json:"type,omitempty"`
	Priority      int               `json:"priority,omitempty"`
	MaxAttempts   int               `json:"max_attempts,omitempty"`
	TimeoutMs     int64             `json:"timeout_ms,omitempty"` // -1: no limit
	RetentionMs   int64             `json:"retention_ms,omitempty"`
	Meta          map[string]string `json:"meta,omitempty"`
	StartWithinMs int64             `json:"start_within_ms,omitempty"`
}

// setOpts checks the options of the ticks' tasks and stores them in d.
func (d *scheduleDef) setOpts(o *EnqueueOpts, within time.Duration) error {
	switch {
	case within < 0:
		return invalid("Schedule.StartWithin", "(%s) must not be negative", within)
	case within > 0 && within < time.Millisecond:
		return invalid("Schedule.StartWithin", "(%s) must be at least 1ms", within)
	}
	d.StartWithinMs = within.Milliseconds()
	if o == nil {
		return nil
	}
	for _, f := range []struct {
		set         bool
		field, rule string
	}{
		{o.ID != "", "ID", "cannot be set: a tick's task has its own id (<Name>.<tick unix ms>)"},
		{o.IDTTL != 0, "IDTTL", "cannot be set: how long a tick's id is remembered follows from its schedule"},
		{o.UniqueKey != "", "UniqueKey", "cannot be set: it would hold against the tick's own id"},
		{o.UniqueKeys != nil, "UniqueKeys", "cannot be set: it would hold against the tick's own id"},
		{o.UniqueTTL != 0, "UniqueTTL", "cannot be set: it would hold against the tick's own id"},
		{o.Key != "", "Key", "cannot be set: a task of an ordered queue takes no id, which enqueues a tick once"},
		{o.Score != 0, "Score", "cannot be set: a task of an ordered queue takes no id, which enqueues a tick once"},
		{o.Delay != 0, "Delay", "cannot be set: a tick's task is due at its tick (place the ticks with Cron or Every)"},
		{!o.At.IsZero(), "At", "cannot be set: a tick's task is due at its tick (place the ticks with Cron or Every)"},
		{!o.Deadline.IsZero(), "Deadline", "cannot be set: a deadline relative to each tick is Schedule.StartWithin"},
	} {
		if f.set {
			return invalid("Schedule.Opts."+f.field, "%s", f.rule)
		}
	}
	// The others as an enqueue checks them.
	if _, err := o.args(1); err != nil {
		var ie *InvalidError
		if errors.As(err, &ie) {
			ie.Field = "Schedule.Opts." + strings.TrimPrefix(ie.Field, "EnqueueOpts.")
		}
		return err
	}
	d.Type, d.Priority, d.MaxAttempts, d.Meta = o.Type, o.Priority, o.MaxAttempts, o.Meta
	switch {
	case o.Timeout > 0:
		d.TimeoutMs = max(o.Timeout.Milliseconds(), 1)
	case o.Timeout < 0:
		d.TimeoutMs = -1
	}
	d.RetentionMs = o.Retention.Milliseconds()
	return nil
}

// opts returns the options of the ticks' tasks stored in d, nil when none.
func (d *scheduleDef) opts() *EnqueueOpts {
	o := &EnqueueOpts{Type: d.Type, Priority: d.Priority, MaxAttempts: d.MaxAttempts, Meta: d.Meta,
		Timeout: time.Duration(d.TimeoutMs) * time.Millisecond, Retention: time.Duration(d.RetentionMs) * time.Millisecond}
	if o.zero() {
		return nil
	}
	return o
}

// timing is the part of a definition that places the ticks: a schedule
// re-registered with the same timing keeps its next tick.
func (d *scheduleDef) timing() string {
	if d.EveryMs > 0 {
		return "every:" + strconv.FormatInt(d.EveryMs, 10)
	}
	return "cron:" + d.TZ + ":" + d.Cron
}

func (d *scheduleDef) ticker() (ticks.Ticker, error) {
	if d.EveryMs > 0 {
		return ticks.Every(d.EveryMs), nil
	}
	tk, err := ticks.Cron("Schedule.Cron", d.Cron, d.TZ)
	return tk, asInvalid(err)
}

// define validates sc and returns its stored form and its ticker.
func (sc *Schedule) define(maxPayload int) (*scheduleDef, ticks.Ticker, error) {
	switch {
	case sc.Name == "":
		return nil, nil, invalid("Schedule.Name", "is empty")
	case len(sc.Name) > defaults.MaxScheduleNameLen:
		return nil, nil, invalid("Schedule.Name", "is %d bytes long (at most %d)", len(sc.Name), defaults.MaxScheduleNameLen)
	}
	if err := checkName("Schedule.Name", sc.Name); err != nil {
		return nil, nil, err
	}
	if sc.Queue == "" {
		return nil, nil, invalid("Schedule.Queue", "is empty")
	}
	if err := checkName("Schedule.Queue", sc.Queue); err != nil {
		return nil, nil, err
	}
	d := &scheduleDef{Queue: sc.Queue, Payload: sc.Payload, Missed: sc.Missed, TZ: sc.TimeZone}
	switch {
	case sc.Cron == "" && sc.Every == 0:
		return nil, nil, invalid("Schedule.Cron", "and Schedule.Every are both unset: set one")
	case sc.Cron != "" && sc.Every != 0:
		return nil, nil, invalid("Schedule.Every", "cannot be set together with Cron")
	case sc.Every < 0:
		return nil, nil, invalid("Schedule.Every", "(%s) must not be negative", sc.Every)
	case sc.Every > 0 && sc.Every < time.Second:
		return nil, nil, invalid("Schedule.Every", "(%s) must be at least 1s", sc.Every)
	case sc.Every > 0 && sc.Every%time.Millisecond != 0:
		return nil, nil, invalid("Schedule.Every", "(%s) must be a whole number of milliseconds", sc.Every)
	case sc.Every > 0 && sc.TimeZone != "":
		return nil, nil, invalid("Schedule.TimeZone", "applies to Cron, not to Every")
	}
	d.Cron = strings.TrimSpace(sc.Cron)
	d.EveryMs = sc.Every.Milliseconds()
	switch d.Missed {
	case "":
		d.Missed = MissedSkip
	case MissedSkip, MissedRunOnce:
	default:
		return nil, nil, invalid("Schedule.Missed", "%q is not one of %q, %q", sc.Missed, MissedSkip, MissedRunOnce)
	}
	switch {
	case sc.Grace == 0:
		d.GraceMs = defaultScheduleGrace.Milliseconds()
	case sc.Grace < time.Second:
		return nil, nil, invalid("Schedule.Grace", "(%s) must be at least 1s", sc.Grace)
	default:
		d.GraceMs = sc.Grace.Milliseconds()
	}
	if len(sc.Payload) > maxPayload {
		return nil, nil, invalid("Schedule.Payload", "is %d bytes, over MaxPayloadBytes (%d)", len(sc.Payload), maxPayload)
	}
	if err := d.setOpts(sc.Opts, sc.StartWithin); err != nil {
		return nil, nil, err
	}
	tk, err := d.ticker()
	if err != nil {
		return nil, nil, err
	}
	// A cron expression that names no real date ("0 0 0 30 2 *") never fires.
	if tk.Next(time.Now().UnixMilli()) == 0 {
		return nil, nil, invalid("Schedule.Cron", "(%q) never fires", sc.Cron)
	}
	return d, tk, nil
}

func decodeDef(b []byte) (*scheduleDef, ticks.Ticker, error) {
	var d scheduleDef
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, nil, fmt.Errorf("worqr: schedule definition: %w", err)
	}
	tk, err := d.ticker()
	if err != nil {
		return nil, nil, err
	}
	if d.GraceMs <= 0 {
		d.GraceMs = defaultScheduleGrace.Milliseconds()
	}
	return &d, tk, nil
}

// SchedulerConfig is what a Scheduler needs. Every field has a default.
type SchedulerConfig struct {
	Config
	// Schedules are registered by Start (see Scheduler.Register).
	Schedules []Schedule
	// PollInterval is how often the scheduler looks for due ticks. A tick
	// is enqueued within about PollInterval of its time while any
	// Scheduler of the namespace runs. Default 1s, at least 10ms.
	PollInterval time.Duration
}

// Scheduler enqueues the tasks of periodic schedules. Run one in any number
// of processes of a namespace (each process embedding worqr may run one):
// every Scheduler fires every schedule registered in the namespace, and
// each tick enqueues one task across all of them.
//
// How: a schedule's next tick is kept in Redis and compared with Redis's
// clock (never the local one). A Scheduler that finds ticks due enqueues
// each tick's task with an id derived from the schedule and the tick
// ("<name>.<tick unix ms>", an idempotent enqueue: see EnqueueOpts.ID), then
// advances the schedule's next tick with a compare-and-set. Peers racing on
// a tick, a lost reply, or a peer killed between the enqueue and the
// advance therefore enqueue the tick's task once. The guarantee holds as
// long as a tick's id is remembered (one hour): a process frozen for that
// long in the middle of a pass could enqueue a tick again (a pass older than
// a minute by the local monotonic clock is abandoned to make this
// unlikely). Ticks found later than the schedule's Grace were missed and
// follow its MissedPolicy.
type Scheduler struct {
	c   *Client
	st  *rdb.Store
	cfg SchedulerConfig

	life   startstop.Machine // Start, Stop, Stopped
	cancel context.CancelFunc
	done   chan struct{} // closed when the loop has returned
}

// NewScheduler validates cfg (nil means all defaults) and returns a
// scheduler that is not started.
func NewScheduler(pool ConnGetter, cfg *SchedulerConfig) (*Scheduler, error) {
	if pool == nil {
		return nil, invalid("pool", "is nil")
	}
	var sc SchedulerConfig
	if cfg != nil {
		sc = *cfg
	}
	base, err := sc.Config.withDefaults()
	if err != nil {
		return nil, err
	}
	sc.Config = base
	switch {
	case sc.PollInterval == 0:
		sc.PollInterval = defaults.PollInterval
	case sc.PollInterval < defaults.MinInterval:
		return nil, invalid("PollInterval", "(%s) must be at least %s", sc.PollInterval, defaults.MinInterval)
	}
	names := map[string]bool{}
	for i := range sc.Schedules {
		s := &sc.Schedules[i]
		if _, _, err := s.define(sc.MaxPayloadBytes); err != nil {
			var ie *InvalidError
			if errors.As(err, &ie) {
				ie.Field = fmt.Sprintf("Schedules[%d].%s", i, strings.TrimPrefix(ie.Field, "Schedule."))
			}
			return nil, err
		}
		if names[s.Name] {
			return nil, invalid(fmt.Sprintf("Schedules[%d].Name", i), "%q is registered twice", s.Name)
		}
		names[s.Name] = true
	}
	c, err := NewClient(pool, &sc.Config)
	if err != nil {
		return nil, err
	}
	return &Scheduler{c: c, st: c.st, cfg: sc}, nil
}

// Register stores schedule sc in Redis (creating or replacing the one of the
// same name); every Scheduler of the namespace fires it from then on. A
// schedule re-registered with the same timing (Cron, TimeZone, Every) keeps
// its next tick and its pause, so that every process may register its
// schedules at start; a new timing starts with the first tick after
// Redis's current time. The last registration wins.
func (s *Scheduler) Register(ctx context.Context, sc Schedule) error {
	return s.register(ctx, sc, 0)
}

func (s *Scheduler) register(ctx context.Context, sc Schedule, at int64) error {
	d, tk, err := sc.define(s.cfg.MaxPayloadBytes)
	if err != nil {
		return err
	}
	if at == 0 {
		if at, err = s.st.Time(ctx, rdb.PeriodicTag); err != nil {
			return fmt.Errorf("worqr: register schedule %s: %w", sc.Name, err)
		}
	}
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	if _, err := s.st.PutSchedule(ctx, sc.Name, b, d.timing(), tk.Next(at)); err != nil {
		return fmt.Errorf("worqr: register schedule %s: %w", sc.Name, err)
	}
	return nil
}

// Start registers the configured schedules and starts firing every schedule
// of the namespace in the background, until Stop or until ctx ends. It
// returns once the schedules are registered. Calling Start twice, or after
// Stop (even a Stop before any Start), is an error; a Start that failed
// leaves the scheduler startable.
func (s *Scheduler) Start(ctx context.Context) error {
	return s.life.Start("scheduler", func() error { return s.start(ctx) })
}

func (s *Scheduler) start(ctx context.Context) error {
	for _, sc := range s.cfg.Schedules {
		if err := s.Register(ctx, sc); err != nil {
			return err
		}
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	s.done = make(chan struct{})
	go s.loop(runCtx)
	go func() {
		select {
		case <-ctx.Done():
			_ = s.Stop(context.Background())
		case <-s.done:
		}
	}()
	return nil
}

func (s *Scheduler) loop(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, maxPassAge)
		_, err := s.pass(pctx, 0)
		cancel()
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("scheduler: pass failed", "err", err)
			s.c.bus.add(Event{Kind: EventError, At: time.Now(), Err: err})
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Stop stops the scheduler and waits for its pass in progress, or returns
// ctx's error when ctx ends first (the pass is cancelled and the stop goes
// on; call it again to keep waiting). It is safe to call more than once.
// A Stop before any Start returns nil and is final: a later Start is
// refused.
func (s *Scheduler) Stop(ctx context.Context) error {
	return s.life.StopContext(ctx, func() error {
		s.cancel()
		<-s.done
		s.c.bus.flush()
		return nil
	})
}

// Stopped is closed once the scheduler has stopped: its loop has ended
// after Stop (even one whose ctx ran out first) or after the context given
// to Start ended, or a Stop came before any Start.
func (s *Scheduler) Stopped() <-chan struct{} { return s.life.Stopped() }

// pass fires every due tick of every schedule, at Redis time (or at at,
// unix ms, when > 0: tests), and returns how many tasks it enqueued (or
// found enqueued by a peer).
func (s *Scheduler) pass(ctx context.Context, at int64) (int, error) {
	total := 0
	for {
		read := time.Now()
		now, due, err := s.st.DueSchedules(ctx, at, dueBatch)
		if err != nil {
			return total, fmt.Errorf("worqr: scheduler: %w", err)
		}
		progressed := false
		var firstErr error
		for _, d := range due {
			n, advanced, err := s.fire(ctx, d, now, read)
			total += n
			if err != nil && firstErr == nil {
				firstErr = err
			}
			progressed = progressed || advanced
		}
		if firstErr != nil || len(due) < dueBatch || !progressed {
			return total, firstErr
		}
	}
}

// fire enqueues the due ticks of d and advances its next tick. It reports
// how many tasks were enqueued (or found enqueued) and whether the schedule
// was advanced.
func (s *Scheduler) fire(ctx context.Context, d rdb.DueSchedule, now int64, read time.Time) (int, bool, error) {
	def, tk, err := decodeDef(d.Def)
	if err != nil {
		return 0, false, fmt.Errorf("worqr: schedule %s: %w", d.Name, err)
	}
	p := ticks.PlanTicks(tk, d.Next, now, def.GraceMs, def.Missed == MissedRunOnce)
	var last int64
	var short error // a tick enqueued on the primary, too few replicas have it
	for _, tick := range p.Fire {
		if time.Since(read) > maxPassAge {
			return 0, false, fmt.Errorf("worqr: schedule %s: pass abandoned after %s (a frozen process)", d.Name, time.Since(read).Round(time.Second))
		}
		// The tick's id is remembered until it can no longer be the latest
		// missed tick (MissedRunOnce): past its next tick and the grace,
		// and an hour more, so that a pass after an outage longer than an
		// hour does not fire again a tick that ran.
		idTTL := scheduleIDTTL
		if nx := tk.Next(tick); nx > tick {
			idTTL += time.Duration(nx-tick)*time.Millisecond + time.Duration(def.GraceMs)*time.Millisecond
		}
		opts := EnqueueOpts{}
		if o := def.opts(); o != nil {
			opts = *o
		}
		opts.ID, opts.IDTTL = rdb.TickTaskID(d.Name, time.UnixMilli(tick)), idTTL
		if def.StartWithinMs > 0 {
			// Relative to the tick, not to this pass: a tick enqueued late
			// (within Grace) has that much less time to start.
			opts.Deadline = time.UnixMilli(tick + def.StartWithinMs)
		}
		_, err := s.c.Enqueue(ctx, def.Queue, def.Payload, &opts)
		if errors.Is(err, ErrNotReplicated) {
			// Enqueued (now or by an earlier pass) on the primary: it
			// fired; the shortfall is reported, and a pass that enqueues
			// it again would find it there and fall short the same way.
			short = fmt.Errorf("worqr: schedule %s: tick %d: %w", d.Name, tick, err)
			err = nil
		}
		if err != nil && !errors.Is(err, ErrDuplicate) {
			// Not advanced: the next pass fires these ticks again (the
			// ones enqueued already create nothing new).
			return len(p.Fire), false, fmt.Errorf("worqr: schedule %s: enqueue tick %d: %w", d.Name, tick, err)
		}
		// ErrDuplicate: this tick's id was enqueued with another payload
		// (the schedule was re-registered meanwhile): it fired.
		last = tick
	}
	next := p.Next
	if next == 0 {
		next = maxTick // never again: parked far away
	}
	// Compared with the stored timing too: a re-registration with a new
	// timing may have kept d.Next (its first tick), and next is a tick of
	// the timing read.
	ok, err := s.st.AdvanceSchedule(ctx, d.Name, def.timing(), d.Next, next, last, len(p.Fire))
	if err != nil {
		return len(p.Fire), false, fmt.Errorf("worqr: schedule %s: advance: %w", d.Name, err)
	}
	return len(p.Fire), ok, short
}

// maxTick is where a schedule that never ticks again waits (year 9999).
const maxTick = 253402300799000

// ErrScheduleNotFound is returned by the Inspector's schedule methods when
// no schedule has that name.
var ErrScheduleNotFound = errors.New("worqr: schedule not found")

// ScheduleInfo is what Redis holds about a schedule: its definition, as
// registered, and its state.
type ScheduleInfo struct {
	Schedule
	Paused bool
	// Next is the next tick not yet fired (while paused: when it was
	// paused; resuming skips to the first tick after the resume).
	Next time.Time
	// LastFired is the latest tick a task was enqueued for (zero: none).
	LastFired time.Time
	// Fired counts the ticks a task was enqueued for.
	Fired int64
}

func scheduleInfo(r *rdb.ScheduleRecord) ScheduleInfo {
	info := ScheduleInfo{Schedule: Schedule{Name: r.Name}, Paused: r.Paused, Next: msTime(r.Next), LastFired: msTime(r.Last), Fired: r.Fired}
	if r.Next >= maxTick {
		info.Next = time.Time{}
	}
	var d scheduleDef
	if json.Unmarshal(r.Def, &d) == nil {
		info.Queue, info.Cron, info.TimeZone, info.Missed, info.Payload = d.Queue, d.Cron, d.TZ, d.Missed, d.Payload
		info.Every = time.Duration(d.EveryMs) * time.Millisecond
		info.Grace = time.Duration(d.GraceMs) * time.Millisecond
		info.Opts = d.opts()
		info.StartWithin = time.Duration(d.StartWithinMs) * time.Millisecond
	}
	return info
}

// Schedules lists the namespace's schedules, sorted by name.
func (in *Inspector) Schedules(ctx context.Context) ([]ScheduleInfo, error) {
	recs, err := in.st.Schedules(ctx)
	if err != nil {
		return nil, fmt.Errorf("worqr: schedules: %w", err)
	}
	out := make([]ScheduleInfo, len(recs))
	for i, r := range recs {
		out[i] = scheduleInfo(r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Schedule returns schedule name, or ErrScheduleNotFound.
func (in *Inspector) Schedule(ctx context.Context, name string) (*ScheduleInfo, error) {
	if err := checkName("name", name); err != nil {
		return nil, err
	}
	r, err := in.st.Schedule(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("worqr: schedule %s: %w", name, err)
	}
	if r == nil {
		return nil, ErrScheduleNotFound
	}
	info := scheduleInfo(r)
	return &info, nil
}

// PauseSchedule stops schedule name from firing until ResumeSchedule;
// ErrScheduleNotFound when there is none.
func (in *Inspector) PauseSchedule(ctx context.Context, name string) error {
	if err := checkName("name", name); err != nil {
		return err
	}
	ok, err := in.st.PauseSchedule(ctx, name)
	if err != nil {
		return fmt.Errorf("worqr: pause schedule %s: %w", name, err)
	}
	if !ok {
		return ErrScheduleNotFound
	}
	return nil
}

// ResumeSchedule lets a paused schedule fire again from its first tick after
// Redis's current time: the ticks that fell during the pause are skipped,
// whatever its MissedPolicy. Resuming a schedule that is not paused changes
// nothing. ErrScheduleNotFound when there is none.
func (in *Inspector) ResumeSchedule(ctx context.Context, name string) error {
	return in.resumeSchedule(ctx, name, 0)
}

func (in *Inspector) resumeSchedule(ctx context.Context, name string, at int64) error {
	if err := checkName("name", name); err != nil {
		return err
	}
	// The next tick is worked out from the timing read: a re-registration
	// with another timing in between is refused by the resume (its tick
	// would be one of the old timing's), and the schedule is read again.
	for try := 0; ; try++ {
		r, err := in.st.Schedule(ctx, name)
		if err != nil {
			return fmt.Errorf("worqr: resume schedule %s: %w", name, err)
		}
		if r == nil {
			return ErrScheduleNotFound
		}
		def, tk, err := decodeDef(r.Def)
		if err != nil {
			return fmt.Errorf("worqr: resume schedule %s: %w", name, err)
		}
		now := at
		if now == 0 {
			if now, err = in.st.Time(ctx, rdb.PeriodicTag); err != nil {
				return fmt.Errorf("worqr: resume schedule %s: %w", name, err)
			}
		}
		next := tk.Next(now)
		if next == 0 {
			next = maxTick
		}
		if f, ok := in.hooks.resumeRead.get(); ok {
			f(name)
		}
		ok, err := in.st.ResumeSchedule(ctx, name, def.timing(), next)
		if errors.Is(err, rdb.ErrTimingChanged) && try < 3 {
			continue
		}
		if err != nil {
			return fmt.Errorf("worqr: resume schedule %s: %w", name, err)
		}
		if !ok {
			return ErrScheduleNotFound
		}
		return nil
	}
}

// RemoveSchedule deletes schedule name: no Scheduler fires it again (a pass
// already under way may still enqueue its current tick).
// ErrScheduleNotFound when there was none.
func (in *Inspector) RemoveSchedule(ctx context.Context, name string) error {
	if err := checkName("name", name); err != nil {
		return err
	}
	ok, err := in.st.RemoveSchedule(ctx, name)
	if err != nil {
		return fmt.Errorf("worqr: remove schedule %s: %w", name, err)
	}
	if !ok {
		return ErrScheduleNotFound
	}
	return nil
}
