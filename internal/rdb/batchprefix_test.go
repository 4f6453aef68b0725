package rdb_test

import (
	"fmt"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// stepIDs returns n ids, 250 a step (rdb.EnqueueStep), each step's ids
// sharing a packed hash of their own ("s<step>-"), so that a test can make
// one step fail.
func stepIDs(n int) ([]string, [][]byte) {
	ids := make([]string, n)
	ps := make([][]byte, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%d-%03d", i/rdb.EnqueueStep, i%rdb.EnqueueStep)
		ps[i] = []byte("p" + ids[i])
	}
	return ids, ps
}

// A batch split into steps and sent many at once stops at a step Redis
// refuses (an error reply: OOM under maxmemory, here a key of the wrong
// type), and the steps sent behind it are not applied: what is enqueued is
// the first `done` tasks, as EnqueueBatch (and worqr.BatchError: "none
// after it was") says. Before, the steps already on the wire ran all the
// same: the queue held the tasks of the steps after the refused one, with
// a hole where it was, and a caller that sent the rest again (from done)
// enqueued them twice.
func TestBatchStepsAfterARefusedOneAreNotApplied(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args *rdb.EnqueueArgs
		bad  func(e *env, ids []string) string // the key that makes step 3 fail
	}{
		{"packed", nil, func(e *env, ids []string) string { k, _ := e.q.Packed(ids[3*rdb.EnqueueStep]); return k }},
		{"a hash per task", &rdb.EnqueueArgs{MaxAttempts: 3}, func(e *env, ids []string) string { return e.q.Task(ids[3*rdb.EnqueueStep]) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ids, ps := stepIDs(8 * rdb.EnqueueStep)
			e.do(t, "SET", tc.bad(e, ids), "not a hash")
			done, _, err := e.st.EnqueueBatch(e.ctx, e.q, ids, ps, tc.args)
			if err == nil {
				t.Fatal("a batch with a refused step succeeded")
			}
			if done != 3*rdb.EnqueueStep {
				t.Fatalf("done = %d (%v), want %d: the steps before the refused one", done, err, 3*rdb.EnqueueStep)
			}
			got, _ := redis.Strings(e.c.Do("LRANGE", e.q.Waiting, 0, -1))
			if len(got) != done {
				t.Fatalf("the queue holds %d tasks after a batch that reports %d done (%v): the steps sent behind the refused one were applied", len(got), done, err)
			}
			for i, id := range got {
				if id != ids[i] {
					t.Fatalf("waiting %d is %s, want %s", i, id, ids[i])
				}
			}
		})
	}
}
