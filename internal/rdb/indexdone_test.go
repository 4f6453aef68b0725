package rdb_test

import (
	"context"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// IndexDone's two reads are not one atomic step (a pipeline: another
// client's call may run between them). An index done out of order waits
// in the done set until the processed index passes it, in the call that
// removes it from the set: read the processed index first, and that call
// run between the reads, and the index was in neither place (a consumer
// that ran its job again after a crash would process it twice).
func TestIndexDoneAcrossAnAdvance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.consumer()
	e.dispatch(t, rdb.ConsumerLimits{MaxProcessing: 4, MaxSearchAhead: 6}, 100) // 0..3
	pid := map[string]string{}
	for _, tk := range e.takeFrom(t, c.Queue, "A", 4, false) {
		pid[tk.ID] = tk.PID
	}
	if res, p := e.mark(t, "A", pid["1"], 1); res != rdb.MarkRecorded || p != 0 {
		t.Fatalf("mark 1 = %d, %d; want recorded, 0", res, p)
	}
	// Between the two reads, 0 is done: the processed index moves to 2
	// and 1 leaves the done set.
	g := &steppingGetter{g: routed{pool: e.pool, t: t, ns: e.ns}, between: func() {
		if res, p := e.mark(t, "A", pid["0"], 0); res != rdb.MarkRecorded || p != 2 {
			t.Errorf("mark 0 = %d, %d; want recorded, 2", res, p)
		}
	}}
	done, err := rdb.NewStore(g, e.ns).IndexDone(e.ctx, c, 0, 1)
	if err != nil || !done {
		t.Fatalf("IndexDone(1) = %v, %v across the advance; want true", done, err)
	}
	if g.ran != 1 {
		t.Fatalf("the call between the reads ran %d times", g.ran)
	}
}

// steppingGetter hands out connections that run a pipeline's commands one
// by one, and between the first and the second runs between (once).
type steppingGetter struct {
	g       routed
	between func()
	ran     int
}

func (s *steppingGetter) GetContext(ctx context.Context) (redis.Conn, error) {
	return s.g.GetContext(ctx)
}

func (s *steppingGetter) GetContextForTag(ctx context.Context, tag string) (redis.Conn, error) {
	c, err := s.g.GetContextForTag(ctx, tag)
	if err != nil {
		return nil, err
	}
	return &steppingConn{Conn: c, s: s}, nil
}

type sent struct {
	cmd  string
	args []any
}

type steppingConn struct {
	redis.Conn
	s       *steppingGetter
	pending []sent
	replies []any
	errs    []error
}

func (c *steppingConn) Send(cmd string, args ...any) error {
	c.pending = append(c.pending, sent{cmd, args})
	return nil
}

func (c *steppingConn) Flush() error {
	for i, p := range c.pending {
		r, err := c.Conn.Do(p.cmd, p.args...)
		c.replies, c.errs = append(c.replies, r), append(c.errs, err)
		if i == 0 && c.s.ran == 0 && len(c.pending) > 1 {
			c.s.ran++
			c.s.between()
		}
	}
	c.pending = nil
	return nil
}

func (c *steppingConn) Receive() (any, error) {
	r, err := c.replies[0], c.errs[0]
	c.replies, c.errs = c.replies[1:], c.errs[1:]
	return r, err
}

func (c *steppingConn) ReceiveContext(context.Context) (any, error) { return c.Receive() }

func (c *steppingConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}
