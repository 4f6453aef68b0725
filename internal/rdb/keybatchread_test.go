package rdb_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// A key batch stops at the take's byte bound (TAKE_BYTES), and the tasks
// behind its head past the bound must not even be read: the take read
// every one of up to KeyBatch-1 (999) payloads into the script and only
// then cut the batch, so a key holding 40 tasks of 300 KiB cost the take
// 12 MiB of reads for the 900 KiB it handed out (1,000 of 1 MiB: about a
// GiB, seconds of Redis). Not parallel: the counts are the server's.
func TestKeyBatchReadsNoFollowerPastTheBound(t *testing.T) {
	e := newEnv(t)
	const n = 40
	for i := 0; i < n; i++ {
		e.keyed(t, "A", "k"+strconv.Itoa(i), strings.Repeat("y", 300<<10), "")
	}
	before := cmdCalls(t, e.c, "hmget")
	first := e.takeBatch(t, "W", 10, 100)
	read := cmdCalls(t, e.c, "hmget") - before
	if got := takenIDs(first); fmt.Sprint(got) != "[k0 k1 k2]" {
		t.Fatalf("first batch: %v", got)
	}
	// The head's HMGET and those of the two taken behind it: the next
	// one's size is asked (HSTRLEN) before its payload would be read.
	if read > 3 {
		t.Errorf("the take read %d task hashes (HMGET) to hand out 3 tasks of 300 KiB: "+
			"the tasks behind the byte bound were read in vain", read)
	}
	if l := e.list(t, "A"); len(l) != n-3 || l[0] != "k3" {
		t.Fatalf("A's list %v: those cut stay at its front", l)
	}
}
