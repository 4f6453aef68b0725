package recovery_test

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/recovery"
	"github.com/worqr/worqr-go/registry"
)

// hangPool passes calls to pool, but its first call of the script named
// script (move when "") never gets a reply: it waits until its context
// ends, as a call on a connection that went silent does (a partition that
// drops packets, a virtual IP moved to another host: no reset comes, TCP
// retransmits for about 15 minutes). Every other call, on other
// connections, is answered.
type hangPool struct {
	pool    *redis.Pool
	script  string
	hung    atomic.Bool
	hanging chan struct{} // closed when the hung call starts waiting
}

func (p *hangPool) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := p.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return &hangConn{Conn: c, p: p}, nil
}

type hangConn struct {
	redis.Conn
	p *hangPool
	// sentHung: a pipelined call that gets no reply was sent: the next
	// receive hangs.
	sentHung bool
}

// hangs reports whether the call of cmd is the one that gets no reply.
func (c *hangConn) hangs(cmd string, args []any) bool {
	script := c.p.script
	if script == "" {
		script = "move"
	}
	return cmd == "FCALL" && len(args) > 0 && strings.HasSuffix(fmt.Sprint(args[0]), "_"+script) && c.p.hung.CompareAndSwap(false, true)
}

// hang reports whether the call hung (its context ended).
func (c *hangConn) hang(ctx context.Context, cmd string, args []any) error {
	if !c.hangs(cmd, args) {
		return nil
	}
	return c.wait(ctx)
}

// wait waits for the reply that never comes, until ctx ends.
func (c *hangConn) wait(ctx context.Context) error {
	close(c.p.hanging)
	<-ctx.Done()
	return fmt.Errorf("read: i/o timeout (no reply: %w)", ctx.Err())
}

// Send marks a pipelined call that gets no reply: the calls of a round
// trip share its fate.
func (c *hangConn) Send(cmd string, args ...any) error {
	if c.hangs(cmd, args) {
		c.sentHung = true
	}
	return c.Conn.Send(cmd, args...)
}

func (c *hangConn) Do(cmd string, args ...any) (any, error) {
	if err := c.hang(context.Background(), cmd, args); err != nil {
		return nil, err
	}
	return c.Conn.Do(cmd, args...)
}

func (c *hangConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	if err := c.hang(ctx, cmd, args); err != nil {
		return nil, err
	}
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

func (c *hangConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := c.hang(ctx, cmd, args); err != nil {
		return nil, err
	}
	return redis.DoWithTimeout(c.Conn, d, cmd, args...)
}

func (c *hangConn) ReceiveContext(ctx context.Context) (any, error) {
	if c.sentHung {
		c.sentHung = false
		return nil, c.wait(ctx)
	}
	return redis.ReceiveContext(c.Conn, ctx)
}

func (c *hangConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

// One move call that never gets its reply stopped every move of the lease
// holder: Run moves one at a time, the call carried Run's context (no
// deadline), and the holder kept the lease, its passes and leases going on
// other connections. No delayed task or retry became due in any queue
// until TCP gave up on the connection (about 15 minutes). Each call of the
// mover is bounded, so the next move goes on.
func TestMoveCallThatGetsNoReplyDoesNotStopTheMover(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.register(t, "A")
	e.enqueueDue(t, e.q, 1000, "d1")

	runHung(t, e, "move")
	// The hung call's bound is 300 ms here: the due task is moved soon
	// after, by a later move of the same reaper.
	waitWaiting(t, e, "d1", "due long ago, not moved within 5 s of a move call that got no reply")
}

// hungInterval is the reaper's interval of the hung-call tests.
const hungInterval = 30 * time.Millisecond

// runHung runs a reaper of e, its calls bounded to 300 ms, whose first
// call of script gets no reply, until that call hangs.
func runHung(t *testing.T, e *env, script string) {
	t.Helper()
	hp := &hangPool{pool: e.pool, script: script, hanging: make(chan struct{})}
	r, err := recovery.New(hp, &recovery.Config{Namespace: e.ns, Interval: hungInterval, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	r.SetCallTimeout(300 * time.Millisecond)
	runReapers(t, r)
	select {
	case <-hp.hanging:
	case <-time.After(5 * time.Second):
		t.Fatalf("the reaper never called %s", script)
	}
}

// waitWaiting waits up to 5 s until id alone waits in e's queue.
func waitWaiting(t *testing.T, e *env, id, what string) {
	t.Helper()
	// The move runs beside the passes and reports only its failures.
	redistest.Eventually(t, 5*time.Second, func() string {
		if w := e.waiting(t, e.q); !reflect.DeepEqual(w, []string{id}) {
			return fmt.Sprintf("%s, %s: waiting = %v, scheduled = %v", id, what, w, e.strings(t, "ZRANGE", e.q.Scheduled, 0, -1))
		}
		return ""
	})
}

// One call of a recovery pass that never gets its reply stopped every
// later pass of the reaper: Run waits for its pass, which carried Run's
// context (no deadline), and a lone reaper (one process, or the peer that
// keeps the lease) recovered nothing more until TCP gave up on the
// connection. Each call of a pass is bounded: the next pass requeues.
func TestPassCallThatGetsNoReplyDoesNotStopRecovery(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(t, e.q, "t1")
	if _, err := e.reg.Register(e.ctx, "Z", time.Minute, "host", 1, []registry.Queue{e.q.Ref}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: "Z", Until: math.MaxInt64, Max: 1}); err != nil {
		t.Fatal(err)
	}
	c := e.pool.Get()
	defer c.Close()
	if _, err := c.Do("DEL", e.k.Keepalive("Z")); err != nil { // Z died holding t1
		t.Fatal(err)
	}

	runHung(t, e, "requeue")
	waitWaiting(t, e, "t1", "held by a dead worker, not requeued within 5 s of a requeue call that got no reply")
}
