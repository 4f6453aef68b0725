package rdb

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/gomodule/redigo/redis"
)

// ErrIDInUse is returned by Register when the worker id's keepalive exists.
var ErrIDInUse = fmt.Errorf("worqr: worker id already in use")

// Register creates worker w's keepalive with the given TTL, lists w among the
// workers, describes it (host, process id) and records the queues it serves,
// atomically. It fails with ErrIDInUse if the id's key still exists. at is
// the Redis time (unix ms) read before the keepalive was set: it lives at
// least until at + ttlMillis.
func (s *Store) Register(ctx context.Context, w string, ttlMillis int64, host string, pid int, queues []QueueRef) (at int64, err error) {
	k := s.keys
	args := make([]any, 0, 8+len(queues))
	args = append(args, k.Keepalive(w), k.Workers(), k.KnownQueues(), k.WorkerInfo(w), ttlMillis, w, host, pid)
	for _, q := range queues {
		args = append(args, q.Member())
	}
	at, err = redis.Int64(s.eval(ctx, RegistryTag, registerScript, args...))
	if err != nil {
		return 0, err
	}
	if at == 0 {
		return 0, fmt.Errorf("register %s: %w", w, ErrIDInUse)
	}
	return at, nil
}

// Beat renews worker w's keepalive for ttlMillis. It reports false when the
// key was already gone: w is dead to the cluster and must not renew it. at is
// the Redis time (unix ms) read just before the renewal, in the same round
// trip: the keepalive lives at least until at + ttlMillis.
func (s *Store) Beat(ctx context.Context, w string, ttlMillis int64) (alive bool, at int64, err error) {
	rs, err := s.pipeline(ctx, RegistryTag, []command{
		cmdOf("TIME"),
		cmdOf("SET", s.keys.Keepalive(w), "RUN", "PX", ttlMillis, "XX"),
	})
	if err != nil {
		return false, 0, err
	}
	if e, ok := rs[1].(redis.Error); ok {
		return false, 0, e
	}
	at, err = timeMillis(rs[0], nil)
	if err != nil {
		return false, 0, err
	}
	return rs[1] != nil, at, nil
}

// Deregister deletes worker w's keepalive and description and removes it
// from the workers, in one transaction.
func (s *Store) Deregister(ctx context.Context, w string) error {
	rs, err := s.pipeline(ctx, RegistryTag, []command{
		cmdOf("MULTI"),
		cmdOf("DEL", s.keys.Keepalive(w), s.keys.WorkerInfo(w)),
		cmdOf("SREM", s.keys.Workers(), w),
		cmdOf("EXEC"),
	})
	if err != nil {
		return err
	}
	for _, r := range rs {
		if e, ok := r.(redis.Error); ok {
			return e
		}
	}
	return nil
}

// Workers returns the registered worker ids, alive or not yet reaped.
func (s *Store) Workers(ctx context.Context) ([]string, error) {
	return redis.Strings(s.cmd(ctx, RegistryTag, "SMEMBERS", s.keys.Workers()))
}

// Alive reports for each id whether its keepalive key exists.
func (s *Store) Alive(ctx context.Context, ids []string) ([]bool, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = s.keys.Keepalive(id)
	}
	vals, err := redis.Values(s.cmd(ctx, RegistryTag, "MGET", args...))
	if err != nil {
		return nil, err
	}
	if len(vals) != len(ids) {
		return nil, fmt.Errorf("rdb: MGET returned %d values for %d keys", len(vals), len(ids))
	}
	out := make([]bool, len(ids))
	for i, v := range vals {
		out[i] = v != nil
	}
	return out, nil
}

// Forget removes ids from the workers and deletes their descriptions (their
// keepalives are gone).
func (s *Store) Forget(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	srem := make([]any, 0, len(ids)+1)
	srem = append(srem, s.keys.Workers())
	del := make([]any, 0, len(ids))
	for _, id := range ids {
		srem = append(srem, id)
		del = append(del, s.keys.WorkerInfo(id))
	}
	rs, err := s.pipeline(ctx, RegistryTag, []command{cmdOf("SREM", srem...), cmdOf("DEL", del...)})
	if err != nil {
		return err
	}
	for _, r := range rs {
		if e, ok := r.(redis.Error); ok {
			return e
		}
	}
	return nil
}

// KnownQueues returns every queue any worker of the namespace ever served.
//
// It reads the set with SSCAN, about 1,000 at a time, so that no command
// grows with the number of queues (the reaper reads it every pass). A
// queue known for the whole read is listed once.
func (s *Store) KnownQueues(ctx context.Context) ([]QueueRef, error) {
	seen := map[string]bool{}
	var out []QueueRef
	for cursor := "0"; ; {
		r, err := redis.Values(s.cmd(ctx, RegistryTag, "SSCAN", s.keys.KnownQueues(), cursor, "COUNT", 1000))
		if err != nil {
			return nil, err
		}
		var members []string
		if cursor, members, err = scanReply(r); err != nil {
			return nil, err
		}
		for _, m := range members {
			if !seen[m] {
				seen[m] = true
				out = append(out, ParseMember(m))
			}
		}
		if cursor == "0" {
			return out, nil
		}
	}
}

// IsKnownQueue reports whether q is one of KnownQueues (one SISMEMBER).
func (s *Store) IsKnownQueue(ctx context.Context, q QueueRef) (bool, error) {
	return redis.Bool(s.cmd(ctx, RegistryTag, "SISMEMBER", s.keys.KnownQueues(), q.Member()))
}

// AddKnownQueues records queues as known (a client that enqueued to them).
func (s *Store) AddKnownQueues(ctx context.Context, qs []QueueRef) error {
	if len(qs) == 0 {
		return nil
	}
	args := make([]any, 0, 1+len(qs))
	args = append(args, s.keys.KnownQueues())
	for _, q := range qs {
		args = append(args, q.Member())
	}
	_, err := s.cmd(ctx, RegistryTag, "SADD", args...)
	return err
}

// AcquireLease makes holder the reaper for ttlMillis (at least 1) if nobody
// holds the lease, and reports whether it got it.
func (s *Store) AcquireLease(ctx context.Context, holder string, ttlMillis int64) (bool, error) {
	reply, err := s.cmd(ctx, RegistryTag, "SET", s.keys.ReaperLease(), holder, "PX", max(ttlMillis, 1), "NX")
	if err != nil {
		return false, err
	}
	return reply != nil, nil
}

// WorkerRecord describes one registered worker.
type WorkerRecord struct {
	ID     string
	Host   string
	PID    int
	Start  int64 // unix ms, Redis time
	TTLMs  int64
	Queues []QueueRef
	// KeepaliveLeftMs is the keepalive's remaining life; < 0 when it is
	// gone (the worker is dead and not yet reaped).
	KeepaliveLeftMs int64
}

// WorkerRecords describes the given workers.
func (s *Store) WorkerRecords(ctx context.Context, ids []string) ([]WorkerRecord, error) {
	cmds := make([]command, 0, 2*len(ids))
	for _, id := range ids {
		cmds = append(cmds, cmdOf("HGETALL", s.keys.WorkerInfo(id)), cmdOf("PTTL", s.keys.Keepalive(id)))
	}
	rs, err := s.pipeline(ctx, RegistryTag, cmds)
	if err != nil {
		return nil, err
	}
	out := make([]WorkerRecord, len(ids))
	for i, id := range ids {
		m, err := redis.StringMap(rs[2*i], nil)
		if err != nil {
			return nil, err
		}
		r := WorkerRecord{ID: id, Host: m["host"], Start: atoi64(m["start"]), TTLMs: atoi64(m["ttl"])}
		r.PID, _ = strconv.Atoi(m["pid"])
		if q := m["queues"]; q != "" {
			for _, name := range strings.Split(q, ",") {
				r.Queues = append(r.Queues, ParseMember(name))
			}
		}
		r.KeepaliveLeftMs, _ = redis.Int64(rs[2*i+1], nil)
		out[i] = r
	}
	return out, nil
}

// WorkerQueues returns for each worker the queues its registration recorded.
// known[i] is false when ids[i] has no description (already forgotten, or
// written by hand): only a scan of every known queue finds its takings.
func (s *Store) WorkerQueues(ctx context.Context, ids []string) (queues [][]QueueRef, known []bool, err error) {
	cmds := make([]command, len(ids))
	for i, id := range ids {
		cmds[i] = cmdOf("HGET", s.keys.WorkerInfo(id), "queues")
	}
	rs, err := s.pipeline(ctx, RegistryTag, cmds)
	if err != nil {
		return nil, nil, err
	}
	queues = make([][]QueueRef, len(ids))
	known = make([]bool, len(ids))
	for i, r := range rs {
		if r == nil {
			continue
		}
		list, err := redis.String(r, nil)
		if err != nil {
			return nil, nil, err
		}
		known[i] = true
		if list == "" {
			continue
		}
		for _, m := range strings.Split(list, ",") {
			queues[i] = append(queues[i], ParseMember(m))
		}
	}
	return queues, known, nil
}

// HeldCounts returns how many takings each worker holds in queue q.
func (s *Store) HeldCounts(ctx context.Context, q QueueKeys, workers []string) ([]int, error) {
	cmds := make([]command, len(workers))
	for i, w := range workers {
		cmds[i] = cmdOf("HLEN", q.WorkerQueue(w))
	}
	rs, err := s.pipeline(ctx, q.Ref.Tag, cmds)
	if err != nil {
		return nil, err
	}
	out := make([]int, len(workers))
	for i := range workers {
		out[i], _ = redis.Int(rs[i], nil)
	}
	return out, nil
}
