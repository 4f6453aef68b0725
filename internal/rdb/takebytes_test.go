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
	// 800 KiB, and the third would pass 1 MiB.
	take("t0", "t1")
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
	// HSCAN reads whole buckets of the hash: a step may read a few
	// entries more than its COUNT, never the whole 8 MiB.
	if sizes.max > 4<<20 {
		t.Fatalf("one HSCAN step read %d bytes of the run (%d steps)", sizes.max, sizes.n)
	}
}

// replySizes records the biggest HSCAN reply of the connections it hands
// out.
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
	r *replySizes
}

func (c *sizedConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	v, err := c.routedConn.DoContext(ctx, cmd, args...)
	if cmd == "HSCAN" && err == nil {
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
	return v, err
}
