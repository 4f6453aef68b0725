package rdb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/xid"
)

// ErrLost is reported when the caller no longer owns a taking: nothing was
// changed. Package worqr exports it as ErrTaskLost.
var ErrLost = errors.New("worqr: task lost")

// ErrDuplicate is returned by Enqueue when the unique key is held by another
// task. Package worqr exports it.
var ErrDuplicate = errors.New("worqr: duplicate task")

// Limits that keep every script call short (a few milliseconds at most).
const (
	// MaxEnqueueChunk is the most tasks one enqueue script call writes;
	// EnqueueBatch splits larger batches.
	MaxEnqueueChunk = 1000
	// MaxEnqueueChunkBytes caps the payload bytes of one enqueue call.
	MaxEnqueueChunkBytes = 4 << 20
	// MaxTake is the most tasks one take script call pops.
	MaxTake = 1000
	// RequeueChunk is the most takings one requeue script call puts back;
	// Requeue calls it again until none are left. Each costs about ten
	// commands, as a BulkStep's task does (1,000 took 7 to 15 ms).
	RequeueChunk = 250
	// RequeueWorkers is the most workers one requeue script call names:
	// each call reads every worker it names, emptied or not (1,000 dead
	// workers of one queue cost 3 ms a call before any taking moved).
	RequeueWorkers = 100
	// BulkChunk is the most tasks one page of a listing holds.
	BulkChunk = 1000
	// BulkStep is the most tasks one call of a bulk write handles (a
	// dead-set operation, Bulk): each costs about ten commands, and no
	// call may hold Redis for more than a few milliseconds (1,000 took 10
	// to 17 ms).
	BulkStep = 250
	// EnqueueStep is the most tasks of one script call when a batch is
	// larger than MaxEnqueueChunk and must be split anyway: short calls,
	// many on the wire, so that none holds Redis for more than about a
	// millisecond and the per-call cost stays small against the per-task
	// one.
	EnqueueStep = 250
	// enqueueWindow is how many enqueue chunks travel at once on the wire.
	enqueueWindow = 16
)

// EnqueueArgs are the options of one Enqueue call.
type EnqueueArgs struct {
	DelayMillis int64  // > 0: scheduled at Redis time + delay
	DueMillis   int64  // > 0: scheduled at this unix time (ms)
	UniqueKey   string // user key; one task only
	// UniqueKeys, when not nil, holds one user key per task ("" = none):
	// a task whose key is held is left out, the others are enqueued
	// (Enqueue and EnqueueBatch report it in Dups). Not with UniqueKey.
	UniqueKeys  []string
	UniqueTTL   int64 // ms
	MaxAttempts int   // > 0: per-task override
	TimeoutMs   int64 // > 0: per-task override
	// DeadlineMs > 0: unix ms (Redis time) after which a task is not run;
	// taken later, it ends as expired.
	DeadlineMs int64
	// RetentionMs > 0: how long the ended task is kept, instead of the
	// queue's retention.
	RetentionMs int64
	// IDLockTTL > 0: one task whose id the caller chose; its id lock lives
	// this long (ms) and holds Digest, the payload's digest.
	IDLockTTL int64
	Digest    string
	// Priority > 0 (at most MaxLevel): the tasks go to that level's list
	// (call MarkLevel first, so that workers look there).
	Priority int
}

// plain reports whether tasks enqueued with a are due now, at the back of
// level 0, with no unique key, no id of the caller's and no deadline.
func (a *EnqueueArgs) plain() bool {
	return a.DelayMillis <= 0 && a.DueMillis <= 0 && a.UniqueKey == "" && a.UniqueKeys == nil &&
		a.DeadlineMs <= 0 && a.IDLockTTL <= 0 && a.Priority <= 0
}

// packable reports whether tasks enqueued with a may be written packed in
// a large batch: plain, and nothing but a payload per task.
func (a *EnqueueArgs) packable() bool {
	return a.plain() && a.MaxAttempts <= 0 && a.TimeoutMs <= 0 && a.RetentionMs <= 0
}

// MaxHandoffPayload is the largest payload an enqueue hands straight to a
// parked worker: the hand-off message carries it to every process
// subscribed to the queue's wake channel, so larger ones wait in the queue
// and are taken.
const MaxHandoffPayload = 4 << 10

// handable reports whether tasks enqueued with a may be handed to parked
// workers (enqueue_hand.lua): plain, at most MaxEnqueueChunk of them, each
// payload at most MaxHandoffPayload.
func (a *EnqueueArgs) handable(payloads [][]byte) bool {
	if !a.plain() || len(payloads) > MaxEnqueueChunk {
		return false
	}
	for _, p := range payloads {
		if len(p) > MaxHandoffPayload {
			return false
		}
	}
	return true
}

// enqueueHandArgs are the script arguments of enqueuing tasks [lo, hi) of
// ids and payloads (enqueue_hand.lua); g, when not nil, is the guard of a
// batch of one call (step 0, not last).
func enqueueHandArgs(q QueueKeys, ids []string, payloads [][]byte, lo, hi int, a *EnqueueArgs, g *StepGuard) []any {
	n := hi - lo
	args := make([]any, 0, 12+3*n)
	args = append(args, 3+n, q.Waiting, q.Park, q.Seq)
	for _, id := range ids[lo:hi] {
		args = append(args, q.Task(id))
	}
	ttl := "" // no guard
	if g != nil {
		args = append(args, g.Key)
		args[0] = 4 + n
		ttl = strconv.FormatInt(g.ttl(), 10)
	}
	args = append(args, q.WakeChannel, q.WorkerQueuePrefix,
		optInt(int64(a.MaxAttempts)), optInt(a.TimeoutMs), optInt(a.RetentionMs), ttl)
	for _, id := range ids[lo:hi] {
		args = append(args, id)
	}
	for _, p := range payloads[lo:hi] {
		args = append(args, p)
	}
	return args
}

// StepGuard chains the steps of a batch sent in steps (EnqueueBatch, and a
// keyed batch's EnqueueKeyStep): step 0 applies only where no guard is,
// step n > 0 only when the guard key says that step n-1 was, and the last
// step deletes the guard. A plain EnqueueBatch of one call (2 to 1,000
// tasks) carries one too, as step 0 and not last: it leaves the guard
// saying "0" for its TTL, so that after a lost reply the client can tell
// (StepsApplied) whether the call applied. Key is QueueKeys.StepsPrefix
// and an id of the batch. The steps travel many at once, so without
// it those sent behind a step that Redis refused (an error reply: OOM, a
// key of the wrong type) were applied all the same, and the batch's tasks
// in the queue were no longer its first ones.
type StepGuard struct {
	Key  string
	Step int
	Last bool
	// OneCall: the guard of a batch of one call, which lives
	// OneCallGuardTTL (every such batch leaves one), not stepGuardTTL.
	OneCall bool
}

// ttl is how long g outlives the step that writes it, in ms (nil: no
// guard is written; stepGuardTTL, as the scripts want an argument).
func (g *StepGuard) ttl() int64 {
	if g != nil && g.OneCall {
		return OneCallGuardTTL.Milliseconds()
	}
	return stepGuardTTL
}

// closeSteps closes the guard of a batch sent in steps, so that no step of
// it still on its way applies, and returns the number of its last step
// applied: -1 when the guard was gone (its last step applied, which drops
// it). One command: SET ... GET (Redis 6.2).
func (s *Store) closeSteps(ctx context.Context, q QueueKeys, guard string) (int, error) {
	c, err := s.conn(ctx, q.Ref.Tag)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	r, err := redis.String(redis.DoContext(c, ctx, "SET", guard, "closed", "GET", "PX", stepGuardTTL))
	if err == redis.ErrNil {
		return -1, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(r)
}

// firstStepLost is EnqueueBatch's answer when the first of its several
// steps (n tasks) failed with err: none of it applied after an error reply
// (Redis refused it); else its reply may have been lost after Redis
// applied it, and the guard, closed (the step, if still on its way, is
// refused: step 0 applies only where no guard is), tells. Redis out of
// reach, or unique keys (the tasks the step left out are not known): 0,
// a floor.
func (s *Store) firstStepLost(ctx context.Context, q QueueKeys, guard string, n int, a *EnqueueArgs, err error) (int, []Dup, error) {
	if a.UniqueKeys == nil {
		if last, ok := s.StepsApplied(ctx, q, guard, err); ok && last == 0 {
			return n, nil, err
		}
	}
	return 0, nil, err
}

// StepsApplied tells how far a batch sent in steps got when a step's call
// failed with err: for an error reply (Redis refused the step, and the
// guard refuses every step after it) nothing more applied, ok false;
// else the reply may have been lost after Redis applied it, and the guard
// is closed (no step still on its way applies after this, within 5 s
// even when ctx is done) and read: last is the number of the last step
// applied, -1 when none was or when the batch's last step was (it deletes
// the guard). ok is false too when Redis cannot be asked.
func (s *Store) StepsApplied(ctx context.Context, q QueueKeys, guard string, err error) (last int, ok bool) {
	var re redis.Error
	if errors.As(err, &re) {
		return 0, false
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	last, gerr := s.closeSteps(cctx, q, guard)
	return last, gerr == nil
}

// stepGuardTTL is how long a batch's guard outlives its last step applied
// (ms): far more than the gap between two steps on the wire.
const stepGuardTTL = 5 * 60 * 1000

// oneCallMax bounds the call of a batch of one call, and each wait for a
// step's reply of a longer one (OneCallContext), so that its guard, which
// lives 30 s past that deadline (stepGuardTTL after each step applied),
// outlives it. One call of at most 1,000 tasks or 4 MiB takes milliseconds:
// 30 s is far past any healthy call, and keeps the guard that every batch
// of one call leaves to a minute (at 1,000 batches a second, about 60,000
// keys of a few dozen bytes).
const oneCallMax = 30 * time.Second

// OneCallGuardTTL is how long the guard of a batch of one call outlives
// the call: past the call's deadline (OneCallContext: oneCallMax at most)
// by more than the client takes to read it after a lost reply
// (StepsApplied, 5 s at most).
const OneCallGuardTTL = oneCallMax + 30*time.Second

// OneCallContext bounds ctx for the call of a batch of one call to
// oneCallMax (30 s): its guard (OneCallGuardTTL) then outlives the call's
// deadline, and the client that closes
// it after a lost reply finds it whenever the call applied. Without the
// bound, a reply lost on a connection gone silent (a partition that drops
// packets) was noticed when TCP gave up, about 15 minutes later: the guard
// had expired, and the call, applied, was reported as not (0 enqueued; a
// resend ran every task twice).
func OneCallContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, oneCallMax)
}

// guardArgs are the step and last-step arguments of the enqueue scripts.
func (g *StepGuard) guardArgs() (string, string) {
	if g == nil {
		return "", ""
	}
	last := ""
	if g.Last {
		last = "1"
	}
	return strconv.Itoa(g.Step), last
}

// ErrStepRefused is the answer of a step of a batch whose step before it
// was not applied: nothing was written.
var ErrStepRefused = errors.New("rdb: enqueue: a step before this one of the batch was not applied")

// enqueuePackedArgs are the script arguments of writing tasks [lo, hi)
// packed (enqueue_packed.lua), step g of a batch.
func enqueuePackedArgs(q QueueKeys, ids []string, payloads [][]byte, lo, hi int, g *StepGuard) []any {
	n := hi - lo
	args := make([]any, 0, 12+2*n)
	args = append(args, 0, q.Waiting, g.Key)
	args = appendPackedKeys(args, q, ids[lo:hi])
	args[0] = len(args) - 1
	step, last := g.guardArgs()
	args = append(args, q.WakeChannel, q.TaskPrefix, step, last, g.ttl())
	for _, id := range ids[lo:hi] {
		args = append(args, id)
	}
	for _, p := range payloads[lo:hi] {
		args = append(args, p)
	}
	return args
}

// ErrSameTask is returned by Enqueue when a task with the caller-chosen id
// was enqueued before with the same payload: nothing new was written. While
// the store waits for replicas, it comes joined with a *ReplicaError when
// too few of them have that task (match it with errors.Is).
var ErrSameTask = errors.New("worqr: task already enqueued")

// ErrIDTaken is returned by Enqueue when a task with the caller-chosen id
// was enqueued before with another payload, or when a loaded task with that
// id waits packed.
var ErrIDTaken = errors.New("worqr: task id already used")

func optInt(v int64) string {
	if v <= 0 {
		return ""
	}
	return strconv.FormatInt(v, 10)
}

// enqueueArgs are the script arguments of enqueuing tasks [lo, hi) of ids
// and payloads (a.UniqueKeys is indexed like them), step g of a batch sent
// in steps (nil: a batch of one call).
func enqueueArgs(q QueueKeys, ids []string, payloads [][]byte, lo, hi int, a *EnqueueArgs, g *StepGuard) []any {
	n := hi - lo
	args := make([]any, 0, 18+4*n)
	idem := a.IDLockTTL > 0 && n == 1
	args = append(args, 0, q.Level(a.Priority), q.Scheduled) // the key count is set below
	for _, id := range ids[lo:hi] {
		args = append(args, q.Task(id))
	}
	unique := ""
	var at []int // per task: position of its lock among the declared ones
	switch {
	case a.UniqueKey != "":
		args = append(args, q.UniquePrefix+a.UniqueKey) // declared: a cluster checks its slot
		unique = "1"
	case a.UniqueKeys != nil:
		unique = "b"
		at = make([]int, n)
		pos := map[string]int{}
		for i, k := range a.UniqueKeys[lo:hi] {
			if k == "" {
				continue
			}
			if pos[k] == 0 {
				args = append(args, q.UniquePrefix+k)
				pos[k] = len(pos) + 1
			}
			at[i] = pos[k]
		}
	}
	flag := ""
	if idem {
		pkey, _ := q.Packed(ids[lo])
		args = append(args, pkey, q.IDPrefix+ids[lo]) // declared: the id's packed hash, then its lock, last
		flag = "1"
	} else if g != nil {
		args = append(args, g.Key) // declared, last (a batch in steps has no id of the caller's)
	}
	args[0] = len(args) - 1
	step, last := g.guardArgs()
	args = append(args, q.WakeChannel, optInt(a.DelayMillis), optInt(a.DueMillis),
		unique, a.UniqueTTL, optInt(int64(a.MaxAttempts)), optInt(a.TimeoutMs), flag, a.IDLockTTL, a.Digest,
		optInt(a.DeadlineMs), optInt(a.RetentionMs), n, optInt(int64(a.Priority)), step, last, g.ttl())
	for _, id := range ids[lo:hi] {
		args = append(args, id)
	}
	for _, p := range payloads[lo:hi] {
		args = append(args, p)
	}
	for _, p := range at {
		args = append(args, p)
	}
	return args
}

// Dup is a task of an enqueue with per-task unique keys that was left out:
// its key is held.
type Dup struct {
	Index  int    // its index in the call's ids
	Holder string // the task holding its key
}

// enqueueReply decodes an enqueue's reply; lo is the index of the call's
// first task (Dup indexes are the caller's).
func enqueueReply(r any, err error, lo int) (string, []Dup, error) {
	vals, err := redis.Values(r, err)
	if err != nil {
		return "", nil, err
	}
	if len(vals) == 0 {
		return "", nil, fmt.Errorf("rdb: enqueue: empty reply")
	}
	switch n, _ := redis.Int(vals[0], nil); {
	case n == -1 && len(vals) > 1:
		holder, _ := redis.String(vals[1], nil)
		return holder, nil, ErrDuplicate
	case n == -2:
		return "", nil, ErrSameTask
	case n == -3:
		return "", nil, ErrIDTaken
	case n == -5:
		return "", nil, ErrStepRefused
	}
	var dups []Dup
	for i := 1; i+1 < len(vals); i += 2 {
		at, _ := redis.Int(vals[i], nil)
		holder, _ := redis.String(vals[i+1], nil)
		dups = append(dups, Dup{Index: lo + at - 1, Holder: holder})
	}
	return "", dups, nil
}

// Enqueue writes the tasks and pushes their ids at the back of the queue (or
// schedules them) in one script call, all or nothing. When a.UniqueKey is
// held it returns the holder's id and ErrDuplicate. Callers keep batches
// within MaxEnqueueChunk (EnqueueBatch splits). Per-task unique keys
// (a.UniqueKeys) go through EnqueueBatch, which reports the tasks left out.
func (s *Store) Enqueue(ctx context.Context, q QueueKeys, ids []string, payloads [][]byte, a *EnqueueArgs) (string, error) {
	if a != nil && a.UniqueKeys != nil {
		return "", fmt.Errorf("rdb: enqueue: per-task unique keys go through EnqueueBatch")
	}
	holder, _, err := s.enqueue(ctx, q, ids, payloads, 0, len(ids), a, nil)
	return holder, err
}

// enqueue runs one enqueue script call for tasks [lo, hi).
func (s *Store) enqueue(ctx context.Context, q QueueKeys, ids []string, payloads [][]byte, lo, hi int, a *EnqueueArgs, g *StepGuard) (string, []Dup, error) {
	if len(ids) != len(payloads) {
		return "", nil, fmt.Errorf("rdb: enqueue: %d ids for %d payloads", len(ids), len(payloads))
	}
	if a == nil {
		a = &EnqueueArgs{}
	}
	if a.UniqueKeys != nil && len(a.UniqueKeys) != len(ids) {
		return "", nil, fmt.Errorf("rdb: enqueue: %d unique keys for %d tasks", len(a.UniqueKeys), len(ids))
	}
	var r any
	var err error
	if a.handable(payloads[lo:hi]) {
		r, err = s.evalAck(ctx, q.Ref.Tag, enqueueHandScript, enqueueHandArgs(q, ids, payloads, lo, hi, a, g)...)
	} else {
		r, err = s.evalAck(ctx, q.Ref.Tag, enqueueScript, enqueueArgs(q, ids, payloads, lo, hi, a, g)...)
	}
	err, replica := splitReplica(err)
	holder, dups, err := enqueueReply(r, err, lo)
	if err == ErrSameTask && replica != nil {
		// Enqueued before, maybe by a call whose reply was lost: the
		// replicas' answer says whether they have it (the script wrote
		// the id's lock again, so WAIT covered that first write).
		return holder, dups, errors.Join(ErrSameTask, replica)
	}
	if err != nil {
		return holder, dups, err
	}
	return holder, dups, replica
}

// Chunks splits payloads into the runs one script call each writes: a batch
// of at most MaxEnqueueChunk tasks and MaxEnqueueChunkBytes bytes is one
// run (the batch is atomic); a larger one is split into runs of at most
// EnqueueStep tasks and MaxEnqueueChunkBytes bytes (a single larger payload
// is a run of its own). It returns the end index of each run.
func Chunks(payloads [][]byte) []int {
	step, size := EnqueueStep, 0
	for _, p := range payloads {
		size += len(p)
	}
	if len(payloads) <= MaxEnqueueChunk && size <= MaxEnqueueChunkBytes {
		step = MaxEnqueueChunk
	}
	var ends []int
	count, size := 0, 0
	for i, p := range payloads {
		if count > 0 && (count == step || size+len(p) > MaxEnqueueChunkBytes) {
			ends = append(ends, i)
			count, size = 0, 0
		}
		count++
		size += len(p)
	}
	if count > 0 {
		ends = append(ends, len(payloads))
	}
	return ends
}

// EnqueueBatch enqueues a batch of any size as a sequence of atomic chunks
// (see Chunks), in order, a few chunks on the wire at once, so that no call
// holds Redis for long. It returns how many tasks, from the first, are known
// to be enqueued; on an error the chunk that failed and those after it may or
// may not have been applied (a lost reply) except when the error is a Redis
// error reply, in which case they were not.
//
// With a.UniqueKeys, the tasks whose key was held (by an earlier task of the
// batch, maybe) are left out and returned in dups, by index.
//
// While the store waits for replicas (SetReplicas), a *ReplicaError with
// done == len(ids) says every chunk was applied on the primary but not
// acknowledged by enough replicas.
func (s *Store) EnqueueBatch(ctx context.Context, q QueueKeys, ids []string, payloads [][]byte, a *EnqueueArgs) (done int, dups []Dup, err error) {
	if len(ids) != len(payloads) {
		return 0, nil, fmt.Errorf("rdb: enqueue: %d ids for %d payloads", len(ids), len(payloads))
	}
	if len(ids) == 0 {
		return 0, nil, nil // nothing to send (ends[0] below would not exist)
	}
	if a == nil {
		a = &EnqueueArgs{}
	}
	if a.UniqueKeys != nil && len(a.UniqueKeys) != len(ids) {
		return 0, nil, fmt.Errorf("rdb: enqueue: %d unique keys for %d tasks", len(a.UniqueKeys), len(ids))
	}
	ends := Chunks(payloads)
	// A batch split into steps with nothing but payloads is written packed,
	// as a bulk load is (see QueueKeys.Packed): about a third of the Redis
	// time per task, and no key per waiting task.
	packed := len(ends) > 1 && a.packable()
	// The steps of a batch of several travel many at once: each is applied
	// only after the one before it (see StepGuard).
	guard := q.StepsPrefix + xid.New().String()
	args := func(step, lo, hi int) (*script, []any) {
		g := &StepGuard{Key: guard, Step: step, Last: step == len(ends)-1}
		if packed {
			return enqueuePacked, enqueuePackedArgs(q, ids, payloads, lo, hi, g)
		}
		return enqueueScript, enqueueArgs(q, ids, payloads, lo, hi, a, g)
	}
	// The first chunk runs on its own (it finds out how scripts run here
	// and loads what is missing); the others travel enqueueWindow at a time.
	// A batch of one call waits for replicas with it; a longer one waits
	// once, after its last call (WAIT covers every write before it).
	var one *StepGuard // the guard of a batch of one call
	if len(ends) == 1 {
		cctx := ctx
		if len(ids) > 1 && a.UniqueKey == "" && a.UniqueKeys == nil && a.IDLockTTL == 0 {
			// Its reply lost, the client closes the guard and reads
			// whether the call applied: all its tasks, or none.
			var cancel context.CancelFunc
			cctx, cancel = OneCallContext(ctx)
			defer cancel()
			one = &StepGuard{Key: guard, OneCall: true}
		}
		_, dups, err = s.enqueue(cctx, q, ids, payloads, 0, ends[0], a, one)
	} else {
		// Each wait for a step's reply is bounded as a call of one is
		// (OneCallContext): the guard, written again by each step applied
		// and living stepGuardTTL, is then still there to close and read
		// when a reply is found lost.
		sc, as := args(0, 0, ends[0])
		cctx, cancel := OneCallContext(ctx)
		r, e := s.eval(cctx, q.Ref.Tag, sc, as...)
		cancel()
		_, dups, err = enqueueReply(r, e, 0)
	}
	if errors.Is(err, ErrSameTask) {
		return 0, nil, err // with the replicas' answer, when short
	}
	err, replica := splitReplica(err)
	if err != nil {
		if len(ends) > 1 || one != nil {
			return s.firstStepLost(ctx, q, guard, ends[0], a, err)
		}
		return 0, nil, err
	}
	if len(ends) == 1 {
		return len(ids), dups, replica
	}
	done = ends[0]
	c, err := s.conn(ctx, q.Ref.Tag)
	if err != nil {
		return done, dups, err
	}
	defer c.Close()
	sent, received := 1, 1
	// lost is the answer of a batch whose replies stopped coming (a broken
	// connection, a deadline) before the reply of step received: the steps
	// sent after it may have been applied, or may still be. The batch's
	// guard is closed (no step applies after this) and read: its last step
	// applied is where the batch stands. An error reply (Redis refused a
	// step: the ones after it are refused by the guard) needs none of this.
	lost := func(err error) (int, []Dup, error) {
		if a.UniqueKeys != nil {
			// (With unique keys, the tasks a lost step left out are not
			// known: done stays at what the replies said.)
			return done, dups, err
		}
		last, ok := s.StepsApplied(ctx, q, guard, err)
		switch {
		case !ok:
			return done, dups, err // refused, or Redis out of reach: done is a floor
		case last == -1 && sent == len(ends):
			return len(ids), dups, err // the last step applied (it drops the guard)
		case last >= received:
			return ends[last], dups, err
		}
		return done, dups, err
	}
	recv := func() error {
		rctx, cancel := OneCallContext(ctx)
		r, err := redis.ReceiveContext(c, rctx)
		cancel()
		_, more, err := enqueueReply(r, err, ends[received-1])
		if err != nil {
			return err
		}
		dups = append(dups, more...)
		done = ends[received]
		received++
		return nil
	}
	for sent < len(ends) {
		sc, as := args(sent, ends[sent-1], ends[sent])
		cmd, cargs := sc.command(s.mode.Load(), s.tagged, as)
		if err := c.Send(cmd, cargs...); err != nil {
			return lost(err)
		}
		sent++
		if sent-received < enqueueWindow {
			continue
		}
		if err := c.Flush(); err != nil {
			return lost(err)
		}
		if err := recv(); err != nil {
			return lost(err)
		}
	}
	// With replicas to wait for, one WAIT after the last chunk covers every
	// chunk of this connection (replicas acknowledge offsets in order).
	if s.replicas > 0 {
		if err := c.Send("WAIT", s.waitArgs(ctx)...); err != nil {
			return done, dups, err
		}
	}
	if err := c.Flush(); err != nil {
		return lost(err)
	}
	for received < sent {
		if err := recv(); err != nil {
			return lost(err)
		}
	}
	if s.replicas > 0 {
		if err := s.replicaErr(redis.ReceiveContext(c, ctx)); err != nil {
			return done, dups, err
		}
	}
	return done, dups, replica
}

// Taken is one task handed to a worker by Take, or buried by it.
type Taken struct {
	ID string
	// PID is "" when the task was buried instead (bad data, or too many
	// crashes); Reason then says why.
	PID    string
	Reason string
	// Stopped are, for a buried flow child that failed its run
	// (fail-fast), the siblings the run's stop took out of where they
	// waited: no end of a taking reports their cancels.
	Stopped     []QueuedTask
	Payload     []byte
	Attempt     int // failed attempts so far + 1
	Crashes     int
	MaxAttempts int   // per-task override, 0 = queue default
	TimeoutMs   int64 // per-task override, 0 = queue default
	// Expired: the task is not to be run: its deadline had passed when it
	// was taken (Redis time), or (Cancelled) its cancel marked it where it
	// waited. The worker ends the taking with NotRun.
	Expired   bool
	Cancelled bool
	// Run is the flow run's whole hash, for takes of a stage queue; empty
	// (not nil) when RunUnread says it was too big to come with the take.
	Run map[string]string
	// RunUnread, when > 0, is the number of fields of a run the take did
	// not hand out (a take hands out at most 4,000 fields of runs: a run
	// keeps the records of every child it fanned out): read it with
	// ReadRun before the stage runs.
	RunUnread int
	// Parent is the run id of a flow child.
	Parent string
	// Meta is a flow child's metadata (Child.Meta; "" when none).
	Meta string
	// Head is, for a task taken in a batch behind its key's head
	// (TakeArgs.Batch), the head's id; "" otherwise. A batch's tasks come
	// right after its head, in their key's order.
	Head string
}

// ErrExpired is returned by Take when the worker's deadline has passed:
// its keepalive may be gone, so nothing was taken.
var ErrExpired = errors.New("worqr: keepalive deadline passed")

// TakeArgs are the arguments of one Take.
type TakeArgs struct {
	Worker string
	// Until is the worker's deadline (unix ms, Redis time): a take at or
	// after it is refused with ErrExpired. Its keepalive must live at least
	// until then (see heartbeat.Session.Until).
	Until      int64
	Max        int // at most MaxTake
	MaxCrashes int // a task that crashed this many workers is buried; 0 = no limit
	// Stage: a flow stage queue; each Taken carries the run's hash.
	Stage bool
	// Child: a flow child queue. A child buried for bad data is counted
	// as failed in its run, found from its id (<run id>.<suffix>) when its
	// data is gone.
	Child bool
	// Ack: TakeWait waits, with WAIT in the same round trip, until the
	// store's replicas (SetReplicas) have the take, so that a failover
	// right after it finds the takings held on the promoted replica; when
	// too few acknowledge in time it returns the takings (applied on the
	// primary) with a *ReplicaError. EndTake waits for replicas whatever
	// Ack says (its ends do).
	Ack bool
	// Levels: the queue has priority levels 1..Levels (its config's
	// "prio"); their lists are taken from first, highest first. 0: the
	// plain take.
	Levels int
	// Limited: the queue may have global limits (its config's "rate",
	// "period", "conc"): the take reads them and starts no more than they
	// allow. false: the plain take.
	Limited bool
	// Batch, when above 1 (at most MaxKeyBatch): each key's head taken
	// comes with up to Batch-1 tasks of its key waiting behind it (see
	// Taken.Head), to be ended together (Ending.Batch). With Limited, each
	// counts as a start. 0 or 1: the plain take.
	Batch int
	// Park > 0: the worker runs that many takings of this plain queue at
	// once (no levels, no limits, no batches); a take that finds fewer
	// tasks than it asked for parks it, so that an enqueue hands it tasks
	// while it holds fewer (see Handoff). 0: never parked.
	Park int
	// ParkMs > 0: the park entry is valid that long from the take (Redis
	// time), and never past Until; 0: until Until.
	ParkMs int64
}

// MaxKeyBatch is the largest TakeArgs.Batch.
const MaxKeyBatch = 1000

// keys returns the keys a take declares beyond its fixed ones: the level
// lists and the rate log, which the script reaches by name.
func (a TakeArgs) keys(q QueueKeys) []any {
	var out []any
	for l := min(a.Levels, MaxLevel); l >= 1; l-- {
		out = append(out, q.Level(l))
	}
	if a.Limited {
		out = append(out, q.RateLog())
	}
	if a.parks() {
		out = append(out, q.Park) // last
	}
	return out
}

// parks reports whether the take may park its worker.
func (a TakeArgs) parks() bool {
	return a.Park > 0 && a.Levels == 0 && !a.Limited && a.Batch <= 1 && !a.Stage && !a.Child
}

// mode is how the take scripts are told the kind of queue; safe (a store
// that routes by tag, so maybe a Redis Cluster) adds "m": the take reads
// every task hash before it writes anything, so that a slot migration
// caught half way changes nothing (the script answers TRYAGAIN).
func (a TakeArgs) mode(safe bool) string {
	m := "0"
	switch {
	case a.Stage:
		m = "1"
	case a.Child:
		m = "2"
	}
	if safe {
		m += "m"
	}
	if a.Levels > 0 {
		m += "p" + strconv.Itoa(min(a.Levels, MaxLevel))
	}
	if a.Limited {
		m += "l"
	}
	if a.Batch > 1 && !a.Stage && !a.Child {
		m += "k" + strconv.Itoa(min(a.Batch, MaxKeyBatch))
	}
	if a.parks() {
		m += "h" + strconv.Itoa(a.Park) + ":" + strconv.FormatInt(max(a.ParkMs, 0), 10)
	}
	return m
}

// Take pops up to a.Max (at most MaxTake) ids from the front of the queue
// for worker a.Worker. Tasks that crashed a.MaxCrashes workers or whose data
// is bad are buried.
func (s *Store) Take(ctx context.Context, q QueueKeys, a TakeArgs) ([]Taken, error) {
	taken, _, err := s.TakeWait(ctx, q, a)
	return taken, err
}

// LimitWait says whether a queue's global limits cut a take: 0 they did
// not; > 0 the rate limit allows the next start in that many ms (Redis
// clock); WaitWake (-1) the concurrency limit is reached: a taking must end
// first (its end publishes a wake-up).
type LimitWait int64

// WaitWake is the LimitWait of a take cut by the concurrency limit.
const WaitWake LimitWait = -1

// TakeWait is Take, and says whether the queue's global limits cut it.
// With a.Ack and replicas to wait for, a *ReplicaError may come back with
// the takings: they are taken (on the primary).
func (s *Store) TakeWait(ctx context.Context, q QueueKeys, a TakeArgs) ([]Taken, LimitWait, error) {
	extra := a.keys(q)
	args := make([]any, 0, 24)
	args = append(args, 6+len(extra), q.Waiting, q.WorkerQueue(a.Worker), q.Holders, q.Seq, q.Dead, q.Config)
	args = append(args, extra...)
	args = append(args, a.Worker, min(a.Max, MaxTake), q.TaskPrefix, a.MaxCrashes, a.mode(s.tagged),
		q.QueuePrefix, q.WakePrefix, q.ScheduledPrefix, q.CancelPrefix, q.IndexPrefix, a.Until)
	var r any
	var err error
	if a.Ack {
		r, err = s.evalAck(ctx, q.Ref.Tag, takeScript, args...)
	} else {
		r, err = s.eval(ctx, q.Ref.Tag, takeScript, args...)
	}
	err, replica := splitReplica(err)
	vals, err := redis.Values(r, err)
	if err != nil {
		if e, ok := err.(redis.Error); ok && strings.HasPrefix(string(e), "WQEXPIRED") {
			return nil, 0, ErrExpired
		}
		return nil, 0, err
	}
	taken, wait, err := decodeTaken(vals, a)
	if err == nil {
		err = replica
	}
	return taken, wait, err
}

// decodeTaken decodes the flat reply of a take (8 values per id, then the
// limit's wait when a limit cut the take).
func decodeTaken(vals []any, a TakeArgs) ([]Taken, LimitWait, error) {
	stage, batch := a.Stage, a.Batch > 1 && !a.Stage && !a.Child
	const width = 8
	var wait LimitWait
	if len(vals)%width == 1 {
		w, err := redis.Int64(vals[len(vals)-1], nil)
		if err != nil {
			return nil, 0, fmt.Errorf("rdb: take: limit wait: %w", err)
		}
		wait = LimitWait(w)
		vals = vals[:len(vals)-1]
	}
	if len(vals)%width != 0 {
		return nil, 0, fmt.Errorf("rdb: take: reply of %d values", len(vals))
	}
	out := make([]Taken, 0, len(vals)/width)
	for i := 0; i < len(vals); i += width {
		var t Taken
		t.ID, _ = redis.String(vals[i], nil)
		t.PID, _ = redis.String(vals[i+1], nil)
		if t.PID == "" {
			t.Reason, _ = redis.String(vals[i+2], nil)
			if ks, ok := vals[i+3].([]any); ok {
				var err error
				if t.Stopped, err = queuedTasks(ks); err != nil {
					return nil, 0, fmt.Errorf("rdb: take: stopped children of %s: %w", t.ID, err)
				}
			}
		} else {
			switch pm, pair := vals[i+2].([]any); {
			case stage:
				if n, ok := vals[i+2].(int64); ok {
					t.Run, t.RunUnread = map[string]string{}, int(n)
				} else {
					t.Run, _ = redis.StringMap(vals[i+2], nil)
				}
			case pair && len(pm) == 2:
				// A flow child with metadata: {payload, metadata}.
				t.Payload, _ = redis.Bytes(pm[0], nil)
				t.Meta, _ = redis.String(pm[1], nil)
			default:
				t.Payload, _ = redis.Bytes(vals[i+2], nil)
			}
			t.Attempt, _ = redis.Int(vals[i+3], nil)
			// The take's marks: -1 cancelled where it waited, 0 past its
			// deadline.
			t.Cancelled = t.Attempt == -1
			t.Expired = t.Attempt <= 0
			t.Crashes, _ = redis.Int(vals[i+4], nil)
			if s, _ := redis.String(vals[i+5], nil); s != "" {
				t.MaxAttempts, _ = strconv.Atoi(s)
			}
			if s, _ := redis.String(vals[i+6], nil); s != "" {
				t.TimeoutMs, _ = strconv.ParseInt(s, 10, 64)
			}
			t.Parent, _ = redis.String(vals[i+7], nil)
			if batch {
				t.Head, t.Parent = t.Parent, ""
			}
		}
		out = append(out, t)
	}
	return out, wait, nil
}

// Ask is what the owner of a taking asks its end to record.
type Ask string

// The asks of an Ending.
const (
	AskDone  Ask = "done"  // the work is done (a stage: forward or fan out)
	AskRetry Ask = "retry" // a failed attempt, to run again after a delay
	AskDead  Ask = "dead"  // a failed attempt, to the dead set
	AskBack  Ask = "back"  // give back: to the front of the queue, nothing counted
	// AskExpire ends a taking the take found past its deadline (never
	// run): expired, once the script confirms it on Redis's clock.
	AskExpire Ask = "expire"
	// AskCancel ends a taking the take found marked cancelled where it
	// waited (never run): cancelled.
	AskCancel Ask = "cancel"
	AskLater  Ask = "later" // rate limited: to run again after a delay, no attempt counted
)

// Kind is the kind of queue a taking belongs to.
type Kind string

// The kinds of queue.
const (
	KindTask  Kind = "task"  // a stand-alone queue
	KindStage Kind = "stage" // a flow's stage queue
	KindChild Kind = "child" // a flow's child queue
)

// StageEnd is what a done stage records: fields merged into the run, then
// either children fanned out or the run forwarded to Next.
type StageEnd struct {
	Next           string // "" after the last stage
	FailFast       bool   // a dead child fails the run
	RunRetentionMs int64
	IndexBy        []string
	Fields         []string // "f:"-prefixed name/value pairs
	Children       []Child
}

// Child is one child task a stage fans out.
type Child struct {
	ID, Queue string
	Payload   []byte
	// Meta is stored with the child (FieldMeta) when not "", and handed
	// out by its takes (Taken.Meta). Opaque to the scripts.
	Meta string
}

// Ending is how one taking ends. Build it with Done, Retry, Dead or GiveBack.
type Ending struct {
	Kind         Kind
	Worker, PID  string
	ID           string
	Ask          Ask
	RetryDelayMs int64
	Err          string
	Result       []byte
	Stage        *StageEnd // KindStage
	Run          string    // KindChild: the child's run
	// Batch (KindTask): the tasks taken behind this head in its batch
	// (Taken.Head), in order. They end with it, in the same step, and only
	// if every one of them is still owned; see WithBatch.
	Batch []Member
}

// Member is a task taken in a batch behind its key's head, and the result
// it records when the batch is done.
type Member struct {
	PID, ID string
	Result  []byte
}

// WithBatch returns e (a head's ending) ending the tasks taken behind it
// too: done, they are done; otherwise they go back to the front of their
// key's list, in order, while the head ends as e asks (a retry counts a
// failed attempt on each; a dead head resets their counters).
func (e Ending) WithBatch(ms []Member) Ending {
	e.Batch = ms
	return e
}

// Done ends a taking whose work is done, with its result.
func Done(k Kind, worker, pid, id string, result []byte) Ending {
	return Ending{Kind: k, Worker: worker, PID: pid, ID: id, Ask: AskDone, Result: result}
}

// Retry ends a failed attempt that runs again after delayMs.
func Retry(k Kind, worker, pid, id string, delayMs int64, err string) Ending {
	return Ending{Kind: k, Worker: worker, PID: pid, ID: id, Ask: AskRetry, RetryDelayMs: delayMs, Err: err}
}

// Dead ends a failed attempt in the dead set.
func Dead(k Kind, worker, pid, id string, err string) Ending {
	return Ending{Kind: k, Worker: worker, PID: pid, ID: id, Ask: AskDead, Err: err}
}

// Expire ends a taking of a plain queue that was past its deadline when
// taken.
func Expire(worker, pid, id string) Ending {
	return Ending{Kind: KindTask, Worker: worker, PID: pid, ID: id, Ask: AskExpire}
}

// NotRun ends a taking that is not to be run (Taken.Expired): as cancelled
// when its cancel marked it where it waited (Taken.Cancelled: a task, or a
// flow run or child whose run was cancelled or failed while it waited deep
// in its list), else (a task of a plain queue) as expired.
func NotRun(worker string, t Taken) Ending {
	if t.Cancelled {
		switch {
		case t.Run != nil:
			return Ending{Kind: KindStage, Worker: worker, PID: t.PID, ID: t.ID, Ask: AskCancel}
		case t.Parent != "":
			return Ending{Kind: KindChild, Worker: worker, PID: t.PID, ID: t.ID, Ask: AskCancel, Run: t.Parent}
		}
		return Ending{Kind: KindTask, Worker: worker, PID: t.PID, ID: t.ID, Ask: AskCancel}
	}
	return Expire(worker, t.PID, t.ID)
}

// Later schedules a taking to run again after delayMs without counting a
// failed attempt (the handler was rate limited).
func Later(k Kind, worker, pid, id string, delayMs int64, err string) Ending {
	return Ending{Kind: k, Worker: worker, PID: pid, ID: id, Ask: AskLater, RetryDelayMs: delayMs, Err: err}
}

// GiveBack puts a taking back at the front of its queue.
func GiveBack(k Kind, worker, pid, id string) Ending {
	return Ending{Kind: k, Worker: worker, PID: pid, ID: id, Ask: AskBack}
}

// Ended is what End recorded for one taking: its outcome (OutcomeLost when
// the worker no longer owned it: nothing changed) and, for a flow child, its
// run's (OutcomeLost when the run did not change).
type Ended struct {
	Outcome Outcome
	Run     Outcome
	// Members are the outcomes of an Ending's Batch, in order: done,
	// cancelled, retry (back behind the head, which retries), requeued
	// (back behind the head, given back or dead), or lost with the head.
	Members []Outcome
	// Stopped are the children of a child's run that its end took out of
	// where they waited, when it failed the run (fail-fast): no end of a
	// taking reports their cancels.
	Stopped []QueuedTask
}

func appendList(args []any, vals []string) []any {
	args = append(args, len(vals))
	for _, v := range vals {
		args = append(args, v)
	}
	return args
}

// End records the ends of takings of queue q in one script call: the one way
// a taking ends. retentionMs is how long the queue keeps ended tasks. Each
// taking is checked for ownership and answered on its own. While the store
// waits for replicas (SetReplicas), a *ReplicaError comes with the outcomes:
// the ends were recorded on the primary.
func (s *Store) End(ctx context.Context, q QueueKeys, retentionMs int64, es []Ending) ([]Ended, error) {
	out, _, err := s.EndTake(ctx, q, retentionMs, es, nil)
	return out, err
}

// EndTake is End, then, in the same script call, a take as Take(ctx, q,
// *take) would run it (nothing when take is nil or take.Max is 0, or when
// take.Until has passed: then no error, nothing taken). A worker refills the
// slots its ends free without a round trip of its own.
func (s *Store) EndTake(ctx context.Context, q QueueKeys, retentionMs int64, es []Ending, take *TakeArgs) ([]Ended, []Taken, error) {
	ended, taken, _, err := s.EndTakeWait(ctx, q, retentionMs, es, take)
	return ended, taken, err
}

// EndTakeWait is EndTake, and says whether the queue's global limits cut
// its take. A take with Max 0 takes nothing but still tells the script
// the queue's flags (Limited: the ends announce freed slots).
func (s *Store) EndTakeWait(ctx context.Context, q QueueKeys, retentionMs int64, es []Ending, take *TakeArgs) ([]Ended, []Taken, LimitWait, error) {
	var t TakeArgs
	if take != nil {
		t = *take
	}
	keys := make([]any, 0, 8+3*len(es))
	keys = append(keys, q.Scheduled, q.Dead, q.Config, q.Waiting, q.Retained, q.Holders, q.Seq, q.WorkerQueue(t.Worker))
	args := make([]any, 0, 14+10*len(es))
	args = append(args, q.TaskPrefix, q.WakeChannel)
	args = append(args, q.prefixes()...)
	args = append(args, retentionMs, min(max(t.Max, 0), MaxTake), t.Worker, t.Until, t.MaxCrashes, t.mode(s.tagged))
	for _, e := range es {
		keys = append(keys, q.WorkerQueue(e.Worker), q.Task(e.ID))
		if e.Kind == KindChild {
			keys = append(keys, q.Task(e.Run))
		}
		kind := string(e.Kind)
		if len(e.Batch) > 0 && e.Kind == KindTask {
			kind = "batch"
			for _, m := range e.Batch {
				keys = append(keys, q.Task(m.ID))
			}
		}
		mark := len(args)
		args = append(args, 0, kind, e.Worker, e.PID, e.ID, string(e.Ask), e.RetryDelayMs, e.Err, e.Result)
		if kind == "batch" {
			args = append(args, len(e.Batch))
			for _, m := range e.Batch {
				args = append(args, m.PID, m.ID, m.Result)
			}
		}
		switch e.Kind {
		case KindChild:
			args = append(args, e.Run)
		case KindStage:
			st := e.Stage
			if st == nil {
				st = &StageEnd{}
			}
			policy := "continue"
			if st.FailFast {
				policy = "failfast"
			}
			args = append(args, st.Next, policy, st.RunRetentionMs)
			args = appendList(args, st.IndexBy)
			args = appendList(args, st.Fields)
			args = append(args, 4*len(st.Children))
			for _, ch := range st.Children {
				args = append(args, ch.ID, ch.Queue, ch.Payload, ch.Meta)
			}
		}
		args[mark] = len(args) - mark - 1
	}
	// The keys a stage's end writes by name (the next stage's queue, each
	// child's hash and queue) are declared after every taking's keys, so
	// that a cluster checks them before the script runs; the script reaches
	// them from the tag's prefixes.
	for _, e := range es {
		if e.Kind != KindStage || e.Stage == nil {
			continue
		}
		seen := map[string]bool{}
		if e.Stage.Next != "" && len(e.Stage.Children) == 0 {
			keys = append(keys, q.QueuePrefix+e.Stage.Next)
		}
		for _, ch := range e.Stage.Children {
			keys = append(keys, q.Task(ch.ID))
			if !seen[ch.Queue] {
				seen[ch.Queue] = true
				keys = append(keys, q.QueuePrefix+ch.Queue)
			}
		}
	}
	if t.Max > 0 {
		keys = append(keys, t.keys(q)...)
	}
	all := make([]any, 0, 1+len(keys)+len(args))
	all = append(all, len(keys))
	all = append(all, keys...)
	all = append(all, args...)
	r, err := s.evalAck(ctx, q.Ref.Tag, endScript, all...)
	err, replica := splitReplica(err)
	reply, err := redis.Values(r, err)
	if err != nil {
		return nil, nil, 0, err
	}
	if len(reply) < 2 || len(reply) > 4 {
		return nil, nil, 0, fmt.Errorf("rdb: end: reply of %d values, want 2 to 4", len(reply))
	}
	codes, err := redis.Ints(reply[0], nil)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("rdb: end: %w", err)
	}
	if len(codes) != 2*len(es) {
		return nil, nil, 0, fmt.Errorf("rdb: end: %d codes for %d takings", len(codes), len(es))
	}
	out := make([]Ended, len(es))
	for i := range out {
		out[i] = Ended{Outcome: Outcome(codes[2*i]), Run: Outcome(codes[2*i+1])}
	}
	if len(reply) == 4 {
		// The children ends took out of their queues: position, queue, id.
		vs, err := redis.Strings(reply[3], nil)
		if err != nil || len(vs)%3 != 0 {
			return nil, nil, 0, fmt.Errorf("rdb: end: stopped children: %v %v", reply[3], err)
		}
		for j := 0; j < len(vs); j += 3 {
			at, err := strconv.Atoi(vs[j])
			if err != nil || at < 1 || at > len(out) {
				return nil, nil, 0, fmt.Errorf("rdb: end: stopped child of taking %q", vs[j])
			}
			out[at-1].Stopped = append(out[at-1].Stopped, QueuedTask{Queue: vs[j+1], ID: vs[j+2]})
		}
	}
	if len(reply) >= 3 {
		// The outcomes of the batches' members, in order.
		ms, err := redis.Ints(reply[2], nil)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("rdb: end: members: %w", err)
		}
		for i, e := range es {
			if e.Kind != KindTask || len(e.Batch) == 0 {
				continue
			}
			if len(ms) < len(e.Batch) {
				return nil, nil, 0, fmt.Errorf("rdb: end: %d member outcomes left for a batch of %d", len(ms), len(e.Batch))
			}
			out[i].Members = make([]Outcome, len(e.Batch))
			for j := range e.Batch {
				out[i].Members[j] = Outcome(ms[j])
			}
			ms = ms[len(e.Batch):]
		}
	}
	vals, err := redis.Values(reply[1], nil)
	if err != nil {
		return out, nil, 0, fmt.Errorf("rdb: end: take: %w", err)
	}
	taken, wait, err := decodeTaken(vals, t)
	if err != nil {
		return out, nil, 0, err
	}
	return out, taken, wait, replica
}

func (q QueueKeys) prefixes() []any {
	return []any{q.QueuePrefix, q.WakePrefix, q.ScheduledPrefix, q.CancelPrefix, q.IndexPrefix}
}

// Requeue puts every taking the given workers hold in the queue back at its
// front, oldest first, and forgets their holdings there (the fail-worker
// step). crashed says whether the workers died (each task counts a crash,
// once per dead worker) or stopped on purpose. It is idempotent. It runs one
// script call per RequeueChunk takings (the order is kept within each; each
// chunk goes in front of the one before); on an error, what is left stays
// held for the next call. cancelled are the takings that ended as
// cancelled instead (their cancel was asked while they ran).
func (s *Store) Requeue(ctx context.Context, q QueueKeys, workers []string, crashed bool) (requeued int, cancelled []Cancelled, err error) {
	for lo := 0; lo < len(workers); lo += RequeueWorkers {
		n, c, err := s.requeueGroup(ctx, q, workers[lo:min(lo+RequeueWorkers, len(workers))], crashed)
		requeued += n
		cancelled = append(cancelled, c...)
		if err != nil {
			return requeued, cancelled, err
		}
	}
	return requeued, cancelled, nil
}

// requeueGroup is Requeue for at most RequeueWorkers workers.
func (s *Store) requeueGroup(ctx context.Context, q QueueKeys, workers []string, crashed bool) (requeued int, cancelled []Cancelled, err error) {
	if len(workers) == 0 {
		return 0, nil, nil
	}
	args := make([]any, 0, 10+2*len(workers))
	args = append(args, 5+len(workers), q.Waiting, q.Holders, q.Config, q.Retained)
	for _, w := range workers {
		args = append(args, q.WorkerQueue(w))
	}
	args = append(args, q.Park) // last: the workers are parked no more
	flag := "0"
	if crashed {
		flag = "1"
	}
	args = append(args, q.WakeChannel, q.TaskPrefix, flag, RequeueChunk)
	for _, w := range workers {
		args = append(args, w)
	}
	for {
		vals, err := redis.Values(s.eval(ctx, q.Ref.Tag, requeueScript, args...))
		if err != nil {
			return requeued, cancelled, err
		}
		if len(vals) < 2 {
			return requeued, cancelled, fmt.Errorf("rdb: requeue: reply of %d values, want 2 or more", len(vals))
		}
		n, err := redis.Int(vals[0], nil)
		var more int
		if err == nil {
			more, err = redis.Int(vals[1], nil)
		}
		var ids []Cancelled
		if err == nil {
			ids, err = cancelledOf(vals[2:], "")
		}
		if err != nil {
			return requeued, cancelled, fmt.Errorf("rdb: requeue: %w", err)
		}
		requeued += n
		cancelled = append(cancelled, ids...)
		if more == 0 {
			return requeued, cancelled, nil
		}
	}
}

// Release puts back at the front of the queue the takings worker w holds in
// it other than known (pids w runs): takings whose take reply was lost. It
// is idempotent; requeued tasks count no crash.
func (s *Store) Release(ctx context.Context, q QueueKeys, w string, known []string) (requeued int, cancelled []Cancelled, err error) {
	r, err := s.ReleaseCheck(ctx, q, w, known)
	return r.Requeued, r.Cancelled, err
}

// Cancelled is a taking that a requeue or a release ended as cancelled
// instead of putting it back (its cancel was asked while it was held): its
// task, and its pid and holder when known ("" for a task taken in a batch
// behind its key's head).
type Cancelled struct{ ID, PID, Worker string }

// cancelledOf reads the flat id, pid, worker triples of a requeue or
// release reply; worker fills an empty worker.
func cancelledOf(flat []any, worker string) ([]Cancelled, error) {
	vs, err := redis.Strings(flat, nil)
	if err != nil {
		return nil, err
	}
	if len(vs)%3 != 0 {
		return nil, fmt.Errorf("%d values of cancelled takings, want triples", len(vs))
	}
	out := make([]Cancelled, 0, len(vs)/3)
	for i := 0; i < len(vs); i += 3 {
		c := Cancelled{ID: vs[i], PID: vs[i+1], Worker: vs[i+2]}
		if c.Worker == "" {
			c.Worker = worker
		}
		out = append(out, c)
	}
	return out, nil
}

// Released is what ReleaseCheck did and found.
type Released struct {
	// Requeued counts the takings put back that w held and did not know;
	// Cancelled are those that ended as cancelled instead (their cancel
	// was asked).
	Requeued  int
	Cancelled []Cancelled
	// Missing are the pids of known that w does not hold in the queue:
	// ended already, or lost (a take that a failed primary acknowledged
	// and never passed on to the replica promoted in its place).
	Missing []string
	// Seq is the tag's taking counter when the call ran: a taking with a
	// pid at most Seq that w held and did not know was put back (a
	// hand-off whose message had not arrived, say).
	Seq int64
}

// ReleaseCheck is Release, and in the same script call (one read of w's
// holdings) reports which of known w does not hold.
func (s *Store) ReleaseCheck(ctx context.Context, q QueueKeys, w string, known []string) (Released, error) {
	args := make([]any, 0, 6+len(known))
	args = append(args, q.Waiting, q.WorkerQueue(w), q.Config, q.Retained, q.Seq, q.WakeChannel, q.TaskPrefix)
	for _, pid := range known {
		args = append(args, pid)
	}
	vals, err := redis.Values(s.eval(ctx, q.Ref.Tag, releaseScript, args...))
	if err != nil {
		return Released{}, err
	}
	if len(vals) < 3 {
		return Released{}, fmt.Errorf("rdb: release: reply of %d values, want 3 or more", len(vals))
	}
	var r Released
	if r.Requeued, err = redis.Int(vals[0], nil); err == nil {
		var flat []any
		if flat, err = redis.Values(vals[1], nil); err == nil {
			r.Cancelled, err = cancelledOf(flat, w)
		}
	}
	if err == nil {
		r.Seq, err = redis.Int64(vals[2], nil)
	}
	if err == nil && len(vals) > 3 {
		r.Missing, err = redis.Strings(vals[3:], nil)
	}
	if err != nil {
		return Released{}, fmt.Errorf("rdb: release: %w", err)
	}
	return r, nil
}

// CancelResult says what Cancel did.
type CancelResult int

// The results of Cancel.
const (
	CancelNoop      CancelResult = 0 // unknown, ended, dead, or already asked
	CancelRemoved   CancelResult = 1 // was waiting or scheduled: ended, no worker gets it
	CancelRequested CancelResult = 2 // running: its owner was told to stop
	CancelRefused   CancelResult = 3 // a flow run or child: cancel the run
	// CancelMarked: waiting deep in a long list (beyond the stretch a
	// cancel searches from each end, so that it never holds Redis for
	// long): marked where it waits; the take that reaches it hands it out
	// with attempt 0, never run, and its end records it as cancelled.
	CancelMarked CancelResult = 4
)

// Cancel ends a waiting or scheduled task or asks the owner of a running one
// to stop.
func (s *Store) Cancel(ctx context.Context, q QueueKeys, id string) (CancelResult, error) {
	pkey, pfield := q.Packed(id)
	code, err := redis.Int(s.eval(ctx, q.Ref.Tag, cancelScript,
		q.Waiting, q.Task(id), q.Scheduled, q.Config, q.Retained, pkey, id, q.CancelChannel, pfield))
	return CancelResult(code), err
}

// Move pushes up to batch due scheduled tasks to the back of the queue and
// trims the dead set by age. It returns how many it moved.
func (s *Store) Move(ctx context.Context, q QueueKeys, batch int) (int, error) {
	return redis.Int(s.eval(ctx, q.Ref.Tag, moveScript,
		q.Scheduled, q.Waiting, q.Dead, q.Config, batch, q.TaskPrefix, q.WakeChannel))
}

// Promote moves scheduled task id of q (delayed, or waiting for a retry)
// to the back of its queue now (see promote.lua). It reports false when
// the task was not scheduled.
func (s *Store) Promote(ctx context.Context, q QueueKeys, id string) (bool, error) {
	n, err := redis.Int(s.eval(ctx, q.Ref.Tag, promoteScript,
		q.Scheduled, q.Waiting, q.Config, q.Task(id), id, q.TaskPrefix, q.WakeChannel))
	return n == 1, err
}

// DeadOp is what to do with dead tasks.
type DeadOp string

// The dead-set operations.
const (
	DeadRequeue DeadOp = "requeue"
	DeadDelete  DeadOp = "delete"
)

// DeadIDs applies op to the given dead ids and returns how many were dead,
// and the ids whose requeue it refused: flow children whose run no longer
// waits for them (failed with them, cancelled, or moved on). They stay
// dead. A child whose run still waits for its other children goes back
// into it. Each call of the script applies op to the ids in order until
// its byte bound (see dead.lua); the rest go in the next call. An error
// of a later call comes back with what the calls before it did.
func (s *Store) DeadIDs(ctx context.Context, q QueueKeys, op DeadOp, ids []string) (int, []string, error) {
	total := 0
	var refused []string
	for len(ids) > 0 {
		p, err := s.deadIDs(ctx, q, op, ids)
		total += p.Handled
		refused = append(refused, p.Refused...)
		if err != nil {
			return total, refused, err
		}
		ids = ids[max(p.Read, 1):]
	}
	return total, refused, nil
}

func (s *Store) deadIDs(ctx context.Context, q QueueKeys, op DeadOp, ids []string) (DeadPass, error) {
	args := make([]any, 0, 8+2*len(ids))
	args = append(args, 3+len(ids), q.Dead, q.Waiting, q.Config)
	for _, id := range ids {
		args = append(args, q.Task(id)) // declared: a cluster checks them
	}
	args = append(args, string(op), q.TaskPrefix, q.WakeChannel, q.IndexPrefix, "ids")
	for _, id := range ids {
		args = append(args, id)
	}
	p, _, err := deadReply(s.eval(ctx, q.Ref.Tag, deadScript, args...))
	return p, err
}

// DeadPass is what one DeadOldest call did.
type DeadPass struct {
	Handled int      // tasks requeued or deleted
	Read    int      // entries read: fewer than asked when the set ended
	Refused []string // ids whose requeue was refused (see DeadIDs), in order
	// Cut says the call stopped at its byte bound (see dead.lua): Read is
	// then fewer than asked though entries may be left after those read.
	Cut bool
	// After and AfterScore are the cursor of the next call: the last id
	// refused so far, and its score.
	After, AfterScore string
}

// DeadOldest applies op to up to n (at most BulkStep) of the oldest dead
// tasks after the cursor (after, afterScore: the last id refused by a call
// before, "" for none; see dead.lua), and reports what it did and the
// cursor of the next call. The entries before a cursor are those refused:
// a cursor, not a count of them, so that entries another client (or the
// dead set's caps) removes meanwhile do not make a call pass some it never
// read.
func (s *Store) DeadOldest(ctx context.Context, q QueueKeys, op DeadOp, n int, after, afterScore string) (DeadPass, error) {
	return s.DeadOldestBefore(ctx, q, op, n, after, afterScore, 0)
}

// DeadOldestBefore is DeadOldest over the entries dead before unix ms
// before (0: all): a pass over the whole dead set (RequeueAllDead) that
// reads only the tasks dead when it started does not requeue again, and
// again, the tasks it requeued that die again meanwhile.
func (s *Store) DeadOldestBefore(ctx context.Context, q QueueKeys, op DeadOp, n int, after, afterScore string, before int64) (DeadPass, error) {
	p := DeadPass{After: after, AfterScore: afterScore}
	if n < 1 {
		return p, nil
	}
	bound := ""
	if before > 0 {
		bound = strconv.FormatInt(before, 10)
	}
	p, score, err := deadReply(s.eval(ctx, q.Ref.Tag, deadScript, 3,
		q.Dead, q.Waiting, q.Config, string(op), q.TaskPrefix, q.WakeChannel, q.IndexPrefix, "oldest", min(n, BulkStep),
		after, afterScore, bound))
	if err != nil {
		return DeadPass{After: after, AfterScore: afterScore}, err
	}
	p.After, p.AfterScore = after, afterScore
	if len(p.Refused) > 0 {
		p.After, p.AfterScore = p.Refused[len(p.Refused)-1], score
	}
	return p, nil
}

// deadReply reads the dead script's reply: the number handled, the entries
// read, the score of the last id refused, whether the call stopped at its
// byte bound, then the ids refused.
func deadReply(r any, err error) (DeadPass, string, error) {
	var p DeadPass
	vs, err := redis.Values(r, err)
	if err != nil {
		return p, "", err
	}
	if len(vs) < 4 {
		return p, "", errors.New("rdb: short reply of dead")
	}
	if p.Handled, err = redis.Int(vs[0], nil); err != nil {
		return p, "", err
	}
	if p.Read, err = redis.Int(vs[1], nil); err != nil {
		return p, "", err
	}
	score, err := redis.String(vs[2], nil)
	if err != nil {
		return p, "", err
	}
	cut, err := redis.Int(vs[3], nil)
	if err != nil {
		return p, "", err
	}
	p.Cut = cut == 1
	p.Refused, err = redis.Strings(vs[4:], nil)
	return p, score, err
}

// Place is where a bulk operation takes tasks from.
type Place string

// The places of Bulk.
const (
	PlaceWaiting   Place = "waiting"
	PlaceScheduled Place = "scheduled"
)

// BulkAction is what a bulk operation does to each task.
type BulkAction string

// The actions of Bulk.
const (
	BulkDelete BulkAction = "delete"
	BulkCancel BulkAction = "cancel"
)

// Bulk deletes or cancels up to BulkStep tasks of a stand-alone queue's
// waiting list (front first) or scheduled set (earliest first) and returns
// how many it handled: fewer than BulkStep means none are left. A key's
// head takes the tasks waiting behind it along, within the chunk. A chunk
// is one call, or several when its tasks' bytes pass a call's bound (see
// bulk.lua).
func (s *Store) Bulk(ctx context.Context, q QueueKeys, place Place, action BulkAction) (int, error) {
	return s.BulkLevel(ctx, q, place, 0, action)
}

// BulkKeys deletes or cancels up to BulkStep of the tasks waiting in the
// lists of keys of ordered queue q, behind their heads (running, or dead
// and blocking the key), and returns how many it handled: fewer than
// BulkStep means those lists are empty. The heads stay.
func (s *Store) BulkKeys(ctx context.Context, q QueueKeys, keys []string, action BulkAction) (int, error) {
	return s.bulkChunk(ctx, q, func(n int) []any {
		args := make([]any, 0, 8+len(keys))
		args = append(args, q.Waiting, q.Scheduled, q.Config, q.Retained, "keys", string(action), n, q.TaskPrefix)
		for _, k := range keys {
			args = append(args, k)
		}
		return args
	})
}

// BulkLevel is Bulk on the waiting list of priority level (0..MaxLevel).
func (s *Store) BulkLevel(ctx context.Context, q QueueKeys, place Place, level int, action BulkAction) (int, error) {
	return s.bulkChunk(ctx, q, func(n int) []any {
		return []any{q.Level(level), q.Scheduled, q.Config, q.Retained, string(place), string(action), n, q.TaskPrefix}
	})
}

// bulkChunk handles up to BulkStep tasks in calls of the bulk script (the
// arguments args(n) of a call of at most n tasks): more than one when a
// call stops at its byte bound.
func (s *Store) bulkChunk(ctx context.Context, q QueueKeys, args func(n int) []any) (int, error) {
	total := 0
	for {
		r, err := redis.Ints(s.eval(ctx, q.Ref.Tag, bulkScript, args(BulkStep-total)...))
		if err != nil {
			return total, err
		}
		if len(r) != 2 {
			return total, fmt.Errorf("rdb: bulk: reply of %d values", len(r))
		}
		total += r[0]
		if r[1] == 0 || total >= BulkStep {
			return total, nil
		}
	}
}

// MarkLevel records that queue q has tasks of priority level (1..MaxLevel),
// before they are enqueued, and returns the highest level recorded.
func (s *Store) MarkLevel(ctx context.Context, q QueueKeys, level int) (int, error) {
	return redis.Int(s.eval(ctx, q.Ref.Tag, levelsScript, q.Config, q.Park, level, q.WakeChannel))
}

// Limits are a queue's global limits, kept in its config hash: at most
// Rate starts per PeriodMs (both > 0, or no rate limit), at most Conc
// takings at once (0: none).
type Limits struct {
	Rate     int
	PeriodMs int64
	Conc     int
}

// SetLimits stores q's global limits (zero values remove them) and
// announces the change on its wake channel, so that workers read the
// queue's flags at once.
func (s *Store) SetLimits(ctx context.Context, q QueueKeys, l Limits) error {
	return s.withConn(ctx, q.Ref.Tag, func(c redis.Conn) error {
		cmds := make([]command, 0, 3)
		if l.Rate > 0 && l.PeriodMs > 0 {
			cmds = append(cmds, cmdOf("HSET", q.Config, "rate", l.Rate, "period", l.PeriodMs))
		} else {
			cmds = append(cmds, cmdOf("HDEL", q.Config, "rate", "period"))
		}
		if l.Conc > 0 {
			cmds = append(cmds, cmdOf("HSET", q.Config, "conc", l.Conc))
		} else {
			cmds = append(cmds, cmdOf("HDEL", q.Config, "conc"))
		}
		if l.Rate > 0 && l.PeriodMs > 0 || l.Conc > 0 {
			// A task handed at enqueue would pass the limits: the limits
			// and the parked workers go together.
			cmds = append(cmds, cmdOf("DEL", q.Park))
		}
		if err := multi(ctx, c, cmds...); err != nil {
			return err
		}
		_, err := do(ctx, c, s.publish(), q.WakeChannel, "0")
		return err
	})
}

// multi runs cmds on c in one MULTI/EXEC transaction (the keys of one
// tag), sent as one pipeline: on a cluster the connection sends the whole
// transaction again, ASKING first, if the slot moved. An error reply of one
// of the commands is returned.
func multi(ctx context.Context, c redis.Conn, cmds ...command) error {
	all := make([]command, 0, len(cmds)+2)
	all = append(all, cmdOf("MULTI"))
	all = append(all, cmds...)
	all = append(all, cmdOf("EXEC"))
	rs, err := pipelineOn(ctx, c, all)
	if err != nil {
		return err
	}
	if len(rs) != len(all) {
		return fmt.Errorf("rdb: transaction: %d replies for %d commands", len(rs), len(all))
	}
	exec, err := redis.Values(rs[len(rs)-1], nil)
	if err != nil {
		return fmt.Errorf("rdb: transaction: %w", err)
	}
	for _, r := range exec {
		if e, ok := r.(redis.Error); ok {
			return e
		}
	}
	return nil
}

// ReadLimits returns q's stored global limits.
func (s *Store) ReadLimits(ctx context.Context, q QueueKeys) (Limits, error) {
	v, err := redis.Strings(s.cmd(ctx, q.Ref.Tag, "HMGET", q.Config, "rate", "period", "conc"))
	if err != nil {
		return Limits{}, err
	}
	var l Limits
	l.Rate, _ = strconv.Atoi(v[0])
	l.PeriodMs, _ = strconv.ParseInt(v[1], 10, 64)
	l.Conc, _ = strconv.Atoi(v[2])
	return l, nil
}

// QueueFlags are what a worker reads of a queue's config on every poll and
// every wake-up carrying 0: whether it is paused, its highest priority
// level in use, and whether it has global limits.
type QueueFlags struct {
	Paused  bool
	Levels  int
	Limited bool
}

// Flags reads the flags of each queue, one round trip per tag; it fails
// when the flags of any queue could not be read (see FlagsEach).
func (s *Store) Flags(ctx context.Context, qs []QueueKeys) ([]QueueFlags, error) {
	out, errs := s.FlagsEach(ctx, qs)
	for _, err := range errs {
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// FlagsEach reads the flags of each queue, one round trip per tag, and
// returns for each queue its flags or the error that kept them from being
// read: a tag whose read fails does not keep the others from being read.
// On a Redis Cluster (a ShardedPubSub pool) the tags of each master are
// read apart from those of the others, the masters at once, so that a
// master that is down (for good, with cluster-require-full-coverage no)
// fails the reads of its own queues only, and does not use up the time
// of the others'.
func (s *Store) FlagsEach(ctx context.Context, qs []QueueKeys) ([]QueueFlags, []error) {
	out := make([]QueueFlags, len(qs))
	errs := make([]error, len(qs))
	type tagIdx struct {
		tag string
		idx []int
	}
	var groups [][]tagIdx
	at := map[string]int{} // master -> its group
	_ = s.perTag(qs, func(tag string, idx []int) error {
		g := 0
		if s.shard != nil {
			m := s.shard.MasterOf(tag)
			var ok bool
			if g, ok = at[m]; !ok {
				g = len(groups)
				at[m] = g
				groups = append(groups, nil)
			}
		} else if len(groups) == 0 {
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], tagIdx{tag, idx})
		return nil
	})
	read := func(group []tagIdx) {
		for _, ti := range group {
			if err := s.flagsOf(ctx, ti.tag, qs, ti.idx, out); err != nil {
				for _, i := range ti.idx {
					errs[i] = err
				}
			}
		}
	}
	if len(groups) == 1 {
		read(groups[0])
		return out, errs
	}
	var wg sync.WaitGroup
	wg.Add(len(groups))
	for _, g := range groups {
		go func() {
			defer wg.Done()
			read(g)
		}()
	}
	wg.Wait()
	return out, errs
}

// flagsOf reads into out the flags of the queues qs[idx], all of tag.
func (s *Store) flagsOf(ctx context.Context, tag string, qs []QueueKeys, idx []int, out []QueueFlags) error {
	cmds := make([]command, len(idx))
	for j, i := range idx {
		cmds[j] = cmdOf("HMGET", qs[i].Config, "paused", "prio", "rate", "conc")
	}
	rs, err := s.pipeline(ctx, tag, cmds)
	if err != nil {
		return err
	}
	read := make([]QueueFlags, len(idx))
	for j := range idx {
		v, err := redis.Strings(rs[j], nil)
		if err != nil {
			return err
		}
		levels, _ := strconv.Atoi(v[1])
		rate, _ := strconv.Atoi(v[2])
		conc, _ := strconv.Atoi(v[3])
		read[j] = QueueFlags{Paused: v[0] != "", Levels: min(max(levels, 0), MaxLevel), Limited: rate > 0 || conc > 0}
	}
	for j, i := range idx {
		out[i] = read[j]
	}
	return nil
}

// QueueSettings are the settings scripts read from a queue's config hash.
type QueueSettings struct {
	RetentionMs  int64
	DeadMaxCount int
	DeadMaxAgeMs int64
	Keys         KeyPolicy
}

// WriteSettings stores the settings of queue q.
func (s *Store) WriteSettings(ctx context.Context, q QueueKeys, v QueueSettings) error {
	_, err := s.cmd(ctx, q.Ref.Tag, "HSET", q.Config,
		"retention", v.RetentionMs, "dead_max", v.DeadMaxCount, "dead_age", v.DeadMaxAgeMs,
		"merge", flag01(v.Keys.Merge), "ondead", v.Keys.onDead())
	return err
}

// SetPaused pauses (on) or resumes queue q: stored in its config hash, and
// announced on its wake channel so that workers look at once.
func (s *Store) SetPaused(ctx context.Context, q QueueKeys, on bool) error {
	return s.withConn(ctx, q.Ref.Tag, func(c redis.Conn) error {
		var err error
		if on {
			// Nothing is handed to a parked worker from now on: the flag
			// and the parked workers go together.
			err = multi(ctx, c, cmdOf("HSET", q.Config, "paused", "1"), cmdOf("DEL", q.Park))
		} else {
			_, err = do(ctx, c, "HDEL", q.Config, "paused")
		}
		if err != nil {
			return err
		}
		_, err = do(ctx, c, s.publish(), q.WakeChannel, "0")
		return err
	})
}

// perTag calls f once per hash tag of qs with the indexes of its queues, in
// the order tags first appear.
func (s *Store) perTag(qs []QueueKeys, f func(tag string, idx []int) error) error {
	var tags []string
	by := map[string][]int{}
	for i, q := range qs {
		if _, ok := by[q.Ref.Tag]; !ok {
			tags = append(tags, q.Ref.Tag)
		}
		by[q.Ref.Tag] = append(by[q.Ref.Tag], i)
	}
	for _, t := range tags {
		if err := f(t, by[t]); err != nil {
			return err
		}
	}
	return nil
}

// Holders returns the holder index (workers that may hold takings) of each
// queue. A queue whose index cannot be read (not a set: a hand edit, a key
// of another program) is nil in out and named in err, with the others read
// all the same (the reaper's sweep goes past it); a failure of a whole
// call leaves its queues nil too.
func (s *Store) Holders(ctx context.Context, qs []QueueKeys) ([][]string, error) {
	out := make([][]string, len(qs))
	var errs []error
	err := s.perTag(qs, func(tag string, idx []int) error {
		cmds := make([]command, len(idx))
		for j, i := range idx {
			cmds[j] = cmdOf("SMEMBERS", qs[i].Holders)
		}
		rs, err := s.pipeline(ctx, tag, cmds)
		if err != nil {
			return err
		}
		for j, i := range idx {
			if out[i], err = redis.Strings(rs[j], nil); err != nil {
				errs = append(errs, fmt.Errorf("holders of %s: %w", qs[i].Ref.Member(), err))
			}
		}
		return nil
	})
	return out, errors.Join(append(errs, err)...)
}

// Progress records report on task id while worker w owns its taking pid. It
// reports false, having changed nothing, when w no longer owns it.
func (s *Store) Progress(ctx context.Context, q QueueKeys, w, pid, id, report string) (bool, error) {
	n, err := redis.Int(s.eval(ctx, q.Ref.Tag, progressScript, q.WorkerQueue(w), q.Task(id), pid, report, id))
	return n == 1, err
}
