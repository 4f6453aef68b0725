package rdb_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
)

// commandsOn runs f and returns the commands whose first key is key.
func commandsOn(t *testing.T, key string, f func()) [][]string {
	t.Helper()
	return monitored(t, func(args []string) bool { return len(args) > 1 && args[1] == key }, f)
}

// A fail-fast child's end stops the pending children of its run's latest
// fan-out only, reading them from the fan-out's list ('kl'): the records
// of earlier fan-outs, which a run keeps, are not read (the HGETALL of a
// run in its 10th fan-out of 1,000 held Redis for 24 ms), and no command
// reads more fields than the fan-out has children (twice: status, queue).
//
// A list that is not the latest fan-out's (a worker of an earlier version
// fanned out again without writing one: 'kl' names the fan-out number it
// was written for) is not taken for it: the run is read whole.
func TestFailFastReadsOnlyTheLatestFanOut(t *testing.T) {
	for _, mode := range []string{"listed", "old", "stale"} {
		old := mode != "listed"
		f := newFlowEnv(t)
		f.start(t, f.s1, "r1")
		// 2,000 children of earlier fan-outs, recorded in the run.
		args := []any{f.s1.Task("r1")}
		for i := 0; i < 2000; i++ {
			c := "r1.old" + strconv.Itoa(i)
			args = append(args, "k:"+c, "done", "kq:"+c, "c2", "kr:"+c, "res")
		}
		f.do(t, "HSET", args...)
		tk := f.takeFrom(t, f.s1, "A", 1, true)
		f.endIn(t, f.s1, 0, f.stage(rdb.Done(rdb.KindStage, "A", tk[0].PID, "r1", nil), "s2", true, nil, children...))
		if got, _ := redis.String(f.do(t, "HGET", f.s1.Task("r1"), "kl"), nil); got != "g1 k1 k2 k3" {
			t.Fatalf("the fan-out's list: %q, want \"k1 k2 k3\"", got)
		}
		staleKl := "g0 r1.old0 r1.old1"
		switch mode {
		case "old":
			// A run fanned out before the list existed: read whole, as then.
			f.do(t, "HDEL", f.s1.Task("r1"), "kl")
		case "stale":
			// An earlier fan-out's list, left by a fan-out that wrote none.
			f.do(t, "HSET", f.s1.Task("r1"), "kl", staleKl)
		}
		c := f.takeFrom(t, f.c1, "B", 1, false)
		e := rdb.Dead(rdb.KindChild, "B", c[0].PID, c[0].ID, "boom")
		cmds := commandsOn(t, f.s1.Task("r1"), func() { f.endChild(t, f.c1, e) })
		whole := false
		for _, cmd := range cmds {
			switch strings.ToUpper(cmd[0]) {
			case "HGETALL", "HKEYS", "HVALS", "HSCAN":
				whole = true
			case "HMGET":
				if n := len(cmd) - 2; n > len(children) {
					t.Errorf("old=%v: %q reads %d fields of the run, more than its fan-out's %d children", old, cmd[:3], n, len(children))
				}
			}
		}
		if whole != old {
			t.Errorf("old=%v: the run's hash read whole: %v (commands %q)", old, whole, cmds)
		}
		h, _ := redis.StringMap(f.do(t, "HGETALL", f.s1.Task("r1")), nil)
		if h["fs"] != "failed" || h["k:k1"] != "failed" || h["k:k2"] != "cancelled" || h["k:k3"] != "cancelled" {
			t.Errorf("old=%v: run after the fail-fast: fs=%s k1=%s k2=%s k3=%s", old, h["fs"], h["k:k1"], h["k:k2"], h["k:k3"])
		}
		// (The failed run keeps its fan-out's list for RetryRun.)
		wantKl := map[string]string{"listed": "g1 k1 k2 k3", "old": "", "stale": staleKl}[mode]
		if h["k:r1.old7"] != "done" || h["kr:r1.old7"] != "res" || h["kl"] != wantKl {
			t.Errorf("old=%v: earlier fan-outs' records changed, or the list not kept: %q %q %q", old, h["k:r1.old7"], h["kr:r1.old7"], h["kl"])
		}
		if n, _ := redis.Int(f.do(t, "EXISTS", f.c1.Task("k2"), f.c2.Task("k3")), nil); n != 0 {
			t.Errorf("old=%v: %d stopped children's hashes left", old, n)
		}
	}
}
