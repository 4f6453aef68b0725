package recovery_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/recovery"
)

// stallPool passes calls to pool, but a call of the move script waits until
// release is closed (or its context ends): a mover that takes long, as one
// that runs a script per known queue does with tens of thousands of them
// (10,000 queues: 0.8 s a move on this machine; 100,000: about 8 s).
type stallPool struct {
	pool    *redis.Pool
	moving  chan struct{} // gets a value when a move call starts waiting
	release chan struct{}
	ended   chan struct{} // closed when the first move call stops waiting
	once    sync.Once
}

func (p *stallPool) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := p.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return &stallConn{Conn: c, p: p}, nil
}

type stallConn struct {
	redis.Conn
	p *stallPool
}

func (c *stallConn) stall(ctx context.Context, cmd string, args []any) {
	if cmd != "FCALL" || len(args) == 0 || !strings.HasSuffix(fmt.Sprint(args[0]), "_move") {
		return
	}
	select {
	case c.p.moving <- struct{}{}:
	default:
	}
	select {
	case <-c.p.release:
	case <-ctx.Done():
	}
	c.p.once.Do(func() { close(c.p.ended) })
}

func (c *stallConn) Do(cmd string, args ...any) (any, error) {
	c.stall(context.Background(), cmd, args)
	return c.Conn.Do(cmd, args...)
}

func (c *stallConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	c.stall(ctx, cmd, args)
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

func (c *stallConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	c.stall(ctx, cmd, args)
	return redis.DoWithTimeout(c.Conn, d, cmd, args...)
}

// Send stalls a pipelined move call (the calls of its round trip wait
// with it).
func (c *stallConn) Send(cmd string, args ...any) error {
	c.stall(context.Background(), cmd, args)
	return c.Conn.Send(cmd, args...)
}

func (c *stallConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

func (c *stallConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

// The documented bound, kill -9 to requeue within TTL + one reaper
// interval, needs a pass every interval. Run made the pass, the sweep and
// the move one after the other, so a move that outlasts the interval (one
// script call per known queue, every interval) delayed every pass by as
// long: the takings of a dead worker waited for the mover. Here the move
// stalls until the test ends, and a worker dies meanwhile.
func TestRunPassesWhileAMoveIsSlow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.register(t, "A")
	e.enqueue(t, e.q, "t1")
	e.take(t, e.q, "A", 1)
	e.enqueueDue(t, e.q, 1000, "d1") // something for the mover to do

	sp := &stallPool{pool: e.pool, moving: make(chan struct{}, 1), release: make(chan struct{}), ended: make(chan struct{})}
	defer close(sp.release)
	const interval = 30 * time.Millisecond
	r, err := recovery.New(sp, &recovery.Config{Namespace: e.ns, Interval: interval, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ticks := countTicks(r)
	runReapers(t, r)
	select {
	case <-sp.moving:
	case <-time.After(5 * time.Second):
		t.Fatal("the reaper never moved")
	}

	e.kill(t, "A")
	for len(ticks.ch) > 0 { // ticks handled before the kill
		<-ticks.ch
	}
	// A tick is reported after its pass. A Run that waits for the stalled
	// move handles its next tick only once the move call gave up (after
	// CallTimeout, 5 s).
	for i := 0; !slices.Contains(e.waiting(t, e.q), "t1"); i++ {
		if i == 20 {
			t.Fatalf("t1 of dead worker A not requeued within %d ticks while a move ran: waiting = %v",
				20, e.waiting(t, e.q))
		}
		ticks.wait(t, 1)
	}
	select {
	case <-sp.ended:
		t.Fatal("t1 of dead worker A was requeued only after the stalled move call ended")
	default:
	}
	if w := e.waiting(t, e.q); !reflect.DeepEqual(w, []string{"t1"}) {
		t.Fatalf("waiting = %v while a move ran, want [t1]", w)
	}
}
