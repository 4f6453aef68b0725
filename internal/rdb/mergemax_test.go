package rdb_test

import (
	"strconv"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// mergeMax is MERGE_MAX (lua/include/key.lua): the most distinct payloads
// a task gathers by merging.
const mergeMax = 100

// TestMergeIsBounded: a merge reads, sorts and writes the whole envelope of
// the key's waiting tail, which grew without bound (a tail of 100,000
// payloads held Redis for a second per enqueue, and a call of 1,000
// merging tasks for seconds). A task gathers at most mergeMax distinct
// payloads; the next one starts a new task behind it, where the following
// ones merge. A payload it holds already still merges into it. Every
// payload is kept, in order.
func TestMergeIsBounded(t *testing.T) {
	e := newEnv(t)
	e.keyed(t, "k", "h", "p0", "1")
	e.setCfg(t, e.q, "merge", "1")
	const n = 2*mergeMax + 50
	ids := make([]string, n)
	ps := make([][]byte, n)
	scores := make([]string, n)
	for i := range n {
		ids[i] = "m" + strconv.Itoa(i)
		ps[i] = []byte("p" + strconv.Itoa(i+1))
		scores[i] = strconv.Itoa(i + 2)
	}
	ps[n-1] = []byte("p1") // held by h already
	got, err := e.st.EnqueueKey(e.ctx, e.q, "k", ids, ps, scores, nil)
	if err != nil {
		t.Fatal(err)
	}
	// h (queued: the key's waiting tail) takes p1..p99; p100 starts m99,
	// which takes p101..p199; p200 starts m199.
	tails := []string{"h", "m99", "m199"}
	for i, g := range got {
		want := tails[min((i+1)/mergeMax, 2)]
		if i == n-1 {
			want = "m199" // p1 is in h, but m199 is the waiting tail now
		}
		if g.ID != want || g.Merged != (g.ID != ids[i]) {
			t.Fatalf("task %d went to %+v, want %s", i, g, want)
		}
	}
	seen := 0
	for _, id := range tails {
		es := e.entries(t, id)
		if len(es) > mergeMax {
			t.Fatalf("%s gathered %d payloads, more than %d", id, len(es), mergeMax)
		}
		seen += len(es)
	}
	if seen != n+1 {
		t.Fatalf("the tasks hold %d payloads, want %d", seen, n+1)
	}
	if v, _ := redis.Int(e.do(t, "HGET", e.q.Task("h"), rdb.FieldMergeVersion), nil); v != mergeMax-1 {
		t.Fatalf("h counts %d merges, want %d", v, mergeMax-1)
	}
	// A payload a full task holds already merges into it.
	e.do(t, "DEL", e.q.KeyListPrefix+"k") // h is the key's waiting tail again
	if r := e.keyed(t, "k", "again", "p5", "0"); r.ID != "h" || !r.Merged {
		t.Fatalf("p5 again went to %+v, want merged into h", r)
	}
	if es := e.entries(t, "h"); len(es) != mergeMax || es[0] != "p5:0" {
		t.Fatalf("h holds %d payloads, the first %s; want %d, p5:0", len(es), es[0], mergeMax)
	}
}
