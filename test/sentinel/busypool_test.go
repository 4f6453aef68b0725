package sentinel_test

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/redisconn"
)

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// The periodic check confirms the node in use with ROLE on a connection of
// its own: with PoolOptions.MaxActive reached (every connection busy), it
// took one from the user's pool, failed (pool exhausted), counted each
// sentinel's answer a failure and asked again every 200 ms (found by a
// review). The checks run on the pool's own clock: the test lets three go.
func TestBusyPoolDoesNotFailTheSentinelCheck(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := sentinelGroup(ctx, t)
	logs := &lockedBuf{}
	pool, err := redisconn.NewSentinel(redistest.SentinelMaster, st.Addrs(), &redisconn.Options{
		SentinelCheck: time.Second, MaxActive: 2, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	var held []interface{ Close() error }
	for i := 0; i < 2; i++ {
		c, err := pool.GetContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Do("PING"); err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	// The checks run on the pool's own clock, and each confirms the primary
	// with ROLE on a connection of its own: let three confirm (or fail).
	primary := pool.Primary()
	roles := func() int {
		info, err := redistest.Info(ctx, primary, "commandstats")
		if err != nil {
			t.Fatal(err)
		}
		calls := 0
		if _, rest, ok := strings.Cut(info, "cmdstat_role:calls="); ok {
			calls, _ = strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		}
		return calls
	}
	before := roles()
	redistest.WaitFor(t, 15*time.Second, "three checks of the pool", func() bool {
		return roles() >= before+3 || strings.Contains(logs.String(), "discovery failed")
	})
	for _, c := range held {
		c.Close()
	}
	n := strings.Count(logs.String(), "discovery failed")
	t.Logf("discovery failures in three checks with the pool busy: %d; a sample:\n%s", n, firstLines(logs.String(), 2))
	if n > 0 {
		t.Errorf("a busy pool (MaxActive reached) makes the sentinel check fail (%d times in three checks)", n)
	}
}

func firstLines(s string, n int) string {
	ls := strings.SplitN(s, "\n", n+1)
	if len(ls) > n {
		ls = ls[:n]
	}
	return strings.Join(ls, "\n")
}
