package rdb_test

import (
	"reflect"
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
)

// A cancel asked while a batch of one key runs wins over what the handler
// said, for the batch's head as for each task taken behind it (end.lua,
// end_batch): the head's cancel is not overwritten by the batch's done.
func TestKeyBatchCancelOfTheHeadWinsOverDone(t *testing.T) {
	t.Parallel()
	e := batchEnv(t, 3)
	got := e.takeBatch(t, "W", 1, 3)
	if want := []string{"a1", "a2", "a3"}; !reflect.DeepEqual(takenIDs(got), want) {
		t.Fatalf("took %v, want %v", takenIDs(got), want)
	}
	e.cancel(t, "a1")
	e.cancel(t, "a3")
	out := e.endIn(t, e.q, 60_000, batchOf(rdb.Done(rdb.KindTask, "W", got[0].PID, "a1", []byte("r-a1")), got))
	if out[0].Outcome != rdb.OutcomeCancelled ||
		!reflect.DeepEqual(out[0].Members, []rdb.Outcome{rdb.OutcomeDone, rdb.OutcomeCancelled}) {
		t.Fatalf("batch end after the cancels of a1 and a3: %+v, want cancelled with members [done cancelled]", out[0])
	}
	for id, want := range map[string]string{"a1": rdb.StateCancelled, "a2": rdb.StateDone, "a3": rdb.StateCancelled} {
		if s := e.field(t, id, rdb.FieldState); s != want {
			t.Errorf("%s: state %q, want %q", id, s, want)
		}
	}
	if r := e.field(t, "a1", rdb.FieldResult); r != "" {
		t.Errorf("the cancelled head kept the handler's result %q", r)
	}
}
