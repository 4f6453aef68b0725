package worqr_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// refusingConn answers the next armed script calls that match with a Redis
// error reply, without sending them (an OOM at maxmemory, a BUSY script):
// nothing was applied.
type refusingConn struct {
	redis.Conn
	armed *atomic.Int32
	match func(args []any) bool
}

func (c *refusingConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	if (cmd == "EVALSHA" || cmd == "EVAL" || cmd == "FCALL") && c.match(args) && c.armed.Add(-1) >= 0 {
		return nil, redis.Error("OOM command not allowed when used memory > 'maxmemory'.")
	}
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

func (c *refusingConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	return c.DoContext(context.Background(), cmd, args...)
}

func (c *refusingConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

func (c *refusingConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

// A take that finds a task past its deadline ends it as expired without
// handing it to the remote. When that end failed (here a Redis error reply;
// a connection error once the caller hung up does the same), nothing ever
// ended it again: the taking stayed in the session as held and never
// handed out, known to every release (so never put back), given back only
// by a beat with check_running (which the gateway's sample worker does not
// send). The task stayed active, out of every worker's reach, for as long
// as the remote kept its session alive, and counted against MaxHeld and
// against Stop's drain.
func TestRemoteNotRunEndThatFailedIsRetried(t *testing.T) {
	ctx := context.Background()
	var armed atomic.Int32
	pool := &redis.Pool{MaxIdle: 8, DialContext: func(ctx context.Context) (redis.Conn, error) {
		c, err := redis.DialURLContext(ctx, srv.URL)
		if err != nil {
			return nil, err
		}
		return &refusingConn{Conn: c, armed: &armed, match: hasArg("expire")}, nil
	}}
	defer pool.Close()
	ns := redistest.Namespace()
	cfg := worqr.Config{Namespace: ns, DisableEvents: true}
	r, err := worqr.NewRemote(pool, &worqr.RemoteConfig{Config: cfg, Queues: map[string]worqr.QueueConfig{"q": {Retention: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_ = r.Stop(sctx)
	}()
	c, _ := worqr.NewClient(pool, &cfg)
	insp, _ := worqr.NewInspector(pool, &cfg)
	late, err := c.Enqueue(ctx, "q", []byte("late"), &worqr.EnqueueOpts{Deadline: time.Now().Add(-time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Open(ctx, worqr.OpenOpts{Queues: []string{"q"}})
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(1)
	if ks, err := s.Take(ctx, worqr.TakeRequest{Queue: "q", Max: 1}); err != nil || len(ks) != 0 {
		t.Fatalf("take = %v, %v; want nothing (the only task is past its deadline)", ks, err)
	}
	if armed.Load() > 0 {
		t.Fatal("the expire end was not refused: the test tested nothing")
	}
	// The remote goes on as the sample worker does: beats, takes.
	if _, err := s.Beat(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if ks, err := s.Take(ctx, worqr.TakeRequest{Queue: "q", Max: 1}); err != nil || len(ks) != 0 {
		t.Fatalf("second take = %v, %v; want nothing", ks, err)
	}
	if _, err := s.Beat(ctx, nil); err != nil {
		t.Fatal(err)
	}
	info, err := insp.Task(ctx, "", late)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != worqr.StateExpired {
		t.Fatalf("task past its deadline is %s (worker %s), want expired: its failed end was never tried again", info.State, info.WorkerID)
	}
}
