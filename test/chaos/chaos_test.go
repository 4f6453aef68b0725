package chaos_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
)

// aofAlways makes every acknowledged write durable before the reply.
var aofAlways = []string{"--appendonly", "yes", "--appendfsync", "always"}

// TestChaosKill: a random worker is SIGKILLed every 1-3 s and replaced, for
// the whole run. Every taking it held is recovered by a peer.
func TestChaosKill(t *testing.T) {
	needMode(t, "short")
	t.Parallel()
	c := newCluster(t, "kill", clusterOpts{workers: 3, concurrency: 10, workTime: 200 * time.Millisecond, timings: shortTimings, flow: true})
	c.startWorkers(3)
	run := 15 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	started := time.Now()
	c.enqueue(ctx, c.opts.queue, 60*15, 60)
	c.startRuns(ctx, 3)
	var f faults
	f.run(ctx, c.killer(time.Second, 3*time.Second))
	f.run(ctx, c.keeper(3))
	<-ctx.Done()
	f.wait()
	r := c.finish(started, time.Minute)
	publish(t, r.String())
	r.check(c)
	if r.faults["kill"] == 0 || len(r.recovery["kill"]) == 0 {
		t.Errorf("kill: no kill hit a worker holding tasks (kills %d, recovery samples %d)", r.faults["kill"], len(r.recovery["kill"]))
	}
	if r.reRuns == 0 {
		t.Errorf("kill: no task ran again after a kill")
	}
}

// TestChaosZombie: a random worker is SIGSTOPped past its keepalive TTL, then
// SIGCONTed, again and again. Its takings are recovered while it sleeps, and
// when it wakes its finishes change nothing (lost), so nothing is accepted
// twice.
func TestChaosZombie(t *testing.T) {
	needMode(t, "short")
	t.Parallel()
	c := newCluster(t, "zombie", clusterOpts{workers: 3, concurrency: 10, workTime: 200 * time.Millisecond, timings: shortTimings, flow: true})
	c.startWorkers(3)
	run := 15 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	started := time.Now()
	c.enqueue(ctx, c.opts.queue, 60*15, 60)
	c.startRuns(ctx, 3)
	var f faults
	f.run(ctx, c.freezer(500*time.Millisecond, 1500*time.Millisecond))
	f.run(ctx, c.keeper(3))
	<-ctx.Done()
	f.wait()
	r := c.finish(started, time.Minute)
	publish(t, r.String())
	r.check(c)
	if r.faults["freeze"] == 0 || len(r.recovery["freeze"]) == 0 {
		t.Errorf("zombie: no freeze hit a worker holding tasks (freezes %d, recovery samples %d)", r.faults["freeze"], len(r.recovery["freeze"]))
	}
}

// TestChaosRedisRestart: redis-server (appendonly yes, appendfsync always) is
// SIGKILLed and restarted from its AOF every few seconds. Every enqueue that
// returned success survives and ends exactly once.
func TestChaosRedisRestart(t *testing.T) {
	needMode(t, "short")
	t.Parallel()
	c := newCluster(t, "redis-restart", clusterOpts{redisArgs: aofAlways, workers: 3, concurrency: 10,
		workTime: 100 * time.Millisecond, timings: shortTimings, flow: true})
	c.startWorkers(3)
	run := 15 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	started := time.Now()
	c.enqueue(ctx, c.opts.queue, 80*15, 80)
	c.startRuns(ctx, 3)
	var f faults
	f.run(ctx, func(ctx context.Context) {
		for redistest.Pause(ctx, between(2500*time.Millisecond, 4*time.Second)) == nil {
			if err := c.restartRedis(); err != nil {
				t.Errorf("restarting redis-server: %v", err)
				return
			}
		}
	})
	f.run(ctx, c.keeper(3))
	<-ctx.Done()
	f.wait()
	r := c.finish(started, time.Minute)
	publish(t, r.String())
	r.check(c)
	if r.faults["redis_restart"] == 0 {
		t.Error("redis-restart: Redis was never restarted")
	}
}

// TestChaosNetwork: workers reach Redis through a proxy that delays every
// chunk (up to 20ms), loses the reply to one request in 50 (the request ran;
// the connection is reset before its reply gets back), cuts every
// connection every 1-3 s and now and then refuses connections for up to
// 600ms. The keepalive TTL (2s) outlasts every
// blip, as in production: no worker needs to lose its id, so nothing but
// the protocol itself recovers what a cut interrupted.
func TestChaosNetwork(t *testing.T) {
	needMode(t, "short")
	t.Parallel()
	tm := timings{heartbeat: 250 * time.Millisecond, ttl: 2 * time.Second, reaper: 250 * time.Millisecond, poll: time.Second}
	c := newCluster(t, "network", clusterOpts{viaProxy: true, workers: 3, concurrency: 10,
		workTime: 100 * time.Millisecond, timings: tm, flow: true})
	c.startWorkers(3)
	run := 15 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	started := time.Now()
	c.enqueue(ctx, c.opts.queue, 80*15, 80)
	c.startRuns(ctx, 3)
	c.proxy.DropReplies(0.02)
	var f faults
	f.run(ctx, c.network(time.Second, 3*time.Second, 20*time.Millisecond, 600*time.Millisecond))
	f.run(ctx, c.keeper(3))
	<-ctx.Done()
	f.wait()
	c.proxy.DropReplies(0) // the faults end before the drain
	r := c.finish(started, 30*time.Second)
	publish(t, r.String())
	r.check(c)
	if len(r.lost) > 0 {
		t.Errorf("network: a lost task that was active in the wq set of a live worker and never taken (no took line for it) was stranded by a take whose reply was lost: " +
			"the worker must release the takings it does not run before taking again (worqr/worker.go fetchLoop, release; fixed in 405091b)")
	}
}

// outageFigures is what one Redis outage did to the workers.
type outageFigures struct {
	kind       string
	length     time.Duration
	maxCPU     float64 // highest share of one core a worker used during it
	dead       []string
	resume     time.Duration // outage end to the first task taken
	resumed    bool
	probes     []time.Duration // enqueue to taken, poll disabled
	probeFails int
	cutProbe   time.Duration // the same after one more connection cut
	cutProbeOK bool
}

func (o outageFigures) String() string {
	s := fmt.Sprintf("outage (%s, %s): max worker CPU %.1f%% of a core; workers died: %d; ",
		o.kind, o.length, 100*o.maxCPU, len(o.dead))
	if o.resumed {
		s += fmt.Sprintf("first task taken %s after it ended", o.resume.Round(time.Millisecond))
	} else {
		s += "NO task taken after it ended"
	}
	s += fmt.Sprintf("; wake-up probes (poll off): %s", histogram(o.probes))
	if o.probeFails > 0 {
		s += fmt.Sprintf(", %d NOT TAKEN", o.probeFails)
	}
	switch {
	case o.cutProbeOK:
		s += fmt.Sprintf("; probe sent 300ms after a later cut of the pub/sub connections taken in %s", o.cutProbe.Round(time.Millisecond))
	case o.cutProbe > 0:
		s += fmt.Sprintf("; probe sent 300ms after a later cut of the pub/sub connections NOT TAKEN within %s", o.cutProbe)
	}
	return s
}

// outage makes Redis unreachable with apply (which blocks for the outage),
// measuring each worker's CPU during it, then how the workers come back: the
// first take after it, and wake-up probes sent once they had time to
// resubscribe (with polling off, only a pub/sub wake-up can make a worker
// take a probe).
func (c *cluster) outage(kind string, length time.Duration, apply func()) outageFigures {
	o := outageFigures{kind: kind, length: length}
	procs := c.live(true)
	before := map[int]int64{}
	for _, p := range procs {
		before[p.n], _ = cpuTicks(p.pid)
	}
	start := time.Now()
	apply()
	end := time.Now()
	secs := end.Sub(start).Seconds()
	for _, p := range procs {
		if !p.alive() {
			o.dead = append(o.dead, fmt.Sprintf("worker %d died during the outage: %v: %s", p.n, p.exitErr, c.logTail(p, 5)))
			continue
		}
		after, err := cpuTicks(p.pid)
		if err != nil {
			continue
		}
		o.maxCPU = max(o.maxCPU, float64(after-before[p.n])/clockTicks/secs)
	}
	rctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	c.led.await(rctx, func() bool {
		at, ok := c.led.firstTookAfter(end)
		o.resume, o.resumed = at.Sub(end), ok
		return ok
	})
	cancel()
	// Backoffs are capped at 5 s: by then every worker is back.
	_ = redistest.Pause(c.ctx, time.Until(end.Add(7*time.Second)))
	c.enqPaused.Store(true)
	defer c.enqPaused.Store(false)
	c.waitIdle(20 * time.Second)
	for i := 0; i < 3; i++ {
		if d, ok := c.probe(3 * time.Second); ok {
			o.probes = append(o.probes, d)
		} else {
			o.probeFails++
		}
		_ = redistest.Pause(c.ctx, 300*time.Millisecond)
	}
	// One more cut, of the pub/sub connections only (so that no keepalive
	// is lost and no re-registration pokes the fetch loops): the
	// subscriptions must come back as fast as after a first failure.
	if c.proxy != nil {
		c.proxy.CutSubscribers()
		c.fault("cut_subscribers")
		_ = redistest.Pause(c.ctx, 300*time.Millisecond)
		o.cutProbe, o.cutProbeOK = c.probe(10 * time.Second)
	}
	return o
}

// probe enqueues one task and returns how long until a worker took it, or
// false if none did within d.
func (c *cluster) probe(d time.Duration) (time.Duration, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	id, err := c.enqueueOne(ctx, c.opts.queue)
	cancel()
	if err != nil {
		return 0, false
	}
	sent := time.Now()
	wctx, cancel := context.WithTimeout(c.ctx, d)
	defer cancel()
	var at time.Time
	if c.led.await(wctx, func() bool { var ok bool; at, ok = c.led.tookAt(id); return ok }) {
		return at.Sub(sent), true
	}
	return d, false
}

// waitIdle waits, for up to d, until the queue has nothing waiting or
// scheduled (Redis's lists: no worker line says so), then half a second
// more for the tasks just taken.
func (c *cluster) waitIdle(d time.Duration) {
	wctx, cancel := context.WithTimeout(c.ctx, d)
	defer cancel()
	base := c.ns + ":{" + c.opts.queue + "}:"
	idle := func() bool {
		ctx, cancel := context.WithTimeout(wctx, 2*time.Second)
		defer cancel()
		conn, err := c.pool.GetContext(ctx)
		if err != nil {
			return false
		}
		defer conn.Close()
		n, err1 := redis.Int(redis.DoContext(conn, ctx, "LLEN", base+"q:"+c.opts.queue))
		m, err2 := redis.Int(redis.DoContext(conn, ctx, "ZCARD", base+"s:"+c.opts.queue))
		return err1 == nil && err2 == nil && n == 0 && m == 0
	}
	if redistest.Poll(wctx, idle) == nil {
		_ = redistest.Pause(c.ctx, 500*time.Millisecond)
	}
}

// TestChaosRedisOutage: Redis is unreachable for 10 s: the proxy the workers
// go through resets every connection and refuses new ones. Workers must stay
// alive, back off instead of spinning (CPU well under 20% of a core), and
// resume on their own, pub/sub included: polling is off (1h), so only
// wake-ups can make them take the probe tasks sent afterwards.
func TestChaosRedisOutage(t *testing.T) {
	testOutage(t, "redis-unreachable", "proxy refuses and resets", func(c *cluster) { c.refuseRedis(10 * time.Second) })
}

// TestChaosRedisFrozen: as TestChaosRedisOutage, but redis-server itself is
// SIGSTOPped for 10 s: connections are accepted by the kernel and hang.
func TestChaosRedisFrozen(t *testing.T) {
	testOutage(t, "redis-frozen", "redis-server SIGSTOPped", func(c *cluster) {
		if err := c.freezeRedis(10 * time.Second); err != nil {
			c.t.Errorf("freezing redis-server: %v", err)
		}
	})
}

func testOutage(t *testing.T, name, kind string, apply func(c *cluster)) {
	needMode(t, "short")
	t.Parallel()
	tm := shortTimings
	tm.poll = time.Hour
	c := newCluster(t, name, clusterOpts{viaProxy: true, workers: 3, concurrency: 10,
		workTime: 100 * time.Millisecond, timings: tm, flow: true})
	c.startWorkers(3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := time.Now()
	c.enqueue(ctx, c.opts.queue, 1<<30, 40)
	c.startRuns(ctx, 2)
	_ = redistest.Pause(c.ctx, 2*time.Second) // work under way when the outage begins
	o := c.outage(kind, 10*time.Second, func() { apply(c) })
	_ = redistest.Pause(c.ctx, time.Second)
	cancel()
	r := c.finish(started, time.Minute)
	r.extra = append(r.extra, o.String())
	publish(t, r.String())
	r.check(c)
	for _, d := range o.dead {
		t.Errorf("%s: %s", o.kind, d)
	}
	if o.maxCPU > 0.20 {
		t.Errorf("%s: a worker used %.0f%% of a core while Redis was unreachable (want < 20%%: capped backoff, no spinning)", o.kind, 100*o.maxCPU)
	}
	if !o.resumed {
		t.Errorf("%s: no task was taken within 30s after Redis came back", o.kind)
	}
	if o.probeFails > 0 {
		t.Errorf("%s: %d of 3 probe tasks were not taken within 3s with polling off: pub/sub wake-ups did not resume", o.kind, o.probeFails)
	}
	if o.cutProbe > 0 && (!o.cutProbeOK || o.cutProbe > 2*time.Second) {
		t.Errorf("%s: after the outage, one cut of the pub/sub connections left the workers deaf to wake-ups: a probe sent 300ms after it was taken after %s (want < 2s; polling is off). "+
			"worqr/worker.go subscribeLoop must start its reconnect backoff over after a confirmed subscription (991723a), or after an outage every later blip costs the full 5s cap",
			o.kind, o.cutProbe.Round(time.Millisecond))
	}
}

// TestChaosMixed runs every fault at once: workers SIGKILLed every 1-3 s,
// zombies, connections cut and delayed, Redis restarted, unreachable and
// frozen, while tasks (that fail their first attempt and retry after 100ms)
// flow. Short mode: 25 s, short timings. Long mode (make chaos): the
// configured duration and task count (10 min, 100,000 tasks), production
// timings.
func TestChaosMixed(t *testing.T) {
	needMode(t, "short", "long")
	t.Parallel()
	long := cfg.mode == "long"
	run, tasks, tm := 25*time.Second, 1200, shortTimings
	redisEvery, outage := [2]time.Duration{6 * time.Second, 9 * time.Second}, 3*time.Second
	freezeEvery, cutEvery := [2]time.Duration{4 * time.Second, 8 * time.Second}, [2]time.Duration{2 * time.Second, 5 * time.Second}
	workers, drain, runRate := 4, time.Minute, 3.0
	if long {
		run, tasks, tm = cfg.duration, cfg.tasks, defaultTimings
		redisEvery, outage = [2]time.Duration{40 * time.Second, 80 * time.Second}, 10*time.Second
		freezeEvery, cutEvery = [2]time.Duration{10 * time.Second, 20 * time.Second}, [2]time.Duration{5 * time.Second, 15 * time.Second}
		drain, runRate = 5*time.Minute, 10
	}
	c := newCluster(t, "mixed-"+cfg.mode, clusterOpts{redisArgs: aofAlways, viaProxy: true, workers: workers,
		concurrency: 32, workTime: 200 * time.Millisecond, timings: tm, failFirst: 1, retryDelay: 100 * time.Millisecond, flow: true})
	c.startWorkers(workers)
	started := time.Now()
	// Enqueue everything within 95% of the run, catching up after outages;
	// the enqueuer may run past the faults to reach the count.
	rate := float64(tasks) / (0.95 * run.Seconds())
	ectx, ecancel := context.WithTimeout(context.Background(), run+2*time.Minute)
	defer ecancel()
	c.enqueue(ectx, c.opts.queue, tasks, rate)
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	c.startRuns(ctx, runRate)
	var f faults
	f.run(ctx, c.keeper(workers))
	f.run(ctx, c.killer(time.Second, 3*time.Second))
	f.run(ctx, c.freezer(freezeEvery[0], freezeEvery[1]))
	f.run(ctx, c.network(cutEvery[0], cutEvery[1], 10*time.Millisecond, tm.ttl/2))
	f.run(ctx, c.redisFaults(redisEvery[0], redisEvery[1], outage))
	if long {
		f.run(ctx, func(ctx context.Context) {
			for redistest.Pause(ctx, 30*time.Second) == nil {
				acked, ended := c.led.counts()
				t.Logf("mixed: %s: %d enqueued, %d ended, %d workers live, faults %v",
					time.Since(started).Round(time.Second), acked, ended, len(c.live(true)), c.faultCounts())
			}
		})
	}
	<-ctx.Done()
	f.wait()
	r := c.finish(started, drain)
	publish(t, r.String())
	r.check(c)
	if r.acked < tasks {
		t.Errorf("mixed: only %d of %d tasks were enqueued", r.acked, tasks)
	}
}

// TestChaosBlip: with the default heartbeat timings (1s / 3s / 1s) and a
// long poll interval (1 min: a valid setting that spares Redis the idle
// polls; polls would also draw, and so flush, dead pooled connections),
// workers get a burst of work (tasks and flow runs: every slot busy at once,
// so their connection pools fill up), go quiet, and then the proxy resets
// every connection once; Redis is reachable again at once. A blip far
// shorter than the keepalive TTL must not cost any worker its id (which
// cancels every running handler and re-runs their tasks elsewhere). Three
// rounds.
func TestChaosBlip(t *testing.T) {
	needMode(t, "short")
	t.Parallel()
	tm := defaultTimings
	tm.poll = time.Minute
	c := newCluster(t, "blip", clusterOpts{viaProxy: true, workers: 3, concurrency: 16,
		workTime: 300 * time.Millisecond, timings: tm, flow: true})
	c.startWorkers(3)
	started := time.Now()
	cuts := 0
	for round := 0; round < 3; round++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c.enqueue(ctx, c.opts.queue, 3*16, 1000)
		c.waitEnqueued()
		cancel()
		if c.opts.flow {
			if err := c.startRunsNow(3 * 16); err != nil {
				t.Fatalf("starting flow runs: %v", err)
			}
		}
		// The burst done (every task and run has its end line), the pools
		// hold idle connections.
		bctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
		c.led.await(bctx, func() bool { return len(c.led.unended()) == 0 })
		cancel()
		c.proxy.Cut()
		c.fault("cut_all")
		cuts++
		// The next round after more than the TTL: a loss of this cut's
		// shows in its own round (finish waits the TTL out after the last).
		_ = redistest.Pause(c.ctx, 4*time.Second)
	}
	r := c.finish(started, 30*time.Second)
	lostIDs := c.led.kindCount("keepalive_lost")
	r.extra = append(r.extra, fmt.Sprintf("keepalive lost %d times after %d single cuts", lostIDs, cuts))
	publish(t, r.String())
	r.check(c)
	if lostIDs > 0 {
		t.Errorf("blip: %d single connection cut(s) made workers lose their keepalive %d time(s), though Redis was reachable again at once (TTL 3s). "+
			"After a cut every idle pooled connection is dead; a beat must try more of them (heartbeat/heartbeat.go Loop.beat, 991723a) so that TTL/interval beats do not all fail on dead ones",
			cuts, lostIDs)
	}
}
