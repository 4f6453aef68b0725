package rdb_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// indexCommands runs f and returns the commands that named key.
func indexCommands(t *testing.T, key string, f func()) [][]string {
	t.Helper()
	return monitored(t, func(args []string) bool { return slices.Contains(args[1:], key) }, f)
}

// FindRuns reads a run index in pages: no command reads more than 1,000
// of its entries, however many runs it holds (one ZRANGEBYSCORE of the
// whole index held Redis for 3.4 ms per 100,000 runs).
func TestFindRunsIsPaged(t *testing.T) {
	f := newFlowEnv(t)
	now := f.now(t)
	// 1,200 running runs (+inf), 1,000 ended within their retention, 300
	// past it.
	var want []string
	for i := 0; i < 1200; i++ {
		id := fmt.Sprintf("run%05d", i)
		f.do(t, "ZADD", f.ix, "inf", id)
		want = append(want, id)
	}
	for i := 0; i < 1000; i++ {
		id := fmt.Sprintf("ended%05d", i)
		f.do(t, "ZADD", f.ix, now+60000+int64(i), id)
		want = append(want, id)
	}
	for i := 0; i < 300; i++ {
		f.do(t, "ZADD", f.ix, now-1-int64(i), fmt.Sprintf("gone%05d", i))
	}
	var got []string
	cmds := indexCommands(t, f.ix, func() {
		var err error
		got, err = f.st.FindRuns(f.ctx, f.s1, "user", "u1")
		if err != nil {
			t.Fatal(err)
		}
	})
	if len(got) != len(want) {
		t.Fatalf("FindRuns: %d ids, want %d", len(got), len(want))
	}
	seen := map[string]bool{}
	for _, id := range got {
		if seen[id] || strings.HasPrefix(id, "gone") {
			t.Fatalf("FindRuns: %s repeated or past its retention", id)
		}
		seen[id] = true
	}
	// Three pages (the third meets the runs past their retention), each a
	// call of runs_page, whose ZRANGE by rank reads at most 1,000 entries.
	calls, ranges := 0, 0
	for _, c := range cmds {
		switch strings.ToUpper(c[0]) {
		case "FCALL", "EVALSHA":
			calls++
		case "ZRANGE":
			ranges++
			lo, err1 := strconv.Atoi(c[2])
			hi, err2 := strconv.Atoi(c[3])
			if err1 != nil || err2 != nil || hi-lo+1 > 1000 {
				t.Fatalf("FindRuns sent %q: more than 1,000 entries in one command", c)
			}
		case "ZSCORE", "ZREVRANK":
		default:
			t.Fatalf("FindRuns sent %q", c)
		}
	}
	if calls != 3 || ranges != 3 {
		t.Fatalf("FindRuns read the index in %d calls and %d ranges, want 3 pages", calls, ranges)
	}
}
