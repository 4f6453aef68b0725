package rdb_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
)

// A store that waits for replicas sends WAIT with each enqueue and end (one
// per pipelined batch), on the connection of the write, so that the replica
// has the write when the call returns; when too few replicas acknowledge,
// the write stays applied on the primary and the call says so with a
// *ReplicaError beside its results. A store that waits for none sends no
// WAIT.
func TestReplicasWait(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	primary, replicas, err := redistest.StartReplicated(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Stop()
	defer replicas[0].Stop()
	pool := primary.Pool()
	defer pool.Close()
	rpool := replicas[0].Pool()
	defer rpool.Close()
	pc, rc := pool.Get(), rpool.Get()
	defer pc.Close()
	defer rc.Close()
	ns := redistest.Namespace()
	q := rdb.NewStore(pool, ns).Queue(rdb.Standalone("rep"))
	llen := func(c redis.Conn) int {
		t.Helper()
		n, err := redis.Int(c.Do("LLEN", q.Waiting))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	ids := func(prefix string, n int) ([]string, [][]byte) {
		out, ps := make([]string, n), make([][]byte, n)
		for i := range out {
			out[i], ps[i] = fmt.Sprintf("%s%d", prefix, i), []byte("p")
		}
		return out, ps
	}

	// Off: no WAIT.
	off := rdb.NewStore(pool, ns)
	before := commandCalls(t, pc, "wait")
	if _, err := off.Enqueue(ctx, q, []string{"off"}, [][]byte{[]byte("p")}, nil); err != nil {
		t.Fatal(err)
	}
	if got := commandCalls(t, pc, "wait") - before; got != 0 {
		t.Fatalf("a store without replicas sent %d WAIT", got)
	}

	on := rdb.NewStore(pool, ns)
	on.SetReplicas(1, 2*time.Second)
	// The library is missing (a server just flushed): the script runs the
	// long way, once, and WAIT follows.
	if _, err := pc.Do("FUNCTION", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	before = commandCalls(t, pc, "wait")
	if _, err := on.Enqueue(ctx, q, []string{"a"}, [][]byte{[]byte("p")}, nil); err != nil {
		t.Fatal(err)
	}
	if n := llen(rc); n != 2 {
		t.Fatalf("the replica has %d waiting after the enqueue returned, want 2", n)
	}
	// One WAIT with the script, one after it ran again once loaded.
	if got := commandCalls(t, pc, "wait") - before; got != 2 {
		t.Fatalf("enqueue after FUNCTION FLUSH: %d WAIT, want 2", got)
	}
	if n := llen(pc); n != 2 {
		t.Fatalf("%d waiting on the primary, want 2 (the enqueue ran once)", n)
	}

	before = commandCalls(t, pc, "wait")
	if _, err := on.Enqueue(ctx, q, []string{"b"}, [][]byte{[]byte("p")}, nil); err != nil {
		t.Fatal(err)
	}
	if got := commandCalls(t, pc, "wait") - before; got != 1 {
		t.Fatalf("enqueue: %d WAIT, want 1", got)
	}

	// A batch split into steps: one WAIT, after the last step (it covers
	// every write before it on the connection's server).
	bids, bps := ids("batch", 2*rdb.MaxEnqueueChunk+1)
	before = commandCalls(t, pc, "wait")
	if n, _, err := on.EnqueueBatch(ctx, q, bids, bps, nil); err != nil || n != len(bids) {
		t.Fatal(n, err)
	}
	if got := commandCalls(t, pc, "wait") - before; got != 1 {
		t.Fatalf("batch in steps: %d WAIT, want 1", got)
	}
	if n := llen(rc); n != 3+len(bids) {
		t.Fatalf("the replica has %d waiting after the batch returned, want %d", n, 3+len(bids))
	}

	// An end waits too.
	taken, err := on.Take(ctx, q, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 1})
	if err != nil || len(taken) != 1 {
		t.Fatal(taken, err)
	}
	before = commandCalls(t, pc, "wait")
	ended, err := on.End(ctx, q, 0, []rdb.Ending{rdb.Done(rdb.KindTask, "W", taken[0].PID, taken[0].ID, nil)})
	if err != nil || ended[0].Outcome != rdb.OutcomeDone {
		t.Fatal(ended, err)
	}
	if got := commandCalls(t, pc, "wait") - before; got != 1 {
		t.Fatalf("end: %d WAIT, want 1", got)
	}
	if n, err := redis.Int(rc.Do("EXISTS", q.Task(taken[0].ID))); err != nil || n != 0 {
		t.Fatalf("the replica still has the ended task's hash (%d, %v)", n, err)
	}

	// Two replicas asked of one: applied, and said so.
	two := rdb.NewStore(pool, ns)
	two.SetReplicas(2, 200*time.Millisecond)
	_, err = two.Enqueue(ctx, q, []string{"c"}, [][]byte{[]byte("p")}, nil)
	var re *rdb.ReplicaError
	if !errors.As(err, &re) || !errors.Is(err, rdb.ErrNotReplicated) || re.Want != 2 || re.Got > 1 {
		t.Fatalf("enqueue with 2 replicas asked of 1: %v", err)
	}
	if n := llen(pc); n != 3+len(bids) {
		t.Fatalf("%d waiting on the primary, want %d (the enqueue was applied)", n, 3+len(bids))
	}
	cids, cps := ids("short", 3)
	if n, _, err := two.EnqueueBatch(ctx, q, cids, cps, nil); !errors.Is(err, rdb.ErrNotReplicated) || n != 3 {
		t.Fatalf("batch with 2 replicas asked of 1: %d, %v", n, err)
	}
	taken, err = two.Take(ctx, q, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 2})
	if err != nil || len(taken) != 2 {
		t.Fatal(taken, err)
	}
	ended, err = two.End(ctx, q, 0, []rdb.Ending{
		rdb.Done(rdb.KindTask, "W", taken[0].PID, taken[0].ID, nil),
		rdb.Done(rdb.KindTask, "W", "not-mine", taken[1].ID, nil),
	})
	if !errors.Is(err, rdb.ErrNotReplicated) || len(ended) != 2 ||
		ended[0].Outcome != rdb.OutcomeDone || ended[1].Outcome != rdb.OutcomeLost {
		t.Fatalf("end with 2 replicas asked of 1: %v, %v", ended, err)
	}
	// A script's own answer wins over the replicas'.
	if _, err := two.Enqueue(ctx, q, []string{"u1"}, [][]byte{[]byte("p")}, &rdb.EnqueueArgs{UniqueKey: "k", UniqueTTL: 60000}); !errors.Is(err, rdb.ErrNotReplicated) {
		t.Fatal(err)
	}
	if _, err := two.Enqueue(ctx, q, []string{"u2"}, [][]byte{[]byte("p")}, &rdb.EnqueueArgs{UniqueKey: "k", UniqueTTL: 60000}); err != rdb.ErrDuplicate {
		t.Fatalf("duplicate enqueue: %v, want ErrDuplicate", err)
	}

	// A take with Ack waits too (one WAIT, in the same round trip): the
	// replica holds the taking when it returns. Without Ack, none.
	before = commandCalls(t, pc, "wait")
	taken, _, err = on.TakeWait(ctx, q, rdb.TakeArgs{Worker: "A", Until: math.MaxInt64, Max: 1, Ack: true})
	if err != nil || len(taken) != 1 {
		t.Fatal(taken, err)
	}
	if got := commandCalls(t, pc, "wait") - before; got != 1 {
		t.Fatalf("take with Ack: %d WAIT, want 1", got)
	}
	if ok, err := redis.Bool(rc.Do("HEXISTS", q.WorkerQueue("A"), taken[0].PID)); err != nil || !ok {
		t.Fatalf("the replica does not hold the taking after the take returned (%v, %v)", ok, err)
	}
	before = commandCalls(t, pc, "wait")
	if _, _, err := on.TakeWait(ctx, q, rdb.TakeArgs{Worker: "A", Until: math.MaxInt64, Max: 1}); err != nil {
		t.Fatal(err)
	}
	if got := commandCalls(t, pc, "wait") - before; got != 0 {
		t.Fatalf("take without Ack: %d WAIT, want 0", got)
	}
	// Too few replicas: taken on the primary, and said so.
	taken, _, err = two.TakeWait(ctx, q, rdb.TakeArgs{Worker: "A", Until: math.MaxInt64, Max: 1, Ack: true})
	if !errors.Is(err, rdb.ErrNotReplicated) || len(taken) != 1 || taken[0].PID == "" {
		t.Fatalf("take with Ack, 2 replicas asked of 1: %v, %v", taken, err)
	}
	if ok, err := redis.Bool(pc.Do("HEXISTS", q.WorkerQueue("A"), taken[0].PID)); err != nil || !ok {
		t.Fatalf("the primary does not hold the taking (%v, %v)", ok, err)
	}
}
