package worqr_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// Keyed tasks take Deadline and Retention: a task of a key taken past its
// deadline ends as expired without running and its key moves on, in order;
// its own retention keeps it readable. Under a BatchHandler a task with a
// deadline is not taken behind a head: it waits to be the head, and, late,
// ends alone as expired.
func TestKeyedDeadlineAndRetention(t *testing.T) {
	for _, batch := range []int{0, 5} {
		t.Run(map[int]string{0: "handler", 5: "batches"}[batch], func(t *testing.T) {
			ctx := context.Background()
			pool := srv.Pool()
			defer pool.Close()
			cfg := worqr.Config{Namespace: redistest.Namespace()}
			c := newClient(t, pool, &cfg)
			in := newInspector(t, pool, &cfg)
			enq := func(p string, o *worqr.EnqueueOpts) string {
				t.Helper()
				o.Key = "K"
				id, err := c.Enqueue(ctx, "q", []byte(p), o)
				if err != nil {
					t.Fatal(err)
				}
				return id
			}
			enq("1", &worqr.EnqueueOpts{})
			late := enq("2", &worqr.EnqueueOpts{Deadline: time.Now().Add(-time.Minute), Retention: time.Minute})
			enq("3", &worqr.EnqueueOpts{Deadline: time.Now().Add(time.Hour)})
			enq("4", &worqr.EnqueueOpts{})
			var mu sync.Mutex
			var order []string
			var batches [][]string
			ended := make(chan struct{}, 8)
			qc := worqr.QueueConfig{Concurrency: 2, Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
				mu.Lock()
				order = append(order, string(t.Payload))
				mu.Unlock()
				return nil
			})}
			if batch > 0 {
				qc.Handler, qc.KeyBatch = nil, batch
				qc.BatchHandler = worqr.BatchHandlerFunc(func(_ context.Context, b *worqr.Batch) error {
					mu.Lock()
					defer mu.Unlock()
					var ps []string
					for _, t := range b.Tasks {
						ps = append(ps, string(t.Payload))
						order = append(order, string(t.Payload))
					}
					batches = append(batches, ps)
					return nil
				})
			}
			w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg, Queues: map[string]worqr.QueueConfig{"q": qc},
				OnEvent: func(e worqr.Event) {
					if e.Kind == worqr.EventExpired || e.Kind == worqr.EventDone {
						ended <- struct{}{}
					}
				}})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer w.Stop(ctx)
			for range 4 {
				select {
				case <-ended:
				case <-time.After(10 * time.Second):
					t.Fatal("the tasks did not end")
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if !reflect.DeepEqual(order, []string{"1", "3", "4"}) {
				t.Errorf("ran %v, want [1 3 4]: the late task never runs, its key goes on in order", order)
			}
			if batch > 0 && !reflect.DeepEqual(batches, [][]string{{"1"}, {"3", "4"}}) {
				t.Errorf("batches %v, want [[1] [3 4]]: a task with a deadline is not taken behind a head", batches)
			}
			info, err := in.Task(ctx, "q", late)
			if err != nil {
				t.Fatal(err)
			}
			if info.State != worqr.StateExpired || info.Retention != time.Minute || info.Key != "K" {
				t.Errorf("the late task: %+v", info)
			}
		})
	}
}

// BlockedKeys reads the dead set newest first, 1,000 entries a page: a task
// that died between two pages moved every entry down one, and the last
// blocked key of the first page was listed again at the top of the next.
func TestBlockedKeysListsAKeyOnceWhenATaskDiesBetweenPages(t *testing.T) {
	ctx := context.Background()
	base := srv.Pool()
	t.Cleanup(func() { base.Close() })
	ns := redistest.Namespace()
	cfg := worqr.Config{Namespace: ns, DisableEvents: true}
	c, err := worqr.NewClient(base, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	reader := newInspector(t, base, &cfg)
	const n = 1005
	for i := 0; i < n; i++ {
		if _, err := c.Enqueue(ctx, "blk", []byte("x"), &worqr.EnqueueOpts{Key: fmt.Sprintf("k%04d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	wc := fastTimings(ns)
	wc.DisableEvents = true
	wc.Queues = map[string]worqr.QueueConfig{"blk": {Concurrency: 50,
		Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
			return worqr.SkipRetry(errors.New("bad"))
		})}}
	startWorker(t, ctx, base, &wc)
	wait(t, 20*time.Second, "every task dead", func() bool {
		_, total, err := reader.Tasks(ctx, "blk", worqr.StateDead, 0, 1)
		return err == nil && total == n
	})
	// Before the second page is read, one more entry tops the dead set.
	side := base.Get()
	defer side.Close()
	var deadKey string
	pool := &redistest.HookPool{Pool: base, Sent: func(cmd string, args []any) func() {
		if cmd != "ZREVRANGE" || len(args) < 2 || fmt.Sprint(args[1]) != "1000" {
			return nil
		}
		deadKey = fmt.Sprint(args[0])
		if _, err := side.Do("ZADD", deadKey, 1e15, "a-task-that-just-died"); err != nil {
			t.Error(err)
		}
		return nil
	}}
	in, err := worqr.NewInspector(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := in.BlockedKeys(ctx, "blk", n+10)
	if err != nil {
		t.Fatal(err)
	}
	if deadKey == "" || !strings.Contains(deadKey, "dead") {
		t.Fatalf("the second page was not read (%q)", deadKey)
	}
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k.Key] {
			t.Fatalf("key %s listed twice (%d listed)", k.Key, len(keys))
		}
		seen[k.Key] = true
	}
	if len(keys) < n-1 {
		t.Fatalf("%d keys listed, want at least %d (one may be missed when the set moves)", len(keys), n-1)
	}
}

// TasksBehind names the argument it refuses: a negative limit was refused
// as a bad offset.
func TestTasksBehindNamesTheBadArgument(t *testing.T) {
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		offset, limit int
		field         string
	}{
		{offset: 0, limit: -1, field: "limit"},
		{offset: -1, limit: 10, field: "offset"},
	} {
		_, err := in.TasksBehind(context.Background(), "q", "k", tc.offset, tc.limit)
		var ie *worqr.InvalidError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("TasksBehind(offset %d, limit %d) = %v; want an *InvalidError naming %s", tc.offset, tc.limit, err, tc.field)
		}
	}
}

// scriptSizes records, for each call of a script whose name ends with
// suffix, the bytes of its arguments.
type scriptSizes struct {
	pool   *redis.Pool
	suffix string
	mu     sync.Mutex
	sizes  []int
}

func (p *scriptSizes) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := p.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return &sizingConn{Conn: c, p: p}, nil
}

type sizingConn struct {
	redis.Conn
	p *scriptSizes
}

func (c *sizingConn) note(cmd string, args []any) {
	if cmd != "FCALL" || len(args) == 0 {
		return
	}
	if s, ok := args[0].(string); !ok || !strings.HasSuffix(s, c.p.suffix) {
		return
	}
	n := 0
	for _, a := range args {
		switch v := a.(type) {
		case []byte:
			n += len(v)
		case string:
			n += len(v)
		}
	}
	c.p.mu.Lock()
	c.p.sizes = append(c.p.sizes, n)
	c.p.mu.Unlock()
}

func (c *sizingConn) Do(cmd string, args ...any) (any, error) {
	c.note(cmd, args)
	return c.Conn.Do(cmd, args...)
}

func (c *sizingConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	c.note(cmd, args)
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

func (c *sizingConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	c.note(cmd, args)
	return redis.DoWithTimeout(c.Conn, d, cmd, args...)
}

func (c *sizingConn) Send(cmd string, args ...any) error {
	c.note(cmd, args)
	return c.Conn.Send(cmd, args...)
}

func (c *sizingConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

func (c *sizingConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

// An EnqueueBatch with a Key is cut into calls of at most 4 MiB of
// payloads, as any batch is: it was cut by count only (1,000 tasks a call),
// so 1,000 payloads of 64 KiB were one call of 64 MiB that held Redis for
// about 250 ms (and 1,000 of 1 MiB, the default MaxPayloadBytes, one of a
// gigabyte). The tasks still run in batch order.
func TestKeyedBatchIsCutByBytes(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	sizes := &scriptSizes{pool: pool, suffix: "_enqueue_key"}
	c, err := worqr.NewClient(sizes, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	const n, size = 1000, 8 << 10 // 8 MiB in all
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = append([]byte(fmt.Sprintf("%04d:", i)), bytes.Repeat([]byte("x"), size-5)...)
	}
	ids, err := c.EnqueueBatch(ctx, "kb", payloads, &worqr.EnqueueOpts{Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != n {
		t.Fatalf("%d ids, want %d", len(ids), n)
	}
	sizes.mu.Lock()
	calls := append([]int(nil), sizes.sizes...)
	sizes.mu.Unlock()
	for i, s := range calls {
		if s > 4<<20+64<<10 { // 4 MiB of payloads, and room for ids and keys
			t.Errorf("enqueue_key call %d of %d carried %d bytes: a keyed batch is not cut at 4 MiB", i+1, len(calls), s)
		}
	}
	// Still in batch order: the head, then the others behind it.
	k, err := in.Key(ctx, "kb", "k")
	if err != nil {
		t.Fatal(err)
	}
	if k.Head == nil || k.Head.ID != ids[0] || k.Behind != n-1 {
		t.Fatalf("key k: %+v, want head %s with %d behind", k, ids[0], n-1)
	}
	behind, err := in.TasksBehind(ctx, "kb", "k", 0, n)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range behind {
		if id != ids[i+1] {
			t.Fatalf("task %d behind the head is %s, want %s (batch order)", i, id, ids[i+1])
		}
	}
}

// A keyed EnqueueBatch is sent in steps of at most 1,000 tasks (one call
// each, in order). When the reply of a step is lost after Redis applied it
// (a connection reset), the BatchError must still say how many tasks are
// in (BatchError: "the first Enqueued tasks are in the queue, and none
// after them", short of Redis being out of reach): a caller that resends
// the rest, as the error invites, otherwise enqueues the step's tasks
// twice, each key running them again.
func TestKeyedBatchWithALostReplySaysWhatIsIn(t *testing.T) {
	ctx := context.Background()
	pool, in, c := keyedLossClient(t)
	ps := batchPayloads(2500) // three steps: 1,000, 1,000, 500
	for step := 1; step <= 3; step++ {
		key := fmt.Sprintf("K%d", step)
		pool.setLose(nthCall("enqueue_key", step))
		ids, err := c.EnqueueBatch(ctx, "kb", ps, &worqr.EnqueueOpts{Key: key})
		pool.setLose(nil)
		var be *worqr.BatchError
		if !errors.As(err, &be) {
			t.Fatalf("step %d lost: EnqueueBatch: %v; want a *BatchError", step, err)
		}
		if len(ids) != be.Enqueued {
			t.Errorf("step %d lost: %d ids returned, BatchError.Enqueued %d", step, len(ids), be.Enqueued)
		}
		k, err := in.Key(ctx, "kb", key)
		if err != nil || k == nil {
			t.Fatalf("Key: %+v %v", k, err)
		}
		if n := k.Behind + 1; n != be.Enqueued {
			t.Errorf("step %d lost: %d tasks of the key in Redis, BatchError says %d of %d enqueued (%v): a retry of the rest, as the error advises, enqueues %d twice",
				step, n, be.Enqueued, be.Total, be.Err, n-be.Enqueued)
		}
	}
}

// A keyed EnqueueBatch of one call (10 tasks) whose reply was lost after
// Redis applied it said 0 of 10 enqueued, as a plain one did
// (TestBatchOfOneCallWithItsReplyLostSaysWhatIsIn).
func TestKeyedBatchOfOneCallWithItsReplyLostSaysWhatIsIn(t *testing.T) {
	ctx := context.Background()
	pool, in, c := keyedLossClient(t)
	ps := batchPayloads(10)
	pool.setLose(nthCall("enqueue_key", 1))
	ids, err := c.EnqueueBatch(ctx, "kb", ps, &worqr.EnqueueOpts{Key: "K"})
	pool.setLose(nil)
	var be *worqr.BatchError
	if !errors.As(err, &be) || len(ids) != be.Enqueued {
		t.Fatalf("EnqueueBatch: %v, %d ids; want a *BatchError saying as many", err, len(ids))
	}
	k, err := in.Key(ctx, "kb", "K")
	if err != nil || k == nil {
		t.Fatalf("Key: %+v %v", k, err)
	}
	if n := k.Behind + 1; n != be.Enqueued {
		t.Errorf("%d tasks of the key in Redis, BatchError says %d of %d enqueued (%v): a retry, as the error advises, enqueues %d twice",
			n, be.Enqueued, be.Total, be.Err, n-be.Enqueued)
	}
}

// keyedLossClient is replyLossClient with the scripts loaded (the nth
// call of a test is then the batch's nth step, applied).
func keyedLossClient(t *testing.T) (*replyLossPool, *worqr.Inspector, *worqr.Client) {
	t.Helper()
	pool, _, c, in := replyLossClient(t)
	if _, err := c.Enqueue(context.Background(), "warm", []byte("x"), &worqr.EnqueueOpts{Key: "K"}); err != nil {
		t.Fatal(err)
	}
	return pool, in, c
}

// A task of a merging queue (KeyPolicy.Merge) gathers at most 1 MiB of
// distinct payloads, as it gathers at most 100: each merge reads, sorts and
// writes the whole envelope, and 100 merges of 1 MiB payloads took a
// minute of Redis time, the last ones 1.3 s each (at 4 MiB, a dead task's
// requeue merging into its key's tail took 15 to 27 ms). A payload that would pass
// the bound starts a new task behind the full one (merging is a may: the
// order holds), where the next ones merge.
func TestMergedPayloadsAreBoundedByBytes(t *testing.T) {
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
	if err := c.SetKeyPolicy(ctx, "m", worqr.KeyPolicy{Merge: true}); err != nil {
		t.Fatal(err)
	}
	const n, size = 10, 300 << 10
	var ids []string
	seen := map[string]bool{}
	for i := 0; i < n; i++ {
		p := make([]byte, size)
		p[0] = byte(i)
		id, err := c.Enqueue(ctx, "m", p, &worqr.EnqueueOpts{Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	total := 0
	for _, id := range ids {
		info, err := in.Task(ctx, "m", id)
		if err != nil {
			t.Fatal(err)
		}
		bytes := 0
		for _, p := range info.Payloads {
			bytes += len(p.Data)
		}
		total += len(info.Payloads)
		if bytes > 1<<20 {
			t.Errorf("task %s gathered %d payloads, %d bytes; want at most 1 MiB", id, len(info.Payloads), bytes)
		}
	}
	if total != n {
		t.Fatalf("%d tasks hold %d payloads, want all %d", len(ids), total, n)
	}
	t.Logf("%d payloads of 300 KiB in %d tasks", n, len(ids))
}

// EnqueueMerge into a key's waiting task that carries several payloads
// (merged by KeyPolicy.Merge) merges into the last one and keeps the
// others: it kept only what MergeFunc returned, and the earlier payloads
// were lost (found by an audit).
func TestEnqueueMergeKeepsEarlierPayloads(t *testing.T) {
	bundle := setup(t)
	c, in := bundle.client, bundle.in
	ctx := context.Background()
	if err := c.SetKeyPolicy(ctx, "am", worqr.KeyPolicy{Merge: true}); err != nil {
		t.Fatal(err)
	}
	id, err := c.Enqueue(ctx, "am", []byte("a"), &worqr.EnqueueOpts{Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, "am", []byte("b"), &worqr.EnqueueOpts{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	ti, err := in.Task(ctx, "", id)
	if err != nil {
		t.Fatal(err)
	}
	if len(ti.Payloads) != 2 {
		t.Fatalf("setup: %d payloads, want 2", len(ti.Payloads))
	}
	var seen []byte
	got, merged, err := c.EnqueueMerge(ctx, "am", "k", []byte("c"), func(waiting, incoming []byte) ([]byte, error) {
		seen = append([]byte(nil), waiting...)
		return append(append([]byte(nil), waiting...), incoming...), nil
	}, nil)
	if err != nil || !merged || got != id {
		t.Fatalf("EnqueueMerge: %s %v %v", got, merged, err)
	}
	ti, err = in.Task(ctx, "", id)
	if err != nil {
		t.Fatal(err)
	}
	var ps []string
	for _, p := range ti.Payloads {
		ps = append(ps, string(p.Data))
	}
	if string(seen) != "b" || !reflect.DeepEqual(ps, []string{"a", "bc"}) {
		t.Errorf("MergeFunc saw %q and the task holds %q; want it to see the last payload \"b\" and hold [a bc]", seen, ps)
	}
}

// A payload's Score must be a finite number: NaN sorted anywhere, and +Inf
// made that payload Task.Payload for good.
func TestKeyedScoreMustBeFinite(t *testing.T) {
	bundle := setup(t)
	c := bundle.client
	ctx := context.Background()
	for _, score := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		_, err := c.Enqueue(ctx, "am", []byte("a"), &worqr.EnqueueOpts{Key: "k", Score: score})
		if !errors.Is(err, worqr.ErrInvalid) || !strings.Contains(err.Error(), "EnqueueOpts.Score") {
			t.Errorf("Enqueue with Score %v: %v, want ErrInvalid naming EnqueueOpts.Score", score, err)
		}
	}
}
