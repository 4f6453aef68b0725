package eventbus

import (
	"context"
	"sync"
	"testing"
)

// feed is an event source for a Hub: its subscription is ready at once,
// and send delivers an event to it.
type feed struct {
	mu       sync.Mutex
	fn       func(string)
	subs     chan bool // true when a subscription starts, false when it ends
	channels []string  // of the latest subscription started
}

func (f *feed) follow(ctx context.Context, channels []string, ready, down func(), fn func(string)) {
	f.mu.Lock()
	f.fn, f.channels = fn, channels
	f.mu.Unlock()
	f.subs <- true
	ready()
	<-ctx.Done()
	down()
	f.subs <- false
}

func (f *feed) send(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fn(id)
}

func TestHub(t *testing.T) {
	f := &feed{subs: make(chan bool, 4)}
	h := NewHub(2, func(id string) string { return id }, f.follow)
	run := &Waiter[string]{ID: "run", Wake: func(string) bool { return true }, Woken: make(chan struct{}, 1)}
	other := &Waiter[string]{ID: "other", Wake: func(string) bool { return true }, Woken: make(chan struct{}, 1)}

	t.Run("the first waiter starts the subscription, and reads once it is ready", func(t *testing.T) {
		h.Add(run)
		if !<-f.subs {
			t.Fatal("no subscription started")
		}
		<-run.Woken
		h.Add(other) // ready already: poked at once
		<-other.Woken
	})
	t.Run("an event wakes the waiters of its id and of the runs it is a child of", func(t *testing.T) {
		f.send("run.child1")
		<-run.Woken
		select {
		case <-other.Woken:
			t.Fatal("a waiter of another id was woken")
		default:
		}
	})
	t.Run("the read gate lets width reads at once", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		for i := 0; i < 2; i++ {
			if !h.Acquire(ctx) {
				t.Fatalf("the gate refused read %d under its width", i+1)
			}
		}
		cancel()
		if h.Acquire(ctx) {
			t.Fatal("a third read got in past the width")
		}
		h.Release()
		h.Release()
	})
	t.Run("a waiter with a channel the subscription lacks makes it again with it, and every waiter reads", func(t *testing.T) {
		ended := &Waiter[string]{ID: "task", Channel: "ended:q", Wake: func(string) bool { return true }, Woken: make(chan struct{}, 1)}
		h.Add(ended)
		// The old one stops and the new one starts, in either order.
		if a, b := <-f.subs, <-f.subs; a == b {
			t.Fatalf("subscriptions started (true) and stopped (false): %v, %v; want one of each", a, b)
		}
		f.mu.Lock()
		chs := f.channels
		f.mu.Unlock()
		if len(chs) != 1 || chs[0] != "ended:q" {
			t.Fatalf("the new subscription listens to %q, want [ended:q]", chs)
		}
		<-ended.Woken
		<-run.Woken
		<-other.Woken
		// A waiter of the same channel joins the running subscription.
		again := &Waiter[string]{ID: "task2", Channel: "ended:q", Wake: func(string) bool { return true }, Woken: make(chan struct{}, 1)}
		h.Add(again)
		<-again.Woken
		select {
		case <-f.subs:
			t.Fatal("a waiter of a channel listened to already made the subscription again")
		default:
		}
		h.Remove(ended)
		h.Remove(again)
	})
	t.Run("the last waiter to leave stops the subscription", func(t *testing.T) {
		h.Remove(run)
		h.Remove(other)
		if <-f.subs {
			t.Fatal("the subscription did not stop")
		}
	})
}
