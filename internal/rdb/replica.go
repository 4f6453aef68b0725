package rdb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// ErrNotReplicated matches every *ReplicaError with errors.Is.
var ErrNotReplicated = errors.New("worqr: write not acknowledged by enough replicas")

// ReplicaError is returned by an enqueue or an end made while the store
// waits for replicas (SetReplicas) when fewer than Want replicas
// acknowledged the write within Timeout. The write was applied on the
// primary and is not undone: it is lost only if the primary fails before
// a replica gets it. The call's own results are returned beside it.
type ReplicaError struct {
	Want, Got int
	Timeout   time.Duration
}

func (e *ReplicaError) Error() string {
	return fmt.Sprintf("worqr: applied on the primary but acknowledged by %d of %d replicas within %s "+
		"(lost if the primary fails before a replica gets it)", e.Got, e.Want, e.Timeout)
}

// Is makes errors.Is(err, ErrNotReplicated) true.
func (e *ReplicaError) Is(target error) bool { return target == ErrNotReplicated }

// SetReplicas makes the store's enqueues (Enqueue, EnqueueBatch, EnqueueKey,
// FlowStart), takes and ends (End, EndTake) wait, with WAIT on the connection
// that made the write, until n replicas acknowledged it or timeout passed.
// n 0 (the default) waits for none and sends no WAIT. Call it before the
// store is used.
func (s *Store) SetReplicas(n int, timeout time.Duration) {
	s.replicas, s.replicaTimeout = n, timeout
}

// waitArgs are WAIT's arguments.
//
// WAIT blocks for at most ReplicaTimeout, and never past most of what is
// left of ctx: a WAIT cut off by the caller's deadline would lose the reply
// of the write it follows (the write applied, the caller told it failed);
// one that returns in time reports too few replicas, a *ReplicaError, with
// the write's reply.
func (s *Store) waitArgs(ctx context.Context) []any {
	ms := s.replicaTimeout.Milliseconds()
	if dl, ok := ctx.Deadline(); ok {
		ms = min(ms, time.Until(dl).Milliseconds()*3/4)
	}
	return []any{s.replicas, max(ms, 1)}
}

// replicaErr turns WAIT's reply into nil or a *ReplicaError.
func (s *Store) replicaErr(r any, err error) error {
	n, err := redis.Int(r, err)
	if err != nil {
		return fmt.Errorf("rdb: wait for replicas: %w", err)
	}
	if n < s.replicas {
		return &ReplicaError{Want: s.replicas, Got: n, Timeout: s.replicaTimeout}
	}
	return nil
}

// evalAck is eval for a write that is acknowledged only once s.replicas
// replicas have it: the script and WAIT travel together on one connection
// (one round trip). When the script did not run (not loaded on that
// server, or the node does not serve the slot), it runs the usual way and
// WAIT follows. Without replicas to wait for it is eval.
//
// A *ReplicaError comes back with the script's reply (it ran); an error of
// the script itself wins over it.
func (s *Store) evalAck(ctx context.Context, tag string, sc *script, keysAndArgs ...any) (any, error) {
	if s.replicas <= 0 {
		return s.eval(ctx, tag, sc, keysAndArgs...)
	}
	c, err := s.conn(ctx, tag)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	libs() // names the functions
	name, args := sc.command(s.mode.Load(), s.tagged, keysAndArgs)
	replies, err := pipelineOn(ctx, c, []command{{name, args}, {"WAIT", s.waitArgs(ctx)}})
	if err != nil {
		return nil, err
	}
	r := replies[0]
	if e, ok := r.(redis.Error); ok {
		if !notRun(e) {
			return nil, e
		}
		r, err := s.run(ctx, c, sc, keysAndArgs...)
		if err != nil {
			return r, err
		}
		return r, s.replicaErr(do(ctx, c, "WAIT", s.waitArgs(ctx)...))
	}
	if e, ok := replies[1].(redis.Error); ok {
		return r, s.replicaErr(nil, e)
	}
	return r, s.replicaErr(replies[1], nil)
}

// notRun reports an error reply after which a script did not run at all:
// the library or script is missing, the server cannot run functions, or a
// cluster node redirected the call.
func notRun(e redis.Error) bool {
	msg := string(e)
	for _, p := range []string{"NOSCRIPT ", "ERR Function not found", "MOVED ", "ASK ", "TRYAGAIN", "CLUSTERDOWN",
		"READONLY ", "LOADING ", "MASTERDOWN "} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return functionsDenied(e)
}

// splitReplica separates a *ReplicaError (the call was applied) from the
// other errors (it failed, or may not have been applied).
func splitReplica(err error) (other, replica error) {
	var re *ReplicaError
	if errors.As(err, &re) {
		return nil, err
	}
	return err, nil
}
