package worqr_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// firstLoadLost loses the reply of the first load chunk sent with Do (a
// load sends its first chunk alone): Redis applies it, then the connection
// breaks.
type firstLoadLost struct {
	pool *redis.Pool
	left atomic.Int32
}

func (p *firstLoadLost) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := p.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return &loseConn{Conn: c, p: p}, nil
}

type loseConn struct {
	redis.Conn
	p *firstLoadLost
}

func (c *loseConn) after(cmd string, args []any, r any, err error) (any, error) {
	if err != nil || cmd != "FCALL" || len(args) < 3 || !strings.Contains(fmt.Sprint(args[3]), ":ld:") {
		return r, err
	}
	if c.p.left.Add(-1) == 0 {
		c.Conn.Close()
		return nil, errors.New("injected: connection lost after the first chunk was applied")
	}
	return r, err
}

func (c *loseConn) Do(cmd string, args ...any) (any, error) {
	r, err := c.Conn.Do(cmd, args...)
	return c.after(cmd, args, r, err)
}

func (c *loseConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	r, err := redis.DoContext(c.Conn, ctx, cmd, args...)
	return c.after(cmd, args, r, err)
}

func (c *loseConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	r, err := redis.DoWithTimeout(c.Conn, d, cmd, args...)
	return c.after(cmd, args, r, err)
}

func (c *loseConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

func (c *loseConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

// The reply of a load's first chunk lost after Redis applied it: the load
// reads its checkpoint, as it does when a later chunk's reply is lost, and
// goes on. Before, it stopped with the connection's error and a progress
// saying no checkpoint and nothing enqueued (Checkpointed false: "start it
// again, not with Resume", which is refused), though the chunk was in.
func TestLoadFirstChunkReplyLost(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	lossy := &firstLoadLost{pool: pool}
	lossy.left.Store(1)
	c, err := worqr.NewClient(lossy, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	var in bytes.Buffer
	const n = 1000
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&in, "line-%d\n", i)
	}
	p, err := c.Load(ctx, "lost1", bytes.NewReader(in.Bytes()), &worqr.LoadOptions{Name: "l", Chunk: 100, Window: 4})
	if lossy.left.Load() > 0 {
		t.Fatal("no reply was lost")
	}
	l, lerr := c.Len(ctx, "lost1")
	if lerr != nil {
		t.Fatal(lerr)
	}
	if err != nil {
		t.Fatalf("Load = %+v, %v (the queue holds %d): a lost reply of the first chunk stopped the load", p, err, l)
	}
	if p.Enqueued != n || l != n || !p.Checkpointed {
		t.Fatalf("Load = %+v; the queue holds %d, want %d once each", p, l, n)
	}
}
