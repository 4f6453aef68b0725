package rdb

import (
	"bytes"
	"context"
	"strconv"

	"github.com/gomodule/redigo/redis"
)

// A hand-off is a taking recorded by an enqueue for a parked worker
// (enqueue_hand.lua) and announced on the queue's wake channel:
//
//	h\n<worker>\n<pid>\n<id>\n<max attempts>\n<timeout ms>\n<payload>
//
// The worker runs it as if its own take had returned it. Pub/sub may lose
// the message: the taking is then held in Redis by a worker that does not
// know it, which the worker finds out (Holdings, or a subscription made
// again) and puts back (ReleaseCheck). A plain wake-up carries a number.

// Handoff is one hand-off message, parsed.
type Handoff struct {
	Worker string
	Taken  Taken
	Seq    int64 // the pid as a number
}

// IsHandoff reports whether a wake channel message is a hand-off.
func IsHandoff(data []byte) bool { return len(data) > 1 && data[0] == 'h' && data[1] == '\n' }

// HandoffFor reports whether data is a hand-off to worker w, without
// parsing the rest.
func HandoffFor(data []byte, w string) bool {
	return IsHandoff(data) && len(data) > 2+len(w) && string(data[2:2+len(w)]) == w && data[2+len(w)] == '\n'
}

// ParseHandoff parses a hand-off message; ok is false for anything else.
func ParseHandoff(data []byte) (h Handoff, ok bool) {
	if !IsHandoff(data) {
		return h, false
	}
	rest := data[2:]
	var f [5][]byte
	for i := range f {
		j := bytes.IndexByte(rest, '\n')
		if j < 0 {
			return h, false
		}
		f[i], rest = rest[:j], rest[j+1:]
	}
	seq, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil || len(f[0]) == 0 || len(f[2]) == 0 {
		return h, false
	}
	h.Worker, h.Seq = string(f[0]), seq
	h.Taken = Taken{ID: string(f[2]), PID: string(f[1]), Payload: rest, Attempt: 1}
	if len(f[3]) > 0 {
		if h.Taken.MaxAttempts, err = strconv.Atoi(string(f[3])); err != nil {
			return h, false
		}
	}
	if len(f[4]) > 0 {
		if h.Taken.TimeoutMs, err = strconv.ParseInt(string(f[4]), 10, 64); err != nil {
			return h, false
		}
	}
	return h, true
}

// Unpark removes worker w from q's parked workers: nothing is handed to it
// from then on (it may still find hand-offs made before on their way).
func (s *Store) Unpark(ctx context.Context, q QueueKeys, w string) error {
	_, err := s.cmd(ctx, q.Ref.Tag, "HDEL", q.Park, w)
	return err
}

// Holdings returns the pids worker w holds in q.
func (s *Store) Holdings(ctx context.Context, q QueueKeys, w string) ([]string, error) {
	return redis.Strings(s.cmd(ctx, q.Ref.Tag, "HKEYS", q.WorkerQueue(w)))
}
