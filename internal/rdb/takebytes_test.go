package rdb_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// A take hands out at most about 1 MiB of payloads, the first task whatever
// its size: the tasks past it go back to the front of the queue, in their
// order, with a wake-up for the takes that follow (a take of 50 tasks of
// 1 MiB held Redis for 90 ms).
func TestTakeBoundedByBytes(t *testing.T) {
	e := newEnv(t)
	ids := []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6"}
	sizes := []int{400 << 10, 400 << 10, 400 << 10, 400 << 10, 400 << 10, 10, 2 << 20}
	for i, id := range ids {
		if _, err := e.st.Enqueue(e.ctx, e.q, []string{id}, [][]byte{bytes.Repeat([]byte{'x'}, sizes[i])}, nil); err != nil {
			t.Fatal(err)
		}
	}
	l := e.listen(t)

	take := func(want ...string) {
		t.Helper()
		got, err := e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 100, MaxCrashes: 5})
		if err != nil {
			t.Fatal(err)
		}
		var gotIDs []string
		for _, tk := range got {
			gotIDs = append(gotIDs, tk.ID)
			if tk.PID == "" {
				t.Fatalf("%s was buried: %s", tk.ID, tk.Payload)
			}
		}
		if fmt.Sprint(gotIDs) != fmt.Sprint(want) {
			t.Fatalf("take: got %v, want %v", gotIDs, want)
		}
	}
	// 800 KiB, and the third would pass 1 MiB: its size is asked
	// (HSTRLEN), its payload not read.
	before := cmdCalls(t, e.c, "hmget")
	take("t0", "t1")
	if read := cmdCalls(t, e.c, "hmget") - before; read != 2 {
		t.Errorf("the take read %d task hashes to hand out 2 tasks: the one past the bound was read in vain", read)
	}
	if w, err := redis.Strings(e.c.Do("LRANGE", e.q.Waiting, 0, -1)); err != nil || fmt.Sprint(w) != "[t2 t3 t4 t5 t6]" {
		t.Fatalf("waiting after the first take: %v, %v", w, err)
	}
	checkPubs(t, l.collect(t, e), []msg{{"wake", "5"}})
	take("t2", "t3")
	take("t4", "t5")
	take("t6") // 2 MiB: alone, but handed out
	take()
	// Every taking is held by W, once.
	if n, err := redis.Int(e.c.Do("HLEN", e.q.WorkerQueue("W"))); err != nil || n != len(ids) {
		t.Fatalf("holdings: %d, %v", n, err)
	}
}

// Loaded tasks wait packed, with no hash of their own: their size is asked
// from their packed field before they are read.
func TestTakeOfPackedTasksBoundedByBytes(t *testing.T) {
	e := newEnv(t)
	ids := make([]string, 12)
	ps := make([][]byte, 12)
	for i := range ids {
		ids[i] = fmt.Sprintf("dc39abcdefgh%08d", i)
		ps[i] = bytes.Repeat([]byte{'p'}, 400<<10)
	}
	// 4.7 MiB: several steps, written packed.
	if n, _, err := e.st.EnqueueBatch(e.ctx, e.q, ids, ps, nil); err != nil || n != len(ids) {
		t.Fatalf("EnqueueBatch: %d, %v", n, err)
	}
	if k, f := e.q.Packed(ids[2]); e.do(t, "HEXISTS", k, f) != int64(1) {
		t.Fatalf("the tasks were not written packed")
	}
	before := cmdCalls(t, e.c, "hget")
	got, err := e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 100, MaxCrashes: 5})
	if err != nil || fmt.Sprint(takenIDs(got)) != fmt.Sprint(ids[:2]) {
		t.Fatalf("take: %v, %v; want %v", takenIDs(got), err, ids[:2])
	}
	if read := cmdCalls(t, e.c, "hget") - before; read != 2 {
		t.Errorf("the take read %d packed payloads (HGET) to hand out 2: the one past the bound was read in vain", read)
	}
}

// A key batch's tasks behind its head count too: those past the bound stay
// at the front of their key's list, and come with the next head.
func TestKeyBatchBoundedByBytes(t *testing.T) {
	e := newEnv(t)
	for i := 0; i < 6; i++ {
		id := "k" + strconv.Itoa(i)
		e.keyed(t, "A", id, strings.Repeat("y", 300<<10), "")
	}
	// The head and two behind it: 900 KiB; a third would pass 1 MiB.
	first := e.takeBatch(t, "W", 10, 10)
	if got := takenIDs(first); fmt.Sprint(got) != "[k0 k1 k2]" {
		t.Fatalf("first batch: %v", got)
	}
	if l := e.list(t, "A"); fmt.Sprint(l) != "[k3 k4 k5]" {
		t.Fatalf("A's list %v, want [k3 k4 k5]: those cut stay at its front", l)
	}
	// Ended, the key moves up: its next head comes with the rest.
	e.endIn(t, e.q, 60_000, batchOf(rdb.Done(rdb.KindTask, "W", first[0].PID, "k0", nil), first))
	if got := takenIDs(e.takeBatch(t, "W", 10, 10)); fmt.Sprint(got) != "[k3 k4 k5]" {
		t.Fatalf("second batch: %v", got)
	}
}

// A run whose state is too big to come with its take (by bytes, not only by
// fields) is handed out as its number of fields, and ReadRun reads it in
// steps of about 1 MiB: a run holding 64 fields of 1 MiB came in one reply
// of 64 MiB (hundreds of ms of Redis).
func TestRunStateBoundedByBytes(t *testing.T) {
	f := newFlowEnv(t)
	f.start(t, f.s1, "r1")
	args := []any{f.s1.Task("r1")}
	for i := 0; i < 16; i++ {
		args = append(args, "big"+strconv.Itoa(i), bytes.Repeat([]byte{'z'}, 512<<10))
	}
	for i := 0; i < 200; i++ {
		args = append(args, "small"+strconv.Itoa(i), "v")
	}
	f.do(t, "HSET", args...)
	tk := f.takeFrom(t, f.s1, "A", 1, true)
	if tk[0].RunUnread == 0 {
		t.Fatalf("a run of 8 MiB came with its take (%d fields)", len(tk[0].Run))
	}
	sizes := &replySizes{}
	st := rdb.NewStore(sizedGetter{g: routed{pool: f.pool, t: t, ns: f.ns}, r: sizes}, f.ns)
	m, err := st.ReadRun(f.ctx, f.s1, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if len(m) < 216 || len(m["big15"]) != 512<<10 || m["small199"] != "v" {
		t.Fatalf("ReadRun: %d fields", len(m))
	}
	// HSCAN reads whole buckets of the hash, and a step after small
	// entries may meet several big ones: "about 1 MiB" is typical, not a
	// bound (4 to 5 MiB seen in 2% of runs); never the whole 8 MiB.
	if sizes.max >= 8<<20 {
		t.Fatalf("one HSCAN step read %d bytes of the run (%d steps)", sizes.max, sizes.n)
	}
}

// Runs (the Inspector's listing, FindRuns) reads each run in the same
// steps: its first step read a run holding 300 children's results of 1 MiB
// in one command of 300 MiB (182 ms).
func TestRunsReadBigRunsInSteps(t *testing.T) {
	f := newFlowEnv(t)
	for _, id := range []string{"r1", "r2", "r3"} {
		f.start(t, f.s1, id)
	}
	for _, id := range []string{"r1", "r3"} {
		args := []any{f.s1.Task(id)}
		for i := 0; i < 16; i++ {
			args = append(args, "kr:"+id+".c"+strconv.Itoa(i), bytes.Repeat([]byte{'r'}, 512<<10))
		}
		f.do(t, "HSET", args...)
	}
	sizes := &replySizes{}
	st := rdb.NewStore(sizedGetter{g: routed{pool: f.pool, t: t, ns: f.ns}, r: sizes}, f.ns)
	runs, err := st.Runs(f.ctx, f.s1, []string{"r1", "r2", "gone", "r3"})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 3 || runs[0].ID != "r1" || runs[1].ID != "r2" || runs[2].ID != "r3" {
		t.Fatalf("Runs: %d runs", len(runs))
	}
	for _, id := range []string{"r1", "r3"} {
		full, _ := redis.StringMap(f.do(t, "HGETALL", f.s1.Task(id)), nil)
		m, err := f.st.ReadRun(f.ctx, f.s1, id)
		if err != nil || len(m) != len(full) {
			t.Fatalf("%s: %d fields read, %d stored (%v)", id, len(m), len(full), err)
		}
	}
	if sizes.n == 0 || sizes.max >= 8<<20 { // (see TestRunStateBoundedByBytes)
		t.Fatalf("one HSCAN step of Runs read %d bytes (%d steps)", sizes.max, sizes.n)
	}
}

// replySizes records the biggest HSCAN reply of the connections it hands
// out, sent alone or in a pipeline.
type replySizes struct {
	max, n int
}

type sizedGetter struct {
	g routed
	r *replySizes
}

func (s sizedGetter) GetContext(ctx context.Context) (redis.Conn, error) { return s.g.GetContext(ctx) }

func (s sizedGetter) GetContextForTag(ctx context.Context, tag string) (redis.Conn, error) {
	c, err := s.g.GetContextForTag(ctx, tag)
	if err != nil {
		return nil, err
	}
	return &sizedConn{routedConn: c.(*routedConn), r: s.r}, nil
}

type sizedConn struct {
	*routedConn
	r    *replySizes
	sent []string // commands sent, not received yet
}

func (c *sizedConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	v, err := c.routedConn.DoContext(ctx, cmd, args...)
	c.record(cmd, v, err)
	return v, err
}

func (c *sizedConn) Send(cmd string, args ...any) error {
	c.sent = append(c.sent, cmd)
	return c.routedConn.Send(cmd, args...)
}

func (c *sizedConn) ReceiveContext(ctx context.Context) (any, error) {
	v, err := c.routedConn.ReceiveContext(ctx)
	if len(c.sent) > 0 {
		c.record(c.sent[0], v, err)
		c.sent = c.sent[1:]
	}
	return v, err
}

func (c *sizedConn) record(cmd string, v any, err error) {
	if cmd != "HSCAN" || err != nil {
		return
	}
	size := 0
	if r, _ := redis.Values(v, nil); len(r) == 2 {
		kv, _ := redis.ByteSlices(r[1], nil)
		for _, b := range kv {
			size += len(b)
		}
	}
	c.r.n++
	c.r.max = max(c.r.max, size)
}
