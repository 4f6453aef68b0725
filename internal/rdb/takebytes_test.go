package rdb_test

import (
	"bytes"
	"context"
	"strconv"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
)

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
