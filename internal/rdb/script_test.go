package rdb_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

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
	before := commandCalls(t, c, "fcall")
	st := rdb.NewStore(pool, redistest.Namespace())
	q := st.Queue(rdb.Standalone("fn"))
	if _, err := st.Enqueue(ctx, q, []string{"a"}, [][]byte{[]byte("p")}, nil); err != nil {
		t.Fatal(err)
	}
	got, err := st.Take(ctx, q, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 1})
	if err != nil || len(got) != 1 {
		t.Fatalf("Take = %+v, %v", got, err)
	}
	if calls := commandCalls(t, c, "fcall") - before; calls < 2 {
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

// noFunctionsPool returns a pool of at most maxActive connections (0: no
// cap) on srv as a user whose ACL denies functions (FCALL, FUNCTION), as
// a Redis before 7 would; the user and the pool go at cleanup.
func noFunctionsPool(t *testing.T, maxActive int) *redis.Pool {
	t.Helper()
	admin := srv.Pool()
	defer admin.Close()
	c := admin.Get()
	defer c.Close()
	user := "nofn" + strings.ReplaceAll(redistest.Namespace(), ":", "")
	if _, err := c.Do("ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-fcall", "-function"); err != nil {
		t.Fatal(err)
	}
	pool := &redis.Pool{MaxActive: maxActive, DialContext: func(ctx context.Context) (redis.Conn, error) {
		return redis.DialURLContext(ctx, srv.URL, redis.DialUsername(user), redis.DialPassword("pw"))
	}}
	t.Cleanup(func() {
		pool.Close()
		a := srv.Pool()
		defer a.Close()
		d := a.Get()
		defer d.Close()
		d.Do("ACL", "DELUSER", user)
	})
	return pool
}

// A user whose ACL denies functions (or a Redis before 7) still gets every
// script: the store falls back to EVALSHA on the first refusal.
func TestScriptsFallBackWhenFunctionsAreDenied(t *testing.T) {
	ctx := context.Background()
	st := rdb.NewStore(noFunctionsPool(t, 0), redistest.Namespace())
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

// offSlotPublishes returns the publishes of calls on a channel whose hash
// tag is not the tag of the call's keys: on a Redis Cluster its SPUBLISH
// would be refused (another node) or cross slots.
func offSlotPublishes(calls []scriptCall) []string {
	var out []string
	for _, c := range calls {
		for _, ch := range c.channels {
			for k := range c.declared {
				if rdb.HashTag(k) != rdb.HashTag(ch) {
					out = append(out, c.name+" on "+ch+" with key "+k)
				}
			}
		}
	}
	return out
}

// TestScriptKeysDeclared watches, through MONITOR, which keys each script
// touches without declaring them in KEYS, in one scenario per case, and
// checks them against the table of docs/PROTOCOL.md ("Keys a script cannot
// declare"): only keys whose names are read inside the script (popped ids,
// fields of a hash) may be missing from KEYS. Every publish of a script is
// on a channel of the tag of its keys (SPUBLISH on a cluster needs it).
func TestScriptKeysDeclared(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool := srv.Pool()
	defer pool.Close()
	ns := redistest.Namespace()
	st := rdb.NewStore(pool, ns)
	k := rdb.NewKeys(ns)
	a := newKeyAuditor(t, ns)
	check := func(step string, want ...string) {
		t.Helper()
		sort.Strings(want)
		calls := a.calls()
		got := undeclared(calls)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: undeclared keys %v, want %v", step, got, want)
		}
		if off := offSlotPublishes(calls); len(off) > 0 {
			t.Errorf("%s: publishes off the call's slot: %v", step, off)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	q := k.Queue(rdb.Standalone("dq"))
	const w = "W"
	at, err := st.Register(ctx, w, 60_000, "h", 1, []rdb.QueueRef{q.Ref})
	must(err)
	check("register")
	until := at + 50_000

	_, err = st.Enqueue(ctx, q, []string{"a", "b", "c"}, [][]byte{[]byte("1"), []byte("2"), []byte("3")}, nil)
	must(err)
	_, err = st.Enqueue(ctx, q, []string{"u"}, [][]byte{[]byte("u")}, &rdb.EnqueueArgs{UniqueKey: "key", UniqueTTL: 60_000})
	must(err)
	check("enqueue")
	_, err = st.Take(ctx, q, rdb.TakeArgs{Worker: "P", Until: until, Max: 10, Park: 10})
	must(err)
	check("take that parks", "take:t")
	_, err = st.Enqueue(ctx, q, []string{"hd"}, [][]byte{[]byte("h")}, nil)
	must(err)
	check("enqueue handed to a parked worker", "enqueue_hand:wq") // the worker is read from the park hash
	_, _, err = st.Requeue(ctx, q, []string{"P"}, false)          // back in the queue, and P unparked
	must(err)
	a.calls()

	got, err := st.Take(ctx, q, rdb.TakeArgs{Worker: w, Until: until, Max: 2})
	must(err)
	check("take", "take:t") // the popped ids
	_, err = st.End(ctx, q, 0, []rdb.Ending{rdb.Done(rdb.KindTask, w, got[0].PID, got[0].ID, nil)})
	must(err)
	check("end of a task")
	_, _, err = st.EndTake(ctx, q, 0, []rdb.Ending{rdb.Dead(rdb.KindTask, w, got[1].PID, got[1].ID, "x")},
		&rdb.TakeArgs{Worker: w, Until: until, Max: 2})
	must(err)
	check("end and take again", "end:t") // the ids the take pops
	_, _, err = st.DeadIDs(ctx, q, rdb.DeadRequeue, []string{got[1].ID})
	must(err)
	check("dead by ids")
	_, err = st.DeadOldest(ctx, q, rdb.DeadDelete, 10, "", "")
	must(err)
	check("dead, the oldest")
	_, _, err = st.Release(ctx, q, w, nil)
	must(err)
	check("release", "release:t") // ids from the worker's hash
	_, err = st.Take(ctx, q, rdb.TakeArgs{Worker: w, Until: until, Max: 10})
	must(err)
	a.calls()
	_, _, err = st.Requeue(ctx, q, []string{w}, true)
	must(err)
	check("requeue", "requeue:t")
	_, err = st.Cancel(ctx, q, "u")
	must(err)
	check("cancel", "cancel:u") // the unique key named in the task's hash
	_, err = st.Move(ctx, q, 100)
	must(err)
	// Scheduled, and due already (unix ms 1): the move finds it.
	_, err = st.Enqueue(ctx, q, []string{"d"}, [][]byte{[]byte("d")}, &rdb.EnqueueArgs{DueMillis: 1})
	must(err)
	a.calls()
	_, err = st.Move(ctx, q, 100)
	must(err)
	check("move", "move:t") // due ids read from the scheduled set
	_, err = st.Bulk(ctx, q, rdb.PlaceWaiting, rdb.BulkDelete)
	must(err)
	check("bulk", "bulk:t") // ids popped from the waiting list

	// A bulk load: its tasks wait packed. The load declares its packed
	// hashes; the take, the bulk cancel and the bulk delete reach them by
	// the ids they pop; a cancel declares the one it names.
	lids := loadIDs(6)
	lps := make([][]byte, len(lids))
	for i := range lps {
		lps[i] = []byte("l")
	}
	_, err = st.LoadChunk(ctx, q, &rdb.LoadArgs{Name: "l", Fingerprint: "fp", TTLMillis: 60_000},
		&rdb.LoadChunk{First: 1, After: 7, IDs: lids, Payloads: lps, Tail: "x"})
	must(err)
	check("load")
	got, err = st.Take(ctx, q, rdb.TakeArgs{Worker: w, Until: until, Max: 2})
	must(err)
	check("take of loaded tasks", "take:lb", "take:t")
	_, err = st.End(ctx, q, 0, []rdb.Ending{rdb.Done(rdb.KindTask, w, got[0].PID, got[0].ID, nil),
		rdb.Done(rdb.KindTask, w, got[1].PID, got[1].ID, nil)})
	must(err)
	a.calls()
	_, err = st.Cancel(ctx, q, lids[2])
	must(err)
	check("cancel of a loaded task")
	_, err = st.Bulk(ctx, q, rdb.PlaceWaiting, rdb.BulkCancel)
	must(err)
	lids = loadIDs(2)
	_, err = st.LoadChunk(ctx, q, &rdb.LoadArgs{Name: "l2", Fingerprint: "fp", TTLMillis: 60_000},
		&rdb.LoadChunk{First: 1, After: 3, IDs: lids, Payloads: lps[:2], Tail: "x"})
	must(err)
	_, err = st.Bulk(ctx, q, rdb.PlaceWaiting, rdb.BulkDelete)
	must(err)
	check("bulk cancel and delete of loaded tasks", "bulk:lb", "bulk:t")
	// A plain batch split into steps is written packed: each step declares
	// its packed hashes.
	big := make([]string, rdb.MaxEnqueueChunk+1)
	bps := make([][]byte, len(big))
	for i := range big {
		big[i], bps[i] = fmt.Sprintf("big%05d", i), []byte("b")
	}
	_, _, err = st.EnqueueBatch(ctx, q, big, bps, nil)
	must(err)
	check("a large batch, packed")
	for n := rdb.BulkStep; n == rdb.BulkStep; {
		n, err = st.Bulk(ctx, q, rdb.PlaceWaiting, rdb.BulkDelete)
		must(err)
	}
	a.calls()

	// Priority levels and limits: a take declares the level lists and the
	// rate log it reads; what puts a task back reaches its level's list by
	// the level read from its hash.
	_, err = st.MarkLevel(ctx, q, 2)
	must(err)
	_, err = st.Enqueue(ctx, q, []string{"p2", "p3"}, [][]byte{[]byte("2"), []byte("3")}, &rdb.EnqueueArgs{Priority: 2})
	must(err)
	check("enqueue at a level") // the level's list is the declared waiting list
	must(st.SetLimits(ctx, q, rdb.Limits{Rate: 10, PeriodMs: 60_000, Conc: 5}))
	got, err = st.Take(ctx, q, rdb.TakeArgs{Worker: w, Until: until, Max: 1, Levels: 2, Limited: true})
	must(err)
	check("take by level, limited", "take:t")
	_, _, err = st.EndTake(ctx, q, 0, []rdb.Ending{rdb.GiveBack(rdb.KindTask, w, got[0].PID, got[0].ID)},
		&rdb.TakeArgs{Worker: w, Until: until, Max: 0, Limited: true})
	must(err)
	check("give back to a level", "end:q") // the task's level, from its hash
	_, err = st.Take(ctx, q, rdb.TakeArgs{Worker: w, Until: until, Max: 1, Levels: 2, Limited: true})
	must(err)
	a.calls()
	_, _, err = st.Requeue(ctx, q, []string{w}, true)
	must(err)
	check("requeue to a level", "requeue:q", "requeue:t")
	// An ordered queue: keyed enqueues (the second merges into the first,
	// waiting), a take, an end that moves the key's next task up, a cancel
	// behind a head, a dead head deleted.
	oq := k.Queue(rdb.Standalone("doq"))
	must(st.WriteKeyPolicy(ctx, oq, rdb.KeyPolicy{Merge: true}))
	a.calls()
	_, err = st.EnqueueKey(ctx, oq, "K", []string{"k1", "k2"}, [][]byte{[]byte("1"), []byte("2")}, nil, nil)
	must(err)
	check("keyed enqueue, merged") // into k1, declared by the same call
	must(st.WriteKeyPolicy(ctx, oq, rdb.KeyPolicy{}))
	_, err = st.EnqueueKey(ctx, oq, "K", []string{"k3", "k4"}, [][]byte{[]byte("3"), []byte("4")}, nil, nil)
	must(err)
	check("keyed enqueue behind a head", "enqueue_key:kn", "enqueue_key:t") // the head's hash (its state; gone?)
	kt, err := st.Take(ctx, oq, rdb.TakeArgs{Worker: w, Until: until, Max: 10})
	must(err)
	a.calls()
	_, err = st.End(ctx, oq, 0, []rdb.Ending{rdb.Done(rdb.KindTask, w, kt[0].PID, kt[0].ID, nil)})
	must(err)
	check("end of a head", "end:k", "end:kh", "end:kn") // the key named in the task's hash
	_, err = st.Cancel(ctx, oq, "k4")
	must(err)
	check("cancel behind a head", "cancel:k", "cancel:kh", "cancel:kn") // the key named in the task's hash
	kt, err = st.Take(ctx, oq, rdb.TakeArgs{Worker: w, Until: until, Max: 10})
	must(err)
	_, err = st.End(ctx, oq, 0, []rdb.Ending{rdb.Dead(rdb.KindTask, w, kt[0].PID, kt[0].ID, "x")})
	must(err)
	a.calls()
	_, _, err = st.DeadIDs(ctx, oq, rdb.DeadDelete, []string{kt[0].ID})
	must(err)
	check("dead head deleted", "dead:kh", "dead:k") // the key named in the task's hash
	// Batches per key: a take with the tasks behind a head, the batch's
	// end (given back whole), its requeue.
	_, err = st.EnqueueKey(ctx, oq, "B", []string{"b1", "b2", "b3"}, [][]byte{[]byte("1"), []byte("2"), []byte("3")}, nil, nil)
	must(err)
	a.calls()
	bt, err := st.Take(ctx, oq, rdb.TakeArgs{Worker: w, Until: until, Max: 10, Batch: 3})
	must(err)
	check("batch take", "take:kh", "take:k", "take:kn", "take:t") // the key named in the head's hash
	_, err = st.End(ctx, oq, 0, []rdb.Ending{rdb.GiveBack(rdb.KindTask, w, bt[0].PID, bt[0].ID).WithBatch(
		[]rdb.Member{{PID: bt[1].PID, ID: bt[1].ID}, {PID: bt[2].PID, ID: bt[2].ID}})})
	must(err)
	check("batch given back", "end:k", "end:kn") // the key named in the head's hash
	_, err = st.Take(ctx, oq, rdb.TakeArgs{Worker: w, Until: until, Max: 10, Batch: 3})
	must(err)
	a.calls()
	_, _, err = st.Requeue(ctx, oq, []string{w}, true)
	must(err)
	check("batch requeue", "requeue:k", "requeue:kn", "requeue:t")

	// A fair queue: keyed enqueues (to a new key, then to one in turn), a
	// take across keys, ends of every kind (done, give back, retry), the
	// retry made due and another promoted, a cancel in a key's list, a dead
	// task requeued, a requeue and a release, the keys' lists emptied in
	// bulk, and the queue dropped.
	fq := k.Queue(rdb.Standalone("dfq"))
	must(st.WriteKeyPolicy(ctx, fq, rdb.KeyPolicy{Fair: true, PerKey: rdb.KeyLimits{MaxRunning: 2}}))
	a.calls()
	for _, key := range []string{"A", "B"} {
		_, err = st.EnqueueKey(ctx, fq, key, []string{key + "1", key + "2", key + "3", key + "4"},
			[][]byte{[]byte("1"), []byte("2"), []byte("3"), []byte("4")}, nil, nil)
		must(err)
	}
	_, err = st.EnqueueKey(ctx, fq, "A", []string{"A5", "A6"}, [][]byte{[]byte("5"), []byte("6")}, nil, nil)
	must(err)
	check("fair enqueue") // the key's list, the ring and the states declared
	must(st.SetKeyLimits(ctx, fq, "B", rdb.KeyLimits{Rate: 2, PeriodMs: 60_000}))
	ft, err := st.Take(ctx, fq, rdb.TakeArgs{Worker: w, Until: until, Max: 4, Fair: true})
	must(err)
	// The keys' lists named by the ring; B's rate log, and the zset of
	// keys waiting out their rate, which B joins.
	check("fair take", "take:fq", "take:fl", "take:fw", "take:t")
	_, _, err = st.EndTake(ctx, fq, 0, []rdb.Ending{rdb.Done(rdb.KindTask, w, ft[0].PID, ft[0].ID, nil),
		rdb.GiveBack(rdb.KindTask, w, ft[1].PID, ft[1].ID), rdb.Retry(rdb.KindTask, w, ft[2].PID, ft[2].ID, 0, "x"),
		rdb.Dead(rdb.KindTask, w, ft[3].PID, ft[3].ID, "x")}, &rdb.TakeArgs{Worker: w, Until: until, Max: 2, Fair: true})
	must(err)
	check("fair ends and take again", "end:fq", "end:t") // the ring and states: the take's, declared
	_, err = st.Move(ctx, fq, 100)
	must(err)
	check("fair move", "move:fq", "move:fs", "move:t") // the key named in the task's hash
	_, err = st.Cancel(ctx, fq, "B4")
	must(err)
	check("fair cancel", "cancel:fq", "cancel:fs")
	_, _, err = st.DeadIDs(ctx, fq, rdb.DeadRequeue, []string{ft[3].ID})
	must(err)
	check("fair dead requeued", "dead:fq", "dead:fs")
	_, _, err = st.Requeue(ctx, fq, []string{w}, true)
	must(err)
	check("fair requeue", "requeue:fq", "requeue:fr", "requeue:fs", "requeue:t")
	_, err = st.Take(ctx, fq, rdb.TakeArgs{Worker: w, Until: until, Max: 2, Fair: true})
	must(err)
	a.calls()
	_, _, err = st.Release(ctx, fq, w, nil)
	must(err)
	check("fair release", "release:fq", "release:fr", "release:fs", "release:t")
	_, err = st.BulkFair(ctx, fq, []string{"A", "B"}, rdb.BulkDelete)
	must(err)
	check("fair bulk delete", "bulk:fq", "bulk:fs", "bulk:t")
	_, err = st.DeadOldest(ctx, fq, rdb.DeadDelete, 10, "", "")
	must(err)
	a.calls()
	if _, ok, left, err := st.DropQueue(ctx, fq, false); err != nil || !ok {
		t.Fatalf("DropQueue of the fair queue = %v, %+v, %v", ok, left, err)
	}
	check("fair drop", "remove_queue:wq") // the holders are read from the holder index

	// A flow: start, a stage that fans out, the children's ends, the
	// next stage forwarded and ended; a run cancelled while waiting.
	flq := func(name string) rdb.QueueKeys { return k.Queue(rdb.QueueRef{Tag: "DF", Name: name}) }
	s1, s2, c1 := flq("s1"), flq("s2"), flq("c1")
	ref := rdb.FlowRef{RetentionMillis: 60_000, IndexBy: []string{"user"}}
	_, err = st.FlowStart(ctx, s1, "r1", map[string]string{"user": "u1"}, ref)
	must(err)
	check("flow start")
	tk, err := st.Take(ctx, s1, rdb.TakeArgs{Worker: w, Until: until, Max: 1, Stage: true})
	must(err)
	a.calls()
	fan := rdb.Done(rdb.KindStage, w, tk[0].PID, "r1", nil)
	fan.Stage = &rdb.StageEnd{Next: "s2", RunRetentionMs: 60_000, IndexBy: ref.IndexBy,
		Children: []rdb.Child{{ID: "r1.k1", Queue: "c1", Payload: []byte("1")}, {ID: "r1.k2", Queue: "c1", Payload: []byte("2")}}}
	_, err = st.End(ctx, s1, 0, []rdb.Ending{fan})
	must(err)
	check("a stage's fan-out") // every child's hash and queue declared
	kids, err := st.Take(ctx, c1, rdb.TakeArgs{Worker: w, Until: until, Max: 2, Child: true})
	must(err)
	a.calls()
	for _, kd := range kids {
		e := rdb.Done(rdb.KindChild, w, kd.PID, kd.ID, nil)
		e.Run = "r1"
		_, err = st.End(ctx, c1, 0, []rdb.Ending{e})
		must(err)
	}
	check("the children's ends", "end:q") // the last forwards the run to the next stage its hash names
	tk, err = st.Take(ctx, s2, rdb.TakeArgs{Worker: w, Until: until, Max: 1, Stage: true})
	must(err)
	a.calls()
	last := rdb.Done(rdb.KindStage, w, tk[0].PID, "r1", nil)
	last.Stage = &rdb.StageEnd{RunRetentionMs: 60_000, IndexBy: ref.IndexBy}
	_, err = st.End(ctx, s2, 0, []rdb.Ending{last})
	must(err)
	check("the last stage's end", "end:ix") // the run's index, named by a value kept in its hash
	_, err = st.FlowStart(ctx, s1, "r2", map[string]string{"user": "u2"}, ref)
	must(err)
	tk, err = st.Take(ctx, s1, rdb.TakeArgs{Worker: w, Until: until, Max: 1, Stage: true})
	must(err)
	a.calls()
	fwd := rdb.Done(rdb.KindStage, w, tk[0].PID, "r2", nil)
	fwd.Stage = &rdb.StageEnd{Next: "s2", RunRetentionMs: 60_000, IndexBy: ref.IndexBy}
	_, err = st.End(ctx, s1, 0, []rdb.Ending{fwd})
	must(err)
	check("a stage's forward") // the next stage's queue declared
	_, err = st.RunCancel(ctx, s1, "r2", ref)
	must(err)
	check("run cancel", "run_cancel:q", "run_cancel:ix") // the run's stage and index, from its hash
	func() {
		c := pool.Get()
		defer c.Close()
		_, err := c.Do("HSET", s1.Task("r2"), "fs", "failed") // as if it had failed
		must(err)
	}()
	a.calls()
	ok, err := st.RunRetry(ctx, s1, "r2")
	must(err)
	if !ok {
		t.Fatal("run retry of a failed run did nothing")
	}
	check("run retry", "run_retry:dead", "run_retry:ix", "run_retry:q") // the run's stage, dead set and index, from its hash

	// Per-task unique keys, deadline and retention.
	_, _, err = st.EnqueueBatch(ctx, q, []string{"x1", "x2", "x3"}, [][]byte{[]byte("1"), []byte("2"), []byte("3")},
		&rdb.EnqueueArgs{UniqueKeys: []string{"k1", "", "k1"}, UniqueTTL: 60_000, DeadlineMs: 1, RetentionMs: 60_000})
	must(err)
	check("enqueue with unique keys per task")
	got, err = st.Take(ctx, q, rdb.TakeArgs{Worker: w, Until: until, Max: 1})
	must(err)
	a.calls()
	_, err = st.End(ctx, q, 0, []rdb.Ending{rdb.Expire(w, got[0].PID, got[0].ID)})
	must(err)
	check("end as expired", "end:u") // the unique lock named in the task's hash

	// Periodic schedules.
	_, err = st.PutSchedule(ctx, "s1", []byte("{}"), "every:1000", 1000)
	must(err)
	check("put a schedule")
	_, due, err := st.DueSchedules(ctx, 0, 10)
	must(err)
	check("due schedules", "periodic_due:sch") // the names are read from the due set
	if len(due) != 1 {
		t.Fatalf("due schedules: %+v", due)
	}
	_, err = st.AdvanceSchedule(ctx, "s1", "every:1000", due[0].Next, 2000, 1000, 1)
	must(err)
	_, err = st.PauseSchedule(ctx, "s1")
	must(err)
	_, err = st.ResumeSchedule(ctx, "s1", "every:1000", 3000)
	must(err)
	_, err = st.RemoveSchedule(ctx, "s1")
	must(err)
	check("advance, pause, resume, remove a schedule")

	// A scheduled task run now.
	_, err = st.Enqueue(ctx, q, []string{"later"}, [][]byte{[]byte("l")}, &rdb.EnqueueArgs{DueMillis: until + 3_600_000})
	must(err)
	check("enqueue delayed")
	if ok, err := st.Promote(ctx, q, "later"); err != nil || !ok {
		t.Fatalf("promote of a scheduled task: %v, %v", ok, err)
	}
	check("promote")

	// A queue removed: its retained tasks, then its keys.
	rq := k.Queue(rdb.Standalone("rq"))
	must(st.WriteSettings(ctx, rq, rdb.QueueSettings{RetentionMs: 60_000}))
	_, err = st.Enqueue(ctx, rq, []string{"r1"}, [][]byte{[]byte("r")}, nil)
	must(err)
	rt, err := st.Take(ctx, rq, rdb.TakeArgs{Worker: w, Until: until, Max: 1})
	must(err)
	_, err = st.End(ctx, rq, 60_000, []rdb.Ending{rdb.Done(rdb.KindTask, w, rt[0].PID, rt[0].ID, nil)})
	must(err)
	a.calls()
	if n, err := st.DeleteRetained(ctx, rq); err != nil || n != 1 {
		t.Fatalf("DeleteRetained = %d, %v; want 1", n, err)
	}
	check("delete retained", "remove_queue:t") // the ids are read from the retained set
	if _, ok, _, err := st.DropQueue(ctx, rq, false); err != nil || !ok {
		t.Fatalf("DropQueue = %v, %v", ok, err)
	}
	check("drop a queue", "remove_queue:wq") // the holders are read from the holder index
}
