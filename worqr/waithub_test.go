package worqr_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/internal/seam"
	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// waitResult is what one of several background Waits returned.
type waitResult struct {
	id   string
	info *worqr.TaskInfo
	err  error
}

// startWaits runs a Wait for each of ids (queue q) on c in the background,
// each under a manual clock that never moves (no recheck: only the
// subscription and the events can wake it), and returns once each has read
// its task a first time (the HLENs of Store.Tasks through pool), none
// having returned.
func startWaits(ctx context.Context, t *testing.T, c *worqr.Client, pool *cmdPool, q string, ids []string) <-chan waitResult {
	t.Helper()
	frozen := seam.WithHeartbeatClock(ctx, seam.NewManualClock(time.Now()))
	out := make(chan waitResult, len(ids))
	reads := pool.count("HLEN")
	for _, id := range ids {
		go func() {
			info, err := c.Wait(frozen, q, id)
			out <- waitResult{id, info, err}
		}()
	}
	for pool.count("HLEN") < reads+len(ids) {
		select {
		case r := <-out:
			t.Fatalf("Wait(%s) returned (%+v, %v) before its task ended", r.id, r.info, r.err)
		case <-ctx.Done():
			t.Fatalf("only %d of %d Waits read their task", pool.count("HLEN")-reads, len(ids))
		case <-time.After(time.Millisecond):
		}
	}
	return out
}

// numSub is PUBSUB NUMSUB of namespace ns's events channel on pool's server.
func numSub(t *testing.T, pool *redis.Pool, ns string) int {
	t.Helper()
	conn := pool.Get()
	defer conn.Close()
	v, err := redis.Values(conn.Do("PUBSUB", "NUMSUB", ns+":{reg}:events"))
	if err != nil || len(v) != 2 {
		t.Fatalf("PUBSUB NUMSUB: %v, %v", v, err)
	}
	n, _ := redis.Int(v[1], nil)
	return n
}

// pubsubClients is CLIENT LIST TYPE pubsub on pool's server: one line
// per connection subscribed to something.
func pubsubClients(t *testing.T, pool *redis.Pool) []string {
	t.Helper()
	conn := pool.Get()
	defer conn.Close()
	s, err := redis.String(conn.Do("CLIENT", "LIST", "TYPE", "pubsub"))
	if err != nil {
		t.Fatal(err)
	}
	if s = strings.TrimSpace(s); s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// collect receives n results from out, or fails the test when ctx ends.
func collect(ctx context.Context, t *testing.T, out <-chan waitResult, n int) map[string]waitResult {
	t.Helper()
	got := map[string]waitResult{}
	for len(got) < n {
		select {
		case r := <-out:
			got[r.id] = r
		case <-ctx.Done():
			t.Fatalf("%d of %d Waits returned", len(got), n)
		}
	}
	return got
}

// taskReads is how many HLENs pool's server ran so far (INFO
// commandstats): a Wait's read of its task (Store.Tasks) sends one, and
// no script this test runs while its Waits start sends any (a hand-off's,
// at an enqueue, comes before).
func taskReads(t *testing.T, pool *redis.Pool) int {
	t.Helper()
	conn := pool.Get()
	defer conn.Close()
	info, err := redis.String(conn.Do("INFO", "commandstats"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_hlen:calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

// Many Waits on a Client whose pool (NewPool's) is capped far below twice
// their number (here 50 Waits, MaxActive 4) share one subscription and a
// bounded number of connections for their reads: each returns its task's
// end (done with its result, dead, cancelled) as its event comes, with no
// recheck to help (their clocks never move), and the Client's other calls
// (the cancels, its events' publication) still find a connection. Before,
// each Wait held a connection of its own for its subscription: the pool ran
// dry, and the Waits hung until their context ended.
func TestManyWaitsOnASmallPool(t *testing.T) {
	ctx := context.Background()
	own, err := redistest.Start("--save", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(own.Stop) // after the worker's Stop (cleanups run last first)
	small, err := redisconn.NewPool(own.URL, &redisconn.Options{MaxActive: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { small.Close() })
	big := own.Pool()
	t.Cleanup(func() { big.Close() })
	ns := redistest.Namespace()
	cfg := worqr.Config{Namespace: ns, EventInterval: 20 * time.Millisecond, Logger: quietLogger()}
	release := make(chan struct{})
	wc := worqr.WorkerConfig{Config: cfg, Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 64, Retention: time.Minute,
		MaxAttempts: 1, Handler: worqr.HandlerFunc(func(ctx context.Context, task *worqr.Task) error {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			if string(task.Payload) == "fail" {
				return worqr.SkipRetry(errors.New("no luck"))
			}
			task.SetResult(task.Payload)
			return nil
		})}}}
	startWorker(t, ctx, big, &wc)
	c, err := worqr.NewClient(small, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	want := map[string]worqr.TaskState{}
	var all, idle []string
	queueOf := map[string]string{}
	for i := 0; i < n; i++ {
		q, payload, state, opts := "q", fmt.Sprintf("r%d", i), worqr.StateDone, (*worqr.EnqueueOpts)(nil)
		switch i % 3 {
		case 0:
			payload, state = "fail", worqr.StateDead
		case 2: // no worker serves "idle": cancelled below
			q, state, opts = "idle", worqr.StateCancelled, &worqr.EnqueueOpts{Retention: time.Minute}
		}
		id, err := c.Enqueue(ctx, q, []byte(payload), opts)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, id)
		queueOf[id], want[id] = q, state
		if q == "idle" {
			idle = append(idle, id)
		}
	}
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	frozen := seam.WithHeartbeatClock(waitCtx, seam.NewManualClock(time.Now()))
	reads := taskReads(t, big)
	out := make(chan waitResult, n)
	for _, id := range all {
		go func() {
			info, err := c.Wait(frozen, queueOf[id], id)
			out <- waitResult{id, info, err}
		}()
	}
	wait(t, 60*time.Second, "every Wait reads its task", func() bool { return taskReads(t, big) >= reads+n })
	select {
	case r := <-out:
		t.Fatalf("Wait(%s) returned (%+v, %v) before its task ended", r.id, r.info, r.err)
	default:
	}
	if got := numSub(t, big, ns); got != 1 {
		t.Fatalf("PUBSUB NUMSUB of the events channel with %d Waits running: %d, want 1 (one shared subscription)", n, got)
	}
	close(release)
	for _, id := range idle {
		if st, err := c.Cancel(ctx, "idle", id); err != nil || st != worqr.CancelRemoved {
			t.Fatalf("Cancel(%s) while %d Waits run on the small pool = %v, %v", id, n, st, err)
		}
	}
	for id, r := range collect(waitCtx, t, out, n) {
		if r.err != nil || r.info.ID != id || r.info.State != want[id] {
			t.Fatalf("Wait(%s) = %+v, %v; want %s", id, r.info, r.err, want[id])
		}
		switch want[id] {
		case worqr.StateDone:
			if !strings.HasPrefix(string(r.info.Result), "r") {
				t.Fatalf("Wait(%s) done with result %q", id, r.info.Result)
			}
		case worqr.StateDead:
			if !strings.Contains(r.info.LastError, "no luck") {
				t.Fatalf("Wait(%s) dead with error %q", id, r.info.LastError)
			}
		}
	}
}

// Waits across a dropped subscription: the connection is killed (CLIENT
// KILL TYPE pubsub) and the Client cannot subscribe again for a while (its
// pool refuses); the tasks end meanwhile, their events published to no one.
// Once the pool answers again the Client subscribes again, once for all its
// Waits, and every Wait reads its task again: each returns its task
// cancelled, with no recheck to help (their clocks never move).
func TestWaitAcrossADroppedSubscription(t *testing.T) {
	ctx := context.Background()
	own, err := redistest.Start("--save", "")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Stop()
	direct := own.Pool()
	defer direct.Close()
	counted := &cmdPool{pool: own.Pool(), n: map[string]int{}}
	defer counted.pool.Close()
	ns := redistest.Namespace()
	cfg := worqr.Config{Namespace: ns, EventInterval: 20 * time.Millisecond, Logger: quietLogger()}
	c, err := worqr.NewClient(counted, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	other, err := worqr.NewClient(direct, &cfg) // publishes its cancels' events, heard by no one during the gap
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 4; i++ {
		id, err := other.Enqueue(ctx, "idle", []byte("x"), &worqr.EnqueueOpts{Retention: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out := startWaits(waitCtx, t, c, counted, "idle", ids)
	if got := numSub(t, direct, ns); got != 1 {
		t.Fatalf("PUBSUB NUMSUB with %d Waits running: %d, want 1", len(ids), got)
	}

	counted.broken.Store(true)
	conn := direct.Get()
	killed, err := redis.Int(conn.Do("CLIENT", "KILL", "TYPE", "pubsub"))
	conn.Close()
	if err != nil || killed != 1 {
		t.Fatalf("CLIENT KILL TYPE pubsub = %d, %v; want 1 (the shared subscription)", killed, err)
	}
	// The gap is open once the Client tried to subscribe again and was
	// refused.
	wait(t, 60*time.Second, "the Client tries to subscribe again", func() bool { return counted.refuse.Load() > 0 })
	for _, id := range ids[:3] {
		if st, err := other.Cancel(ctx, "idle", id); err != nil || st != worqr.CancelRemoved {
			t.Fatalf("Cancel(%s) = %v, %v", id, st, err)
		}
	}
	other.Flush() // the cancels' events go out now, while nobody listens
	if got := numSub(t, direct, ns); got != 0 {
		t.Fatalf("PUBSUB NUMSUB during the gap: %d, want 0", got)
	}
	counted.broken.Store(false)

	for id, r := range collect(waitCtx, t, out, 3) {
		if r.err != nil || r.info.State != worqr.StateCancelled {
			t.Fatalf("Wait(%s) across the drop = %+v, %v; want it cancelled", id, r.info, r.err)
		}
		if id == ids[3] {
			t.Fatalf("Wait(%s) returned; its task still waits", id)
		}
	}
	if got := numSub(t, direct, ns); got != 1 {
		t.Fatalf("PUBSUB NUMSUB after the resubscribe, one Wait left: %d, want 1", got)
	}
	// The one left is woken by its event, on the new subscription.
	if st, err := other.Cancel(ctx, "idle", ids[3]); err != nil || st != worqr.CancelRemoved {
		t.Fatalf("Cancel = %v, %v", st, err)
	}
	if r := collect(waitCtx, t, out, 1)[ids[3]]; r.err != nil || r.info.State != worqr.StateCancelled {
		t.Fatalf("Wait(%s) = %+v, %v; want it cancelled", ids[3], r.info, r.err)
	}
}

// The shared subscription lives while a Wait runs: one subscriber for ten
// Waits, still one when nine have returned, none (PUBSUB NUMSUB, CLIENT
// LIST) once the last has returned, and one again for the next Wait.
func TestWaitSubscriptionLeavesWithTheLastWaiter(t *testing.T) {
	ctx := context.Background()
	own, err := redistest.Start("--save", "")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Stop()
	direct := own.Pool()
	defer direct.Close()
	counted := &cmdPool{pool: own.Pool(), n: map[string]int{}}
	defer counted.pool.Close()
	ns := redistest.Namespace()
	cfg := worqr.Config{Namespace: ns, EventInterval: 20 * time.Millisecond, Logger: quietLogger()}
	c, err := worqr.NewClient(counted, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	enqueue := func(n int) []string {
		var ids []string
		for i := 0; i < n; i++ {
			id, err := c.Enqueue(ctx, "idle", []byte("x"), &worqr.EnqueueOpts{Retention: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		return ids
	}
	cancelAll := func(ids []string) {
		for _, id := range ids {
			if st, err := c.Cancel(ctx, "idle", id); err != nil || st != worqr.CancelRemoved {
				t.Fatalf("Cancel(%s) = %v, %v", id, st, err)
			}
		}
	}
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if got := pubsubClients(t, direct); len(got) != 0 {
		t.Fatalf("subscribed before any Wait: %q", got)
	}

	ids := enqueue(10)
	out := startWaits(waitCtx, t, c, counted, "idle", ids)
	if got := numSub(t, direct, ns); got != 1 {
		t.Fatalf("PUBSUB NUMSUB with 10 Waits running: %d, want 1", got)
	}
	if got := pubsubClients(t, direct); len(got) != 1 {
		t.Fatalf("CLIENT LIST TYPE pubsub with 10 Waits running: %q, want one connection", got)
	}
	cancelAll(ids[:9])
	collect(waitCtx, t, out, 9)
	if got := numSub(t, direct, ns); got != 1 {
		t.Fatalf("PUBSUB NUMSUB with 1 Wait left: %d, want 1", got)
	}
	cancelAll(ids[9:])
	collect(waitCtx, t, out, 1)
	wait(t, 60*time.Second, "the subscription is released after the last Wait", func() bool {
		return numSub(t, direct, ns) == 0 && len(pubsubClients(t, direct)) == 0
	})

	// The next Wait subscribes again.
	ids = enqueue(1)
	out = startWaits(waitCtx, t, c, counted, "idle", ids)
	if got := numSub(t, direct, ns); got != 1 {
		t.Fatalf("PUBSUB NUMSUB for a new Wait: %d, want 1", got)
	}
	cancelAll(ids)
	if r := collect(waitCtx, t, out, 1)[ids[0]]; r.err != nil || r.info.State != worqr.StateCancelled {
		t.Fatalf("Wait = %+v, %v", r.info, r.err)
	}
	wait(t, 60*time.Second, "the subscription is released again", func() bool { return numSub(t, direct, ns) == 0 })
}

// A Wait reads its task only once the shared subscription is confirmed, so
// an end that comes before (its event published to no one) is read, not
// missed: here the SUBSCRIBE is held while the task is cancelled and the
// cancel's event published; Wait has read nothing meanwhile, and returns
// the task cancelled once subscribed, with no recheck to help.
func TestWaitReadsOnceSubscribed(t *testing.T) {
	ctx := context.Background()
	counted := newCmdPool()
	defer counted.pool.Close()
	held, gate := make(chan struct{}), make(chan struct{})
	var once sync.Once
	counted.onSend = func(cmd string) {
		if strings.EqualFold(cmd, "SUBSCRIBE") {
			once.Do(func() { close(held) })
			<-gate
		}
	}
	direct := srv.Pool()
	defer direct.Close()
	ns := redistest.Namespace()
	cfg := worqr.Config{Namespace: ns, EventInterval: 20 * time.Millisecond, Logger: quietLogger()}
	c, err := worqr.NewClient(counted, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	other, err := worqr.NewClient(direct, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	id, err := other.Enqueue(ctx, "idle", []byte("x"), &worqr.EnqueueOpts{Retention: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out := make(chan waitResult, 1)
	go func() {
		info, err := c.Wait(seam.WithHeartbeatClock(waitCtx, seam.NewManualClock(time.Now())), "idle", id)
		out <- waitResult{id, info, err}
	}()
	select {
	case <-held:
	case <-waitCtx.Done():
		t.Fatal("Wait never subscribed")
	}
	if st, err := other.Cancel(ctx, "idle", id); err != nil || st != worqr.CancelRemoved {
		t.Fatalf("Cancel = %v, %v", st, err)
	}
	other.Flush()
	if n := counted.count("HLEN"); n != 0 {
		t.Fatalf("Wait read its task %d times before its subscription was confirmed", n)
	}
	close(gate)
	if r := collect(waitCtx, t, out, 1)[id]; r.err != nil || r.info.State != worqr.StateCancelled {
		t.Fatalf("Wait = %+v, %v; want the task cancelled", r.info, r.err)
	}
}

// Waits across a restart of the server (it keeps its data: appendonly):
// the subscription fails, the Client cannot subscribe again for a while (its
// pool refuses), the tasks end meanwhile and their events go to no one.
// Once subscribed again, every Wait reads its task again, on a pool whose
// idle connections died with the old server: a read that fails on one is
// tried again shortly, and each Wait returns its task cancelled, with no
// recheck to help (their clocks never move).
func TestWaitAcrossARestart(t *testing.T) {
	ctx := context.Background()
	own, err := redistest.Start("--appendonly", "yes", "--appendfsync", "always", "--save", "")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Stop()
	counted := &cmdPool{pool: own.Pool(), n: map[string]int{}}
	defer counted.pool.Close()
	ns := redistest.Namespace()
	cfg := worqr.Config{Namespace: ns, EventInterval: 20 * time.Millisecond, Logger: quietLogger()}
	c, err := worqr.NewClient(counted, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 3; i++ {
		id, err := c.Enqueue(ctx, "idle", []byte("x"), &worqr.EnqueueOpts{Retention: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out := startWaits(waitCtx, t, c, counted, "idle", ids)

	counted.broken.Store(true)
	if err := own.Restart(); err != nil {
		t.Fatal(err)
	}
	wait(t, 60*time.Second, "the Client tries to subscribe again", func() bool { return counted.refuse.Load() > 0 })
	fresh := own.Pool()
	defer fresh.Close()
	other, err := worqr.NewClient(fresh, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if st, err := other.Cancel(ctx, "idle", id); err != nil || st != worqr.CancelRemoved {
			t.Fatalf("Cancel(%s) after the restart = %v, %v", id, st, err)
		}
	}
	other.Flush() // published while nobody listens
	counted.broken.Store(false)
	for id, r := range collect(waitCtx, t, out, len(ids)) {
		if r.err != nil || r.info.State != worqr.StateCancelled {
			t.Fatalf("Wait(%s) across the restart = %+v, %v; want it cancelled", id, r.info, r.err)
		}
	}
}
