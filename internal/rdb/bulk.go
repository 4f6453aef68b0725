package rdb

import (
	"context"
	"fmt"

	"github.com/gomodule/redigo/redis"
)

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
