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
	// A queue of its own, which no fetch loop of the worker serves: only
	// this test's calls look at it.
	var switches atomic.Uint64
	q := &queueRunner{name: "x", switchesOf: switches.Load, currentID: w.ID}
	s, _ := w.keeper.Current()
	switches.Store(1)
	q.unsureFor(s.ID()) // sees the first switch
	var beats atomic.Int32
	testHookConfirmed = func(hq *queueRunner) {
		if hq != q {
			return
		}
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

// A caller holding a session that is no longer current (a group round, an
// end that waited for its lock) never makes the queue forget that the
// current session must release.
func TestUnsureForAStaleSessionKeepsTheCurrentOnes(t *testing.T) {
	q := &queueRunner{currentID: func() string { return "B" }}
	q.setUnsure("B")
	if got := q.unsureFor("A"); got != "" {
		t.Fatalf("unsureFor(stale A) = %q, want \"\"", got)
	}
	if got := q.unsureFor("B"); got != "B" {
		t.Fatalf("unsureFor(B) = %q after a stale caller, want B", got)
	}
	q.setUnsure("A") // a session that died: forgotten
	if got := q.unsureFor("B"); got != "" {
		t.Fatalf("unsureFor(B) = %q with a dead session's mark, want \"\"", got)
	}
}
