package worqr

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
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
	q.Paused.Store(true)
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
	q.Paused.Store(false)
	q.hint()
	wait("late")
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	if got := runs["late"]; len(got) != 1 || got[0] == strconv.FormatInt(latePID, 10) {
		t.Fatalf("late ran under pids %v: want once, not under the released pid %d", got, latePID)
	}
	mu.Unlock()

	// Made after the release began: it waits, then runs under its pid.
	q.Paused.Store(true)
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
	if !redistest.Within(2*time.Second, func() bool { return q.ending() > 0 }) {
		c.Do("CLIENT", "UNPAUSE")
		t.Fatal("the first handler never returned")
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

// TestTakePastAHandoffPutsBack with the two replies the other way round:
// the hand-off is recorded in Redis before the fetch loop's take runs
// (so the take gets a task past the worker's concurrency), but its message
// comes after the take's reply, which launched the task it got in the
// slot the hand-off had taken in Redis. The late hand-off is then past the
// concurrency: it must be put back (released) at once, not wait, held by
// the worker and out of every other worker's reach, for the taken task's
// handler to finish (here: until the test ends).
func TestLateHandoffPastATakeIsPutBack(t *testing.T) {
	ctx := context.Background()
	p := startParked(t)
	w, q, s, c, client, started := p.w, p.q, p.s, p.c, p.client, p.started
	var armed atomic.Bool
	armed.Store(true)
	var msg atomic.Value // []byte: the hand-off's message, held back
	defer w.hooks.beforeTake.set(func(hq *queueRunner) {
		if hq != q || !armed.CompareAndSwap(true, false) {
			return
		}
		// The take is about to ask for the one free slot: a hand-off is
		// recorded first (its message on its way), then a task waits in
		// the list (the worker, at its concurrency in Redis, is unparked).
		m, _ := heldFor(t, c, q, s, "handed")
		msg.Store(m)
		if _, err := client.Enqueue(ctx, "q", []byte("taken"), nil); err != nil {
			t.Error(err)
		}
	})()
	q.hint()
	select {
	case got := <-started:
		if got != "taken" {
			t.Fatalf("started %q, want the task taken", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the take's task never started")
	}
	// The hand-off's message comes now, after the take's reply.
	w.handed(q, msg.Load().([]byte))
	var held map[string]string
	var waiting []string
	if !redistest.Within(5*time.Second, func() bool {
		held, _ = redis.StringMap(c.Do("HGETALL", q.QK.WorkerQueue(s.ID())))
		waiting, _ = redis.Strings(c.Do("LRANGE", q.QK.Waiting, 0, -1))
		heldHanded := false
		for _, id := range held {
			heldHanded = heldHanded || id == "handed"
		}
		return !heldHanded && len(waiting) == 1 && waiting[0] == "handed" && len(held) == 1
	}) {
		t.Fatalf("the hand-off past the concurrency is held (%v), not waiting (%v), while the other task runs", held, waiting)
	}
	select {
	case got := <-started:
		t.Fatalf("%q started while the taken task's handler runs (concurrency 1)", got)
	default:
	}
}

// The fetch loop reads its free slots again after a release: a hand-off
// that waited for the release is launched at its end and takes a slot, and
// a take for the slots free before it would take a task past the
// concurrency (put back by launch, at the cost of a take and a release).
func TestNoTakeForASlotAHandoffTookDuringARelease(t *testing.T) {
	ctx := context.Background()
	p := startParked(t)
	q, client, started := p.q, p.client, p.started
	s := p.s
	var armed atomic.Bool
	armed.Store(true)
	defer p.w.hooks.released.set(func(hq *queueRunner) {
		if hq != q || !armed.CompareAndSwap(true, false) {
			return
		}
		// The release ran in Redis; a hand-off comes before its reply is
		// handled, and waits for it.
		if _, err := client.Enqueue(ctx, "q", []byte("handed"), nil); err != nil {
			t.Error(err)
			return
		}
		if !redistest.Within(10*time.Second, func() bool {
			q.hand.mu.Lock()
			defer q.hand.mu.Unlock()
			return len(q.hand.pending) > 0
		}) {
			t.Error("the hand-off never waited for the release")
		}
	})()
	var takes atomic.Int32
	defer p.w.hooks.beforeTake.set(func(hq *queueRunner) {
		if hq == q {
			takes.Add(1)
		}
	})()
	q.setUnsure(s.ID()) // as after a take whose reply was lost
	q.hint()
	select {
	case got := <-started:
		if got != "handed" {
			t.Fatalf("started %q, want the hand-off", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the hand-off never started")
	}
	// The loop goes on: it takes (the slot it read before the release), or
	// it finds no slot free and waits for one.
	waitFor(t, func() (bool, string) {
		return q.waitsSlot.Load() || takes.Load() > 0, "the fetch loop neither took nor waited for a slot"
	})
	if n := takes.Load(); n > 0 {
		t.Errorf("%d take(s) sent while the hand-off launched at the release's end held the only slot", n)
	}
}
