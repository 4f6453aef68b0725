package worqr_test

import (
	"context"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/worqr"
)

// Remote sessions apply a queue's global limits, as Go workers do: the
// limits of the RemoteConfig are stored, a take starts no more than they
// allow, and an end that frees a slot wakes a take waiting for one.
func TestRemoteAppliesGlobalLimits(t *testing.T) {
	ctx := context.Background()
	// A poll interval longer than the takes' waits: a take held by a limit
	// asks again only when woken.
	b := setupRemote(t, ctx, worqr.RemoteConfig{PollInterval: time.Minute, Queues: map[string]worqr.QueueConfig{
		"conc": {Limits: &worqr.Limits{Concurrency: 2}},
		"rate": {},
	}})
	if err := b.insp.SetLimits(ctx, "rate", worqr.Limits{Rate: 2, Period: time.Hour}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"conc", "rate"} {
		for i := 0; i < 4; i++ {
			if _, err := b.client.Enqueue(ctx, q, []byte("x"), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	s := open(t, b, "conc", "rate")
	if l, err := b.insp.Limits(ctx, "conc"); err != nil || l.Concurrency != 2 {
		t.Fatalf("limits of conc = %+v, %v; want the RemoteConfig's Concurrency 2 stored", l, err)
	}

	take := func(q string, wait time.Duration) []worqr.Taking {
		t.Helper()
		ks, err := s.Take(ctx, worqr.TakeRequest{Queue: q, Max: 4, Wait: wait})
		if err != nil {
			t.Fatal(err)
		}
		return ks
	}
	held := take("conc", 0)
	if len(held) != 2 {
		t.Fatalf("took %d tasks of a queue with Concurrency 2, want 2", len(held))
	}
	if ks := take("conc", 0); len(ks) != 0 {
		t.Fatalf("took %d more while 2 run, want none", len(ks))
	}
	// The end of a taking of the limited queue announces its freed slot
	// on the queue's wake channel, where every worker's take waits.
	c, err := redis.DialURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	psc := redis.PubSubConn{Conn: c}
	if err := psc.Subscribe(rdb.NewKeys(b.ns).Queue(rdb.Standalone("conc")).WakeChannel); err != nil {
		t.Fatal(err)
	}
	if _, ok := psc.Receive().(redis.Subscription); !ok {
		t.Fatal("subscribe")
	}
	if out, err := s.Finish(ctx, held[0].PID, nil); err != nil || out != worqr.EventDone {
		t.Fatalf("finish = %q, %v", out, err)
	}
	if m, ok := psc.ReceiveWithTimeout(10 * time.Second).(redis.Message); !ok || rdb.IsHandoff(m.Data) {
		t.Fatal("the end of a taking of a queue with a concurrency limit announced no freed slot")
	}
	if ks := take("conc", 0); len(ks) != 1 {
		t.Fatalf("took %d tasks once one of 2 ended, want 1", len(ks))
	}

	if ks := take("rate", 0); len(ks) != 2 {
		t.Fatalf("took %d tasks of a queue limited to 2 an hour, want 2", len(ks))
	}
	if ks := take("rate", 100*time.Millisecond); len(ks) != 0 {
		t.Fatalf("took %d more within the hour, want none", len(ks))
	}
	if err := b.insp.SetLimits(ctx, "rate", worqr.Limits{}); err != nil {
		t.Fatal(err)
	}
	// The announcement of the change wakes the take, which asks again.
	if ks := take("rate", 20*time.Second); len(ks) == 0 {
		t.Fatal("a take after the rate limit was removed got nothing")
	}
}

// Remote sessions take a queue's higher priority levels first, as Go
// workers do; before, a task enqueued with a priority never reached them.
func TestRemoteTakesByPriority(t *testing.T) {
	ctx := context.Background()
	b := setupRemote(t, ctx, worqr.RemoteConfig{Queues: map[string]worqr.QueueConfig{"q": {}}})
	var want []string
	for _, p := range []int{0, 0, 5, 2} {
		id, err := b.client.Enqueue(ctx, "q", []byte("x"), &worqr.EnqueueOpts{Priority: p})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	want = []string{want[2], want[3], want[0], want[1]}
	s := open(t, b, "q")
	for i, id := range want {
		if k := takeOne(t, s, "q", 0); k.TaskID != id {
			t.Fatalf("take #%d got %s, want %s (levels 5, 2, then 0 in order)", i+1, k.TaskID, id)
		}
	}
}

// A RemoteConfig queue's key policy is stored when a session first asks
// for the queue, as a Worker's is at its start: the remote wrote the zero
// policy over it (merging off), whatever its QueueConfig.Keys said (found
// by an audit).
func TestRemoteStoresItsKeyPolicy(t *testing.T) {
	ctx := context.Background()
	b := setupRemote(t, ctx, worqr.RemoteConfig{Queues: map[string]worqr.QueueConfig{"k": {Keys: worqr.KeyPolicy{Merge: true}}}})
	open(t, b, "k")
	first, err := b.client.Enqueue(ctx, "k", []byte("a"), &worqr.EnqueueOpts{Key: "x"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := b.client.Enqueue(ctx, "k", []byte("b"), &worqr.EnqueueOpts{Key: "x"})
	if err != nil || second != first {
		t.Fatalf("a second enqueue of key x = %s, %v; want it merged into %s (KeyPolicy.Merge)", second, err, first)
	}
}
