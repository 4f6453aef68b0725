package rdb_test

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
)

// oneShard is a ShardedPubSub over one Redis 7 server, which serves
// SPUBLISH and SSUBSCRIBE outside a cluster too: every tag's master is that
// server.
type oneShard struct {
	*redis.Pool
	refreshes atomic.Int32
}

func (p *oneShard) GetContextForTag(ctx context.Context, _ string) (redis.Conn, error) {
	return p.GetContext(ctx)
}

func (p *oneShard) MasterOf(string) string { return "the-server" }

func (p *oneShard) DialMaster(ctx context.Context, _ string) (redis.Conn, error) {
	return p.DialContext(ctx)
}

func (p *oneShard) Refresh(context.Context) error { p.refreshes.Add(1); return nil }

// A store on a ShardedPubSub pool runs the sharded scripts, which publish
// wake-ups and cancels with SPUBLISH, and listens to them with SSUBSCRIBE
// (the events channel with SUBSCRIBE); a connection the server drops ends
// Listen with an error after a read of the slot map.
func TestShardedStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pool := &oneShard{Pool: srv.Pool()}
	defer pool.Close()
	st := rdb.NewStore(pool, redistest.Namespace())
	a, b := st.Queue(rdb.Standalone("a")), st.Queue(rdb.Standalone("b"))
	channels := []string{a.WakeChannel, a.CancelChannel, b.WakeChannel, st.EventsChannel()}
	type msg struct{ ch, data string }
	got := make(chan msg, 16)
	ready := make(chan struct{}, 4)
	lctx, stop := context.WithCancel(ctx)
	listened := make(chan error, 1)
	go func() {
		listened <- st.Listen(lctx, channels, func() { ready <- struct{}{} },
			func(ch string, data []byte) { got <- msg{ch, string(data)} })
	}()
	select {
	case <-ready:
	case <-ctx.Done():
		t.Fatal("the subscriptions were never confirmed")
	}
	c := pool.Get()
	defer c.Close()
	numsub := func(sub, ch string) int {
		v, err := redis.Values(c.Do("PUBSUB", sub, ch))
		if err != nil || len(v) != 2 {
			t.Fatalf("PUBSUB %s %s: %v, %v", sub, ch, v, err)
		}
		n, _ := redis.Int(v[1], nil)
		return n
	}
	for _, ch := range channels[:3] {
		if s, p := numsub("SHARDNUMSUB", ch), numsub("NUMSUB", ch); s != 1 || p != 0 {
			t.Errorf("%s: %d sharded and %d plain subscribers, want 1 and 0", ch, s, p)
		}
	}
	if s, p := numsub("SHARDNUMSUB", st.EventsChannel()), numsub("NUMSUB", st.EventsChannel()); s != 0 || p != 1 {
		t.Errorf("events: %d sharded and %d plain subscribers, want 0 and 1", s, p)
	}
	expect := func(ch, data string) {
		t.Helper()
		select {
		case m := <-got:
			if m.ch != ch || m.data != data {
				t.Errorf("got %q on %s, want %q on %s", m.data, m.ch, data, ch)
			}
		case <-ctx.Done():
			t.Fatalf("nothing on %s", ch)
		}
	}
	if _, err := st.Enqueue(ctx, a, []string{"t1"}, [][]byte{[]byte("p")}, nil); err != nil {
		t.Fatal(err)
	}
	expect(a.WakeChannel, "1")
	if tk, err := st.Take(ctx, a, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 1}); err != nil || len(tk) != 1 {
		t.Fatalf("take: %v, %v", tk, err)
	}
	if r, err := st.Cancel(ctx, a, "t1"); err != nil || r != rdb.CancelRequested {
		t.Fatalf("cancel: %v, %v", r, err)
	}
	expect(a.CancelChannel, "t1")
	if _, err := st.Enqueue(ctx, b, []string{"t2", "t3"}, [][]byte{[]byte("p"), []byte("q")}, nil); err != nil {
		t.Fatal(err)
	}
	expect(b.WakeChannel, "2")
	if err := st.PublishEvents(ctx, []byte("[]"), 0); err != nil {
		t.Fatal(err)
	}
	expect(st.EventsChannel(), "[]")

	// The server drops the sharded subscriber: Listen ends, after a read
	// of the map.
	if _, err := c.Do("CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-listened:
		if err == nil {
			t.Error("Listen returned nil after its connections were dropped")
		}
	case <-ctx.Done():
		t.Fatal("Listen did not end when its connections were dropped")
	}
	if pool.refreshes.Load() == 0 {
		t.Error("the slot map was not read again after a lost subscription")
	}
	stop()
	// Listen ends with nil when its context ends.
	lctx, stop = context.WithCancel(ctx)
	ready = make(chan struct{}, 1)
	go func() {
		listened <- st.Listen(lctx, channels[:1], func() { ready <- struct{}{} }, func(string, []byte) {})
	}()
	<-ready
	stop()
	if err := <-listened; err != nil {
		t.Errorf("Listen after its context ended: %v", err)
	}
}
