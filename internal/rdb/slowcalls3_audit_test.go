//go:build audit

package rdb_test

// Takes of big payloads and of runs with big states: see docs/BENCHMARKS.md,
// "Takes bounded by bytes".

import (
	"bytes"
	"fmt"
	"math"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

func TestAudit3BigTake(t *testing.T) {
	for _, n := range []int{10, 50, 200} {
		e := newEnv(t)
		p := bytes.Repeat([]byte("x"), 1<<20)
		for i := 0; i < n; i++ {
			if _, err := e.st.Enqueue(e.ctx, e.q, []string{fmt.Sprintf("t%d", i)}, [][]byte{p}, nil); err != nil {
				t.Fatal(err)
			}
		}
		e.measure(t, "takes of 1 MiB tasks until none is left", fmt.Sprintf("n=%d, Max=n", n), func() {
			for left := n; left > 0; {
				got, err := e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: n, MaxCrashes: 5})
				if err != nil || len(got) == 0 {
					t.Fatal(err, len(got))
				}
				left -= len(got)
			}
		})
	}
}

func TestAudit3BigRunTake(t *testing.T) {
	f := newFlowEnv(t)
	f.start(t, f.s1, "r1")
	var args []any
	args = append(args, f.s1.Task("r1"))
	for i := 0; i < 64; i++ {
		args = append(args, fmt.Sprintf("big%d", i), bytes.Repeat([]byte("y"), 1<<20))
	}
	f.do(t, "HSET", args...)
	f.measure(t, "take of a run holding 64 x 1 MiB, and ReadRun", "", func() {
		tk := f.takeFrom(t, f.s1, "A", 1, true)
		if tk[0].RunUnread == 0 {
			t.Fatal("the run came inline")
		}
		m, err := f.st.ReadRun(f.ctx, f.s1, "r1")
		if err != nil || len(m) < 64 {
			t.Fatal(err, len(m))
		}
	})
}

func TestAudit3ScanSteps(t *testing.T) {
	f := newFlowEnv(t)
	var args []any
	args = append(args, "big")
	for i := 0; i < 64; i++ {
		args = append(args, fmt.Sprintf("big%d", i), bytes.Repeat([]byte("y"), 1<<20))
	}
	f.do(t, "HSET", args...)
	f.do(t, "CONFIG", "SET", "slowlog-log-slower-than", 0)
	f.do(t, "SLOWLOG", "RESET")
	cur := "0"
	for {
		r, err := redis.Values(f.c.Do("HSCAN", "big", cur, "COUNT", 1))
		if err != nil {
			t.Fatal(err)
		}
		cur, _ = redis.String(r[0], nil)
		kv, _ := redis.Strings(r[1], nil)
		t.Logf("cursor %s: %d entries", cur, len(kv)/2)
		if cur == "0" {
			break
		}
	}
	es, _ := redis.Values(f.c.Do("SLOWLOG", "GET", 100))
	for _, e := range es {
		v, _ := redis.Values(e, nil)
		us, _ := redis.Int64(v[2], nil)
		t.Logf("%d us", us)
	}
}
