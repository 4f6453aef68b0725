package rdb_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/rdb"
)

// ReadRun steps by bytes (about 1 MiB per HSCAN step), but one big entry
// must not make every later step read a single entry: a run holding the
// records of many children and one big state field (a stage's result of
// 1 MiB) was read one entry per round trip from that field on, thousands
// of round trips, past the handler's timeout on a real network (the
// taking then goes back, no attempt counted, and the same read begins
// again: the run never moves on).
func TestReadRunAfterABigEntryGoesOnInBigSteps(t *testing.T) {
	f := newFlowEnv(t)
	f.start(t, f.s1, "r1")
	const small = 20000
	args := []any{f.s1.Task("r1")}
	for i := 0; i < small; i++ {
		args = append(args, fmt.Sprintf("k:r1.c%05d", i), "pending")
	}
	for i := 0; i < 3; i++ {
		args = append(args, fmt.Sprintf("big%d", i), bytes.Repeat([]byte{'z'}, 1<<20))
	}
	f.do(t, "HSET", args...)
	sizes := &replySizes{}
	st := rdb.NewStore(sizedGetter{g: routed{pool: f.pool, t: t, ns: f.ns}, r: sizes}, f.ns)
	began := time.Now()
	m, err := st.ReadRun(f.ctx, f.s1, "r1")
	took := time.Since(began)
	if err != nil {
		t.Fatal(err)
	}
	if len(m) < small+3 {
		t.Fatalf("ReadRun: %d fields", len(m))
	}
	t.Logf("%d HSCAN steps, the biggest %d KiB, %v", sizes.n, sizes.max>>10, took)
	// 3 MiB and 20,000 entries of a few bytes: a few steps of about 1 MiB
	// and some twenty of 1,000 entries (COUNT's bound), plus the first
	// ones that grow from one entry.
	if sizes.n > 100 {
		t.Errorf("ReadRun took %d HSCAN steps (round trips) for 3 MiB in %d entries", sizes.n, small+3)
	}
	if sizes.max > 4<<20 {
		t.Errorf("one HSCAN step read %d bytes", sizes.max)
	}
}
