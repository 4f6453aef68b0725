package rdb_test

import (
	"fmt"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// indexTrim is INDEX_TRIM (lua/include/flow.lua): the most entries of runs
// past their retention one script call drops from the run indexes.
const indexTrim = 1000

// TestRunIndexTrimIsBounded: the entries of a run index expire in bulk
// (runs of one value that ended in a burst), and every start and end of a
// run of that value drops them, INDEX_TRIM at most; but per run, so an end
// call of 64 stage takings (a worker's group commit) dropped 64,000 in one
// call (about 40 ms of Redis). As the retained sets' trims
// (TestRetainedTrimIsBounded), a script call drops at most INDEX_TRIM,
// however many runs it ends; the calls after it drop the rest.
func TestRunIndexTrimIsBounded(t *testing.T) {
	f := newFlowEnv(t)
	for _, id := range []string{"r1", "r2", "r3"} {
		f.start(t, f.s1, id)
	}
	const expired = 2*indexTrim + 500
	args := []any{f.ix}
	for i := range expired {
		args = append(args, f.env.start-1000-int64(i), fmt.Sprintf("old%04d", i)) // old2499 expired first
	}
	f.do(t, "ZADD", args...)
	card := func() int {
		t.Helper()
		n, err := redis.Int(f.do(t, "ZCARD", f.ix), nil)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	// One call ending three runs (their last stage done).
	got := f.takeFrom(t, f.s1, "A", 3, true)
	if len(got) != 3 {
		t.Fatalf("took %d runs, want 3", len(got))
	}
	es := make([]rdb.Ending, len(got))
	for i, g := range got {
		es[i] = f.stage(rdb.Done(rdb.KindStage, "A", g.PID, g.ID, nil), "", true, nil)
	}
	f.endIn(t, f.s1, 0, es...)
	if n := card(); n != expired-indexTrim+3 {
		t.Fatalf("after one call ending 3 runs: %d entries, want %d (%d expired dropped, the 3 runs kept)", n, expired-indexTrim+3, indexTrim)
	}
	if f.do(t, "ZSCORE", f.ix, fmt.Sprintf("old%04d", expired-1)) != nil {
		t.Fatal("the call did not drop the oldest entries first")
	}

	// The next calls drop the rest, INDEX_TRIM each.
	f.start(t, f.s1, "r4")
	if n := card(); n != expired-2*indexTrim+4 {
		t.Fatalf("after a start: %d entries, want %d", n, expired-2*indexTrim+4)
	}
	f.start(t, f.s1, "r5")
	if n := card(); n != 5 {
		t.Fatalf("after another start: %d entries, want the 5 runs", n)
	}
}
