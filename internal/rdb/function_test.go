package rdb_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
)

// On Redis 7 the scripts run as functions of one library, loaded by the
// first call that finds it missing: a call then runs the script alone, not
// its includes. The library holds every script.
func TestScriptsRunAsFunctions(t *testing.T) {
	ctx := context.Background()
	pool := srv.TagCheckedPool(t)
	c := pool.Get()
	defer c.Close()
	if _, err := c.Do("FUNCTION", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	before := fcalls(t, c)
	st := rdb.NewStore(pool, redistest.Namespace())
	q := st.Queue(rdb.Standalone("fn"))
	if _, err := st.Enqueue(ctx, q, []string{"a"}, [][]byte{[]byte("p")}, nil); err != nil {
		t.Fatal(err)
	}
	got, err := st.Take(ctx, q, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 1})
	if err != nil || len(got) != 1 {
		t.Fatalf("Take = %+v, %v", got, err)
	}
	if calls := fcalls(t, c) - before; calls < 2 {
		t.Errorf("FCALL ran %d times for an enqueue and a take, want 2 (the scripts ran some other way)", calls)
	}
	libs, err := redis.Values(c.Do("FUNCTION", "LIST", "LIBRARYNAME", "worqr_*"))
	if err != nil || len(libs) != 1 {
		t.Fatalf("FUNCTION LIST = %v, %v; want one worqr library", libs, err)
	}
	lib, _ := redis.Values(libs[0], nil)
	var fns []any
	for i := 0; i+1 < len(lib); i += 2 {
		if k, _ := redis.String(lib[i], nil); k == "functions" {
			fns, _ = redis.Values(lib[i+1], nil)
		}
	}
	files, err := filepath.Glob("lua/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	if len(fns) != len(files) {
		t.Errorf("the library holds %d functions, want one per script (%d)", len(fns), len(files))
	}
}

// fcalls reads how many FCALLs the server ran.
func fcalls(t *testing.T, c redis.Conn) int {
	t.Helper()
	info, err := redis.String(c.Do("INFO", "commandstats"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_fcall:calls="); ok {
			var n int
			fmt.Sscanf(rest, "%d", &n)
			return n
		}
	}
	return 0
}

// A user whose ACL denies functions (or a Redis before 7) still gets every
// script: the store falls back to EVALSHA on the first refusal.
func TestScriptsFallBackWhenFunctionsAreDenied(t *testing.T) {
	ctx := context.Background()
	admin := srv.Pool()
	defer admin.Close()
	c := admin.Get()
	defer c.Close()
	user := "nofn" + strings.ReplaceAll(redistest.Namespace(), ":", "")
	if _, err := c.Do("ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-fcall", "-function"); err != nil {
		t.Fatal(err)
	}
	defer c.Do("ACL", "DELUSER", user)
	pool := &redis.Pool{DialContext: func(ctx context.Context) (redis.Conn, error) {
		return redis.DialURLContext(ctx, srv.URL, redis.DialUsername(user), redis.DialPassword("pw"))
	}}
	defer pool.Close()
	st := rdb.NewStore(pool, redistest.Namespace())
	q := st.Queue(rdb.Standalone("nofn"))
	ids := []string{"a", "b", "c"}
	if _, _, err := st.EnqueueBatch(ctx, q, ids, [][]byte{[]byte("1"), []byte("2"), []byte("3")}, nil); err != nil {
		t.Fatalf("EnqueueBatch with functions denied: %v", err)
	}
	got, err := st.Take(ctx, q, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 3})
	if err != nil || len(got) != 3 {
		t.Fatalf("Take with functions denied = %+v, %v", got, err)
	}
	ended, err := st.End(ctx, q, 0, []rdb.Ending{rdb.Done(rdb.KindTask, "W", got[0].PID, got[0].ID, nil)})
	if err != nil || ended[0].Outcome != rdb.OutcomeDone {
		t.Fatalf("End with functions denied = %+v, %v", ended, err)
	}
}
