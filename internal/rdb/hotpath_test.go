package rdb_test

import (
	"context"
	"math"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
)

// The plain hot path of a queue that uses none of the optional features
// (unique keys, deadlines, per-task retention, priorities...) costs a fixed
// number of Redis commands, those run inside the scripts included: a
// feature must not add one to it. Not parallel: the counts are the
// server's.
func TestPlainHotPathCommands(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	defer pool.Close()
	c := pool.Get()
	defer c.Close()
	st := rdb.NewStore(pool, redistest.Namespace())
	q := st.Queue(rdb.Standalone("hot"))
	// Warm up: the library loaded, every connection made.
	if _, err := st.Enqueue(ctx, q, []string{"w"}, [][]byte{[]byte("p")}, nil); err != nil {
		t.Fatal(err)
	}
	got, err := st.Take(ctx, q, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 1})
	if err != nil || len(got) != 1 {
		t.Fatal(got, err)
	}
	if _, err := st.End(ctx, q, 0, []rdb.Ending{rdb.Done(rdb.KindTask, "W", got[0].PID, "w", nil)}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		retention int64
		enqueue   int64
		take      int64
		end       int64
	}{
		// enqueue: FCALL, HRANDFIELD (no worker parked), HSET, RPUSH,
		// PUBLISH; take: FCALL, TIME, LPOP,
		// HMGET, INCRBY, HSET (task), HSET (wq), SADD; end: FCALL, HMGET
		// and HDEL of the holdings (ownership: the pid must still map to
		// the task's id), HMGET, DEL (or, kept: HSET, HDEL, PEXPIRE, ZADD,
		// ZREMRANGEBYSCORE, PEXPIRE, and TIME).
		{"no retention", 0, 5, 8, 5},
		{"queue retention", 60000, 5, 8, 11},
	} {
		before := commandCount(t, c)
		if _, err := st.Enqueue(ctx, q, []string{"a" + tc.name}, [][]byte{[]byte("p")}, nil); err != nil {
			t.Fatal(err)
		}
		enq := commandCount(t, c) - before
		before = commandCount(t, c)
		got, err := st.Take(ctx, q, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 1})
		if err != nil || len(got) != 1 {
			t.Fatal(got, err)
		}
		take := commandCount(t, c) - before
		before = commandCount(t, c)
		if _, err := st.End(ctx, q, tc.retention, []rdb.Ending{rdb.Done(rdb.KindTask, "W", got[0].PID, got[0].ID, nil)}); err != nil {
			t.Fatal(err)
		}
		end := commandCount(t, c) - before
		t.Logf("%s: enqueue %d, take %d, end %d commands", tc.name, enq, take, end)
		if enq != tc.enqueue || take != tc.take || end != tc.end {
			t.Errorf("%s: enqueue %d, take %d, end %d commands; want %d, %d, %d", tc.name, enq, take, end, tc.enqueue, tc.take, tc.end)
		}
	}
	// A hand-off to a parked worker: the enqueue is FCALL, HRANDFIELD,
	// LLEN (nothing waits), TIME, HLEN (the worker's holdings), INCRBY (the
	// pid), HSET (the task, taken), HSET (the holdings), PUBLISH; no take
	// follows.
	if got, err := st.Take(ctx, q, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 2, Park: 2}); err != nil || len(got) != 0 {
		t.Fatal(got, err)
	}
	before := commandCount(t, c)
	if _, err := st.Enqueue(ctx, q, []string{"handed"}, [][]byte{[]byte("p")}, nil); err != nil {
		t.Fatal(err)
	}
	if n := commandCount(t, c) - before; n != 9 {
		t.Errorf("enqueue handed to a parked worker: %d commands, want 9", n)
	}
	if n, _ := redis.Int(c.Do("HLEN", q.WorkerQueue("W"))); n != 1 {
		t.Errorf("the parked worker holds %d takings, want 1", n)
	}
}

// Metadata costs no command: a take of a flow child that has metadata runs
// as many commands as one of a child without (the field rides in the HMGET
// the take makes anyway). Not parallel: the counts are the server's.
func TestChildMetaCommands(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	defer pool.Close()
	c := pool.Get()
	defer c.Close()
	st := rdb.NewStore(pool, redistest.Namespace())
	s1 := st.Queue(rdb.QueueRef{Tag: "F", Name: "s1"})
	c1 := st.Queue(rdb.QueueRef{Tag: "F", Name: "c1"})
	ref := rdb.FlowRef{RetentionMillis: 60000}
	if ok, err := st.FlowStartMeta(ctx, s1, "r1", nil, "m", ref); err != nil || !ok {
		t.Fatal(ok, err)
	}
	got, err := st.Take(ctx, s1, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 1, Stage: true})
	if err != nil || len(got) != 1 {
		t.Fatal(got, err)
	}
	e := rdb.Done(rdb.KindStage, "W", got[0].PID, "r1", nil)
	e.Stage = &rdb.StageEnd{RunRetentionMs: 60000, Children: []rdb.Child{
		{ID: "r1.a", Queue: "c1", Payload: []byte("p"), Meta: `{"traceparent":"00-x"}`},
		{ID: "r1.b", Queue: "c1", Payload: []byte("p")},
	}}
	if _, err := st.End(ctx, s1, 0, []rdb.Ending{e}); err != nil {
		t.Fatal(err)
	}
	var counts []int64
	for _, want := range []string{`{"traceparent":"00-x"}`, ""} {
		before := commandCount(t, c)
		got, err := st.Take(ctx, c1, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 1, Child: true})
		if err != nil || len(got) != 1 || got[0].Meta != want || string(got[0].Payload) != "p" {
			t.Fatalf("child take: %+v, %v; want meta %q", got, err, want)
		}
		counts = append(counts, commandCount(t, c)-before)
	}
	t.Logf("child take: %d commands with metadata, %d without", counts[0], counts[1])
	if counts[0] != counts[1] {
		t.Errorf("child take: %d commands with metadata, %d without; want the same", counts[0], counts[1])
	}
}
