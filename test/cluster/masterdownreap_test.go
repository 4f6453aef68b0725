package cluster_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/rdb/cluster"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/recovery"
	"github.com/worqr/worqr-go/worqr"
)

// TestOneMasterDownRecoveryOfTheOthers: with one master down for good
// (cluster-require-full-coverage no) serving a few known queues, a reaper
// still requeues the takings of a dead worker on a live master within
// about one interval of its keepalive's end.
//
// It failed: each loop of Run passed, then swept (the first time) and
// moved due tasks, one queue after the other; each call to a queue of the
// dead master waited the pool's 2 s for a master of its slot: with 4 such
// queues a loop took about 10 s, and so did recovery, where the
// promise is the keepalive TTL plus one interval.
func TestOneMasterDownRecoveryOfTheOthers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	own, dead, _, qLive := masterDown(t, ctx, "downr-")
	var deadQueues []rdb.QueueRef
	for i := 0; len(deadQueues) < 4 && i < 1000; i++ {
		name := "downr-d" + strconv.Itoa(i)
		if n, err := own.NodeOf(ctx, cluster.TagSlot(name)); err == nil && n == dead {
			deadQueues = append(deadQueues, rdb.Standalone(name))
		}
	}
	pool := clusterPool(t, own.Addrs())
	ns := redistest.Namespace()
	st := rdb.NewStore(pool, ns)
	// A live worker made the dead master's queues known.
	if _, err := st.Register(ctx, "served", 60_000, "test", os.Getpid(), deadQueues); err != nil {
		t.Fatal(err)
	}
	client, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, qLive, []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	killForGood(t, own, dead)

	// A worker takes the task and dies: its keepalive lasts 1 s.
	lk := st.Queue(rdb.Standalone(qLive))
	at, err := st.Register(ctx, "zombie", 1000, "test", os.Getpid(), []rdb.QueueRef{lk.Ref})
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.Take(ctx, lk, rdb.TakeArgs{Worker: "zombie", Until: at + 900, Max: 1})
	if err != nil || len(got) != 1 {
		t.Fatalf("take: %v, %v", got, err)
	}
	r, err := recovery.New(pool, &recovery.Config{Namespace: ns, Interval: 200 * time.Millisecond,
		OnError: func(err error) { t.Logf("%s reaper: %v", time.Now().Format("15:04:05.000"), err) }})
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(context.Background()) // as a worker's: no deadline
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(rctx)
	}()
	defer func() {
		rcancel()
		<-done
	}()
	expired := time.Now().Add(time.Second)
	redistest.WaitFor(t, 30*time.Second, "the dead worker's taking requeued", func() bool {
		c, err := pool.GetContextForTag(ctx, lk.Ref.Tag)
		if err != nil {
			return false
		}
		defer c.Close()
		n, _ := redis.Int(c.Do("LLEN", lk.Waiting))
		return n == 1
	})
	if late := time.Since(expired); late > 3*time.Second {
		t.Fatalf("requeued %v after the keepalive's end (interval 200ms)", late.Round(100*time.Millisecond))
	}
}
