package rdb_test

import (
	"strconv"
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
)

// ReadProgress reads the progress hash and the size of the done set. Read
// in two steps, a MarkDone run between them (it moves the processed index
// over indexes done out of order and takes them out of the done set)
// made a progress that never was: the old processed index with the new,
// smaller done set, that is more jobs in flight than were ever dispatched
// and not done (here 5, past MaxProcessing 3, when there were 3 then 2;
// read in the other order, the count goes negative). Whatever runs between, the reply is the progress
// before or after the call.
func TestReadProgressAcrossAnAdvance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.consumer()
	l := rdb.ConsumerLimits{MaxProcessing: 3, MaxSearchAhead: 6}
	e.dispatch(t, l, 100) // 0..2
	pid := map[string]string{}
	for _, tk := range e.takeFrom(t, c.Queue, "A", 3, false) {
		pid[tk.ID] = tk.PID
	}
	for _, i := range []uint64{1, 2} {
		if res, p := e.mark(t, "A", pid[strconv.FormatUint(i, 10)], i); res != rdb.MarkRecorded || p != 0 {
			t.Fatalf("mark %d = %d, %d; want recorded, 0", i, res, p)
		}
	}
	// 0 is in flight: two more may go (3, 4).
	if p, sent := e.dispatch(t, l, 100); sent != 2 || p.Next != 5 {
		t.Fatalf("Dispatch = %+v, %d; want next 5, 2 sent", p, sent)
	}
	before := rdb.ConsumerProgress{Processed: 0, Next: 5, Finished: 2}
	after := rdb.ConsumerProgress{Processed: 3, Next: 5, Finished: 0}
	if p, err := e.st.ReadProgress(e.ctx, c, 0); err != nil || p != before {
		t.Fatalf("ReadProgress = %+v, %v; want %+v", p, err, before)
	}
	// Between the reads, 0 is done: the processed index moves to 3 and
	// 1, 2 leave the done set.
	g := &steppingGetter{g: routed{pool: e.pool, t: t, ns: e.ns}, between: func() {
		if res, p := e.mark(t, "A", pid["0"], 0); res != rdb.MarkRecorded || p != 3 {
			t.Errorf("mark 0 = %d, %d; want recorded, 3", res, p)
		}
	}}
	p, err := rdb.NewStore(g, e.ns).ReadProgress(e.ctx, c, 0)
	if err != nil {
		t.Fatal(err)
	}
	if g.ran != 1 {
		t.Fatalf("the call between the reads ran %d times", g.ran)
	}
	if p != before && p != after {
		t.Errorf("ReadProgress across the advance = %+v (%d in flight, MaxProcessing 3); want %+v or %+v",
			p, p.InFlight(), before, after)
	}
}
