package rdb_test

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
)

// scriptCommands counts, through MONITOR, the commands each script call of
// the namespace ran inside Redis (the call itself not included).
func scriptCommands(t *testing.T, a *keyAuditor, f func()) map[string]int {
	t.Helper()
	a.calls() // drain
	f()
	marker := "count-" + a.ns
	if _, err := a.keys.Do("ECHO", marker); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	cur := ""
	for {
		r, err := redis.String(redis.ReceiveWithTimeout(a.mon, 5*time.Second))
		if err != nil {
			t.Fatalf("MONITOR: %v", err)
		}
		args := monitorArgs(r)
		if len(args) == 0 {
			continue
		}
		if strings.Contains(r, "[0 lua]") {
			if cur != "" {
				out[cur]++
			}
			continue
		}
		cur = ""
		cmd := strings.ToUpper(args[0])
		if cmd == "ECHO" && len(args) == 2 && args[1] == marker {
			return out
		}
		if (cmd == "FCALL" || cmd == "EVALSHA" || cmd == "EVAL") && len(args) >= 4 && strings.HasPrefix(args[3], a.ns+":") {
			cur = args[1]
			if parts := strings.SplitN(cur, "_", 3); cmd == "FCALL" && len(parts) == 3 {
				cur = parts[2]
			}
		}
	}
}

// TestPlainHotPathCommands pins the commands a plain queue's take and end
// run (no levels, no limits): what priorities and limits must not change.
// Take of k: TIME, LPOP, INCRBY, HSET (wq), SADD, and per task HMGET, HSET;
// end of a done task: HDEL (ownership), HMGET, DEL.
func TestPlainHotPathCommandsByMonitor(t *testing.T) {
	e := newEnv(t)
	st := rdb.NewStore(e.pool, e.ns) // a plain pool: no cluster-safe reads
	a := newKeyAuditor(t, e.ns)
	e.enqueue(t, "t1", "t2", "t3", "t4")
	var got []rdb.Taken
	n := scriptCommands(t, a, func() {
		var err error
		got, err = st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: "A", Until: math.MaxInt64, Max: 3})
		if err != nil {
			t.Fatal(err)
		}
	})
	if n["take"] != 5+2*3 {
		t.Errorf("take of 3 ran %d commands, want %d", n["take"], 5+2*3)
	}
	n = scriptCommands(t, a, func() {
		es := make([]rdb.Ending, len(got))
		for i, g := range got {
			es[i] = rdb.Done(rdb.KindTask, "A", g.PID, g.ID, nil)
		}
		if _, err := st.End(e.ctx, e.q, 0, es); err != nil {
			t.Fatal(err)
		}
	})
	// One HMGET and one HDEL of the worker's holdings for all three (the
	// ownership check, own_all), then HMGET and DEL of each task.
	if n["end"] != 2+2*3 {
		t.Errorf("end of 3 ran %d commands, want %d", n["end"], 2+2*3)
	}
	n = scriptCommands(t, a, func() {
		if _, err := e.st.Enqueue(e.ctx, e.q, []string{"t5"}, [][]byte{[]byte("p")}, nil); err != nil {
			t.Fatal(err)
		}
	})
	if n["enqueue_hand"] != 4 {
		t.Errorf("enqueue of 1 ran %d commands, want 4 (HRANDFIELD of the parked workers, HSET, RPUSH, PUBLISH)", n["enqueue_hand"])
	}
	n = scriptCommands(t, a, func() {
		if _, err := e.st.Enqueue(e.ctx, e.q, []string{"t6", "t7"}, [][]byte{[]byte("p"), []byte("p")}, nil); err != nil {
			t.Fatal(err)
		}
	})
	if n["enqueue_hand"] != 5 {
		t.Errorf("enqueue of 2 ran %d commands, want 5 (HRANDFIELD of the parked workers, 2 HSET, RPUSH, PUBLISH)", n["enqueue_hand"])
	}
}

// TestRateLogTrimIsBounded: the starts of a rate log leave its window in
// bulk (a burst, then an idle queue), and one ZREMRANGEBYSCORE trimmed
// them all in the take that came next: 17 ms of Redis for 100,000. A take
// trims at most 1,000 (RATE_TRIM in lua/include/take.lua) and counts only
// the starts within the window; the next takes trim the rest.
func TestRateLogTrimIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const trim, old = 1000, 2500
	e.enqueue(t, "t1", "t2", "t3", "t4")
	if err := e.st.SetLimits(e.ctx, e.q, rdb.Limits{Rate: 3, PeriodMs: 60000}); err != nil {
		t.Fatal(err)
	}
	now := e.now(t)
	args := []any{e.q.RateLog()}
	for i := range old {
		args = append(args, now-60000-int64(i), "old"+strconv.Itoa(i))
	}
	args = append(args, now-1000, "x1") // one start within the window
	e.do(t, "ZADD", args...)
	card := func() int {
		t.Helper()
		n, err := redis.Int(e.c.Do("ZCARD", e.q.RateLog()))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Two starts left of 3: the starts out of the window do not count.
	got, wait := e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "A", Max: 5, Limited: true})
	if len(got) != 2 || wait < 58000 || wait > 59000 {
		t.Fatalf("take = %v, wait %d; want 2 tasks and about 59 s (x1 leaves the window)", takenIDs(got), wait)
	}
	if n := card(); n != old-trim+1+2 {
		t.Fatalf("rate log holds %d, want %d: at most %d trimmed per take", n, old-trim+1+2, trim)
	}
	got, wait = e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "A", Max: 5, Limited: true})
	if len(got) != 0 || wait < 58000 || wait > 59000 {
		t.Fatalf("take at the limit = %v, wait %d; want nothing and about 59 s", takenIDs(got), wait)
	}
	e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "A", Max: 5, Limited: true})
	if n := card(); n != 3 {
		t.Fatalf("rate log holds %d after three takes, want the 3 starts of the window", n)
	}
}
