package rdb_test

import (
	"context"
	"sort"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
)

// PublishEvents adds its counters to the per-minute hashes (two stores: the
// sums add up), sets their TTL, costs one command per counter and one per
// minute besides the PUBLISH, whatever the counts; History reads them back
// for every queue (HGETALL) or for one (HMGET). Not parallel: the command
// counts are the server's.
func TestHistoryCounters(t *testing.T) {
	ctx := context.Background()
	pool := srv.TagCheckedPool(t)
	defer pool.Close()
	c := pool.Get()
	defer c.Close()
	ns := redistest.Namespace()
	a, b := rdb.NewStore(pool, ns), rdb.NewStore(pool, ns)
	const m = 29000000 // a unix minute
	// Warm up: every connection made.
	if err := a.PublishEvents(ctx, []byte("[]"), 0); err != nil {
		t.Fatal(err)
	}
	before := commandCount(t, c)
	err := a.PublishEvents(ctx, []byte("[]"), 0,
		rdb.HistCount{Minute: m, Queue: "q", Outcome: "done", N: 1000},
		rdb.HistCount{Minute: m, Queue: "f/s|x", Outcome: "dead", N: 2},
		rdb.HistCount{Minute: m + 1, Queue: "q", Outcome: "done", N: 5},
		rdb.HistCount{Minute: m + 1, Queue: "q", Outcome: "zero", N: 0})
	if err != nil {
		t.Fatal(err)
	}
	if n := commandCount(t, c) - before; n != 1+3+2 {
		t.Errorf("a publication with 3 counters over 2 minutes ran %d commands, want 6", n)
	}
	if err := b.PublishEvents(ctx, nil, 0, rdb.HistCount{Minute: m, Queue: "q", Outcome: "done", N: 7}); err != nil {
		t.Fatal(err)
	}
	ttl, err := redis.Int(c.Do("TTL", ns+":{reg}:hist:29000000"))
	if err != nil || ttl <= rdb.HistoryTTL-5 || ttl > rdb.HistoryTTL {
		t.Errorf("TTL of a minute = %d (%v), want about %d", ttl, err, rdb.HistoryTTL)
	}
	all, err := b.History(ctx, m-1, 3, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Minute != all[j].Minute {
			return all[i].Minute < all[j].Minute
		}
		return all[i].Queue < all[j].Queue
	})
	want := []rdb.HistCount{{m, "f/s|x", "dead", 2}, {m, "q", "done", 1007}, {m + 1, "q", "done", 5}}
	if len(all) != len(want) {
		t.Fatalf("History = %v, want %v", all, want)
	}
	for i := range want {
		if all[i] != want[i] {
			t.Errorf("History[%d] = %v, want %v", i, all[i], want[i])
		}
	}
	one, err := a.History(ctx, m, 2, "q", []string{"dead", "done"})
	if err != nil {
		t.Fatal(err)
	}
	if len(one) != 2 || one[0] != (rdb.HistCount{m, "q", "done", 1007}) || one[1] != (rdb.HistCount{m + 1, "q", "done", 5}) {
		t.Errorf("History of q = %v", one)
	}
}
