package rdb_test

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
)

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
