package rdb

import (
	"context"

	"github.com/gomodule/redigo/redis"
)

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
