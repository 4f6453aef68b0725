package consumer_test

import (
	"context"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/consumer"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// With Worker.Replicas, a record is acknowledged only once the replicas
// have it, as a worker's ends are: OnProcessed (which tells the next
// consumer of a pipeline to read this one's progress) must never report a
// processed index that a failover can take back. Before, the record sent
// no WAIT and OnProcessed reported it at once; here the replica never got
// it, the primary died, and the promoted replica's processed index was
// below what OnProcessed had said ("it never goes down").
func TestOnProcessedWaitsForReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	primary, replicas, err := redistest.StartReplicated(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	replica := replicas[0]
	t.Cleanup(func() {
		_ = replica.Signal(syscall.SIGCONT)
		primary.Stop()
		replica.Stop()
	})
	pool := &redis.Pool{MaxIdle: 16, DialContext: func(ctx context.Context) (redis.Conn, error) {
		return redis.DialContext(ctx, "tcp", primary.Addr, redis.DialReadTimeout(5*time.Second))
	}}
	defer pool.Close()
	ns := redistest.Namespace()
	var (
		mu       sync.Mutex
		reported uint64
	)
	src := newSource(-1) // no job yet
	wc := worqr.WorkerConfig{
		Config:            worqr.Config{Namespace: ns, DisableEvents: true, Replicas: 1, ReplicaTimeout: 100 * time.Millisecond},
		HeartbeatInterval: 100 * time.Millisecond, HeartbeatTTL: 5 * time.Second,
		ReaperInterval: 50 * time.Millisecond, PollInterval: 50 * time.Millisecond,
	}
	c, err := consumer.New(pool, &consumer.Config[uint64]{Name: "durable", Source: src, Worker: wc,
		Process: func(context.Context, uint64, uint64) error { return nil },
		OnProcessed: func(p uint64) {
			mu.Lock()
			reported = max(reported, p)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = c.Stop(sctx)
	})

	// The replica stops acknowledging; job 0 comes and is done on the
	// primary (recorded, its taking ended).
	if err := replica.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	src.head.Store(0)
	c.Check()
	pc := redis.NewConn(mustDial(t, primary.Addr), 5*time.Second, 5*time.Second)
	defer pc.Close()
	state, task := ns+":{consumer.durable}:cs:consumer.durable", ns+":{consumer.durable}:t:0"
	// Not told through OnProcessed (the replica did not acknowledge) and
	// events are off: the state is read on the primary.
	redistest.WaitFor(t, patience, "job 0 recorded and its taking ended", func() bool {
		p, _ := redis.String(pc.Do("HGET", state, "processed"))
		n, _ := redis.Int(pc.Do("EXISTS", task))
		return p == "1" && n == 0
	})
	if n, _ := redis.Int(pc.Do("EXISTS", state)); n != 1 {
		t.Fatalf("progress hash %s missing on the primary (key names changed?)", state)
	}

	// The primary dies before the replica got the record; the replica
	// takes over.
	primary.Kill()
	if err := replica.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	rc := redis.NewConn(mustDial(t, replica.Addr), 5*time.Second, 5*time.Second)
	defer rc.Close()
	if _, err := rc.Do("REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
	after := uint64(0)
	if v, err := redis.Uint64(rc.Do("HGET", state, "processed")); err == nil {
		after = v
	}
	mu.Lock()
	defer mu.Unlock()
	if reported > after {
		t.Errorf("OnProcessed reported %d; after the failover the processed index is %d: it went down", reported, after)
	}
}

func mustDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return nc
}
