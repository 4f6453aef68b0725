package rdb_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
)

// An entry of a retained set whose time has passed names a task whose hash
// has expired; it stays in the set until an ending trims it (at most
// RETAIN_TRIM per script call, and only when some task ends), or as long
// as the set lives on (a task with a longer retention of its own keeps it).
// Stats (Inspector.Queues, `worqr stats`, the dashboard, the Prometheus
// gauge) counted them with ZCARD, and Retained (Inspector.Tasks of the
// ended states) gave that count as its total and listed their ids: after a
// burst of a million endings, a quiet queue showed a million retained
// tasks, none of them readable, until a thousand more endings. Only the
// entries not yet past their time count (Redis's clock).
func TestRetainedCountsOnlyTasksStillKept(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Three entries whose retention ended a second ago (their hashes gone),
	// as a burst of endings leaves them once their time passes.
	for i := range 3 {
		e.do(t, "ZADD", e.q.Retained, e.start-1000-int64(i), fmt.Sprintf("gone%d", i))
	}
	// One task that ended just now, kept a minute. (Its ending trims what
	// it may: write the expired entries again after it, as an ending of
	// another call would leave them when over RETAIN_TRIM were due.)
	e.enqueue(t, "kept")
	got := e.takeFrom(t, e.q, "A", 1, false)
	e.endIn(t, e.q, 60000, rdb.Done(rdb.KindTask, "A", got[0].PID, "kept", nil))
	for i := range 3 {
		e.do(t, "ZADD", e.q.Retained, e.start-1000-int64(i), fmt.Sprintf("gone%d", i))
	}

	st, err := e.st.Stats(e.ctx, []rdb.QueueKeys{e.q})
	if err != nil {
		t.Fatal(err)
	}
	if st[0].Retained != 1 {
		t.Errorf("Stats Retained = %d, want 1 (the entries past their time name no task)", st[0].Retained)
	}
	sp, err := e.st.Retained(e.ctx, e.q, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if want := (rdb.Span{IDs: []string{"kept"}, Total: 1}); !reflect.DeepEqual(sp, want) {
		t.Errorf("Retained = %+v, want %+v", sp, want)
	}
}
