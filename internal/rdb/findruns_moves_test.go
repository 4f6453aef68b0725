package rdb_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// hookPool hands out connections that call before(cmd, args) ahead of
// each command: a test runs its own commands (on another connection) at
// an exact point of a store's call.
type hookPool struct {
	pool   *redis.Pool
	before func(cmd string, args []any)
}

func (p hookPool) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := p.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return hookConn{Conn: c, before: p.before}, nil
}

type hookConn struct {
	redis.Conn
	before func(cmd string, args []any)
}

func (c hookConn) Do(cmd string, args ...any) (any, error) {
	c.before(cmd, args)
	return c.Conn.Do(cmd, args...)
}

func (c hookConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	c.before(cmd, args)
	if cc, ok := c.Conn.(redis.ConnWithContext); ok {
		return cc.DoContext(ctx, cmd, args...)
	}
	return c.Conn.Do(cmd, args...)
}

func (c hookConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	c.before(cmd, args)
	if cc, ok := c.Conn.(redis.ConnWithTimeout); ok {
		return cc.DoWithTimeout(d, cmd, args...)
	}
	return c.Conn.Do(cmd, args...)
}

// TestFindRunsMissesNoRunThatMovesDown: a run that ends while FindRuns
// pages through its index moves down from ranks already read to ranks
// not read yet. Paging by rank (start += RunPage) then passed over the
// run that moved up into the page read next: a run running for the whole
// read was missing from the answer.
func TestFindRunsMissesNoRunThatMovesDown(t *testing.T) {
	// After the first page (r5 r4), the runs named end.
	for _, ended := range [][]string{{"r5"}, {"r4"}, {"r5", "r4"}, {"r4", "r3"}} {
		t.Run(strings.Join(ended, "+"), func(t *testing.T) { findRunsAcrossEnds(t, ended) })
	}
}

func findRunsAcrossEnds(t *testing.T, ended []string) {
	f := newFlowEnv(t)
	defer func(n int) { rdb.RunPage = n }(rdb.RunPage)
	rdb.RunPage = 2
	// Five running runs (+inf): in the index's order from the top, r5 r4
	// r3 r2 r1.
	for i := 1; i <= 5; i++ {
		f.do(t, "ZADD", f.ix, "inf", fmt.Sprintf("r%d", i))
	}
	pool := &redis.Pool{DialContext: func(ctx context.Context) (redis.Conn, error) {
		return redis.DialURLContext(ctx, srv.URL)
	}}
	defer pool.Close()
	pages := 0
	st := rdb.NewStore(hookPool{pool: pool, before: func(cmd string, args []any) {
		if !strings.EqualFold(cmd, "ZRANGE") && !strings.EqualFold(cmd, "EVALSHA") && !strings.EqualFold(cmd, "FCALL") {
			return
		}
		if len(args) == 0 || fmt.Sprint(args[0]) != f.ix && (len(args) < 3 || fmt.Sprint(args[2]) != f.ix) {
			return
		}
		pages++
		if pages == 2 {
			// Each run that ends is scored with its expiry, below every
			// running run.
			for i, id := range ended {
				f.do(t, "ZADD", f.ix, "XX", f.now(t)+60000+int64(i), id)
			}
		}
	}}, f.ns)
	got, err := st.FindRuns(f.ctx, f.s1, "user", "u1")
	if err != nil {
		t.Fatal(err)
	}
	if pages < 2 {
		t.Fatalf("FindRuns read the index in %d pages, want several (RunPage 2)", pages)
	}
	seen := map[string]int{}
	for _, id := range got {
		seen[id]++
	}
	for i := 1; i <= 5; i++ {
		id := fmt.Sprintf("r%d", i)
		if seen[id] != 1 {
			t.Errorf("FindRuns = %v: %s listed %d times, want once", got, id, seen[id])
		}
	}
}

func (c hookConn) ReceiveContext(ctx context.Context) (any, error) {
	if cc, ok := c.Conn.(redis.ConnWithContext); ok {
		return cc.ReceiveContext(ctx)
	}
	return c.Conn.Receive()
}

func (c hookConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	if cc, ok := c.Conn.(redis.ConnWithTimeout); ok {
		return cc.ReceiveWithTimeout(d)
	}
	return c.Conn.Receive()
}
