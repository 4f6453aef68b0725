package worqr

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/worqr/worqr-go/defaults"

	"github.com/rs/xid"

	"github.com/worqr/worqr-go/internal/rdb"
)

// Ordered queues. A task enqueued with EnqueueOpts.Key runs after every task
// enqueued earlier with the same key on the same queue has ended, and never
// at the same time as one of them, on any worker; tasks of different keys
// run in parallel up to the queue's Concurrency. Only the oldest task of a
// key (its head) is in the queue's waiting list at any time; the others wait
// behind it in Redis, and the next one joins the back of the waiting list
// when the head ends, so that keys take turns (a key with 10,000 tasks
// waiting gets one turn per round, like a key with one).

// KeyPolicy is how an ordered queue treats its keys. It lives in Redis (the
// queue's config hash) so that every client and worker agrees: a Worker
// writes its QueueConfig.Keys when it starts, Client.SetKeyPolicy writes it
// at any time (say, before any worker has started). The zero value blocks a
// key on a dead task and merges nothing.
type KeyPolicy struct {
	// Merge: an Enqueue with a key whose last task has not started yet
	// (waiting behind its head, or the head itself while waiting for its
	// turn or for a retry) adds its payload to that task instead of adding
	// a task: the task then carries several payloads (Task.Payloads),
	// ordered by score, each distinct payload once, with the lowest score
	// it was enqueued with. The waiting task keeps its attempts and its due
	// time. Payloads are compared byte for byte. A task gathers at most
	// 100 distinct payloads and 1 MiB of them: the next one starts a new
	// task behind it, where the following ones merge.
	Merge bool
	// MoveOnDead: when a task of a key goes dead, the key's next task runs.
	// Default false: the key is blocked (Inspector.Key says so, and
	// Inspector.BlockedKeys lists it) until the dead task is requeued (it
	// then runs first) or deleted (the next task runs).
	MoveOnDead bool
	// Fair makes the queue fair instead of ordered: a task's key is its
	// group (a tenant, a customer), the tasks of one key run side by side,
	// and the queue's free slots go to the keys with tasks waiting in
	// turn, KeyLimits.Weight tasks per turn, each key within its own
	// KeyLimits.Limits, across every worker and remote worker. A lone
	// key gets every slot. Tasks without a key run first. Merge and
	// MoveOnDead do not apply. Turn it on before enqueueing with keys: a
	// keyed task enqueued while the queue is not fair waits as an ordered
	// one, and one enqueued while it is waits for a fair take (see
	// docs/guide/fair-queues.md).
	Fair bool
	// PerKey is how a fair queue serves each key that has no KeyLimits of
	// its own (Client.SetKeyLimits).
	PerKey KeyLimits
	// Gates on a Fair queue's keyed enqueues (docs/guide/fair-queues.md):
	// an enqueue a gate answers adds nothing and returns the id of the
	// key's task that holds its place. Singleton: while a task of the key
	// waits or runs (a retry included). Debounce: a keyed task waits this
	// long before it may start, and while it waits an enqueue of its key
	// replaces its payload and Meta and moves its start to now + Debounce
	// (a later Delay or At wins), never past DebounceMax after its first
	// enqueue (0: no bound; else at least Debounce). Throttle: while a task
	// of the key waits, or the key started its KeyLimits.Rate in the last
	// Period (with Rate 1: one start per Period, the rest dropped).
	Singleton             bool
	Debounce, DebounceMax time.Duration
	Throttle              bool
}

// KeyLimits is how a fair queue (KeyPolicy.Fair) serves one key.
type KeyLimits struct {
	// Weight is how many tasks of the key start per turn: while keys of
	// weights 3 and 1 both have tasks waiting, the first starts three for
	// the second's one. 0 means 1; at most 1,000.
	Weight int
	// Limits are the key's, as a queue's Limits are the queue's, each
	// counted across every worker and remote worker: Concurrency tasks of
	// the key at most run at once, from their takes to their ends (a dead
	// worker's come back with its tasks, within HeartbeatTTL +
	// ReaperInterval); Rate tasks of the key at most start in any window of
	// Period (a sliding window on Redis's clock; at most 1,000 per Period).
	// Zero: no limit. A key at its rate waits out of turn, and goes back in
	// turn at the first take after its window frees a start (an idle
	// worker's poll: within PollInterval).
	Limits
}

func (l KeyLimits) check(field string) error {
	switch {
	case l.Weight < 0 || l.Weight > rdb.MaxKeyWeight:
		return invalid(field+".Weight", "(%d) must be between 0 and %d", l.Weight, rdb.MaxKeyWeight)
	case l.Rate > rdb.MaxKeyRate:
		return invalid(field+".Rate", "(%d) must be at most %d (a shorter Period gives a higher rate)", l.Rate, rdb.MaxKeyRate)
	}
	return l.Limits.check(field)
}

func (l KeyLimits) stored() rdb.KeyLimits {
	return rdb.KeyLimits{Weight: l.Weight, MaxRunning: l.Concurrency, Rate: l.Rate, PeriodMs: l.Period.Milliseconds()}
}

func (p KeyPolicy) check(field string) error {
	switch {
	case p.Fair && (p.Merge || p.MoveOnDead):
		return invalid(field+".Merge", "and MoveOnDead apply to ordered queues, not to a Fair one")
	case !p.Fair && p.Singleton:
		return invalid(field+".Singleton", "applies to Fair queues only")
	case !p.Fair && p.Throttle:
		return invalid(field+".Throttle", "applies to Fair queues only")
	case !p.Fair && p.Debounce != 0:
		return invalid(field+".Debounce", "applies to Fair queues only")
	case p.Debounce < 0 || p.Debounce > 0 && p.Debounce < time.Millisecond:
		return invalid(field+".Debounce", "(%v) must be 0 or at least 1ms", p.Debounce)
	case p.DebounceMax != 0 && p.Debounce == 0:
		return invalid(field+".DebounceMax", "applies with Debounce only")
	case p.DebounceMax != 0 && p.DebounceMax < p.Debounce:
		return invalid(field+".DebounceMax", "(%v) must be 0 or not shorter than Debounce (%v)", p.DebounceMax, p.Debounce)
	}
	return p.PerKey.check(field + ".PerKey")
}

func (p KeyPolicy) stored() rdb.KeyPolicy {
	return rdb.KeyPolicy{Merge: p.Merge, MoveOnDead: p.MoveOnDead, Fair: p.Fair,
		PerKey: p.PerKey.stored(), Singleton: p.Singleton, Throttle: p.Throttle,
		DebounceMs: p.Debounce.Milliseconds(), DebounceMaxMs: p.DebounceMax.Milliseconds()}
}

// SetKeyPolicy stores the key policy of queue. Workers serving the queue
// store their QueueConfig.Keys when they start: keep both the same.
func (c *Client) SetKeyPolicy(ctx context.Context, queue string, p KeyPolicy) error {
	if err := p.check("KeyPolicy"); err != nil {
		return err
	}
	q, err := c.clientQueue(queue)
	if err != nil {
		return err
	}
	if err := c.st.WriteKeyPolicy(ctx, q.qk, p.stored()); err != nil {
		return fmt.Errorf("worqr: set key policy of %s: %w", queue, err)
	}
	return nil
}

// SetKeyLimits stores how fair queue serves key, in place of the queue's
// KeyPolicy.PerKey; the zero KeyLimits removes it. Every worker applies it
// from the key's next turn; a key its old Concurrency held goes back in turn
// when one of its tasks ends.
func (c *Client) SetKeyLimits(ctx context.Context, queue, key string, l KeyLimits) error {
	if err := l.check("KeyLimits"); err != nil {
		return err
	}
	if key == "" || len(key) > defaults.MaxKeyLen {
		return invalid("key", "must be 1 to %d bytes long", defaults.MaxKeyLen)
	}
	q, err := c.clientQueue(queue)
	if err != nil {
		return err
	}
	if err := c.st.SetKeyLimits(ctx, q.qk, key, l.stored()); err != nil {
		return fmt.Errorf("worqr: set limits of key %q of %s: %w", key, queue, err)
	}
	return nil
}

// Payload is one payload of a task of an ordered queue. A task that was
// merged into (KeyPolicy.Merge) has several.
type Payload struct {
	// Data is the payload given to Enqueue.
	Data []byte
	// Score orders the payloads of a merged task: EnqueueOpts.Score, or the
	// enqueue time in unix milliseconds (Redis time).
	Score float64
}

// unwrap reads the payload field of a task: a keyed task's envelope gives
// its key, its payloads and, as the payload, the last one (the highest
// score); anything else is the payload as enqueued.
func unwrap(b []byte) (payload []byte, key string, payloads []Payload) {
	k, es, ok := rdb.DecodeEnvelope(b)
	if !ok {
		return b, "", nil
	}
	payloads = make([]Payload, len(es))
	for i, e := range es {
		payloads[i] = Payload{Data: e.Payload, Score: e.Score}
	}
	if len(es) > 0 {
		payload = es[len(es)-1].Payload
	}
	return payload, k, payloads
}

// checkKeyed validates the options of a keyed enqueue.
func checkKeyed(o *EnqueueOpts) error {
	switch {
	case len(o.Key) > defaults.MaxKeyLen:
		return invalid("EnqueueOpts.Key", "is %d bytes long (at most %d)", len(o.Key), defaults.MaxKeyLen)
	case math.IsNaN(o.Score) || math.IsInf(o.Score, 0):
		return invalid("EnqueueOpts.Score", "(%v) must be a finite number", o.Score)
	case o.UniqueKey != "":
		return invalid("EnqueueOpts.UniqueKey", "cannot be set together with Key")
	case o.ID != "":
		return invalid("EnqueueOpts.ID", "cannot be set together with Key")
	case o.UniqueKeys != nil:
		return invalid("EnqueueOpts.UniqueKeys", "cannot be set together with Key")
	case o.Priority != 0:
		return invalid("EnqueueOpts.Priority", "cannot be set together with Key (a key's tasks run in enqueue order)")
	}
	return nil
}

// checkPayloadPrefix refuses a payload that starts like the envelope of a
// keyed task (bytes 0xFF 'w' 'q' 'k' 0x01), so that a worker never takes a
// plain payload for one.
func checkPayloadPrefix(name string, p []byte) error {
	if rdb.IsEnvelope(p) {
		return invalid(name, "starts with bytes reserved for tasks of ordered queues (0xFF 'w' 'q' 'k' 0x01)")
	}
	return nil
}

// keyedStepEnd returns the end of the step of a keyed batch that starts at
// lo: at most MaxEnqueueChunk tasks and MaxEnqueueChunkBytes of payloads (a
// larger payload is a step of its own), as rdb.Chunks cuts a plain batch:
// a call's time grows with its bytes, and no call may hold Redis for long.
func keyedStepEnd(payloads [][]byte, lo int) int {
	hi, size := lo, 0
	for hi < len(payloads) && hi-lo < rdb.MaxEnqueueChunk {
		if hi > lo && size+len(payloads[hi]) > rdb.MaxEnqueueChunkBytes {
			break
		}
		size += len(payloads[hi])
		hi++
	}
	return hi
}

// enqueueKeyed enqueues payloads with opts.Key, in order, in steps of at
// most MaxEnqueueChunk tasks and MaxEnqueueChunkBytes of payloads.
func (c *Client) enqueueKeyed(ctx context.Context, queue string, q *clientQueue, payloads [][]byte,
	opts *EnqueueOpts, args *rdb.EnqueueArgs) ([]string, error) {
	ids := make([]string, len(payloads))
	for i := range ids {
		ids[i] = xid.New().String()
	}
	scores := make([]string, len(payloads))
	if opts.Score != 0 {
		for i := range scores {
			scores[i] = rdb.FormatScore(opts.Score)
		}
	}
	out := make([]string, 0, len(ids))
	var fresh []string
	var replica error
	var ends []int
	for lo := 0; lo < len(ids); lo = ends[len(ends)-1] {
		ends = append(ends, keyedStepEnd(payloads, lo))
	}
	// A batch of several steps chains them with a guard in Redis (as a
	// plain EnqueueBatch's): a step applies only after the one before it,
	// and after a lost reply the guard, closed, tells how far it got. A
	// batch of one call carries one too, left behind for a while: after a
	// lost reply it tells whether the call applied.
	guard := ""
	if len(ids) > 1 {
		guard = q.qk.StepsPrefix + xid.New().String()
	}
	for k, hi := range ends {
		lo := 0
		if k > 0 {
			lo = ends[k-1]
		}
		var g *rdb.StepGuard
		cctx, cancel := ctx, context.CancelFunc(func() {})
		if guard != "" {
			// Each call is bounded, so that the guard outlives it.
			cctx, cancel = rdb.OneCallContext(ctx)
			// (A batch of one call leaves its guard behind, not last: a
			// lost reply is read from it.)
			one := len(ends) == 1
			g = &rdb.StepGuard{Key: guard, Step: k, Last: !one && k == len(ends)-1, OneCall: one}
		}
		res, err := c.st.EnqueueKeyStep(cctx, q.qk, opts.Key, ids[lo:hi], payloads[lo:hi], scores[lo:hi], args, g)
		cancel()
		if errors.Is(err, ErrNotReplicated) {
			replica, err = err, nil // applied: carry on, say so at the end
		}
		if err != nil {
			if g != nil && c.keyStepApplied(ctx, q, g, err) {
				// Its reply was lost, but it is in: its tasks count (an id
				// of a task merged into a waiting one is not known here).
				out = append(out, ids[lo:hi]...)
			}
			if len(fresh) > 0 {
				c.enqueued(queue, fresh) // the steps before this one are in
			}
			if len(ids) == 1 {
				return nil, fmt.Errorf("worqr: enqueue %s: %w", queue, err)
			}
			return out, &BatchError{Queue: queue, Enqueued: len(out), Total: len(ids), Err: err}
		}
		for _, r := range res {
			out = append(out, r.ID)
			if !r.Merged {
				fresh = append(fresh, r.ID)
			}
		}
	}
	if len(fresh) > 0 {
		c.enqueued(queue, fresh)
	}
	if replica != nil {
		return out, fmt.Errorf("worqr: enqueue %s: %w", queue, replica)
	}
	return out, nil
}

// keyStepApplied reports whether step g of a keyed batch whose call failed
// with err was applied all the same (its reply lost; see
// rdb.Store.StepsApplied). Redis out of reach: false (BatchError.Enqueued
// is then a floor).
func (c *Client) keyStepApplied(ctx context.Context, q *clientQueue, g *rdb.StepGuard, err error) bool {
	got, ok := c.st.StepsApplied(ctx, q.qk, g.Key, err)
	switch {
	case !ok:
		return false
	case got == -1:
		return g.Last && g.Step > 0 // the last step deletes the guard
	}
	return got >= g.Step
}

// MergeFunc merges an incoming payload into the payload of a task that has
// not started yet (see Client.EnqueueMerge). It may run more than once for
// one call, on fresh data each time, and must not keep its arguments.
type MergeFunc func(waiting, incoming []byte) ([]byte, error)

// maxMergeTries bounds how often EnqueueMerge reads again after the waiting
// task changed under it.
const maxMergeTries = 32

// EnqueueMerge enqueues payload with key on queue, merged by merge into the
// key's last task when that task has not started yet: its payload (its
// last one, Task.Payload) becomes merge(that payload, payload), and it keeps
// its other payloads (merged by KeyPolicy.Merge), its attempts, its due time
// and its score; otherwise a task is added as Enqueue with opts.Key would. It is
// for payloads that are not a set of values (a counter, a latest state); the
// queue's KeyPolicy.Merge, if on, does not apply to it. The merge is a read,
// merge and write: the write applies only if the task did not change since
// the read (else it reads again, up to 32 times). It returns the id of the
// task that holds the payload and whether it was merged.
func (c *Client) EnqueueMerge(ctx context.Context, queue, key string, payload []byte, merge MergeFunc,
	opts *EnqueueOpts) (string, bool, error) {
	if merge == nil {
		return "", false, invalid("merge", "is nil")
	}
	var o EnqueueOpts
	if opts != nil {
		o = *opts
	}
	if o.Key != "" && o.Key != key {
		return "", false, invalid("EnqueueOpts.Key", "(%q) differs from key (%q)", o.Key, key)
	}
	o.Key = key
	if key == "" {
		return "", false, invalid("key", "is empty")
	}
	if o.Type != "" {
		// merge would get the tags of the stored payloads.
		return "", false, invalid("EnqueueOpts.Type", "is not applied by EnqueueMerge (merge sees the payloads as stored): enqueue typed tasks with Enqueue")
	}
	if err := checkKeyed(&o); err != nil {
		return "", false, err
	}
	q, err := c.clientQueue(queue)
	if err != nil {
		return "", false, err
	}
	args, err := o.args(1)
	if err != nil {
		return "", false, err
	}
	if err := c.checkPayload("payload", payload); err != nil {
		return "", false, err
	}
	if err := c.markKnown(ctx, q); err != nil {
		return "", false, fmt.Errorf("worqr: enqueue %s: %w", queue, err)
	}
	score := ""
	if o.Score != 0 {
		score = rdb.FormatScore(o.Score)
	}
	id := xid.New().String()
	for range maxMergeTries {
		tail, err := c.st.ReadKeyTail(ctx, q.qk, key)
		if err != nil {
			return "", false, fmt.Errorf("worqr: enqueue %s: %w", queue, err)
		}
		data := payload
		if tail != nil {
			old, _, _ := unwrap(tail.Payload)
			if data, err = merge(old, payload); err != nil {
				return "", false, fmt.Errorf("worqr: enqueue %s: merge: %w", queue, err)
			}
			if err := c.checkPayload("merge result", data); err != nil {
				return "", false, err
			}
		}
		r, err := c.st.KeyMergeInto(ctx, q.qk, key, tail, id, data, score, args)
		if errors.Is(err, rdb.ErrTailChanged) {
			continue
		}
		replica := errors.Is(err, ErrNotReplicated)
		if err != nil && !replica {
			return "", false, fmt.Errorf("worqr: enqueue %s: %w", queue, err)
		}
		if !r.Merged {
			c.enqueued(queue, []string{r.ID})
		}
		if replica {
			return r.ID, r.Merged, fmt.Errorf("worqr: enqueue %s: task %s: %w", queue, r.ID, err)
		}
		return r.ID, r.Merged, nil
	}
	return "", false, fmt.Errorf("worqr: enqueue %s: key %q: its waiting task changed %d times during the merge", queue, key, maxMergeTries)
}

// checkPayload applies the size limit and the reserved prefix. The limit
// is the caller's payload's: a typed payload's tag (at most 106 bytes, see
// typedPayload) is not counted. Only a tag typedPayload could have made
// is one: a payload that merely starts with the mark, its nul far in, is
// counted whole (else a payload of any size would pass).
func (c *Client) checkPayload(name string, p []byte) error {
	size := len(p)
	if typ, inner, ok := splitTyped(p); ok && checkName("task type", typ) == nil {
		size = len(inner)
	}
	if size > c.cfg.MaxPayloadBytes {
		return invalid(name, "is %d bytes, over MaxPayloadBytes (%d)", size, c.cfg.MaxPayloadBytes)
	}
	return checkPayloadPrefix(name, p)
}

// KeyInfo is one key of an ordered queue, or of a fair one
// (KeyPolicy.Fair).
type KeyInfo struct {
	Key string
	// Head is the key's oldest task: the one that runs (or waits its turn,
	// or its retry) while the others wait behind it. nil for a fair key.
	Head *TaskInfo
	// Behind counts the tasks waiting behind the head; for a fair key,
	// those waiting in its list (the next to start first).
	Behind int
	// Blocked is true when the head is dead and the queue's KeyPolicy does
	// not move on: the key runs nothing until the head is requeued or
	// deleted (Inspector.RequeueDead, Inspector.DeleteDead). For a fair key:
	// it starts nothing for now, held by its Concurrency (until one of its
	// tasks ends) or waiting out its Rate.
	Blocked bool
	// Running counts a fair key's tasks running (from their takes to their
	// ends), across every worker and remote worker.
	Running int
	// KeyLimits are how a fair queue serves the key: its own
	// (Client.SetKeyLimits), else the queue's KeyPolicy.PerKey.
	KeyLimits
}

// fairKeyInfo is fair key k as a KeyInfo (def: the queue's policy).
func fairKeyInfo(k rdb.FairKey, def rdb.KeyLimits) KeyInfo {
	l := def
	if k.Limits != nil {
		l = *k.Limits
	}
	return KeyInfo{Key: k.Key, Behind: k.Waiting, Blocked: k.Held || k.Timed, Running: k.Running,
		KeyLimits: KeyLimits{Weight: max(l.Weight, 1), Limits: Limits{Concurrency: l.MaxRunning, Rate: l.Rate,
			Period: time.Duration(l.PeriodMs) * time.Millisecond}}}
}

// fairPolicy reports whether qk is a fair queue, and its policy for keys
// without their own.
func (in *Inspector) fairPolicy(ctx context.Context, qk rdb.QueueKeys) (bool, rdb.KeyLimits, error) {
	p, err := in.st.ReadKeyPolicy(ctx, qk)
	if err != nil {
		return false, rdb.KeyLimits{}, err
	}
	return p.Fair, p.PerKey, nil
}

func (in *Inspector) orderedQueue(queue string) (rdb.QueueKeys, error) {
	ref, err := parseQueue(queue)
	if err != nil {
		return rdb.QueueKeys{}, err
	}
	if ref.Flow() {
		return rdb.QueueKeys{}, invalid("queue", "(%s) is a flow's queue: only stand-alone queues have keys", queue)
	}
	return in.st.Queue(ref), nil
}

func (in *Inspector) keyInfos(ctx context.Context, qk rdb.QueueKeys, ks []rdb.KeyState) ([]KeyInfo, error) {
	ids := make([]string, len(ks))
	for i, k := range ks {
		ids[i] = k.Head
	}
	recs, err := in.st.Tasks(ctx, qk, ids)
	if err != nil {
		return nil, err
	}
	byID := make(map[string]*rdb.TaskRecord, len(recs))
	for _, r := range recs {
		byID[r.ID] = r
	}
	out := make([]KeyInfo, len(ks))
	for i, k := range ks {
		out[i] = KeyInfo{Key: k.Key, Behind: k.Behind, Blocked: k.Blocked()}
		if r := byID[k.Head]; r != nil {
			out[i].Head = taskInfo(qk.Ref, r)
		} else {
			out[i].Head = &TaskInfo{ID: k.Head, Queue: qk.Ref.Member()}
		}
	}
	return out, nil
}

// Key returns key of queue (its head and how many tasks wait behind it; of
// a fair queue, its tasks waiting and running and its limits), or nil when
// the key has no task.
func (in *Inspector) Key(ctx context.Context, queue, key string) (*KeyInfo, error) {
	qk, err := in.orderedQueue(queue)
	if err != nil {
		return nil, err
	}
	fair, def, err := in.fairPolicy(ctx, qk)
	if err != nil {
		return nil, err
	}
	if fair {
		fk, err := in.st.ReadFairKey(ctx, qk, key)
		if err != nil || fk.Running == 0 && fk.Waiting == 0 && !fk.InTurn && !fk.Held && !fk.Timed {
			return nil, err
		}
		ki := fairKeyInfo(fk, def)
		return &ki, nil
	}
	ks, err := in.st.Key(ctx, qk, key)
	if err != nil || ks == nil {
		return nil, err
	}
	out, err := in.keyInfos(ctx, qk, []rdb.KeyState{*ks})
	if err != nil {
		return nil, err
	}
	return &out[0], nil
}

// Keys returns a page of the keys of queue that have tasks, from cursor (0
// to start), and the cursor of the next page (0 after the last). A page
// holds about count keys (1 to 1,000, so that one HSCAN stays short), in
// no particular order; a key may show twice. total is how many keys have
// tasks. Of a fair queue, the keys with tasks waiting or running (and a
// key whose last task started, until a take finds its list empty), each
// with its counts and limits; total counts those with tasks waiting, as
// QueueInfo.Keys.
func (in *Inspector) Keys(ctx context.Context, queue string, cursor uint64, count int) (keys []KeyInfo, next uint64, total int, err error) {
	qk, err := in.orderedQueue(queue)
	if err != nil {
		return nil, 0, 0, err
	}
	switch {
	case count < 1:
		return nil, 0, 0, invalid("count", "(%d) must be at least 1", count)
	case count > rdb.BulkChunk:
		return nil, 0, 0, invalid("count", "(%d) must be at most %d (one page: go on from the cursor)", count, rdb.BulkChunk)
	}
	fair, def, err := in.fairPolicy(ctx, qk)
	if err != nil {
		return nil, 0, 0, err
	}
	if fair {
		fks, next, err := in.st.FairKeys(ctx, qk, cursor, count)
		if err != nil {
			return nil, 0, 0, err
		}
		if total, err = in.st.FairCount(ctx, qk); err != nil {
			return nil, 0, 0, err
		}
		keys = make([]KeyInfo, len(fks))
		for i, k := range fks {
			keys[i] = fairKeyInfo(k, def)
		}
		return keys, next, total, nil
	}
	ks, next, err := in.st.Keys(ctx, qk, cursor, count)
	if err != nil {
		return nil, 0, 0, err
	}
	if total, err = in.st.KeyCount(ctx, qk); err != nil {
		return nil, 0, 0, err
	}
	keys, err = in.keyInfos(ctx, qk, ks)
	return keys, next, total, err
}

// BlockedKeys returns the keys of queue blocked by a dead head, reading
// the dead set from the newest, at most limit keys, each once. The dead
// set is read in pages by rank: a task that leaves it during the call (its
// requeue or delete) moves the entries after it up one, and the one at a
// page's edge may be missed (the next call lists it).
func (in *Inspector) BlockedKeys(ctx context.Context, queue string, limit int) ([]KeyInfo, error) {
	qk, err := in.orderedQueue(queue)
	if err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, invalid("limit", "(%d) must be at least 1", limit)
	}
	var out []KeyInfo
	// The pages are read by rank, newest first: a task that dies between
	// two pages moves every entry down one, and the next page starts with
	// the last entry read. Each key is listed once.
	seen := map[string]bool{}
	for off := 0; len(out) < limit; off += rdb.BulkChunk {
		span, err := in.st.Dead(ctx, qk, off, rdb.BulkChunk)
		if err != nil {
			return nil, err
		}
		recs, err := in.st.Tasks(ctx, qk, span.IDs)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			_, key, _ := unwrap(r.Payload)
			if key == "" || len(out) >= limit || seen[key] {
				continue
			}
			ki, err := in.Key(ctx, queue, key)
			if err != nil {
				return nil, err
			}
			if ki != nil && ki.Blocked && ki.Head != nil && ki.Head.ID == r.ID {
				seen[key] = true
				out = append(out, *ki)
			}
		}
		if len(span.IDs) < rdb.BulkChunk {
			break
		}
	}
	return out, nil
}

// TasksBehind returns the ids of the tasks waiting behind key's head (of
// a fair queue's key: in its list), in the order they will run, from
// offset (at most limit), read in pages of 1,000 as Tasks'.
func (in *Inspector) TasksBehind(ctx context.Context, queue, key string, offset, limit int) ([]string, error) {
	qk, err := in.orderedQueue(queue)
	if err != nil {
		return nil, err
	}
	if offset < 0 {
		return nil, invalid("offset", "(%d) must not be negative", offset)
	}
	if limit < 0 {
		return nil, invalid("limit", "(%d) must not be negative", limit)
	}
	fair, _, err := in.fairPolicy(ctx, qk)
	if err != nil {
		return nil, err
	}
	span, err := pages(offset, limit, func(off, n int) (rdb.Span, error) {
		read := in.st.KeyBehind
		if fair {
			read = in.st.FairKeyWaiting
		}
		ids, err := read(ctx, qk, key, off, n)
		return rdb.Span{IDs: ids}, err
	})
	return span.IDs, err
}
