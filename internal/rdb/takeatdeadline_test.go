package rdb_test

import (
	"errors"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// A take at its worker's deadline, not only after it, is refused and
// changes nothing (take.lua: the keepalive was set to live at least until
// the deadline, not past it). The deadline is the Redis time read just
// before the take: on a local server most takes run within that same
// millisecond (the boundary), and the rest after it; each must be refused.
func TestTakeAtTheDeadlineIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(t, "a")
	for i := 0; i < 200; i++ {
		until := e.now(t)
		got, err := e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: "W", Until: until, Max: 1})
		if !errors.Is(err, rdb.ErrExpired) || len(got) != 0 {
			t.Fatalf("take %d with the deadline at Redis's now (%d) = %+v, %v; want rdb.ErrExpired and nothing", i, until, got, err)
		}
	}
	if ids := e.waitingIDs(t); len(ids) != 1 || ids[0] != "a" {
		t.Fatalf("waiting %v, want [a]", ids)
	}
	if n, _ := redis.Int(e.c.Do("EXISTS", e.q.WorkerQueue("W"), e.q.Holders)); n != 0 {
		t.Fatalf("a refused take recorded a taking or a holder (%d keys)", n)
	}
}
