package worqr

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/heartbeat"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
)

// A hand-off whose message comes after a release put its taking back is
// never run under it (the task runs once, taken again); one that a
// release was not told of but that came after it (its pid past the
// release's Seq) waits while the release is on its way and then runs.
func TestHandoffAfterReleaseIsDropped(t *testing.T) {
	ctx := context.Background()
	pool := internalPool(t)
	c := pool.Get()
	defer c.Close()
	var mu sync.Mutex
	runs := map[string][]string{} // task id -> pids it ran under
	ran := make(chan string, 10)
	cfg := Config{Namespace: redistest.Namespace()}
	w := startInternal(t, pool, &WorkerConfig{Config: cfg, PollInterval: time.Hour, // no check of its own
		Queues: map[string]QueueConfig{"q": {Concurrency: 2, Handler: HandlerFunc(func(_ context.Context, t *Task) error {
			mu.Lock()
			runs[t.ID] = append(runs[t.ID], t.pid)
			mu.Unlock()
			ran <- t.ID
			return nil
		})}}})
	defer w.Stop(ctx)
	q := w.queues[0]
	s, _ := w.keeper.Current()
	held := func(id string) ([]byte, int64) { return heldFor(t, c, q, s, id) }
	wait := func(id string) { t.Helper(); waitRan(t, ran, id, id+" did not run") }

	// Released before its message came: put back, then taken again. The
	// fetch loop is held off meanwhile: release runs on it, never beside
	// its take.
	waitIdle(t, q)
	q.paused.Store(true)
	late, latePID := held("late")
	if err := w.release(s, q); err != nil {
		t.Fatal(err)
	}
	w.handed(q, late)
	// A hand-off is launched (held, and on its way to a handler) before
	// handed returns: nothing held now means it was dropped, with no wait.
	if pids := q.heldPIDs(); len(pids) != 0 {
		t.Fatalf("a hand-off put back by a release was launched (pids %v held)", pids)
	}
	q.paused.Store(false)
	q.hint()
	wait("late")
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	if got := runs["late"]; len(got) != 1 || got[0] == strconv.FormatInt(latePID, 10) {
		t.Fatalf("late ran under pids %v: want once, not under the released pid %d", got, latePID)
	}
	mu.Unlock()

	// Made after the release began: it waits, then runs under its pid.
	q.paused.Store(true)
	waitIdle(t, q)
	q.releaseBegin(s.ID())
	next, nextPID := held("next")
	w.handed(q, next)
	q.hand.mu.Lock()
	pending := len(q.hand.pending)
	q.hand.mu.Unlock()
	if pending != 1 {
		t.Fatalf("%d hand-offs wait during a release, want 1", pending)
	}
	w.releaseEnd(s, q, q.heldPIDs(), rdb.Released{Seq: nextPID - 1}, nil)
	wait("next")
	mu.Lock()
	if got := runs["next"]; len(got) != 1 || got[0] != strconv.FormatInt(nextPID, 10) {
		t.Fatalf("next ran under pids %v, want [%d]", got, nextPID)
	}
	mu.Unlock()
}

// waitIdle waits until q's fetch loop has made the release a subscription
// asks for at start, and has none due.
func waitIdle(t *testing.T, q *queueRunner) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		q.launchMu.Lock()
		u := q.unsure
		q.launchMu.Unlock()
		q.hand.mu.Lock()
		done := q.hand.relFor != "" && q.hand.releasing == ""
		q.hand.mu.Unlock()
		if u == "" && done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the fetch loop never released")
		}
		time.Sleep(5 * time.Millisecond)
	}
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
	spid := strandTaking(t, c, q.qk, s.ID(), id)
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

// A cancel that comes before the handler of a taking starts (launched
// behind a busy handler, or a hand-off waiting for a release to end)
// makes that handler start cancelled.
func TestCancelBeforeTheHandlerStarts(t *testing.T) {
	ctx := context.Background()
	pool := internalPool(t)
	c := pool.Get()
	defer c.Close()
	gate := make(chan struct{})
	causes := make(chan string, 4)
	w := startInternal(t, pool, &WorkerConfig{Config: Config{Namespace: redistest.Namespace()}, PollInterval: time.Hour,
		Queues: map[string]QueueConfig{"q": {Concurrency: 1, Handler: HandlerFunc(func(ctx context.Context, t *Task) error {
			if t.ID == "first" {
				<-gate
				return nil
			}
			select {
			case <-ctx.Done():
				causes <- t.ID + ": " + context.Cause(ctx).Error()
			case <-time.After(2 * time.Second):
				causes <- t.ID + ": not cancelled"
			}
			return ctx.Err()
		})}}})
	defer w.Stop(ctx)
	q := w.queues[0]
	s, _ := w.keeper.Current()
	waitIdle(t, q) // the release at start is over: it would put back what is handed below
	want := func(id string) {
		t.Helper()
		select {
		case got := <-causes:
			if got != id+": "+ErrTaskCancelled.Error() {
				t.Fatalf("%s, want %s cancelled", got, id)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s never ran", id)
		}
	}

	// Launched behind a handler whose end is on its way (Redis hands a
	// worker a task only below its concurrency: here the end freed the
	// slot in Redis, and its reply has not come back yet). The end is held
	// back by pausing Redis's writes.
	first, _ := heldFor(t, c, q, s, "first")
	w.handed(q, first)
	second, _ := heldFor(t, c, q, s, "second")
	if _, err := c.Do("CLIENT", "PAUSE", 3000, "WRITE"); err != nil {
		t.Fatal(err)
	}
	close(gate)
	for deadline := time.Now().Add(2 * time.Second); q.ending() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			c.Do("CLIENT", "UNPAUSE")
			t.Fatal("the first handler never returned")
		}
	}
	w.handed(q, second)
	w.cancelAsked(q, "second")
	if _, err := c.Do("CLIENT", "UNPAUSE"); err != nil {
		t.Fatal(err)
	}
	want("second")

	// Waiting for a release.
	q.releaseBegin(s.ID())
	third, pid := heldFor(t, c, q, s, "third")
	w.handed(q, third)
	w.cancelAsked(q, "third")
	w.releaseEnd(s, q, q.heldPIDs(), rdb.Released{Seq: pid - 1}, nil)
	want("third")
}
