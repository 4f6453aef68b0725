package worqr_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/internal/seam"
	"github.com/worqr/worqr-go/worqr"
)

// handoffs counts the hand-off messages published on a queue's wake
// channel, by the worker they name.
type handoffs struct {
	mu   sync.Mutex
	by   map[string]int
	last map[string]string // pid of the last hand-off, by worker
	pids map[string]bool   // every pid handed
	psc  redis.PubSubConn
}

func watchHandoffs(t *testing.T, q rdb.QueueKeys) *handoffs {
	t.Helper()
	c, err := redis.DialURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	h := &handoffs{by: map[string]int{}, last: map[string]string{}, pids: map[string]bool{}, psc: redis.PubSubConn{Conn: c}}
	if err := h.psc.Subscribe(q.WakeChannel); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.psc.Receive().(redis.Subscription); !ok {
		t.Fatal("subscribe")
	}
	go func() {
		for {
			switch v := h.psc.Receive().(type) {
			case redis.Message:
				if m, ok := rdb.ParseHandoff(v.Data); ok {
					h.mu.Lock()
					h.by[m.Worker]++
					h.last[m.Worker] = m.Taken.PID
					h.pids[m.Taken.PID] = true
					h.mu.Unlock()
				}
			case error:
				return
			}
		}
	}()
	t.Cleanup(func() { c.Close() })
	return h
}

// lastPID waits up to d for a hand-off to w and returns the pid of the
// last one ("" if none came).
func (h *handoffs) lastPID(w string, d time.Duration) string {
	var pid string
	redistest.Within(d, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		pid = h.last[w]
		return pid != ""
	})
	return pid
}

// handed reports whether a hand-off carried pid, waiting up to a second
// for the watcher to read it (the worker may read it first).
func (h *handoffs) handed(pid string) bool {
	return redistest.Within(time.Second, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.pids[pid]
	})
}

func (h *handoffs) count(w string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.by[w]
}

// waitParked waits until worker id is parked on q.
func waitParked(t *testing.T, c redis.Conn, q rdb.QueueKeys, id string) {
	t.Helper()
	wait(t, 10*time.Second, "worker "+id+" to park on "+q.Ref.Name, func() bool {
		n, _ := redis.Int(c.Do("HEXISTS", q.Park, id))
		return n == 1
	})
}

// An idle worker parks; each task enqueued then reaches it in the
// enqueue's hand-off, with no take. With DisableHandoff it never parks.
func TestHandoffRunsTasksOfAnIdleWorker(t *testing.T) {
	for _, disable := range []bool{false, true} {
		t.Run("disable="+strconv.FormatBool(disable), func(t *testing.T) {
			ctx := context.Background()
			pool, c, cfg, q := handEnv(t)
			h := watchHandoffs(t, q)
			done := make(chan string, 100)
			w := startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: cfg, DisableHandoff: disable,
				PollInterval: 200 * time.Millisecond, // a park entry lasts two polls: 400 ms, room for a loaded machine
				Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 2, Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
					done <- string(t.Payload) + "|" + t.PID()
					return nil
				})}}})
			defer w.Stop(ctx)
			client := newClient(t, pool, &cfg)
			if !disable {
				waitParked(t, c, q, w.ID())
			} else {
				time.Sleep(200 * time.Millisecond) // its first take, at start, would have parked it
				if n, _ := redis.Int(c.Do("HLEN", q.Park)); n != 0 {
					t.Fatalf("%d workers parked with DisableHandoff", n)
				}
			}
			const n = 20
			ranHanded := 0 // tasks run under the pid their hand-off carried
			for i := 0; i < n; i++ {
				if _, err := client.Enqueue(ctx, "q", []byte(strconv.Itoa(i)), nil); err != nil {
					t.Fatal(err)
				}
				select {
				case got := <-done:
					payload, pid, _ := strings.Cut(got, "|")
					if payload != strconv.Itoa(i) {
						t.Fatalf("ran %s, want %d", payload, i)
					}
					if !disable && h.handed(pid) {
						ranHanded++
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("task %d did not run", i)
				}
			}
			handed := h.count(w.ID())
			if disable && handed != 0 {
				t.Fatalf("%d hand-offs with DisableHandoff", handed)
			}
			// Every task but maybe a few enqueued while an end was on its
			// way (a full worker is unparked until its next empty take).
			if !disable && (handed < n/2 || ranHanded < n/2) {
				t.Fatalf("%d of %d tasks handed to an idle worker, %d run as handed", handed, n, ranHanded)
			}
			t.Logf("handed %d of %d, %d run as handed", handed, n, ranHanded)
		})
	}
}

// An EnqueueBatch of plain tasks (as concurrent Enqueue calls the client
// sends together) is handed to an idle worker as far as it has free
// slots: each task runs once, under the pid its hand-off carried.
func TestEnqueueBatchIsHandedToAnIdleWorker(t *testing.T) {
	ctx := context.Background()
	pool, c, cfg, q := handEnv(t)
	h := watchHandoffs(t, q)
	const n = 4
	release := make(chan struct{})
	done := make(chan string, 2*n)
	w := startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: cfg, PollInterval: 200 * time.Millisecond,
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: n, Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
			<-release
			done <- string(t.Payload) + "|" + t.PID()
			return nil
		})}}})
	defer w.Stop(ctx)
	open := sync.OnceFunc(func() { close(release) })
	defer open() // before Stop, also when the test fails
	client := newClient(t, pool, &cfg)
	waitParked(t, c, q, w.ID())
	payloads := make([][]byte, n+1)
	for i := range payloads {
		payloads[i] = []byte(strconv.Itoa(i))
	}
	if _, err := client.EnqueueBatch(ctx, "q", payloads, nil); err != nil {
		t.Fatal(err)
	}
	// n handed (its free slots), the last one left waiting in the queue.
	if ids, _ := redis.Strings(c.Do("LRANGE", q.Waiting, 0, -1)); len(ids) != 1 {
		t.Fatalf("waiting %v, want the one task beyond the worker's %d slots", ids, n)
	}
	open()
	seen := map[string]bool{}
	handed := 0
	for range payloads {
		select {
		case got := <-done:
			payload, pid, _ := strings.Cut(got, "|")
			if seen[payload] {
				t.Fatalf("task %s ran twice", payload)
			}
			seen[payload] = true
			if h.handed(pid) {
				handed++
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("ran %v of %d tasks", seen, n+1)
		}
	}
	if handed != n || h.count(w.ID()) != n {
		t.Fatalf("%d tasks run as handed, %d hand-offs; want %d", handed, h.count(w.ID()), n)
	}
}

// A taking recorded for a parked worker whose message never came (pub/sub
// lost it) is found by the worker's check of its holdings and released:
// the task runs, once.
func TestLostHandoffIsReleased(t *testing.T) {
	ctx := context.Background()
	pool, c, cfg, q := handEnv(t)
	var runs atomic.Int32
	done := make(chan struct{}, 10)
	w := startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: cfg, PollInterval: 20 * time.Millisecond,
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 2, Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
			runs.Add(1)
			done <- struct{}{}
			return nil
		})}}})
	defer w.Stop(ctx)
	waitParked(t, c, q, w.ID())
	worqr.StrandTaking(t, c, q, w.ID(), "lost")
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a taking whose hand-off message was lost was never run")
	}
	time.Sleep(100 * time.Millisecond) // five more checks: nothing runs twice
	if n := runs.Load(); n != 1 {
		t.Fatalf("ran %d times", n)
	}
}

// Producers enqueuing at once, with the worker now idle (handed tasks) and
// now busy (taken tasks, and ends that take again): every task runs once.
// (That Redis hands a worker no more than it runs at once is
// TestEnqueueHandsOff's, in rdb; the handler goroutines, as many as the
// concurrency, bound the handlers running here whatever Redis does.)
func TestHandoffsAndTakesRunEachTaskOnce(t *testing.T) {
	ctx := context.Background()
	pool, c, cfg, q := handEnv(t)
	h := watchHandoffs(t, q)
	var mu sync.Mutex
	ran := map[string]int{}
	const n = 400
	all := make(chan struct{})
	w := startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: cfg, PollInterval: 20 * time.Millisecond,
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 2, Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
			time.Sleep(200 * time.Microsecond)
			mu.Lock()
			ran[string(t.Payload)]++
			if len(ran) == n {
				close(all)
			}
			mu.Unlock()
			return nil
		})}}})
	defer w.Stop(ctx)
	waitParked(t, c, q, w.ID())
	client := newClient(t, pool, &cfg)
	// The first alone, to an idle worker: handed, whatever the timing of
	// the rest on a loaded machine.
	if _, err := client.Enqueue(ctx, "q", []byte("0"), nil); err != nil {
		t.Fatal(err)
	}
	wait(t, 10*time.Second, "a task enqueued to an idle parked worker to be handed",
		func() bool { return h.count(w.ID()) > 0 })
	var wg sync.WaitGroup
	for p := 0; p < 4; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 1 + p; i < n; i += 4 {
				if _, err := client.Enqueue(ctx, "q", []byte(strconv.Itoa(i)), nil); err != nil {
					t.Error(err)
				}
				time.Sleep(2 * time.Millisecond) // at times together, at times with the worker idle
			}
		}(p)
	}
	wg.Wait()
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		t.Fatal("not every task ran")
	}
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for k, v := range ran {
		if v != 1 {
			t.Errorf("task %s ran %d times", k, v)
		}
	}
	// How many of the rest were handed depends on the machine's timing
	// (none, on a loaded one): logged.
	t.Logf("handed %d of %d", h.count(w.ID()), n)
}

// A worker that dies holding a task handed to it has that task recovered
// once its keepalive expires, as one it took. (That parking also puts it
// in the queue's holder index, which the reaper's sweep reads, is
// TestTakeParks's, in rdb.)
func TestHandoffToADeadWorkerIsRecovered(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	defer pool.Close()
	c := pool.Get()
	defer c.Close()
	cfg := worqr.Config{Namespace: redistest.Namespace()}
	st := rdb.NewStore(pool, cfg.Namespace)
	q := st.Queue(rdb.Standalone("q"))
	// A worker registered with a short keepalive that parks and dies.
	at, err := st.Register(ctx, "dead", 300, "h", 1, []rdb.QueueRef{q.Ref})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := st.Take(ctx, q, rdb.TakeArgs{Worker: "dead", Until: at + 250, Max: 1, Park: 1}); err != nil || len(got) != 0 {
		t.Fatal(got, err)
	}
	client := newClient(t, pool, &cfg)
	id, err := client.Enqueue(ctx, "q", []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := redis.String(c.Do("HGET", q.Task(id), "w")); got != "dead" {
		t.Fatalf("the task was not handed to the parked worker (held by %q)", got)
	}
	done := make(chan worqr.Event, 1)
	var recovered atomic.Int32
	w := startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: cfg, ReaperInterval: 50 * time.Millisecond,
		OnEvent: func(e worqr.Event) {
			if e.Kind == worqr.EventRecovered && e.Count > 0 {
				recovered.Add(int32(e.Count))
			}
		},
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 1, Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
			done <- worqr.Event{TaskID: t.ID}
			return nil
		})}}})
	defer w.Stop(ctx)
	select {
	case e := <-done:
		if e.TaskID != id {
			t.Fatalf("ran %s, want %s", e.TaskID, id)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the task handed to a dead worker was never recovered")
	}
	// The reaper reports after its requeue, which the worker may beat to
	// the task.
	redistest.Within(5*time.Second, func() bool { return recovered.Load() > 0 })
	if recovered.Load() != 1 {
		t.Fatalf("recovered %d tasks, want 1", recovered.Load())
	}
}

// A cancel sent right after an enqueue reaches the handler of a task that
// was handed to the worker (running for Redis at once), even when it
// comes before the handler started.
func TestCancelRightAfterAHandoff(t *testing.T) {
	ctx := context.Background()
	pool, c, cfg, q := handEnv(t)
	h := watchHandoffs(t, q)
	causes := make(chan error, 20)
	w := startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: cfg, PollInterval: 500 * time.Millisecond,
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 1, Retention: time.Minute, Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			select {
			case <-ctx.Done():
				causes <- context.Cause(ctx)
			case <-time.After(5 * time.Second):
				causes <- nil
			}
			return ctx.Err()
		})}}})
	defer w.Stop(ctx)
	client := newClient(t, pool, &cfg)
	in := newInspector(t, pool, &cfg)
	const n = 10
	for i := 0; i < n; i++ {
		// The last round's taking ended (else the worker is full: the task
		// waits in the queue, and the cancel removes it from there).
		wait(t, 10*time.Second, "the worker to let go of the last round's task", func() bool {
			n, _ := redis.Int(c.Do("HLEN", q.WorkerQueue(w.ID())))
			return n == 0
		})
		waitParked(t, c, q, w.ID())
		id, err := client.Enqueue(ctx, "q", []byte("x"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.Cancel(ctx, "q", id); err != nil {
			t.Fatal(err)
		}
		select {
		case cause := <-causes:
			if !errors.Is(cause, worqr.ErrTaskCancelled) {
				t.Fatalf("round %d: the handler's context ended with %v, want ErrTaskCancelled", i, cause)
			}
		case <-time.After(5 * time.Second):
			// A machine slow enough to keep the hand-off's message for two
			// checks of the worker's holdings has it released, and a
			// release ends a task whose cancel was asked as cancelled,
			// without running it: as good.
			info, err := in.Task(ctx, "q", id)
			if err != nil || info.State != worqr.StateCancelled {
				t.Fatalf("round %d: the handler never ran, and the task is %+v (%v)", i, info, err)
			}
			t.Logf("round %d: cancelled without running", i)
		}
	}
	if got := h.count(w.ID()); got < n/2 {
		t.Fatalf("%d of %d tasks handed: the test does not exercise hand-offs", got, n)
	}
}

// A hand-off received by a worker frozen for most of its keepalive's TTL
// since its last good beat is not run then (the reaper may have given the
// task to another worker meanwhile): once a beat says its id lives, a
// release puts it back and it runs, once. The release comes with that
// beat, not at the next poll (an hour here) or wake-up: the task waited
// that long, held by the worker out of every other worker's reach (found
// by an audit).
func TestHandoffReceivedWhileFrozenIsNotRun(t *testing.T) {
	pool := srv.Pool()
	defer pool.Close()
	c := pool.Get()
	defer c.Close()
	clock := seam.NewManualClock(time.Now())
	ctx := seam.WithHeartbeatClock(context.Background(), clock)
	cfg := worqr.Config{Namespace: redistest.Namespace()}
	q := rdb.NewKeys(cfg.Namespace).Queue(rdb.Standalone("q"))
	ran := make(chan string, 4)
	w := startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: cfg,
		// Fresh for TTL - Interval = 500 ms of its clock after a beat.
		HeartbeatInterval: time.Second, HeartbeatTTL: 1500 * time.Millisecond, PollInterval: time.Hour,
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 1, Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
			ran <- t.PID()
			return nil
		})}}})
	defer w.Stop(context.Background())
	h := watchHandoffs(t, q)
	waitParked(t, c, q, w.ID())
	clock.Advance(700 * time.Millisecond) // no beat for 700 ms: not fresh
	client := newClient(t, pool, &cfg)
	if _, err := client.Enqueue(context.Background(), "q", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	handedPID := h.lastPID(w.ID(), time.Second)
	if handedPID == "" {
		t.Fatal("the task was not handed to the parked worker")
	}
	select {
	case pid := <-ran:
		t.Fatalf("a hand-off received while frozen ran (pid %s)", pid)
	case <-time.After(200 * time.Millisecond):
	}
	// The worker's clock runs again: a beat, then the release and a take.
	defer clock.Run(time.Second, 300*time.Millisecond)()
	select {
	case pid := <-ran:
		if pid == handedPID {
			t.Fatalf("ran under the handed pid %s, want a taking of its own after the release", pid)
		}
	case <-time.After(5 * time.Second):
		held, _ := c.Do("HGETALL", q.WorkerQueue(w.ID()))
		t.Fatalf("the task never ran: the worker, fresh again, still holds it (%s)", held)
	}
	select {
	case pid := <-ran:
		t.Fatalf("ran twice (pid %s)", pid)
	case <-time.After(300 * time.Millisecond):
	}
}

// A worker that stops is parked no more from the moment its fetch loops
// end: tasks enqueued during its grace period wait in the queue for other
// workers, instead of being handed to it and put back only at its end.
func TestStopUnparksBeforeItsGracePeriod(t *testing.T) {
	ctx := context.Background()
	pool, c, cfg, q := handEnv(t)
	gate := make(chan struct{})
	started := make(chan struct{}, 1)
	w := startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: cfg, PollInterval: time.Hour,
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 2, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
			started <- struct{}{}
			<-gate // runs through the grace period
			return nil
		})}}})
	waitParked(t, c, q, w.ID())
	client := newClient(t, pool, &cfg)
	if _, err := client.Enqueue(ctx, "q", []byte("long"), nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the first task never started")
	}
	stopped := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		stopped <- w.Stop(sctx)
	}()
	// Its entry would be valid until its keepalive's deadline (3 s).
	if !redistest.Within(time.Second, func() bool {
		n, _ := redis.Int(c.Do("HEXISTS", q.Park, w.ID()))
		return n == 0
	}) {
		close(gate)
		t.Fatal("a stopping worker is still parked while its handler runs")
	}
	if _, err := client.Enqueue(ctx, "q", []byte("next"), nil); err != nil {
		t.Fatal(err)
	}
	if n, _ := redis.Int(c.Do("LLEN", q.Waiting)); n != 1 {
		t.Errorf("%d tasks wait, want the one enqueued during the grace period", n)
	}
	close(gate)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}

// A task whose cancel was asked while a worker that then died held it is
// ended as cancelled by the reaper of another worker, which reports it
// (EventCancelled, so that Client.Wait and the history learn of it): the
// dead worker's end, which would have, never came.
func TestCancelledTakingOfADeadWorkerIsReported(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	defer pool.Close()
	cfg := worqr.Config{Namespace: redistest.Namespace()}
	st := rdb.NewStore(pool, cfg.Namespace)
	q := st.Queue(rdb.Standalone("q"))
	client := newClient(t, pool, &cfg)
	id, err := client.Enqueue(ctx, "q", []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	at, err := st.Register(ctx, "dead", 300, "h", 1, []rdb.QueueRef{q.Ref})
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.Take(ctx, q, rdb.TakeArgs{Worker: "dead", Until: at + 250, Max: 1})
	if err != nil || len(got) != 1 || got[0].ID != id {
		t.Fatal(got, err)
	}
	if s, err := client.Cancel(ctx, "q", id); err != nil || s != worqr.CancelRequested {
		t.Fatalf("Cancel = %v, %v; want requested", s, err)
	}
	cancelled := make(chan worqr.Event, 1)
	w := startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: cfg, ReaperInterval: 50 * time.Millisecond,
		OnEvent: func(e worqr.Event) {
			if e.Kind == worqr.EventCancelled {
				cancelled <- e
			}
		},
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 1, Handler: worqr.HandlerFunc(func(_ context.Context, tk *worqr.Task) error {
			t.Errorf("task %s ran", tk.ID)
			return nil
		})}}})
	defer w.Stop(ctx)
	select {
	case e := <-cancelled:
		if e.TaskID != id || e.Queue != "q" || e.WorkerID != "dead" || e.PID != got[0].PID {
			t.Fatalf("cancelled event %+v, want task %s of q, held by dead under pid %s", e, id, got[0].PID)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no cancelled event for the task the reaper ended as cancelled")
	}
}

// A worker stopped while a handler still runs a task whose cancel was
// asked (its message missed) puts that taking back as cancelled and
// reports it (EventCancelled, with its pid), as its end would have.
func TestStopReportsACancelledTaking(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	defer pool.Close()
	cfg := worqr.Config{Namespace: redistest.Namespace()}
	st := rdb.NewStore(pool, cfg.Namespace)
	q := st.Queue(rdb.Standalone("q"))
	started := make(chan *worqr.Task, 1)
	release := make(chan struct{})
	defer close(release)
	events := make(chan worqr.Event, 16)
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg,
		OnEvent: func(e worqr.Event) {
			if e.Kind == worqr.EventCancelled {
				events <- e
			}
		},
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 1, Handler: worqr.HandlerFunc(func(_ context.Context, tk *worqr.Task) error {
			started <- tk
			<-release // deaf to its context: still running when Stop gives up
			return nil
		})}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	client := newClient(t, pool, &cfg)
	id, err := client.Enqueue(ctx, "q", []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var tk *worqr.Task
	select {
	case tk = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the task never started")
	}
	// The cancel's mark, without its message: the handler never hears it.
	c := pool.Get()
	defer c.Close()
	if _, err := c.Do("HSET", q.Task(id), "x", "1"); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_ = w.Stop(sctx) // the grace runs out: what still runs is put back
	select {
	case e := <-events:
		if e.TaskID != id || e.Queue != "q" || e.WorkerID != w.ID() || e.PID == "" || e.PID != tk.PID() {
			t.Fatalf("cancelled event %+v, want task %s of q, pid %s, worker %s", e, id, tk.PID(), w.ID())
		}
	default:
		t.Fatal("Stop put back a cancelled taking without reporting it")
	}
}

// A task handed to a worker whose only handler goroutine is still ending
// its last task (the end applied, its reply lost, Redis out of reach while
// the pub/sub connection lives) waits for that goroutine. By the time the
// end gives up, the worker's session is lost and the reaper has given the
// task to another worker: it must not start here too.
func TestHandoffNotRunAfterSessionLost(t *testing.T) {
	ctx := context.Background()
	base, c, cfg, q := handEnv(t)
	pool := redistest.NewFaultPool(base)
	t.Cleanup(func() { pool.Cut.Store(false) })
	type start struct{ worker, payload string }
	starts := make(chan start, 20)
	finishA := make(chan struct{})
	w1 := startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: cfg, PollInterval: time.Hour, DisableReaper: true,
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 1, Handler: worqr.HandlerFunc(func(_ context.Context, tk *worqr.Task) error {
			starts <- start{"w1", string(tk.Payload)}
			if string(tk.Payload) == "a" {
				<-finishA
			}
			return nil
		})}}})
	waitParked(t, c, q, w1.ID())
	client, err := worqr.NewClient(base, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, "q", []byte("a"), nil); err != nil {
		t.Fatal(err)
	}
	if s := <-starts; s.payload != "a" {
		t.Fatalf("started %+v, want a", s)
	}
	startWorker(t, ctx, base, &worqr.WorkerConfig{Config: cfg, ReaperInterval: 100 * time.Millisecond,
		PollInterval: 100 * time.Millisecond, DisableHandoff: true,
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 1, Handler: worqr.HandlerFunc(func(_ context.Context, tk *worqr.Task) error {
			starts <- start{"w2", string(tk.Payload)}
			return nil
		})}}})
	pool.LoseEnd.Store(true)
	close(finishA)
	wait(t, 5*time.Second, "a's end to be sent", pool.Cut.Load)
	// a's end applied: w1 holds nothing and is parked, so b is handed to it.
	if _, err := client.Enqueue(ctx, "q", []byte("b"), nil); err != nil {
		t.Fatal(err)
	}
	var got []start
	for timeout := time.After(8 * time.Second); ; {
		select {
		case s := <-starts:
			if got = append(got, s); s.worker == "w1" {
				t.Fatalf("b started on w1 after its session was lost (starts %v)", got)
			}
		case <-timeout:
			if len(got) != 1 || got[0] != (start{"w2", "b"}) {
				t.Fatalf("starts of b: %v, want one, on w2", got)
			}
			return
		}
	}
}

// An end that takes again, its call built before Stop began and slow on its
// way, must not land after Stop unparked the worker, nor after its
// requeue: it would park the stopping worker, to be handed tasks it never
// runs, or take a task for a worker that is gone, deregistered, where no
// reaper pass looks. Stop waits for it. Both with the grace period over
// at once (the end is then refused, its task requeued) and with one that
// lets the handlers finish.
func TestStopWaitsForAnEndThatTakesAgain(t *testing.T) {
	for _, grace := range []time.Duration{0, 10 * time.Second} {
		t.Run("grace="+grace.String(), func(t *testing.T) {
			ctx := context.Background()
			base, c, cfg, q := handEnv(t)
			pool := redistest.NewFaultPool(base)
			client, err := worqr.NewClient(base, &cfg)
			if err != nil {
				t.Fatal(err)
			}
			// Both waiting when w1 starts: its first take fills its two
			// slots, so its ends take again (more may wait).
			for _, p := range []string{"long", "short"} {
				if _, err := client.Enqueue(ctx, "q", []byte(p), nil); err != nil {
					t.Fatal(err)
				}
			}
			started := make(chan string, 10)
			finish := map[string]chan struct{}{"long": make(chan struct{}), "short": make(chan struct{})}
			w1 := startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: cfg, PollInterval: time.Hour, DisableReaper: true,
				Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 2, ReadAhead: -1, Handler: worqr.HandlerFunc(func(_ context.Context, tk *worqr.Task) error {
					started <- string(tk.Payload)
					<-finish[string(tk.Payload)]
					return nil
				})}}})
			id1 := w1.ID()
			<-started
			<-started
			pool.Hold("_end", 300*time.Millisecond)
			close(finish["short"])
			<-pool.Holding // short's end, taking again (q is empty: parking), is on its way
			stopped := make(chan struct{})
			go func() {
				defer close(stopped)
				sctx, cancel := context.WithTimeout(ctx, grace)
				defer cancel()
				_ = w1.Stop(sctx)
			}()
			<-pool.Held // it landed
			pool.Hold("", 0)
			wait(t, 5*time.Second, "the stopping worker to unpark (else it is handed tasks it will not run) after its end landed", func() bool {
				n, err := redis.Int(c.Do("HEXISTS", q.Park, id1))
				if err != nil {
					t.Fatal(err)
				}
				return n == 0
			})
			ran := make(chan string, 10)
			startWorker(t, ctx, base, &worqr.WorkerConfig{Config: cfg, PollInterval: 100 * time.Millisecond, DisableHandoff: true,
				Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 1, Handler: worqr.HandlerFunc(func(_ context.Context, tk *worqr.Task) error {
					ran <- string(tk.Payload)
					return nil
				})}}})
			if _, err := client.Enqueue(ctx, "q", []byte("x"), nil); err != nil {
				t.Fatal(err)
			}
			for timeout := time.After(10 * time.Second); ; {
				select {
				case p := <-ran:
					if p != "x" {
						continue
					}
				case <-timeout:
					t.Fatal("x, enqueued while w1 stops, did not run on the peer")
				}
				break
			}
			close(finish["long"])
			<-stopped
			if n, err := redis.Int(c.Do("HLEN", q.WorkerQueue(id1))); err != nil || n != 0 {
				t.Fatalf("the stopped worker holds %d takings (%v): no reaper looks for them", n, err)
			}
			if n, err := redis.Int(c.Do("HEXISTS", q.Park, id1)); err != nil || n != 0 {
				t.Fatalf("the stopped worker is parked: %d (%v)", n, err)
			}
		})
	}
}
