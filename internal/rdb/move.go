package rdb

import (
	"context"

	"github.com/gomodule/redigo/redis"
)

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
