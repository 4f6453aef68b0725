package remote_test

import (
	"context"
	"testing"
	"time"

	"github.com/worqr/worqr-go/remote"
	"github.com/worqr/worqr-go/worqr"
)

// A remote session takes from a fair queue as a Go worker does (the one
// engine): the keys in turn, each within its limit, its takings' slots
// given back by its ends and by its close.
func TestRemoteFairQueue(t *testing.T) {
	ctx := context.Background()
	pol := worqr.KeyPolicy{Fair: true, PerKey: worqr.KeyLimits{Limits: worqr.Limits{Concurrency: 2}}}
	b := setupRemote(t, ctx, remote.Config{Queues: map[string]worqr.QueueConfig{"fair": {Keys: pol}}})
	s := open(t, b, "fair")
	for _, key := range []string{"A", "A", "A", "A", "B"} {
		if _, err := b.client.Enqueue(ctx, "fair", []byte(key), &worqr.EnqueueOpts{Key: key}); err != nil {
			t.Fatal(err)
		}
	}
	take := func(max int) []remote.Taking {
		t.Helper()
		ks, err := s.Take(ctx, remote.TakeRequest{Queue: "fair", Max: max, Wait: 0})
		if err != nil {
			t.Fatal(err)
		}
		return ks
	}
	count := func(ks []remote.Taking) map[string]int {
		out := map[string]int{}
		for _, k := range ks {
			out[string(k.Payload)]++
		}
		return out
	}
	var held []remote.Taking
	wait(t, 10*time.Second, "the session to take A's 2 and B's 1", func() bool {
		held = append(held, take(10)...)
		return len(held) >= 3
	})
	if c := count(held); c["A"] != 2 || c["B"] != 1 || len(held) != 3 {
		t.Fatalf("took %v, want A twice (its limit) and B once", c)
	}
	if ks := take(10); len(ks) != 0 {
		t.Fatalf("took %v more while A runs its limit", count(ks))
	}
	for _, k := range held {
		if string(k.Payload) == "A" {
			if out, err := s.Finish(ctx, k.PID, nil); err != nil || out != worqr.EventDone {
				t.Fatalf("finish = %q, %v", out, err)
			}
			break
		}
	}
	if c := count(take(10)); c["A"] != 1 || len(c) != 1 {
		t.Fatalf("took %v once one of A's 2 ended, want A once", c)
	}
	// The close gives every slot back: a new session takes A's last 2.
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s2 := open(t, b, "fair")
	var again []remote.Taking
	wait(t, 10*time.Second, "a new session to take A's 2 again", func() bool {
		ks, err := s2.Take(ctx, remote.TakeRequest{Queue: "fair", Max: 10})
		if err != nil {
			t.Fatal(err)
		}
		again = append(again, ks...)
		return len(again) >= 2
	})
	if c := count(again); c["A"] != 2 {
		t.Fatalf("the new session took %v, want A twice (its limit, slots given back by the close)", c)
	}
}
