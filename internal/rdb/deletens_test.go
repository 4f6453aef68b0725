package rdb_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// lazyFreed reads the server's count of values freed by its background
// thread (INFO memory, lazyfreed_objects).
func (e *env) lazyFreed(t *testing.T) int {
	t.Helper()
	info, err := redis.String(e.do(t, "INFO", "memory"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "lazyfreed_objects:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("INFO memory has no lazyfreed_objects")
	return 0
}

// TestDeleteNamespaceFreesLargeValuesAside: a namespace holds values of
// any size (a dead set of a million ids), and DEL frees a value before it
// returns: about 120 ms of Redis for that dead set. DeleteNamespace
// unlinks: a large value is freed by Redis's background thread, so the
// call's cost is per key, not per element.
func TestDeleteNamespaceFreesLargeValuesAside(t *testing.T) {
	e := newEnv(t)
	args := []any{e.q.Dead}
	for i := range 1000 { // over Redis's lazyfree threshold (64 elements)
		args = append(args, i, "d"+strconv.Itoa(i))
	}
	e.do(t, "ZADD", args...)
	e.enqueue(t, "a")
	before := e.lazyFreed(t)
	// A plain store: the scan names the namespace's pattern on any tag's
	// connection, which the test's routed store refuses.
	n, err := rdb.NewStore(e.pool, e.ns).DeleteNamespace(e.ctx)
	if err != nil || n != 3 { // the dead set, a's hash, the waiting list
		t.Fatalf("DeleteNamespace: %d, %v; want 3 keys", n, err)
	}
	// The background thread counts what it freed once it has: wait for it
	// (a DEL never makes the count move).
	for i := 0; e.lazyFreed(t) == before; i++ {
		if i == 200 {
			t.Fatal("the dead set of 1,000 was freed by the call itself, not aside")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if left, _ := redis.Int(e.do(t, "EXISTS", e.q.Dead), nil); left != 0 {
		t.Fatal("the dead set is still there")
	}
}
