package load_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/load"
	"github.com/worqr/worqr-go/worqr"
)

// isLoadChunk reports a load chunk's script call.
func isLoadChunk(cmd string, args []any) bool {
	return cmd == "FCALL" && len(args) > 3 && strings.Contains(fmt.Sprint(args[3]), ":ld:")
}

// A load whose chunks Redis refuses with an error reply (here OOM: the
// server's maxmemory reached after the first chunks) stops with that error,
// its progress counting what the checkpoint says is in, and Resume goes on
// once there is room. Before, a refused chunk past the first was taken for
// a broken connection: the load read its checkpoint and sent the same
// chunks again at once, for ever (thousands of refused calls a second),
// until its context ended.
func TestLoadStopsOnARedisErrorReply(t *testing.T) {
	s, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	pool := s.Pool()
	t.Cleanup(func() { pool.Close() })
	c0 := pool.Get()
	defer c0.Close()
	ns := redistest.Namespace()
	var sent atomic.Int64 // the load chunks sent (pipelined)
	counted := &redistest.HookPool{Pool: pool, Sent: func(cmd string, args []any) func() {
		if isLoadChunk(cmd, args) {
			sent.Add(1)
		}
		return nil
	}}
	cfg := worqr.Config{Namespace: ns}
	c, err := worqr.NewClient(counted, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	insp := newInspector(t, counted, &cfg)
	// Room for a few chunks of 100 tasks of 1 KiB, not for 100 chunks.
	info, err := redis.String(c0.Do("INFO", "memory"))
	if err != nil {
		t.Fatal(err)
	}
	var used int64
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			used, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if _, err := c0.Do("CONFIG", "SET", "maxmemory", used+1<<20); err != nil {
		t.Fatal(err)
	}
	var in bytes.Buffer
	const n = 10_000
	line := strings.Repeat("x", 1000)
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&in, "%d-%s\n", i, line)
	}
	// (The deadline only ends the spin of the code before the fix.)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := load.Run(ctx, c, "oom", bytes.NewReader(in.Bytes()), &load.Options{Name: "l", Chunk: 100, Window: 4})
	chunks := sent.Load()
	if err == nil {
		t.Fatalf("Load = %+v, nil: every line was loaded under maxmemory", p)
	}
	if errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("Load = %+v, %v after %d chunks sent: want it stopped with Redis's OOM error", p, err, chunks)
	}
	l := queueLen(t, insp, "oom")
	if int64(l) != p.Enqueued || !p.Checkpointed {
		t.Fatalf("Load = %+v, %v; the queue holds %d", p, err, l)
	}
	// Room again: Resume loads the rest, each line once.
	if _, err := c0.Do("CONFIG", "SET", "maxmemory", 0); err != nil {
		t.Fatal(err)
	}
	p2, err2 := load.Run(context.Background(), c, "oom", bytes.NewReader(in.Bytes()), &load.Options{Name: "l", Resume: true, Chunk: 100, Window: 4})
	if err2 != nil {
		t.Fatal(err2)
	}
	if l := queueLen(t, insp, "oom"); l != n || p.Enqueued+p2.Enqueued != n {
		t.Fatalf("after the resume the queue holds %d (enqueued %d + %d), want %d", l, p.Enqueued, p2.Enqueued, n)
	}
	t.Logf("stopped after %d tasks (%d chunks sent): %v", p.Enqueued, chunks, err)
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
	// The reply of the first load chunk sent with Do (a load sends its
	// first chunk alone) is lost: Redis applies it, then the connection
	// breaks.
	var left atomic.Int32
	left.Store(1)
	lossy := &redistest.HookPool{Pool: pool, Done: func(c redis.Conn, cmd string, args []any, r any, err error) (any, error) {
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
	p, err := load.Run(ctx, c, "lost1", bytes.NewReader(in.Bytes()), &load.Options{Name: "l", Chunk: 100, Window: 4})
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

// gated blocks its first Read until both loaders have read their
// checkpoint (neither finds one), so that they run at once.
type gated struct {
	r    io.Reader
	wg   *sync.WaitGroup
	once sync.Once
}

func (g *gated) Read(p []byte) (int, error) {
	g.once.Do(func() { g.wg.Done(); g.wg.Wait() })
	return g.r.Read(p)
}

// Two loads under one name at once: each line is enqueued once (the
// checkpoint sees to that), and a load that finds chunks it never lost
// applied by the other stops, saying so. Before, each counted the other's
// chunks as its own: both reported every line enqueued, and the history
// said twice as many tasks as the queue held (found by an audit).
func TestTwoLoadersOfOneName(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	cfg := worqr.Config{Namespace: redistest.Namespace()}
	c, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, pool, &cfg)
	var buf bytes.Buffer
	const n = 3000
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&buf, "line-%d\n", i)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	var res [2]load.Progress
	var errs [2]error
	var done sync.WaitGroup
	for k := 0; k < 2; k++ {
		done.Add(1)
		go func(k int) {
			defer done.Done()
			res[k], errs[k] = load.Run(ctx, c, "ld2", &gated{r: bytes.NewReader(buf.Bytes()), wg: &wg},
				&load.Options{Name: "same", Chunk: 10, Window: 2})
		}(k)
	}
	done.Wait()
	l := queueLen(t, in, "ld2")
	c.Flush() // waits for the publication
	var enqueued int64
	if !redistest.Within(20*time.Second, func() bool {
		h, err := in.History(ctx, "ld2", 3)
		if err != nil {
			t.Fatal(err)
		}
		enqueued = 0
		for _, m := range h {
			enqueued += m.Enqueued
		}
		return enqueued >= int64(l)
	}) {
		t.Fatalf("the history of ld2 counts %d enqueued, want %d", enqueued, l)
	}
	if errs[0] == nil && errs[1] == nil {
		t.Errorf("two loads of one name ran at once and neither was refused")
	}
	if got := res[0].Enqueued + res[1].Enqueued; got != int64(l) {
		t.Errorf("the loads report %d + %d = %d tasks enqueued (errors %v, %v); the queue holds %d", res[0].Enqueued, res[1].Enqueued, got, errs[0], errs[1], l)
	}
	if enqueued != int64(l) {
		t.Errorf("history: %d enqueued, the queue holds %d", enqueued, l)
	}
	t.Logf("queue %d of %d lines; errors: %v / %v", l, n, errs[0], errs[1])
}

// Load refuses a line over Config.MaxPayloadBytes as any bad line: it
// enforced the limit only through the scanner's buffer (at least 64 KiB,
// and MaxPayloadBytes+2 above that), and enqueued such lines (found by an
// audit).
func TestLoadLineOverMaxPayloadBytes(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, MaxPayloadBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, "big", bytes.Repeat([]byte("x"), 101), nil); err == nil {
		t.Fatal("Enqueue accepted 101 bytes")
	}
	for _, size := range []int{101, 1000} {
		in := "ok\n" + string(bytes.Repeat([]byte("x"), size)) + "\n"
		p, err := load.Run(ctx, c, "big", bytes.NewReader([]byte(in)), &load.Options{Name: fmt.Sprintf("l%d", size)})
		if err == nil {
			t.Errorf("Load accepted a line of %d bytes with MaxPayloadBytes 100 (%d enqueued)", size, p.Enqueued)
		}
	}
}
