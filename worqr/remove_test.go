package worqr_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/worqr"
)

// keysOf returns the keys of namespace ns under hash tag tag.
func keysOf(t *testing.T, pool *redis.Pool, ns, tag string) []string {
	t.Helper()
	c := pool.Get()
	defer c.Close()
	var out []string
	for cursor := "0"; ; {
		v, err := redis.Values(c.Do("SCAN", cursor, "MATCH", ns+":{"+tag+"}:*", "COUNT", 1000))
		if err != nil {
			t.Fatal(err)
		}
		cursor, _ = redis.String(v[0], nil)
		ks, _ := redis.Strings(v[1], nil)
		out = append(out, ks...)
		if cursor == "0" {
			slices.Sort(out)
			return out
		}
	}
}

func listed(t *testing.T, in *worqr.Inspector, queue string) bool {
	t.Helper()
	qs, err := in.Queues(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(qs, func(q worqr.QueueInfo) bool { return q.Name == queue })
}

// An empty queue (a typo: enqueued to once, its task deleted; paused,
// limited) is removed: no list shows it, its keys and its history are
// gone, and a second removal finds nothing.
func TestRemoveQueueEmpty(t *testing.T) {
	ctx := context.Background()
	b := setup(t)
	if _, err := b.client.Enqueue(ctx, "typo", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	b.client.Flush()
	waitHistory(t, b.in, "typo", func(h worqr.Throughput) bool { return h.Enqueued == 1 })
	if _, err := b.in.DeleteAllWaiting(ctx, "typo", nil); err != nil {
		t.Fatal(err)
	}
	if err := b.in.Pause(ctx, "typo"); err != nil {
		t.Fatal(err)
	}
	if err := b.in.SetLimits(ctx, "typo", worqr.Limits{Concurrency: 2}); err != nil {
		t.Fatal(err)
	}
	if !listed(t, b.in, "typo") {
		t.Fatal("typo is not listed before its removal")
	}
	n, err := b.in.RemoveQueue(ctx, "typo", nil)
	if err != nil || n != 0 {
		t.Fatalf("RemoveQueue = %d, %v; want 0, nil", n, err)
	}
	if listed(t, b.in, "typo") {
		t.Error("Queues lists typo after its removal")
	}
	if ok, err := b.in.Known(ctx, "typo"); err != nil || ok {
		t.Errorf("Known(typo) = %v, %v; want false", ok, err)
	}
	if ks := keysOf(t, b.pool, b.ns, "typo"); len(ks) != 0 {
		t.Errorf("keys left after the removal: %v", ks)
	}
	h, err := b.in.History(ctx, "typo", 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range h {
		if m.Enqueued != 0 {
			t.Errorf("history of typo after its removal: %+v", m)
		}
	}
	if _, err := b.in.RemoveQueue(ctx, "typo", nil); !errors.Is(err, worqr.ErrQueueNotFound) {
		t.Errorf("RemoveQueue again: %v; want ErrQueueNotFound", err)
	}
	if _, err := b.in.RemoveQueue(ctx, "f/stage", nil); !errors.Is(err, worqr.ErrInvalid) || !strings.Contains(err.Error(), "flow queue") {
		t.Errorf("RemoveQueue of a flow queue: %v; want an InvalidError naming the rule", err)
	}
}

// A queue that holds tasks (waiting at two levels, behind an ordered
// queue's key, scheduled, dead, retained, held by a dead worker) is refused
// unless forced, with what it holds named; forced, every task goes in
// chunks with a progress report, then the queue.
func TestRemoveQueueHoldingTasks(t *testing.T) {
	ctx := context.Background()
	b := setup(t)
	c := b.client
	const many = 600 // more than two bulk chunks
	ps := make([][]byte, many)
	for i := range ps {
		ps[i] = []byte("p")
	}
	if _, err := c.EnqueueBatch(ctx, "full", ps, nil); err != nil {
		t.Fatal(err)
	}
	for _, o := range []*worqr.EnqueueOpts{{Priority: 3}, {Delay: time.Hour}, {Key: "k"}, {Key: "k"}} {
		if _, err := c.Enqueue(ctx, "full", []byte("o"), o); err != nil {
			t.Fatal(err)
		}
	}
	st := rdb.NewStore(b.pool, b.ns)
	qk := st.Queue(rdb.Standalone("full"))
	conn := b.pool.Get()
	defer conn.Close()
	for _, cmd := range [][]any{
		{"HSET", qk.Task("dead1"), "d", "x", "s", "dead"}, {"ZADD", qk.Dead, 1000, "dead1"},
		{"HSET", qk.Task("kept1"), "d", "x", "s", "done"}, {"ZADD", qk.Retained, 1e13, "kept1"},
	} {
		if _, err := conn.Do(cmd[0].(string), cmd[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	// A worker that died holding two tasks (no keepalive), not yet reaped.
	if _, err := st.Take(ctx, qk, rdb.TakeArgs{Worker: "ghost", Until: 1 << 62, Max: 2}); err != nil {
		t.Fatal(err)
	}
	qi, err := b.in.Queue(ctx, "full")
	if err != nil {
		t.Fatal(err)
	}
	total := qi.Waiting + qi.Scheduled + qi.Active + qi.Dead + qi.Retained + 1 // + the task behind key k's head

	_, err = b.in.RemoveQueue(ctx, "full", nil)
	var ne *worqr.QueueNotEmptyError
	if !errors.As(err, &ne) || !errors.Is(err, worqr.ErrQueueNotEmpty) || ne.Held.Active != 2 || ne.Held.Dead != 1 ||
		ne.Held.Retained != 1 || ne.Held.Scheduled != 1 || ne.Held.Keys != 1 || ne.Held.Name != "full" || ne.Arrived {
		t.Fatalf("RemoveQueue unforced: %v (%+v); want a QueueNotEmptyError counting what it holds", err, ne)
	}
	if !strings.Contains(err.Error(), "only when forced") {
		t.Errorf("the refusal %q does not name the rule", err)
	}
	if !listed(t, b.in, "full") || queueLen(t, b.in, "full") != int(qi.Waiting) {
		t.Fatal("a refused removal changed the queue")
	}

	var reports []int
	n, err := b.in.RemoveQueue(ctx, "full", &worqr.RemoveQueueOpts{Force: true, Progress: func(done int) { reports = append(reports, done) }})
	if err != nil || int64(n) < total {
		t.Fatalf("RemoveQueue forced = %d, %v; want at least %d deleted", n, err, total)
	}
	if len(reports) < 3 || !slices.IsSorted(reports) || reports[len(reports)-1] != n {
		t.Errorf("progress reports %v; want at least 3, rising, ending at %d", reports, n)
	}
	if listed(t, b.in, "full") {
		t.Error("Queues lists full after its forced removal")
	}
	for _, k := range keysOf(t, b.pool, b.ns, "full") {
		// The tag's counters stay, and so does the highest priority level
		// the config recorded (never lowered); a lock (a batch's guard)
		// expires.
		if k == qk.Config {
			if fs, _ := redis.Strings(conn.Do("HKEYS", k)); len(fs) != 1 || fs[0] != "prio" {
				t.Errorf("config left after the forced removal with fields %v; want only prio", fs)
			}
			continue
		}
		if pttl, _ := redis.Int64(conn.Do("PTTL", k)); pttl < 0 && !strings.HasSuffix(k, ":seq") && !strings.HasSuffix(k, ":lruns") {
			t.Errorf("key left for ever after the forced removal: %s", k)
		}
	}
}

// A queue a live worker serves is refused, forced or not, naming the
// worker; once it stops, the queue goes.
func TestRemoveQueueServed(t *testing.T) {
	ctx := context.Background()
	b := setup(t)
	w := b.startWorker(worqr.WorkerConfig{Queues: map[string]worqr.QueueConfig{
		"busy": {Concurrency: 1, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil })}}})
	for _, force := range []bool{false, true} {
		_, err := b.in.RemoveQueue(ctx, "busy", &worqr.RemoveQueueOpts{Force: force})
		var se *worqr.QueueServedError
		if !errors.As(err, &se) || !errors.Is(err, worqr.ErrQueueServed) || len(se.Workers) != 1 || se.Workers[0] != w.ID() {
			t.Fatalf("RemoveQueue (force %v) while served: %v; want a QueueServedError naming %s", force, err, w.ID())
		}
	}
	if !listed(t, b.in, "busy") {
		t.Fatal("a refused removal forgot the queue")
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := w.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.in.RemoveQueue(ctx, "busy", nil); err != nil {
		t.Fatalf("RemoveQueue after the worker stopped: %v", err)
	}
	if listed(t, b.in, "busy") {
		t.Error("Queues lists busy after its removal")
	}
}

// A task enqueued just as the queue is forgotten keeps it known: the
// removal says so, and the task stays listed.
func TestRemoveQueueTaskArrives(t *testing.T) {
	ctx := context.Background()
	b := setup(t)
	if err := b.in.Pause(ctx, "late"); err != nil { // a config: something to remove
		t.Fatal(err)
	}
	other := newClient(t, b.pool, &b.cfg)
	defer b.in.OnRemoveForgotten(func() {
		if _, err := other.Enqueue(ctx, "late", []byte("x"), nil); err != nil {
			t.Error(err)
		}
	})()
	_, err := b.in.RemoveQueue(ctx, "late", nil)
	var ne *worqr.QueueNotEmptyError
	if !errors.As(err, &ne) || !ne.Arrived || ne.Held.Waiting != 1 || !strings.Contains(err.Error(), "arrived") {
		t.Fatalf("RemoveQueue with an enqueue after the forgetting: %v; want a QueueNotEmptyError, Arrived", err)
	}
	if !listed(t, b.in, "late") || queueLen(t, b.in, "late") != 1 {
		t.Error("the queue whose task arrived is not listed with it")
	}
}

// A removal cut short after its keys were deleted (the queue still known)
// is finished by the same call again; every step repeats.
func TestRemoveQueueRepeatsAfterACrash(t *testing.T) {
	ctx := context.Background()
	b := setup(t)
	if _, err := b.client.Enqueue(ctx, "cut", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.in.DeleteAllWaiting(ctx, "cut", nil); err != nil {
		t.Fatal(err)
	}
	st := rdb.NewStore(b.pool, b.ns)
	if _, ok, _, err := st.DropQueue(ctx, st.Queue(rdb.Standalone("cut")), false); err != nil || !ok {
		t.Fatalf("DropQueue = %v, %v", ok, err)
	}
	if !listed(t, b.in, "cut") {
		t.Fatal("the queue cut short is not listed")
	}
	if _, err := b.in.RemoveQueue(ctx, "cut", nil); err != nil {
		t.Fatalf("RemoveQueue after a crash: %v", err)
	}
	if listed(t, b.in, "cut") {
		t.Error("Queues lists cut after its removal was finished")
	}
}

// A producer that keeps enqueueing at a priority level to a queue that was
// removed (its config, which records the levels in use, deleted with it)
// still has its tasks run: a worker that serves the queue afterwards takes
// them, and the Inspector counts them.
func TestRemoveQueueThenEnqueueAtLevelIsTaken(t *testing.T) {
	ctx := context.Background()
	b := setup(t)
	opts := &worqr.EnqueueOpts{Priority: 2}
	if _, err := b.client.Enqueue(ctx, "prio", []byte("before"), opts); err != nil {
		t.Fatal(err)
	}
	if _, err := b.in.RemoveQueue(ctx, "prio", &worqr.RemoveQueueOpts{Force: true}); err != nil {
		t.Fatal(err)
	}
	id, err := b.client.Enqueue(ctx, "prio", []byte("after"), opts)
	if err != nil {
		t.Fatal(err)
	}
	if n := queueLen(t, b.in, "prio"); n != 1 {
		t.Errorf("queue length after the removal and one enqueue = %d; want 1", n)
	}
	ran := make(chan string, 1)
	cfg := fastTimings(b.ns)
	cfg.Queues = map[string]worqr.QueueConfig{"prio": {Concurrency: 1, Handler: worqr.HandlerFunc(func(ctx context.Context, tk *worqr.Task) error {
		select {
		case ran <- tk.ID:
		default:
		}
		return nil
	})}}
	b.startWorker(cfg)
	select {
	case got := <-ran:
		if got != id {
			t.Fatalf("ran %s; want %s", got, id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the task enqueued at level 2 after the removal was not run within 5 s")
	}
}
