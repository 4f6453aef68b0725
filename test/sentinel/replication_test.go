package sentinel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// lossLedger is what a replication-loss run saw: the enqueues and ends the
// library acknowledged, those it said were not replicated, and every run
// of every task, in one order.
type lossLedger struct {
	mu           sync.Mutex
	seq          int64
	acked        map[string]bool    // enqueue returned no error
	told         map[string]bool    // enqueue returned ErrNotReplicated
	runs         map[string][]int64 // seq of each start of each task
	doneAcked    map[string]int64   // seq of the first acknowledged done
	unreplicated map[string]bool    // pids whose end was not replicated
	endsTold     int
	at           map[string]string   // where each enqueue was answered
	seen         map[string][]string // the events of each task other than its run's done
}

func newLossLedger() *lossLedger {
	return &lossLedger{acked: map[string]bool{}, told: map[string]bool{}, runs: map[string][]int64{},
		doneAcked: map[string]int64{}, unreplicated: map[string]bool{}, at: map[string]string{}, seen: map[string][]string{}}
}

func (l *lossLedger) run(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	l.runs[id] = append(l.runs[id], l.seq)
}

func (l *lossLedger) event(e worqr.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.TaskID != "" && e.Kind != worqr.EventDone {
		l.seen[e.TaskID] = append(l.seen[e.TaskID], fmt.Sprintf("%s %s pid %s: %v", time.Now().Format("15:04:05.000"), e.Kind, e.PID, e.Err))
	}
	switch {
	case e.Kind == worqr.EventError && errors.Is(e.Err, worqr.ErrNotReplicated):
		l.unreplicated[e.PID] = true
		l.endsTold++
	case e.Kind == worqr.EventDone && !l.unreplicated[e.PID]:
		if _, ok := l.doneAcked[e.TaskID]; !ok {
			l.seq++
			l.doneAcked[e.TaskID] = l.seq
		}
	}
}

// lossCounts are the figures of one run.
type lossCounts struct {
	enqueued, enqueuesLost, enqueuesTold int // acknowledged, of those never run, not acknowledged (ErrNotReplicated)
	finished, finishesLost, endsTold     int // acknowledged done, of those run again after, ends not replicated
	toldLost                             int // enqueues not acknowledged that never ran
}

func (l *lossLedger) counts() lossCounts {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := lossCounts{enqueued: len(l.acked), enqueuesTold: len(l.told), finished: len(l.doneAcked), endsTold: l.endsTold}
	for id := range l.acked {
		if len(l.runs[id]) == 0 {
			c.enqueuesLost++
		}
	}
	for id := range l.told {
		if len(l.runs[id]) == 0 {
			c.toldLost++
		}
	}
	for id, at := range l.doneAcked {
		for _, s := range l.runs[id] {
			if s > at {
				c.finishesLost++ // its done was forgotten: it ran again
				break
			}
		}
	}
	return c
}

// The figures of docs/RELIABILITY.md "Replication loss": enqueues and
// finishes flow on a primary with one replica and three sentinels, the
// primary is killed with SIGKILL and the sentinels promote the replica.
// Without Config.Replicas, an acknowledged write that the replica had not
// received when the primary died is lost; with Replicas 1, every
// acknowledged write is on the replica, so none is lost (the writes not
// acknowledged by the replica in time are reported as ErrNotReplicated
// and counted apart). Two ways the primary dies: killed alone (the kernel
// still delivers to the replica what Redis wrote to its socket), and
// killed just after its link to the replica dropped (CLIENT KILL TYPE
// replica, standing in for a network cut or a lagging replica).
func TestReplicationLoss(t *testing.T) {
	for _, cut := range []bool{false, true} {
		for _, replicas := range []int{0, 1} {
			name := fmt.Sprintf("kill/replicas=%d", replicas)
			if cut {
				name = fmt.Sprintf("cut+kill/replicas=%d", replicas)
			}
			t.Run(name, func(t *testing.T) {
				c := lossRun(t, replicas, cut)
				t.Logf("%s: enqueues acknowledged %d, lost %d (not acknowledged: %d, of which lost %d); finishes acknowledged %d, lost %d (ends not replicated: %d)",
					name, c.enqueued, c.enqueuesLost, c.enqueuesTold, c.toldLost, c.finished, c.finishesLost, c.endsTold)
				if replicas > 0 && (c.enqueuesLost > 0 || c.finishesLost > 0) {
					t.Errorf("with Replicas %d: %d acknowledged enqueues and %d acknowledged finishes lost, want 0",
						replicas, c.enqueuesLost, c.finishesLost)
				}
				if cut && replicas == 0 && c.enqueuesLost+c.finishesLost == 0 {
					// The takings running at the cut end in it: their ends
					// are lost, and they run again.
					t.Errorf("without Replicas, the cut lost nothing acknowledged: the scenario does not exercise the loss")
				}
				if c.enqueued == 0 || c.finished == 0 {
					t.Errorf("nothing flowed: %+v", c)
				}
			})
		}
	}
}

func lossRun(t *testing.T, replicas int, cut bool) lossCounts {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, pool := startSentinel(ctx, t)
	cfg := worqr.Config{Namespace: "loss", Replicas: replicas}
	if replicas > 0 {
		cfg.ReplicaTimeout = 100 * time.Millisecond
	}
	wp := served(t, st, pool) // what the worker, client and inspector run on
	client, err := worqr.NewClient(wp, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := newLossLedger()
	w, err := worqr.NewWorker(wp, &worqr.WorkerConfig{Config: cfg,
		// Slower than the producers: a backlog builds, so that a task
		// waits a while between its enqueue and its run, and a run lasts.
		Queues: map[string]worqr.QueueConfig{"l": {Concurrency: 16, Handler: worqr.HandlerFunc(func(_ context.Context, task *worqr.Task) error {
			l.run(task.ID)
			time.Sleep(40 * time.Millisecond)
			return nil
		})}},
		OnEvent: l.event,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = w.Stop(sctx)
	}()

	// Producers enqueue with ids of their own, each retried after a
	// connection error (the id makes a retry create nothing new) until it
	// is acknowledged or said not to be replicated.
	var stop atomic.Bool
	var wg sync.WaitGroup
	for p := 0; p < 2; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				id := fmt.Sprintf("p%d-%d", p, i)
				for !stop.Load() {
					_, err := client.Enqueue(ctx, "l", []byte(id), &worqr.EnqueueOpts{ID: id})
					if err == nil || errors.Is(err, worqr.ErrNotReplicated) {
						l.mu.Lock()
						if err == nil {
							l.acked[id] = true
						} else {
							l.told[id] = true
						}
						l.mu.Unlock()
						break
					}
					_ = redistest.Pause(ctx, 20*time.Millisecond) // then again
				}
				_ = redistest.Pause(ctx, 3*time.Millisecond) // the producers' pace
			}
		}()
	}
	_ = redistest.Pause(ctx, time.Second) // a backlog builds before the fault
	old := st.Nodes[0]
	if cut {
		// The replica freezes and its link drops: the writes the
		// primary acknowledges meanwhile reach no replica.
		if err := st.Nodes[1].Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		if err := cutReplicas(ctx, old.Addr); err != nil {
			t.Fatal(err)
		}
		a0 := l.counts()
		_ = redistest.Pause(ctx, 300*time.Millisecond) // the cut lasts
		a1 := l.counts()
		t.Logf("during the cut: %d enqueues and %d finishes acknowledged", a1.enqueued-a0.enqueued, a1.finished-a0.finished)
	}
	old.Kill()
	if cut {
		if err := st.Nodes[1].Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	next, err := st.WaitNewPrimary(ctx, old.Addr)
	if err != nil {
		t.Fatal(err)
	}
	waitPrimary(t, pool, next, 20*time.Second)
	waitServed(ctx, t, wp, next, 20*time.Second)
	_ = redistest.Pause(ctx, 300*time.Millisecond) // enqueues on the new primary too
	stop.Store(true)
	wg.Wait()

	in, err := worqr.NewInspector(wp, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	// One look at the queue is not enough: it may look drained while a
	// task is given back, and run after (see drain).
	redistest.WaitFor(t, 60*time.Second, "the queue to look drained", func() bool { return looksDrained(ctx, in) })
	first := l.counts()
	drain(ctx, t, in, l)
	c := l.counts()
	if first.enqueuesLost > c.enqueuesLost {
		t.Logf("the queue looked drained while %d acknowledged tasks were still to run: they ran after", first.enqueuesLost-c.enqueuesLost)
	}
	if replicas > 0 && c.enqueuesLost > 0 {
		// Not expected (the assertion fails after): say where each is, for
		// whoever looks into it (seen once, 2026-11-25, not reproduced).
		for _, id := range l.lostIDs() {
			info, err := in.Task(ctx, "l", id)
			t.Logf("acknowledged and never run: %s: %+v %v", id, info, err)
		}
	}
	return c
}

// lostIDs are the acknowledged enqueues that never ran.
func (l *lossLedger) lostIDs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for id := range l.acked {
		if len(l.runs[id]) == 0 {
			out = append(out, id)
		}
	}
	return out
}

// cutReplicas drops the links of the primary at addr to its replicas.
func cutReplicas(ctx context.Context, addr string) error {
	c, err := redis.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Do("CLIENT", "KILL", "TYPE", "replica"); err != nil {
		return err
	}
	info, err := redis.String(c.Do("INFO", "replication"))
	if err != nil {
		return err
	}
	if !strings.Contains(info, "connected_slaves:0") {
		return errors.New("the replica is still linked after CLIENT KILL TYPE replica")
	}
	return nil
}

// looksDrained reports whether queue "l" has nothing waiting, scheduled or
// taken, in one look.
func looksDrained(ctx context.Context, in *worqr.Inspector) bool {
	q, err := in.Queue(ctx, "l")
	return err == nil && q.Waiting == 0 && q.Active == 0 && q.Scheduled == 0
}

// drain waits until every acknowledged enqueue of l ran, or until queue
// "l" looked drained in every look for 3 s (a minute at most): what is
// left then never ran. A single look can be wrong: Inspector.Queue reads
// the waiting list and the holders in one round trip and their takings
// in a second, so a task given back to the front between the two (by a
// worker whose keepalive expired in the failover, by the release of a
// taking its worker does not run, by the reaper) is counted nowhere. The
// likeliest reading of the one run that counted 2 acknowledged enqueues
// of 397 as never run (issue 36): they ran after it looked.
func drain(ctx context.Context, t *testing.T, in *worqr.Inspector, l *lossLedger) {
	t.Helper()
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var since time.Time
	if redistest.Poll(dctx, func() bool {
		if len(l.lostIDs()) == 0 {
			return true
		}
		switch {
		case !looksDrained(dctx, in):
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) > 3*time.Second:
			return true
		}
		return false
	}) != nil {
		t.Errorf("queue l did not stay drained within a minute")
	}
}
