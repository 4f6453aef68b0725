package rdb_test

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/xid"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
)

// server returns the package's test server (started in TestMain).
func server(testing.TB) *redistest.Server { return srv }

// Hot-path benchmarks: a store on a pool of one idle connection, one round
// trip per script call, so ns/op is mostly loopback latency plus the
// script's time in Redis; allocs/op is the client's share (store and pool). Run them with
//
//	go test -run '^$' -bench . -skip Big -benchmem ./internal/rdb
//
// Batched benchmarks also report ns/job. The Big benchmarks (calls on big
// data) are in bounds_bench_test.go.

const payloadSize = 100

func benchStore(b *testing.B) (*rdb.Store, rdb.QueueKeys) {
	b.Helper()
	pool := server(b).Pool()
	pool.MaxIdle = 1
	b.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	b.Cleanup(func() { cleanup(b, ns) })
	st := rdb.NewStore(pool, ns)
	return st, st.Queue(rdb.Standalone("bench"))
}

// cleanup deletes every key of namespace ns.
func cleanup(b *testing.B, ns string) {
	c, err := redis.DialURL(server(b).URL)
	if err != nil {
		b.Error(err)
		return
	}
	defer c.Close()
	ctx := context.Background()
	keys, err := redistest.Keys(ctx, c, ns)
	if err != nil {
		b.Error(err)
		return
	}
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		args := make([]any, n)
		for i, k := range keys[:n] {
			args[i] = k
		}
		if _, err := c.Do("UNLINK", args...); err != nil {
			b.Error(err)
			return
		}
		keys = keys[n:]
	}
}

func newIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = xid.New().String()
	}
	return ids
}

func payloads(n int) [][]byte {
	p := make([]byte, payloadSize)
	out := make([][]byte, n)
	for i := range out {
		out[i] = p
	}
	return out
}

func BenchmarkEnqueue(b *testing.B) {
	for _, batch := range []int{1, 100} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			st, qk := benchStore(b)
			ctx := context.Background()
			ids := newIDs(b.N * batch)
			ps := payloads(batch)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := st.Enqueue(ctx, qk, ids[i*batch:(i+1)*batch], ps, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/job")
		})
	}
}

// BenchmarkTakeFinish takes batch tasks and finishes each: one round of the
// worker's hot path (enqueue excluded, done before the timer starts).
func BenchmarkTakeFinish(b *testing.B) {
	for _, batch := range []int{1, 16} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			st, qk := benchStore(b)
			ctx := context.Background()
			total := b.N * batch
			ids := newIDs(total)
			for i := 0; i < total; i += 1000 {
				j := min(i+1000, total)
				if _, err := st.Enqueue(ctx, qk, ids[i:j], payloads(j-i), nil); err != nil {
					b.Fatal(err)
				}
			}
			const w = "bench-worker"
			one := make([]rdb.Ending, 1)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				taken, err := st.Take(ctx, qk, rdb.TakeArgs{Worker: w, Until: math.MaxInt64, Max: batch, MaxCrashes: 5})
				if err != nil {
					b.Fatal(err)
				}
				if len(taken) != batch {
					b.Fatalf("took %d, want %d", len(taken), batch)
				}
				for _, t := range taken {
					one[0] = rdb.Done(rdb.KindTask, w, t.PID, t.ID, nil)
					if _, err := st.End(ctx, qk, 0, one); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(total), "ns/job")
		})
	}
}

// BenchmarkTakeFinishMany is BenchmarkTakeFinish with the batch's endings
// sent as one End call, as the worker's group commit does.
func BenchmarkTakeFinishMany(b *testing.B) {
	for _, batch := range []int{1, 16} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			st, qk := benchStore(b)
			ctx := context.Background()
			total := b.N * batch
			ids := newIDs(total)
			for i := 0; i < total; i += 1000 {
				j := min(i+1000, total)
				if _, err := st.Enqueue(ctx, qk, ids[i:j], payloads(j-i), nil); err != nil {
					b.Fatal(err)
				}
			}
			const w = "bench-worker"
			es := make([]rdb.Ending, batch)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				takeEnd(b, st, qk, rdb.TakeArgs{Worker: w, Until: math.MaxInt64, Max: batch, MaxCrashes: 5}, es)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(total), "ns/job")
		})
	}
}

// takeEnd takes len(es) tasks of qk with a (it must find them) and ends
// them all done in one End call, as a worker's group commit does.
func takeEnd(b *testing.B, st *rdb.Store, qk rdb.QueueKeys, a rdb.TakeArgs, es []rdb.Ending) {
	ctx := context.Background()
	taken, err := st.Take(ctx, qk, a)
	if err != nil {
		b.Fatal(err)
	}
	if len(taken) != len(es) {
		b.Fatalf("took %d, want %d", len(taken), len(es))
	}
	for j, t := range taken {
		es[j] = rdb.Done(rdb.KindTask, a.Worker, t.PID, t.ID, nil)
	}
	if _, err := st.End(ctx, qk, 0, es); err != nil {
		b.Fatal(err)
	}
}

var (
	sinkKeys rdb.QueueKeys
	sinkKey  string
)

func BenchmarkKeys(b *testing.B) {
	keys := rdb.NewKeys("worqr")
	ref := rdb.Standalone("emails")
	b.Run("Queue", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			sinkKeys = keys.Queue(ref)
		}
	})
	qk := keys.Queue(ref)
	id := xid.New().String()
	b.Run("Task", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			sinkKey = qk.Task(id)
		}
	})
}

// scriptUsec is the server's time in script calls so far (INFO
// commandstats: FCALL's usec, its inner commands included).
func scriptUsec(b *testing.B, c redis.Conn) float64 {
	b.Helper()
	info, err := redis.String(c.Do("INFO", "commandstats"))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_fcall:"); ok {
			for _, f := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					n, _ := strconv.ParseFloat(v, 64)
					return n
				}
			}
		}
	}
	return 0
}

// BenchmarkFairTakeEnd takes 50 tasks and ends them in one call, as a
// busy worker's group commit does, on a plain queue and on a fair one
// whose tasks are of one key or of 16 keys, and reports the server's time
// in those script calls per task (redis-µs/job: the take's planning and
// the keyed tasks' larger hashes show there).
func BenchmarkFairTakeEnd(b *testing.B) {
	const batch = 50
	for _, c := range []struct {
		name string
		keys int // 0: a plain queue
	}{{"plain", 0}, {"fair, one key", 1}, {"fair, 16 keys", 16}} {
		b.Run(c.name, func(b *testing.B) {
			st, qk := benchStore(b)
			ctx := context.Background()
			if c.keys > 0 {
				if err := st.WriteKeyPolicy(ctx, qk, rdb.KeyPolicy{Fair: true}); err != nil {
					b.Fatal(err)
				}
			}
			total := b.N * batch
			ids := newIDs(total)
			for i := 0; i < total; i += 1000 {
				j := min(i+1000, total)
				if c.keys == 0 {
					if _, err := st.Enqueue(ctx, qk, ids[i:j], payloads(j-i), nil); err != nil {
						b.Fatal(err)
					}
					continue
				}
				for k := range c.keys {
					var kids []string
					for x := i + k; x < j; x += c.keys {
						kids = append(kids, ids[x])
					}
					if len(kids) == 0 {
						continue
					}
					if _, err := st.EnqueueKey(ctx, qk, "k"+strconv.Itoa(k), kids, payloads(len(kids)), nil, nil); err != nil {
						b.Fatal(err)
					}
				}
			}
			conn, err := redis.DialURL(server(b).URL)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			const w = "bench-worker"
			es := make([]rdb.Ending, batch)
			u0 := scriptUsec(b, conn)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				takeEnd(b, st, qk, rdb.TakeArgs{Worker: w, Until: math.MaxInt64, Max: batch, MaxCrashes: 5, Fair: c.keys > 0}, es)
			}
			b.StopTimer()
			b.ReportMetric((scriptUsec(b, conn)-u0)/float64(total), "redis-µs/job")
		})
	}
}
