package rdb

import (
	"context"

	"github.com/gomodule/redigo/redis"
)

// MarkWaited marks task id of queue q as waited for by a Client: when a
// worker's end (the end script) ends it done, cancelled, expired or dead,
// it publishes "<state> <id>" on q.EndedChannel in the same call. It
// reports false, having changed nothing, when the task has no hash (see
// wait_mark.lua). One script call; the mark stays on the task's hash for
// its life (a retry keeps it).
func (s *Store) MarkWaited(ctx context.Context, q QueueKeys, id string) (bool, error) {
	n, err := redis.Int(s.eval(ctx, q.Ref.Tag, waitMarkScript, q.Task(id)))
	return n == 1, err
}

// EndedQueue returns the queue whose EndedChannel is channel (see
// Keys.EndedQueue).
func (s *Store) EndedQueue(channel string) (QueueRef, bool) { return s.keys.EndedQueue(channel) }
