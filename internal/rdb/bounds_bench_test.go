package rdb_test

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
)

// The Big benchmarks: calls on big data. No call may hold Redis for more
// than a few milliseconds, whatever a user stores, so that live workers
// keep their keepalives. The limits of bounds.go and the scripts' trims,
// scans and steps keep each call short, and bounds_test.go asserts the
// work each call does; these load data big enough for a call's work to
// grow with it (long queues, huge dead sets, wide flow runs, payloads of
// 1 MiB) and measure how long the call's longest command holds Redis.
//
// A benchmark runs b.N rounds. A round loads its data, runs the call with
// every command in Redis's SLOWLOG (slowlog-log-slower-than 0) and
// deletes the data. It reports, per call (a mean over the rounds):
//
//	worst-cmd-µs  its longest single command, as SLOWLOG timed it (an
//	              FCALL counts as its whole script)
//	cmds/op       the commands Redis ran for it, its scripts' included
//	ns/op         its own time, the loading excluded (B/op and allocs/op
//	              likewise)
//
// and nothing is asserted on time. The timer runs through the whole round
// (ns/op is then replaced by the call's own), so the loading counts
// toward -benchtime: a benchmark whose round takes a second runs it once
// or twice, not a hundred times. The store is a plain one, as a user of
// one redis-server has it.
//
// -rdb.scale multiplies the number of items each loads (1 MiB stays
// 1 MiB). At 1 they load the sizes in the comments; run them once each:
//
//	go test -run '^$' -bench Big ./internal/rdb -rdb.scale 1 -benchtime 1x
//
// The default, 0.05, loads a twentieth of that: a second or two a
// benchmark at the default -benchtime. A size the call's path depends on
// (a run too big to come with its take) has a floor, named in the
// comment. SLOWLOG records every client's commands: run them on the
// private redis-server the package starts.

var benchScale = flag.Float64("rdb.scale", 0.05,
	"the Big benchmarks: multiply the items each loads by this (1: the sizes in their comments)")

// scaled is n times -rdb.scale, at least floor.
func scaled(n, floor int) int { return max(floor, int(math.Round(float64(n)**benchScale))) }

// scaledSet is scaled(n, 1) of each n, without repeats.
func scaledSet(ns ...int) []int {
	var out []int
	for _, n := range ns {
		if s := scaled(n, 1); !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

const mib = 1 << 20

// big returns n bytes of c.
func big(n int, c string) string { return strings.Repeat(c, n) }

// newBenchEnv is a flowEnv whose store is a plain one on the env's pool,
// as a user of one redis-server has it: the tests' routed store checks
// the routing a cluster needs, at a cost to the client.
func newBenchEnv(b *testing.B) *flowEnv {
	f := newFlowEnv(b)
	f.st = rdb.NewStore(f.pool, f.ns)
	return f
}

// benchCalls runs b.N rounds on one namespace: load loads a round's data
// and returns the call to measure; the round then deletes the data.
func benchCalls(b *testing.B, load func(f *flowEnv) func()) {
	f := newBenchEnv(b)
	var c calls
	for range b.N {
		c.measure(b, f.env, load(f))
		f.wipe(b)
	}
	c.report(b)
}

// calls adds up what the measured calls of a benchmark cost.
type calls struct {
	n                 int
	ns, allocs, bytes uint64
	worst, cmds       int64  // sums, over the calls, of the longest command and of the commands
	peak              int64  // the longest command of them all
	peakCmd           string // and its first arguments
}

// slowCmd is one entry of SLOWLOG: a command's time (µs) and arguments.
type slowCmd struct {
	us   int64
	args []string
}

// script is the name of the script c runs by FCALL ("" for another
// command): its function is worqr_<library>_<script>.
func (c slowCmd) script() string {
	if len(c.args) < 2 || !strings.EqualFold(c.args[0], "FCALL") {
		return ""
	}
	parts := strings.SplitN(c.args[1], "_", 3)
	if len(parts) < 3 {
		return ""
	}
	return parts[2]
}

// slowlogLen is how many commands SLOWLOG keeps while a call runs.
const slowlogLen = 1000000

// measure runs call with every command in SLOWLOG, adds its time, its
// allocations and its commands up, and returns its commands.
func (c *calls) measure(b *testing.B, e *env, call func()) []slowCmd {
	b.Helper()
	was := map[string]any{}
	for _, p := range []string{"slowlog-log-slower-than", "slowlog-max-len"} {
		v, err := redis.Strings(e.c.Do("CONFIG", "GET", p))
		if err != nil || len(v) != 2 {
			b.Fatalf("CONFIG GET %s: %v %v", p, v, err)
		}
		was[p] = v[1]
	}
	e.do(b, "CONFIG", "SET", "slowlog-log-slower-than", 0)
	e.do(b, "CONFIG", "SET", "slowlog-max-len", slowlogLen)
	e.do(b, "SLOWLOG", "RESET")
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start := time.Now()
	call()
	d := time.Since(start)
	runtime.ReadMemStats(&m1)
	entries, err := redis.Values(e.c.Do("SLOWLOG", "GET", -1))
	if err != nil {
		b.Fatal(err)
	}
	for p, v := range was {
		e.do(b, "CONFIG", "SET", p, v)
	}
	var out []slowCmd
	worst, whole := int64(0), false
	for _, en := range entries {
		v, _ := redis.Values(en, nil)
		us, _ := redis.Int64(v[2], nil)
		args, _ := redis.Strings(v[3], nil)
		if len(args) > 0 && (strings.EqualFold(args[0], "SLOWLOG") || strings.EqualFold(args[0], "CONFIG")) {
			// The RESET before the call is the oldest entry unless the
			// log dropped some of the call's.
			whole = whole || len(args) > 1 && strings.EqualFold(args[1], "RESET")
			continue
		}
		out = append(out, slowCmd{us: us, args: args})
		worst = max(worst, us)
		if us > c.peak {
			c.peak, c.peakCmd = us, strings.Join(args[:min(3, len(args))], " ")
		}
	}
	if !whole {
		b.Fatalf("the call ran more than %d commands, which SLOWLOG does not keep: lower -rdb.scale", slowlogLen)
	}
	c.n++
	c.ns += uint64(d.Nanoseconds())
	c.allocs += m1.Mallocs - m0.Mallocs
	c.bytes += m1.TotalAlloc - m0.TotalAlloc
	c.worst += worst
	c.cmds += int64(len(out))
	return out
}

// report reports the calls' means; with -v it logs the longest command.
func (c *calls) report(b *testing.B) {
	if c.n == 0 {
		return
	}
	n := float64(c.n)
	b.ReportMetric(float64(c.ns)/n, "ns/op")
	b.ReportMetric(float64(c.allocs)/n, "allocs/op")
	b.ReportMetric(float64(c.bytes)/n, "B/op")
	b.ReportMetric(float64(c.worst)/n, "worst-cmd-µs")
	b.ReportMetric(float64(c.cmds)/n, "cmds/op")
	if testing.Verbose() {
		b.Logf("longest command: %d µs, %s", c.peak, c.peakCmd)
	}
}

// fill sends gen(i) for i in [0,n) pipelined in batches.
func (e *env) fill(t testing.TB, n int, gen func(i int) []any) {
	t.Helper()
	const batch = 2000
	for lo := 0; lo < n; lo += batch {
		hi := min(lo+batch, n)
		for i := lo; i < hi; i++ {
			cmd := gen(i)
			if err := e.c.Send(cmd[0].(string), cmd[1:]...); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.c.Flush(); err != nil {
			t.Fatal(err)
		}
		for i := lo; i < hi; i++ {
			if _, err := e.c.Receive(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// wipe deletes every key of e's namespace. DEL, not UNLINK: values freed
// in the background would share Redis's CPU with the next round's call.
func (e *env) wipe(t testing.TB) {
	t.Helper()
	keys, err := redistest.Keys(e.ctx, e.c, e.ns)
	if err != nil {
		t.Fatal(err)
	}
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		args := make([]any, n)
		for i, k := range keys[:n] {
			args[i] = k
		}
		e.do(t, "DEL", args...)
		keys = keys[n:]
	}
}

// fanOutRun starts run id in s1, takes it (as w) and fans it out to n
// children in c1, id.c0 to id.c<n-1>, in that order.
func (f *flowEnv) fanOutRun(t testing.TB, id, w string, n int, failFast bool) {
	t.Helper()
	f.start(t, f.s1, id)
	tk := f.takeFrom(t, f.s1, w, 1, true)
	cs := make([]rdb.Child, n)
	for i := range cs {
		cs[i] = rdb.Child{ID: id + ".c" + strconv.Itoa(i), Queue: "c1", Payload: []byte("x")}
	}
	f.endIn(t, f.s1, 0, f.stage(rdb.Done(rdb.KindStage, w, tk[0].PID, id, nil), "s2", failFast, nil, cs...))
}

// toFront moves id to the front of queue q's waiting list, so that the
// next take hands it out.
func (f *flowEnv) toFront(t testing.TB, q rdb.QueueKeys, id string) {
	t.Helper()
	f.do(t, "LREM", q.Waiting, 1, id)
	f.do(t, "LPUSH", q.Waiting, id)
}

// bigRun writes n children's records (done, with a small result) into run
// id's hash, as its fan-outs leave them: 3 fields a child.
func (f *flowEnv) bigRun(t testing.TB, id string, n int) {
	t.Helper()
	args := []any{f.s1.Task(id)}
	for i := 0; i < n; i++ {
		c := id + ".c" + strconv.Itoa(i)
		args = append(args, "k:"+c, "done", "kq:"+c, "c1", "kr:"+c, "result-"+c)
	}
	f.do(t, "HSET", args...)
}

// readRuns reads the runs of got handed out unread (RunUnread) with
// Store.ReadRun, as the worker does.
func (f *flowEnv) readRuns(t testing.TB, got []rdb.Taken) {
	t.Helper()
	for i, g := range got {
		if g.RunUnread > 0 {
			m, err := f.st.ReadRun(f.ctx, f.s1, g.ID)
			if err != nil {
				t.Fatal(err)
			}
			got[i].Run = m
		}
	}
}

// Queues and sets of many ids.

// BenchmarkBigRetainedSet: the end of a task with retention whose queue's
// retained set holds n expired entries (1,000,000 at scale 1).
func BenchmarkBigRetainedSet(b *testing.B) {
	n := scaled(1000000, 1)
	b.Run(fmt.Sprintf("end/expired=%d", n), func(b *testing.B) {
		benchCalls(b, func(e *flowEnv) func() {
			past := e.now(b) - 1000
			e.fill(b, n, func(i int) []any {
				return []any{"ZADD", e.q.Retained, past - int64(i%1000), "old" + strconv.Itoa(i)}
			})
			e.do(b, "PEXPIRE", e.q.Retained, 3600000)
			e.enqueue(b, "a")
			tk := e.takeFrom(b, e.q, "A", 1, false)
			return func() { e.endTask(b, 60000, rdb.Done(rdb.KindTask, "A", tk[0].PID, "a", nil)) }
		})
	})
}

// BenchmarkBigWaitingList: calls on a waiting list of n tasks
// (1,000,000 at scale 1) held packed, in a queue with retention:
//
//   - bulk-cancel: one chunk of CancelAll (BulkLevel);
//   - cancel: the Cancel of the task in the middle of the list;
//   - page: the Inspector's page of 100 at offset n/2 (Store.Waiting);
//   - stats: Store.Stats of the queue.
func BenchmarkBigWaitingList(b *testing.B) {
	n := scaled(1000000, 1)
	load := func(e *flowEnv) {
		e.fill(b, n, func(i int) []any { return []any{"RPUSH", e.q.Waiting, fmt.Sprintf("w%07d", i)} })
		e.fill(b, n, func(i int) []any {
			k, fl := e.q.Packed(fmt.Sprintf("w%07d", i))
			return []any{"HSET", k, fl, "payload"}
		})
		e.setCfg(b, e.q, "retention", 60000)
	}
	size := fmt.Sprintf("/waiting=%d", n)
	b.Run("bulk-cancel"+size, func(b *testing.B) {
		benchCalls(b, func(e *flowEnv) func() {
			load(e)
			return func() {
				if _, err := e.st.BulkLevel(e.ctx, e.q, rdb.PlaceWaiting, 0, rdb.BulkCancel); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("cancel"+size, func(b *testing.B) {
		benchCalls(b, func(e *flowEnv) func() {
			load(e)
			return func() {
				r, err := e.st.Cancel(e.ctx, e.q, fmt.Sprintf("w%07d", n/2))
				if err != nil || (r != rdb.CancelRemoved && r != rdb.CancelMarked) {
					b.Fatal(r, err)
				}
			}
		})
	})
	b.Run("page"+size, func(b *testing.B) {
		benchCalls(b, func(e *flowEnv) func() {
			load(e)
			return func() {
				if _, err := e.st.Waiting(e.ctx, e.q, n/2, 100); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("stats"+size, func(b *testing.B) {
		benchCalls(b, func(e *flowEnv) func() {
			load(e)
			return func() {
				if _, err := e.st.Stats(e.ctx, []rdb.QueueKeys{e.q}); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// BenchmarkBigScheduledSet: one Move batch (500) from a scheduled set of
// n tasks all due (1,000,000 at scale 1).
func BenchmarkBigScheduledSet(b *testing.B) {
	n := scaled(1000000, 1)
	b.Run(fmt.Sprintf("move/due=%d", n), func(b *testing.B) {
		benchCalls(b, func(e *flowEnv) func() {
			now := e.now(b)
			e.fill(b, n, func(i int) []any { return []any{"ZADD", e.q.Scheduled, now - 1000, "s" + strconv.Itoa(i)} })
			return func() {
				if _, err := e.st.Move(e.ctx, e.q, 500); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// BenchmarkBigDeadSet: calls on a dead set of n ids (1,000,000 at scale
// 1, at least 2,000), the oldest 2,000 with their tasks' hashes:
//
//   - delete-namespace: DeleteNamespace;
//   - requeue, delete: one chunk (BulkStep) of RequeueAllDead and
//     DeleteAllDead (DeadOldest);
//   - page: the Inspector's page of 100 at offset n/2 (Store.Dead);
//   - bury-over-cap: the End of a task as dead in that queue, over its
//     dead_max of 1,000.
func BenchmarkBigDeadSet(b *testing.B) {
	n := scaled(1000000, 2000)
	load := func(e *flowEnv) {
		e.fill(b, n, func(i int) []any { return []any{"ZADD", e.q.Dead, i, "d" + strconv.Itoa(i)} })
		e.fill(b, 2000, func(i int) []any {
			return []any{"HSET", e.q.Task("d" + strconv.Itoa(i)), "d", "x", "s", "dead", "n", 3}
		})
	}
	size := fmt.Sprintf("/dead=%d", n)
	b.Run("delete-namespace"+size, func(b *testing.B) {
		benchCalls(b, func(e *flowEnv) func() {
			load(e)
			return func() {
				if _, err := e.st.DeleteNamespace(e.ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	for _, op := range []rdb.DeadOp{rdb.DeadRequeue, rdb.DeadDelete} {
		b.Run(string(op)+size, func(b *testing.B) {
			benchCalls(b, func(e *flowEnv) func() {
				load(e)
				return func() {
					if p, err := e.st.DeadOldest(e.ctx, e.q, op, rdb.BulkStep, "", ""); err != nil || p.Handled == 0 {
						b.Fatal(p, err)
					}
				}
			})
		})
	}
	b.Run("page"+size, func(b *testing.B) {
		benchCalls(b, func(e *flowEnv) func() {
			load(e)
			return func() {
				if _, err := e.st.Dead(e.ctx, e.q, n/2, 100); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("bury-over-cap"+size, func(b *testing.B) {
		benchCalls(b, func(e *flowEnv) func() {
			load(e)
			e.setCfg(b, e.q, "dead_max", 1000)
			e.enqueue(b, "z")
			tk := e.takeFrom(b, e.q, "A", 1, false)
			return func() { e.endTask(b, 0, rdb.Dead(rdb.KindTask, "A", tk[0].PID, "z", "x")) }
		})
	})
}

// BenchmarkBigKnownQueues: KnownQueues (SSCAN) of n queues (100,000 at
// scale 1).
func BenchmarkBigKnownQueues(b *testing.B) {
	n := scaled(100000, 1)
	b.Run(fmt.Sprintf("queues=%d", n), func(b *testing.B) {
		benchCalls(b, func(e *flowEnv) func() {
			e.fill(b, n, func(i int) []any { return []any{"SADD", e.k.KnownQueues(), "queue-" + strconv.Itoa(i)} })
			return func() {
				if qs, err := e.st.KnownQueues(e.ctx); err != nil || len(qs) != n {
					b.Fatal(len(qs), err)
				}
			}
		})
	})
}

// BenchmarkBigRateLog: the take of a rate-limited queue whose rate log
// holds n starts that have all aged out (100,000 at scale 1).
func BenchmarkBigRateLog(b *testing.B) {
	n := scaled(100000, 1)
	b.Run(fmt.Sprintf("take/aged-out=%d", n), func(b *testing.B) {
		benchCalls(b, func(e *flowEnv) func() {
			now := e.now(b)
			e.setCfg(b, e.q, "rate", n, "period", 3600000)
			e.fill(b, n, func(i int) []any {
				return []any{"ZADD", e.q.RateLog(), now - 3600000 - 10, "p" + strconv.Itoa(i)}
			})
			e.enqueue(b, "a")
			return func() {
				got, _, err := e.st.TakeWait(e.ctx, e.q, rdb.TakeArgs{Worker: "A", Until: math.MaxInt64, Max: 1, Limited: true})
				if err != nil || len(got) != 1 {
					b.Fatal(len(got), err)
				}
			}
		})
	})
}

// BenchmarkBigKeyTail: enqueues behind the head of a key of a merging
// ordered queue, where a task merges into the key's waiting tail:
//
//   - merge/payloads: one task, the tail holding n payloads (100,000 at
//     scale 1);
//   - merge-batch/tasks: one EnqueueKey of n tasks of the key, no tail
//     yet (1,000 at scale 1);
//   - merge/MiB: one task of 1 MiB, the tail holding m payloads of 1 MiB
//     (1, 2 and 3).
func BenchmarkBigKeyTail(b *testing.B) {
	n := scaled(100000, 1)
	b.Run(fmt.Sprintf("merge/payloads=%d", n), func(b *testing.B) {
		benchCalls(b, func(e *flowEnv) func() {
			e.setCfg(b, e.q, "merge", "1")
			e.keyed(b, "k", "h", "p0", "")
			e.keyed(b, "k", "tail", "p1", "")
			ents := make([]rdb.Entry, n)
			for i := range ents {
				ents[i] = rdb.Entry{Score: float64(i), Payload: []byte("payload-" + strconv.Itoa(i))}
			}
			e.do(b, "HSET", e.q.Task("tail"), rdb.FieldPayload, rdb.EncodeEnvelope("k", ents))
			return func() { e.keyed(b, "k", "new", "another", "") }
		})
	})
	batch := scaled(1000, 1)
	b.Run(fmt.Sprintf("merge-batch/tasks=%d", batch), func(b *testing.B) {
		ids := make([]string, batch)
		ps := make([][]byte, batch)
		for i := range ids {
			ids[i] = "m" + strconv.Itoa(i)
			ps[i] = []byte("payload-" + strconv.Itoa(i))
		}
		benchCalls(b, func(e *flowEnv) func() {
			e.setCfg(b, e.q, "merge", "1")
			e.keyed(b, "k", "h", "p0", "")
			return func() {
				if _, err := e.st.EnqueueKey(e.ctx, e.q, "k", ids, ps, nil, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	p := []byte(big(mib, "y"))
	for m := 1; m <= 3; m++ {
		b.Run(fmt.Sprintf("merge/MiB=%d", m), func(b *testing.B) {
			benchCalls(b, func(e *flowEnv) func() {
				e.setCfg(b, e.q, "merge", "1")
				e.keyed(b, "k", "h", "p0", "")
				e.keyed(b, "k", "tail", "p1", "")
				ents := make([]rdb.Entry, m)
				for i := range ents {
					ents[i] = rdb.Entry{Score: float64(i), Payload: []byte(big(mib-8, "x") + fmt.Sprintf("%08d", i))}
				}
				e.do(b, "HSET", e.q.Task("tail"), rdb.FieldPayload, rdb.EncodeEnvelope("k", ents))
				return func() {
					if _, err := e.st.EnqueueKey(e.ctx, e.q, "k", []string{"new"}, [][]byte{p}, nil, nil); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// Flows.

// BenchmarkBigFanOut: the calls that end or cancel the pending children
// of fanned-out runs. A fan-out has c children (1,000 at scale 1, at
// least 2):
//
//   - fail-fast/others: the End of a child as dead (fail-fast) while its
//     c-1 siblings are pending, in a child queue that also holds m other
//     tasks (100,000 at scale 1);
//   - fail-fast/earlier: the same in a run whose hash keeps the records of
//     9 earlier fan-outs of c children;
//   - fail-fast/runs: one End call failing a child in each of k runs
//     (1, 10 and 100), all in one child queue;
//   - run-cancel/others: CancelRun of a run with c pending children, the
//     child queue also holding m other tasks (0 and 100,000 at scale 1).
func BenchmarkBigFanOut(b *testing.B) {
	c := scaled(1000, 2)
	others := scaled(100000, 1)
	// child is the ending of run's child id, taken as pid by B, as dead.
	child := func(run string, tk rdb.Taken) rdb.Ending {
		e := rdb.Dead(rdb.KindChild, "B", tk.PID, tk.ID, "boom")
		e.Run = run
		return e
	}
	b.Run(fmt.Sprintf("fail-fast/others=%d/children=%d", others, c), func(b *testing.B) {
		benchCalls(b, func(f *flowEnv) func() {
			f.fill(b, others, func(i int) []any { return []any{"RPUSH", f.c1.Waiting, "o" + strconv.Itoa(i)} })
			f.fanOutRun(b, "r1", "A", c, true)
			f.toFront(b, f.c1, "r1.c0")
			tk := f.takeFrom(b, f.c1, "B", 1, false)
			return func() { f.endIn(b, f.c1, 0, child("r1", tk[0])) }
		})
	})
	b.Run(fmt.Sprintf("fail-fast/earlier=9/children=%d", c), func(b *testing.B) {
		benchCalls(b, func(f *flowEnv) func() {
			f.start(b, f.s1, "r1")
			args := []any{f.s1.Task("r1")}
			for i := 0; i < 9*c; i++ {
				id := "r1.old" + strconv.Itoa(i)
				args = append(args, "k:"+id, "done", "kq:"+id, "c2", "kr:"+id, "result-"+id)
			}
			f.do(b, "HSET", args...)
			tk := f.takeFrom(b, f.s1, "A", 1, true)
			cs := make([]rdb.Child, c)
			for i := range cs {
				cs[i] = rdb.Child{ID: "r1.c" + strconv.Itoa(i), Queue: "c1", Payload: []byte("x")}
			}
			f.endIn(b, f.s1, 0, f.stage(rdb.Done(rdb.KindStage, "A", tk[0].PID, "r1", nil), "s2", true, nil, cs...))
			ctk := f.takeFrom(b, f.c1, "B", 1, false)
			return func() { f.endIn(b, f.c1, 0, child("r1", ctk[0])) }
		})
	})
	for _, k := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("fail-fast/runs=%d/children=%d", k, c), func(b *testing.B) {
			benchCalls(b, func(f *flowEnv) func() {
				for r := 0; r < k; r++ {
					f.fanOutRun(b, "r"+strconv.Itoa(r), "A", c, true)
				}
				// c1 holds the runs' children run after run: bring each
				// run's first child to the front.
				for r := k - 1; r >= 0; r-- {
					f.toFront(b, f.c1, "r"+strconv.Itoa(r)+".c0")
				}
				tk := f.takeFrom(b, f.c1, "B", k, false)
				if len(tk) != k {
					b.Fatalf("took %d children, want %d", len(tk), k)
				}
				es := make([]rdb.Ending, k)
				for i, x := range tk {
					es[i] = child(x.Parent, x)
				}
				return func() { f.endIn(b, f.c1, 0, es...) }
			})
		})
	}
	for _, m := range []int{0, others} {
		b.Run(fmt.Sprintf("run-cancel/others=%d/children=%d", m, c), func(b *testing.B) {
			benchCalls(b, func(f *flowEnv) func() {
				f.fill(b, m, func(i int) []any { return []any{"RPUSH", f.c1.Waiting, "o" + strconv.Itoa(i)} })
				f.fanOutRun(b, "r1", "A", c, true)
				return func() { f.runCancel(b, "r1") }
			})
		})
	}
}

// BenchmarkBigStageQueue: CancelRun of a run waiting at the back of a
// stage queue of n runs (1,000,000 at scale 1).
func BenchmarkBigStageQueue(b *testing.B) {
	n := scaled(1000000, 1)
	b.Run(fmt.Sprintf("run-cancel/queue=%d", n), func(b *testing.B) {
		benchCalls(b, func(f *flowEnv) func() {
			f.fill(b, n-1, func(i int) []any { return []any{"RPUSH", f.s1.Waiting, "o" + strconv.Itoa(i)} })
			f.start(b, f.s1, "r1")
			return func() { f.runCancel(b, "r1") }
		})
	})
}

// BenchmarkBigIndex: FindRuns of a property value that n runs share
// (100,000 and 1,000,000 at scale 1).
func BenchmarkBigIndex(b *testing.B) {
	for _, n := range scaledSet(100000, 1000000) {
		b.Run(fmt.Sprintf("find-runs/runs=%d", n), func(b *testing.B) {
			benchCalls(b, func(f *flowEnv) func() {
				f.fill(b, n, func(i int) []any { return []any{"ZADD", f.ix, "inf", "run" + strconv.Itoa(i)} })
				return func() {
					if ids, err := f.st.FindRuns(f.ctx, f.s1, "user", "u1"); err != nil || len(ids) != n {
						b.Fatal(len(ids), err)
					}
				}
			})
		})
	}
}

// BenchmarkBigRun: the reads of a run whose hash keeps the records of n
// children (10,000 at scale 1, ten fan-outs of 1,000; at least 1,400, so
// that their 3 fields a child pass the 4,000 fields a take hands out with
// its takings, RUN_INLINE):
//
//   - read: Store.Run of it;
//   - take: the take of its stage, which hands the run out unread;
//   - take+read: that take and the ReadRun the worker then makes;
//
// and take+read/runs: one take of r stages whose runs keep 1,000
// children's records each (100 at scale 1, at least 2: the first comes
// with the take, the others past RUN_INLINE do not), and the ReadRun of
// each run it handed out unread.
func BenchmarkBigRun(b *testing.B) {
	n := scaled(10000, 1400)
	load := func(f *flowEnv) {
		f.start(b, f.s1, "r1")
		f.bigRun(b, "r1", n)
	}
	size := fmt.Sprintf("/children=%d", n)
	b.Run("read"+size, func(b *testing.B) {
		benchCalls(b, func(f *flowEnv) func() {
			load(f)
			return func() {
				if r, err := f.st.Run(f.ctx, f.s1, "r1"); err != nil || len(r.Children) != n {
					b.Fatal(err)
				}
			}
		})
	})
	for _, read := range []bool{false, true} {
		name := "take"
		if read {
			name = "take+read"
		}
		b.Run(name+size, func(b *testing.B) {
			benchCalls(b, func(f *flowEnv) func() {
				load(f)
				return func() {
					got := f.takeFrom(b, f.s1, "A", 1, true)
					if len(got) != 1 || got[0].RunUnread == 0 {
						b.Fatalf("took %d, the run inline", len(got))
					}
					if read {
						f.readRuns(b, got)
						if len(got[0].Run) < 3*n {
							b.Fatalf("run of %d fields", len(got[0].Run))
						}
					}
				}
			})
		})
	}
	r := scaled(100, 2)
	b.Run(fmt.Sprintf("take+read/runs=%d/children=1000", r), func(b *testing.B) {
		benchCalls(b, func(f *flowEnv) func() {
			for i := 0; i < r; i++ {
				id := "r" + strconv.Itoa(i)
				f.start(b, f.s1, id)
				f.bigRun(b, id, 1000)
			}
			return func() {
				got := f.takeFrom(b, f.s1, "A", r, true)
				f.readRuns(b, got)
				if len(got) != r {
					b.Fatalf("took %d runs, want %d", len(got), r)
				}
				for _, g := range got {
					if len(g.Run) < 3000 {
						b.Fatalf("run of %d fields", len(g.Run))
					}
				}
			}
		})
	})
}

// Payloads, results and states of 1 MiB.

// BenchmarkBigPayloads: calls on tasks of 1 MiB:
//
//   - take: the takes (Max n) of n tasks until none is left (10, 50 and
//     200 at scale 1);
//   - tasks-page: the Inspector's page of n tasks (Store.Tasks) with a
//     payload and a result of 1 MiB each (100 at scale 1);
//   - bulk-cancel: one chunk of CancelAll of n tasks held packed (250 at
//     scale 1): it makes each task's hash from its packed field;
//   - bulk-delete: one chunk of DeleteAllWaiting of n tasks (250 at scale
//     1).
func BenchmarkBigPayloads(b *testing.B) {
	p := big(mib, "p")
	for _, n := range scaledSet(10, 50, 200) {
		b.Run(fmt.Sprintf("take/tasks=%d", n), func(b *testing.B) {
			benchCalls(b, func(e *flowEnv) func() {
				for i := 0; i < n; i++ {
					if _, err := e.st.Enqueue(e.ctx, e.q, []string{"t" + strconv.Itoa(i)}, [][]byte{[]byte(p)}, nil); err != nil {
						b.Fatal(err)
					}
				}
				return func() {
					for left := n; left > 0; {
						got, err := e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: n, MaxCrashes: 5})
						if err != nil || len(got) == 0 {
							b.Fatal(err, len(got))
						}
						left -= len(got)
					}
				}
			})
		})
	}
	page := scaled(100, 1)
	b.Run(fmt.Sprintf("tasks-page/tasks=%d", page), func(b *testing.B) {
		ids := make([]string, page)
		for i := range ids {
			ids[i] = "t" + strconv.Itoa(i)
		}
		benchCalls(b, func(e *flowEnv) func() {
			e.fill(b, page, func(i int) []any { return []any{"HSET", e.q.Task(ids[i]), "d", p, "r", p, "s", "done"} })
			return func() {
				if ts, err := e.st.Tasks(e.ctx, e.q, ids); err != nil || len(ts) != page {
					b.Fatal(len(ts), err)
				}
			}
		})
	})
	n := scaled(250, 1)
	b.Run(fmt.Sprintf("bulk-cancel/packed=%d", n), func(b *testing.B) {
		benchCalls(b, func(e *flowEnv) func() {
			e.fill(b, n, func(i int) []any { return []any{"RPUSH", e.q.Waiting, fmt.Sprintf("w%07d", i)} })
			e.fill(b, n, func(i int) []any {
				k, fl := e.q.Packed(fmt.Sprintf("w%07d", i))
				return []any{"HSET", k, fl, p}
			})
			return func() {
				if _, err := e.st.BulkLevel(e.ctx, e.q, rdb.PlaceWaiting, 0, rdb.BulkCancel); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run(fmt.Sprintf("bulk-delete/tasks=%d", n), func(b *testing.B) {
		benchCalls(b, func(e *flowEnv) func() {
			e.fill(b, n, func(i int) []any { return []any{"RPUSH", e.q.Waiting, "w" + strconv.Itoa(i)} })
			e.fill(b, n, func(i int) []any { return []any{"HSET", e.q.Task("w" + strconv.Itoa(i)), "d", p, "s", "queued"} })
			return func() {
				if _, err := e.st.BulkLevel(e.ctx, e.q, rdb.PlaceWaiting, 0, rdb.BulkDelete); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// BenchmarkBigDeadPayloads: calls on a dead set of n tasks of 1 MiB (250
// at scale 1):
//
//   - requeue-merging: one chunk of RequeueAllDead in a merging ordered
//     queue, the tasks all of one key: each merges into the key's
//     waiting tail, or starts one;
//   - requeue-merging-all: all the calls of that requeue, as
//     Inspector.RequeueAllDead makes them; it also reports the
//     distribution of the dead script's calls (p50-µs, p90-µs, p99-µs,
//     max-µs);
//   - delete: one chunk of DeleteAllDead of tasks holding a payload and a
//     result of 1 MiB each.
func BenchmarkBigDeadPayloads(b *testing.B) {
	n := scaled(250, 1)
	merging := func(e *flowEnv) {
		e.setCfg(b, e.q, "merge", "1")
		e.fill(b, n, func(i int) []any {
			env := rdb.EncodeEnvelope("k", []rdb.Entry{{Score: float64(i), Payload: []byte(big(mib-8, "x") + fmt.Sprintf("%08d", i))}})
			return []any{"HSET", e.q.Task("d" + strconv.Itoa(i)), "d", env, "s", "dead", "ok", "k"}
		})
		e.fill(b, n, func(i int) []any { return []any{"ZADD", e.q.Dead, i, "d" + strconv.Itoa(i)} })
	}
	size := fmt.Sprintf("/tasks=%d", n)
	b.Run("requeue-merging"+size, func(b *testing.B) {
		benchCalls(b, func(e *flowEnv) func() {
			merging(e)
			return func() {
				if _, err := e.st.DeadOldest(e.ctx, e.q, rdb.DeadRequeue, rdb.BulkStep, "", ""); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("requeue-merging-all"+size, func(b *testing.B) {
		e := newBenchEnv(b)
		var c calls
		var us []int64
		for range b.N {
			merging(e)
			all := func() {
				var after, score string
				for {
					p, err := e.st.DeadOldest(e.ctx, e.q, rdb.DeadRequeue, rdb.BulkStep, after, score)
					if err != nil {
						b.Fatal(err)
					}
					after, score = p.After, p.AfterScore
					if p.Read < rdb.BulkStep && !p.Cut {
						return
					}
				}
			}
			for _, x := range c.measure(b, e.env, all) {
				if x.script() == "dead" {
					us = append(us, x.us)
				}
			}
			if left := e.do(b, "ZCARD", e.q.Dead); left != int64(0) {
				b.Fatalf("%v dead left", left)
			}
			e.wipe(b)
		}
		c.report(b)
		if len(us) == 0 {
			b.Fatal("no call of the dead script")
		}
		slices.Sort(us)
		q := func(f float64) float64 { return float64(us[int(f*float64(len(us)-1))]) }
		b.ReportMetric(q(.5), "p50-µs")
		b.ReportMetric(q(.9), "p90-µs")
		b.ReportMetric(q(.99), "p99-µs")
		b.ReportMetric(q(1), "max-µs")
	})
	p := big(mib, "p")
	b.Run("delete"+size, func(b *testing.B) {
		benchCalls(b, func(e *flowEnv) func() {
			e.fill(b, n, func(i int) []any {
				return []any{"HSET", e.q.Task("d" + strconv.Itoa(i)), "d", p, "r", p, "s", "dead"}
			})
			e.fill(b, n, func(i int) []any { return []any{"ZADD", e.q.Dead, i, "d" + strconv.Itoa(i)} })
			return func() {
				if _, err := e.st.DeadOldest(e.ctx, e.q, rdb.DeadDelete, rdb.BulkStep, "", ""); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// BenchmarkBigRunState: calls on flow runs whose state or children's
// results are fields of 1 MiB:
//
//   - take+read/MiB: the take of a stage whose run holds n fields of
//     1 MiB (64 at scale 1, at least 2, so the run is too big to come
//     with the take) and its ReadRun;
//   - runs: Store.Runs (Inspector.Runs, FindRuns) of r runs of f MiB of
//     state each (100 of 1, 10 of 4 and 2 of 30 at scale 1);
//   - runs/child-results: Store.Runs of one run whose k children returned
//     results of 1 MiB (300 at scale 1);
//   - run-retry/child-results: RetryRun of a failed run read whole (no
//     'kl', not in a dead set) whose k children returned results of 1 MiB
//     (20 at scale 1).
func BenchmarkBigRunState(b *testing.B) {
	s := big(mib, "s")
	fields := scaled(64, 2)
	b.Run(fmt.Sprintf("take+read/MiB=%d", fields), func(b *testing.B) {
		benchCalls(b, func(f *flowEnv) func() {
			f.start(b, f.s1, "r1")
			args := []any{f.s1.Task("r1")}
			for i := 0; i < fields; i++ {
				args = append(args, fmt.Sprintf("big%d", i), s)
			}
			f.do(b, "HSET", args...)
			return func() {
				tk := f.takeFrom(b, f.s1, "A", 1, true)
				if len(tk) != 1 || tk[0].RunUnread == 0 {
					b.Fatalf("took %d, the run inline", len(tk))
				}
				if m, err := f.st.ReadRun(f.ctx, f.s1, "r1"); err != nil || len(m) < fields {
					b.Fatal(err, len(m))
				}
			}
		})
	})
	for _, c := range []struct{ runs, fields int }{{scaled(100, 1), 1}, {scaled(10, 1), 4}, {scaled(2, 1), 30}} {
		b.Run(fmt.Sprintf("runs/runs=%d/MiB=%d", c.runs, c.fields), func(b *testing.B) {
			ids := make([]string, c.runs)
			for i := range ids {
				ids[i] = "r" + strconv.Itoa(i)
			}
			benchCalls(b, func(f *flowEnv) func() {
				f.fill(b, c.runs, func(i int) []any {
					args := []any{"HSET", f.s1.Task(ids[i]), "fs", "running", "st", "s1", "s", "queued", "d", ""}
					for j := 0; j < c.fields; j++ {
						args = append(args, "f:big"+strconv.Itoa(j), s)
					}
					return args
				})
				return func() {
					if rs, err := f.st.Runs(f.ctx, f.s1, ids); err != nil || len(rs) != c.runs {
						b.Fatal(len(rs), err)
					}
				}
			})
		})
	}
	// results writes run id's hash, of status st, with k children's
	// records whose results are 1 MiB each.
	results := func(f *flowEnv, id string, k int, st ...any) {
		args := append([]any{f.s1.Task(id)}, st...)
		for i := 0; i < k; i++ {
			c := id + ".c" + strconv.Itoa(i)
			args = append(args, "k:"+c, "done", "kq:"+c, "c1", "kr:"+c, s)
		}
		f.do(b, "HSET", args...)
	}
	k := scaled(300, 1)
	b.Run(fmt.Sprintf("runs/child-results=%d", k), func(b *testing.B) {
		benchCalls(b, func(f *flowEnv) func() {
			results(f, "rk", k, "fs", "running", "st", "s2", "s", "queued", "d", "")
			return func() {
				if rs, err := f.st.Runs(f.ctx, f.s1, []string{"rk"}); err != nil || len(rs) != 1 {
					b.Fatal(err)
				}
			}
		})
	})
	k = scaled(20, 1)
	b.Run(fmt.Sprintf("run-retry/child-results=%d", k), func(b *testing.B) {
		benchCalls(b, func(f *flowEnv) func() {
			results(f, "rw", k, "fs", "failed", "st", "s1", "s", "dead", "d", "", "kg", "1")
			return func() {
				if ok, err := f.st.RunRetry(f.ctx, f.s1, "rw"); err != nil || !ok {
					b.Fatal(ok, err)
				}
			}
		})
	})
}

// BenchmarkBigHashFields: HSCAN (COUNT 1) through a hash of n fields of
// 1 MiB (64 at scale 1, at least 2), as ReadRun steps through a run's big
// state (see runScanner): worst-cmd-µs is the slowest step, cmds/op the
// steps, and max-fields/step the most fields one step returned.
func BenchmarkBigHashFields(b *testing.B) {
	n := scaled(64, 2)
	b.Run(fmt.Sprintf("hscan/MiB=%d", n), func(b *testing.B) {
		most := 0
		benchCalls(b, func(f *flowEnv) func() {
			key := f.s1.Task("big")
			args := []any{key}
			for i := 0; i < n; i++ {
				args = append(args, fmt.Sprintf("big%d", i), bytes.Repeat([]byte("y"), mib))
			}
			f.do(b, "HSET", args...)
			return func() {
				for cur := "0"; ; {
					r, err := redis.Values(f.c.Do("HSCAN", key, cur, "COUNT", 1))
					if err != nil {
						b.Fatal(err)
					}
					cur, _ = redis.String(r[0], nil)
					kv, _ := redis.Strings(r[1], nil)
					most = max(most, len(kv)/2)
					if cur == "0" {
						return
					}
				}
			}
		})
		b.ReportMetric(float64(most), "max-fields/step")
	})
}
