package rdb_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
)

// requeueRecorder records, for each requeue script call sent through it,
// how many keys it declared and how many takings it put back.
type requeueRecorder struct {
	pool  *redis.Pool
	mu    sync.Mutex
	keys  []int
	moved []int
}

func (p *requeueRecorder) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := p.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return recordingConn{Conn: c, p: p}, nil
}

type recordingConn struct {
	redis.Conn
	p *requeueRecorder
}

func (c recordingConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	r, err := redis.DoContext(c.Conn, ctx, cmd, args...)
	if strings.ToUpper(cmd) == "FCALL" && len(args) > 1 && strings.HasSuffix(fmt.Sprint(args[0]), "_requeue") && err == nil {
		n, _ := strconv.Atoi(fmt.Sprint(args[1]))
		vs, _ := redis.Values(r, nil)
		moved := 0
		if len(vs) > 0 {
			moved, _ = redis.Int(vs[0], nil)
		}
		c.p.mu.Lock()
		c.p.keys = append(c.p.keys, n)
		c.p.moved = append(c.p.moved, moved)
		c.p.mu.Unlock()
	}
	return r, err
}

func (c recordingConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

// No requeue script call may hold Redis for more than a few milliseconds
// (the rule of this package's limits): a call costs about ten commands per
// taking it puts back, as a BulkStep's task does, and two per worker it
// names, emptied or not. A call put back up to 1,000 takings (7 to 15 ms
// measured) and named every dead worker of the queue (1,000 dead workers:
// 3 ms a call before any taking moved, in every one of its calls).
func TestRequeueCallsStayShort(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := srv.TagCheckedPool(t)
	ns := redistest.Namespace()
	st := rdb.NewStore(pool, ns)
	q := st.Queue(rdb.Standalone("short"))
	const held, dead = 1000, 1000
	ids := make([]string, held+dead)
	payloads := make([][]byte, len(ids))
	for i := range ids {
		ids[i] = fmt.Sprintf("t%05d", i)
		payloads[i] = []byte("p")
	}
	for lo := 0; lo < len(ids); lo += rdb.MaxEnqueueChunk {
		hi := min(lo+rdb.MaxEnqueueChunk, len(ids))
		if _, _, err := st.EnqueueBatch(ctx, q, ids[lo:hi], payloads[lo:hi], &rdb.EnqueueArgs{}); err != nil {
			t.Fatal(err)
		}
	}
	// A holds 1,000 takings; 1,000 other workers one each.
	for n := 0; n < held; {
		got, err := st.Take(ctx, q, rdb.TakeArgs{Worker: "A", Until: math.MaxInt64, Max: held - n})
		if err != nil {
			t.Fatal(err)
		}
		n += len(got)
	}
	workers := []string{"A"}
	for i := range dead {
		w := fmt.Sprintf("w%04d", i)
		if _, err := st.Take(ctx, q, rdb.TakeArgs{Worker: w, Until: math.MaxInt64, Max: 1}); err != nil {
			t.Fatal(err)
		}
		workers = append(workers, w)
	}

	rec := &requeueRecorder{pool: pool}
	requeued, _, err := rdb.NewStore(rec, ns).Requeue(ctx, q, workers, true)
	if err != nil {
		t.Fatal(err)
	}
	if requeued != held+dead {
		t.Fatalf("Requeue put back %d, want %d", requeued, held+dead)
	}
	const maxTakings, maxWorkers = 250, 100
	for i := range rec.keys {
		if named := rec.keys[i] - 5; named > maxWorkers || rec.moved[i] > maxTakings {
			t.Errorf("requeue call %d of %d named %d workers and put back %d takings; want at most %d and %d",
				i+1, len(rec.keys), named, rec.moved[i], maxWorkers, maxTakings)
		}
	}
}
