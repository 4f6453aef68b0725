package rdb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gomodule/redigo/redis"
)

// Ordered queues: a task enqueued with a key runs after the key's earlier
// tasks and never beside them (lua/include/key.lua). Only a key's head
// circulates in the queue's structures; the others wait in the key's list.

// KeyPolicy is how an ordered queue treats its keys, stored in the queue's
// config hash (fields merge and ondead), read by the scripts.
type KeyPolicy struct {
	// Merge: an enqueue whose key's last task still waits merges its
	// payload into that task (Lowkiq's rule) instead of adding a task.
	Merge bool
	// MoveOnDead: a key's task that goes dead lets the key's next task
	// run; else the key is blocked until the dead task is requeued or
	// deleted.
	MoveOnDead bool
	// Fair: the queue's keys share it rather than order it (config field
	// fair; see lua/include/fair.lua). Merge and MoveOnDead do not apply.
	Fair bool
	// PerKey is a fair queue's policy for each key without one of its own
	// (SetKeyLimits).
	PerKey KeyLimits
	// A fair queue's gates on an enqueue with a key (config fields one,
	// db, dbm, thr; see lua/enqueue_key.lua): Singleton, at most one task
	// of a key waiting or running; DebounceMs, a key's task waits this
	// long and a later enqueue replaces it while it does, its start never
	// moved past DebounceMaxMs after its first enqueue (0: no bound);
	// Throttle, an enqueue of a key with a task waiting or at its rate is
	// answered by its latest task.
	Singleton     bool
	DebounceMs    int64
	DebounceMaxMs int64
	Throttle      bool
}

// KeyLimits is how a fair queue serves one key: its Weight (tasks per turn,
// 0: 1), MaxRunning (its takings at once, across every worker; 0: no
// limit), and Rate starts at most in any window of PeriodMs (0: no rate).
type KeyLimits struct {
	Weight     int
	MaxRunning int
	Rate       int
	PeriodMs   int64
}

// MaxKeyWeight is the largest KeyLimits.Weight (a key's credit in its turn
// is kept in 10 bits of its state, see lua/include/fair.lua); MaxKeyRate
// the largest KeyLimits.Rate (a key's rate log holds at most that many
// starts, so that the take's trim of it is bounded: FAIR.rate_room).
const (
	MaxKeyWeight = 1000
	MaxKeyRate   = 1000
)

// stored is the policy as the scripts read it: "<weight> <limit>", then
// " <rate> <period ms>" for a key with a rate.
func (l KeyLimits) stored() string {
	s := strconv.Itoa(min(max(l.Weight, 1), MaxKeyWeight)) + " " + strconv.Itoa(max(l.MaxRunning, 0))
	if l.Rate > 0 && l.PeriodMs > 0 {
		s += " " + strconv.Itoa(min(l.Rate, MaxKeyRate)) + " " + strconv.FormatInt(l.PeriodMs, 10)
	}
	return s
}

// keyPolicyCmds are the commands that store p (in one MULTI); dlim says
// whether PerKey limits every key without a policy of its own (see
// QueueFlags.KeyLimited).
func keyPolicyCmds(q QueueKeys, p KeyPolicy) []command {
	return []command{
		cmdOf("HSET", q.Config, "merge", flag01(p.Merge), "ondead", p.onDead(), "fair", flag01(p.Fair),
			"one", flag01(p.Singleton), "db", p.DebounceMs, "dbm", p.DebounceMaxMs, "thr", flag01(p.Throttle),
			"dlim", flag01(p.PerKey.limits())),
		cmdOf("HSET", q.FairState, "p:", p.PerKey.stored()),
	}
}

func flag01(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func (p KeyPolicy) onDead() string {
	if p.MoveOnDead {
		return "next"
	}
	return "block"
}

// WriteKeyPolicy stores the key policy of queue q alone, and announces it
// ("0" on the queue's wake channel: workers read its flags again, Fair
// among them).
func (s *Store) WriteKeyPolicy(ctx context.Context, q QueueKeys, p KeyPolicy) error {
	return s.withConn(ctx, q.Ref.Tag, func(c redis.Conn) error {
		if err := multi(ctx, c, keyPolicyCmds(q, p)...); err != nil {
			return err
		}
		_, err := do(ctx, c, s.publish(), q.WakeChannel, "0")
		return err
	})
}

// ReadKeyPolicy reads the key policy of queue q (the defaults when none
// was written).
func (s *Store) ReadKeyPolicy(ctx context.Context, q QueueKeys) (KeyPolicy, error) {
	vals, err := redis.Strings(s.cmd(ctx, q.Ref.Tag, "HMGET", q.Config, "merge", "ondead", "fair", "one", "db", "dbm", "thr"))
	if err != nil {
		return KeyPolicy{}, err
	}
	p := KeyPolicy{Merge: vals[0] == "1", MoveOnDead: vals[1] == "next", Fair: vals[2] == "1",
		Singleton: vals[3] == "1", Throttle: vals[6] == "1"}
	p.DebounceMs, _ = strconv.ParseInt(vals[4], 10, 64)
	p.DebounceMaxMs, _ = strconv.ParseInt(vals[5], 10, 64)
	pol, err := redis.String(s.cmd(ctx, q.Ref.Tag, "HGET", q.FairState, "p:"))
	if err != nil && err != redis.ErrNil {
		return KeyPolicy{}, err
	}
	p.PerKey = parseKeyLimits(pol)
	return p, nil
}

// parseKeyLimits reads a stored policy ("<weight> <limit>[ <rate>
// <period ms>]"; "" : none).
func parseKeyLimits(s string) KeyLimits {
	f := strings.Fields(s)
	var out KeyLimits
	if len(f) >= 2 {
		out.Weight, _ = strconv.Atoi(f[0])
		out.MaxRunning, _ = strconv.Atoi(f[1])
	}
	if len(f) == 4 {
		out.Rate, _ = strconv.Atoi(f[2])
		out.PeriodMs, _ = strconv.ParseInt(f[3], 10, 64)
	}
	return out
}

// SetKeyLimits stores the policy of one key of fair queue q (the zero
// KeyLimits: the queue's PerKey applies again). A take reads it on the
// key's next turn; a key held by its old limit goes back in turn when one
// of its takings ends.
func (s *Store) SetKeyLimits(ctx context.Context, q QueueKeys, key string, l KeyLimits) error {
	p := ""
	if l != (KeyLimits{}) {
		p = l.stored()
	}
	_, err := s.eval(ctx, q.Ref.Tag, keyLimitsScript, q.FairState, q.Config, key, p, q.WakeChannel)
	return err
}

// limits reports whether l limits its key (a running limit or a rate),
// as lua/key_limits.lua decides it for a stored policy.
func (l KeyLimits) limits() bool {
	return l.MaxRunning > 0 || (l.Rate > 0 && l.PeriodMs > 0)
}

// The encoding of a fair key's state (FAIR_* in lua/include/fair.lua), and
// the fields of the state hash that count the ids in the keys' lists and
// the keys not out (FAIR.N, FAIR.K).
const (
	fairRun, fairCredit    = 4096, 4
	fairIn, fairBlocked    = 1, 2
	fairTimed              = 3
	fairCountN, fairCountK = "n", "k"
)

// envelopeMagic starts the payload field of every keyed task (KEY_ENV in
// lua/include/key.lua). Package worqr refuses payloads that start with it.
var envelopeMagic = []byte("\xffwqk\x01")

// IsEnvelope reports whether b starts like a keyed task's envelope.
func IsEnvelope(b []byte) bool { return bytes.HasPrefix(b, envelopeMagic) }

// Entry is one payload of a keyed task and its score (its enqueue time in
// unix ms unless the caller gave one). A merged task has several, in score
// order.
type Entry struct {
	Score   float64
	Payload []byte
}

// DecodeEnvelope reads a keyed task's payload field: its key and its
// entries. ok is false when b is not an envelope (or a corrupt one).
func DecodeEnvelope(b []byte) (key string, entries []Entry, ok bool) {
	if !IsEnvelope(b) {
		return "", nil, false
	}
	rest := b[len(envelopeMagic):]
	num := func(sep byte) (string, bool) {
		i := bytes.IndexByte(rest, sep)
		if i < 0 {
			return "", false
		}
		s := string(rest[:i])
		rest = rest[i+1:]
		return s, true
	}
	s, ok := num(':')
	n, err := strconv.Atoi(s)
	if !ok || err != nil || n < 0 || n > len(rest) {
		return "", nil, false
	}
	key, rest = string(rest[:n]), rest[n:]
	for len(rest) > 0 {
		sc, ok1 := num(':')
		ln, ok2 := num(':')
		score, err1 := strconv.ParseFloat(sc, 64)
		n, err2 := strconv.Atoi(ln)
		if !ok1 || !ok2 || err1 != nil || err2 != nil || n < 0 || n > len(rest) {
			return "", nil, false
		}
		entries = append(entries, Entry{Score: score, Payload: rest[:n:n]})
		rest = rest[n:]
	}
	return key, entries, true
}

// EncodeEnvelope writes a keyed task's payload field (as the scripts do).
func EncodeEnvelope(key string, entries []Entry) []byte {
	var b bytes.Buffer
	b.Write(envelopeMagic)
	fmt.Fprintf(&b, "%d:%s", len(key), key)
	for _, e := range entries {
		fmt.Fprintf(&b, "%s:%d:", FormatScore(e.Score), len(e.Payload))
		b.Write(e.Payload)
	}
	return b.Bytes()
}

// FormatScore writes a score as the scripts read it.
func FormatScore(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// KeyEnqueued is what EnqueueKey did with one task: ID holds its payload,
// its own id or, when Merged, the id of the waiting task it merged into.
type KeyEnqueued struct {
	ID     string
	Merged bool
}

// ErrTailChanged is returned by KeyMergeInto when the key's waiting tail
// changed since KeyTail read it: nothing was written.
var ErrTailChanged = errors.New("worqr: the key's waiting task changed")

func (s *Store) enqueueKeyCall(ctx context.Context, q QueueKeys, key string, ids []string, payloads [][]byte,
	scores []string, a *EnqueueArgs, mode, tail, version string, g *StepGuard) (any, error) {
	if a == nil {
		a = &EnqueueArgs{}
	}
	args := make([]any, 0, 24+4*len(ids))
	nkeys := 8 + len(ids)
	if g != nil {
		nkeys++
	}
	args = append(args, nkeys, q.Waiting, q.Scheduled, q.KeyHeads, q.KeyListPrefix+key, q.Config,
		q.FairListPrefix+key, q.FairRing, q.FairState)
	for _, id := range ids {
		args = append(args, q.Task(id))
	}
	if g != nil {
		args = append(args, g.Key)
	}
	args = append(args, q.TaskPrefix, key, optInt(a.DelayMillis), optInt(a.DueMillis),
		optInt(int64(a.MaxAttempts)), optTimeout(a.TimeoutMs), mode, tail, version,
		optInt(a.RetentionMs), optInt(a.DeadlineMs), len(ids))
	for _, id := range ids {
		args = append(args, id)
	}
	for _, p := range payloads {
		args = append(args, p)
	}
	for _, sc := range scores {
		args = append(args, sc)
	}
	step, last := g.guardArgs()
	args = append(args, step, g.ttl(), last, a.Meta)
	if mode == "read" {
		return s.eval(ctx, q.Ref.Tag, enqueueKeyScript, args...)
	}
	return s.evalAck(ctx, q.Ref.Tag, enqueueKeyScript, args...)
}

// EnqueueKey enqueues tasks with key on queue q, in order, in one script
// call (at most MaxEnqueueChunk). scores[i] is the score of payloads[i] ("",
// or a nil scores: Redis time in ms). Only a's delay, due time, max
// attempts, timeout, retention, deadline and metadata apply (a task merged
// into a waiting one keeps that one's metadata).
func (s *Store) EnqueueKey(ctx context.Context, q QueueKeys, key string, ids []string, payloads [][]byte,
	scores []string, a *EnqueueArgs) ([]KeyEnqueued, error) {
	return s.EnqueueKeyStep(ctx, q, key, ids, payloads, scores, a, nil)
}

// EnqueueKeyStep is EnqueueKey as step g of a keyed batch sent in several
// calls (nil: a call of its own): it applies only when the step before it
// did (else ErrStepRefused, nothing written), so that after a lost reply
// StepsApplied tells how far the batch got.
func (s *Store) EnqueueKeyStep(ctx context.Context, q QueueKeys, key string, ids []string, payloads [][]byte,
	scores []string, a *EnqueueArgs, g *StepGuard) ([]KeyEnqueued, error) {
	if len(ids) != len(payloads) || (scores != nil && len(scores) != len(ids)) {
		return nil, fmt.Errorf("rdb: enqueue key: %d ids, %d payloads, %d scores", len(ids), len(payloads), len(scores))
	}
	if scores == nil {
		scores = make([]string, len(ids))
	}
	return keyEnqueued(s.enqueueKeyCall(ctx, q, key, ids, payloads, scores, a, "add", "", "", g))
}

func keyEnqueued(r any, err error) ([]KeyEnqueued, error) {
	err, replica := splitReplica(err)
	vals, err := redis.Values(r, err)
	if err != nil {
		return nil, err
	}
	if len(vals) == 1 {
		switch n, _ := redis.Int(vals[0], nil); n {
		case -4:
			return nil, ErrTailChanged
		case -5:
			return nil, ErrStepRefused
		}
	}
	if len(vals)%2 != 0 {
		return nil, fmt.Errorf("rdb: enqueue key: reply of %d values", len(vals))
	}
	out := make([]KeyEnqueued, len(vals)/2)
	for i := range out {
		out[i].ID, _ = redis.String(vals[2*i], nil)
		m, _ := redis.Int(vals[2*i+1], nil)
		out[i].Merged = m == 1
	}
	return out, replica
}

// KeyTail is the last task of a key while it still waits (behind the
// head, or the head itself while queued or scheduled).
type KeyTail struct {
	ID      string
	Payload []byte // the envelope
	Version string // merges so far, checked by KeyMergeInto
}

// ReadKeyTail returns key's waiting tail on q, or nil when the key has
// none (no task, or its last one runs or is dead).
func (s *Store) ReadKeyTail(ctx context.Context, q QueueKeys, key string) (*KeyTail, error) {
	vals, err := redis.Values(s.enqueueKeyCall(ctx, q, key, nil, nil, nil, nil, "read", "", "", nil))
	if err != nil || len(vals) == 0 {
		return nil, err
	}
	if len(vals) != 3 {
		return nil, fmt.Errorf("rdb: key tail: reply of %d values", len(vals))
	}
	t := &KeyTail{}
	t.ID, _ = redis.String(vals[0], nil)
	t.Payload, _ = redis.Bytes(vals[1], nil)
	t.Version, _ = redis.String(vals[2], nil)
	return t, nil
}

// KeyMergeInto replaces the payload of tail (read by ReadKeyTail; nil: the
// key had no waiting tail) by merged, keeping its score, attempts and due
// time, when tail is still the key's waiting tail at the same version; with
// a nil tail it enqueues task id with payload merged as EnqueueKey would,
// when the key still has no waiting tail. ErrTailChanged: nothing written.
func (s *Store) KeyMergeInto(ctx context.Context, q QueueKeys, key string, tail *KeyTail, id string, merged []byte,
	score string, a *EnqueueArgs) (KeyEnqueued, error) {
	tid, ver := "", ""
	if tail != nil {
		tid, ver = tail.ID, tail.Version
	}
	out, err := keyEnqueued(s.enqueueKeyCall(ctx, q, key, []string{id}, [][]byte{merged}, []string{score}, a, "into", tid, ver, nil))
	err, replica := splitReplica(err)
	if err != nil {
		return KeyEnqueued{}, err
	}
	if len(out) != 1 {
		return KeyEnqueued{}, fmt.Errorf("rdb: key merge: %d results", len(out))
	}
	return out[0], replica
}

// KeyState is one key of an ordered queue as the Inspector shows it.
type KeyState struct {
	Key string
	// Head is the id of the key's head task: running, waiting its turn in
	// the queue, scheduled (a retry) or dead (the key is blocked).
	Head      string
	HeadState string // a State* constant, "" when its data is gone
	// Behind counts the tasks waiting behind the head.
	Behind int
}

// Blocked reports whether the key waits for an operator: its head is dead.
func (k KeyState) Blocked() bool { return k.HeadState == StateDead }

// Keys returns one page of the keys of q that have tasks (HSCAN from
// cursor; next is 0 after the last page) and their states.
func (s *Store) Keys(ctx context.Context, q QueueKeys, cursor uint64, count int) ([]KeyState, uint64, error) {
	kv, next, err := s.hscanPage(ctx, q.Ref.Tag, q.KeyHeads, cursor, count)
	if err != nil {
		return nil, 0, err
	}
	out := make([]KeyState, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, KeyState{Key: kv[i], Head: kv[i+1]})
	}
	return out, next, s.fillKeys(ctx, q, out)
}

// fillKeys reads each key's head state and count behind, in one round trip.
func (s *Store) fillKeys(ctx context.Context, q QueueKeys, ks []KeyState) error {
	cmds := make([]command, 0, 2*len(ks))
	for _, k := range ks {
		cmds = append(cmds, cmdOf("HGET", q.Task(k.Head), FieldState), cmdOf("LLEN", q.KeyListPrefix+k.Key))
	}
	rs, err := s.pipeline(ctx, q.Ref.Tag, cmds)
	if err != nil {
		return err
	}
	for i := range ks {
		st, err := redis.String(rs[2*i], nil)
		switch {
		case err == redis.ErrNil:
		case err != nil:
			st = "corrupt"
		case st == "":
			st = StateQueued
		}
		ks[i].HeadState = st
		ks[i].Behind, _ = redis.Int(rs[2*i+1], nil)
	}
	return nil
}

// Key returns the state of key on q, or nil when it has no task.
func (s *Store) Key(ctx context.Context, q QueueKeys, key string) (*KeyState, error) {
	head, err := redis.String(s.cmd(ctx, q.Ref.Tag, "HGET", q.KeyHeads, key))
	if err == redis.ErrNil {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ks := []KeyState{{Key: key, Head: head}}
	if err := s.fillKeys(ctx, q, ks); err != nil {
		return nil, err
	}
	return &ks[0], nil
}

// KeyCount returns how many keys of q have tasks.
func (s *Store) KeyCount(ctx context.Context, q QueueKeys) (int, error) {
	return redis.Int(s.cmd(ctx, q.Ref.Tag, "HLEN", q.KeyHeads))
}

// KeyBehind returns the ids waiting behind key's head, in order, from
// offset (at most limit).
func (s *Store) KeyBehind(ctx context.Context, q QueueKeys, key string, offset, limit int) ([]string, error) {
	if limit <= 0 {
		return nil, nil
	}
	ids, err := redis.Strings(s.cmd(ctx, q.Ref.Tag, "LRANGE", q.KeyListPrefix+key, offset, offset+limit-1))
	for i, id := range ids {
		ids[i], _, _ = strings.Cut(id, "@") // "<id>@<due ms>": enqueued for later
	}
	return ids, err
}
