package rdb_test

import (
	"reflect"
	"sort"
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
)

// A task's priority field is read again whenever the task goes back to a
// waiting list (give back, a dead worker's requeue, the mover, a dead
// task's requeue), and the list is named from it. A field that is not a
// level 1..MaxLevel (a hand edit, a writer of another version: "x",
// "12", "-1", "1.5") named a list no take reads and no count or listing
// sees: the task was out of every worker's reach, for good, and the queue
// looked empty. Such a field counts as level 0, as a task enqueued without
// a priority.
func TestBadPriorityFieldGoesToLevelZero(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := []string{"back", "crash", "moved", "dead"}
	e.enqueueAt(t, 2, ids...)
	got, _ := e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "A", Max: 4, Levels: 2})
	if !reflect.DeepEqual(takenIDs(got), ids) {
		t.Fatalf("take = %v", takenIDs(got))
	}
	pid := map[string]string{}
	for _, x := range got {
		pid[x.ID] = x.PID
	}
	for id, bad := range map[string]string{"back": "x", "crash": "12", "moved": "-1", "dead": "1.5"} {
		e.do(t, "HSET", e.q.Task(id), "pri", bad)
	}
	e.giveBack(t, "A", pid["back"], "back")
	e.endTask(t, 0, rdb.Retry(rdb.KindTask, "A", pid["moved"], "moved", 0, "again"))
	e.endTask(t, 0, rdb.Dead(rdb.KindTask, "A", pid["dead"], "dead", "x"))
	e.requeue(t, true, "A") // "crash"
	if n, err := e.st.Move(e.ctx, e.q, 100); err != nil || n != 1 {
		t.Fatalf("Move = %d, %v", n, err)
	}
	if _, _, err := e.st.DeadIDs(e.ctx, e.q, rdb.DeadRequeue, []string{"dead"}); err != nil {
		t.Fatal(err)
	}

	if n, err := e.st.Len(e.ctx, e.q); err != nil || n != 4 {
		t.Errorf("Len = %d, %v; want the 4 tasks waiting", n, err)
	}
	again, _ := e.takeArgs(t, e.st, rdb.TakeArgs{Worker: "B", Max: 10, Levels: rdb.MaxLevel})
	back := takenIDs(again)
	sort.Strings(back)
	want := append([]string(nil), ids...)
	sort.Strings(want)
	if !reflect.DeepEqual(back, want) {
		t.Errorf("a take of every level got %v, want %v: the others wait in lists no take reads", back, want)
	}
}
