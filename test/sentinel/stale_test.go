package sentinel_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// startExtraSentinel runs one more redis-sentinel with conf lines (a
// "sentinel monitor" line among them) and returns its address once it
// monitors its master; it is stopped when the test ends.
func startExtraSentinel(t *testing.T, lines ...string) string {
	t.Helper()
	s, err := redistest.StartSentinelConf(lines...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s.Addr
}

func askSentinel(ctx context.Context, addr string) (string, error) {
	c, err := redis.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	r, err := redis.Strings(redis.DoContext(c, ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", redistest.SentinelMaster))
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(r[0], r[1]), nil
}

// failoverVia asks sentinel s for a forced failover and waits until s names
// a primary other than old that says it is one.
func failoverVia(ctx context.Context, t *testing.T, s, old string) string {
	t.Helper()
	c, err := redis.DialContext(ctx, "tcp", s)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		_, err := c.Do("SENTINEL", "FAILOVER", redistest.SentinelMaster)
		if err == nil {
			break
		}
		// Sentinels that were just reset need a fresh INFO of the replica
		// (every 10 s, or at once in a failover): ask again shortly.
		if !strings.HasPrefix(err.Error(), "NOGOODSLAVE") || redistest.Pause(wctx, 500*time.Millisecond) != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	var now string
	if redistest.Poll(wctx, func() bool {
		var err error
		now, err = askSentinel(wctx, s)
		if err != nil || now == old {
			return false
		}
		info, err := redistest.Info(wctx, now, "replication")
		return err == nil && strings.Contains(info, "role:master")
	}) != nil {
		t.Fatalf("no new primary after 30 s")
	}
	return now
}

// staleSentinel starts a sentinel that monitors primary and cannot see
// the data nodes' INFO and pub/sub (an ACL user that denies them, the
// effect of a partition between sentinels): it names primary whatever
// the others do, at configuration epoch 0.
func staleSentinel(t *testing.T, st *redistest.Sentinel, primary string) string {
	t.Helper()
	for _, n := range st.Nodes {
		c, err := redis.Dial("tcp", n.Addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Do("ACL", "SETUSER", "stale", "on", ">stalepw", "+@all", "-info", "-subscribe", "-psubscribe", "-publish",
			"allkeys", "allchannels"); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	host, port, _ := net.SplitHostPort(primary)
	stale := startExtraSentinel(t,
		fmt.Sprintf("sentinel monitor %s %s %s 2", redistest.SentinelMaster, host, port),
		fmt.Sprintf("sentinel auth-user %s stale", redistest.SentinelMaster),
		fmt.Sprintf("sentinel auth-pass %s stalepw", redistest.SentinelMaster),
		fmt.Sprintf("sentinel down-after-milliseconds %s 1000", redistest.SentinelMaster))
	return stale
}

// A split brain: after a failover, the old primary acts as one again and
// nobody demotes it (here: REPLICAOF NO ONE, and an ACL that keeps the
// sentinels from sending it REPLICAOF), and a sentinel cut off from the
// others still names it. The pool went back to it at its next check:
// ROLE confirmed it, and the writes of every process went to a node whose
// data the rejoin throws away. The stale sentinel gives an older
// configuration epoch: the pool stays on the primary in use while that
// one confirms.
func TestStaleSentinelDoesNotPullThePoolBackInASplitBrain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := sentinelGroup(ctx, t)
	old := st.Nodes[0].Addr
	stale := staleSentinel(t, st, old)
	refused := make(chan struct{}, 16)
	log := slog.New(&matchHandler{match: "names an older primary", seen: refused})
	// The stale sentinel is asked first at every check.
	pool, err := redisconn.NewSentinel(redistest.SentinelMaster, append([]string{stale}, st.Addrs()...),
		&redisconn.Options{SentinelCheck: time.Second, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	second := failoverVia(ctx, t, st.Sentinels[0].Addr, old)
	waitPrimary(t, pool, second, 15*time.Second)
	c, err := redis.Dial("tcp", old)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Do("REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do("ACL", "SETUSER", "default", "-replicaof", "-slaveof"); err != nil {
		t.Fatal(err)
	}
	if s, _ := askSentinel(ctx, stale); s != old {
		t.Fatalf("the stale sentinel names %s, not the old primary %s: the setup is wrong", s, old)
	}
	switches := pool.Switches()
	// Two checks that asked the stale sentinel and refused what it named.
	for n := 0; n < 2; {
		select {
		case <-refused:
			n++
		case <-time.After(15 * time.Second):
			t.Fatalf("15 s without a check refusing the stale sentinel's %s; the pool uses %s", old, pool.Primary())
		}
		if pool.Primary() != second || pool.Switches() != switches {
			t.Fatalf("the pool went from %s to %s (%d switches more): the old primary of a split brain", second, pool.Primary(), pool.Switches()-switches)
		}
	}
}

// matchHandler signals seen for each record whose message contains match.
type matchHandler struct {
	match string
	seen  chan struct{}
}

func (h *matchHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *matchHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.match) {
		select {
		case h.seen <- struct{}{}:
		default:
		}
	}
	return nil
}
func (h *matchHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *matchHandler) WithGroup(string) slog.Handler      { return h }

// A sentinel that cannot see the others (here: an ACL user on the data
// nodes that denies it INFO and pub/sub, the effect of a partition between
// sentinels) keeps naming the old primary. Listed first, it is the one the
// pool follows and the first one asked; after a failover the old primary
// is a replica. The pool checks the node in use with ROLE too, and asks
// the next sentinel: it returned early because the stale sentinel named
// the address in use, and each READONLY only repeated that (found by an
// audit).
func TestStaleFirstSentinelDoesNotKeepTheDemotedPrimary(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := sentinelGroup(ctx, t)
	old := st.Nodes[0].Addr
	stale := staleSentinel(t, st, old)

	pool, err := redisconn.NewSentinel(redistest.SentinelMaster, append([]string{stale}, st.Addrs()...),
		&redisconn.Options{SentinelCheck: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	cfg := worqr.Config{Namespace: "stalesentinel"}
	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, "q", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	second := failoverVia(ctx, t, st.Sentinels[0].Addr, old)
	if err := waitLinked(ctx, st.Node(old)); err != nil {
		t.Fatal(err)
	}
	if s, _ := askSentinel(ctx, stale); s != old {
		t.Fatalf("the stale sentinel names %s, not the old primary %s: the setup is wrong", s, old)
	}
	// Each enqueue meets READONLY while the pool uses the replica: one
	// every 200 ms until the pool switches.
	var lastErr error
	deadline := time.After(15 * time.Second)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		switched := pool.Switched()
		if pool.Primary() == second {
			return
		}
		_, lastErr = client.Enqueue(ctx, "q", []byte("x"), nil)
		select {
		case <-switched:
		case <-tick.C:
		case <-deadline:
			t.Fatalf("15 s after the failover to %s the pool still uses %s, now a replica (last enqueue: %v)", second, pool.Primary(), lastErr)
		}
	}
}

// A sentinel that accepts connections but never answers (SIGSTOP: a hung
// process or a black-holed host) first in the list: each sentinel's answer
// has a time of its own, so the pool follows a failover that the other two
// sentinels made. One discovery had one deadline (SentinelCheck) for every
// sentinel, and the hung one used it all (found by an audit).
func TestHungFirstSentinelDoesNotBlockFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, pool := startSentinel(ctx, t)
	old := pool.Primary()
	hung := st.Sentinels[0]
	if err := hung.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hung.Signal(syscall.SIGCONT) })
	second := failoverVia(ctx, t, st.Sentinels[1].Addr, old)
	waitPrimary(t, pool, second, 20*time.Second) // named by 2 of 3 sentinels
}

// The same hung sentinel first in the list at start: the constructor asks
// the next one.
func TestHungFirstSentinelAtStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := sentinelGroup(ctx, t)
	hung := st.Sentinels[0]
	if err := hung.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hung.Signal(syscall.SIGCONT) })
	start := time.Now()
	pool, err := redisconn.NewSentinel(redistest.SentinelMaster, st.Addrs(), nil)
	t.Logf("NewSentinelPool took %s", time.Since(start))
	if err != nil {
		t.Fatalf("NewSentinelPool with 2 of 3 sentinels answering: %v", err)
	}
	pool.Close()
}

// subscribers returns how many clients of sentinel addr are subscribed to
// a channel (CLIENT LIST's sub=): the pool's watch, in these tests.
func subscribers(ctx context.Context, addr string) (int, error) {
	c, err := redis.DialContext(ctx, "tcp", addr, redis.DialReadTimeout(time.Second))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	list, err := redis.String(c.Do("CLIENT", "LIST"))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, " sub=1 ") {
			n++
		}
	}
	return n, nil
}

// The sentinel the pool watches for +switch-master hangs (SIGSTOP): the
// watch moves to another sentinel, since a PING on the subscription is not
// answered. Before, a subscription to a hung sentinel never ended, and
// switches were found only by the periodic check.
func TestHungWatchedSentinelIsLeft(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := sentinelGroup(ctx, t)
	pool, err := redisconn.NewSentinel(redistest.SentinelMaster, st.Addrs(), &redisconn.Options{SentinelCheck: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// The sentinels' client lists say where the subscription is.
	watched := -1
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if redistest.Poll(wctx, func() bool {
		for i, s := range st.Sentinels {
			if n, err := subscribers(ctx, s.Addr); err == nil && n == 1 {
				watched = i
			}
		}
		return watched >= 0
	}) != nil {
		t.Fatal("no sentinel has the pool's subscription")
	}
	hung := st.Sentinels[watched]
	if err := hung.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hung.Signal(syscall.SIGCONT) })
	mctx, mcancel := context.WithTimeout(ctx, 15*time.Second)
	defer mcancel()
	moved := 0
	if redistest.Poll(mctx, func() bool {
		moved = 0
		for i, s := range st.Sentinels {
			if i == watched {
				continue
			}
			if n, err := subscribers(ctx, s.Addr); err == nil {
				moved += n
			}
		}
		return moved == 1
	}) != nil {
		t.Fatalf("15 s after sentinel %s hung, the watch has not moved to another (%d subscribed elsewhere)", hung.Addr, moved)
	}
}
