package worqr_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

func TestInspectorTask(t *testing.T) {
	ctx := context.Background()
	bundle := setup(t)
	c, in := bundle.client, bundle.in
	if _, err := c.Enqueue(ctx, "ta", []byte("a"), &worqr.EnqueueOpts{ID: "one"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, "tb", []byte("b"), &worqr.EnqueueOpts{ID: "two"}); err != nil {
		t.Fatal(err)
	}
	t.Run("in its queue", func(t *testing.T) {
		info, err := in.Task(ctx, "ta", "one")
		if err != nil || info.ID != "one" || info.Queue != "ta" || string(info.Payload) != "a" || info.State != worqr.StateQueued {
			t.Fatalf("Task(ta, one) = %+v, %v; want the queued task of ta", info, err)
		}
	})
	t.Run("not in another queue", func(t *testing.T) {
		if info, err := in.Task(ctx, "ta", "two"); !errors.Is(err, worqr.ErrTaskNotFound) {
			t.Fatalf("Task(ta, two) = %+v, %v; want ErrTaskNotFound (two is tb's)", info, err)
		}
	})
	t.Run("no queue searches every known queue", func(t *testing.T) {
		info, err := in.Task(ctx, "", "two")
		if err != nil || info.Queue != "tb" || string(info.Payload) != "b" {
			t.Fatalf("Task(\"\", two) = %+v, %v; want tb's task", info, err)
		}
		if _, err := in.Task(ctx, "", "three"); !errors.Is(err, worqr.ErrTaskNotFound) {
			t.Fatalf("Task(\"\", three) = %v; want ErrTaskNotFound", err)
		}
	})
	t.Run("bad input", func(t *testing.T) {
		var ie *worqr.InvalidError
		if _, err := in.Task(ctx, "ta", ""); !errors.As(err, &ie) || ie.Field != "id" {
			t.Errorf("empty id: %v; want an InvalidError on id", err)
		}
		if _, err := in.Task(ctx, "no spaces", "one"); !errors.Is(err, worqr.ErrInvalid) {
			t.Errorf("bad queue name: %v; want ErrInvalid", err)
		}
	})
}

// Inspector.Tasks lists running tasks in take order, by pid: it sorted
// the pids again as text, so a taking of pid 100 came before one of pid 99
// (found by the audit of retries, delays and the dead set).
func TestActiveTasksAreListedInTakeOrder(t *testing.T) {
	ctx := context.Background()
	bundle := setup(t)
	pool, ns, c, in := bundle.pool, bundle.ns, bundle.client, bundle.in
	first, err := c.Enqueue(ctx, "q", []byte("1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.Enqueue(ctx, "q", []byte("2"), nil)
	if err != nil {
		t.Fatal(err)
	}
	st := rdb.NewStore(pool, ns)
	qk := st.Queue(rdb.QueueRef{Tag: "q", Name: "q"})
	conn := pool.Get()
	defer conn.Close()
	if _, err := conn.Do("SET", qk.Seq, 98); err != nil { // the next pids: 99, then 100
		t.Fatal(err)
	}
	taken, err := st.Take(ctx, qk, rdb.TakeArgs{Worker: "W", Until: math.MaxInt64, Max: 2})
	if err != nil || len(taken) != 2 {
		t.Fatalf("Take: %+v %v", taken, err)
	}
	infos, total, err := in.Tasks(ctx, "q", worqr.StateActive, 0, 10)
	if err != nil || total != 2 || len(infos) != 2 {
		t.Fatalf("Tasks: %d of %d, %v", len(infos), total, err)
	}
	if infos[0].ID != first || infos[1].ID != second {
		t.Errorf("active tasks listed %s, %s; want %s (pid 99), %s (pid 100): take order", infos[0].ID, infos[1].ID, first, second)
	}
}

// DeleteAllDead goes on past a call that stopped at its byte bound (a
// chunk that read fewer entries than asked used to mean the dead set was
// done): every dead task is deleted.
func TestDeleteAllDeadGoesOnPastTheByteBound(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	conn := pool.Get()
	defer conn.Close()
	q := rdb.NewKeys(ns).Queue(rdb.Standalone("big"))
	if _, err := conn.Do("SADD", rdb.NewKeys(ns).KnownQueues(), q.Ref.Member()); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("p", 24<<20)
	for i := 0; i < 4; i++ {
		id := "d" + strconv.Itoa(i)
		if _, err := conn.Do("HSET", q.Task(id), rdb.FieldPayload, big, rdb.FieldState, rdb.StateDead); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Do("ZADD", q.Dead, i, id); err != nil {
			t.Fatal(err)
		}
	}
	n, err := in.DeleteAllDead(ctx, "big", nil)
	if err != nil || n != 4 {
		t.Fatalf("DeleteAllDead = %d, %v; want 4", n, err)
	}
	if left, _ := conn.Do("ZCARD", q.Dead); left != int64(0) {
		t.Fatalf("%v left dead", left)
	}
}

// rangeSize is how many entries an LRANGE, ZRANGE or ZREVRANGE asks for
// (0 for any other command).
func rangeSize(cmd string, args []any) int {
	switch cmd {
	case "LRANGE", "ZRANGE", "ZREVRANGE":
	default:
		return 0
	}
	if len(args) < 3 {
		return 0
	}
	lo, _ := strconv.Atoi(fmt.Sprint(args[1]))
	hi, _ := strconv.Atoi(fmt.Sprint(args[2]))
	return hi - lo + 1
}

// No listing asks Redis for more than a page (1,000 entries) in one
// command, whatever the caller asks for: a Peek of 1,000,000 held Redis
// for 55 ms in one LRANGE, TasksBehind of a million for 44 ms, Dead of
// 200,000 for 8 ms; Inspector.Keys, a cursor, refuses a count over a page
// (an HSCAN of COUNT 1,000,000 over 200,000 keys held Redis for 146 ms).
func TestListingPagesAreBounded(t *testing.T) {
	ctx := context.Background()
	base := srv.Pool()
	t.Cleanup(func() { base.Close() })
	ns := redistest.Namespace()
	var mu sync.Mutex
	biggest := map[string]int{}
	note := func(cmd string, args []any) {
		if n := rangeSize(cmd, args); n > 0 {
			mu.Lock()
			biggest[cmd] = max(biggest[cmd], n)
			mu.Unlock()
		}
	}
	pool := &redistest.HookPool{Pool: base,
		Sent: func(cmd string, args []any) func() { note(cmd, args); return nil },
		Done: func(_ redis.Conn, cmd string, args []any, r any, err error) (any, error) {
			note(cmd, args)
			return r, err
		}}
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2500
	ps := make([][]byte, n)
	for i := range ps {
		ps[i] = []byte("x")
	}
	if _, err := c.EnqueueBatch(ctx, "pq", ps, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueBatch(ctx, "pk", ps, &worqr.EnqueueOpts{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	if ids, err := in.TasksBehind(ctx, "pk", "k", 0, 1_000_000); err != nil || len(ids) != n-1 {
		t.Fatalf("TasksBehind(1,000,000) = %d ids, %v; want %d", len(ids), err, n-1)
	}
	if ts, total, err := in.Tasks(ctx, "pq", worqr.StateQueued, 0, 1_000_000); err != nil || len(ts) != n || total != n {
		t.Fatalf("Tasks(queued, 1,000,000) = %d tasks of %d, %v; want the %d", len(ts), total, err, n)
	}
	for _, st := range []worqr.TaskState{worqr.StateDead, worqr.StateScheduled, worqr.StateDone} {
		if ts, total, err := in.Tasks(ctx, "pq", st, 0, 1_000_000); err != nil || len(ts) != 0 || total != 0 {
			t.Fatalf("Tasks(%s, 1,000,000) = %d, %d, %v", st, len(ts), total, err)
		}
	}
	for cmd, size := range biggest {
		if size > 1000 {
			t.Errorf("one %s asked for %d entries; want a page of at most 1,000", cmd, size)
		}
	}
	_, _, _, err = in.Keys(ctx, "pk", 0, 1001)
	if ie, ok := err.(*worqr.InvalidError); !ok || ie.Field != "count" {
		t.Errorf("Keys(count 1001) = %v; want an *InvalidError naming count", err)
	}
	if ks, _, _, err := in.Keys(ctx, "pk", 0, 1000); err != nil || len(ks) != 1 {
		t.Errorf("Keys(count 1000) = %d keys, %v", len(ks), err)
	}
}

// DeleteAllWaiting empties an ordered queue whose keys have delayed heads:
// a head ended by a chunk with no room left for all its followers moves
// its key on, the next task made the head in the waiting list, which an
// earlier part had passed already. One key with 1,500 tasks behind its
// delayed head, and 1,000 delayed heads with one task behind each.
func TestDeleteAllWaitingWithDelayedKeyHeads(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	cfg := worqr.Config{Namespace: redistest.Namespace()}
	c, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	later := &worqr.EnqueueOpts{Key: "long", Delay: time.Hour}
	if _, err := c.Enqueue(ctx, "one", []byte("head"), later); err != nil {
		t.Fatal(err)
	}
	behind := make([][]byte, 1500)
	for i := range behind {
		behind[i] = []byte(fmt.Sprint(i))
	}
	if _, err := c.EnqueueBatch(ctx, "one", behind, &worqr.EnqueueOpts{Key: "long"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 1000; i++ {
		k := fmt.Sprint("k", i)
		if _, err := c.Enqueue(ctx, "many", []byte("head"), &worqr.EnqueueOpts{Key: k, Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Enqueue(ctx, "many", []byte("behind"), &worqr.EnqueueOpts{Key: k}); err != nil {
			t.Fatal(err)
		}
	}
	for q, want := range map[string]int{"one": 1501, "many": 2000} {
		n, err := in.DeleteAllWaiting(ctx, q, nil)
		if err != nil || n != want {
			t.Errorf("%s: deleted %d (%v), want %d", q, n, err, want)
		}
		qi, err := in.Queue(ctx, q)
		if err != nil || qi.Waiting != 0 || qi.Scheduled != 0 || qi.Keys != 0 {
			t.Errorf("%s after the purge: %+v (%v), want nothing left", q, qi, err)
		}
	}
}

// RequeueAllDead requeues each task that was dead when it started once:
// a requeued task that dies again while the call goes on (a poison task,
// its handler failing at once) is not requeued again. It was: each chunk
// read the oldest entries left, and the tasks the earlier chunks had
// requeued came back at the end of the dead set, so the call went round
// them for as long as they kept dying (here: forever), running each
// handler again and again. The progress callback, called after each chunk,
// stands for the workers: every task waiting dies again at once.
func TestRequeueAllDeadRequeuesEachDeadTaskOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	cfg := &worqr.Config{Namespace: ns, DisableEvents: true}
	c, err := worqr.NewClient(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = []byte(fmt.Sprint(i))
	}
	ids, err := c.EnqueueBatch(ctx, "poison", payloads, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := pool.Get()
	defer conn.Close()
	q := rdb.NewKeys(ns).Queue(rdb.Standalone("poison"))
	requeued := map[string]int{}
	// die buries every task waiting in the queue, as a worker whose handler
	// fails each at once would (one ms later than the last death: a dead
	// set is scored by the time of death).
	die := func() {
		for {
			id, err := redis.String(conn.Do("LPOP", q.Waiting))
			if err == redis.ErrNil {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			requeued[id]++
			tm, err := redis.Int64s(conn.Do("TIME"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Do("HSET", q.Task(id), rdb.FieldState, rdb.StateDead); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Do("ZADD", q.Dead, tm[0]*1000+tm[1]/1000, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	die() // n dead tasks
	for id, k := range requeued {
		requeued[id] = k - 1
	}
	time.Sleep(2 * time.Millisecond) // (the call starts after the last death)
	total := 0
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	got, err := in.RequeueAllDead(rctx, "poison", func(done int) {
		die()
		total = done
		if done > 10*n {
			stop() // round and round: give up
		}
	})
	if err != nil && total <= 10*n {
		t.Fatal(err)
	}
	if got != n {
		t.Errorf("RequeueAllDead requeued %d, want %d (each dead task once)", got, n)
	}
	for _, id := range ids {
		if requeued[id] != 1 {
			t.Fatalf("task %s requeued %d times, want once", id, requeued[id])
		}
	}
}

// A flow's list of runs (what Inspector.Runs pages through) loses the runs
// whose data expired: a worker's reaper prunes it with each sweep. It grew
// by one entry per run forever (found by an audit).
func TestReaperPrunesExpiredRunsFromTheList(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	flow := &worqr.Flow{Name: "pr", Retention: time.Millisecond, Stages: []worqr.Stage{
		{Name: "s", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			})},
	}}
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1500 // more than one chunk
	ended := make([]string, 0, n)
	for i := 0; i < n; i++ {
		id, err := c.StartRun(ctx, flow, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := c.CancelRun(ctx, flow, id); err != nil || !ok {
			t.Fatalf("cancel run %s: %v, %v", id, ok, err)
		}
		ended = append(ended, id)
	}
	live, err := c.StartRun(ctx, flow, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	qk := rdb.NewKeys(ns).Queue(rdb.QueueRef{Tag: "pr", Name: "pr"})
	conn := pool.Get()
	defer conn.Close()
	wait(t, 10*time.Second, "the ended runs to expire", func() bool {
		k, err := redis.Int(conn.Do("EXISTS", qk.Task(ended[len(ended)-1])))
		return err == nil && k == 0
	})
	if k, err := redis.Int(conn.Do("ZCARD", qk.Runs)); err != nil || k != n+1 {
		t.Fatalf("runs listed before the reaper's sweep: %d, %v; want %d", k, err, n+1)
	}
	cfg := fastTimings(ns)
	cfg.Flows = []*worqr.Flow{flow}
	startWorker(t, ctx, pool, &cfg) // its reaper sweeps when it first holds the lease
	wait(t, 10*time.Second, "the list to lose the expired runs", func() bool {
		k, err := redis.Int(conn.Do("ZCARD", qk.Runs))
		return err == nil && k == 1
	})
	ids, err := redis.Strings(conn.Do("ZRANGE", qk.Runs, 0, -1))
	if err != nil || len(ids) != 1 || ids[0] != live {
		t.Fatalf("runs listed %v, %v; want only the running one %s", ids, err, live)
	}
}

// A run started with an id of its own (RunOpts.ID) may be started again
// once the earlier run of that id expired. Inspector.Runs (and the
// reaper's prune) drops from the flow's list the ids whose run it read
// gone: a run started again under that id between the read and the drop
// lost its entry, and the list (the dashboard's Flows page, worqr flow ls)
// never showed it, running or ended. The drop checks each id again.
func TestRunStartedAgainUnderItsIDStaysListed(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	flow := &worqr.Flow{Name: "reuse", Retention: time.Millisecond, Stages: []worqr.Stage{
		{Name: "s", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) { return nil, nil })},
	}}
	cfg := &worqr.Config{Namespace: ns, DisableEvents: true}
	c, err := worqr.NewClient(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	opts := &worqr.RunOpts{ID: "order-42"}
	if _, err := c.StartRun(ctx, flow, nil, opts); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.CancelRun(ctx, flow, opts.ID); err != nil || !ok {
		t.Fatalf("cancel: %v, %v", ok, err)
	}
	qk := rdb.NewKeys(ns).Queue(rdb.QueueRef{Tag: "reuse", Name: "reuse"})
	conn := pool.Get()
	defer conn.Close()
	wait(t, 10*time.Second, "the cancelled run to expire", func() bool {
		k, err := redis.Int(conn.Do("EXISTS", qk.Task(opts.ID)))
		return err == nil && k == 0
	})
	restarted := false
	undo := in.OnRunsForget(func(gone []string) {
		if restarted {
			return
		}
		restarted = true
		// Started again between the read that found it gone and the drop.
		if _, err := c.StartRun(ctx, flow, nil, opts); err != nil {
			t.Errorf("start again: %v", err)
		}
	})
	if _, err := in.Runs(ctx, flow.Name, "", 0, 10); err != nil {
		t.Fatal(err)
	}
	undo()
	if !restarted {
		t.Fatal("Runs found no expired run to drop")
	}
	runs, err := in.Runs(ctx, flow.Name, worqr.RunRunning, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].ID != opts.ID {
		t.Fatalf("running runs listed: %d; want the run %s started again", len(runs), opts.ID)
	}
}

// Inspector.Runs reads the run list 200 at a time: a run started between
// two pages moved every entry down one rank, and the last run of the first
// page came again first in the second (listed twice).
func TestRunsListsARunOnceWhenOneStartsBetweenPages(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	cfg := &worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true}
	flow := &worqr.Flow{Name: "pages", Stages: []worqr.Stage{
		{Name: "s", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) { return nil, nil })},
	}}
	c, err := worqr.NewClient(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 210; i++ {
		if _, err := c.StartRun(ctx, flow, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	started := false
	undo := in.OnRunsPage(func() {
		if !started {
			started = true
			if _, err := c.StartRun(ctx, flow, nil, nil); err != nil {
				t.Error(err)
			}
		}
	})
	defer undo()
	runs, err := in.Runs(ctx, "pages", "", 0, 250)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range runs {
		if seen[r.ID] {
			t.Fatalf("run %s listed twice", r.ID)
		}
		seen[r.ID] = true
	}
	if len(runs) != 210 {
		t.Errorf("%d runs listed, want the 210 there were when the call began", len(runs))
	}
}

// A handler that hangs on an ordered queue: the queue's figures show the
// tasks waiting behind its key (Waiting counts only heads that wait, 0
// here) and the age of the hung taking, which grows from its start.
func TestQueueFiguresShowStuckWork(t *testing.T) {
	ctx := context.Background()
	b := setup(t)
	c, in := b.client, b.in
	release := make(chan struct{})
	defer close(release)
	started := make(chan string, 10)
	b.startWorker(worqr.WorkerConfig{Queues: map[string]worqr.QueueConfig{"stuck": {Concurrency: 2,
		Handler: worqr.HandlerFunc(func(ctx context.Context, task *worqr.Task) error {
			started <- task.ID
			<-release
			return nil
		})}}})
	ids, err := c.EnqueueBatch(ctx, "stuck", [][]byte{[]byte("1"), []byte("2"), []byte("3"), []byte("4")}, &worqr.EnqueueOpts{Key: "K"})
	if err != nil {
		t.Fatal(err)
	}
	if id := <-started; id != ids[0] {
		t.Fatalf("started %s, want the key's head %s", id, ids[0])
	}
	qi, err := in.Queue(ctx, "stuck")
	if err != nil {
		t.Fatal(err)
	}
	if qi.Waiting != 0 || qi.Behind != 3 || qi.Active != 1 || qi.Keys != 1 {
		t.Errorf("Queue = waiting %d, behind %d, active %d, keys %d; want 0, 3, 1, 1", qi.Waiting, qi.Behind, qi.Active, qi.Keys)
	}
	// The taking started ten minutes ago (as if it had hung since).
	st := rdb.NewStore(b.pool, b.ns)
	conn := b.pool.Get()
	defer conn.Close()
	now, err := redis.Int64s(conn.Do("TIME"))
	if err != nil {
		t.Fatal(err)
	}
	start := now[0]*1000 + now[1]/1000 - 10*60*1000
	if _, err := conn.Do("HSET", st.Queue(rdb.Standalone("stuck")).Task(ids[0]), rdb.FieldStarted, start); err != nil {
		t.Fatal(err)
	}
	qs, err := in.Queues(ctx)
	if err != nil || len(qs) != 1 {
		t.Fatalf("Queues = %+v, %v", qs, err)
	}
	if a := qs[0].OldestActive; a < 10*time.Minute || a > 11*time.Minute {
		t.Errorf("OldestActive = %s, want about 10m", a)
	}
	if qs[0].Behind != 3 {
		t.Errorf("Queues' Behind = %d, want 3", qs[0].Behind)
	}
}
