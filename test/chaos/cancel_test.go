package chaos_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// TestChaosCancel: as TestChaosKill (a random worker SIGKILLed every 1-3 s
// and replaced), while the harness cancels random acknowledged tasks, a few
// a second, through its own client: waiting ones, running ones, ones held by
// a worker just killed (before the reaper of another worker recovers them),
// and now and then one whose cancel it asked already. The workers' 9 slots
// (3 x 3, 200 ms each: 45 tasks/s) are fewer than the 60 tasks/s enqueued,
// so that tasks wait and a cancel finds some waiting. Flow runs flow too, as
// in the other scenarios; they are not cancelled (Cancel refuses them:
// CancelRun is another path).
//
// Every Cancel's result and time is in the ledger; once the run drained,
// checkCancels holds each cancelled task to what its result promised (see
// there), and the usual checks hold for every task.
func TestChaosCancel(t *testing.T) {
	needMode(t, "short")
	t.Parallel()
	c := newCluster(t, "cancel", clusterOpts{workers: 3, concurrency: 3, workTime: 200 * time.Millisecond, timings: shortTimings, flow: true})
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
	f.run(ctx, c.canceller(200*time.Millisecond, 400*time.Millisecond))
	<-ctx.Done()
	f.wait()
	r := c.finish(started, time.Minute)
	cr := c.checkCancels()
	r.extra = append(r.extra, cr.lines()...)
	publish(t, r.String())
	r.check(c)
	if len(cr.failures) > 0 {
		t.Errorf("cancel: %d cancelled task(s) broke what Cancel promised:\n  %s", len(cr.failures), strings.Join(first(cr.failures, 20), "\n  "))
	}
	if cr.results["requested"] == 0 {
		t.Errorf("cancel: no Cancel returned CancelRequested (results: %s)", kv(cr.results))
	}
	if cr.results["removed"] == 0 {
		t.Errorf("cancel: no Cancel returned CancelRemoved (results: %s)", kv(cr.results))
	}
	if cr.reaped == 0 {
		t.Errorf("cancel: no task whose cancel was requested was held by a killed worker when it ended (kills %d): the reaper's cancelled ends were not exercised", r.faults["kill"])
	}
}

// The canceller's targets: a task held by a worker killed less than this
// ago is likely still held in Redis (the reaper recovers it after the
// keepalive TTL and a reaper interval).
const orphanFor = 1200 * time.Millisecond

// canceller cancels one acknowledged task every lo..hi through the
// harness's client and records the result in the ledger.
func (c *cluster) canceller(lo, hi time.Duration) func(context.Context) {
	return func(ctx context.Context) {
		for redistest.Pause(ctx, between(lo, hi)) == nil {
			id, ok := c.cancelTarget()
			if !ok {
				continue
			}
			asked := time.Now()
			// Not ctx: a call cut by the end of the run would leave its
			// result unknown.
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			st, err := c.client.Cancel(cctx, c.opts.queue, id)
			cancel()
			c.led.cancelled(id, cancelRec{status: st, err: err, asked: asked, at: time.Now()})
		}
	}
}

// cancelTarget picks a task to cancel: half the time, when there is one, a
// task a worker killed less than orphanFor ago held (its cancel is asked of
// a dead owner: only a reaper can end it); else at random one that no
// worker took yet (likely waiting), one a live worker runs, or, one time in
// ten, one whose cancel was asked already (a second cancel finds nothing).
func (c *cluster) cancelTarget() (string, bool) {
	now := time.Now()
	dead := map[int]bool{}
	c.mu.Lock()
	for n, p := range c.procs {
		if !p.alive() {
			dead[n] = true
		}
	}
	c.mu.Unlock()
	l := c.led
	l.mu.Lock()
	defer l.mu.Unlock()
	fresh := func(t *taskRec) bool {
		return t != nil && t.acked && t.queue == c.opts.queue && len(t.ends) == 0 && len(t.cancels) == 0
	}
	var orphaned, running, waiting, asked []string
	for n, p := range l.procs {
		k, killed := l.killedAt[n]
		for id := range p.open {
			switch t := l.tasks[id]; {
			case !fresh(t):
			case !dead[n]:
				running = append(running, id)
			case killed && now.Sub(k) < orphanFor:
				orphaned = append(orphaned, id)
			}
		}
	}
	for id, t := range l.tasks {
		switch {
		case fresh(t) && len(t.takes) == 0:
			waiting = append(waiting, id)
		case len(t.cancels) == 1:
			asked = append(asked, id)
		}
	}
	pick := func(ids []string) (string, bool) {
		if len(ids) == 0 {
			return "", false
		}
		return ids[rand.IntN(len(ids))], true
	}
	if rand.IntN(2) == 0 {
		if id, ok := pick(orphaned); ok {
			return id, true
		}
	}
	order := [][]string{waiting, running, asked}
	switch x := rand.IntN(10); {
	case x == 0:
		order = [][]string{asked, waiting, running}
	case x <= 5:
	default:
		order = [][]string{running, waiting, asked}
	}
	for _, ids := range order {
		if id, ok := pick(ids); ok {
			return id, true
		}
	}
	return pick(orphaned)
}

// cancelReport is what checkCancels found.
type cancelReport struct {
	results   map[string]int // first cancel of each task, by result
	again     int            // later cancels of a task (all must find nothing)
	requested int
	// reaped: tasks whose cancel was requested and whose holder was killed
	// before their end (the reaper of another worker ended them):
	// afterKill asked of a dead holder, beforeKill asked before it died.
	reaped, afterKill, beforeKill int
	reapedLine                    int // reaped tasks reported (a cancelled line from a live worker)
	killsHit                      int // kills of a worker holding a task whose cancel was requested
	notStarted                    int // requested tasks with no took line (taken, never run)
	silent                        []string
	failures                      []string
}

// checkCancels checks, once the run drained and the workers stopped, every
// task the harness cancelled against what Cancel answered (worqr/client.go
// Cancel, internal/rdb/lua/cancel.lua, end.lua, include/requeue.lua):
//
//   - CancelRemoved: the task waited or was scheduled; cancel.lua ended it
//     as cancelled there and then (finalize). No handler starts after the
//     call returned (no took line read later), no worker reports an end of
//     it (its end was the removal: it is in no worker's hands; the queue
//     is far shorter than the 2 x 10,000 ids cancel.lua searches, so the
//     mark-where-it-waits path that a take would end is not taken), and
//     Redis holds it as cancelled.
//   - CancelRequested: cancel.lua found the task active and set its cancel
//     mark (x) in the same script. Every later way out of that taking reads
//     the mark first and then finalizes it as cancelled whatever was asked:
//     end.lua's end_task (done, retry, dead: "a cancel asked while a taking
//     ran wins over what the handler said") and give_back, and requeue.lua
//     / release.lua's requeue_pids (a reaper, Stop, a release). No new
//     taking can start: the id is in no waiting list. And an end that came
//     before the cancel left the task ended, so Cancel would have said
//     CancelNotFound. So once Cancel returned CancelRequested the only
//     accepted end is cancelled: Redis holds it as cancelled and at most one
//     end line was printed, a cancelled one, never done or dead.
//     run_cancel.lua is a flow run's cancel: the suite's plain queue has
//     none.
//   - That end is reported: the worker that ends a taking prints it
//     (EventCancelled from end.lua's outcome), and since 51823d2 a reaper
//     that ends the taking of a dead worker as cancelled emits
//     EventCancelled too (worqr/worker.go OnRecovered), which
//     cmd/worqr-example prints as "cancelled <queue> <id>" like any other.
//     A task with no end line is accepted only when its end may have been
//     printed by a process killed first: Redis finished it (ft) before its
//     holder's kill (its end script ran; the reply and the line went with
//     the process; the slack covers a request already sent), or within
//     100 ms of another kill (the reaper that ended it may be the one
//     killed). A reaper cannot end it before the holder's keepalive (TTL
//     1 s) has expired, long after that slack.
//   - CancelNotFound on a first cancel: the task had ended (done: nothing
//     else cancels it) before the call returned. A cancel of a task whose
//     cancel was asked already always finds nothing.
func (c *cluster) checkCancels() *cancelReport {
	cr := &cancelReport{results: map[string]int{}}
	const holderSlack = 250 * time.Millisecond // the holder's end script may run just after its kill
	const reaperSlack = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := c.pool.GetContext(ctx)
	if err != nil {
		cr.failures = append(cr.failures, "reading Redis: "+err.Error())
		return cr
	}
	defer conn.Close()

	l := c.led
	l.mu.Lock()
	defer l.mu.Unlock()
	var kills []time.Time
	for _, k := range l.killedAt {
		kills = append(kills, k)
	}
	killNear := func(at time.Time) bool {
		for _, k := range kills {
			if d := k.Sub(at); d > -reaperSlack && d < reaperSlack {
				return true
			}
		}
		return false
	}
	hit := map[int]bool{}
	ids := make([]string, 0, len(l.tasks))
	for id, t := range l.tasks {
		if len(t.cancels) > 0 {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		t := l.tasks[id]
		fail := func(format string, args ...any) {
			cr.failures = append(cr.failures, fmt.Sprintf("task %s: ", id)+fmt.Sprintf(format, args...)+"; "+describeTask(t, l))
		}
		v, err := redis.Strings(redis.DoContext(conn, ctx, "HMGET", c.ns+":{"+tagOf(t.queue)+"}:t:"+id, "s", "ft"))
		if err != nil {
			cr.failures = append(cr.failures, "reading Redis: "+err.Error())
			return cr
		}
		state := v[0]
		ftMs, ftErr := strconv.ParseInt(v[1], 10, 64)
		ft := time.UnixMilli(ftMs)
		first := t.cancels[0]
		for _, x := range t.cancels[1:] {
			cr.again++
			if first.err == nil && (x.err != nil || x.status != worqr.CancelNotFound) {
				fail("a later cancel returned %v (err %v), want not_found: its cancel was asked already", x.status, x.err)
			}
		}
		if first.err != nil {
			cr.results["error"]++ // it may or may not have run: nothing to hold it to
			continue
		}
		cr.results[first.status.String()]++
		switch first.status {
		case worqr.CancelRemoved:
			if state != "cancelled" {
				fail("Cancel returned removed, but Redis holds it as %q", state)
			}
			for _, tk := range t.takes {
				if tk.at.After(first.at) {
					fail("Cancel returned removed, and worker %d started a handler for it %s later", tk.proc, tk.at.Sub(first.at).Round(time.Millisecond))
				}
			}
			if len(t.ends) > 0 {
				fail("Cancel returned removed (its end), and workers printed %d more end(s)", len(t.ends))
			}
		case worqr.CancelRequested:
			cr.requested++
			if state != "cancelled" {
				fail("Cancel returned requested, but Redis holds it as %q (a cancel asked while a taking ran must win)", state)
			}
			for _, e := range t.ends {
				if e.kind != "cancelled" {
					fail("Cancel returned requested, and worker %d printed %s for it", e.proc, e.kind)
				}
			}
			if len(t.ends) > 1 {
				fail("Cancel returned requested, and %d end lines were printed", len(t.ends))
			}
			if ftErr != nil {
				if state == "cancelled" {
					fail("Redis holds it as cancelled without a finish time (ft %q)", v[1])
				}
				continue
			}
			if len(t.takes) == 0 {
				cr.notStarted++
				if len(t.ends) == 0 && !killNear(ft) {
					fail("no worker reported its cancelled end (ended in Redis at %s)", ft.Format("15:04:05.000"))
				}
				continue
			}
			holder := t.takes[len(t.takes)-1]
			k, killed := l.killedAt[holder.proc]
			killed = killed && k.After(holder.at)
			byReaper := killed && !ft.Before(k.Add(holderSlack))
			if byReaper {
				cr.reaped++
				hit[holder.proc] = true
				if first.asked.After(k) {
					cr.afterKill++
				} else {
					cr.beforeKill++
				}
			}
			if len(t.ends) > 0 {
				if byReaper && t.ends[0].proc != holder.proc {
					cr.reapedLine++
				}
				continue
			}
			switch {
			case killed && !byReaper:
				cr.silent = append(cr.silent, fmt.Sprintf("%s (ended %s before its holder, worker %d, was killed)", id, k.Sub(ft).Round(time.Millisecond), holder.proc))
			case killNear(ft):
				cr.silent = append(cr.silent, fmt.Sprintf("%s (ended by a reaper within %s of a kill)", id, reaperSlack))
			case byReaper:
				fail("held by worker %d, killed at %s; the reaper ended it as cancelled at %s and no worker reported it (EventCancelled of OnRecovered, 51823d2)",
					holder.proc, k.Format("15:04:05.000"), ft.Format("15:04:05.000"))
			default:
				fail("no worker reported its cancelled end (ended in Redis at %s; its holder, worker %d, was not killed)", ft.Format("15:04:05.000"), holder.proc)
			}
		case worqr.CancelNotFound:
			if state != "done" {
				fail("the first cancel returned not_found, but Redis holds it as %q (want done: nothing else cancels it)", state)
			} else if ftErr != nil || ftMs > first.at.UnixMilli() {
				fail("the first cancel returned not_found at %s, but the task ended only at %s", first.at.Format("15:04:05.000"), ft.Format("15:04:05.000"))
			}
		}
	}
	cr.killsHit = len(hit)
	return cr
}

// describeTask renders what the ledger knows of t (the ledger's lock held).
func describeTask(t *taskRec, l *ledger) string {
	var b strings.Builder
	fmt.Fprintf(&b, "acked %v; cancels:", t.acked)
	for _, x := range t.cancels {
		fmt.Fprintf(&b, " [%v at %s, err %v]", x.status, x.at.Format("15:04:05.000"), x.err)
	}
	b.WriteString("; takes:")
	for _, tk := range t.takes {
		fmt.Fprintf(&b, " [worker %d pid %s at %s", tk.proc, tk.pid, tk.at.Format("15:04:05.000"))
		if k, ok := l.killedAt[tk.proc]; ok {
			fmt.Fprintf(&b, ", killed at %s", k.Format("15:04:05.000"))
		}
		b.WriteString("]")
	}
	b.WriteString("; ends:")
	for _, e := range t.ends {
		fmt.Fprintf(&b, " [worker %d %s at %s]", e.proc, e.kind, e.at.Format("15:04:05.000"))
	}
	return b.String()
}

// lines renders the report.
func (cr *cancelReport) lines() []string {
	out := []string{
		fmt.Sprintf("cancels: first cancel of %d tasks: %s; later cancels of the same tasks: %d (all must find nothing)",
			sum(cr.results), kv(cr.results), cr.again),
		fmt.Sprintf("cancel requested of %d tasks: %d held by a killed worker when they ended (%d asked after the kill, %d before it; %d kills hit such a worker), "+
			"%d of them reported by a reaper's cancelled line; %d never started (no took line)",
			cr.requested, cr.reaped, cr.afterKill, cr.beforeKill, cr.killsHit, cr.reapedLine, cr.notStarted),
	}
	if len(cr.silent) > 0 {
		out = append(out, fmt.Sprintf("cancelled ends not reported, accepted (the process that ended them was killed): %d: %s",
			len(cr.silent), strings.Join(first(cr.silent, 5), ", ")))
	}
	return out
}
