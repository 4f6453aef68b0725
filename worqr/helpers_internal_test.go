package worqr

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/heartbeat"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
)

// The helpers shared by this package's internal test files: a pool on the
// test server, a worker started on it, a client of a fresh namespace, the
// one polling wait (waitFor), and the seams of the hand-off tests (a
// worker parked on its queue, a taking stranded in Redis).

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

// internalClient returns a pool on the test server, a namespace of the
// test's own and a Client on both.
func internalClient(t *testing.T) (*redis.Pool, string, *Client) {
	t.Helper()
	pool := internalPool(t)
	ns := redistest.Namespace()
	c, err := NewClient(pool, &Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	return pool, ns, c
}

// waitFor waits until cond holds; after 10 s it fails the test with what
// cond last said.
func waitFor(t *testing.T, cond func() (bool, string)) {
	t.Helper()
	var why string
	if !redistest.Within(10*time.Second, func() (ok bool) { ok, why = cond(); return ok }) {
		t.Fatal(why)
	}
}

var noop = HandlerFunc(func(context.Context, *Task) error { return nil })

var noBatch = BatchHandlerFunc(func(context.Context, *Batch) error { return nil })

// worker returns a valid WorkerConfig for queue "q", changed by edit.
func worker(edit func(c *WorkerConfig)) *WorkerConfig {
	c := &WorkerConfig{Queues: map[string]QueueConfig{"q": {Handler: noop, Concurrency: 2}}}
	if edit != nil {
		edit(c)
	}
	return c
}

// waitIdle waits until q's fetch loop has made the release a subscription
// asks for at start, and has none due.
func waitIdle(t *testing.T, q *queueRunner) {
	t.Helper()
	waitFor(t, func() (bool, string) {
		u := q.unsure.Owner()
		q.hand.mu.Lock()
		done := q.hand.relFor != "" && q.hand.releasing == ""
		q.hand.mu.Unlock()
		return u == "" && done, "the fetch loop never released"
	})
}

// strandTaking records a taking of task id for worker w in q as
// enqueue_hand does, without its message (as when pub/sub lost it), and
// returns its pid.
func strandTaking(t *testing.T, c redis.Conn, q rdb.QueueKeys, w, id string) string {
	t.Helper()
	pid, err := redis.Int64(c.Do("INCR", q.Seq))
	if err != nil {
		t.Fatal(err)
	}
	spid := strconv.FormatInt(pid, 10)
	if _, err := c.Do("HSET", q.Task(id), "d", "p", "s", "active", "w", w, "p", spid); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do("HSET", q.WorkerQueue(w), spid, id); err != nil {
		t.Fatal(err)
	}
	return spid
}

// heldFor is strandTaking for session s, with the hand-off message
// enqueue_hand would publish, and the pid as a number.
func heldFor(t *testing.T, c redis.Conn, q *queueRunner, s *heartbeat.Session, id string) ([]byte, int64) {
	t.Helper()
	spid := strandTaking(t, c, q.QK, s.ID(), id)
	pid, _ := strconv.ParseInt(spid, 10, 64)
	return []byte("h\n" + s.ID() + "\n" + spid + "\n" + id + "\n\n\np"), pid
}

// waitRan waits for a handler to report task id on ran; why says what a
// timeout means.
func waitRan(t *testing.T, ran <-chan string, id, why string) {
	t.Helper()
	select {
	case got := <-ran:
		if got != id {
			t.Fatalf("ran %s, want %s", got, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal(why)
	}
}

// parkedOne is a worker serving queue "q" at concurrency 1 whose handler
// sends the payload on started and runs until the test ends, parked (idle,
// its release made), with a connection and a Client on the same server.
type parkedOne struct {
	w       *Worker
	q       *queueRunner
	s       *heartbeat.Session
	c       redis.Conn
	client  *Client
	started chan string
}

func startParked(t *testing.T) *parkedOne {
	t.Helper()
	ctx := context.Background()
	pool := internalPool(t)
	c := pool.Get()
	t.Cleanup(func() { c.Close() })
	release := make(chan struct{})
	started := make(chan string, 4)
	cfg := Config{Namespace: redistest.Namespace(), DisableEvents: true}
	w := startInternal(t, pool, &WorkerConfig{Config: cfg, PollInterval: time.Hour,
		Queues: map[string]QueueConfig{"q": {Concurrency: 1, Handler: HandlerFunc(func(ctx context.Context, t *Task) error {
			started <- string(t.Payload)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		})}}})
	t.Cleanup(func() { w.Stop(ctx) })
	t.Cleanup(func() { close(release) }) // (before Stop, which waits for the handler)
	q := w.queues[0]
	s, _ := w.keeper.Current()
	waitIdle(t, q)
	waitFor(t, func() (bool, string) {
		ok, err := redis.Bool(c.Do("HEXISTS", q.QK.Park, s.ID()))
		if err != nil {
			t.Fatal(err)
		}
		return ok, "the worker never parked"
	})
	client, err := NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &parkedOne{w: w, q: q, s: s, c: c, client: client, started: started}
}
