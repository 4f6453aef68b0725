package rdb_test

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
)

func TestDead(t *testing.T) {
	t.Parallel()
	// dead3 seeds d1, d2, d3 dead at times 1000, 2000, 3000 and w1 waiting.
	dead3 := func(t *testing.T, e *env) {
		e.enqueue(t, "w1")
		e.seedDead(t, e.q, "d1", 1000)
		e.seedDead(t, e.q, "d2", 2000)
		e.seedDead(t, e.q, "d3", 3000)
	}
	// requeued is a dead seed requeued: counters, death record and unique
	// key gone, the last error kept.
	requeued := func(id string) hash { return queued(id).with("e", "boom") }
	tests := []struct {
		name  string
		seed  func(t *testing.T, e *env)
		op    rdb.DeadOp
		ids   []string // nil: the oldest n
		n     int
		want  int
		state func(e *env) state
		pubs  []msg
	}{
		{
			name: "requeue ids: counters reset, pushed to the back in the given order, one wake-up",
			seed: dead3,
			op:   rdb.DeadRequeue, ids: []string{"d3", "d2"},
			want: 2,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"w1", "d3", "d2"},
					e.q.Task("w1"): fresh("w1"),
					e.q.Task("d1"): deadSeed("d1", "1000"),
					e.q.Task("d2"): requeued("d2"),
					e.q.Task("d3"): requeued("d3"),
					e.q.Dead:       zset{{"d1", "1000"}},
				}
			},
			pubs: []msg{{"wake", "2"}},
		},
		{
			name: "requeue ids: ids not in the dead set are left alone and not counted",
			seed: dead3,
			op:   rdb.DeadRequeue, ids: []string{"w1", "nope", "d1"},
			want: 1,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"w1", "d1"},
					e.q.Task("w1"): fresh("w1"),
					e.q.Task("d1"): requeued("d1"),
					e.q.Task("d2"): deadSeed("d2", "2000"),
					e.q.Task("d3"): deadSeed("d3", "3000"),
					e.q.Dead:       zset{{"d2", "2000"}, {"d3", "3000"}},
				}
			},
			pubs: []msg{{"wake", "1"}},
		},
		{
			name: "requeue a failed flow run: it runs again, its finish time gone, indexed as running for good",
			seed: func(t *testing.T, e *env) {
				e.seedDead(t, e.q, "r1", 1000)
				e.do(t, "HSET", e.q.Task("r1"), "fs", "failed", "st", "q", "ft", "1000",
					"fi", "user", "f:user", "u2", "i:user", "u1")
				e.do(t, "ZADD", e.q.IndexKey("user", "u1"), 61000, "r1", 2000, "r0")
				e.do(t, "PEXPIRE", e.q.IndexKey("user", "u1"), 60000)
			},
			op: rdb.DeadRequeue, ids: []string{"r1"},
			want: 1,
			state: func(e *env) state {
				return state{
					e.q.Waiting: list{"r1"},
					e.q.Task("r1"): requeued("r1").with("fs", "running", "st", "q",
						"fi", "user", "f:user", "u2", "i:user", "u1"),
					e.q.IndexKey("user", "u1"): zset{{"r0", "2000"}, {"r1", "inf"}},
				}
			},
			pubs: []msg{{"wake", "1"}},
		},
		{
			name: "run twice (requeue): the second finds nothing dead, changes nothing",
			seed: func(t *testing.T, e *env) {
				dead3(t, e)
				if _, _, err := e.st.DeadIDs(e.ctx, e.q, rdb.DeadRequeue, []string{"d3", "d2"}); err != nil {
					t.Fatal(err)
				}
			},
			op: rdb.DeadRequeue, ids: []string{"d3", "d2"},
		},
		{
			name: "delete ids: entries and hashes gone, no wake-up",
			seed: dead3,
			op:   rdb.DeadDelete, ids: []string{"d1", "d3", "w1"},
			want: 2,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"w1"},
					e.q.Task("w1"): fresh("w1"),
					e.q.Task("d2"): deadSeed("d2", "2000"),
					e.q.Dead:       zset{{"d2", "2000"}},
				}
			},
		},
		{
			name: "run twice (delete): changes nothing",
			seed: func(t *testing.T, e *env) {
				dead3(t, e)
				if _, _, err := e.st.DeadIDs(e.ctx, e.q, rdb.DeadDelete, []string{"d1"}); err != nil {
					t.Fatal(err)
				}
			},
			op: rdb.DeadDelete, ids: []string{"d1"},
		},
		{
			name: "requeue the oldest n, oldest first",
			seed: dead3,
			op:   rdb.DeadRequeue, n: 2,
			want: 2,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"w1", "d1", "d2"},
					e.q.Task("w1"): fresh("w1"),
					e.q.Task("d1"): requeued("d1"),
					e.q.Task("d2"): requeued("d2"),
					e.q.Task("d3"): deadSeed("d3", "3000"),
					e.q.Dead:       zset{{"d3", "3000"}},
				}
			},
			pubs: []msg{{"wake", "2"}},
		},
		{
			name: "delete the oldest n, more than there are: all gone",
			seed: dead3,
			op:   rdb.DeadDelete, n: 10,
			want: 3,
			state: func(e *env) state {
				return state{e.q.Waiting: list{"w1"}, e.q.Task("w1"): fresh("w1")}
			},
		},
		{
			name: "requeue the oldest 0: nothing (not every entry)",
			seed: dead3,
			op:   rdb.DeadRequeue, n: 0,
		},
		{
			name: "delete the oldest -1: nothing (not all but the newest)",
			seed: dead3,
			op:   rdb.DeadDelete, n: -1,
		},
		{
			name: "oldest n of an empty dead set: nothing",
			seed: func(t *testing.T, e *env) { e.enqueue(t, "w1") },
			op:   rdb.DeadRequeue, n: 5,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			tc.seed(t, e)
			before := e.dump(t)
			l := e.listen(t)
			var got int
			var err error
			e.call(t, func() {
				if tc.ids != nil {
					got, _, err = e.st.DeadIDs(e.ctx, e.q, tc.op, tc.ids)
				} else {
					var p rdb.DeadPass
					p, err = e.st.DeadOldest(e.ctx, e.q, tc.op, tc.n, "", "")
					got = p.Handled
				}
			})
			pubs := l.collect(t, e)
			if err != nil {
				t.Fatalf("dead %s: %v", tc.op, err)
			}
			if got != tc.want {
				t.Errorf("dead %s = %d, want %d", tc.op, got, tc.want)
			}
			e.checkState(t, before, tc.state)
			checkPubs(t, pubs, tc.pubs)
		})
	}
}

// seedKeyedDead puts n dead tasks d0..d<n-1> of key k of a merging
// ordered queue straight into its dead set (oldest first), each holding
// one distinct payload of size bytes, and returns those payloads.
func (e *env) seedKeyedDead(t *testing.T, n, size int) []string {
	t.Helper()
	e.setCfg(t, e.q, "merge", "1")
	var ps []string
	for i := 0; i < n; i++ {
		id := "d" + strconv.Itoa(i)
		p := fmt.Sprintf("%08d", i) + strings.Repeat("x", size-8)
		ps = append(ps, p)
		env := rdb.EncodeEnvelope("k", []rdb.Entry{{Score: float64(i), Payload: []byte(p)}})
		e.do(t, "HSET", e.q.Task(id), rdb.FieldPayload, env, rdb.FieldState, "dead", rdb.FieldKey, "k", rdb.FieldFailures, 3)
		e.do(t, "ZADD", e.q.Dead, i, id)
	}
	return ps
}

// keyPayloads returns the payloads the key k's head and the tasks behind
// it hold, sorted.
func (e *env) keyPayloads(t *testing.T) []string {
	t.Helper()
	ids := e.strs(t, "LRANGE", e.q.KeyListPrefix+"k", 0, -1)
	head, _ := e.do(t, "HGET", e.q.KeyHeads, "k").([]byte)
	ids = append([]string{string(head)}, ids...)
	var out []string
	for _, id := range ids {
		for _, x := range e.entries(t, id) {
			out = append(out, x[:strings.LastIndex(x, ":")])
		}
	}
	sort.Strings(out)
	return out
}

// A requeue of the dead set of a merging ordered queue merges each dead
// task of a key into the key's waiting tail in the script, reading and
// writing both envelopes: 250 dead tasks of 1 MiB of one key held Redis for
// 3.8 s in one call. A call stops once its merges pass about 1 MiB (always
// handling one), says so, and the next goes on where it stopped: every
// payload merged once.
func TestDeadRequeueOfMergingTasksIsCutByBytes(t *testing.T) {
	e := newEnv(t)
	const n = 6
	ps := e.seedKeyedDead(t, n, 400<<10)
	p, err := e.st.DeadOldest(e.ctx, e.q, rdb.DeadRequeue, rdb.BulkStep, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if p.Handled < 1 || p.Handled >= n || !p.Cut || p.Read != p.Handled {
		t.Fatalf("first call: %+v, want it cut after 1 to %d of %d (about 1 MiB merged)", p, n-1, n)
	}
	total, calls := p.Handled, 1
	for p.Cut || p.Read == rdb.BulkStep {
		if p, err = e.st.DeadOldest(e.ctx, e.q, rdb.DeadRequeue, rdb.BulkStep, p.After, p.AfterScore); err != nil {
			t.Fatal(err)
		}
		total += p.Handled
		calls++
	}
	if total != n {
		t.Fatalf("requeued %d over %d calls, want %d", total, calls, n)
	}
	if left := e.do(t, "ZCARD", e.q.Dead); left != int64(0) {
		t.Fatalf("%d left dead", left)
	}
	sort.Strings(ps)
	if got := e.keyPayloads(t); strings.Join(got, ",") != strings.Join(ps, ",") {
		t.Fatalf("key k holds %d payloads, want the %d requeued once each", len(got), len(ps))
	}
}

// The same by ids (RequeueDead): DeadIDs goes through every id it is given,
// in as many calls as the bound needs.
func TestDeadIDsRequeueOfMergingTasksGoesOnPastTheBound(t *testing.T) {
	e := newEnv(t)
	const n = 6
	ps := e.seedKeyedDead(t, n, 400<<10)
	var ids []string
	for i := 0; i < n; i++ {
		ids = append(ids, "d"+strconv.Itoa(i))
	}
	// (A first call loads the scripts: the count below is of this one's.)
	if _, _, err := e.st.DeadIDs(e.ctx, e.q, rdb.DeadRequeue, []string{"none"}); err != nil {
		t.Fatal(err)
	}
	e.do(t, "CONFIG", "SET", "slowlog-log-slower-than", 0)
	e.do(t, "SLOWLOG", "RESET")
	got, refused, err := e.st.DeadIDs(e.ctx, e.q, rdb.DeadRequeue, ids)
	calls := 0
	for _, en := range e.do(t, "SLOWLOG", "GET", -1).([]any) {
		if args := en.([]any)[3].([]any); strings.HasSuffix(string(args[1].([]byte)), "_dead") {
			calls++
		}
	}
	e.do(t, "CONFIG", "SET", "slowlog-log-slower-than", 10000)
	if err != nil || got != n || len(refused) != 0 {
		t.Fatalf("DeadIDs = %d, %v, %v; want %d", got, refused, err, n)
	}
	if calls < 2 {
		t.Fatalf("%d dead calls for %d merges of 400 KiB, want them cut at about 1 MiB", calls, n)
	}
	sort.Strings(ps)
	if got := e.keyPayloads(t); strings.Join(got, ",") != strings.Join(ps, ",") {
		t.Fatalf("key k holds %d payloads, want the %d requeued once each", len(got), len(ps))
	}
}

// A delete of dead tasks frees their bytes in the script (250 of 2 MiB
// held Redis for 22 ms): a call stops once they pass its bound.
func TestDeadDeleteIsCutByBytes(t *testing.T) {
	e := newEnv(t)
	big := strings.Repeat("p", 24<<20)
	for i := 0; i < 4; i++ {
		id := "d" + strconv.Itoa(i)
		e.do(t, "HSET", e.q.Task(id), rdb.FieldPayload, big, rdb.FieldState, "dead")
		e.do(t, "ZADD", e.q.Dead, i, id)
	}
	p, err := e.st.DeadOldest(e.ctx, e.q, rdb.DeadDelete, rdb.BulkStep, "", "")
	if err != nil || !p.Cut || p.Handled < 1 || p.Handled > 3 {
		t.Fatalf("first call: %+v, %v; want it cut before all 4 (96 MiB)", p, err)
	}
	total := p.Handled
	for p.Cut {
		if p, err = e.st.DeadOldest(e.ctx, e.q, rdb.DeadDelete, rdb.BulkStep, p.After, p.AfterScore); err != nil {
			t.Fatal(err)
		}
		total += p.Handled
	}
	if total != 4 || e.do(t, "ZCARD", e.q.Dead) != int64(0) {
		t.Fatalf("deleted %d, want 4 and an empty dead set", total)
	}
}

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
