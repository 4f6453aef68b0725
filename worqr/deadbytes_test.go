package worqr_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// DeleteAllDead goes on past a call that stopped at its byte bound (a
// chunk that read fewer entries than asked used to mean the dead set was
// done): every dead task is deleted.
func TestDeleteAllDeadGoesOnPastTheByteBound(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	conn := pool.Get()
	defer conn.Close()
	q := rdb.NewKeys(ns).Queue(rdb.Standalone("big"))
	if _, err := conn.Do("SADD", rdb.NewKeys(ns).KnownQueues(), q.Ref.Member()); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("p", 24<<20)
	for i := 0; i < 4; i++ {
		id := "d" + strconv.Itoa(i)
		if _, err := conn.Do("HSET", q.Task(id), rdb.FieldPayload, big, rdb.FieldState, rdb.StateDead); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Do("ZADD", q.Dead, i, id); err != nil {
			t.Fatal(err)
		}
	}
	n, err := in.DeleteAllDead(ctx, "big", nil)
	if err != nil || n != 4 {
		t.Fatalf("DeleteAllDead = %d, %v; want 4", n, err)
	}
	if left, _ := conn.Do("ZCARD", q.Dead); left != int64(0) {
		t.Fatalf("%v left dead", left)
	}
}
