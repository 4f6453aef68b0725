package rdb

import (
	"context"

	"github.com/gomodule/redigo/redis"
)

// Progress records report on task id while worker w owns its taking pid. It
// reports false, having changed nothing, when w no longer owns it.
func (s *Store) Progress(ctx context.Context, q QueueKeys, w, pid, id, report string) (bool, error) {
	n, err := redis.Int(s.eval(ctx, q.Ref.Tag, progressScript, q.WorkerQueue(w), q.Task(id), pid, report, id))
	return n == 1, err
}
