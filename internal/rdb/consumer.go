package rdb

import (
	"context"
	"fmt"
	"strconv"

	"github.com/gomodule/redigo/redis"
)

// The indexed consumer's scripts (package consumer).
var (
	consumerDispatchScript = load("consumer_dispatch", 3)
	consumerDoneScript     = load("consumer_done", 3)
)

// MaxConsumerIndex is the largest index a consumer works: the scripts count
// in Lua numbers (doubles), exact below 2^53.
const MaxConsumerIndex = 1<<53 - 1

// ConsumerStep bounds the work of one consumer script call: at most this
// many indexes dispatched and this many finished indexes passed over.
const ConsumerStep = 1000

// ConsumerLimits are what a dispatch may do.
type ConsumerLimits struct {
	// First is the index the consumer starts at when Redis holds no
	// progress for it.
	First uint64
	// MaxProcessing bounds the indexes dispatched and not done.
	MaxProcessing int
	// MaxSearchAhead: an index i is dispatched only when i < processed +
	// MaxSearchAhead.
	MaxSearchAhead int
}

// ConsumerProgress is a consumer's progress as Redis holds it.
type ConsumerProgress struct {
	// Processed: every index below it is done; it is the lowest index not
	// known to be done.
	Processed uint64
	// Next is the next index to dispatch: the indexes from Processed to
	// Next-1 are dispatched, and Finished of them are done.
	Next     uint64
	Finished int
}

// InFlight is the number of dispatched indexes not done.
func (p ConsumerProgress) InFlight() int {
	return int(p.Next-p.Processed) - p.Finished
}

// Dispatch advances consumer c's processed index over its finished indexes
// and dispatches the indexes up to head (hasHead false: no job exists yet)
// within the limits, one script call per ConsumerStep of work. It returns
// the progress after the last call and how many tasks it pushed (a task put
// back for the processed index included).
func (s *Store) Dispatch(ctx context.Context, c ConsumerKeys, l ConsumerLimits, head uint64, hasHead bool) (ConsumerProgress, int, error) {
	h := ""
	if hasHead {
		h = strconv.FormatUint(head, 10)
	}
	sent := 0
	for {
		vals, err := redis.Int64s(s.eval(ctx, c.Queue.Ref.Tag, consumerDispatchScript,
			c.State, c.Done, c.Queue.Waiting,
			strconv.FormatUint(l.First, 10), h, l.MaxProcessing, l.MaxSearchAhead, ConsumerStep,
			c.Queue.TaskPrefix, c.Queue.WakeChannel))
		if err != nil {
			return ConsumerProgress{}, sent, err
		}
		if len(vals) != 5 {
			return ConsumerProgress{}, sent, fmt.Errorf("rdb: consumer dispatch: reply of %d values, want 5", len(vals))
		}
		sent += int(vals[2])
		p := ConsumerProgress{Processed: uint64(vals[0]), Next: uint64(vals[1]), Finished: int(vals[3])}
		if vals[4] == 0 {
			return p, sent, nil
		}
		if err := ctx.Err(); err != nil {
			return p, sent, err
		}
	}
}

// MarkResult says what MarkDone did.
type MarkResult int

// MarkDone's results; the values are the script's codes (lua/include/consumer.lua).
const (
	MarkLost     MarkResult = 0 // the caller does not own the taking: nothing changed
	MarkRecorded MarkResult = 1 // the index is now done
	MarkAlready  MarkResult = 2 // it was done before (a run again, or a retried call)
	MarkUnknown  MarkResult = 3 // never dispatched (the progress was rewound): nothing changed
)

// MarkDone records that the job at index i, run by worker w under taking
// pid of task id, is done, while w owns that taking, and advances the
// processed index (more than ConsumerStep finished indexes in a row are
// passed over by the following calls, or by Dispatch). It returns the
// processed index after the call. While the store waits for replicas
// (SetReplicas), each call waits as an end does: a *ReplicaError comes
// back with the results when too few replicas acknowledged (the record
// is applied on the primary, and lost if it fails before a replica has it).
func (s *Store) MarkDone(ctx context.Context, c ConsumerKeys, first uint64, w, pid, id string, i uint64) (MarkResult, uint64, error) {
	res, processed := MarkResult(-1), uint64(0)
	var replica error
	for {
		r, err := s.evalAck(ctx, c.Queue.Ref.Tag, consumerDoneScript,
			c.State, c.Done, c.Queue.WorkerQueue(w),
			pid, id, strconv.FormatUint(i, 10), strconv.FormatUint(first, 10), ConsumerStep)
		err, rerr := splitReplica(err)
		if err != nil {
			return 0, 0, err
		}
		if rerr != nil {
			replica = rerr
		}
		vals, err := redis.Int64s(r, nil)
		if err != nil {
			return 0, 0, err
		}
		if len(vals) != 3 {
			return 0, 0, fmt.Errorf("rdb: consumer done: reply of %d values, want 3", len(vals))
		}
		if res < 0 {
			res = MarkResult(vals[0]) // the first call's answer
		}
		if MarkResult(vals[0]) == MarkLost {
			// The first call: nothing changed. A later one: the
			// record stands, and the next record or dispatch passes
			// over the rest.
			return res, processed, replica
		}
		processed = uint64(vals[1])
		if vals[2] == 0 || res == MarkUnknown {
			return res, processed, replica
		}
		// Passing over the rest is idempotent: a taking still owned
		// (the same call again finds the index done) keeps advancing.
	}
}

// IndexDone reports whether the job at index i is known to be done: in the
// done set or below the processed index (first when none is stored). The
// two reads are a pipeline, not one atomic step, so their order matters:
// an index leaves the done set only in the call that moves the processed
// index past it, and that index never goes back. Read in this order, a
// done index is found in one place or the other whatever runs between the
// reads; in the other order, that call run between them would hide it from
// both (a job run again after a crash would be processed twice).
func (s *Store) IndexDone(ctx context.Context, c ConsumerKeys, first, i uint64) (bool, error) {
	replies, err := s.pipeline(ctx, c.Queue.Ref.Tag, []command{
		cmdOf("SISMEMBER", c.Done, strconv.FormatUint(i, 10)),
		cmdOf("HGET", c.State, "processed"),
	})
	if err != nil {
		return false, err
	}
	processed := first
	if replies[1] != nil {
		v, err := redis.Uint64(replies[1], nil)
		if err != nil {
			return false, err
		}
		processed = v
	}
	in, err := redis.Bool(replies[0], nil)
	if err != nil {
		return false, err
	}
	return i < processed || in, nil
}

// ReadProgress returns consumer c's progress (first when none is stored).
// Its two reads are one transaction (MULTI/EXEC): a record run between
// them moves the processed index over finished indexes and takes them out
// of the done set, and the old index read with the new set would count
// those jobs in flight again (past MaxProcessing; read the other way
// round, a count below zero). No order of two separate reads is right.
func (s *Store) ReadProgress(ctx context.Context, c ConsumerKeys, first uint64) (ConsumerProgress, error) {
	rs, err := s.pipeline(ctx, c.Queue.Ref.Tag, []command{
		cmdOf("MULTI"),
		cmdOf("HMGET", c.State, "processed", "next"),
		cmdOf("SCARD", c.Done),
		cmdOf("EXEC"),
	})
	if err != nil {
		return ConsumerProgress{}, err
	}
	replies, err := redis.Values(rs[len(rs)-1], nil)
	if err != nil {
		return ConsumerProgress{}, fmt.Errorf("rdb: consumer progress: %w", err)
	}
	if len(replies) != 2 {
		return ConsumerProgress{}, fmt.Errorf("rdb: consumer progress: %d replies, want 2", len(replies))
	}
	vals, err := redis.Values(replies[0], nil)
	if err != nil {
		return ConsumerProgress{}, err
	}
	p := ConsumerProgress{Processed: first}
	if vals[0] != nil {
		if p.Processed, err = redis.Uint64(vals[0], nil); err != nil {
			return ConsumerProgress{}, err
		}
	}
	p.Next = p.Processed
	if vals[1] != nil {
		if p.Next, err = redis.Uint64(vals[1], nil); err != nil {
			return ConsumerProgress{}, err
		}
	}
	p.Next = max(p.Next, p.Processed)
	if p.Finished, err = redis.Int(replies[1], nil); err != nil {
		return ConsumerProgress{}, err
	}
	return p, nil
}
