package worqr_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

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
	// The reply of the first load chunk sent with Do (a load sends its
	// first chunk alone) is lost: Redis applies it, then the connection
	// breaks.
	var left atomic.Int32
	left.Store(1)
	lossy := &hookPool{pool: pool, done: func(c redis.Conn, cmd string, args []any, r any, err error) (any, error) {
		if err == nil && isLoadChunk(cmd, args) && left.Add(-1) == 0 {
			c.Close()
			return nil, errors.New("injected: connection lost after the first chunk was applied")
		}
		return r, err
	}}
	cfg := worqr.Config{Namespace: ns}
	c, err := worqr.NewClient(lossy, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	insp := newInspector(t, lossy, &cfg)
	var in bytes.Buffer
	const n = 1000
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&in, "line-%d\n", i)
	}
	p, err := c.Load(ctx, "lost1", bytes.NewReader(in.Bytes()), &worqr.LoadOptions{Name: "l", Chunk: 100, Window: 4})
	if left.Load() > 0 {
		t.Fatal("no reply was lost")
	}
	l := queueLen(t, insp, "lost1")
	if err != nil {
		t.Fatalf("Load = %+v, %v (the queue holds %d): a lost reply of the first chunk stopped the load", p, err, l)
	}
	if p.Enqueued != n || l != n || !p.Checkpointed {
		t.Fatalf("Load = %+v; the queue holds %d, want %d once each", p, l, n)
	}
}
