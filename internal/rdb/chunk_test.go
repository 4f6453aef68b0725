package rdb_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
)

// scriptCounter counts the script calls (FCALL, EVALSHA or EVAL) sent through it.
type scriptCounter struct {
	pool  *redis.Pool
	calls atomic.Int64
}

func (p *scriptCounter) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := p.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: c, p: p}, nil
}

type countingConn struct {
	redis.Conn
	p *scriptCounter
}

func (c countingConn) note(cmd string) {
	if cmd = strings.ToUpper(cmd); strings.HasPrefix(cmd, "EVAL") || cmd == "FCALL" {
		c.p.calls.Add(1)
	}
}

func (c countingConn) Do(cmd string, args ...any) (any, error) {
	c.note(cmd)
	return c.Conn.Do(cmd, args...)
}

func (c countingConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	c.note(cmd)
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

func (c countingConn) Send(cmd string, args ...any) error {
	c.note(cmd)
	return c.Conn.Send(cmd, args...)
}

func (c countingConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

// A worker holding more takings than one requeue call may handle is
// requeued in chunks of RequeueChunk, each a script call of its own (no call
// holds Redis for the whole set), and every taking comes back exactly once:
// in each chunk oldest first, and each chunk in front of the one before.
func TestRequeueRunsInChunks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := srv.TagCheckedPool(t)
	ns := redistest.Namespace()
	st := rdb.NewStore(pool, ns)
	q := st.Queue(rdb.Standalone("big"))
	const n = 2*rdb.RequeueChunk + 500
	ids := make([]string, n)
	payloads := make([][]byte, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("t%05d", i)
		payloads[i] = []byte("p")
	}
	if _, _, err := st.EnqueueBatch(ctx, q, ids, payloads, &rdb.EnqueueArgs{}); err != nil {
		t.Fatal(err)
	}
	for held := 0; held < n; {
		got, err := st.Take(ctx, q, rdb.TakeArgs{Worker: "A", Until: math.MaxInt64, Max: rdb.MaxTake})
		if err != nil {
			t.Fatal(err)
		}
		held += len(got)
	}
	// B holds one taking too, so a chunk boundary falls between workers.
	if _, err := st.Enqueue(ctx, q, []string{"b"}, [][]byte{[]byte("p")}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Take(ctx, q, rdb.TakeArgs{Worker: "B", Until: math.MaxInt64, Max: 1}); err != nil {
		t.Fatal(err)
	}

	counter := &scriptCounter{pool: pool}
	counted := rdb.NewStore(counter, ns)
	// Load the scripts first (a fresh server has neither the library nor
	// the script).
	if _, _, err := counted.Requeue(ctx, q, []string{"nobody"}, true); err != nil {
		t.Fatal(err)
	}
	counter.calls.Store(0)
	requeued, cancelled, err := counted.Requeue(ctx, q, []string{"A", "B"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if requeued != n+1 || len(cancelled) != 0 {
		t.Fatalf("Requeue = %d requeued, cancelled %v; want %d, none", requeued, cancelled, n+1)
	}
	if got, want := counter.calls.Load(), int64(n/rdb.RequeueChunk+1); got != want {
		t.Errorf("Requeue made %d script calls for %d takings, want %d (chunks of %d)", got, n+1, want, rdb.RequeueChunk)
	}
	c := pool.Get()
	defer c.Close()
	waiting, err := redis.Strings(c.Do("LRANGE", q.Waiting, 0, -1))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, id := range waiting {
		seen[id]++
	}
	if len(waiting) != n+1 || len(seen) != n+1 || seen["b"] != 1 {
		t.Fatalf("waiting holds %d ids (%d distinct), want each of the %d once", len(waiting), len(seen), n+1)
	}
	// Within each chunk the order is the order of taking. The first
	// chunk put back is now at the back, the last one at the front.
	for end := len(waiting); end > 0; end -= rdb.RequeueChunk {
		chunk := waiting[max(end-rdb.RequeueChunk, 0):end]
		for i := 1; i < len(chunk); i++ {
			if chunk[i-1] > chunk[i] && chunk[i] != "b" && chunk[i-1] != "b" {
				t.Fatalf("chunk ending at %d out of order: %q before %q", end, chunk[i-1], chunk[i])
			}
		}
	}
	for _, key := range []string{q.Holders, q.WorkerQueue("A"), q.WorkerQueue("B")} {
		if n, _ := redis.Int(c.Do("EXISTS", key)); n != 0 {
			t.Errorf("%s survived the requeue", key)
		}
	}
	if again, _, err := st.Requeue(ctx, q, []string{"A", "B"}, true); err != nil || again != 0 {
		t.Errorf("second Requeue = %d, %v; want 0", again, err)
	}
}
