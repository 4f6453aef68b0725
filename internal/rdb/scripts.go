package rdb

import (
	"context"
	"embed"
	"errors"
	"fmt"

	"github.com/gomodule/redigo/redis"
)

//go:embed lua/*.lua
var luaFiles embed.FS

func load(name string, keyCount int) *redis.Script {
	src, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic("rdb: missing embedded script " + name) // a build defect, caught by every test
	}
	return redis.NewScript(keyCount, string(src))
}

// The scripts are immutable once built; redigo's Script runs EVALSHA and falls
// back to EVAL on NOSCRIPT.
var (
	enqueueScript  = load("enqueue", -1)
	takeScript     = load("take", 4)
	finishScript   = load("finish", 3)
	givebackScript = load("giveback", 4)
	requeueScript  = load("requeue", -1)
	cancelScript   = load("cancel", 2)
	registerScript = load("register", 3)
)

// ErrLost is returned by Finish and GiveBack when the caller no longer owns the
// taking: nothing was changed. Package worqr exports it as ErrTaskLost.
var ErrLost = errors.New("worqr: task lost")

// Conn is the part of a redigo connection the wrappers use.
type Conn = redis.Conn

// Enqueue writes the tasks and pushes their ids at the back of the queue in one
// script call, then publishes one wake-up.
func Enqueue(ctx context.Context, c Conn, q QueueKeys, ids []string, payloads [][]byte) error {
	if len(ids) != len(payloads) {
		return fmt.Errorf("rdb: enqueue: %d ids for %d payloads", len(ids), len(payloads))
	}
	args := make([]any, 0, 2+3*len(ids))
	args = append(args, 1+len(ids), q.Waiting)
	for _, id := range ids {
		args = append(args, q.Task(id))
	}
	args = append(args, q.WakeChannel)
	for _, id := range ids {
		args = append(args, id)
	}
	for _, p := range payloads {
		args = append(args, p)
	}
	_, err := enqueueScript.DoContext(ctx, c, args...)
	return err
}

// Taken is one task handed to a worker by Take.
type Taken struct {
	ID      string
	PID     string // "" when the task hash was missing: the id was dropped
	Payload []byte
	Attempt int
}

// Take pops up to max ids from the front of the queue for worker w.
func Take(ctx context.Context, c Conn, q QueueKeys, w string, max int) ([]Taken, error) {
	vals, err := redis.Values(takeScript.DoContext(ctx, c,
		q.Waiting, q.WorkerQueue(w), q.Holders, q.Seq,
		w, max, q.TaskPrefix, q.ProcPrefix))
	if err != nil {
		return nil, err
	}
	if len(vals)%4 != 0 {
		return nil, fmt.Errorf("rdb: take: reply of %d values", len(vals))
	}
	out := make([]Taken, 0, len(vals)/4)
	for i := 0; i < len(vals); i += 4 {
		id, _ := redis.String(vals[i], nil)
		pid, _ := redis.String(vals[i+1], nil)
		payload, _ := redis.Bytes(vals[i+2], nil)
		attempt, _ := redis.Int(vals[i+3], nil)
		out = append(out, Taken{ID: id, PID: pid, Payload: payload, Attempt: attempt})
	}
	return out, nil
}

// Outcome is how a taking ended, as recorded in Redis.
type Outcome int

// The outcomes scripts return.
const (
	OutcomeLost      Outcome = 0
	OutcomeDone      Outcome = 1
	OutcomeCancelled Outcome = 2
	OutcomeRequeued  Outcome = 3
)

func (o Outcome) String() string {
	switch o {
	case OutcomeDone:
		return "done"
	case OutcomeCancelled:
		return "cancelled"
	case OutcomeRequeued:
		return "requeued"
	default:
		return "lost"
	}
}

// Finish records that worker w's taking pid of task id is done. It returns
// ErrLost, having changed nothing, when w no longer owns pid.
func Finish(ctx context.Context, c Conn, q QueueKeys, w, pid, id string) (Outcome, error) {
	code, err := redis.Int(finishScript.DoContext(ctx, c,
		q.WorkerQueue(w), q.Proc(pid), q.Task(id), pid))
	if err != nil {
		return OutcomeLost, err
	}
	switch code {
	case 0:
		return OutcomeLost, ErrLost
	case 2:
		return OutcomeCancelled, nil
	}
	return OutcomeDone, nil
}

// GiveBack puts worker w's taking pid of task id back at the front of its queue.
// It returns ErrLost, having changed nothing, when w no longer owns pid, and
// OutcomeCancelled when a cancel was asked meanwhile (the task is dropped).
func GiveBack(ctx context.Context, c Conn, q QueueKeys, w, pid, id string) (Outcome, error) {
	code, err := redis.Int(givebackScript.DoContext(ctx, c,
		q.WorkerQueue(w), q.Proc(pid), q.Task(id), q.Waiting, pid, id, q.WakeChannel))
	if err != nil {
		return OutcomeLost, err
	}
	switch code {
	case 0:
		return OutcomeLost, ErrLost
	case 2:
		return OutcomeCancelled, nil
	}
	return OutcomeRequeued, nil
}

// Requeue puts every taking the given workers hold in the queue back at its
// front, oldest first, and forgets their holdings there (the fail-worker
// step). crashed says whether the workers died (each task counts a crash) or
// stopped on purpose. It is idempotent.
func Requeue(ctx context.Context, c Conn, q QueueKeys, workers []string, crashed bool) (requeued, cancelled int, err error) {
	if len(workers) == 0 {
		return 0, 0, nil
	}
	args := make([]any, 0, 7+2*len(workers))
	args = append(args, 2+len(workers), q.Waiting, q.Holders)
	for _, w := range workers {
		args = append(args, q.WorkerQueue(w))
	}
	flag := "0"
	if crashed {
		flag = "1"
	}
	args = append(args, q.WakeChannel, q.ProcPrefix, q.TaskPrefix, flag)
	for _, w := range workers {
		args = append(args, w)
	}
	vals, err := redis.Ints(requeueScript.DoContext(ctx, c, args...))
	if err != nil {
		return 0, 0, err
	}
	if len(vals) != 2 {
		return 0, 0, fmt.Errorf("rdb: requeue: reply of %d values", len(vals))
	}
	return vals[0], vals[1], nil
}

// CancelResult says what Cancel did.
type CancelResult int

// The results of Cancel.
const (
	CancelNoop      CancelResult = 0 // unknown, finished, or already asked
	CancelRemoved   CancelResult = 1 // was waiting: removed, no worker gets it
	CancelRequested CancelResult = 2 // running: its owner was told to stop
)

// Cancel removes a waiting task or asks the owner of a running one to stop.
func Cancel(ctx context.Context, c Conn, q QueueKeys, id string) (CancelResult, error) {
	code, err := redis.Int(cancelScript.DoContext(ctx, c, q.Waiting, q.Task(id), id, q.CancelChannel))
	return CancelResult(code), err
}

// Register creates worker w's keepalive with the given TTL, lists w among the
// workers and records the queues it serves, atomically. It fails if the id
// was ever used while its key still exists.
func Register(ctx context.Context, c Conn, k Keys, w string, ttlMillis int64, queues []QueueRef) error {
	args := make([]any, 0, 5+len(queues))
	args = append(args, k.Keepalive(w), k.Workers(), k.KnownQueues(), ttlMillis, w)
	for _, q := range queues {
		args = append(args, q.Member())
	}
	ok, err := redis.Int(registerScript.DoContext(ctx, c, args...))
	if err != nil {
		return err
	}
	if ok != 1 {
		return fmt.Errorf("worqr: register %s: id already in use", w)
	}
	return nil
}
