package worqr_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/worqr/worqr-go/defaults"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// A large EnqueueBatch whose connection breaks after Redis applied the
// steps on the wire (their replies lost) used to report only the first
// step enqueued, while sixteen were (4,000 tasks more than it said).
func TestBatchWithLostRepliesSaysWhatIsIn(t *testing.T) {
	ctx := context.Background()
	pool, _, c, in := replyLossClient(t)
	ps := batchPayloads(40 * 250)
	// The second step (the first of the window) loses its reply, and so
	// do the fifteen sent with it.
	pool.sendOnly = true
	pool.setLose(nthCall("enqueue_packed", 1))
	ids, err := c.EnqueueBatch(ctx, "b", ps, nil)
	pool.setLose(nil)
	checkBatchError(t, in, "b", ps, ids, err)
}

// A step of a large EnqueueBatch refused by Redis (here out of memory, for
// that one step) used to leave the steps sent behind it applied: tasks
// past the BatchError's count, after a hole, and out of order.
func TestBatchStepRefusedAppliesNoneAfterIt(t *testing.T) {
	ctx := context.Background()
	s := redistest.MustStart()
	defer s.Stop()
	side, err := redis.DialURL(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer side.Close()
	oomCount := func() int {
		info, err := redis.String(side.Do("INFO", "errorstats"))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "errorstat_OOM:count="); ok {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
		return 0
	}
	// The 17th step sent on the window's connection is flushed alone (the
	// window is full): Redis refuses it for want of memory, then has its
	// memory back for the steps after it.
	var mu sync.Mutex
	sends := 0
	base := s.Pool()
	defer base.Close()
	pool := &redistest.HookPool{Pool: base, Sent: func(cmd string, args []any) func() {
		if cmd != "FCALL" || len(args) == 0 || !strings.HasSuffix(fmt.Sprint(args[0]), "_enqueue_packed") {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		sends++
		if sends != 17 {
			return nil
		}
		before := oomCount()
		if _, err := side.Do("CONFIG", "SET", "maxmemory", "1"); err != nil {
			t.Error(err)
		}
		return func() { // after the flush: once Redis refused it
			for deadline := time.Now().Add(10 * time.Second); oomCount() == before && time.Now().Before(deadline); {
			}
			if _, err := side.Do("CONFIG", "SET", "maxmemory", "0"); err != nil {
				t.Error(err)
			}
		}
	}}
	cfg := worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true}
	c, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, pool, &cfg)
	ps := batchPayloads(40 * 250)
	ids, err := c.EnqueueBatch(ctx, "b", ps, nil)
	if err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("EnqueueBatch: %v; want the refused step's OOM", err)
	}
	checkBatchError(t, in, "b", ps, ids, err)
}

// The first step of a large EnqueueBatch runs alone: when its reply was
// lost after Redis applied it, the BatchError said 0 of 2,500 enqueued
// while 250 were in (found by the audit of ordered queues, for plain
// batches). The guard, closed, says how far it got, and a step 0 still on
// its way is refused by it.
func TestBatchWithItsFirstReplyLostSaysWhatIsIn(t *testing.T) {
	ctx := context.Background()
	pool, _, c, in := replyLossClient(t)
	ps := batchPayloads(10 * 250)
	pool.setLose(nthCall("enqueue_packed", 1))
	ids, err := c.EnqueueBatch(ctx, "b", ps, nil)
	pool.setLose(nil)
	checkBatchError(t, in, "b", ps, ids, err)
	var be *worqr.BatchError
	if errors.As(err, &be) && be.Enqueued != 250 {
		t.Fatalf("BatchError.Enqueued %d, want 250 (the first step, applied)", be.Enqueued)
	}
}

// An EnqueueBatch of one call (here 10 tasks) is all or nothing. When its
// reply was lost after Redis applied it, the BatchError said 0 of 10
// enqueued while all 10 were in: a caller resending the batch, as the
// error advises, ran each task twice (found by the audit of idempotent
// enqueues). The call leaves its guard behind; the client closes it and
// reads whether the call applied. Both scripts a call of one batch may
// run carry the guard: enqueue_hand (nothing but payloads) and enqueue
// (with a deadline).
func TestBatchOfOneCallWithItsReplyLostSaysWhatIsIn(t *testing.T) {
	for _, tc := range oneCallBatches() {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			pool, _, c, in := replyLossClient(t)
			// The library loaded first: the call below is applied.
			if _, err := c.Enqueue(ctx, "warm", []byte("x"), nil); err != nil {
				t.Fatal(err)
			}
			ps := batchPayloads(10)
			pool.setLose(nthCall(tc.script, 1))
			ids, err := c.EnqueueBatch(ctx, "b", ps, tc.opts)
			pool.setLose(nil)
			checkBatchError(t, in, "b", ps, ids, err)
			var be *worqr.BatchError
			if errors.As(err, &be) && be.Enqueued != len(ps) {
				t.Fatalf("BatchError.Enqueued %d, want %d (the call applied)", be.Enqueued, len(ps))
			}
		})
	}
}

// EnqueueBatch accepts EnqueueOpts.ID for a batch of one; with UniqueKeys
// too, a repeat (say, after a lost reply) must return the same id, as
// Enqueue does, and another payload must match ErrDuplicate. It said
// "0 of 1 tasks enqueued: task already enqueued" (a *BatchError matching
// neither) although the task exists.
func TestBatchOfOneWithIDRepeated(t *testing.T) {
	ctx := context.Background()
	bundle := setup(t)
	c, in := bundle.client, bundle.in
	opts := &worqr.EnqueueOpts{ID: "order-1", UniqueKeys: []string{"k"}, UniqueTTL: time.Hour}
	ids, err := c.EnqueueBatch(ctx, "q", [][]byte{[]byte("p")}, opts)
	if err != nil || len(ids) != 1 || ids[0] != "order-1" {
		t.Fatalf("first: %v, %v", ids, err)
	}
	ids, err = c.EnqueueBatch(ctx, "q", [][]byte{[]byte("p")}, opts)
	if err != nil || len(ids) != 1 || ids[0] != "order-1" {
		t.Errorf("repeat with the same payload: %v, %v; want [order-1], nil", ids, err)
	}
	_, err = c.EnqueueBatch(ctx, "q", [][]byte{[]byte("other")}, opts)
	if !errors.Is(err, worqr.ErrDuplicate) {
		t.Errorf("repeat with another payload: %v; want ErrDuplicate", err)
	}
	if n := queueLen(t, in, "q"); n != 1 {
		t.Errorf("waiting: %d, want 1", n)
	}
}

// A batch of one with an id of the caller's whose unique key is held is
// left out (a BatchError of duplicates) but its id was remembered all the same: once
// the key is free, the same enqueue says "already enqueued" (with the fix
// above: returns the id, nil) and no task of that id exists: lost.
func TestBatchOfOneWithIDLeftOutIsNotRemembered(t *testing.T) {
	ctx := context.Background()
	bundle := setup(t)
	c, in := bundle.client, bundle.in
	holder, err := c.Enqueue(ctx, "q", []byte("h"), &worqr.EnqueueOpts{UniqueKey: "k", UniqueTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	opts := &worqr.EnqueueOpts{ID: "order-2", UniqueKeys: []string{"k"}, UniqueTTL: time.Hour}
	if _, err := c.EnqueueBatch(ctx, "q", [][]byte{[]byte("p")}, opts); !errors.Is(err, worqr.ErrDuplicate) {
		t.Fatalf("while the key is held: %v, want ErrDuplicate", err)
	}
	if _, err := c.Cancel(ctx, "q", holder); err != nil { // frees the key
		t.Fatal(err)
	}
	ids, err := c.EnqueueBatch(ctx, "q", [][]byte{[]byte("p")}, opts)
	info, terr := in.Task(ctx, "q", "order-2")
	if err != nil || len(ids) != 1 || ids[0] != "order-2" || terr != nil || info.State != worqr.StateQueued {
		t.Fatalf("once the key is free: %v, %v; task: %+v, %v; want order-2 enqueued", ids, err, info, terr)
	}
}

// The first step of a large EnqueueBatch that has not reached Redis when
// its call fails: the client closes the batch's
// guard, finds no step applied and says 0 enqueued. When that step
// reaches Redis afterwards it must be refused (step 0 applies only where
// no guard is), or 250 tasks are in the queue that the BatchError said
// were not, and a caller that resends the batch runs them twice. Both
// first-step scripts (enqueue_packed here, enqueue with options) check it.
//
// A batch of one call (10 tasks) whose call has not reached Redis when it
// fails is refused the same way when it arrives late (it carries the guard
// of TestBatchOfOneCallWithItsReplyLostSaysWhatIsIn).
func TestBatchFirstStepArrivingAfterTheCloseIsRefused(t *testing.T) {
	cases := []struct {
		name, script string
		opts         *worqr.EnqueueOpts
		n            int
	}{
		{"packed", "enqueue_packed", nil, 10 * 250}, // ten steps
		{"with options", "enqueue", &worqr.EnqueueOpts{MaxAttempts: 3}, 10 * 250},
	}
	for _, b := range oneCallBatches() {
		cases = append(cases, struct {
			name, script string
			opts         *worqr.EnqueueOpts
			n            int
		}{"one call, " + b.name, b.script, b.opts, 10})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			base := srv.Pool()
			defer base.Close()
			// The call picked is not sent, and fails as a broken
			// connection would; the test sends it later, as a request
			// stuck in a proxy or a kernel buffer reaches Redis after
			// the client gave up on it.
			var (
				mu   sync.Mutex
				pick func(cmd string, args []any) bool
				held []any // the command held: its name, then its arguments
			)
			pool := &redistest.HookPool{Pool: base, Refuse: func(cmd string, args []any) error {
				mu.Lock()
				defer mu.Unlock()
				if pick == nil || held != nil || !pick(cmd, args) {
					return nil
				}
				held = append([]any{cmd}, args...)
				return errLostReply
			}}
			cfg := worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true}
			c, err := worqr.NewClient(pool, &cfg)
			if err != nil {
				t.Fatal(err)
			}
			in := newInspector(t, pool, &cfg)
			// The library loaded: the held call runs when sent late.
			if _, err := c.Enqueue(ctx, "warm", []byte("x"), nil); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			pick = nthCall(tc.script, 1)
			mu.Unlock()
			ps := batchPayloads(tc.n)
			ids, err := c.EnqueueBatch(ctx, "late", ps, tc.opts)
			var be *worqr.BatchError
			if !errors.As(err, &be) || be.Enqueued != 0 || held == nil {
				t.Fatalf("EnqueueBatch: %v (held %v); want a *BatchError saying 0 enqueued", err, held != nil)
			}
			// The first step reaches Redis now.
			rc, err := redis.DialURL(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			r, err := rc.Do(held[0].(string), held[1:]...)
			t.Logf("the late first step: %v %v", r, err)
			checkBatchError(t, in, "late", ps, ids, be)
		})
	}
}

// A task cancelled while it waits deep in a long queue is marked where it
// waits (the cancel does not search the whole list): the worker that
// reaches it never runs it, and it ends as cancelled.
func TestCancelDeepInALongQueueIsNeverRun(t *testing.T) {
	ctx := context.Background()
	pool, _, cfg, _ := handEnv(t)
	client := newClient(t, pool, &cfg)
	const n = 25_000
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = []byte(strconv.Itoa(i))
	}
	ids, err := client.EnqueueBatch(ctx, "q", payloads, nil)
	if err != nil {
		t.Fatal(err)
	}
	deep := ids[n/2]
	if st, err := client.Cancel(ctx, "q", deep); err != nil || st != worqr.CancelRemoved {
		t.Fatalf("cancel: %v %v, want removed", st, err)
	}
	var ran atomic.Int64
	var ranDeep atomic.Bool
	done := make(chan struct{})
	w := startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: cfg,
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 20, Retention: time.Minute,
			Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
				if t.ID == deep {
					ranDeep.Store(true)
				}
				if ran.Add(1) == n-1 {
					close(done)
				}
				return nil
			})}}})
	defer w.Stop(ctx)
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("ran %d of %d tasks", ran.Load(), n-1)
	}
	if ranDeep.Load() {
		t.Fatal("the cancelled task ran")
	}
	in := newInspector(t, pool, &cfg)
	wait(t, 10*time.Second, "the cancelled task to be cancelled and finished", func() bool {
		info, err := in.Task(ctx, "", deep)
		return err == nil && info.State == worqr.StateCancelled && !info.FinishedAt.IsZero()
	})
}

// Plain Enqueue calls made at once share one script call (group commit):
// the call is bounded by payload bytes as EnqueueBatch's chunks are
// (MaxEnqueueChunkBytes, 4 MiB, or a single larger payload), not only by
// count: 256 Enqueues of 1 MiB were one call of 256 MiB, which held Redis
// for 300 ms.
func TestCoalescedEnqueuesAreBoundedByBytes(t *testing.T) {
	ctx := context.Background()
	base := srv.Pool()
	t.Cleanup(func() { base.Close() })
	ns := redistest.Namespace()
	const n, size = 24, 1 << 20
	var ready atomic.Int32
	pool := newBigCalls(base, size)
	cfg := worqr.Config{Namespace: ns, DisableEvents: true}
	c, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, base, &cfg)
	p := make([]byte, size)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ready.Add(1)
			if _, err := c.Enqueue(ctx, "big", p, nil); err != nil {
				t.Error(err)
			}
		}()
	}
	// Every caller is in a held call or waits behind them in the group.
	wait(t, 10*time.Second, "every enqueue held or waiting", func() bool {
		return ready.Load() == n && pool.held.Load()+int64(c.EnqueuesWaiting("big")) == n
	})
	close(pool.hold)
	wg.Wait()
	if l := queueLen(t, in, "big"); l != n {
		t.Fatalf("queue holds %d, want %d", l, n)
	}
	if max := pool.biggest.Load(); max > 4<<20+4096 {
		t.Fatalf("one enqueue call carried %d bytes (%d calls for %d payloads of 1 MiB); want at most MaxEnqueueChunkBytes (4 MiB)",
			max, pool.calls.Load(), n)
	}
	t.Logf("%d calls, the biggest %d bytes", pool.calls.Load(), pool.biggest.Load())
}

// Past its IDTTL, an id that still names a task (here, one scheduled for
// later) is refused, with the same payload too: writing over it left one
// id waiting and scheduled at once, one copy buried as corrupt. Once the
// task is gone, the id is free again.
func TestIDReusedPastItsTTLWhileItsTaskExists(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	cfg := worqr.Config{Namespace: ns, DisableEvents: true}
	c, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, pool, &cfg)
	opts := &worqr.EnqueueOpts{ID: "order-42", IDTTL: 50 * time.Millisecond, Delay: time.Hour}
	if _, err := c.Enqueue(ctx, "q", []byte("p"), opts); err != nil {
		t.Fatal(err)
	}
	conn := pool.Get()
	defer conn.Close()
	lock := rdb.NewKeys(ns).Queue(rdb.Standalone("q")).IDPrefix + "order-42"
	wait(t, 5*time.Second, "the id's lock to expire", func() bool {
		n, err := redis.Int(conn.Do("EXISTS", lock))
		return err == nil && n == 0
	})
	_, err = c.Enqueue(ctx, "q", []byte("p"), &worqr.EnqueueOpts{ID: "order-42"})
	if !errors.Is(err, worqr.ErrDuplicate) {
		t.Fatalf("an enqueue past IDTTL of the id of a scheduled task: %v, want ErrDuplicate", err)
	}
	if n := queueLen(t, in, "q"); n != 0 {
		t.Fatalf("waiting: %d, want 0: the task is scheduled only", n)
	}
	if _, err := c.Cancel(ctx, "q", "order-42"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, "q", []byte("p"), &worqr.EnqueueOpts{ID: "order-42"}); err != nil {
		t.Fatalf("the id once its task is gone: %v", err)
	}
}

// A Delay that ends after the Deadline is refused, naming the field, as
// an At after it is: the task could never start.
func TestDelayPastDeadlineIsRefused(t *testing.T) {
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Enqueue(context.Background(), "q", []byte("p"), &worqr.EnqueueOpts{Delay: time.Hour, Deadline: time.Now().Add(time.Minute)})
	if !errors.Is(err, worqr.ErrInvalid) || !strings.Contains(err.Error(), "EnqueueOpts.Deadline") {
		t.Fatalf("Delay past Deadline: %v, want ErrInvalid naming EnqueueOpts.Deadline", err)
	}
}

// An Enqueue with an id of the caller's, repeated after its first attempt's
// reply was lost (or after ErrNotReplicated), finds the task enqueued
// before: it must not report the task acknowledged by the replicas
// (Config.Replicas) unless they have it. Both repeats used to return nil:
// the replicas' answer was dropped with the "same task" reply, and a repeat
// on a new connection waited for nothing (its script wrote nothing, so
// WAIT covered no write of its own), while the replica had not the task.
func TestIdempotentEnqueueRepeatWaitsForReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	primary, replicas, err := redistest.StartReplicated(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Stop()
	defer replicas[0].Stop()

	t.Run("repeat after ErrNotReplicated", func(t *testing.T) {
		pool := primary.Pool()
		defer pool.Close()
		// Two replicas asked of one: every write falls short.
		cfg := worqr.Config{Namespace: redistest.Namespace(), Replicas: 2, ReplicaTimeout: 100 * time.Millisecond}
		client, err := worqr.NewClient(pool, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		opts := &worqr.EnqueueOpts{ID: "order-1"}
		id, err := client.Enqueue(ctx, "r", []byte("p"), opts)
		if id != "order-1" || !errors.Is(err, worqr.ErrNotReplicated) {
			t.Fatalf("first enqueue: %q, %v; want order-1 and ErrNotReplicated", id, err)
		}
		id, err = client.Enqueue(ctx, "r", []byte("p"), opts)
		if id != "order-1" || !errors.Is(err, worqr.ErrNotReplicated) {
			t.Fatalf("repeated enqueue: %q, %v; want order-1 and ErrNotReplicated (one replica of two has it)", id, err)
		}
	})

	t.Run("repeat after a lost reply, replica frozen", func(t *testing.T) {
		pool := newReplyLossPool(primary.URL)
		defer pool.Close()
		cfg := worqr.Config{Namespace: redistest.Namespace(), Replicas: 1, ReplicaTimeout: 300 * time.Millisecond}
		client, err := worqr.NewClient(pool, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		// Known queue recorded first, so that the lost call is the enqueue
		// (its replica's answer does not matter: on a loaded machine 300 ms
		// can pass before it comes).
		if _, err := client.Enqueue(ctx, "r", []byte("warm"), nil); err != nil && !errors.Is(err, worqr.ErrNotReplicated) {
			t.Fatal(err)
		}
		if err := replicas[0].Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = replicas[0].Signal(syscall.SIGCONT) }()
		pool.setLose(nthCall("enqueue", 1))
		opts := &worqr.EnqueueOpts{ID: "order-2"}
		if id, err := client.Enqueue(ctx, "r", []byte("p"), opts); err == nil {
			t.Fatalf("first enqueue: %q, nil; want its reply lost", id)
		}
		pool.setLose(nil)
		if _, err := newInspector(t, pool, &cfg).Task(ctx, "r", "order-2"); err != nil {
			t.Fatalf("the first enqueue was not applied: %v", err)
		}
		// The retry the docs advise, the same id and payload, by a
		// producer started again (a new pool: its connection wrote nothing
		// before).
		pool2 := primary.Pool()
		defer pool2.Close()
		client2, err := worqr.NewClient(pool2, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		id, err := client2.Enqueue(ctx, "r", []byte("p"), opts)
		if id != "order-2" || !errors.Is(err, worqr.ErrNotReplicated) {
			t.Fatalf("repeated enqueue: %q, %v; want order-2 and ErrNotReplicated (the replica, frozen, does not have it)", id, err)
		}
	})

	// A scheduler whose replicas fall short still moves on: the tick's task
	// is enqueued on the primary (its repeat finds it there and falls short
	// the same way), so the pass reports the shortfall and advances.
	t.Run("scheduler with too few replicas", func(t *testing.T) {
		pool := primary.Pool()
		defer pool.Close()
		cfg := worqr.Config{Namespace: redistest.Namespace(), Replicas: 2, ReplicaTimeout: 100 * time.Millisecond, DisableEvents: true}
		s, err := worqr.NewScheduler(pool, &worqr.SchedulerConfig{Config: cfg})
		if err != nil {
			t.Fatal(err)
		}
		base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		if err := s.RegisterAt(ctx, worqr.Schedule{Name: "tick", Queue: "p", Every: time.Minute}, base); err != nil {
			t.Fatal(err)
		}
		at := base.Add(time.Minute)
		for pass := 1; pass <= 2; pass++ {
			if _, err := s.PassAt(ctx, at); !errors.Is(err, worqr.ErrNotReplicated) && pass == 1 {
				t.Fatalf("pass %d: %v; want ErrNotReplicated", pass, err)
			}
		}
		in, err := worqr.NewInspector(pool, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		info, err := in.Schedule(ctx, "tick")
		if err != nil {
			t.Fatal(err)
		}
		if want := at.Add(time.Minute); !info.Next.Equal(want) || info.Fired != 1 {
			t.Fatalf("schedule next %s, fired %d; want %s and 1 (advanced past the tick enqueued on the primary)", info.Next, info.Fired, want)
		}
	})
}

func TestEnqueueBatchUniqueKeysReportsEachDuplicate(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	defer pool.Close()
	cfg := worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true}
	c := newClient(t, pool, &cfg)
	in := newInspector(t, pool, &cfg)
	first, err := c.Enqueue(ctx, "q", []byte("a"), &worqr.EnqueueOpts{UniqueKey: "user-1", UniqueTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := c.EnqueueBatch(ctx, "q", [][]byte{[]byte("b"), []byte("c"), []byte("d"), []byte("e")},
		&worqr.EnqueueOpts{UniqueKeys: []string{"user-1", "user-2", "user-2", ""}, UniqueTTL: time.Hour})
	var de *worqr.BatchError
	if !errors.As(err, &de) || !errors.Is(err, worqr.ErrDuplicate) || de.Err != nil || de.Enqueued != 4 {
		t.Fatalf("err = %v (%+v), want a *BatchError of duplicates only", err, de)
	}
	if len(ids) != 4 || ids[0] != "" || ids[1] == "" || ids[2] != "" || ids[3] == "" {
		t.Fatalf("ids %q: want \"\" exactly for the duplicates", ids)
	}
	if len(de.Duplicates) != 2 || de.Duplicates[0].Index != 0 || de.Duplicates[0].HolderID != first ||
		de.Duplicates[0].UniqueKey != "user-1" || de.Duplicates[1].Index != 2 || de.Duplicates[1].HolderID != ids[1] {
		t.Fatalf("duplicates %+v %+v", de.Duplicates[0], de.Duplicates[1])
	}
	peek, _, err := in.Tasks(ctx, "q", worqr.StateQueued, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range peek {
		got = append(got, string(p.Payload))
	}
	if strings.Join(got, "") != "ace" {
		t.Fatalf("queue holds %v, want a c e", got)
	}
	// Without duplicates: no error.
	if _, err := c.EnqueueBatch(ctx, "q", [][]byte{[]byte("f")}, &worqr.EnqueueOpts{UniqueKeys: []string{"user-3"}, UniqueTTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
}

func TestEnqueueOptsBadDeadlineRetentionUniqueKeys(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	defer pool.Close()
	cfg := worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true}
	c := newClient(t, pool, &cfg)
	in := newInspector(t, pool, &cfg)
	two := [][]byte{[]byte("a"), []byte("b")}
	at := time.Now().Add(time.Hour)
	for _, tc := range []struct {
		batch bool
		opts  worqr.EnqueueOpts
		field string
	}{
		{false, worqr.EnqueueOpts{Retention: -time.Second}, "EnqueueOpts.Retention"},
		{false, worqr.EnqueueOpts{Retention: time.Microsecond}, "EnqueueOpts.Retention"},
		{false, worqr.EnqueueOpts{At: at, Deadline: at.Add(-time.Second)}, "EnqueueOpts.Deadline"},
		{false, worqr.EnqueueOpts{Deadline: time.Unix(-5, 0)}, "EnqueueOpts.Deadline"},
		{false, worqr.EnqueueOpts{UniqueKeys: []string{"k"}, UniqueTTL: time.Hour}, "EnqueueOpts.UniqueKeys"},
		{true, worqr.EnqueueOpts{UniqueKeys: []string{"k"}, UniqueTTL: time.Hour}, "EnqueueOpts.UniqueKeys"},
		{true, worqr.EnqueueOpts{UniqueKeys: []string{"k", "l"}}, "EnqueueOpts.UniqueTTL"},
		{true, worqr.EnqueueOpts{UniqueKeys: []string{"k", "l"}, UniqueKey: "m", UniqueTTL: time.Hour}, "EnqueueOpts.UniqueKeys"},
		{true, worqr.EnqueueOpts{UniqueKeys: []string{"k", strings.Repeat("x", worqr.MaxUniqueKeyLen+1)}, UniqueTTL: time.Hour}, "EnqueueOpts.UniqueKeys[1]"},
		{true, worqr.EnqueueOpts{UniqueKey: "k", UniqueTTL: time.Hour}, "EnqueueOpts.UniqueKey"},
	} {
		var err error
		if tc.batch {
			_, err = c.EnqueueBatch(ctx, "q", two, &tc.opts)
		} else {
			_, err = c.Enqueue(ctx, "q", []byte("a"), &tc.opts)
		}
		var ie *worqr.InvalidError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("%+v: %v, want an error on %s", tc.opts, err, tc.field)
		}
	}
	if n := queueLen(t, in, "q"); n != 0 {
		t.Fatalf("%d tasks enqueued by bad calls", n)
	}
}

// Every field of EnqueueOpts, once set, takes the enqueue off the plain
// path (which would ignore it).
func TestEnqueueOptsEveryFieldCounts(t *testing.T) {
	if !(*worqr.EnqueueOpts)(nil).Zero() || !(&worqr.EnqueueOpts{}).Zero() {
		t.Fatal("empty options are not zero")
	}
	typ := reflect.TypeOf(worqr.EnqueueOpts{})
	for i := 0; i < typ.NumField(); i++ {
		var o worqr.EnqueueOpts
		f := reflect.ValueOf(&o).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("x")
		case reflect.Int, reflect.Int64:
			f.SetInt(1)
		case reflect.Float64:
			f.SetFloat(1)
		case reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 0, 0))
		case reflect.Map: // Meta
			f.Set(reflect.ValueOf(map[string]string{"k": "v"}))
		case reflect.Struct: // time.Time
			f.Set(reflect.ValueOf(time.Unix(1, 0)))
		default:
			t.Fatalf("field %s: kind %s not handled by this test", typ.Field(i).Name, f.Kind())
		}
		if o.Zero() {
			t.Errorf("EnqueueOpts.%s set, but the options read as empty", typ.Field(i).Name)
		}
	}
}

// A Client records each queue it enqueues to among the known queues on its
// first enqueue, and again every minute. Only the first record is needed:
// a later one that fails (the registry's node out of reach on a cluster)
// must not fail the enqueue.
func TestClientRecordsItsQueuesAgain(t *testing.T) {
	ctx := context.Background()
	base := srv.Pool()
	defer base.Close()
	var refusing atomic.Bool
	pool := &redistest.HookPool{Pool: base, Refuse: func(cmd string, args []any) error {
		if refusing.Load() && cmd == "SADD" && len(args) > 0 && strings.HasSuffix(fmt.Sprint(args[0]), ":{reg}:queues") {
			return errors.New("the registry's node is out of reach")
		}
		return nil
	}}
	cfg := worqr.Config{Namespace: redistest.Namespace()}
	client := newClient(t, pool, &cfg)
	client.SetKnownEvery(0) // every enqueue records its queue again

	refusing.Store(true)
	if _, err := client.Enqueue(ctx, "known", []byte("1"), nil); err == nil {
		t.Fatal("the first enqueue succeeded with its queue not recorded as known")
	}
	refusing.Store(false)
	if _, err := client.Enqueue(ctx, "known", []byte("2"), nil); err != nil {
		t.Fatal(err)
	}
	refusing.Store(true)
	for _, p := range []string{"3", "4"} {
		if _, err := client.Enqueue(ctx, "known", []byte(p), nil); err != nil {
			t.Fatalf("an enqueue whose record again failed: %v", err)
		}
	}
	refusing.Store(false)
	if n := queueLen(t, newInspector(t, base, &cfg), "known"); n != 3 {
		t.Fatalf("%d waiting, want 3", n)
	}
}

// A run's metadata reaches every stage (Run.Meta) and RunInfo; a child's
// (ChildSpec.Meta) reaches its handler (Task.Meta); StageMiddleware wraps
// every stage handler, the first outermost.
func TestFlowMetaAndStageMiddleware(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, pool, &worqr.Config{Namespace: ns})
	var (
		mu     sync.Mutex
		seen   []string // what the handlers and middleware saw, in order
		childM []map[string]string
	)
	note := func(s string) { mu.Lock(); seen = append(seen, s); mu.Unlock() }
	stage := func(name string, children ...worqr.ChildSpec) worqr.Stage {
		return worqr.Stage{Name: name, Queue: worqr.QueueConfig{Concurrency: 1},
			Handler: worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				note(name + " meta=" + r.Meta["k"])
				return &worqr.StageResult{Children: children}, nil
			}),
			Children: map[string]worqr.QueueConfig{name + "-kids": {Concurrency: 2,
				Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
					mu.Lock()
					childM = append(childM, t.Meta)
					mu.Unlock()
					return nil
				})}},
		}
	}
	flow := &worqr.Flow{Name: "metaflow", Stages: []worqr.Stage{
		stage("one", worqr.ChildSpec{Queue: "one-kids", Payload: []byte("a"), Meta: map[string]string{"c": "1"}},
			worqr.ChildSpec{Queue: "one-kids", Payload: []byte("b")}),
		stage("two"),
	}}
	mw := func(tag string) worqr.StageMiddleware {
		return func(next worqr.StageHandler) worqr.StageHandler {
			return worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				note(tag + " " + r.Stage)
				return next.HandleStage(ctx, r)
			})
		}
	}
	cfg := fastTimings(ns)
	cfg.Flows = []*worqr.Flow{flow}
	cfg.StageMiddleware = []worqr.StageMiddleware{mw("outer"), mw("inner")}
	w, err := worqr.NewWorker(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})

	if _, err := c.StartRun(ctx, flow, nil, &worqr.RunOpts{Meta: map[string]string{"": "x"}}); err == nil || !strings.Contains(err.Error(), "RunOpts.Meta") {
		t.Errorf("an empty meta name: %v, want an error naming RunOpts.Meta", err)
	}
	big := &worqr.RunOpts{Meta: map[string]string{"k": strings.Repeat("x", defaults.MaxMetaBytes)}}
	if _, err := c.StartRun(ctx, flow, nil, big); err == nil || !strings.Contains(err.Error(), "over 4096") {
		t.Errorf("meta over 4,096 bytes: %v, want an error naming the bound", err)
	}
	id, err := c.StartRun(ctx, flow, nil, &worqr.RunOpts{Meta: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	var info *worqr.RunInfo
	wait(t, 10*time.Second, "the run to end", func() bool {
		if info, err = in.Run(ctx, flow.Name, id); err != nil {
			t.Fatal(err)
		}
		return info.Status != worqr.RunRunning
	})
	if info.Status != worqr.RunDone || info.Meta["k"] != "v" {
		t.Fatalf("run: status %s meta %v, want done with meta k=v", info.Status, info.Meta)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"outer one", "inner one", "one meta=v", "outer two", "inner two", "two meta=v"}
	if !reflect.DeepEqual(seen, want) {
		t.Errorf("stage calls:\n got %q\nwant %q", seen, want)
	}
	// Exactly one child with {c:1} and one with nil: a child without
	// metadata does not inherit the run's.
	none, one := 0, 0
	for _, m := range childM {
		switch {
		case m == nil:
			none++
		case reflect.DeepEqual(m, map[string]string{"c": "1"}):
			one++
		}
	}
	if len(childM) != 2 || none != 1 || one != 1 {
		t.Errorf("children's Task.Meta: %v, want {c:1} and nil", childM)
	}
}

// A child's metadata is checked at the fan-out: an empty name fails the
// stage (dead, with the field named), nothing is fanned out.
func TestChildMetaChecked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, pool, &worqr.Config{Namespace: ns})
	flow := &worqr.Flow{Name: "badmeta", Stages: []worqr.Stage{{Name: "s", Queue: worqr.QueueConfig{Concurrency: 1},
		Handler: worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
			return &worqr.StageResult{Children: []worqr.ChildSpec{{Queue: "k", Meta: map[string]string{"": "x"}}}}, nil
		}),
		Children: map[string]worqr.QueueConfig{"k": {Concurrency: 1, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
			return errors.New("must not run")
		})}}}}}
	cfg := fastTimings(ns)
	cfg.Flows = []*worqr.Flow{flow}
	w, err := worqr.NewWorker(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})
	id, err := c.StartRun(ctx, flow, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var info *worqr.RunInfo
	wait(t, 10*time.Second, "run "+id+" to fail", func() bool {
		if info, err = in.Run(ctx, flow.Name, id); err != nil {
			t.Fatal(err)
		}
		return info.Status == worqr.RunFailed
	})
	if !strings.Contains(info.LastError, "StageResult.Children[0].Meta") || len(info.Children) != 0 {
		t.Errorf("failed run: error %q, children %v", info.LastError, info.Children)
	}
}

// A plain task's metadata (EnqueueOpts.Meta) is stored beside its payload
// and reaches its handler as Task.Meta, the payload as given: through
// Enqueue, EnqueueBatch (every task), a keyed enqueue (every task of a
// KeyBatch too) and a delayed one; Inspector.Task shows it. A task without
// has none. Bad metadata is refused with the field named.
func TestEnqueueMetaReachesHandler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, pool, &worqr.Config{Namespace: ns})
	for _, bad := range []map[string]string{{"": "x"}, {"k": strings.Repeat("x", defaults.MaxMetaBytes)}} {
		if _, err := c.Enqueue(ctx, "mq", []byte("p"), &worqr.EnqueueOpts{Meta: bad}); err == nil || !strings.Contains(err.Error(), "EnqueueOpts.Meta") {
			t.Errorf("Enqueue with bad meta: %v, want an error naming EnqueueOpts.Meta", err)
		}
		if _, err := c.EnqueueBatch(ctx, "mq", [][]byte{[]byte("p")}, &worqr.EnqueueOpts{Meta: bad}); err == nil || !strings.Contains(err.Error(), "EnqueueOpts.Meta") {
			t.Errorf("EnqueueBatch with bad meta: %v, want an error naming EnqueueOpts.Meta", err)
		}
	}

	type seen struct {
		payload string
		meta    map[string]string
	}
	var (
		mu  sync.Mutex
		got = map[string]seen{}
	)
	handle := func(_ context.Context, t *worqr.Task) error {
		mu.Lock()
		defer mu.Unlock()
		got[string(t.Payload)] = seen{string(t.Payload), t.Meta}
		return nil
	}
	batch := func(_ context.Context, b *worqr.Batch) error {
		for _, t := range b.Tasks {
			_ = handle(nil, t)
		}
		return nil
	}
	cfg := fastTimings(ns)
	cfg.Queues = map[string]worqr.QueueConfig{
		"mq": {Concurrency: 4, Retention: time.Minute, Handler: worqr.HandlerFunc(handle)},
		"mk": {Concurrency: 1, KeyBatch: 3, BatchHandler: worqr.BatchHandlerFunc(batch)},
	}

	m1 := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "t1"}
	m2 := map[string]string{"b": "2"}
	id, err := c.Enqueue(ctx, "mq", []byte("one"), &worqr.EnqueueOpts{Meta: m1})
	if err != nil {
		t.Fatal(err)
	}
	info, err := in.Task(ctx, "mq", id)
	if err != nil || string(info.Payload) != "one" || !reflect.DeepEqual(info.Meta, m1) {
		t.Fatalf("Inspector.Task: %+v, %v; want payload one and meta %v", info, err, m1)
	}
	if _, err := c.EnqueueBatch(ctx, "mq", [][]byte{[]byte("b1"), []byte("b2")}, &worqr.EnqueueOpts{Meta: m2}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, "mq", []byte("late"), &worqr.EnqueueOpts{Meta: m2, Delay: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, "mq", []byte("plain"), nil); err != nil {
		t.Fatal(err)
	}
	// Keyed, enqueued before the worker starts: k1 heads a batch of three.
	for i, p := range []string{"k1", "k2", "k3"} {
		o := &worqr.EnqueueOpts{Key: "K", Meta: map[string]string{"k": p}}
		if i == 2 {
			o.Meta = nil
		}
		if _, err := c.Enqueue(ctx, "mk", []byte(p), o); err != nil {
			t.Fatal(err)
		}
	}

	w, err := worqr.NewWorker(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})
	want := map[string]seen{
		"one": {"one", m1}, "b1": {"b1", m2}, "b2": {"b2", m2}, "late": {"late", m2}, "plain": {"plain", nil},
		"k1": {"k1", map[string]string{"k": "k1"}}, "k2": {"k2", map[string]string{"k": "k2"}}, "k3": {"k3", nil},
	}
	wait(t, 10*time.Second, "every task to run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == len(want)
	})
	mu.Lock()
	defer mu.Unlock()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("handlers saw\n %v\nwant\n %v", got, want)
	}
}
