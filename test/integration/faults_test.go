package integration_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/worqr"
)

// lossyConn runs every command, but loses the reply of the next script
// calls that match (as many as armed says): Redis applied the call, and the
// caller gets an error instead of its reply, as if the connection died
// while the reply was on its way. With cut, the connection is then closed
// for real (the pool drops it and the next call dials a new one).
type lossyConn struct {
	redis.Conn
	armed *atomic.Int32
	match func(args []any) bool
	cut   bool
}

func (c *lossyConn) lose(cmd string, args []any) bool {
	if cmd != "EVALSHA" && cmd != "EVAL" && cmd != "FCALL" || len(args) < 3 || !c.match(args) {
		return false
	}
	if c.armed.Add(-1) < 0 {
		return false
	}
	if c.cut {
		c.Conn.Close()
	}
	return true
}

func (c *lossyConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	r, err := redis.DoWithTimeout(c.Conn, d, cmd, args...)
	if err == nil && c.lose(cmd, args) {
		return nil, errors.New("injected: the reply was lost")
	}
	return r, err
}

func (c *lossyConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	r, err := redis.DoContext(c.Conn, ctx, cmd, args...)
	if err == nil && c.lose(cmd, args) {
		return nil, errors.New("injected: the reply was lost")
	}
	return r, err
}

func (c *lossyConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

func (c *lossyConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

// lossyPool returns a pool (a worqr.ConnGetter) whose connections lose the
// replies of the first armed script calls that match.
func lossyPool(armed *atomic.Int32, cut bool, match func(args []any) bool) *redis.Pool {
	pool := &redis.Pool{
		MaxIdle: 8,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			c, err := redis.DialURLContext(ctx, srv.URL)
			if err != nil {
				return nil, err
			}
			return &lossyConn{Conn: c, armed: armed, match: match, cut: cut}, nil
		},
	}
	DeferCleanup(pool.Close)
	return pool
}

// takeOf matches a take script call on queue: 6 keys, the first its
// waiting list.
func takeOf(queue string) func(args []any) bool {
	return func(args []any) bool {
		// 6 keys, or 7 with the park hash when the worker may park.
		n := fmt.Sprint(args[1])
		return (n == "6" || n == "7") && strings.HasSuffix(fmt.Sprint(args[2]), ":q:"+queue)
	}
}

// endOf matches an end script call on queue that asks for a done: its
// first key is the queue's scheduled set and one of its arguments is the
// ask "done" (the mover, the only other script whose first key is that set,
// has no such argument).
func endOf(queue string) func(args []any) bool {
	return func(args []any) bool {
		if !strings.HasSuffix(fmt.Sprint(args[2]), ":s:"+queue) {
			return false
		}
		for _, a := range args[3:] {
			if s, ok := a.(string); ok && s == string(rdb.AskDone) {
				return true
			}
		}
		return false
	}
}

// slowBeatConn delays every keepalive renewal (SET ... XX) by the current
// value of delay before sending it: a beat whose reply comes late, as after
// a process wakes up while Redis or the network is slow.
type slowBeatConn struct {
	redis.Conn
	delay *atomic.Int64 // nanoseconds
}

func (c *slowBeatConn) wait(cmd string, args []any) {
	if cmd == "SET" && len(args) > 0 && fmt.Sprint(args[len(args)-1]) == "XX" {
		time.Sleep(time.Duration(c.delay.Load()))
	}
}

func (c *slowBeatConn) Do(cmd string, args ...any) (any, error) {
	c.wait(cmd, args)
	return c.Conn.Do(cmd, args...)
}

func (c *slowBeatConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	c.wait(cmd, args)
	return redis.DoWithTimeout(c.Conn, d, cmd, args...)
}

func (c *slowBeatConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	c.wait(cmd, args)
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

func (c *slowBeatConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

func (c *slowBeatConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

// slowBeatPool returns a pool whose keepalive renewals are delayed by delay.
func slowBeatPool(delay *atomic.Int64) *redis.Pool {
	pool := &redis.Pool{
		MaxIdle: 8,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			c, err := redis.DialURLContext(ctx, srv.URL)
			if err != nil {
				return nil, err
			}
			return &slowBeatConn{Conn: c, delay: delay}, nil
		},
	}
	DeferCleanup(pool.Close)
	return pool
}

var _ = Describe("Connection faults", func() {
	It("puts back the takings of a take whose reply was lost, so a live worker never strands them", func(ctx SpecContext) {
		e := newEnv()
		ids := e.enqueueN("lossy", 3)

		var armed atomic.Int32
		armed.Store(1) // the first take's reply is lost
		pool := lossyPool(&armed, false, takeOf("lossy"))

		var done trail
		cfg := e.workerConfig(map[string]worqr.QueueConfig{
			"lossy": one(worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
				done.add(t.ID)
				return nil
			}), 4),
		}, nil)
		cfg.DisableReaper = true // only the worker itself can put the takings back
		e.start(pool, cfg)

		// The lost take moved all three to the worker's worker-queue set;
		// the worker, alive, must notice and release them itself.
		Eventually(ctx, done.get).WithTimeout(5 * time.Second).Should(ConsistOf(ids))
		Expect(armed.Load()).To(BeNumerically("<", 0), "the fault was injected")
		Consistently(ctx, done.get).WithTimeout(300 * time.Millisecond).Should(HaveLen(3))
		Expect(e.waiting("lossy")).To(BeEmpty())
	}, SpecTimeout(15*time.Second))

	// Regression (issue 10): before, a worker whose end call reached Redis
	// but whose reply was lost retried the end, found the taking gone (its
	// own first attempt had ended it) and reported EventLost, so a task
	// that was done looked lost to the application. Now the retry sees its
	// session still alive in Redis (nobody else can have moved the taking)
	// and reports the outcome it asked for: EventDone, once.
	It("reports a task done, once, when the reply of its end was lost after Redis applied it", func(ctx SpecContext) {
		e := newEnv()
		var armed atomic.Int32
		armed.Store(1) // the first end's reply is lost, and its connection cut
		pool := lossyPool(&armed, true, endOf("lostend"))

		var ran trail
		var rec recorder
		cfg := e.workerConfig(map[string]worqr.QueueConfig{
			"lostend": one(recordingHandler(&ran), 1),
		}, &rec)
		cfg.DisableReaper = true
		w := e.start(pool, cfg)
		id := e.enqueue("lostend", "x")

		ends := func() []worqr.EventKind {
			var out []worqr.EventKind
			for _, k := range rec.kinds(id) {
				if k != worqr.EventError {
					out = append(out, k)
				}
			}
			return out
		}
		Eventually(ctx, ends).WithTimeout(5 * time.Second).Should(Equal([]worqr.EventKind{worqr.EventDone}))
		Expect(armed.Load()).To(BeNumerically("<", 0), "the fault was injected")
		Expect(rec.kinds(id)).To(ContainElement(worqr.EventError), "the lost reply was seen as an error")
		Consistently(ctx, ends).WithTimeout(300 * time.Millisecond).Should(Equal([]worqr.EventKind{worqr.EventDone}))
		Expect(ran.get()).To(Equal([]string{id}), "the handler ran once")

		_, err := e.in.Task(ctx, "lostend", id)
		Expect(err).To(MatchError(worqr.ErrTaskNotFound), "the task ended (no retention)")
		Expect(e.waiting("lostend")).To(BeEmpty())
		n, err := redis.Int(e.do("ZCARD", e.qk("lostend").Dead))
		Expect(err).NotTo(HaveOccurred())
		Expect(n).To(BeZero())
		Expect(e.keysWith(":wq:")).To(BeEmpty())
		Expect(e.exists(e.qk("lostend").WorkerQueue(w.ID()))).To(BeFalse())
		Expect(rec.count(worqr.EventKeepaliveLost)).To(BeZero())
	}, SpecTimeout(15*time.Second))
})
