package worqr_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// RequeueAllDead requeues each task that was dead when it started once:
// a requeued task that dies again while the call goes on (a poison task,
// its handler failing at once) is not requeued again. It was: each chunk
// read the oldest entries left, and the tasks the earlier chunks had
// requeued came back at the end of the dead set, so the call went round
// them for as long as they kept dying (here: forever), running each
// handler again and again. The progress callback, called after each chunk,
// stands for the workers: every task waiting dies again at once.
func TestRequeueAllDeadRequeuesEachDeadTaskOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	cfg := &worqr.Config{Namespace: ns, DisableEvents: true}
	c, err := worqr.NewClient(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = []byte(fmt.Sprint(i))
	}
	ids, err := c.EnqueueBatch(ctx, "poison", payloads, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := pool.Get()
	defer conn.Close()
	q := rdb.NewKeys(ns).Queue(rdb.Standalone("poison"))
	requeued := map[string]int{}
	// die buries every task waiting in the queue, as a worker whose handler
	// fails each at once would (one ms later than the last death: a dead
	// set is scored by the time of death).
	die := func() {
		for {
			id, err := redis.String(conn.Do("LPOP", q.Waiting))
			if err == redis.ErrNil {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			requeued[id]++
			tm, err := redis.Int64s(conn.Do("TIME"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Do("HSET", q.Task(id), rdb.FieldState, rdb.StateDead); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Do("ZADD", q.Dead, tm[0]*1000+tm[1]/1000, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	die() // n dead tasks
	for id, k := range requeued {
		requeued[id] = k - 1
	}
	time.Sleep(2 * time.Millisecond) // (the call starts after the last death)
	total := 0
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	got, err := in.RequeueAllDead(rctx, "poison", func(done int) {
		die()
		total = done
		if done > 10*n {
			stop() // round and round: give up
		}
	})
	if err != nil && total <= 10*n {
		t.Fatal(err)
	}
	if got != n {
		t.Errorf("RequeueAllDead requeued %d, want %d (each dead task once)", got, n)
	}
	for _, id := range ids {
		if requeued[id] != 1 {
			t.Fatalf("task %s requeued %d times, want once", id, requeued[id])
		}
	}
}
