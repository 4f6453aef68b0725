package worqr_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// bigCalls is a pool on base that records the biggest command sent with
// Do (by the bytes of its arguments) and holds the first two commands of at
// least size bytes (a group's calls in flight) until hold is closed, so
// that the calls behind them queue up in their group. held counts the
// arguments of size bytes or more of the commands it holds (the items of
// the held group calls).
type bigCalls struct {
	*hookPool
	calls, biggest atomic.Int64
	held           atomic.Int64
	hold           chan struct{}
}

func newBigCalls(base *redis.Pool, size int) *bigCalls {
	p := &bigCalls{hold: make(chan struct{})}
	p.hookPool = &hookPool{pool: base, done: func(c redis.Conn, cmd string, args []any, r any, err error) (any, error) {
		b, big := 0, 0
		for _, a := range args {
			n := 0
			switch v := a.(type) {
			case []byte:
				n = len(v)
			case string:
				n = len(v)
			}
			b += n
			if n >= size {
				big++
			}
		}
		if b < size {
			return r, err
		}
		for {
			old := p.biggest.Load()
			if int64(b) <= old || p.biggest.CompareAndSwap(old, int64(b)) {
				break
			}
		}
		if p.calls.Add(1) <= 2 {
			p.held.Add(int64(big))
			<-p.hold
		}
		return r, err
	}}
	return p
}

// Plain Enqueue calls made at once share one script call (group commit):
// the call is bounded by payload bytes as EnqueueBatch's chunks are
// (MaxEnqueueChunkBytes, 4 MiB, or a single larger payload), not only by
// count: 256 Enqueues of 1 MiB were one call of 256 MiB, which held Redis
// for 300 ms.
func TestCoalescedEnqueuesAreBoundedByBytes(t *testing.T) {
	ctx := context.Background()
	base := srv.Pool()
	t.Cleanup(func() { base.Close() })
	ns := redistest.Namespace()
	const n, size = 24, 1 << 20
	var ready atomic.Int32
	pool := newBigCalls(base, size)
	cfg := worqr.Config{Namespace: ns, DisableEvents: true}
	c, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, base, &cfg)
	p := make([]byte, size)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ready.Add(1)
			if _, err := c.Enqueue(ctx, "big", p, nil); err != nil {
				t.Error(err)
			}
		}()
	}
	// Every caller is in a held call or waits behind them in the group.
	wait(t, 10*time.Second, "every enqueue held or waiting", func() bool {
		return ready.Load() == n && pool.held.Load()+int64(c.EnqueuesWaiting("big")) == n
	})
	close(pool.hold)
	wg.Wait()
	if l := queueLen(t, in, "big"); l != n {
		t.Fatalf("queue holds %d, want %d", l, n)
	}
	if max := pool.biggest.Load(); max > 4<<20+4096 {
		t.Fatalf("one enqueue call carried %d bytes (%d calls for %d payloads of 1 MiB); want at most MaxEnqueueChunkBytes (4 MiB)",
			max, pool.calls.Load(), n)
	}
	t.Logf("%d calls, the biggest %d bytes", pool.calls.Load(), pool.biggest.Load())
}
