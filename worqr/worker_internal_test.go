package worqr

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
)

// Stop with no grace period puts back every running taking with nothing
// counted: a handler that returns because Stop cancelled it finds its
// session lost and sends no end (a retry would count an attempt). The
// session must read lost before its context is done.
func TestStopWithNoGraceCountsNothing(t *testing.T) {
	ctx := context.Background()
	pool, ns, c := internalClient(t)
	const n = 200
	var running, ended, requeued atomic.Int32
	w := startInternal(t, pool, &WorkerConfig{Config: Config{Namespace: ns}, OnEvent: func(e Event) {
		switch e.Kind {
		case EventRetry, EventDone, EventDead:
			ended.Add(1)
		case EventStopRequeued:
			requeued.Add(int32(e.Count))
		}
	}, Queues: map[string]QueueConfig{"q": {Concurrency: n, Handler: HandlerFunc(func(ctx context.Context, _ *Task) error {
		running.Add(1)
		<-ctx.Done()
		return ctx.Err()
	})}}})
	for i := 0; i < n; i++ {
		if _, err := c.Enqueue(ctx, "q", []byte(strconv.Itoa(i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	if !redistest.Within(10*time.Second, func() bool { return running.Load() >= n }) {
		t.Fatalf("%d of %d running", running.Load(), n)
	}
	now, cancel := context.WithCancel(ctx)
	cancel()
	w.Stop(now)
	if ended.Load() > 0 || requeued.Load() != n {
		t.Fatalf("%d takings ended by their cancelled handlers (an attempt counted), %d requeued by Stop; want 0 and %d",
			ended.Load(), requeued.Load(), n)
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

func TestNewlyStuck(t *testing.T) {
	start := time.Now()
	q := &queueRunner{held: map[string]*holding{
		"1": {id: "a", started: start},
		"2": {id: "b"}, // its handler has not started
		"3": {id: "c", started: start, ending: true},
	}}
	q.Member, q.Policy.StuckAfter = "q", time.Minute
	t.Run("nothing before StuckAfter", func(t *testing.T) {
		if got := q.newlyStuck(start.Add(59 * time.Second)); len(got) != 0 {
			t.Fatalf("stuck %+v", got)
		}
	})
	t.Run("a running handler past StuckAfter, not one that returned or has not started", func(t *testing.T) {
		got := q.newlyStuck(start.Add(time.Minute))
		if len(got) != 1 || got[0].TaskID != "a" || got[0].PID != "1" || got[0].Kind != EventStuck || got[0].Running != time.Minute {
			t.Fatalf("stuck %+v, want task a (pid 1) running 1m", got)
		}
	})
	t.Run("once per taking", func(t *testing.T) {
		if got := q.newlyStuck(start.Add(time.Hour)); len(got) != 0 {
			t.Fatalf("reported again: %+v", got)
		}
	})
	t.Run("never when StuckAfter is off", func(t *testing.T) {
		off := &queueRunner{held: map[string]*holding{"1": {id: "a", started: start}}}
		if got := off.newlyStuck(start.Add(24 * time.Hour)); len(got) != 0 {
			t.Fatalf("stuck %+v", got)
		}
	})
}
