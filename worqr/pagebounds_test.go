package worqr_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// rangeSize is how many entries an LRANGE, ZRANGE or ZREVRANGE asks for
// (0 for any other command).
func rangeSize(cmd string, args []any) int {
	switch cmd {
	case "LRANGE", "ZRANGE", "ZREVRANGE":
	default:
		return 0
	}
	if len(args) < 3 {
		return 0
	}
	lo, _ := strconv.Atoi(fmt.Sprint(args[1]))
	hi, _ := strconv.Atoi(fmt.Sprint(args[2]))
	return hi - lo + 1
}

// No listing asks Redis for more than a page (1,000 entries) in one
// command, whatever the caller asks for: a Peek of 1,000,000 held Redis
// for 55 ms in one LRANGE, TasksBehind of a million for 44 ms, Dead of
// 200,000 for 8 ms; Inspector.Keys, a cursor, refuses a count over a page
// (an HSCAN of COUNT 1,000,000 over 200,000 keys held Redis for 146 ms).
func TestListingPagesAreBounded(t *testing.T) {
	ctx := context.Background()
	base := srv.Pool()
	t.Cleanup(func() { base.Close() })
	ns := redistest.Namespace()
	var mu sync.Mutex
	biggest := map[string]int{}
	note := func(cmd string, args []any) {
		if n := rangeSize(cmd, args); n > 0 {
			mu.Lock()
			biggest[cmd] = max(biggest[cmd], n)
			mu.Unlock()
		}
	}
	pool := &hookPool{pool: base,
		sent: func(cmd string, args []any) func() { note(cmd, args); return nil },
		done: func(_ redis.Conn, cmd string, args []any, r any, err error) (any, error) {
			note(cmd, args)
			return r, err
		}}
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2500
	ps := make([][]byte, n)
	for i := range ps {
		ps[i] = []byte("x")
	}
	if _, err := c.EnqueueBatch(ctx, "pq", ps, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueBatch(ctx, "pk", ps, &worqr.EnqueueOpts{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	if ids, err := in.TasksBehind(ctx, "pk", "k", 0, 1_000_000); err != nil || len(ids) != n-1 {
		t.Fatalf("TasksBehind(1,000,000) = %d ids, %v; want %d", len(ids), err, n-1)
	}
	if ts, total, err := in.Tasks(ctx, "pq", worqr.StateQueued, 0, 1_000_000); err != nil || len(ts) != n || total != n {
		t.Fatalf("Tasks(queued, 1,000,000) = %d tasks of %d, %v; want the %d", len(ts), total, err, n)
	}
	for _, st := range []worqr.TaskState{worqr.StateDead, worqr.StateScheduled, worqr.StateDone} {
		if ts, total, err := in.Tasks(ctx, "pq", st, 0, 1_000_000); err != nil || len(ts) != 0 || total != 0 {
			t.Fatalf("Tasks(%s, 1,000,000) = %d, %d, %v", st, len(ts), total, err)
		}
	}
	for cmd, size := range biggest {
		if size > 1000 {
			t.Errorf("one %s asked for %d entries; want a page of at most 1,000", cmd, size)
		}
	}
	_, _, _, err = in.Keys(ctx, "pk", 0, 1001)
	if ie, ok := err.(*worqr.InvalidError); !ok || ie.Field != "count" {
		t.Errorf("Keys(count 1001) = %v; want an *InvalidError naming count", err)
	}
	if ks, _, _, err := in.Keys(ctx, "pk", 0, 1000); err != nil || len(ks) != 1 {
		t.Errorf("Keys(count 1000) = %d keys, %v", len(ks), err)
	}
}
