package worqr

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
)

// internalPool is a pool on the test server (TestMain sets its URL).
func internalPool(t *testing.T) *redis.Pool {
	t.Helper()
	url := os.Getenv("WORQR_REDIS_URL")
	if url == "" {
		t.Skip("no server")
	}
	pool := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.DialURL(url) }, MaxIdle: 8}
	t.Cleanup(func() { pool.Close() })
	return pool
}

// startInternal makes and starts a worker on pool (its caller stops it).
func startInternal(t *testing.T, pool *redis.Pool, cfg *WorkerConfig) *Worker {
	t.Helper()
	w, err := NewWorker(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return w
}

// A second server switch seen while the beat that confirms the first is on
// its way (an end that takes again sees it) gets a beat of its own: the
// queue is not cleared of its need for one by the first beat.
func TestConfirmSwitchBeatsAgainAfterALaterSwitch(t *testing.T) {
	ctx := context.Background()
	w := startInternal(t, internalPool(t), &WorkerConfig{Config: Config{Namespace: redistest.Namespace()},
		PollInterval: time.Hour,
		Queues:       map[string]QueueConfig{"q": {Concurrency: 1, Handler: HandlerFunc(func(context.Context, *Task) error { return nil })}}})
	defer w.Stop(ctx)
	q := w.queues[0]
	q.paused.Store(true) // its fetch loop releases nothing: only this test's call runs
	s, _ := w.keeper.Current()
	var switches atomic.Uint64
	q.launchMu.Lock()
	q.switchesOf = switches.Load
	q.switches = 0
	q.launchMu.Unlock()
	switches.Store(1)
	q.unsureFor(s.ID()) // sees the first switch
	var beats atomic.Int32
	testHookConfirmed = func(q *queueRunner) {
		if beats.Add(1) == 1 {
			switches.Store(2)
			q.unsureFor(s.ID()) // the second, seen while the first beat was on its way
		}
	}
	defer func() { testHookConfirmed = nil }()
	if err := w.confirmSwitch(s, q); err != nil {
		t.Fatal(err)
	}
	if n := beats.Load(); n != 2 {
		t.Fatalf("%d confirmed beats, want 2 (one per switch)", n)
	}
	q.launchMu.Lock()
	defer q.launchMu.Unlock()
	if q.confirm {
		t.Fatal("still waiting for a beat after confirming both switches")
	}
}
