package worqr_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/defaults"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// Fair queues (KeyPolicy.Fair): the keys share the queue's slots in turn,
// each within its limits, across workers.

// enqueueKeyed enqueues n tasks of key on queue in one EnqueueBatch.
func enqueueKeyed(t *testing.T, c *worqr.Client, queue, key string, n int) {
	t.Helper()
	ps := make([][]byte, n)
	for i := range ps {
		ps[i] = []byte(fmt.Sprintf("%s-%d", key, i))
	}
	if _, err := c.EnqueueBatch(context.Background(), queue, ps, &worqr.EnqueueOpts{Key: key}); err != nil {
		t.Fatal(err)
	}
}

// One key's backlog of 10,000 tasks does not keep another key's single task
// waiting: it starts within a few takes of its enqueue, while the backlog
// still waits.
func TestFairBacklogDoesNotDelayAnotherKey(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	if err := b.client.SetKeyPolicy(ctx, "fair", worqr.KeyPolicy{Fair: true}); err != nil {
		t.Fatal(err)
	}
	enqueueKeyed(t, b.client, "fair", "big", 10_000)
	var mu sync.Mutex
	var bigStarts int
	smallAt := -1 // big starts before the small task's
	small := make(chan struct{})
	cfg := fastTimings(b.ns)
	cfg.Queues = map[string]worqr.QueueConfig{"fair": {Concurrency: 4, Keys: worqr.KeyPolicy{Fair: true},
		Handler: worqr.HandlerFunc(func(_ context.Context, task *worqr.Task) error {
			mu.Lock()
			defer mu.Unlock()
			if task.Key == "small" {
				smallAt = bigStarts
				close(small)
			} else {
				bigStarts++
			}
			return nil
		})}}
	b.startWorker(cfg)
	wait(t, 10*time.Second, "the backlog to start", func() bool { mu.Lock(); defer mu.Unlock(); return bigStarts >= 100 })
	mu.Lock()
	at := bigStarts
	mu.Unlock()
	if _, err := b.client.Enqueue(ctx, "fair", []byte("s"), &worqr.EnqueueOpts{Key: "small"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-small:
	case <-time.After(30 * time.Second):
		t.Fatal("the small key's task did not start")
	}
	mu.Lock()
	defer mu.Unlock()
	// A take in flight when it came, and the end that takes again, each
	// hand out at most Concurrency (4) tasks of the big key before its
	// turn: a few takes, not the backlog.
	if behind := smallAt - at; behind > 16 {
		t.Errorf("%d tasks of the big key started between the small key's enqueue and its start, want at most 16", behind)
	} else {
		t.Logf("%d tasks of the big key started between the small key's enqueue and its start", behind)
	}
	if smallAt >= 10_000-100 {
		t.Errorf("the small task started after %d of the 10,000: behind the backlog", smallAt)
	}
}

// keyCounter counts, per key, the handlers running now across the
// workers of one process, and the most seen at once.
type keyCounter struct {
	mu       sync.Mutex
	run, max map[string]int
}

func newKeyCounter() *keyCounter { return &keyCounter{run: map[string]int{}, max: map[string]int{}} }

func (k *keyCounter) handler(hold time.Duration, done *atomic.Int32) worqr.Handler {
	return worqr.HandlerFunc(func(_ context.Context, task *worqr.Task) error {
		k.mu.Lock()
		k.run[task.Key]++
		k.max[task.Key] = max(k.max[task.Key], k.run[task.Key])
		k.mu.Unlock()
		time.Sleep(hold)
		k.mu.Lock()
		k.run[task.Key]--
		k.mu.Unlock()
		done.Add(1)
		return nil
	})
}

func (k *keyCounter) most(key string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.max[key]
}

// Two workers with room for 10 tasks between them serve a fair queue whose
// keys run at most 2 tasks each (B: 3, its own limit): counted by the
// handlers themselves, no key ever runs more, and each reaches its limit.
func TestFairKeyLimitAcrossWorkers(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	pol := worqr.KeyPolicy{Fair: true, PerKey: worqr.KeyLimits{Limits: worqr.Limits{Concurrency: 2}}}
	if err := b.client.SetKeyPolicy(ctx, "fair", pol); err != nil {
		t.Fatal(err)
	}
	if err := b.client.SetKeyLimits(ctx, "fair", "B", worqr.KeyLimits{Limits: worqr.Limits{Concurrency: 3}}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"A", "B", "C"} {
		enqueueKeyed(t, b.client, "fair", k, 40)
	}
	kc := newKeyCounter()
	var done atomic.Int32
	for range 2 {
		cfg := fastTimings(b.ns)
		cfg.Queues = map[string]worqr.QueueConfig{"fair": {Concurrency: 5, Keys: pol, Handler: kc.handler(5*time.Millisecond, &done)}}
		b.startWorker(cfg)
	}
	wait(t, 60*time.Second, "the 120 tasks to run", func() bool { return done.Load() == 120 })
	for k, want := range map[string]int{"A": 2, "B": 3, "C": 2} {
		if got := kc.most(k); got != want {
			t.Errorf("key %s ran %d tasks at once at most, want its limit %d", k, got, want)
		}
	}
	// Every slot is given back (by the ends, which follow the handlers'
	// returns): no key keeps a count.
	st := rdb.NewStore(b.pool, b.ns)
	for _, k := range []string{"A", "B", "C"} {
		wait(t, 10*time.Second, "key "+k+"'s slots to come back", func() bool {
			fk, err := st.ReadFairKey(ctx, st.Queue(rdb.Standalone("fair")), k)
			if err != nil {
				t.Fatal(err)
			}
			return fk.Running == 0 && !fk.Held
		})
	}
}

// A worker killed (SIGKILL, another process) while it runs a key's 2
// tasks, its limit, gives the key's slots back when the reaper requeues
// its takings: a live worker then runs the key's tasks, never more than 2
// at once.
func TestFairKeySlotsComeBackAfterACrash(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	c := newClient(t, pool, &worqr.Config{Namespace: ns})
	pol := worqr.KeyPolicy{Fair: true, PerKey: worqr.KeyLimits{Limits: worqr.Limits{Concurrency: 2}}}
	if err := c.SetKeyPolicy(ctx, "fair", pol); err != nil {
		t.Fatal(err)
	}
	enqueueKeyed(t, c, "fair", "A", 20)
	rc := newRunCounter(pool, ns)
	child := startChild(t, "fair", ns)
	wait(t, 20*time.Second, "the child to run A's 2 tasks", func() bool { return rc.of(t, "child") == 2 })
	st := rdb.NewStore(pool, ns)
	qk := st.Queue(rdb.Standalone("fair"))
	if fk, err := st.ReadFairKey(ctx, qk, "A"); err != nil || fk.Running != 2 || !fk.Held || fk.Waiting != 18 {
		t.Fatalf("A: %+v, %v; want 2 running, held by its limit, 18 waiting", fk, err)
	}

	var done atomic.Int32
	cfg := fastTimings(ns)
	cfg.Queues = map[string]worqr.QueueConfig{"fair": {Concurrency: 5, Keys: pol,
		Handler: limitHandler(rc, "live", 5*time.Millisecond, nil, &done)}}
	startWorker(t, ctx, pool, &cfg)
	killed := time.Now()
	child.kill(t)
	rc.markGone(t, "child")
	rc.resetMax(t)
	wait(t, 20*time.Second, "the live worker to run A's tasks", func() bool { return done.Load() == 20 })
	t.Logf("A's 20 tasks done %s after the SIGKILL", time.Since(killed).Round(time.Millisecond))
	if m := rc.max(t); m != 2 {
		t.Errorf("at most %d of A's tasks ran at once on live workers, want its limit 2", m)
	}
	wait(t, 10*time.Second, "A's slots to come back (the ends follow the handlers)", func() bool {
		fk, err := st.ReadFairKey(ctx, qk, "A")
		if err != nil {
			t.Fatal(err)
		}
		return fk.Running == 0 && !fk.Held && fk.Waiting == 0
	})
}

// Bad fair settings are refused with an error naming the field, and
// nothing is stored.
func TestFairSettingsAreChecked(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	for _, c := range []struct {
		name, field string
		err         error
	}{
		{"weight over 1,000", "KeyPolicy.PerKey.Weight",
			b.client.SetKeyPolicy(ctx, "f", worqr.KeyPolicy{Fair: true, PerKey: worqr.KeyLimits{Weight: 1001}})},
		{"negative limit", "KeyPolicy.PerKey.Concurrency",
			b.client.SetKeyPolicy(ctx, "f", worqr.KeyPolicy{Fair: true, PerKey: worqr.KeyLimits{Limits: worqr.Limits{Concurrency: -1}}})},
		{"merging on a fair queue", "KeyPolicy.Merge",
			b.client.SetKeyPolicy(ctx, "f", worqr.KeyPolicy{Fair: true, Merge: true})},
		{"a key's negative weight", "KeyLimits.Weight", b.client.SetKeyLimits(ctx, "f", "k", worqr.KeyLimits{Weight: -1})},
		{"a key's rate over 1,000", "KeyLimits.Rate", b.client.SetKeyLimits(ctx, "f", "k",
			worqr.KeyLimits{Limits: worqr.Limits{Rate: 1001, Period: time.Second}})},
		{"a rate without a period", "KeyPolicy.PerKey.Period",
			b.client.SetKeyPolicy(ctx, "f", worqr.KeyPolicy{Fair: true, PerKey: worqr.KeyLimits{Limits: worqr.Limits{Rate: 1}}})},
		{"a singleton queue that is not fair", "KeyPolicy.Singleton", b.client.SetKeyPolicy(ctx, "f", worqr.KeyPolicy{Singleton: true})},
		{"a throttle on a queue that is not fair", "KeyPolicy.Throttle", b.client.SetKeyPolicy(ctx, "f", worqr.KeyPolicy{Throttle: true})},
		{"a debounce on a queue that is not fair", "KeyPolicy.Debounce", b.client.SetKeyPolicy(ctx, "f", worqr.KeyPolicy{Debounce: time.Second})},
		{"a negative debounce", "KeyPolicy.Debounce", b.client.SetKeyPolicy(ctx, "f", worqr.KeyPolicy{Fair: true, Debounce: -time.Second})},
		{"a max wait without a debounce", "KeyPolicy.DebounceMax", b.client.SetKeyPolicy(ctx, "f", worqr.KeyPolicy{Fair: true, DebounceMax: time.Second})},
		{"a max wait shorter than the debounce", "KeyPolicy.DebounceMax",
			b.client.SetKeyPolicy(ctx, "f", worqr.KeyPolicy{Fair: true, Debounce: time.Minute, DebounceMax: time.Second})},
		{"an empty key", "key", b.client.SetKeyLimits(ctx, "f", "", worqr.KeyLimits{Limits: worqr.Limits{Concurrency: 1}})},
		{"an oversized key", "key", b.client.SetKeyLimits(ctx, "f", string(make([]byte, defaults.MaxKeyLen+1)), worqr.KeyLimits{Limits: worqr.Limits{Concurrency: 1}})},
	} {
		if f := invalidField(t, c.name, c.err); f != c.field {
			t.Errorf("%s: the error names %q, want %q", c.name, f, c.field)
		}
	}
	cfg := fastTimings(b.ns)
	cfg.Queues = map[string]worqr.QueueConfig{"f": {Concurrency: 1, KeyBatch: 2, Keys: worqr.KeyPolicy{Fair: true},
		BatchHandler: worqr.BatchHandlerFunc(func(context.Context, *worqr.Batch) error { return nil })}}
	_, err := worqr.NewWorker(b.pool, &cfg)
	if f := invalidField(t, "KeyBatch on a fair queue", err); f != `Queues["f"].KeyBatch` {
		t.Errorf("KeyBatch on a fair queue: the error names %q", f)
	}
	st := rdb.NewStore(b.pool, b.ns)
	if p, err := st.ReadKeyPolicy(ctx, st.Queue(rdb.Standalone("f"))); err != nil || p.Fair {
		t.Errorf("policy %+v, %v: a refused one was stored", p, err)
	}
}

// The operator's tools reach a fair queue's keys' lists: Waiting counts
// the tasks in them, Tasks(StateQueued) lists them after the tasks with no
// key, DeleteAllWaiting and CancelAll empty them, and a forced RemoveQueue
// leaves no key behind.
func TestFairQueueOperatorTools(t *testing.T) {
	ctx := context.Background()
	fairQueue := func(t *testing.T, b *bundle, q string) {
		t.Helper()
		if err := b.client.SetKeyPolicy(ctx, q, worqr.KeyPolicy{Fair: true}); err != nil {
			t.Fatal(err)
		}
		enqueueKeyed(t, b.client, q, "A", 300) // past a bulk chunk
		enqueueKeyed(t, b.client, q, "B", 2)
		if _, err := b.client.Enqueue(ctx, q, []byte("plain"), nil); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("waiting and listed", func(t *testing.T) {
		b := setup(t)
		fairQueue(t, b, "fair")
		qi, err := b.in.Queue(ctx, "fair")
		if err != nil || qi.Waiting != 303 || qi.Keys != 2 {
			t.Fatalf("Queue = %+v, %v; want 303 waiting, 2 keys", qi, err)
		}
		tasks, total, err := b.in.Tasks(ctx, "fair", worqr.StateQueued, 0, 1000)
		if err != nil || total != 303 || len(tasks) != 303 {
			t.Fatalf("Tasks(queued) = %d of %d, %v; want 303 of 303", len(tasks), total, err)
		}
		if tasks[0].Key != "" {
			t.Errorf("the first listed is %+v, want the task with no key", tasks[0])
		}
		page, total, err := b.in.Tasks(ctx, "fair", worqr.StateQueued, 300, 10)
		if err != nil || total != 303 || len(page) != 3 || page[0].ID != tasks[300].ID {
			t.Errorf("Tasks(queued) from 300: %d of %d, %v; want the last 3", len(page), total, err)
		}
	})
	t.Run("delete all waiting", func(t *testing.T) {
		b := setup(t)
		fairQueue(t, b, "fair")
		if n, err := b.in.DeleteAllWaiting(ctx, "fair", nil); err != nil || n != 303 {
			t.Fatalf("DeleteAllWaiting = %d, %v; want 303", n, err)
		}
		if qi, err := b.in.Queue(ctx, "fair"); err != nil || qi.Waiting != 0 {
			t.Fatalf("Queue = %+v, %v; want none waiting", qi, err)
		}
	})
	t.Run("cancel all", func(t *testing.T) {
		b := setup(t)
		fairQueue(t, b, "fair")
		if n, err := b.in.CancelAll(ctx, "fair", nil); err != nil || n != 303 {
			t.Fatalf("CancelAll = %d, %v; want 303", n, err)
		}
		if qi, err := b.in.Queue(ctx, "fair"); err != nil || qi.Waiting != 0 {
			t.Fatalf("Queue = %+v, %v; want none waiting", qi, err)
		}
	})
	t.Run("removed, forced", func(t *testing.T) {
		b := setup(t)
		fairQueue(t, b, "fair")
		var ne *worqr.QueueNotEmptyError
		if _, err := b.in.RemoveQueue(ctx, "fair", nil); !errors.As(err, &ne) || ne.Held.Waiting != 303 {
			t.Fatalf("RemoveQueue unforced: %v; want refused with 303 waiting", err)
		}
		if n, err := b.in.RemoveQueue(ctx, "fair", &worqr.RemoveQueueOpts{Force: true}); err != nil || n != 303 {
			t.Fatalf("RemoveQueue forced = %d, %v; want 303 deleted", n, err)
		}
		conn := b.pool.Get()
		defer conn.Close()
		for _, k := range keysOf(t, b.pool, b.ns, "fair") {
			if pttl, _ := redis.Int64(conn.Do("PTTL", k)); pttl < 0 && !strings.HasSuffix(k, ":seq") {
				t.Errorf("key left for ever after the forced removal: %s", k)
			}
		}
	})
}

// A key's Rate holds across two workers: a key that may start 3 tasks an
// hour starts 3 (counted by the handlers) while the other keys run all of
// theirs, and its other tasks wait, counted in Waiting.
func TestFairKeyRateAcrossWorkers(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	pol := worqr.KeyPolicy{Fair: true}
	if err := b.client.SetKeyPolicy(ctx, "fair", pol); err != nil {
		t.Fatal(err)
	}
	if err := b.client.SetKeyLimits(ctx, "fair", "A", worqr.KeyLimits{Limits: worqr.Limits{Rate: 3, Period: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"A", "B", "C"} {
		enqueueKeyed(t, b.client, "fair", k, 10)
	}
	var mu sync.Mutex
	started := map[string]int{}
	var done atomic.Int32
	for range 2 {
		cfg := fastTimings(b.ns)
		cfg.Queues = map[string]worqr.QueueConfig{"fair": {Concurrency: 4, Keys: pol,
			Handler: worqr.HandlerFunc(func(_ context.Context, task *worqr.Task) error {
				mu.Lock()
				started[task.Key]++
				mu.Unlock()
				done.Add(1)
				return nil
			})}}
		b.startWorker(cfg)
	}
	wait(t, 30*time.Second, "B's and C's tasks and 3 of A's to run", func() bool { return done.Load() == 23 })
	qi, err := b.in.Queue(ctx, "fair")
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if started["A"] != 3 || started["B"] != 10 || started["C"] != 10 || qi.Waiting != 7 || qi.Keys != 1 {
		t.Errorf("started %v, %d waiting, %d keys; want A 3 (its rate), B and C 10, 7 of A's waiting, 1 key",
			started, qi.Waiting, qi.Keys)
	}
}

// A key whose Rate is 2 per 300ms starts its 6 tasks in three windows: by
// their start times (Redis time, kept with the retained tasks), no 3 of
// them start within 300ms.
func TestFairKeyRateWindows(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	const period = 300 * time.Millisecond
	pol := worqr.KeyPolicy{Fair: true, PerKey: worqr.KeyLimits{Limits: worqr.Limits{Rate: 2, Period: period}}}
	if err := b.client.SetKeyPolicy(ctx, "fair", pol); err != nil {
		t.Fatal(err)
	}
	enqueueKeyed(t, b.client, "fair", "A", 6)
	var done atomic.Int32
	cfg := fastTimings(b.ns)
	cfg.Queues = map[string]worqr.QueueConfig{"fair": {Concurrency: 4, Keys: pol, Retention: time.Minute,
		Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error { done.Add(1); return nil })}}
	b.startWorker(cfg)
	wait(t, 30*time.Second, "A's 6 tasks to run", func() bool { return done.Load() == 6 })
	tasks, _, err := b.in.Tasks(ctx, "fair", worqr.StateDone, 0, 10)
	if err != nil || len(tasks) != 6 {
		t.Fatalf("Tasks(done) = %d, %v; want 6", len(tasks), err)
	}
	var at []time.Time
	for _, ti := range tasks {
		at = append(at, ti.StartedAt)
	}
	slices.SortFunc(at, func(x, y time.Time) int { return x.Compare(y) })
	for i := 2; i < len(at); i++ {
		if d := at[i].Sub(at[i-2]); d < period {
			t.Errorf("starts %d and %d are %s apart: 3 starts within %s", i-2, i, d, period)
		}
	}
	t.Logf("starts: %v", at)
}

// The Inspector shows a fair queue's keys: each one's tasks waiting and
// running, whether it starts nothing for now (held by its Concurrency, or
// waiting out its Rate), its limits (its own or the queue's), and the ids
// waiting in its list.
func TestFairKeysInspected(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	pol := worqr.KeyPolicy{Fair: true, PerKey: worqr.KeyLimits{Weight: 2}}
	if err := b.client.SetKeyPolicy(ctx, "fair", pol); err != nil {
		t.Fatal(err)
	}
	aLim := worqr.KeyLimits{Weight: 1, Limits: worqr.Limits{Concurrency: 1}}
	bLim := worqr.KeyLimits{Weight: 3, Limits: worqr.Limits{Rate: 1, Period: time.Hour}}
	for k, l := range map[string]worqr.KeyLimits{"A": aLim, "B": bLim} {
		if err := b.client.SetKeyLimits(ctx, "fair", k, l); err != nil {
			t.Fatal(err)
		}
	}
	enqueueKeyed(t, b.client, "fair", "A", 3)
	enqueueKeyed(t, b.client, "fair", "B", 3)
	st := rdb.NewStore(b.pool, b.ns)
	qk := st.Queue(rdb.Standalone("fair"))
	tk, err := st.Take(ctx, qk, rdb.TakeArgs{Worker: "W", Until: 1 << 62, Max: 10, Fair: true})
	if err != nil || len(tk) != 2 {
		t.Fatalf("Take = %d, %v; want one of A and one of B", len(tk), err)
	}
	enqueueKeyed(t, b.client, "fair", "C", 2)
	keys, next, total, err := b.in.Keys(ctx, "fair", 0, 100)
	if err != nil || next != 0 || total != 3 {
		t.Fatalf("Keys = %d keys, next %d, total %d, %v; want 3 keys with tasks waiting, one page", len(keys), next, total, err)
	}
	got := map[string]worqr.KeyInfo{}
	for _, k := range keys {
		got[k.Key] = k
	}
	want := map[string]worqr.KeyInfo{
		"A": {Key: "A", Behind: 2, Running: 1, Blocked: true, KeyLimits: aLim},
		"B": {Key: "B", Behind: 2, Running: 1, Blocked: true, KeyLimits: bLim},
		"C": {Key: "C", Behind: 2, KeyLimits: worqr.KeyLimits{Weight: 2}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Keys:\n got %+v\nwant %+v", got, want)
	}
	if ki, err := b.in.Key(ctx, "fair", "B"); err != nil || ki == nil || !reflect.DeepEqual(*ki, want["B"]) {
		t.Errorf("Key(B) = %+v, %v; want %+v", ki, err, want["B"])
	}
	if ki, err := b.in.Key(ctx, "fair", "Z"); err != nil || ki != nil {
		t.Errorf("Key(Z) = %+v, %v; want nil: no task", ki, err)
	}
	if ids, err := b.in.TasksBehind(ctx, "fair", "C", 0, 10); err != nil || len(ids) != 2 {
		t.Errorf("TasksBehind(C) = %v, %v; want its 2 waiting ids", ids, err)
	}
	// A dead task of a fair key blocks nothing (no head).
	if _, err := st.End(ctx, qk, 0, []rdb.Ending{rdb.Dead(rdb.KindTask, "W", tk[1].PID, tk[1].ID, "x")}); err != nil {
		t.Fatal(err)
	}
	if bk, err := b.in.BlockedKeys(ctx, "fair", 10); err != nil || len(bk) != 0 {
		t.Errorf("BlockedKeys = %+v, %v; want none: a fair key has no head", bk, err)
	}
}

// A fair queue's gates on its keys' enqueues (KeyPolicy.Singleton,
// Debounce, Throttle): an enqueue a gate answers adds no task and returns
// the id of the key's task that holds the place.
func TestFairKeyGates(t *testing.T) {
	ctx := context.Background()
	enqueue := func(t *testing.T, c *worqr.Client, key, payload string, opts *worqr.EnqueueOpts) string {
		t.Helper()
		if opts == nil {
			opts = &worqr.EnqueueOpts{}
		}
		opts.Key = key
		id, err := c.Enqueue(ctx, "fair", []byte(payload), opts)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	waiting := func(t *testing.T, b *bundle) int {
		t.Helper()
		qi, err := b.in.Queue(ctx, "fair")
		if err != nil {
			t.Fatal(err)
		}
		return int(qi.Waiting + qi.Scheduled)
	}
	// release makes a handler that signals each start on started and
	// returns what it reads from ret.
	type start struct {
		id, payload string
	}
	handler := func(started chan<- start, ret <-chan error) worqr.Handler {
		return worqr.HandlerFunc(func(_ context.Context, task *worqr.Task) error {
			started <- start{task.ID, string(task.Payload)}
			return <-ret
		})
	}
	worker := func(b *bundle, pol worqr.KeyPolicy, h worqr.Handler) {
		cfg := fastTimings(b.ns)
		cfg.Queues = map[string]worqr.QueueConfig{"fair": {Concurrency: 4, Keys: pol, Handler: h, Retention: time.Minute,
			MaxAttempts: 3, Backoff: func(int, error) time.Duration { return time.Hour }}}
		b.startWorker(cfg)
	}
	recv := func(t *testing.T, ch <-chan start) start { t.Helper(); return within(t, ch, "a task to start") }

	t.Run("singleton answers with the task that waits, runs or waits for a retry", func(t *testing.T) {
		b := setup(t)
		pol := worqr.KeyPolicy{Fair: true, Singleton: true}
		if err := b.client.SetKeyPolicy(ctx, "fair", pol); err != nil {
			t.Fatal(err)
		}
		id := enqueue(t, b.client, "A", "a1", nil)
		if again := enqueue(t, b.client, "A", "a2", nil); again != id {
			t.Errorf("a second enqueue of a waiting key got %s, want the waiting task %s", again, id)
		}
		other := enqueue(t, b.client, "B", "b1", nil)
		if other == id || waiting(t, b) != 2 {
			t.Errorf("key B got %s, %d tasks wait: want a task of its own, 2 waiting", other, waiting(t, b))
		}
		started, ret := make(chan start, 4), make(chan error, 4)
		worker(b, pol, handler(started, ret))
		got := map[string]string{}
		for range 2 {
			s := recv(t, started)
			got[s.id] = s.payload
		}
		if got[id] != "a1" {
			t.Errorf("A's task ran with %q, want its own payload a1 (the answered enqueue adds nothing)", got[id])
		}
		if again := enqueue(t, b.client, "A", "a3", nil); again != id {
			t.Errorf("an enqueue of a running key got %s, want the running task %s", again, id)
		}
		ret <- errors.New("fail once") // one of A, B fails: both wait for their retry in an hour
		ret <- errors.New("fail once")
		wait(t, 10*time.Second, "both tasks to wait for their retry", func() bool {
			ti, err := b.in.Task(ctx, "fair", id)
			return err == nil && ti.State == worqr.StateScheduled
		})
		if again := enqueue(t, b.client, "A", "a4", nil); again != id {
			t.Errorf("an enqueue of a key whose task waits for a retry got %s, want %s", again, id)
		}
		if _, err := b.client.Cancel(ctx, "fair", id); err != nil {
			t.Fatal(err)
		}
		if next := enqueue(t, b.client, "A", "a5", nil); next == id {
			t.Errorf("an enqueue after the key's task ended got %s again, want a new task", next)
		}
	})

	t.Run("debounce replaces the waiting task and moves its start within DebounceMax", func(t *testing.T) {
		b := setup(t)
		pol := worqr.KeyPolicy{Fair: true, Debounce: time.Hour, DebounceMax: 90 * time.Minute}
		if err := b.client.SetKeyPolicy(ctx, "fair", pol); err != nil {
			t.Fatal(err)
		}
		before := time.Now()
		id := enqueue(t, b.client, "A", "a1", nil)
		ti, err := b.in.Task(ctx, "fair", id)
		if err != nil {
			t.Fatal(err)
		}
		first := ti.DueAt
		if ti.State != worqr.StateScheduled || first.Before(before.Add(time.Hour-time.Second)) || first.After(time.Now().Add(time.Hour+time.Second)) {
			t.Fatalf("task %s %s due %v: want scheduled an hour from its enqueue", id, ti.State, first)
		}
		// A later At wins over Debounce, but DebounceMax bounds it.
		again := enqueue(t, b.client, "A", "a2", &worqr.EnqueueOpts{At: time.Now().Add(3 * time.Hour), Meta: map[string]string{"m": "2"}})
		ti, err = b.in.Task(ctx, "fair", id)
		if err != nil {
			t.Fatal(err)
		}
		if again != id || string(ti.HandlerPayload()) != "a2" || ti.Meta["m"] != "2" || waiting(t, b) != 1 {
			t.Errorf("second enqueue: id %s (want %s), payload %q, meta %v, %d tasks: want the task replaced, alone",
				again, id, ti.HandlerPayload(), ti.Meta, waiting(t, b))
		}
		if bound := first.Add(30 * time.Minute); ti.DueAt.After(bound.Add(time.Second)) || ti.DueAt.Before(bound.Add(-time.Second)) {
			t.Errorf("due %v after the move, want its first enqueue + DebounceMax (%v)", ti.DueAt, bound)
		}
		// Once it may start (the mover's path: RunNow), the next enqueue
		// starts a task of its own, which the first's run does not see.
		if ok, err := b.in.RunNow(ctx, "fair", id); err != nil || !ok {
			t.Fatalf("RunNow = %v, %v", ok, err)
		}
		if next := enqueue(t, b.client, "A", "a3", nil); next == id {
			t.Errorf("an enqueue after the task was due got %s again, want a new task", next)
		}
		// A task that ran and waits for its retry is not replaced either.
		idB := enqueue(t, b.client, "B", "b1", nil)
		if ok, err := b.in.RunNow(ctx, "fair", idB); err != nil || !ok {
			t.Fatalf("RunNow = %v, %v", ok, err)
		}
		started, ret := make(chan start, 4), make(chan error, 4)
		worker(b, pol, handler(started, ret))
		got := map[string]string{}
		for range 2 {
			s := recv(t, started)
			got[s.id] = s.payload
			ret <- errors.New("fail once")
		}
		if got[id] != "a2" || got[idB] != "b1" {
			t.Errorf("ran %v, want %s with the last payload a2 and %s with b1", got, id, idB)
		}
		wait(t, 10*time.Second, "B's task to wait for its retry", func() bool {
			ti, err := b.in.Task(ctx, "fair", idB)
			return err == nil && ti.State == worqr.StateScheduled
		})
		if again := enqueue(t, b.client, "B", "b2", nil); again == idB {
			t.Errorf("an enqueue while the key's task waits for a retry got %s, want a new task", again)
		}
		ti, err = b.in.Task(ctx, "fair", idB)
		if err != nil || string(ti.HandlerPayload()) != "b1" {
			t.Errorf("the retried task holds %q, %v: want b1 untouched", ti.HandlerPayload(), err)
		}
	})

	t.Run("throttle drops an enqueue while the key waits or is at its rate", func(t *testing.T) {
		b := setup(t)
		pol := worqr.KeyPolicy{Fair: true, Throttle: true, PerKey: worqr.KeyLimits{Limits: worqr.Limits{Rate: 1, Period: time.Hour}}}
		if err := b.client.SetKeyPolicy(ctx, "fair", pol); err != nil {
			t.Fatal(err)
		}
		id := enqueue(t, b.client, "A", "a1", nil)
		if again := enqueue(t, b.client, "A", "a2", nil); again != id {
			t.Errorf("an enqueue while the key's task waits got %s, want %s", again, id)
		}
		started, ret := make(chan start, 4), make(chan error, 4)
		worker(b, pol, handler(started, ret))
		recv(t, started)
		ret <- nil
		wait(t, 10*time.Second, "the task to end", func() bool {
			ti, err := b.in.Task(ctx, "fair", id)
			return err == nil && ti.State == worqr.StateDone
		})
		if again := enqueue(t, b.client, "A", "a3", nil); again != id || waiting(t, b) != 0 {
			t.Errorf("an enqueue within the key's rate window got %s (%d waiting), want %s and nothing added", again, waiting(t, b), id)
		}
		// Without Throttle the same enqueue waits for the window.
		pol.Throttle = false
		if err := b.client.SetKeyPolicy(ctx, "fair", pol); err != nil {
			t.Fatal(err)
		}
		if next := enqueue(t, b.client, "A", "a4", nil); next == id || waiting(t, b) != 1 {
			t.Errorf("without Throttle: got %s with %d waiting, want a new task waiting", next, waiting(t, b))
		}
	})
}

// A fair queue's latency is the age of its oldest waiting task, those in
// its keys' lists included: with only keyed tasks waiting, it grows from
// their enqueue.
func TestFairQueueLatency(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	if err := b.client.SetKeyPolicy(ctx, "fair", worqr.KeyPolicy{Fair: true}); err != nil {
		t.Fatal(err)
	}
	enqueueKeyed(t, b.client, "fair", "A", 2)
	enqueueKeyed(t, b.client, "fair", "B", 1)
	redistest.Eventually(t, 10*time.Second, func() string {
		qi, err := b.in.Queue(ctx, "fair")
		if err != nil {
			return err.Error()
		}
		if qi.Waiting != 3 || qi.Latency < 20*time.Millisecond {
			return fmt.Sprintf("waiting %d, latency %s; want 3 waiting and a latency that grows past 20ms", qi.Waiting, qi.Latency)
		}
		return ""
	})
}
