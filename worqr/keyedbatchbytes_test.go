package worqr_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// scriptSizes records, for each call of a script whose name ends with
// suffix, the bytes of its arguments.
type scriptSizes struct {
	pool   *redis.Pool
	suffix string
	mu     sync.Mutex
	sizes  []int
}

func (p *scriptSizes) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := p.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return &sizingConn{Conn: c, p: p}, nil
}

type sizingConn struct {
	redis.Conn
	p *scriptSizes
}

func (c *sizingConn) note(cmd string, args []any) {
	if cmd != "FCALL" || len(args) == 0 {
		return
	}
	if s, ok := args[0].(string); !ok || !strings.HasSuffix(s, c.p.suffix) {
		return
	}
	n := 0
	for _, a := range args {
		switch v := a.(type) {
		case []byte:
			n += len(v)
		case string:
			n += len(v)
		}
	}
	c.p.mu.Lock()
	c.p.sizes = append(c.p.sizes, n)
	c.p.mu.Unlock()
}

func (c *sizingConn) Do(cmd string, args ...any) (any, error) {
	c.note(cmd, args)
	return c.Conn.Do(cmd, args...)
}

func (c *sizingConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	c.note(cmd, args)
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

func (c *sizingConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	c.note(cmd, args)
	return redis.DoWithTimeout(c.Conn, d, cmd, args...)
}

func (c *sizingConn) Send(cmd string, args ...any) error {
	c.note(cmd, args)
	return c.Conn.Send(cmd, args...)
}

func (c *sizingConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

func (c *sizingConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

// An EnqueueBatch with a Key is cut into calls of at most 4 MiB of
// payloads, as any batch is: it was cut by count only (1,000 tasks a call),
// so 1,000 payloads of 64 KiB were one call of 64 MiB that held Redis for
// about 250 ms (and 1,000 of 1 MiB, the default MaxPayloadBytes, one of a
// gigabyte). The tasks still run in batch order.
func TestKeyedBatchIsCutByBytes(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	sizes := &scriptSizes{pool: pool, suffix: "_enqueue_key"}
	c, err := worqr.NewClient(sizes, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	const n, size = 1000, 8 << 10 // 8 MiB in all
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = append([]byte(fmt.Sprintf("%04d:", i)), bytes.Repeat([]byte("x"), size-5)...)
	}
	ids, err := c.EnqueueBatch(ctx, "kb", payloads, &worqr.EnqueueOpts{Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != n {
		t.Fatalf("%d ids, want %d", len(ids), n)
	}
	sizes.mu.Lock()
	calls := append([]int(nil), sizes.sizes...)
	sizes.mu.Unlock()
	for i, s := range calls {
		if s > 4<<20+64<<10 { // 4 MiB of payloads, and room for ids and keys
			t.Errorf("enqueue_key call %d of %d carried %d bytes: a keyed batch is not cut at 4 MiB", i+1, len(calls), s)
		}
	}
	// Still in batch order: the head, then the others behind it.
	k, err := in.Key(ctx, "kb", "k")
	if err != nil {
		t.Fatal(err)
	}
	if k.Head == nil || k.Head.ID != ids[0] || k.Behind != n-1 {
		t.Fatalf("key k: %+v, want head %s with %d behind", k, ids[0], n-1)
	}
	behind, err := in.TasksBehind(ctx, "kb", "k", 0, n)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range behind {
		if id != ids[i+1] {
			t.Fatalf("task %d behind the head is %s, want %s (batch order)", i, id, ids[i+1])
		}
	}
}
