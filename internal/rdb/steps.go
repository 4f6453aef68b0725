package rdb

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/gomodule/redigo/redis"
)

// StepGuard chains the steps of a batch sent in steps (EnqueueBatch, and a
// keyed batch's EnqueueKeyStep): step 0 applies only where no guard is,
// step n > 0 only when the guard key says that step n-1 was, and the last
// step deletes the guard. A plain EnqueueBatch of one call (2 to 1,000
// tasks) carries one too, as step 0 and not last: it leaves the guard
// saying "0" for its TTL, so that after a lost reply the client can tell
// (StepsApplied) whether the call applied. Key is QueueKeys.StepsPrefix
// and an id of the batch. The steps travel many at once: the guard keeps
// those sent behind a step that Redis refused (an error reply: OOM, a key
// of the wrong type) from applying, so the batch's tasks in the queue are
// always its first ones.
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
// deadline, and the client that closes it after a lost reply finds it
// whenever the call applied. Unbounded, a reply lost on a silent
// connection (a partition that drops packets) is noticed only when TCP
// gives up, minutes later, after the guard expired: an applied call would
// be reported as not, and a resend would run every task twice.
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
