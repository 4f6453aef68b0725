package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
)

var (
	cl    *redistest.Cluster
	clErr error
)

func TestMain(m *testing.M) {
	cl, clErr = redistest.StartCluster(3)
	code := m.Run()
	if cl != nil {
		cl.Stop()
	}
	os.Exit(code)
}

// needCluster skips when redis-cli is missing and fails on any other
// error starting the cluster.
func needCluster(t *testing.T) *redistest.Cluster {
	t.Helper()
	if errors.Is(clErr, redistest.ErrNoRedisCLI) {
		t.Skip(redistest.ClusterHint)
	}
	if clErr != nil {
		t.Fatalf("starting the cluster: %v", clErr)
	}
	return cl
}

func nodePool(addr string) *redis.Pool {
	return &redis.Pool{MaxIdle: 8, DialContext: func(ctx context.Context) (redis.Conn, error) {
		return redis.DialContext(ctx, "tcp", addr)
	}}
}

func newPool(t *testing.T, refresh time.Duration) *Pool {
	t.Helper()
	c := needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := New(ctx, Options{Seeds: c.Addrs()[:1], NewPool: nodePool, RefreshInterval: refresh})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// owner asks the cluster which node serves key's slot.
func owner(t *testing.T, key string) (int, string) {
	t.Helper()
	c, err := redis.Dial("tcp", cl.Nodes[0].Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	slot, err := redis.Int(c.Do("CLUSTER", "KEYSLOT", key))
	if err != nil {
		t.Fatal(err)
	}
	n, err := cl.NodeOf(context.Background(), slot)
	if err != nil {
		t.Fatal(err)
	}
	return slot, n.Addr
}

func TestSlotMatchesServer(t *testing.T) {
	needCluster(t)
	c, err := redis.Dial("tcp", cl.Nodes[0].Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < 300; i++ {
		key := fmt.Sprintf("k%d{t%d}x", i*7919, i%17)
		if i%3 == 0 {
			key = fmt.Sprintf("plain-%d", i*104729)
		}
		if i%5 == 0 {
			key = fmt.Sprintf("a{}b{%d}", i)
		}
		want, err := redis.Int(c.Do("CLUSTER", "KEYSLOT", key))
		if err != nil {
			t.Fatal(err)
		}
		if got := Slot(key); got != want {
			t.Fatalf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", key, got, want)
		}
	}
}

func TestRoutingByTag(t *testing.T) {
	p := newPool(t, -1)
	if got := len(p.Masters()); got != 3 {
		t.Fatalf("%d masters, want 3: %v", got, p.Masters())
	}
	ctx := context.Background()
	used := map[string]bool{}
	for i := 0; i < 30; i++ {
		tag := "queue-" + strconv.Itoa(i)
		key := "ns:{" + tag + "}:q:x"
		_, want := owner(t, key)
		c, err := p.GetContextForTag(ctx, tag)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.(*Conn).Node(); got != want {
			t.Errorf("tag %s: connection to %s, owner is %s", tag, got, want)
		}
		// The node itself runs the command: it would answer MOVED to a
		// plain connection otherwise.
		raw, err := redis.Dial("tcp", c.(*Conn).Node())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Do("SET", key, "v"); err != nil {
			t.Errorf("tag %s on %s: %v", tag, c.(*Conn).Node(), err)
		}
		raw.Close()
		c.Close()
		used[want] = true
	}
	if len(used) != 3 {
		t.Errorf("30 tags landed on %d masters, want all 3", len(used))
	}
}

// tagOn returns a tag (prefix + n) whose slot another node than avoid
// serves, and that node.
func tagOn(t *testing.T, prefix string, pick func(addr string) bool) (string, int, string) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		tag := prefix + strconv.Itoa(i)
		slot, addr := owner(t, "{"+tag+"}")
		if pick(addr) {
			return tag, slot, addr
		}
	}
	t.Fatal("no tag found")
	return "", 0, ""
}

func server(addr string) *redistest.Server {
	for _, n := range cl.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

func otherThan(addr string) *redistest.Server {
	for _, n := range cl.Nodes {
		if n.Addr != addr {
			return n
		}
	}
	return nil
}

// follows counts the redirections the Conns of p act on (Pool.onFollow)
// and returns a function that reads the counts by kind.
func follows(t *testing.T, p *Pool) func() map[redirectKind]int {
	seen, _ := followsNotify(t, p)
	return seen
}

// followsNotify is follows, and a channel that holds a value after each
// redirection followed since the last receive.
func followsNotify(t *testing.T, p *Pool) (func() map[redirectKind]int, <-chan struct{}) {
	var mu sync.Mutex
	seen := map[redirectKind]int{}
	followed := make(chan struct{}, 1)
	f := func(rd redirect) {
		mu.Lock()
		seen[rd.kind]++
		mu.Unlock()
		select {
		case followed <- struct{}{}:
		default:
		}
	}
	p.onFollow.Store(&f)
	t.Cleanup(func() { p.onFollow.Store(nil) })
	return func() map[redirectKind]int {
		mu.Lock()
		defer mu.Unlock()
		out := map[redirectKind]int{}
		for k, v := range seen {
			out[k] = v
		}
		return out
	}, followed
}

func TestMovedIsFollowed(t *testing.T) {
	p := newPool(t, -1) // no periodic refresh: only MOVED can teach it
	seen := follows(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tag, slot, from := tagOn(t, redistest.Namespace()+"-moved-", func(string) bool { return true })
	key := "{" + tag + "}:k"
	if _, err := doTag(ctx, p, tag, "SET", key, "before"); err != nil {
		t.Fatal(err)
	}
	to := otherThan(from)
	if err := cl.MoveSlot(ctx, slot, to, 100, nil); err != nil {
		t.Fatal(err)
	}
	if p.Addr(slot) != from {
		t.Fatalf("the map changed before any redirection")
	}
	c := must(p.GetContextForTag(ctx, tag))
	defer c.Close()
	v, err := redis.String(c.Do("GET", key))
	if err != nil || v != "before" {
		t.Fatalf("GET after the move: %q, %v", v, err)
	}
	if got := c.(*Conn).Node(); got != to.Addr {
		t.Errorf("connection on %s after MOVED, want %s", got, to.Addr)
	}
	if got := p.Addr(slot); got != to.Addr {
		t.Errorf("map says slot %d is on %s, want %s", slot, got, to.Addr)
	}
	if seen()[movedRedirect] == 0 {
		t.Error("no MOVED was followed")
	}
	// Move it back for the other tests, and check a pipeline (a
	// transaction included) is sent again whole.
	if err := cl.MoveSlot(ctx, slot, server(from), 100, nil); err != nil {
		t.Fatal(err)
	}
	c2 := must(p.GetContextForTag(ctx, tag))
	defer c2.Close()
	before := seen()[movedRedirect]
	out, err := c2.(*Conn).Pipeline(ctx, []string{"MULTI", "INCR", "GET", "EXEC"},
		[][]any{nil, {key + "n"}, {key}, nil})
	if err != nil {
		t.Fatal(err)
	}
	exec, err := redis.Values(out[3], nil)
	if err != nil || len(exec) != 2 {
		t.Fatalf("EXEC reply %v, %v", out[3], err)
	}
	if n, _ := redis.Int(exec[0], nil); n != 1 {
		t.Errorf("INCR ran %d times, want 1", n)
	}
	if seen()[movedRedirect] == before {
		t.Error("the pipeline met no MOVED")
	}
}

func TestAskIsFollowed(t *testing.T) {
	p := newPool(t, -1)
	seen := follows(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tag, slot, from := tagOn(t, redistest.Namespace()+"-ask-", func(string) bool { return true })
	to := otherThan(from)
	old := "{" + tag + "}:old"
	if _, err := doTag(ctx, p, tag, "SET", old, "1"); err != nil {
		t.Fatal(err)
	}
	err := cl.MoveSlot(ctx, slot, to, 100, func() {
		// Half moved: a new key belongs on the target (ASK); the map must
		// not change.
		c := must(p.GetContextForTag(ctx, tag))
		defer c.Close()
		if _, err := c.Do("SET", "{"+tag+"}:new", "2"); err != nil {
			t.Errorf("SET during the migration: %v", err)
		}
		if seen()[askRedirect] == 0 {
			t.Error("no ASK was followed")
		}
		if got := p.Addr(slot); got != from {
			t.Errorf("ASK changed the map: slot %d on %s", slot, got)
		}
		// A read of the old key is still served by the source.
		c2 := must(p.GetContextForTag(ctx, tag))
		defer c2.Close()
		if v, err := redis.String(c2.Do("GET", old)); err != nil || v != "1" {
			t.Errorf("GET of a key not moved yet: %q, %v", v, err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := redis.Dial("tcp", to.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if v, err := redis.String(raw.Do("GET", "{"+tag+"}:new")); err != nil || v != "2" {
		t.Errorf("the key set during the migration is not on the target: %q, %v", v, err)
	}
}

func TestTryAgainIsRetried(t *testing.T) {
	p := newPool(t, -1)
	seen, followed := followsNotify(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tag, slot, from := tagOn(t, redistest.Namespace()+"-try-", func(string) bool { return true })
	to := otherThan(from)
	k1, k2 := "{"+tag+"}:1", "{"+tag+"}:2"
	if _, err := doTag(ctx, p, tag, "MSET", k1, "a", k2, "b"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	err := cl.MoveSlot(ctx, slot, to, 100, func() {
		// Move one key of two: a command on both gets TRYAGAIN until the
		// other moves too.
		migrateKey(t, from, to, k1)
		go func() {
			c := must(p.GetContextForTag(ctx, tag))
			defer c.Close()
			vs, err := redis.Strings(redis.DoContext(c, ctx, "MGET", k1, k2))
			if err == nil && (len(vs) != 2 || vs[0] != "a" || vs[1] != "b") {
				err = fmt.Errorf("MGET = %q", vs)
			}
			done <- err
		}()
		for seen()[tryAgain] == 0 { // checked after each redirection, until the deadline of ctx
			select {
			case <-followed:
			case <-ctx.Done():
				t.Error("MGET never met TRYAGAIN")
				return
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("MGET across the migration: %v", err)
	}
}

// migrateKey moves key alone from the node at from to node to (MIGRATE),
// as a slot move does while the slot is half moved.
func migrateKey(t *testing.T, from string, to *redistest.Server, key string) {
	t.Helper()
	src, err := redis.Dial("tcp", from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	host, port, _ := stringsCut(to.Addr)
	if _, err := src.Do("MIGRATE", host, port, "", 0, 5000, "KEYS", key); err != nil {
		t.Fatal(err)
	}
}

func stringsCut(addr string) (string, string, bool) {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[:i], addr[i+1:], true
		}
	}
	return addr, "", false
}

func must(c redis.Conn, err error) redis.Conn {
	if err != nil {
		panic(err)
	}
	return c
}

func doTag(ctx context.Context, p *Pool, tag, cmd string, args ...any) (any, error) {
	c, err := p.GetContextForTag(ctx, tag)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return redis.DoContext(c, ctx, cmd, args...)
}

// TestAskThenTryAgain: a command whose keys are all gone from the source is
// sent to the target with ASKING, which answers TRYAGAIN while some of them
// are missing there too. The retry goes back to the slot's owner (not to the
// target without ASKING, which only answers MOVED), and the waits do not
// count as redirections: the command succeeds however long the move takes.
func TestAskThenTryAgain(t *testing.T) {
	p := newPool(t, -1)
	seen := follows(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tag, slot, from := tagOn(t, redistest.Namespace()+"-asktry-", func(string) bool { return true })
	to := otherThan(from)
	k1, k2 := "{"+tag+"}:1", "{"+tag+"}:2" // k2 never exists
	if _, err := doTag(ctx, p, tag, "SET", k1, "a"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	err := cl.MoveSlot(ctx, slot, to, 100, func() {
		migrateKey(t, from, to, k1)
		go func() {
			c := must(p.GetContextForTag(ctx, tag))
			defer c.Close()
			vs, err := redis.Values(redis.DoContext(c, ctx, "MGET", k1, k2))
			if err == nil && (len(vs) != 2 || fmt.Sprintf("%s", vs[0]) != "a" || vs[1] != nil) {
				err = fmt.Errorf("MGET = %q", vs)
			}
			done <- err
		}()
		// More rounds of ASK and TRYAGAIN than MaxRedirects allows.
		for seen()[tryAgain] < 12 {
			if ctx.Err() != nil {
				t.Error("MGET did not meet TRYAGAIN 12 times")
				return
			}
			select {
			case err := <-done:
				t.Errorf("MGET ended during the move: %v", err)
				done <- err
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
		if seen()[askRedirect] == 0 {
			t.Error("MGET never met ASK")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("MGET across the migration: %v", err)
	}
}
