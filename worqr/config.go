package worqr

import (
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"time"
	"unicode/utf8"

	"github.com/worqr/worqr-go/defaults"

	"github.com/worqr/worqr-go/internal/rdb"
)

// Limits and defaults.
const (
	defaultMaxPayloadBytes = 1 << 20 // 1 MiB
	defaultMaxAttempts     = 25
	defaultConcurrency     = 10
	defaultMaxCrashes      = 5
	defaultDeadMaxCount    = 10000
	defaultDeadMaxAge      = 90 * 24 * time.Hour
	defaultTimeout         = 30 * time.Minute
	defaultStuckAfter      = 10 * time.Minute

	// maxPayloadLimit is the largest MaxPayloadBytes allowed (Redis's default
	// proto-max-bulk-len is 512 MiB).
	maxPayloadLimit = 256 << 20

	// maxConcurrency is the largest QueueConfig.Concurrency and
	// WorkerConfig.Concurrency: each slot is a handler goroutine and room
	// in the queue's channel, made when the worker is made.
	maxConcurrency = 100_000
)

// Config is what a Client needs. The zero value works: every field has a
// default, given in its comment.
type Config struct {
	// Namespace prefixes every Redis key and channel, so several applications
	// can share one Redis. Same rules as queue names. Default "worqr".
	Namespace string
	// MaxPayloadBytes is the largest payload Enqueue accepts. Default 1 MiB,
	// at most 256 MiB.
	MaxPayloadBytes int
	// Logger receives the library's logs. Default: warnings and errors as
	// text on stderr.
	Logger *slog.Logger
	// EventInterval is how often this process publishes the events it
	// observed (see Inspector.Follow), and adds them to the throughput
	// history (see Inspector.History): at most one message per interval,
	// and none when nothing happened. Default 250ms, at least 10ms.
	EventInterval time.Duration
	// DisableEvents keeps this process's events to itself (OnEvent still
	// sees a Worker's): it neither publishes them nor counts them in the
	// throughput history.
	DisableEvents bool
	// EventLogLength, when > 0, also keeps about that many of the latest
	// published batches in a stream (XADD MAXLEN ~), for
	// Inspector.RecentEvents. Default 0: live events only.
	EventLogLength int
	// Replicas, when > 0, makes every enqueue of a Client (Enqueue,
	// EnqueueBatch, EnqueueMerge, StartRun; not a bulk load), every take and every
	// end of a taking by a Worker or a remote session wait until that many replicas of the
	// primary have the write (Redis WAIT, sent on the connection that made
	// the write, in the same round trip), or ReplicaTimeout passes, before
	// it is acknowledged. Redis replication is asynchronous: without it, a
	// write acknowledged by a primary that dies before a replica got it is
	// lost on failover (docs/RELIABILITY.md has the figures). When fewer
	// replicas acknowledge in time, the write was still applied on the
	// primary (it is not undone, and is lost only if the primary fails
	// before a replica gets it): an enqueue returns its ids with an error
	// that matches ErrNotReplicated (a *ReplicaError); a worker logs it,
	// reports an EventError and counts it (Worker.Unreplicated), and the
	// taking stays ended. On Redis Cluster each master waits for its own
	// replicas. Default 0: no WAIT is ever sent.
	Replicas int
	// ReplicaTimeout bounds the wait for Replicas. Default 1s, at most 4s
	// (a worker bounds an end call at 5s).
	ReplicaTimeout time.Duration
}

// withDefaults returns a validated copy of c with defaults filled in.
func (c *Config) withDefaults() (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Namespace == "" {
		out.Namespace = defaults.Namespace
	}
	if err := checkName("Namespace", out.Namespace); err != nil {
		return out, err
	}
	switch {
	case out.MaxPayloadBytes == 0:
		out.MaxPayloadBytes = defaultMaxPayloadBytes
	case out.MaxPayloadBytes < 0 || out.MaxPayloadBytes > maxPayloadLimit:
		return out, invalid("MaxPayloadBytes", "(%d) must be between 1 and %d", out.MaxPayloadBytes, maxPayloadLimit)
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	switch {
	case out.EventInterval == 0:
		out.EventInterval = defaults.EventInterval
	case out.EventInterval < defaults.MinInterval:
		return out, invalid("EventInterval", "(%s) must be at least %s", out.EventInterval, defaults.MinInterval)
	}
	if out.EventLogLength < 0 {
		return out, invalid("EventLogLength", "(%d) must not be negative", out.EventLogLength)
	}
	if out.Replicas < 0 {
		return out, invalid("Replicas", "(%d) must not be negative", out.Replicas)
	}
	switch {
	case out.ReplicaTimeout < 0 || out.ReplicaTimeout > defaults.MaxReplicaTimeout:
		return out, invalid("ReplicaTimeout", "(%s) must be between 0 and %s", out.ReplicaTimeout, defaults.MaxReplicaTimeout)
	case out.ReplicaTimeout > 0 && out.ReplicaTimeout < time.Millisecond:
		return out, invalid("ReplicaTimeout", "(%s) must be at least 1ms (WAIT counts whole milliseconds)", out.ReplicaTimeout)
	case out.ReplicaTimeout > 0 && out.Replicas == 0:
		return out, invalid("ReplicaTimeout", "(%s) applies only with Replicas", out.ReplicaTimeout)
	case out.ReplicaTimeout == 0 && out.Replicas > 0:
		out.ReplicaTimeout = defaults.ReplicaTimeout
	}
	return out, nil
}

// QueueConfig says how a Worker serves one queue.
type QueueConfig struct {
	// Handler runs each task. Required, unless BatchHandler is set.
	Handler Handler
	// BatchHandler, with KeyBatch, runs the queue's tasks in batches of
	// one key instead of Handler (which must then be nil): see
	// BatchHandler and KeyBatch.
	BatchHandler BatchHandler
	// KeyBatch is the most tasks of one key BatchHandler gets at once: a
	// key's head and up to KeyBatch-1 tasks of that key waiting behind it
	// (enqueued with the same EnqueueOpts.Key), in enqueue order; a task
	// enqueued for later than now stops a batch. 1 to 1,000 with
	// BatchHandler; 0 without. A batch takes one of Concurrency's slots.
	// With global limits (Limits), each task of a batch counts as a
	// running task and a start: batches are cut to what the limits allow.
	// Stand-alone queues only.
	KeyBatch int
	// Concurrency is how many tasks of this queue run at once in this
	// worker: 1 to 100,000, default 10. When the worker serves its
	// queues by priority (WorkerConfig.Priority) the queues share
	// WorkerConfig.Concurrency instead, and this, when > 0, caps this
	// queue's share (0: no cap). Each slot is a handler goroutine, started
	// with the worker.
	Concurrency int
	// ReadAhead is how many tasks beyond Concurrency the worker may take
	// ahead of its handlers, while the queue's handlers return in under a
	// millisecond on average: a handler that returns then starts its next
	// task at once, without waiting for its end's round trip, and each end
	// carries more tasks back. Never more than Concurrency handlers run at
	// once. A task taken ahead that finds no free handler within 10 ms for
	// each Concurrency tasks read ahead (handlers that slowed down) goes
	// back to the front of its queue, with nothing counted, and the worker
	// stops reading ahead until its handlers are fast again; it does the
	// same when the worker stops.
	// While taken ahead, a task counts as active (Inspector) and, like any
	// task a worker holds, is run elsewhere if the worker dies (a crash
	// counted: MaxCrashes).
	// 0: Concurrency; negative: never; at most 1,024. Stand-alone
	// queues with a Handler and a Concurrency of 2 or more (at 1, tasks run
	// one at a time in the order they are taken), not served by priority
	// (WorkerConfig.Priority), and not while the queue has global limits
	// (Limits), tasks of a priority above 0 (EnqueueOpts.Priority) or, a
	// fair queue, limits per key (a Concurrency or a Rate in
	// KeyPolicy.PerKey or in any key's KeyLimits; weights do not count).
	ReadAhead int
	// Weight is the queue's priority when the worker serves its queues by
	// priority (WorkerConfig.Priority): its share of the slots
	// (PriorityWeighted) or its rank (PriorityStrict: higher first). At
	// least 1; default 1 (with PriorityWeighted the weights of the queues
	// must add up to at most math.MaxInt). Must be 0 otherwise.
	Weight int
	// Limits, when set, are stored as the queue's global limits when the
	// worker starts (every process then applies them; a zero Limits removes
	// them). Nil leaves what is stored (see Inspector.SetLimits).
	Limits *Limits
	// MaxAttempts is how many times a task may fail (return an error, panic,
	// time out) before it goes to the dead set. A task's EnqueueOpts
	// overrides it. Crashes are counted apart (MaxCrashes). Default 25.
	MaxAttempts int
	// Backoff returns how long to wait before the next attempt after failed
	// attempt number attempt (1-based). Default DefaultBackoff. A Backoff
	// that panics is logged, and DefaultBackoff's wait applies.
	Backoff func(attempt int, err error) time.Duration
	// Timeout is the deadline of each run's context; the run then counts as a
	// failed attempt (a *TimeoutError), so that a handler that never
	// returns frees its slot and its task. A task's EnqueueOpts.Timeout
	// overrides it. Default 30 minutes; negative: no limit.
	Timeout time.Duration
	// StuckAfter: a taking that has run this long and still runs is
	// reported once as stuck, by an EventStuck and a warning in the log of
	// the process that runs it (a remote worker's: of the process that
	// serves its session), whatever its Timeout. Default 10 minutes;
	// negative: never.
	StuckAfter time.Duration
	// MaxCrashes is how many workers may die while running one task before
	// the task goes to the dead set with reason "crashed", so that a task
	// that kills its worker cannot starve the queue. Negative: no limit.
	// Default 5.
	MaxCrashes int
	// Retention is how long a done, cancelled or expired task (its outcome
	// and result) stays readable by Inspector.Task. Default 0: deleted at
	// once, but for a done task whose handler set a result (Task.SetResult),
	// kept 24 h.
	Retention time.Duration
	// DeadMaxCount caps the dead set; the oldest entries go first.
	// Default 10,000.
	DeadMaxCount int
	// DeadMaxAge caps how long a task stays in the dead set. Default 90 days.
	DeadMaxAge time.Duration
	// Keys is how the queue treats tasks enqueued with a key
	// (EnqueueOpts.Key): ordered (merging, what a dead task does to its
	// key) or fair (shared between keys, each within its limits).
	// Stored in Redis when the worker starts, for every process to read.
	Keys KeyPolicy
}

// DefaultBackoff waits 1s after the first failed attempt and doubles each
// time up to an hour, with equal jitter: the wait is uniformly random in
// [d/2, d], so that retries of tasks that failed together spread out.
func DefaultBackoff(attempt int, _ error) time.Duration {
	d := time.Hour
	if attempt < 13 {
		d = min(time.Second<<max(attempt-1, 0), time.Hour)
	}
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// WorkerConfig is what a Worker needs. Queues or Flows is required (a
// worker serves at least one queue); every other field has a default, given
// in its comment.
type WorkerConfig struct {
	Config
	// Queues maps each queue name to serve to its handler and concurrency.
	Queues map[string]QueueConfig
	// Flows are served whole: every stage and child queue of each.
	Flows []*Flow
	// HeartbeatInterval is how often the keepalive is renewed. Default 1s.
	HeartbeatInterval time.Duration
	// HeartbeatTTL is the keepalive's lifetime: a worker silent for this
	// long is dead to its peers. Must be greater than HeartbeatInterval.
	// Default 3s.
	HeartbeatTTL time.Duration
	// ReaperInterval is how often a peer checks for dead workers. Default 1s.
	// A dead worker's tasks are offered again within HeartbeatTTL +
	// ReaperInterval.
	ReaperInterval time.Duration
	// PollInterval is how often an idle worker looks at its queues without a
	// wake-up (pub/sub messages can be lost). Default 1s.
	PollInterval time.Duration
	// DisableReaper turns off this worker's part in recovery. Some peer must
	// run a reaper (another worker, a recovery.Reaper, or the stand-alone
	// `worqr-example reaper`) or dead workers' tasks stay held forever.
	// Default false.
	DisableReaper bool
	// DisableHandoff stops the worker from parking on its idle queues. A
	// parked worker is handed a task by the enqueue itself (one round trip
	// less per task, see docs/PROTOCOL.md "Hand-offs"); the hand-off's
	// message, payload included, goes to every process subscribed to the
	// queue. Only stand-alone queues without priority sharing, batches or
	// Replicas park. Default false.
	DisableHandoff bool
	// Priority says how the worker shares its slots among its stand-alone
	// queues (Queues; flows keep their own): PriorityNone (the default),
	// each queue has its own Concurrency and is taken from on its own;
	// PriorityWeighted, the queues share Concurrency slots and each free
	// slot goes to a queue with waiting work drawn by QueueConfig.Weight,
	// so that queues of weights 6, 3 and 1 with work get about 60%, 30% and
	// 10% of the takes; PriorityStrict, each free slot goes to the queue of
	// highest Weight that has waiting work (a lower queue is served only
	// while every higher one is empty, paused or held by its limits).
	Priority PriorityMode
	// Concurrency is how many tasks of Queues run at once in all when
	// Priority is set (1 to 100,000, default 10). Must be 0 otherwise.
	Concurrency int
	// Middleware wraps every task handler of the worker (stand-alone queues
	// and flow child queues; not stage handlers), the first outermost.
	Middleware []Middleware
	// StageMiddleware wraps every flow stage handler of the worker, the
	// first outermost.
	StageMiddleware []StageMiddleware
	// OnEvent, when set, is called for every event: finishes, lost takings,
	// keepalive loss and re-registration, recoveries. It runs on the worker's
	// goroutines and must return quickly; a panic in it is not recovered
	// (it ends the process, as on any goroutine). It must not call Worker.Stop
	// itself (start a goroutine that does): the finish events run on
	// handler goroutines, which Stop waits for until its context ends.
	OnEvent func(Event)
}

func (c *WorkerConfig) withDefaults() (WorkerConfig, error) {
	if c == nil {
		return WorkerConfig{}, invalid("WorkerConfig", "is nil")
	}
	out := *c
	base, err := c.Config.withDefaults()
	if err != nil {
		return out, err
	}
	out.Config = base
	if len(out.Queues) == 0 && len(out.Flows) == 0 {
		return out, invalid("Queues", "is empty and there are no Flows: a worker needs at least one queue")
	}
	if out.Flows, err = validateFlows(out.Flows, nil); err != nil {
		return out, err
	}
	switch out.Priority {
	case PriorityNone:
		if out.Concurrency != 0 {
			return out, invalid("Concurrency", "(%d) applies only with Priority: set each QueueConfig.Concurrency", out.Concurrency)
		}
	case PriorityWeighted, PriorityStrict:
		if out.Concurrency == 0 {
			out.Concurrency = defaultConcurrency
		}
		if out.Concurrency < 1 {
			return out, invalid("Concurrency", "(%d) must not be negative", out.Concurrency)
		}
		if out.Concurrency > maxConcurrency {
			return out, invalid("Concurrency", "(%d) must be at most %d", out.Concurrency, maxConcurrency)
		}
	default:
		return out, invalid("Priority", "(%d) must be PriorityNone, PriorityWeighted or PriorityStrict", int(out.Priority))
	}
	queues := make(map[string]QueueConfig, len(out.Queues))
	for name, q := range out.Queues {
		field := fmt.Sprintf("Queues[%q]", name)
		if err := checkName(field, name); err != nil {
			return out, err
		}
		if q.Handler == nil && q.BatchHandler == nil {
			return out, invalid(field+".Handler", "is nil (set Handler, or BatchHandler with KeyBatch)")
		}
		if err := q.checkBatch(field); err != nil {
			return out, err
		}
		if out.Priority == PriorityNone && q.Concurrency == 0 {
			q.Concurrency = defaultConcurrency
		}
		switch {
		case q.Concurrency < 0:
			return out, invalid(field+".Concurrency", "(%d) must not be negative", q.Concurrency)
		case out.Priority == PriorityNone && q.Weight != 0:
			return out, invalid(field+".Weight", "(%d) applies only with WorkerConfig.Priority", q.Weight)
		case q.Weight < 0:
			return out, invalid(field+".Weight", "(%d) must not be negative", q.Weight)
		case q.ReadAhead > maxReadAhead:
			return out, invalid(field+".ReadAhead", "(%d) must be at most %d", q.ReadAhead, maxReadAhead)
		case q.ReadAhead > 0 && out.Priority != PriorityNone:
			return out, invalid(field+".ReadAhead", "(%d) does not apply with WorkerConfig.Priority (queues that share slots)", q.ReadAhead)
		case q.ReadAhead > 0 && q.BatchHandler != nil:
			return out, invalid(field+".ReadAhead", "(%d) does not apply with BatchHandler", q.ReadAhead)
		}
		if err := q.fill(field); err != nil {
			return out, err
		}
		queues[name] = q
	}
	if out.Priority == PriorityWeighted {
		// Each draw adds the weights up (prioGroup.share): past the
		// largest int the sum turns negative and no queue is ever drawn.
		sum := 0
		for _, q := range queues {
			w := max(q.Weight, 1)
			if w > math.MaxInt-sum {
				return out, invalid("Queues", "(their Weight, 1 for a queue without one) must add up to at most %d with PriorityWeighted", math.MaxInt)
			}
			sum += w
		}
	}
	out.Queues = queues
	def := func(d *time.Duration, v time.Duration, name string) error {
		if *d == 0 {
			*d = v
		}
		if *d < 0 {
			return invalid(name, "(%s) must not be negative", *d)
		}
		return nil
	}
	for _, f := range []struct {
		d    *time.Duration
		v    time.Duration
		name string
	}{
		{&out.HeartbeatInterval, defaults.HeartbeatInterval, "HeartbeatInterval"},
		{&out.HeartbeatTTL, defaults.HeartbeatTTL, "HeartbeatTTL"},
		{&out.ReaperInterval, defaults.ReaperInterval, "ReaperInterval"},
		{&out.PollInterval, defaults.PollInterval, "PollInterval"},
	} {
		if err := def(f.d, f.v, f.name); err != nil {
			return out, err
		}
	}
	for _, f := range []struct {
		d    time.Duration
		name string
	}{
		{out.HeartbeatInterval, "HeartbeatInterval"},
		{out.ReaperInterval, "ReaperInterval"},
		{out.PollInterval, "PollInterval"},
	} {
		if f.d < defaults.MinInterval {
			return out, invalid(f.name, "(%s) must be at least %s", f.d, defaults.MinInterval)
		}
	}
	if out.HeartbeatTTL <= out.HeartbeatInterval {
		return out, invalid("HeartbeatTTL", "(%s) must be greater than HeartbeatInterval (%s)", out.HeartbeatTTL, out.HeartbeatInterval)
	}
	return out, nil
}

// PriorityMode is how a worker shares its slots among its queues (see
// WorkerConfig.Priority).
type PriorityMode int

// The priority modes.
const (
	PriorityNone     PriorityMode = iota // each queue on its own
	PriorityWeighted                     // shared slots, drawn by weight
	PriorityStrict                       // shared slots, highest weight first
)

func (m PriorityMode) String() string {
	switch m {
	case PriorityNone:
		return "none"
	case PriorityWeighted:
		return "weighted"
	case PriorityStrict:
		return "strict"
	}
	return fmt.Sprintf("PriorityMode(%d)", int(m))
}

// Limits are a queue's global limits, shared by every process: they are
// stored in Redis, in the queue's settings, and the take script reads them
// on every take of a limited queue, so every worker applies the same
// values (the last stored wins; see Inspector.SetLimits). A zero field
// means no such limit.
type Limits struct {
	// Rate tasks at most start in any window of Period, across every
	// worker (a sliding window on Redis's clock). Set both or neither.
	Rate   int
	Period time.Duration
	// Concurrency tasks of the queue at most run at once across every
	// worker. A taking counts from its take until it ends (done, failed,
	// given back, cancelled) or is requeued (a stopped worker, or a dead
	// one found by the reaper: within HeartbeatTTL + ReaperInterval).
	Concurrency int
}

func (l Limits) check(field string) error {
	switch {
	case l.Rate < 0:
		return invalid(field+".Rate", "(%d) must not be negative", l.Rate)
	case l.Concurrency < 0:
		return invalid(field+".Concurrency", "(%d) must not be negative", l.Concurrency)
	case l.Rate > 0 && l.Period < time.Millisecond:
		return invalid(field+".Period", "(%s) must be at least 1ms when Rate is set", l.Period)
	case l.Rate == 0 && l.Period != 0:
		return invalid(field+".Period", "(%s) is set but Rate is 0", l.Period)
	case l.Period%time.Millisecond != 0:
		// Stored in whole milliseconds: 1.999ms would count as 1ms, near
		// twice the rate asked.
		return invalid(field+".Period", "(%s) must be a whole number of milliseconds", l.Period)
	}
	return nil
}

func (l Limits) rdb() rdb.Limits {
	return rdb.Limits{Rate: l.Rate, PeriodMs: l.Period.Milliseconds(), Conc: l.Concurrency}
}

// checkBatch checks BatchHandler and KeyBatch of a stand-alone queue.
func (q *QueueConfig) checkBatch(field string) error {
	switch {
	case q.KeyBatch < 0 || q.KeyBatch > defaults.MaxKeyBatch:
		return invalid(field+".KeyBatch", "(%d) must be between 1 and %d with BatchHandler, or 0", q.KeyBatch, defaults.MaxKeyBatch)
	case q.BatchHandler != nil && q.Handler != nil:
		return invalid(field+".Handler", "must be nil when BatchHandler is set (it runs every task of the queue)")
	case q.BatchHandler != nil && q.KeyBatch == 0:
		return invalid(field+".KeyBatch", "(0) must be between 1 and %d when BatchHandler is set", defaults.MaxKeyBatch)
	case q.BatchHandler == nil && q.KeyBatch != 0:
		return invalid(field+".KeyBatch", "(%d) needs a BatchHandler (a Handler runs one task at a time)", q.KeyBatch)
	}
	return nil
}

// noBatch refuses batches, reading ahead and a priority weight on a flow's
// or a remote's queue: they apply only to a worker's stand-alone queues.
func (q *QueueConfig) noBatch(field string) error {
	if q.BatchHandler != nil || q.KeyBatch != 0 {
		return invalid(field+".KeyBatch", "and BatchHandler apply only to stand-alone queues (WorkerConfig.Queues)")
	}
	if q.ReadAhead > 0 {
		return invalid(field+".ReadAhead", "(%d) applies only to stand-alone queues (WorkerConfig.Queues)", q.ReadAhead)
	}
	if q.Weight != 0 {
		return invalid(field+".Weight", "(%d) applies only to stand-alone queues (WorkerConfig.Queues) served by priority", q.Weight)
	}
	return nil
}

func (q *QueueConfig) fill(field string) error {
	if q.Concurrency > maxConcurrency {
		return invalid(field+".Concurrency", "(%d) must be at most %d", q.Concurrency, maxConcurrency)
	}
	if q.Limits != nil {
		if err := q.Limits.check(field + ".Limits"); err != nil {
			return err
		}
	}
	if err := q.Keys.check(field + ".Keys"); err != nil {
		return err
	}
	if q.Keys.Fair && q.KeyBatch != 0 {
		return invalid(field+".KeyBatch", "(%d) applies to ordered queues, not to a Fair one", q.KeyBatch)
	}
	switch {
	case q.MaxAttempts == 0:
		q.MaxAttempts = defaultMaxAttempts
	case q.MaxAttempts < 0:
		return invalid(field+".MaxAttempts", "(%d) must not be negative", q.MaxAttempts)
	}
	if q.Backoff == nil {
		q.Backoff = DefaultBackoff
	}
	if q.Timeout == 0 {
		q.Timeout = defaultTimeout
	}
	if q.StuckAfter == 0 {
		q.StuckAfter = defaultStuckAfter
	}
	switch {
	case q.MaxCrashes == 0:
		q.MaxCrashes = defaultMaxCrashes
	case q.MaxCrashes < 0:
		q.MaxCrashes = 0 // no limit, as the take script reads it
	}
	if q.Retention < 0 {
		return invalid(field+".Retention", "(%s) must not be negative", q.Retention)
	}
	if q.Retention > 0 && q.Retention < time.Millisecond {
		return invalid(field+".Retention", "(%s) must be at least 1ms", q.Retention)
	}
	switch {
	case q.DeadMaxCount == 0:
		q.DeadMaxCount = defaultDeadMaxCount
	case q.DeadMaxCount < 0:
		return invalid(field+".DeadMaxCount", "(%d) must not be negative", q.DeadMaxCount)
	}
	switch {
	case q.DeadMaxAge == 0:
		q.DeadMaxAge = defaultDeadMaxAge
	case q.DeadMaxAge < time.Millisecond:
		return invalid(field+".DeadMaxAge", "(%s) must be at least 1ms", q.DeadMaxAge)
	}
	return nil
}

// CheckQueueName returns an *InvalidError when name cannot be a queue name:
// 1 to 100 bytes of ASCII letters, digits, '_', '-' and '.'. Braces, colons,
// slashes, spaces and other characters would break the key layout.
func CheckQueueName(name string) error { return checkName("queue name", name) }

func checkName(field, name string) error {
	if name == "" {
		return invalid(field, "is empty (want 1 to %d characters of A-Z a-z 0-9 _ - .)", defaults.MaxNameLen)
	}
	if len(name) > defaults.MaxNameLen {
		return invalid(field, "is %d bytes long (at most %d)", len(name), defaults.MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		b := name[i]
		if b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '-' || b == '.' {
			continue
		}
		r, _ := utf8.DecodeRuneInString(name[i:])
		return invalid(field, "%q has forbidden character %q at byte %d (allowed: A-Z a-z 0-9 _ - .)", name, r, i)
	}
	return nil
}

// validateFlows validates each flow a Worker or a remote.Server serves, after
// prepare (when set) adjusted a copy of it, and refuses a flow served
// twice. It returns the flows with their defaults filled in.
func validateFlows(flows []*Flow, prepare func(Flow) Flow) ([]*Flow, error) {
	out := make([]*Flow, len(flows))
	names := map[string]bool{}
	for i, f := range flows {
		if f == nil {
			return nil, invalid(fmt.Sprintf("Flows[%d]", i), "is nil")
		}
		g := *f
		if prepare != nil {
			g = prepare(g)
		}
		v, err := g.validate()
		if err != nil {
			return nil, err
		}
		if names[v.Name] {
			return nil, invalid(fmt.Sprintf("Flows[%d]", i), "%q is served twice", v.Name)
		}
		names[v.Name] = true
		out[i] = v
	}
	return out, nil
}
