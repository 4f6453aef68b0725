package worqr

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

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
	testHookReleased = func(hq *queueRunner) {
		if hq != q || !armed.CompareAndSwap(true, false) {
			return
		}
		// The release ran in Redis; a hand-off comes before its reply is
		// handled, and waits for it.
		if _, err := client.Enqueue(ctx, "q", []byte("handed"), nil); err != nil {
			t.Error(err)
			return
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			q.hand.mu.Lock()
			n := len(q.hand.pending)
			q.hand.mu.Unlock()
			if n > 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Error("the hand-off never waited for the release")
				return
			}
		}
	}
	var takes atomic.Int32
	testHookBeforeTake = func(hq *queueRunner) {
		if hq == q {
			takes.Add(1)
		}
	}
	defer func() { testHookReleased, testHookBeforeTake = nil, nil }()
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
	for deadline := time.Now().Add(10 * time.Second); !q.waitsSlot.Load(); time.Sleep(time.Millisecond) {
		if takes.Load() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the fetch loop neither took nor waited for a slot")
		}
	}
	if n := takes.Load(); n > 0 {
		t.Errorf("%d take(s) sent while the hand-off launched at the release's end held the only slot", n)
	}
}
