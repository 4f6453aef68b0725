package worqr_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
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
	counted := &hookPool{pool: pool, sent: func(cmd string, args []any) func() {
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
	p, err := c.Load(ctx, "oom", bytes.NewReader(in.Bytes()), &worqr.LoadOptions{Name: "l", Chunk: 100, Window: 4})
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
	p2, err2 := c.Load(context.Background(), "oom", bytes.NewReader(in.Bytes()), &worqr.LoadOptions{Name: "l", Resume: true, Chunk: 100, Window: 4})
	if err2 != nil {
		t.Fatal(err2)
	}
	if l := queueLen(t, insp, "oom"); l != n || p.Enqueued+p2.Enqueued != n {
		t.Fatalf("after the resume the queue holds %d (enqueued %d + %d), want %d", l, p.Enqueued, p2.Enqueued, n)
	}
	t.Logf("stopped after %d tasks (%d chunks sent): %v", p.Enqueued, chunks, err)
}
