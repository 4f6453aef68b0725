package worqr

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/xid"

	"github.com/worqr/worqr-go/internal/engine"
	"github.com/worqr/worqr-go/internal/eventbus"
	"github.com/worqr/worqr-go/internal/group"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/recovery"
)

// ConnGetter is satisfied by *redis.Pool. worqr never closes it.
type ConnGetter = rdb.ConnGetter

// Client is the producer's side: it enqueues tasks (Enqueue, EnqueueBatch,
// EnqueueMerge; package load for bulk loads), starts flow runs, cancels
// them and waits for their ends. What reads or steers what Redis holds
// (lengths, tasks, the dead set, runs, pauses) is the Inspector's. It is
// safe for concurrent use.
type Client struct {
	st  *rdb.Store
	cfg Config
	bus *eventBus
	// waits is the one events subscription shared by Wait and WaitRun.
	waits *eventbus.Hub[Event]

	queues sync.Map // queue name -> *clientQueue
	flows  sync.Map // flow name -> true once its queues are recorded as known
	// knownEvery is how often a queue is recorded again among the known
	// queues (knownTTL; tests shorten it).
	knownEvery time.Duration
}

// clientQueue is what a Client keeps per queue it used: the key names, built
// once, the group that coalesces concurrent plain enqueues, and whether the
// queue was recorded among the known queues.
type clientQueue struct {
	qk      rdb.QueueKeys
	enqueue *group.Group[[]byte, plainEnqueued]
	// knownAt is when (unix ns) this client last recorded the queue among
	// the known queues (0: never); it records it again after knownTTL.
	knownAt atomic.Int64
	// levels is the highest priority level this client saw recorded in the
	// queue's config, at levelsAt (unix ns): an enqueue at a higher level,
	// or after levelsTTL, records its level first (see markLevel).
	levels   atomic.Int32
	levelsAt atomic.Int64
}

// levelsTTL is how long a client trusts what it saw of a queue's recorded
// priority levels (a config deleted meanwhile is recorded again).
const levelsTTL = time.Minute

// markLevel makes sure queue q's config records priority level l before
// tasks of that level are enqueued, so that workers take from its list.
func (c *Client) markLevel(ctx context.Context, q *clientQueue, l int) error {
	if l <= 0 || int(q.levels.Load()) >= l && time.Since(time.Unix(0, q.levelsAt.Load())) < levelsTTL {
		return nil
	}
	got, err := c.st.MarkLevel(ctx, q.qk, l)
	if err != nil {
		return err
	}
	q.levels.Store(int32(got))
	q.levelsAt.Store(time.Now().UnixNano())
	return nil
}

// NewClient returns a client on pool. A nil cfg means all defaults.
func NewClient(pool ConnGetter, cfg *Config) (*Client, error) {
	if pool == nil {
		return nil, invalid("pool", "is nil")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	warnPool(pool, c.Logger)
	st := rdb.NewStore(pool, c.Namespace)
	st.SetReplicas(c.Replicas, c.ReplicaTimeout)
	cl := &Client{st: st, cfg: c, bus: newEventBus(st, c), knownEvery: knownTTL}
	cl.waits = eventbus.NewHub(waitReadWidth(pool), func(e Event) string { return e.TaskID },
		func(ctx context.Context, channels []string, ready, down func(), fn func(Event)) {
			follow(ctx, cl.st, cl.cfg.Logger, channels, ready, down, fn)
		})
	return cl, nil
}

// enqueued publishes that n tasks (ids, when one) were enqueued to queue.
func (c *Client) enqueued(queue string, ids []string) {
	e := Event{Kind: EventEnqueued, At: time.Now(), Queue: queue, Count: len(ids)}
	if len(ids) == 1 {
		e.TaskID = ids[0]
	}
	c.bus.add(e)
}

// errIDTaken is the error of an enqueue whose id of the caller's was
// taken: ErrDuplicate.
func errIDTaken(queue, id string) error {
	return fmt.Errorf("worqr: enqueue %s: task id %s was used before with another payload, or names a task that still exists (past IDTTL: waiting, running, dead or retained), or a loaded task: %w", queue, id, ErrDuplicate)
}

// Flush publishes at once the events and history counts the Client
// observed since its last publication (a publication goes out at most
// every Config.EventInterval): a short-lived process (a script, a CLI
// command) calls it before it exits, or what it did in its last interval
// is missing from the events and the history. It waits for the
// publication, at most about 2 s; best effort, as every publication.
func (c *Client) Flush() { c.bus.flush() }

// ReportRecovered publishes what one pass of a reaper you run yourself
// (recovery.New, as worqr-example's reaper command does) did to queue
// r.Queue, as a Worker's own reaper reports its passes: an EventRecovered
// counting the takings put back, and an EventCancelled for each taking it
// ended as cancelled (its cancel was asked while the dead worker held it).
// Call it from recovery.Config.OnRecovered: without it Follow, Wait and the
// history never see that reaper's work (Wait still sees the end by its
// recheck). holder names the reaper in the events (Event.WorkerID of the
// EventRecovered). Best effort, batched as every event of the Client.
func (c *Client) ReportRecovered(holder string, r recovery.Recovered) {
	now := time.Now()
	queue := r.Queue.Member()
	c.bus.add(Event{Kind: EventRecovered, At: now, WorkerID: holder, Queue: queue, Count: r.Requeued, DeadWorkers: r.Workers})
	emitCancelled(func(e Event) {
		e.At = now
		c.bus.add(e)
	}, queue, recoveredCancels(r))
}

// EnqueueOpts are per-call options of Enqueue and EnqueueBatch. A nil pointer
// means the defaults.
type EnqueueOpts struct {
	// Delay makes the task available this long after Redis's current time
	// (at the back of the queue, within one reaper interval of being due).
	Delay time.Duration
	// At makes the task available at this time. Not with Delay.
	At time.Time
	// MaxAttempts overrides the queue's QueueConfig.MaxAttempts.
	MaxAttempts int
	// Timeout overrides the queue's QueueConfig.Timeout: positive, the
	// task's own limit; negative, no limit for this task.
	Timeout time.Duration
	// UniqueKey makes the enqueue fail with ErrDuplicate while another task
	// of the queue holds the same key: until that task ends (done, dead or
	// cancelled) or UniqueTTL passes, whichever comes first. Single Enqueue
	// only, at most 512 bytes.
	UniqueKey string
	// UniqueKeys gives EnqueueBatch one unique key per payload, in the same
	// order ("" = none for that payload; at most 512 bytes
	// each). A payload whose key is held (by a task of the queue that has
	// not ended, or by an earlier payload of the same batch) is left out
	// and the others are enqueued, in the same atomic step: the error is
	// then a *BatchError whose Duplicates name each one left out (it
	// matches ErrDuplicate), and its id in the returned slice is "". EnqueueBatch only; not with UniqueKey.
	UniqueKeys []string
	// UniqueTTL bounds how long UniqueKey (or each of UniqueKeys) is held.
	// Required with them.
	UniqueTTL time.Duration
	// Deadline, when set, is the time after which the task must not start:
	// a worker that takes it later (compared with Redis's clock when it is
	// taken) does not run it, and it ends as expired (StateExpired,
	// EventExpired; kept for the retention like a done task). A task
	// already running when its deadline passes is not stopped (see
	// Timeout); a retry that would be due past the deadline is due at it,
	// and so ends expired then. A Deadline not after At, or not after now
	// plus Delay on this process's clock, is refused (the task could never
	// start): with a clock ahead of Redis's, one just after is refused too.
	Deadline time.Time
	// Retention overrides the queue's QueueConfig.Retention for this task:
	// how long it stays readable by Inspector.Task (and Wait) once done,
	// cancelled or expired. Default 0: the queue's.
	Retention time.Duration
	// ID is a task id of the caller's choosing (same rules as queue names),
	// which makes the enqueue idempotent: an Enqueue repeated with the same
	// ID and payload, for example retried after its reply was lost, creates
	// nothing new and returns the same id, even after the task has run;
	// with another payload it fails with ErrDuplicate. The id is remembered
	// for IDTTL; past it, an Enqueue with the id creates a new task only
	// once no task of that id exists any more (waiting, scheduled, running,
	// dead, or kept for its retention): before, ErrDuplicate, whatever the
	// payload. Enqueue, or EnqueueBatch of one payload, only. With
	// Config.Replicas, a repeat waits for the replicas as the first
	// enqueue does, and returns the id with an error matching
	// ErrNotReplicated while too few of them have the task.
	ID string
	// IDTTL is how long ID is remembered. Default 24h.
	IDTTL time.Duration
	// Priority is the task's level within its queue, 0 (the default) to
	// MaxPriority: a worker takes the waiting tasks of the highest level
	// first, in enqueue order within a level. A task put back (give back,
	// a stopped or dead worker's takings, a lost take reply) goes to the
	// front of its own level. Stand-alone queues only.
	Priority int
	// Key makes the queue ordered for this task (see KeyPolicy): it runs
	// after every task enqueued earlier with the same Key on this queue has
	// ended, and never at the same time as one, on any worker. At most
	// 512 bytes. Not with UniqueKey, UniqueKeys, ID or Priority. A
	// batch enqueued with a Key runs in batch order. With Deadline, a task
	// of a key taken past it ends as expired and the key moves on; an
	// enqueue merged into a waiting task (KeyPolicy.Merge) keeps that
	// task's Deadline and Retention. On a fair queue (KeyPolicy.Fair) Key
	// orders nothing: it is the task's group, which shares the queue with
	// the other keys in turn, within its KeyLimits.
	Key string
	// Score orders the payloads of a merged task (KeyPolicy.Merge), lowest
	// first. Default: the enqueue time in unix milliseconds (Redis time).
	// Only with Key.
	Score float64
	// Meta is stored with the task, beside its payload, and handed to its
	// handler as Task.Meta (and to a remote worker as Taking.Meta):
	// propagation headers such as a trace context (contrib/otel sets it),
	// kept out of the payload, which is stored and shown as given. Every
	// task of an EnqueueBatch gets the same. With Key, a task merged into
	// a waiting one (KeyPolicy.Merge) keeps that task's. At most
	// 4,096 bytes once encoded (as a JSON object); no empty name.
	Meta map[string]string
	// Type makes the task (every task of an EnqueueBatch) a task of this
	// type, for a queue served by a Mux: the Mux routes it to the handler of
	// its type, which sees the payload as given (so does a remote worker,
	// with the type apart), and the Inspector shows it as TaskInfo.Type.
	// It follows the rules of queue names (1 to 100 bytes of A-Z a-z 0-9 _
	// - .). The type is stored in a tag in front of the payload (see
	// docs/PROTOCOL.md), not counted against MaxPayloadBytes. Not with
	// EnqueueMerge.
	Type string
}

// zero reports whether o asks for nothing (nil, or every field unset): such
// an enqueue takes the coalesced plain path. It names every field (the
// struct holds a slice, so it cannot be compared): a new field goes here too.
func (o *EnqueueOpts) zero() bool {
	if o == nil {
		return true
	}
	return o.Delay == 0 && o.At.IsZero() && o.MaxAttempts == 0 && o.Timeout == 0 && o.UniqueKey == "" &&
		o.UniqueKeys == nil && o.UniqueTTL == 0 && o.ID == "" && o.IDTTL == 0 && o.Deadline.IsZero() && o.Retention == 0 && o.Priority == 0 &&
		o.Key == "" && o.Score == 0 && len(o.Meta) == 0 && o.Type == ""
}

// MaxPriority is the highest EnqueueOpts.Priority.
const MaxPriority = rdb.MaxLevel

// defaultIDTTL is EnqueueOpts.IDTTL's default.
const defaultIDTTL = 24 * time.Hour

// maxUniqueKeyLen is the longest EnqueueOpts.UniqueKey, in bytes.
const maxUniqueKeyLen = 512

func (o *EnqueueOpts) args(n int) (*rdb.EnqueueArgs, error) {
	a := &rdb.EnqueueArgs{}
	if o == nil {
		return a, nil
	}
	if o.Key != "" {
		if err := checkKeyed(o); err != nil {
			return nil, err
		}
	} else if o.Score != 0 {
		return nil, invalid("EnqueueOpts.Score", "applies only with Key")
	}
	switch {
	case o.Delay < 0:
		return nil, invalid("EnqueueOpts.Delay", "(%s) must not be negative", o.Delay)
	case o.Delay > 0 && !o.At.IsZero():
		return nil, invalid("EnqueueOpts.At", "cannot be set together with Delay")
	case o.MaxAttempts < 0:
		return nil, invalid("EnqueueOpts.MaxAttempts", "(%d) must not be negative", o.MaxAttempts)
	case o.Priority < 0 || o.Priority > MaxPriority:
		return nil, invalid("EnqueueOpts.Priority", "(%d) must be between 0 and %d", o.Priority, MaxPriority)
	}
	a.Priority = o.Priority
	if o.Type != "" {
		if err := checkName("EnqueueOpts.Type", o.Type); err != nil {
			return nil, err
		}
	}
	meta, err := encodeMeta("EnqueueOpts.Meta", o.Meta)
	if err != nil {
		return nil, err
	}
	a.Meta = meta
	if o.Delay > 0 {
		a.DelayMillis = max(o.Delay.Milliseconds(), 1)
	}
	if !o.At.IsZero() {
		a.DueMillis = max(o.At.UnixMilli(), 1)
	}
	a.MaxAttempts = o.MaxAttempts
	switch {
	case o.Timeout > 0:
		a.TimeoutMs = max(o.Timeout.Milliseconds(), 1)
	case o.Timeout < 0:
		a.TimeoutMs = -1 // no limit, whatever the queue's
	}
	switch {
	case o.Retention < 0:
		return nil, invalid("EnqueueOpts.Retention", "(%s) must not be negative", o.Retention)
	case o.Retention > 0 && o.Retention < time.Millisecond:
		return nil, invalid("EnqueueOpts.Retention", "(%s) must be at least 1ms (0: the queue's)", o.Retention)
	case !o.Deadline.IsZero() && o.Deadline.UnixMilli() <= 0:
		return nil, invalid("EnqueueOpts.Deadline", "(%s) must be after 1970", o.Deadline)
	case !o.Deadline.IsZero() && !o.At.IsZero() && !o.Deadline.After(o.At):
		return nil, invalid("EnqueueOpts.Deadline", "(%s) must be after At (%s): the task could never start", o.Deadline, o.At)
	case !o.Deadline.IsZero() && o.Delay > 0 && !o.Deadline.After(time.Now().Add(o.Delay)):
		return nil, invalid("EnqueueOpts.Deadline", "(%s) must be after the Delay (%s from now): the task could never start", o.Deadline, o.Delay)
	}
	a.RetentionMs = o.Retention.Milliseconds()
	if !o.Deadline.IsZero() {
		a.DeadlineMs = o.Deadline.UnixMilli()
	}
	if o.UniqueKeys != nil {
		switch {
		case o.UniqueKey != "":
			return nil, invalid("EnqueueOpts.UniqueKeys", "cannot be set together with UniqueKey")
		case len(o.UniqueKeys) != n:
			return nil, invalid("EnqueueOpts.UniqueKeys", "has %d keys for %d payloads (one per payload, \"\" for none)", len(o.UniqueKeys), n)
		case o.UniqueTTL < time.Millisecond:
			return nil, invalid("EnqueueOpts.UniqueTTL", "(%s) must be at least 1ms when UniqueKeys is set", o.UniqueTTL)
		}
		for i, k := range o.UniqueKeys {
			if len(k) > maxUniqueKeyLen {
				return nil, invalid(fmt.Sprintf("EnqueueOpts.UniqueKeys[%d]", i), "is %d bytes long (at most %d)", len(k), maxUniqueKeyLen)
			}
		}
		a.UniqueKeys = o.UniqueKeys
		a.UniqueTTL = o.UniqueTTL.Milliseconds()
	}
	if o.UniqueKey != "" || (o.UniqueTTL != 0 && o.UniqueKeys == nil) {
		switch {
		case o.UniqueKey == "":
			return nil, invalid("EnqueueOpts.UniqueKey", "is empty but UniqueTTL is set")
		case len(o.UniqueKey) > maxUniqueKeyLen:
			return nil, invalid("EnqueueOpts.UniqueKey", "is %d bytes long (at most %d)", len(o.UniqueKey), maxUniqueKeyLen)
		case o.UniqueTTL < time.Millisecond:
			return nil, invalid("EnqueueOpts.UniqueTTL", "(%s) must be at least 1ms when UniqueKey is set", o.UniqueTTL)
		case n != 1:
			return nil, invalid("EnqueueOpts.UniqueKey", "applies to a single Enqueue, not a batch of %d (use UniqueKeys)", n)
		}
		a.UniqueKey = o.UniqueKey
		a.UniqueTTL = o.UniqueTTL.Milliseconds()
	}
	if o.ID != "" || o.IDTTL != 0 {
		if err := checkName("EnqueueOpts.ID", o.ID); err != nil {
			return nil, err
		}
		switch {
		case o.IDTTL < 0 || (o.IDTTL > 0 && o.IDTTL < time.Millisecond):
			return nil, invalid("EnqueueOpts.IDTTL", "(%s) must be at least 1ms (0: %s)", o.IDTTL, defaultIDTTL)
		case n != 1:
			return nil, invalid("EnqueueOpts.ID", "applies to a single Enqueue, not a batch of %d", n)
		}
		a.IDLockTTL = defaultIDTTL.Milliseconds()
		if o.IDTTL > 0 {
			a.IDLockTTL = o.IDTTL.Milliseconds()
		}
	}
	return a, nil
}

// queue resolves name for reads and dead-set operations: a stand-alone
// queue, or a flow's stage or child queue written "<flow>/<queue>".
func (c *Client) queue(name string) (rdb.QueueKeys, error) {
	ref, err := parseQueue(name)
	if err != nil {
		return rdb.QueueKeys{}, err
	}
	if !ref.Flow() {
		q, err := c.clientQueue(name)
		if err != nil {
			return rdb.QueueKeys{}, err
		}
		return q.qk, nil
	}
	return c.st.Queue(ref), nil
}

// parseQueue reads "<queue>" or "<flow>/<queue>".
func parseQueue(name string) (rdb.QueueRef, error) {
	if flow, q, ok := strings.Cut(name, "/"); ok {
		if err := checkName("queue name (flow part)", flow); err != nil {
			return rdb.QueueRef{}, err
		}
		if err := checkName("queue name (queue part)", q); err != nil {
			return rdb.QueueRef{}, err
		}
		return rdb.QueueRef{Tag: flow, Name: q}, nil
	}
	if err := CheckQueueName(name); err != nil {
		return rdb.QueueRef{}, err
	}
	return rdb.Standalone(name), nil
}

// clientQueue returns the state of stand-alone queue name, made on first use
// (a name is checked once; an invalid one is never stored).
func (c *Client) clientQueue(name string) (*clientQueue, error) {
	if q, ok := c.queues.Load(name); ok {
		return q.(*clientQueue), nil
	}
	if err := CheckQueueName(name); err != nil {
		return nil, err
	}
	q := &clientQueue{qk: c.st.Queue(rdb.Standalone(name))}
	qk := q.qk
	q.enqueue = &group.Group[[]byte, plainEnqueued]{
		MaxBatch: 256, MaxInFlight: 2,
		// Payload bytes weigh too, as EnqueueBatch's chunks do: a call
		// carries at most MaxEnqueueChunkBytes, or one larger payload (a
		// batch always takes its first), so that no call holds Redis long.
		Weight: func(p []byte) int { return len(p) }, MaxWeight: rdb.MaxEnqueueChunkBytes,
		Run: func(ctx context.Context, payloads [][]byte) ([]plainEnqueued, error) {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			out := make([]plainEnqueued, len(payloads))
			ids := make([]string, len(payloads))
			for i := range ids {
				ids[i] = xid.New().String()
			}
			_, err := c.st.Enqueue(ctx, qk, ids, payloads, nil)
			if err != nil && !errors.Is(err, ErrNotReplicated) {
				return nil, err
			}
			for i, id := range ids {
				out[i] = plainEnqueued{id: id, err: err} // enqueued, maybe not replicated
			}
			return out, nil
		},
	}
	actual, _ := c.queues.LoadOrStore(name, q)
	return actual.(*clientQueue), nil
}

// knownTTL is how often a client records again a queue it enqueues to
// among the known queues: a queue removed (Inspector.RemoveQueue) while a
// producer still enqueues to it is listed again within it.
const knownTTL = time.Minute

// markKnown records q among the known queues on a client's first enqueue
// to it, and again on its first enqueue after each knownTTL, so that the
// Inspector and the mover see a queue that was only enqueued to. One SADD
// per queue per minute: no enqueue pays for it more.
//
// Only the first record is needed for the enqueue: a later one that fails
// (the registry's node out of reach, on a Redis Cluster) is logged and
// tried again after knownEvery, and the enqueue goes on, so that a queue's
// enqueues never depend on another node once it is known.
func (c *Client) markKnown(ctx context.Context, q *clientQueue) error {
	at := q.knownAt.Load()
	if at != 0 && time.Since(time.Unix(0, at)) < c.knownEvery {
		return nil
	}
	if err := c.st.AddKnownQueues(ctx, []rdb.QueueRef{q.qk.Ref}); err != nil {
		if at == 0 {
			return err
		}
		c.cfg.Logger.Warn("client: recording a queue among the known queues again failed; tried again later",
			"queue", q.qk.Ref.Member(), "err", err)
	}
	q.knownAt.Store(time.Now().UnixNano())
	return nil
}

// Enqueue adds a task at the back of queue and wakes a worker. It returns the
// new task's id. With Config.Replicas, an error that matches
// ErrNotReplicated comes with the id: the task was enqueued on the primary,
// but too few replicas acknowledged it in time.
//
// An error from the connection (a reset, a timeout, ctx ending) may come
// after Redis applied the enqueue: the task may be in the queue, and its id
// is not returned. worqr does not send the call again by itself. When that
// matters, give the task an id (EnqueueOpts.ID) and repeat the call with
// it: a repeat with the same payload answers the same id and adds nothing.
// An *InvalidError, or an error reply from Redis (OOM, ...), means nothing
// was written.
func (c *Client) Enqueue(ctx context.Context, queue string, payload []byte, opts *EnqueueOpts) (string, error) {
	if opts.zero() {
		return c.enqueuePlain(ctx, queue, payload)
	}
	ids, err := c.enqueue(ctx, queue, [][]byte{payload}, "payload", opts)
	if err != nil {
		if len(ids) == 1 && errors.Is(err, ErrNotReplicated) {
			return ids[0], err
		}
		return "", err
	}
	return ids[0], nil
}

// enqueuePlain enqueues one task without options through the queue's group:
// plain enqueues that arrive together share one atomic script call (one
// round trip, one wake-up), and each caller gets its own id or error.
func (c *Client) enqueuePlain(ctx context.Context, queue string, payload []byte) (string, error) {
	q, err := c.clientQueue(queue)
	if err != nil {
		return "", err
	}
	if err := c.checkPayload("payload", payload); err != nil {
		return "", err
	}
	if err := c.markKnown(ctx, q); err != nil {
		return "", fmt.Errorf("worqr: enqueue %s: %w", queue, err)
	}
	r, err := q.enqueue.Call(ctx, payload)
	if err != nil {
		return "", fmt.Errorf("worqr: enqueue %s: %w", queue, err)
	}
	c.enqueued(queue, []string{r.id})
	if r.err != nil {
		return r.id, fmt.Errorf("worqr: enqueue %s: task %s: %w", queue, r.id, r.err)
	}
	return r.id, nil
}

// plainEnqueued is the id a plain enqueue got, and a *ReplicaError when the
// replicas asked for did not acknowledge it.
type plainEnqueued struct {
	id  string
	err error
}

// EnqueueBatch adds tasks at the back of queue, in order, and returns their
// ids in the same order. A batch of up to 1,000 tasks (and 4 MiB of
// payloads) is one atomic step: all are enqueued or none. A larger batch is
// split into atomic steps of up to 250 tasks, sent many at a time and
// applied in order, so that no call holds Redis for more than about a
// millisecond (and, given no options, its tasks wait packed, many to a
// Redis hash, until they are taken: see docs/PROTOCOL.md, "Bulk loads");
// if one fails, the error is a *BatchError saying how many tasks, from the first, were
// enqueued (their ids are returned), and the rest may or may not have been.
// With Config.Replicas, an error that matches ErrNotReplicated comes with
// every id: all were enqueued on the primary, but too few replicas
// acknowledged them in time.
func (c *Client) EnqueueBatch(ctx context.Context, queue string, payloads [][]byte, opts *EnqueueOpts) ([]string, error) {
	if len(payloads) == 0 {
		return nil, invalid("payloads", "is empty")
	}
	return c.enqueue(ctx, queue, payloads, "payloads[%d]", opts)
}

func (c *Client) enqueue(ctx context.Context, queue string, payloads [][]byte, field string, opts *EnqueueOpts) ([]string, error) {
	q, err := c.clientQueue(queue)
	if err != nil {
		return nil, err
	}
	args, err := opts.args(len(payloads))
	if err != nil {
		return nil, err
	}
	if args.UniqueKeys != nil && field == "payload" {
		return nil, invalid("EnqueueOpts.UniqueKeys", "applies to EnqueueBatch (use UniqueKey with Enqueue)")
	}
	if opts != nil && opts.Type != "" {
		typed := make([][]byte, len(payloads))
		for i, p := range payloads {
			typed[i] = typedPayload(opts.Type, p)
		}
		payloads = typed
	}
	for i, p := range payloads {
		name := field
		if len(payloads) > 1 || field != "payload" {
			name = fmt.Sprintf(field, i)
		}
		if err := c.checkPayload(name, p); err != nil {
			return nil, err
		}
	}
	if err := c.markKnown(ctx, q); err != nil {
		return nil, fmt.Errorf("worqr: enqueue %s: %w", queue, err)
	}
	if opts != nil && opts.Key != "" {
		return c.enqueueKeyed(ctx, queue, q, payloads, opts, args)
	}
	if err := c.markLevel(ctx, q, args.Priority); err != nil {
		return nil, fmt.Errorf("worqr: enqueue %s: record priority levels: %w", queue, err)
	}
	ids := make([]string, len(payloads))
	for i := range ids {
		ids[i] = xid.New().String()
	}
	if args.IDLockTTL > 0 {
		ids[0] = opts.ID
		sum := sha256.Sum256(payloads[0])
		args.Digest = hex.EncodeToString(sum[:16])
	}
	if len(payloads) == 1 && args.UniqueKeys == nil {
		holder, err := c.st.Enqueue(ctx, q.qk, ids, payloads, args)
		if errors.Is(err, rdb.ErrSameTask) {
			return ids, sameTask(queue, ids[0], err) // enqueued before (a retry): nothing new
		}
		if errors.Is(err, ErrNotReplicated) {
			c.enqueued(queue, ids)
			return ids, fmt.Errorf("worqr: enqueue %s: task %s: %w", queue, ids[0], err)
		}
		switch {
		case err == rdb.ErrDuplicate:
			return nil, &DuplicateError{Queue: queue, UniqueKey: opts.UniqueKey, HolderID: holder}
		case err == rdb.ErrIDTaken:
			return nil, errIDTaken(queue, ids[0])
		}
		if err != nil {
			return nil, fmt.Errorf("worqr: enqueue %s: %w", queue, err)
		}
		c.enqueued(queue, ids)
		return ids, nil
	}
	n, dups, err := c.st.EnqueueBatch(ctx, q.qk, ids, payloads, args)
	switch {
	case args.IDLockTTL > 0 && errors.Is(err, rdb.ErrSameTask):
		return ids, sameTask(queue, ids[0], err) // a batch of one with an id of the caller's, enqueued before
	case args.IDLockTTL > 0 && err == rdb.ErrIDTaken:
		return nil, errIDTaken(queue, ids[0])
	}
	var left []*DuplicateError
	for _, d := range dups {
		left = append(left, &DuplicateError{Queue: queue, Index: d.Index,
			UniqueKey: args.UniqueKeys[d.Index], HolderID: d.Holder})
		ids[d.Index] = ""
	}
	if n > 0 {
		var done []string
		for _, id := range ids[:n] {
			if id != "" {
				done = append(done, id)
			}
		}
		if len(done) > 0 {
			c.enqueued(queue, done)
		}
	}
	if errors.Is(err, ErrNotReplicated) && n == len(ids) {
		// Every task was enqueued on the primary; the error says that
		// too few replicas acknowledged them.
		if left != nil {
			return ids, fmt.Errorf("worqr: enqueue %s: %w (and %w)", queue, err,
				&BatchError{Queue: queue, Enqueued: n, Total: len(ids), Duplicates: left})
		}
		return ids, fmt.Errorf("worqr: enqueue %s: %d tasks: %w", queue, n, err)
	}
	if err != nil {
		return ids[:n], &BatchError{Queue: queue, Enqueued: n, Total: len(ids), Err: err, Duplicates: left}
	}
	if left != nil {
		return ids, &BatchError{Queue: queue, Enqueued: n, Total: len(ids), Duplicates: left}
	}
	return ids, nil
}

// sameTask is the error of an enqueue that found its id of the caller's
// enqueued before with the same payload (a repeat): nil, or, while the
// client waits for replicas (Config.Replicas) and too few of them have the
// task, its *ReplicaError.
func sameTask(queue, id string, err error) error {
	var re *ReplicaError
	if errors.As(err, &re) {
		return fmt.Errorf("worqr: enqueue %s: task %s (enqueued before): %w", queue, id, re)
	}
	return nil
}

// BatchError is returned by EnqueueBatch when payloads were left out as
// duplicates (EnqueueOpts.UniqueKeys), or when a batch split into several
// atomic steps failed part way, or a batch of one call failed (Err says
// why; nil when the batch was only short of its duplicates): the first
// Enqueued tasks are in the queue, and none after them. A batch of one
// call (at most 1,000 tasks and 4 MiB) is all or nothing: when its reply
// was lost, Redis is asked which (Enqueued is 0 or Total; with
// EnqueueOpts.UniqueKey or UniqueKeys it is not asked, and Enqueued 0 is a
// floor, as for Enqueue). Each step of a
// longer batch applies only after the one before it:
// when Redis refused one (an error reply, such as OOM), those sent behind
// it were refused too; when the replies were lost (a broken connection, a
// timeout), the batch is closed in Redis (no step still on its way
// applies) and Redis says how far it got. Only when Redis cannot be asked
// (out of reach for 5 seconds), or with EnqueueOpts.UniqueKeys (the tasks a
// step whose reply was lost left out are not known), may the steps after
// Enqueued that were sent (at most sixteen of 250 tasks) have been
// applied, in order: the tasks in the queue are then the batch's first
// ones, Enqueued or more.
//
// With EnqueueOpts.UniqueKeys, Enqueued counts the payloads handled
// (enqueued or left out as duplicates), and Duplicates names those of them
// left out, by increasing Index; a BatchError with Duplicates matches
// ErrDuplicate with errors.Is.
type BatchError struct {
	Queue           string
	Enqueued, Total int
	Err             error
	Duplicates      []*DuplicateError
}

func (e *BatchError) Error() string {
	var dups string
	switch {
	case len(e.Duplicates) == 1:
		d := e.Duplicates[0]
		dups = fmt.Sprintf("payloads[%d] left out: unique key %q is held by task %s", d.Index, d.UniqueKey, d.HolderID)
	case len(e.Duplicates) > 1:
		dups = fmt.Sprintf("%d payloads left out: their unique keys are held", len(e.Duplicates))
	}
	if e.Err == nil {
		return fmt.Sprintf("worqr: enqueue %s: %s", e.Queue, dups)
	}
	if dups != "" {
		dups = " (" + dups + ")"
	}
	return fmt.Sprintf("worqr: enqueue %s: %d of %d tasks enqueued%s: %v", e.Queue, e.Enqueued, e.Total, dups, e.Err)
}

func (e *BatchError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrDuplicate) true when payloads were left out
// as duplicates.
func (e *BatchError) Is(target error) bool { return target == ErrDuplicate && len(e.Duplicates) > 0 }

// DuplicateError is returned by Enqueue when the unique key is held. It
// matches ErrDuplicate with errors.Is.
type DuplicateError struct {
	Queue     string
	UniqueKey string
	HolderID  string // the task holding the key
	// Index is the payload's index in EnqueueBatch (in a BatchError);
	// 0 for Enqueue.
	Index int
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("worqr: duplicate task: unique key %q of queue %s is held by task %s", e.UniqueKey, e.Queue, e.HolderID)
}

// Is makes errors.Is(err, ErrDuplicate) true.
func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicate }

// CancelStatus says what Cancel did.
type CancelStatus int

// The results of Cancel.
const (
	// CancelNotFound: no such task waiting, scheduled or running (unknown,
	// ended, dead, or its cancel was already asked). Nothing changed.
	CancelNotFound CancelStatus = iota
	// CancelRemoved: the task was waiting or scheduled; it ended as
	// cancelled and no handler runs it. A task waiting deep in a long
	// queue (over 10,000 tasks from either end) is not searched for, so
	// that the call stays short: it is marked cancelled where it waits,
	// and the worker that reaches it ends it without running it; until
	// then it counts in the queue's length.
	CancelRemoved
	// CancelRequested: the task is running; its owner's handler context is
	// cancelled and the taking ends as cancelled, not requeued.
	CancelRequested
)

func (s CancelStatus) String() string {
	switch s {
	case CancelRemoved:
		return "removed"
	case CancelRequested:
		return "requested"
	}
	return "not_found"
}

// Cancel stops task id of queue: a waiting task is removed; a running task's
// owner is told to stop and its taking ends as cancelled (even if the owner
// missed the message: its finish sees the mark). Cancelling an unknown or
// finished task is a no-op and not an error. A flow run or child is refused:
// use CancelRun.
func (c *Client) Cancel(ctx context.Context, queue, id string) (CancelStatus, error) {
	qk, err := c.queue(queue)
	if err != nil {
		return CancelNotFound, err
	}
	if id == "" {
		return CancelNotFound, invalid("id", "is empty")
	}
	res, err := c.st.Cancel(ctx, qk, id)
	if err != nil {
		return CancelNotFound, fmt.Errorf("worqr: cancel %s: %w", id, err)
	}
	if res == rdb.CancelRefused {
		return CancelNotFound, invalid("id", "%s is a flow run or one of its children: cancel the run with CancelRun", id)
	}
	switch res {
	case rdb.CancelRemoved:
		c.bus.add(Event{Kind: EventCancelled, At: time.Now(), Queue: queue, TaskID: id})
	case rdb.CancelMarked:
		// Deep in a long queue: it stays there, marked, and the worker
		// that reaches it ends it as cancelled without running it (that
		// end records the event).
		return CancelRemoved, nil
	}
	return CancelStatus(res), nil
}

// task reads task id of queue for Wait, or returns ErrTaskNotFound (the
// Inspector's Task is the public read).
func (c *Client) task(ctx context.Context, queue, id string) (*TaskInfo, error) {
	qk, err := c.queue(queue)
	if err != nil {
		return nil, err
	}
	r, err := c.st.Task(ctx, qk, id)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, ErrTaskNotFound
	}
	return taskInfo(qk.Ref, r), nil
}

// taskInfo turns a record into the public view.
func taskInfo(q rdb.QueueRef, r *rdb.TaskRecord) *TaskInfo {
	payload, key, payloads := unwrap(r.Payload)
	info := &TaskInfo{
		ID:              r.ID,
		Queue:           q.Member(),
		Payload:         payload,
		Key:             key,
		Payloads:        payloads,
		Meta:            engine.DecodeMeta(r.Meta),
		State:           TaskState(r.State),
		Failures:        r.Failures,
		Crashes:         r.Crashes,
		LastError:       r.LastError,
		DeadReason:      r.DeadReason,
		DiedAt:          msTime(r.DeadAt),
		DiedOn:          r.DeadWorker,
		DueAt:           msTime(r.DueAt),
		Result:          r.Result,
		Progress:        r.Progress,
		FinishedAt:      msTime(r.FinishedAt),
		Deadline:        msTime(r.DeadlineMs),
		Retention:       time.Duration(r.RetentionMs) * time.Millisecond,
		WorkerID:        r.WorkerID,
		PID:             r.PID,
		CancelRequested: r.CancelRequested,
	}
	info.EnqueuedAt, _ = enqueuedAt(r.ID)
	info.fillRecord(r, time.Now())
	return info
}

// enqueuedAt reads when task id was first enqueued from the id itself: an
// id worqr made (an xid, second precision), or a periodic tick's
// ("<schedule>.<tick unix ms>", see Schedule.Name). An id of the caller's
// choosing (EnqueueOpts.ID) says nothing (false), unless it has a tick's
// shape.
func enqueuedAt(id string) (time.Time, bool) {
	if x, err := xid.FromString(id); err == nil {
		return x.Time(), true
	}
	if i := strings.LastIndexByte(id, '.'); i > 0 {
		// A tick from 2000 on, and not in the future.
		if ms, err := strconv.ParseInt(id[i+1:], 10, 64); err == nil && ms >= 946684800000 && ms <= time.Now().UnixMilli() {
			return time.UnixMilli(ms), true
		}
	}
	return time.Time{}, false
}

func msTime(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// warnPool warns when pool is a *redis.Pool that keeps no idle connection:
// every call would then dial a new TCP connection, several times slower
// than reusing one.
func warnPool(pool ConnGetter, log *slog.Logger) {
	if p, ok := pool.(*redis.Pool); ok && p.MaxIdle == 0 {
		log.Warn("worqr: the redis.Pool has MaxIdle 0, so nearly every call dials a new connection; " +
			"set MaxIdle to at least the total concurrency, or build the pool with redisconn.NewPool")
	}
}

// waitReadWidth is how many of a Client's waits may read at once: at most
// 8, and with a pool capped by MaxActive (a *redis.Pool, as
// redisconn.NewPool returns, or a redisconn.Cluster or Sentinel, per node)
// at most half of what
// the subscription leaves, at least 1.
func waitReadWidth(pool ConnGetter) int {
	capped := 0
	switch p := pool.(type) {
	case *redis.Pool:
		capped = p.MaxActive
	case interface{ MaxActive() int }: // a redisconn.Cluster or Sentinel
		capped = p.MaxActive()
	}
	if capped > 0 {
		return max(1, min(8, (capped-1)/2))
	}
	return 8
}
