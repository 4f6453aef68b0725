package rdb

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/xid"
)

// ErrDuplicate is returned by Enqueue when the unique key is held by another
// task. Package worqr exports it.
var ErrDuplicate = errors.New("worqr: duplicate task")

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
	TimeoutMs   int64 // per-task override: > 0 its limit, < 0 none, 0 the queue's
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
	// Meta, when not "", is stored with every task of the call
	// (FieldMeta), beside its payload, and handed out by its takes
	// (Taken.Meta). Opaque to the scripts; the caller bounds it.
	Meta string
}

// plain reports whether tasks enqueued with a are due now, at the back of
// level 0, with no unique key, no id of the caller's, no deadline and no
// metadata (a hand-off or a packed task carries a payload alone).
func (a *EnqueueArgs) plain() bool {
	return a.DelayMillis <= 0 && a.DueMillis <= 0 && a.UniqueKey == "" && a.UniqueKeys == nil &&
		a.DeadlineMs <= 0 && a.IDLockTTL <= 0 && a.Priority <= 0 && a.Meta == ""
}

// packable reports whether tasks enqueued with a may be written packed in
// a large batch: plain, and nothing but a payload per task.
func (a *EnqueueArgs) packable() bool {
	return a.plain() && a.MaxAttempts <= 0 && a.TimeoutMs == 0 && a.RetentionMs <= 0
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
		optInt(int64(a.MaxAttempts)), optTimeout(a.TimeoutMs), optInt(a.RetentionMs), ttl)
	for _, id := range ids[lo:hi] {
		args = append(args, id)
	}
	for _, p := range payloads[lo:hi] {
		args = append(args, p)
	}
	return args
}

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

// optTimeout is a task's timeout override as stored: "" for the queue's,
// "-1" for none, else its milliseconds.
func optTimeout(ms int64) string {
	if ms < 0 {
		return "-1"
	}
	return optInt(ms)
}

// enqueueArgs are the script arguments of enqueuing tasks [lo, hi) of ids
// and payloads (a.UniqueKeys is indexed like them), step g of a batch sent
// in steps (nil: a batch of one call).
func enqueueArgs(q QueueKeys, ids []string, payloads [][]byte, lo, hi int, a *EnqueueArgs, g *StepGuard) []any {
	n := hi - lo
	args := make([]any, 0, 19+4*n)
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
		unique, a.UniqueTTL, optInt(int64(a.MaxAttempts)), optTimeout(a.TimeoutMs), flag, a.IDLockTTL, a.Digest,
		optInt(a.DeadlineMs), optInt(a.RetentionMs), n, optInt(int64(a.Priority)), step, last, g.ttl(), a.Meta)
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
