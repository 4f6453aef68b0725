package rdb_test

import (
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// A stage that goes dead is buried in its stage's dead set, which is then
// trimmed to its cap (DeadMaxCount), oldest first. Entries buried by one
// script call share one time, and ties are broken by id: the run just
// buried could be the one trimmed, its hash deleted, and the stage's end
// then wrote the run's failed status into the deleted key: a two-field
// "run" with no stage, no expiry and no dead entry (never retried, never
// expiring), and a take that buried a crashed run left it deleted with its
// index entries at +inf (running) for ever. The entry just buried is never
// the one trimmed: the trim makes room for it first.
func TestDeadTrimKeepsTheRunJustBuried(t *testing.T) {
	f := newFlowEnv(t)
	f.setCfg(t, f.s1, "dead_max", 1)
	f.start(t, f.s1, "rb")
	f.start(t, f.s1, "ra")
	tk := f.takeFrom(t, f.s1, "A", 2, true)
	if len(tk) != 2 {
		t.Fatalf("took %d runs", len(tk))
	}
	// rb dies first, then ra ("ra" < "rb": in a tie, ZRANGE's first).
	var es []rdb.Ending
	for _, id := range []string{"rb", "ra"} {
		for _, x := range tk {
			if x.ID == id {
				es = append(es, f.stage(rdb.Dead(rdb.KindStage, "A", x.PID, id, "boom"), "s2", true, nil))
			}
		}
	}
	f.endIn(t, f.s1, 0, es...)
	dead, err := redis.Strings(f.c.Do("ZRANGE", f.s1.Dead, 0, -1))
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0] != "ra" {
		t.Errorf("dead set %v; want [ra], the run buried last (rb, the oldest, trimmed)", dead)
	}
	h, err := redis.StringMap(f.c.Do("HGETALL", f.s1.Task("ra")))
	if err != nil {
		t.Fatal(err)
	}
	if h["st"] != "s1" || h["fs"] != "failed" || h["s"] != "dead" {
		t.Errorf("run ra: %v; want its whole hash, failed in s1 and dead", h)
	}
	if ok, err := f.st.RunRetry(f.ctx, f.s1, "ra"); err != nil || !ok {
		t.Errorf("RetryRun of ra: %v, %v; want retried", ok, err)
	}
	// Trimmed by the next burial, a run is gone whole (no fragment).
	if n, err := redis.Int(f.c.Do("EXISTS", f.s1.Task("rb"))); err != nil || n != 0 {
		t.Errorf("run rb, trimmed: EXISTS %d, %v; want gone", n, err)
	}
}

// A take that buries a run (crashed on MaxCrashes workers) into a dead set
// at its cap keeps it, failed, and its index entry expiring.
func TestTakeBuryingARunAtTheDeadCapKeepsIt(t *testing.T) {
	f := newFlowEnv(t)
	f.setCfg(t, f.s1, "dead_max", 1)
	f.start(t, f.s1, "rb")
	f.start(t, f.s1, "ra")
	for _, id := range []string{"rb", "ra"} {
		f.do(t, "HSET", f.s1.Task(id), "c", 5)
	}
	// One take buries both (rb first, then ra: same time).
	if _, err := f.st.Take(f.ctx, f.s1, rdb.TakeArgs{Worker: "A", Until: 1 << 62, Max: 2, Stage: true, MaxCrashes: 3}); err != nil {
		t.Fatal(err)
	}
	h, err := redis.StringMap(f.c.Do("HGETALL", f.s1.Task("ra")))
	if err != nil {
		t.Fatal(err)
	}
	if h["st"] != "s1" || h["fs"] != "failed" {
		t.Errorf("run ra: %v; want kept, failed in s1", h)
	}
	sc, err := redis.String(f.c.Do("ZSCORE", f.ix, "ra"))
	if err != nil || sc == "inf" {
		t.Errorf("index entry of ra: %q, %v; want its expiry time, not running", sc, err)
	}
}
