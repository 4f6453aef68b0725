package worqr_test

import (
	"context"
	"math"
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/worqr"
)

// Inspector.Tasks lists running tasks in take order, by pid: it sorted
// the pids again as text, so a taking of pid 100 came before one of pid 99
// (found by the audit of retries, delays and the dead set).
func TestActiveTasksAreListedInTakeOrder(t *testing.T) {
	ctx := context.Background()
	pool, ns, c, in := freshNamespace(t)
	first, err := c.Enqueue(ctx, "q", []byte("1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.Enqueue(ctx, "q", []byte("2"), nil)
	if err != nil {
		t.Fatal(err)
	}
	st := rdb.NewStore(pool, ns)
	qk := st.Queue(rdb.QueueRef{Tag: "q", Name: "q"})
	conn := pool.Get()
	defer conn.Close()
	if _, err := conn.Do("SET", qk.Seq, 98); err != nil { // the next pids: 99, then 100
		t.Fatal(err)
	}
	taken, err := st.Take(ctx, qk, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 2})
	if err != nil || len(taken) != 2 {
		t.Fatalf("Take: %+v %v", taken, err)
	}
	infos, total, err := in.Tasks(ctx, "q", worqr.StateActive, 0, 10)
	if err != nil || total != 2 || len(infos) != 2 {
		t.Fatalf("Tasks: %d of %d, %v", len(infos), total, err)
	}
	if infos[0].ID != first || infos[1].ID != second {
		t.Errorf("active tasks listed %s, %s; want %s (pid 99), %s (pid 100): take order", infos[0].ID, infos[1].ID, first, second)
	}
}
