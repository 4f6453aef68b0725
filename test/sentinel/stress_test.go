package sentinel_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// The ways a primary goes in TestReplicationStress.
var stressModes = []string{
	"kill",  // SIGKILL; restarted as a replica of the new primary
	"stop",  // SIGSTOP until the replica is promoted, then SIGCONT: it comes back a primary, is demoted and resyncs
	"sleep", // DEBUG SLEEP past the promotion: the same, from inside Redis
	"cut",   // its proxy holds every byte to and from it (clients, replica, sentinels) until the promotion, then lets them through
	// The replica frozen and its link dropped (CLIENT KILL TYPE replica),
	// the primary runs on alone for 300 ms, then is SIGKILLed and the
	// replica resumes (TestReplicationLoss's cut+kill): a replica behind.
	"lagkill",
}

// stressFailovers is the bounded form's failovers per mode, run by every
// go test; WORQR_REPL_STRESS=<n> asks for n per mode.
const stressFailovers = 6

// TestReplicationStress is TestReplicationLoss many times over: under a
// steady load of enqueues (with ids of their own, retried until answered)
// and ends, with Replicas 1, the primary goes again and again in each way
// of stressModes, each followed by the promotion of its replica and the
// return of the old node as a replica of the new primary (so that the next
// failover has a replica to promote). At the end the queue is drained and
// every acknowledged enqueue must have run, and no acknowledged done may
// be followed by another run.
//
// WORQR_REPL_STRESS=<failovers per mode> runs the long form;
// WORQR_REPL_STRESS_MODES=kill,cut picks modes, and
// WORQR_REPL_STRESS_REPLICAS=0 measures the same without Config.Replicas
// (then nothing is asserted about losses). docs/RELIABILITY.md
// ("Replication loss") has the figures.
func TestReplicationStress(t *testing.T) {
	n := stressFailovers
	if v := os.Getenv("WORQR_REPL_STRESS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("WORQR_REPL_STRESS=%q: want a number of failovers per mode", v)
		}
	}
	modes := stressModes
	if v := os.Getenv("WORQR_REPL_STRESS_MODES"); v != "" {
		modes = strings.Split(v, ",")
	}
	replicas := 1
	if v := os.Getenv("WORQR_REPL_STRESS_REPLICAS"); v != "" {
		var err error
		if replicas, err = strconv.Atoi(v); err != nil || replicas < 0 || replicas > 1 {
			t.Fatalf("WORQR_REPL_STRESS_REPLICAS=%q: want 0 or 1", v)
		}
	}
	// The modes run at once, whatever -parallel says: each has its own
	// servers, and a fault's waits leave the CPU idle.
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, mode := range modes {
		wg.Add(1)
		// Done once t.Run has returned, not when the subtest's function
		// has: t.Run's own bookkeeping must end before this test does.
		go func() {
			defer wg.Done()
			t.Run(mode, func(t *testing.T) { stressMode(t, mode, n, replicas) })
		}()
	}
}

// stressMode runs one mode's failovers and judges what was lost.
func stressMode(t *testing.T, mode string, n, replicas int) {
	s := stressRun(t, mode, n, replicas)
	t.Logf("%s, Replicas %d: %d failovers (%d tried, %d ended on the restarted node) in %s, from the fault to the promotion %s; enqueues acknowledged %d, lost %d "+
		"(not acknowledged: %d, of which never run %d); dones acknowledged %d, lost %d (ends not replicated: %d)",
		mode, replicas, s.failovers, s.tried, s.restartedPrimary, s.took.Round(time.Second), s.promotion, s.c.enqueued, s.c.enqueuesLost,
		s.c.enqueuesTold, s.c.toldLost, s.c.finished, s.c.finishesLost, s.c.endsTold)
	if replicas > 0 && s.restartedPrimary > 0 && (s.c.enqueuesLost > 0 || s.c.finishesLost > 0) {
		t.Logf("%s, Replicas 1: %d acknowledged enqueues and %d acknowledged dones lost, after %d failovers to a node restarted empty "+
			"(outside what Replicas promises: docs/RELIABILITY.md)", mode, s.c.enqueuesLost, s.c.finishesLost, s.restartedPrimary)
	} else if replicas > 0 && (s.c.enqueuesLost > 0 || s.c.finishesLost > 0) {
		t.Errorf("%s, Replicas 1: %d acknowledged enqueues and %d acknowledged dones lost over %d failovers, want 0",
			mode, s.c.enqueuesLost, s.c.finishesLost, s.failovers)
	}
	if s.c.enqueued == 0 || s.c.finished == 0 {
		t.Errorf("nothing flowed: %+v", s.c)
	}
}

// stressResult is what one mode's run saw.
type stressResult struct {
	failovers, tried int
	// restartedPrimary counts the failovers after which the node
	// restarted empty as a replica ended up the primary.
	restartedPrimary int
	took             time.Duration
	promotion        string // min, median, max from the fault to the new primary
	c                lossCounts
}

func stressRun(t *testing.T, mode string, failovers, replicas int) stressResult {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute+time.Duration(failovers)*40*time.Second)
	defer cancel()
	o := redistest.SentinelOptions{Replicas: 1, Sentinels: 3, Proxied: mode == "cut"}
	if mode == "sleep" {
		o.Args = []string{"--enable-debug-command", "yes"}
	}
	st, err := redistest.StartSentinelWith(ctx, o)
	if err != nil && strings.Contains(err.Error(), "redis-sentinel not found") {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	pool, err := redisconn.NewSentinel(redistest.SentinelMaster, st.Addrs(), &redisconn.Options{SentinelCheck: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })

	// The writes short of replicas are counted; their warnings, thousands
	// of them, would bury the test's log.
	cfg := worqr.Config{Namespace: "stress", Replicas: replicas, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if replicas > 0 {
		cfg.ReplicaTimeout = 100 * time.Millisecond
	}
	client, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := newLossLedger()
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg,
		// Faster than the producers, but not during a failover: a
		// backlog builds, then drains.
		Queues: map[string]worqr.QueueConfig{"l": {Concurrency: 16, Handler: worqr.HandlerFunc(func(_ context.Context, task *worqr.Task) error {
			l.run(task.ID)
			time.Sleep(10 * time.Millisecond)
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

	var iter atomic.Int64 // the failover under way or last done
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
						l.ack(id, err, fmt.Sprintf("failover %d, pool on %s, %s", iter.Load(), pool.Primary(), time.Now().Format("15:04:05.000")))
						break
					}
					_ = redistest.Pause(ctx, 20*time.Millisecond) // then again
				}
				_ = redistest.Pause(ctx, 5*time.Millisecond) // the producers' pace
			}
		}()
	}

	res := stressResult{}
	begin := time.Now()
	var proms []time.Duration
	for res.failovers < failovers && res.tried < 2*failovers {
		if redistest.Pause(ctx, 300*time.Millisecond+rand.N(700*time.Millisecond)) != nil {
			break
		}
		iter.Add(1)
		res.tried++
		f, err := failOnce(ctx, st, mode)
		if err != nil {
			if f.old != "" && f.next != "" && strings.Contains(err.Error(), "never came back") {
				// The node restarted as a replica of the new primary
				// is a primary itself, with the new one its replica:
				// Sentinel promoted it before it had synced (see
				// restart), and whatever the new one held and it did
				// not is gone. Not a window of WAIT's.
				res.restartedPrimary++
				for _, x := range append(append([]*redistest.Server(nil), st.Sentinels...), st.Nodes...) {
					t.Logf("%s %d: the log of %s:\n%s", mode, res.tried, x.Addr, x.OutLog(80))
				}
			}
			t.Logf("%s %d: %v", mode, res.tried, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		res.failovers++
		proms = append(proms, f.promoted)
		if testing.Verbose() {
			t.Logf("%s %d: %s -> %s, promoted after %s, back as a replica after %s", mode, res.tried, f.old, f.next,
				f.promoted.Round(time.Millisecond), f.back.Round(time.Millisecond))
		}
	}
	_ = redistest.Pause(ctx, 300*time.Millisecond) // enqueues after the last failover too
	stop.Store(true)
	wg.Wait()
	res.took = time.Since(begin)
	if len(proms) > 0 {
		sort.Slice(proms, func(i, j int) bool { return proms[i] < proms[j] })
		res.promotion = fmt.Sprintf("%s / %s / %s", proms[0].Round(time.Millisecond),
			proms[len(proms)/2].Round(time.Millisecond), proms[len(proms)-1].Round(time.Millisecond))
	}

	in, err := worqr.NewInspector(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	drain(ctx, t, in, l)
	res.c = l.counts()
	lost := l.lostIDs()
	for _, id := range lost {
		info, err := in.Task(ctx, "l", id)
		l.mu.Lock()
		seen := l.seen[id]
		l.mu.Unlock()
		t.Logf("acknowledged and never run: %s (acknowledged at %s): %+v %v; events %q", id, l.where(id), info, err, seen)
	}
	if len(lost) > 0 {
		for _, n := range st.Nodes {
			info, err := redistest.Info(ctx, n.Addr, "replication")
			t.Logf("%s (known as %s): %q %v", n.Addr, st.AddrOf(n), info, err)
		}
	}
	return res
}

// ack records an enqueue answered with err (nil or ErrNotReplicated),
// where it was.
func (l *lossLedger) ack(id string, err error, where string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil {
		l.acked[id] = true
	} else {
		l.told[id] = true
	}
	if l.at != nil {
		l.at[id] = where
	}
}

func (l *lossLedger) where(id string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.at[id]
}

// aFailover is one failover failOnce made.
type aFailover struct {
	old, next      string
	promoted, back time.Duration // from the fault to the new primary; to the old one a replica again
}

// failOnce makes the primary go the way mode says, waits for the sentinels
// to promote the replica, brings the old primary back as a replica of the
// new one and waits until the sentinels could promote it in turn.
func failOnce(ctx context.Context, st *redistest.Sentinel, mode string) (aFailover, error) {
	var f aFailover
	old, err := st.Primary(ctx)
	if err != nil {
		return f, err
	}
	f.old = old
	n := st.Node(old)
	if n == nil {
		return f, fmt.Errorf("no node at %s", old)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	at := time.Now()
	switch mode {
	case "kill":
		n.Kill()
		f.next, err = st.WaitNewPrimary(wctx, old)
		f.promoted = time.Since(at)
		if err == nil {
			err = restart(n, f.next)
		}
	case "lagkill":
		var rep *redistest.Server
		for _, m := range st.Nodes {
			if m != n {
				rep = m
			}
		}
		if err := rep.Signal(syscall.SIGSTOP); err != nil {
			return f, err
		}
		if err := cutReplicas(ctx, n.Addr); err != nil {
			_ = rep.Signal(syscall.SIGCONT)
			return f, err
		}
		_ = redistest.Pause(ctx, 300*time.Millisecond) // acknowledged writes reach no replica
		at = time.Now()
		n.Kill()
		if err := rep.Signal(syscall.SIGCONT); err != nil {
			return f, err
		}
		f.next, err = st.WaitNewPrimary(wctx, old)
		f.promoted = time.Since(at)
		if err == nil {
			err = restart(n, f.next)
		}
	case "stop":
		if err := n.Signal(syscall.SIGSTOP); err != nil {
			return f, err
		}
		f.next, err = st.WaitNewPrimary(wctx, old)
		f.promoted = time.Since(at)
		_ = redistest.Pause(ctx, rand.N(500*time.Millisecond)) // comes back before or after the clients moved
		err = errors.Join(err, n.Signal(syscall.SIGCONT))
	case "sleep":
		c, derr := redis.DialContext(ctx, "tcp", n.Addr)
		if derr != nil {
			return f, derr
		}
		defer c.Close()
		slept := make(chan error, 1)
		go func() {
			_, err := c.Do("DEBUG", "SLEEP", 5)
			slept <- err
		}()
		f.next, err = st.WaitNewPrimary(wctx, old)
		f.promoted = time.Since(at)
		err = errors.Join(err, <-slept)
	case "cut":
		px := st.ProxyOf(n)
		px.Hold()
		f.next, err = st.WaitNewPrimary(wctx, old)
		f.promoted = time.Since(at)
		_ = redistest.Pause(ctx, rand.N(500*time.Millisecond))
		px.Release()
	default:
		return f, fmt.Errorf("unknown mode %q (want one of %v)", mode, stressModes)
	}
	if err != nil {
		return f, err
	}
	if mode != "kill" {
		// Back, the old primary still says it is one (a primary without
		// replicas) until the sentinels demote it, 8 to 18 s later
		// (they wait 8 s, and read a replica's INFO every 10 s): after
		// a while of that, the test demotes it itself, as they would.
		_ = redistest.Pause(ctx, time.Second+rand.N(2*time.Second))
		if err := replicaOf(ctx, n.Addr, f.next); err != nil {
			return f, fmt.Errorf("demote %s: %w", old, err)
		}
	}
	bctx, bcancel := context.WithTimeout(ctx, 60*time.Second)
	defer bcancel()
	if err := st.WaitReplica(bctx, n, f.next); err != nil {
		return f, fmt.Errorf("%s never came back as a replica of %s: %w", old, f.next, err)
	}
	f.back = time.Since(at)
	if mode == "kill" || mode == "lagkill" {
		// Synced: it may be promoted again.
		if err := configSet(ctx, n.Addr, "replica-priority", "100"); err != nil {
			return f, err
		}
	}
	return f, nil
}

// restart starts the killed node n again as a replica of primary, with
// replica-priority 0 until it has synced (failOnce raises it): a node
// that restarts holds nothing, or an old copy (the RDB of its last full
// sync), and waits for its first sync (5 s of repl-diskless-sync-delay);
// a failover meanwhile (a sentinel that sees the primary just promoted as
// down for a moment) would promote it, and the replica that had every
// acknowledged write would resync from it and lose them. That is not a
// window of WAIT (docs/RELIABILITY.md, "Replication loss").
func restart(n *redistest.Server, primary string) error {
	return n.RestartReplicaOf(primary, "--replica-priority", "0")
}

// configSet sets a configuration parameter of the node at addr.
func configSet(ctx context.Context, addr, name, value string) error {
	c, err := redis.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = redis.DoContext(c, ctx, "CONFIG", "SET", name, value)
	return err
}

// replicaOf makes the node at addr a replica of primary.
func replicaOf(ctx context.Context, addr, primary string) error {
	host, port, _ := strings.Cut(primary, ":")
	c, err := redis.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = redis.DoContext(c, ctx, "REPLICAOF", host, port)
	return err
}
