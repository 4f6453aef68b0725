package worqr_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

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
