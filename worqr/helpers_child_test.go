package worqr_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/heartbeat"
	"github.com/worqr/worqr-go/internal/seam"
	"github.com/worqr/worqr-go/worqr"
)

// A test that needs a worker in another process runs this test binary
// again with WORQR_TEST_CHILD naming the role (see TestMain): the child
// serves until it is killed.

type child struct {
	cmd *exec.Cmd
}

func startChild(t *testing.T, role, ns string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "WORQR_TEST_CHILD="+role, "WORQR_TEST_NS="+ns, "WORQR_TEST_REDIS_URL="+srv.URL)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd}
	t.Cleanup(func() { c.kill(t) })
	return c
}

// kill sends SIGKILL and reaps the child (once).
func (c *child) kill(t *testing.T) {
	if c.cmd.ProcessState != nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	_ = c.cmd.Wait()
}

// runChild is the child's main: it returns only on a setup error.
func runChild(role string) int {
	pool := srv.Pool()
	ns := os.Getenv("WORQR_TEST_NS")
	switch role {
	case "limits":
		rc := newRunCounter(pool, ns)
		cfg := fastTimings(ns)
		cfg.Queues = map[string]worqr.QueueConfig{"lim": {Concurrency: 6, Limits: &worqr.Limits{Concurrency: 4},
			Handler: limitHandler(rc, "child", 0, make(chan struct{}), nil)}}
		w, err := worqr.NewWorker(pool, &cfg)
		if err != nil {
			return 2
		}
		if err := w.Start(context.Background()); err != nil {
			return 2
		}
		select {} // until killed
	case "fair":
		// A fair queue whose keys run at most 2 tasks each; its handlers
		// hold their tasks until the process is killed (see
		// TestFairKeySlotsComeBackAfterACrash).
		rc := newRunCounter(pool, ns)
		cfg := fastTimings(ns)
		cfg.Queues = map[string]worqr.QueueConfig{"fair": {Concurrency: 6,
			Keys:    worqr.KeyPolicy{Fair: true, PerKey: worqr.KeyLimits{Limits: worqr.Limits{Concurrency: 2}}},
			Handler: limitHandler(rc, "child", 0, make(chan struct{}), nil)}}
		w, err := worqr.NewWorker(pool, &cfg)
		if err != nil {
			return 2
		}
		if err := w.Start(context.Background()); err != nil {
			return 2
		}
		select {} // until killed
	case "backoffpanic":
		// A queue whose Backoff panics; its handler fails each task's
		// first attempt (see TestBackoffThatPanicsIsNoCrash).
		cfg := fastTimings(ns)
		cfg.Queues = map[string]worqr.QueueConfig{"bp": {Concurrency: 2, Retention: time.Minute,
			Backoff: func(int, error) time.Duration { panic("backoff: no delay for this error") },
			Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
				if t.Attempt == 1 {
					return errors.New("first attempt fails")
				}
				return nil
			})}}
		w, err := worqr.NewWorker(pool, &cfg)
		if err != nil {
			return 2
		}
		if err := w.Start(context.Background()); err != nil {
			return 2
		}
		select {} // until killed
	}
	return 2
}

// beatClock is a heartbeat clock that follows real time until freeze: the
// worker then stops beating, as a frozen process would, while its
// handlers and ends go on (a zombie once its keepalive expires).
type beatClock struct {
	*seam.ManualClock
	stop chan struct{}
	once sync.Once
}

func newBeatClock() *beatClock {
	c := &beatClock{ManualClock: seam.NewManualClock(time.Now()), stop: make(chan struct{})}
	go func() {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-t.C:
				c.Advance(10 * time.Millisecond)
			}
		}
	}()
	return c
}

func (c *beatClock) freeze() { c.once.Do(func() { close(c.stop) }) }

func withClock(ctx context.Context, c heartbeat.Clock) context.Context {
	return seam.WithHeartbeatClock(ctx, c)
}

// runCounter counts, in Redis, the handlers running per worker instance,
// and records the highest sum over the instances not marked as gone (a
// process killed, or frozen and no longer owning its takings).
type runCounter struct {
	pool                  *redis.Pool
	running, gone, maxKey string
}

var countStart = redis.NewScript(3, `
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
local all = redis.call('HGETALL', KEYS[1])
local s = 0
for i = 1, #all, 2 do
  if redis.call('SISMEMBER', KEYS[2], all[i]) == 0 then s = s + tonumber(all[i + 1]) end
end
if s > (tonumber(redis.call('GET', KEYS[3])) or 0) then redis.call('SET', KEYS[3], s) end
return s`)

func newRunCounter(pool *redis.Pool, ns string) *runCounter {
	return &runCounter{pool: pool, running: ns + ":test:running", gone: ns + ":test:gone", maxKey: ns + ":test:max"}
}

func (r *runCounter) start(inst string) {
	c := r.pool.Get()
	defer c.Close()
	_, _ = countStart.Do(c, r.running, r.gone, r.maxKey, inst)
}

func (r *runCounter) end(inst string) {
	c := r.pool.Get()
	defer c.Close()
	_, _ = c.Do("HINCRBY", r.running, inst, -1)
}

func (r *runCounter) int(t *testing.T, cmd string, args ...any) int {
	t.Helper()
	c := r.pool.Get()
	defer c.Close()
	n, err := redis.Int(c.Do(cmd, args...))
	if err != nil && err != redis.ErrNil {
		t.Fatal(err)
	}
	return n
}

func (r *runCounter) of(t *testing.T, inst string) int { return r.int(t, "HGET", r.running, inst) }

func (r *runCounter) max(t *testing.T) int { return r.int(t, "GET", r.maxKey) }

func (r *runCounter) markGone(t *testing.T, inst string) {
	r.int(t, "SADD", r.gone, inst)
}

func (r *runCounter) resetMax(t *testing.T) { r.int(t, "DEL", r.maxKey) }

// limitHandler counts its runs and holds each for hold, or until release
// is closed when hold is 0.
func limitHandler(rc *runCounter, inst string, hold time.Duration, release <-chan struct{}, done *atomic.Int32) worqr.Handler {
	return worqr.HandlerFunc(func(ctx context.Context, _ *worqr.Task) error {
		rc.start(inst)
		defer rc.end(inst)
		if hold > 0 {
			time.Sleep(hold)
		} else {
			<-release
		}
		if done != nil {
			done.Add(1)
		}
		return nil
	})
}
