package chaos_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// timersChildEnv, when set, makes the test binary a worker process of the
// timers flow (timersChild) instead of running the tests: the value is the
// file its handlers and events log to.
const timersChildEnv = "WORQR_CHAOS_TIMERS_LOG"

const (
	timersFlowName = "timers"
	// timersRetry is s3's retry delay (its Backoff): a third timer.
	timersRetry = time.Second
	// timersSignal is the signal s2 awaits.
	timersSignal = "go"
)

// timersFlow is the flow of TestChaosTimers: s1 sleeps (StageResult.Sleep,
// the state's "sleep" ms), s2 awaits signal "go" for at most the state's
// "bound" ms, s3 reads the signal's field and, when the state's "fail3" is
// set, fails its first attempt (retried after timersRetry). Each handler
// calls logLine (the harness passes one that does nothing: it only starts
// runs and signals them).
func timersFlow(logLine func(words ...string)) *worqr.Flow {
	ms := func(r *worqr.Run, field string) time.Duration {
		n, _ := strconv.Atoi(r.State[field])
		return time.Duration(n) * time.Millisecond
	}
	work := func() { time.Sleep(between(2*time.Millisecond, 10*time.Millisecond)) }
	q := worqr.QueueConfig{Concurrency: 8, MaxCrashes: -1, MaxAttempts: 5,
		Backoff: func(int, error) time.Duration { return timersRetry }}
	stage := func(name string, h func(r *worqr.Run, att string) (*worqr.StageResult, error)) worqr.Stage {
		return worqr.Stage{Name: name, Queue: q, Handler: worqr.StageHandlerFunc(
			func(_ context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				return h(r, strconv.Itoa(r.Attempt))
			})}
	}
	return &worqr.Flow{Name: timersFlowName, Stages: []worqr.Stage{
		stage("s1", func(r *worqr.Run, att string) (*worqr.StageResult, error) {
			logLine("start", r.ID, "s1", att, "-")
			work()
			logLine("end", r.ID, "s1", att, "-")
			return &worqr.StageResult{Sleep: ms(r, "sleep")}, nil
		}),
		stage("s2", func(r *worqr.Run, att string) (*worqr.StageResult, error) {
			logLine("start", r.ID, "s2", att, "-")
			work()
			logLine("end", r.ID, "s2", att, "-")
			return &worqr.StageResult{Await: timersSignal, Sleep: ms(r, "bound")}, nil
		}),
		stage("s3", func(r *worqr.Run, att string) (*worqr.StageResult, error) {
			got, ok := r.State[timersSignal]
			if !ok {
				got = "-"
			}
			logLine("start", r.ID, "s3", att, got)
			work()
			if r.State["fail3"] == "1" && r.Attempt == 1 {
				logLine("fail", r.ID, "s3", att, got)
				return nil, errors.New("s3 fails its first attempt")
			}
			logLine("end", r.ID, "s3", att, got)
			return nil, nil
		}),
	}}
}

// timersScenario sizes one run of TestChaosTimers.
type timersScenario struct {
	rate     float64       // runs started per second...
	joinRate float64       // and of the joins flow...
	run      time.Duration // ...for this long, under the faults
	restarts time.Duration // a Redis restart every this long on average (the first at about run/3)
	drain    time.Duration // the longest wait for the runs to end after run
	procs    int
}

// TestChaosTimers: durable timers (StageResult.Sleep, the bound of an
// Await, a retry's delay) and signals (Client.Signal) under the suite's
// faults. Flow timersFlow: s1 sleeps 0.2–2 s, s2 awaits signal "go", s3
// reads it. Four worker processes (the test binary re-executed, 8 slots a
// stage) reach Redis through the proxy, which loses the reply to one
// request in 100 (the request ran), while one is SIGKILLed every
// 0.5–1.2 s and replaced, one SIGSTOPped past its keepalive TTL (1.5 s, TTL
// 1 s) every 1–2.5 s, and redis-server (appendfsync always) is SIGKILLed
// and restarted from its AOF. The harness starts runs (direct to Redis,
// each with an id: a start repeated after an error starts nothing) and a
// signaller sends their signals through a second proxy that loses one
// reply in 10, repeating a call whose reply was lost (with the same signal
// id). Each run gets one plan:
//
//	prompt  an id'd signal at a random time from the start to 1 s past the
//	        sleep (before or after the run awaits it), bound 8 s; then the
//	        same id again with another payload, which must be refused
//	noid    a signal without id, sent twice with the same payload, bound 8 s
//	none    no signal, bound 0.2–1.5 s
//	late    bound 0.2–0.8 s; the signal (with an id) is sent once the
//	        harness sees the bound passed: half of these runs fail s3's
//	        first attempt, and the signal goes once s3 failed, while it
//	        waits for its retry; the others' once s3 is no longer scheduled
//	        (queued, running or done)
//
// (a fifth of prompt, noid and none runs fail s3's first attempt too).
// Each handler logs its start and end (s3 with the signal's field as it
// found it) and each process its accepted ends (EventForwarded,
// EventDone, EventRetry), unbuffered, to the process's file.
//
// Checked from those lines (timersCheck): every run ends done; no stage of
// a run has two accepted ends; no timer fires early: s2's first start comes
// after an s1 end plus the sleep, s3's (when it found no field) after an s2
// end plus the bound, s3's retry after its failure plus timersRetry; and on
// time: lateness (first start - (latest handler end that may have set the
// timer + its duration), so it includes the end's round trip) at most
// timersLate when no kill, freeze or Redis away came between the timer's
// due time and the start, and at most timersLateFaulted plus the time
// Redis was away in that window otherwise; each timer's median lateness at
// most timersLate;
// every s3 attempt finds the field of a signal sent in time exactly as
// sent, and none of a signal sent after the bound passed (late), nor a
// repeated id's payload; a run's field is absent only when its signal was
// sent after the bound could have passed (counted). A repeated signal id
// is refused, and a late signal is kept, never delivered.
//
// The same processes serve joinsFlow, whose runs the harness starts
// beside (with an id, and 2–3 members, RunOpts.Children): cb, the batch's
// callback, then ja, a join on all of branches ba, bb, bc, then jy, a join
// on any of ya, yb. Checked from its lines (joinsCheck): every run ends
// done; cb, each join's fan-out and each join have at most one accepted
// end (forwarded, fanned_out, done), each member and branch at most one,
// jy's branches one between them, and each handler ran to its end (the
// run being done, that accepted end is the one); every cb attempt found
// all its members done; every ja attempt found each branch's field as one
// of that branch's ends set it, every jy attempt exactly one; and Redis
// holds each fan-out once (the members, one child per branch), ja's
// branches done, one of jy's.
//
// Short mode (about 10 s): 40 runs a second for 3 s and 15 of the joins
// flow, one Redis restart. Long mode (make chaos): 15 and 5 a second for
// WORQR_CHAOS_DURATION, a Redis restart every 30 s on average.
func TestChaosTimers(t *testing.T) {
	needMode(t, "short", "long")
	t.Parallel()
	s := timersScenario{rate: 40, joinRate: 15, run: 3 * time.Second, drain: 60 * time.Second, procs: 4}
	if cfg.mode == "long" {
		s.rate, s.joinRate, s.run, s.restarts, s.drain = 15, 5, cfg.duration, 30*time.Second, 5*time.Minute
	}
	chaosTimers(t, "timers-"+cfg.mode, s)
}

// The lateness a timer may have. Timers are moved by the reaper that
// holds the lease, every ReaperInterval (200 ms): a timer is due up to an
// interval before the move, and a lost reply (one request in 100) may
// cost the lease's holder its turn, another interval; then the take.
// timersLate is that and 400 ms of scheduling on a busy machine (a -race
// build beside the other suites on two cores), for
// every timer with no kill, freeze or Redis away between its due time and
// the start, and for the median of all. timersLateFaulted bounds the
// others, plus the time Redis was away in between: a kill or a freeze of
// the process that took the stage is recovered after the TTL plus a
// reaper pass (1.2 s), and a wake-up lost with a cut subscriber
// connection is made up by the next poll (1 s).
const (
	timersLate        = 800 * time.Millisecond
	timersLateFaulted = 3 * time.Second
)

// timersPlan is what the harness does with one run, and what its
// signaller saw.
type timersPlan struct {
	id           string
	kind         string // prompt, noid, none, late
	sleep, bound time.Duration
	fail3        bool
	payload      string
	sigID        string

	firstSend time.Time // when the first call of the signal began
	outcome   string    // its first definite answer: delivered, kept, duplicate (taken, its reply lost), gone
	repeat    string    // the repeat's answer (prompt: the same id, another payload; noid: the same payload)
	calls     int       // Signal calls
	lost      int       // of them, failed (their reply lost, or Redis away)
}

func chaosTimers(t *testing.T, name string, s timersScenario) {
	c := newCluster(t, name, clusterOpts{viaProxy: true, redisArgs: aofAlways, timings: shortTimings})
	ctx := context.Background()
	flow, jflow := timersFlow(func(...string) {}), joinsFlow(func(...string) {})
	in, err := worqr.NewInspector(c.pool, &worqr.Config{Namespace: c.ns})
	if err != nil {
		t.Fatal(err)
	}
	// The signaller's own proxy and client: its lost replies are not the
	// workers', and do not count as faults of the timers.
	sigProxy, err := startProxy(c.srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sigProxy.Close)
	sigPool := &redis.Pool{
		MaxIdle: 8,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialURLContext(ctx, sigProxy.URL(), redis.DialConnectTimeout(time.Second),
				redis.DialReadTimeout(2*time.Second), redis.DialWriteTimeout(2*time.Second))
		},
		TestOnBorrow: func(rc redis.Conn, _ time.Time) error { return rc.Err() },
	}
	t.Cleanup(func() { sigPool.Close() })
	signaller, err := worqr.NewClient(sigPool, &worqr.Config{Namespace: c.ns})
	if err != nil {
		t.Fatal(err)
	}

	killedAt := map[int]time.Time{} // proc n -> when killed
	var kills []time.Time
	frozen := map[int][]span{} // proc n -> its freezes
	var freezes []span
	var kmu sync.Mutex
	start := func() error {
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := startTimersProc(c)
			if err == nil {
				return nil
			}
			// A lost reply or Redis away can fail a registration: the
			// process exits.
			if time.Now().After(deadline) || redistest.Pause(c.ctx, 300*time.Millisecond) != nil {
				return err
			}
		}
	}
	errs := make(chan error, s.procs)
	for i := 0; i < s.procs; i++ {
		go func() { errs <- start() }()
	}
	for i := 0; i < s.procs; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	c.proxy.DropReplies(0.01)
	sigProxy.DropReplies(0.1)

	var (
		pmu   sync.Mutex
		plans []*timersPlan
		jruns []*joinsPlan
		sigWG sync.WaitGroup
	)
	// send sends run p's signal until an answer says what became of it;
	// a call whose reply was lost is repeated (with the same id).
	send := func(p *timersPlan, sigID, payload string) string {
		for {
			p.calls++
			sctx, cancel := context.WithTimeout(c.ctx, 2*time.Second)
			now, err := signaller.Signal(sctx, flow, p.id, timersSignal, []byte(payload), sigID)
			cancel()
			switch {
			case err == nil && now:
				return "delivered"
			case err == nil:
				return "kept"
			case errors.Is(err, worqr.ErrDuplicate):
				return "duplicate"
			case errors.Is(err, worqr.ErrTaskNotFound):
				return "gone"
			}
			p.lost++
			if redistest.Pause(c.ctx, 50*time.Millisecond) != nil {
				return "test over"
			}
		}
	}
	// signalRun is run p's signaller, started once the run is.
	signalRun := func(p *timersPlan) {
		defer sigWG.Done()
		switch p.kind {
		case "prompt", "noid":
			if redistest.Pause(c.ctx, between(0, p.sleep+time.Second)) != nil {
				return
			}
			p.firstSend = time.Now()
			p.outcome = send(p, p.sigID, p.payload)
			if redistest.Pause(c.ctx, between(0, 500*time.Millisecond)) != nil {
				return
			}
			if p.kind == "prompt" {
				p.repeat = send(p, p.sigID, "dup-"+p.id)
			} else {
				p.repeat = send(p, "", p.payload)
			}
		case "late":
			// Once the bound passed: s3 is no longer scheduled (its timer
			// fired) or, with fail3, it failed (it started without the
			// signal) and waits for its retry.
			for redistest.Pause(c.ctx, 20*time.Millisecond) == nil {
				rctx, cancel := context.WithTimeout(c.ctx, time.Second)
				info, err := in.Run(rctx, timersFlowName, p.id)
				cancel()
				if err != nil {
					continue
				}
				if info.Status != worqr.RunRunning || (info.Stage == "s3" &&
					(p.fail3 && info.LastError != "" || !p.fail3 && info.TaskState != "scheduled")) {
					break
				}
			}
			p.firstSend = time.Now()
			p.outcome = send(p, p.sigID, p.payload)
		}
	}
	startRun := func(seq int) error {
		p := &timersPlan{id: fmt.Sprintf("r%05d", seq), sleep: between(200*time.Millisecond, 2*time.Second)}
		switch x := rand.IntN(100); {
		case x < 45:
			p.kind, p.bound = "prompt", 8*time.Second
		case x < 60:
			p.kind, p.bound = "noid", 8*time.Second
		case x < 80:
			p.kind, p.bound = "none", between(200*time.Millisecond, 1500*time.Millisecond)
		default:
			p.kind, p.bound, p.fail3 = "late", between(200*time.Millisecond, 800*time.Millisecond), rand.IntN(2) == 0
		}
		if p.kind != "late" {
			p.fail3 = rand.IntN(5) == 0
		}
		if p.kind != "none" {
			p.payload = "p-" + p.id
		}
		if p.kind == "prompt" || p.kind == "late" {
			p.sigID = "sig-" + p.id
		}
		state := map[string]string{
			"sleep": strconv.FormatInt(p.sleep.Milliseconds(), 10),
			"bound": strconv.FormatInt(p.bound.Milliseconds(), 10),
		}
		if p.fail3 {
			state["fail3"] = "1"
		}
		// The sleep as the handler reads it: whole ms.
		p.sleep = time.Duration(p.sleep.Milliseconds()) * time.Millisecond
		p.bound = time.Duration(p.bound.Milliseconds()) * time.Millisecond
		deadline := time.Now().Add(30 * time.Second)
		for {
			sctx, cancel := context.WithTimeout(c.ctx, 2*time.Second)
			_, err := c.client.StartRun(sctx, flow, state, &worqr.RunOpts{ID: p.id})
			cancel()
			if err == nil || errors.Is(err, worqr.ErrDuplicate) {
				break
			}
			if time.Now().After(deadline) || redistest.Pause(c.ctx, 100*time.Millisecond) != nil {
				return fmt.Errorf("starting run %s: %w", p.id, err)
			}
		}
		pmu.Lock()
		plans = append(plans, p)
		pmu.Unlock()
		sigWG.Add(1)
		go signalRun(p)
		return nil
	}
	// startJoins starts run seq of the joins flow with 2–3 members.
	startJoins := func(seq int) error {
		p := &joinsPlan{id: fmt.Sprintf("j%05d", seq), members: 2 + rand.IntN(2)}
		members := make([]worqr.ChildSpec, p.members)
		for i := range members {
			members[i] = worqr.ChildSpec{Queue: joinsMembers}
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			sctx, cancel := context.WithTimeout(c.ctx, 2*time.Second)
			_, err := c.client.StartRun(sctx, jflow, nil, &worqr.RunOpts{ID: p.id, Children: members})
			cancel()
			if err == nil || errors.Is(err, worqr.ErrDuplicate) {
				break
			}
			if time.Now().After(deadline) || redistest.Pause(c.ctx, 100*time.Millisecond) != nil {
				return fmt.Errorf("starting run %s: %w", p.id, err)
			}
		}
		pmu.Lock()
		jruns = append(jruns, p)
		pmu.Unlock()
		return nil
	}

	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var f faults
	f.run(fctx, func(ctx context.Context) {
		next := pace(500*time.Millisecond, 1200*time.Millisecond)
		for redistest.Pause(ctx, next()) == nil {
			if l := c.live(false); len(l) > 0 {
				p := l[rand.IntN(len(l))]
				c.kill(p)
				kmu.Lock()
				killedAt[p.n] = time.Now()
				kills = append(kills, killedAt[p.n])
				kmu.Unlock()
			}
			if err := start(); err != nil {
				t.Errorf("replacing a killed process: %v", err)
				return
			}
		}
	})
	f.run(fctx, func(ctx context.Context) {
		next := pace(time.Second, 2500*time.Millisecond)
		for redistest.Pause(ctx, next()) == nil {
			if l := c.live(false); len(l) > 1 {
				p := l[rand.IntN(len(l))]
				from := time.Now()
				c.freeze(p, 1500*time.Millisecond)
				kmu.Lock()
				frozen[p.n] = append(frozen[p.n], span{from, time.Now()})
				freezes = append(freezes, span{from, time.Now()})
				kmu.Unlock()
			}
		}
	})
	f.run(fctx, func(ctx context.Context) {
		wait := s.run / 3
		for redistest.Pause(ctx, wait) == nil {
			if err := c.restartRedis(); err != nil {
				t.Errorf("restarting redis-server: %v", err)
				return
			}
			if s.restarts == 0 {
				return
			}
			wait = between(s.restarts/2, s.restarts*3/2)
		}
	})
	started := time.Now()
	if cfg.mode == "long" {
		f.run(fctx, func(ctx context.Context) {
			for redistest.Pause(ctx, 30*time.Second) == nil {
				pmu.Lock()
				n := len(plans)
				pmu.Unlock()
				t.Logf("%s: %s: %d runs started, %d processes live, faults %v",
					name, time.Since(started).Round(time.Second), n, len(c.live(true)), c.faultCounts())
			}
		})
	}
	// Start the runs, in batches every 50 ms.
	for seq, jseq := 0, 0; time.Since(started) < s.run; {
		due := int(s.rate * time.Since(started).Seconds())
		for ; seq < due; seq++ {
			if err := startRun(seq); err != nil {
				t.Fatal(err)
			}
		}
		for due = int(s.joinRate * time.Since(started).Seconds()); jseq < due; jseq++ {
			if err := startJoins(jseq); err != nil {
				t.Fatal(err)
			}
		}
		if redistest.Pause(c.ctx, 50*time.Millisecond) != nil {
			t.Fatal("the test ended")
		}
	}
	// Wait for every signaller, then for every run to end.
	sigDone := make(chan struct{})
	go func() { sigWG.Wait(); close(sigDone) }()
	dctx, dcancel := context.WithTimeout(c.ctx, s.drain)
	defer dcancel()
	select {
	case <-sigDone:
	case <-dctx.Done():
		t.Fatalf("the signallers did not finish within %s of the last start", s.drain)
	}
	pending := map[string]string{} // run -> its flow
	for _, p := range plans {
		pending[p.id] = timersFlowName
	}
	for _, p := range jruns {
		pending[p.id] = joinsFlowName
	}
	ended := func() bool {
		for id, fl := range pending {
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			info, err := in.Run(rctx, fl, id)
			cancel()
			if err != nil || info.Status == worqr.RunRunning {
				return false
			}
			delete(pending, id)
		}
		return true
	}
	if redistest.Poll(dctx, ended) != nil { // the children log to files: Redis says when it is over
		t.Errorf("%d runs still running %s after the last start", len(pending), s.drain)
	}
	ran := time.Since(started)
	cancel()
	faultsBeforeEnd := c.faultCounts()
	f.wait()
	c.proxy.DropReplies(0)
	sigProxy.DropReplies(0)
	for _, p := range c.stopAll(15 * time.Second) {
		t.Error(p)
	}
	for _, p := range c.unexpectedExits() {
		t.Error(p)
	}
	if faultsBeforeEnd["kill"] == 0 || faultsBeforeEnd["freeze"] == 0 || faultsBeforeEnd["redis_restart"] == 0 ||
		c.proxy.dropped.Load() == 0 || sigProxy.dropped.Load() == 0 {
		t.Errorf("not every fault happened before the runs ended: %v, %d and %d replies dropped: the run tested little",
			faultsBeforeEnd, c.proxy.dropped.Load(), sigProxy.dropped.Load())
	}

	// What Redis holds of every run, and every process's lines.
	status := map[string]worqr.RunStatus{}
	for _, p := range plans {
		info, err := in.Run(ctx, timersFlowName, p.id)
		switch {
		case errors.Is(err, worqr.ErrTaskNotFound):
			status[p.id] = "unknown"
		case err != nil:
			t.Fatal(err)
		default:
			status[p.id] = info.Status
		}
	}
	infos := map[string]*worqr.RunInfo{}
	for _, p := range jruns {
		info, err := in.Run(ctx, joinsFlowName, p.id)
		switch {
		case errors.Is(err, worqr.ErrTaskNotFound):
		case err != nil:
			t.Fatal(err)
		default:
			infos[p.id] = info
		}
	}
	for _, q := range append([]string{timersFlowName + "/s1", timersFlowName + "/s2", timersFlowName + "/s3"}, joinsQueues()...) {
		qi, err := in.Queue(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if n := qi.Waiting + qi.Scheduled + qi.Active + qi.Dead; n != 0 {
			t.Errorf("queue %s holds %d tasks after every run ended: %+v", q, n, qi)
		}
	}
	c.mu.Lock()
	all := make([]*proc, 0, len(c.procs))
	for _, p := range c.procs {
		all = append(all, p)
	}
	c.mu.Unlock()
	var lines, jlines []timersLine
	for _, p := range all {
		ls, err := readTimersLog(filepath.Join(c.logDir, fmt.Sprintf("timers-%d.log", p.n)), p.n)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			if strings.HasPrefix(l.run, "j") { // the joins flow's runs
				jlines = append(jlines, l)
			} else {
				lines = append(lines, l)
			}
		}
	}
	var fl []timersFault
	for _, k := range kills {
		fl = append(fl, timersFault{span{k, k}, 0})
	}
	for _, z := range freezes {
		fl = append(fl, timersFault{z, 0})
	}
	c.mu.Lock()
	for _, d := range c.redisDown {
		fl = append(fl, timersFault{d, d.to.Sub(d.from)})
	}
	c.mu.Unlock()
	fig, problems := timersCheck(plans, status, lines, fl)
	jfig, jproblems := joinsCheck(jruns, infos, jlines)
	problems = append(problems, jproblems...)
	for _, what := range []string{"sleep", "bound", "retry"} {
		if m := median(fig.late[what]); m > timersLate {
			problems = append(problems, fmt.Sprintf("the %s timers fired %s late in the median (bound %s): %s",
				what, m.Round(time.Millisecond), timersLate, histogram(fig.late[what])))
		}
	}
	for i, p := range problems {
		if i == 15 {
			t.Errorf("... and %d more", len(problems)-15)
			break
		}
		t.Error(p)
	}
	if fig.byKind["late"] == 0 || fig.byKind["prompt"] == 0 || fig.boundPassed == 0 || fig.delivered == 0 || fig.kept == 0 ||
		jfig.callbacks == 0 || jfig.alls == 0 || jfig.anys == 0 {
		t.Errorf("runs %v, %d signals delivered, %d kept, %d timers of a bound passed; %d batch callbacks, %d joins on all and %d on any accepted: the run tested little",
			fig.byKind, fig.delivered, fig.kept, fig.boundPassed, jfig.callbacks, jfig.alls, jfig.anys)
	}
	c.mu.Lock()
	starts := c.starts - c.failedStarts
	c.mu.Unlock()
	publish(t, fmt.Sprintf("=== chaos %s: %d runs (%s) done in %s through %v, %d lost replies of the workers, %d processes;\n"+
		"  timers' lateness (first start - (handler end + duration)):\n"+
		"    sleep:  all %s; with no fault in between %s\n"+
		"    bound:  all %s; with no fault in between %s\n"+
		"    retry:  all %s; with no fault in between %s\n"+
		"  signals: %d calls (%d failed, their reply lost or Redis away, and repeated); first answers: %d delivered, %d kept, %d taken (a repeat found its id), %d gone;\n"+
		"    repeats of an id: %d refused as duplicates; late signals: %d kept, never delivered;\n"+
		"    s3 found the payload in %d runs, no field in %d (%s: none and late as planned, the others' signal sent after the bound may have passed);\n"+
		"  %d stage runs (%d cut by a kill), %d accepted ends logged;\n"+
		"  joins: %d runs, each a batch (%d members in all) whose callback cb, then ja, a join on all of 3 branches, then jy, on any of 2;\n"+
		"    accepted ends logged: %d callbacks, %d joins on all, %d on any, %d branches' (%d of jy's branches cancelled or their end refused);\n"+
		"    %d handler runs (%d cut by a kill)\n",
		name, len(plans), kv(fig.byKind), ran.Round(100*time.Millisecond), faultsBeforeEnd, c.proxy.dropped.Load(), starts,
		histogram(fig.late["sleep"]), histogram(fig.lateClean["sleep"]),
		histogram(fig.late["bound"]), histogram(fig.lateClean["bound"]),
		histogram(fig.late["retry"]), histogram(fig.lateClean["retry"]),
		fig.calls, fig.lostCalls, fig.delivered, fig.kept, fig.takenLost, fig.gone,
		fig.dupRefused, fig.lateKept,
		fig.gotPayload, sum(fig.noField), kv(fig.noField),
		fig.stageRuns, fig.cut, fig.accepted,
		jfig.runs, jfig.members, jfig.callbacks, jfig.alls, jfig.anys, jfig.branchEnds, jfig.anyCancelled,
		jfig.handlerRuns, jfig.cut))
}

// timersLine is one line of a process's log (see timersChild).
type timersLine struct {
	kind, run, stage string
	attempt          int
	got              string // s3: the signal's field as it found it ("-": none)
	proc             int
	at               time.Time
}

// readTimersLog reads one process's log.
func readTimersLog(path string, n int) ([]timersLine, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []timersLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 6 || len(fs[5]) < 19 {
			continue // a line cut by a kill (a unix ns time has 19 digits)
		}
		ns, err1 := strconv.ParseInt(fs[5], 10, 64)
		att, err2 := strconv.Atoi(fs[3])
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, timersLine{kind: fs[0], run: fs[1], stage: fs[2], attempt: att, got: fs[4], proc: n, at: time.Unix(0, ns)})
	}
	return out, sc.Err()
}

// timersFault is a fault for the lateness check (a kill, a freeze, Redis
// away): when it happened, and how long Redis was away in it.
type timersFault struct {
	span
	away time.Duration
}

// timersFigures is what timersCheck counted.
type timersFigures struct {
	byKind                     map[string]int
	late, lateClean            map[string][]time.Duration // by timer: sleep, bound, retry
	calls, lostCalls           int
	delivered, kept, takenLost int // first answers
	gone, dupRefused, lateKept int
	gotPayload, boundPassed    int
	noField                    map[string]int // by plan
	stageRuns, cut, accepted   int
}

// timersCheck returns the figures of a run and what in it breaks the
// promises of timers and signals (see TestChaosTimers): plans are the runs
// started, status what Redis holds of each, lines every process's lines,
// faults every fault the workers got.
func timersCheck(plans []*timersPlan, status map[string]worqr.RunStatus, lines []timersLine, faults []timersFault) (timersFigures, []string) {
	fig := timersFigures{byKind: map[string]int{}, noField: map[string]int{}, late: map[string][]time.Duration{}, lateClean: map[string][]time.Duration{}}
	var problems []string
	type key struct{ run, stage string }
	byRun := map[key][]timersLine{} // sorted by time
	for _, l := range lines {
		byRun[key{l.run, l.stage}] = append(byRun[key{l.run, l.stage}], l)
		switch l.kind {
		case "start":
			fig.stageRuns++
		case "forwarded", "done", "retry":
			fig.accepted++
		case "dead":
			problems = append(problems, fmt.Sprintf("run %s: stage %s went dead (process %d)", l.run, l.stage, l.proc))
		}
	}
	for k := range byRun {
		ls := byRun[k]
		sort.Slice(ls, func(i, j int) bool { return ls[i].at.Before(ls[j].at) })
	}
	// faulted: did a fault come in [from, to]; away: how long Redis was
	// away in it.
	faulted := func(from, to time.Time) (bool, time.Duration) {
		hit, away := false, time.Duration(0)
		for _, f := range faults {
			if f.to.Before(from) || f.from.After(to) {
				continue
			}
			hit = true
			away += f.away
		}
		return hit, away
	}
	firstOf := func(ls []timersLine, kind string, minAttempt int) (timersLine, bool) {
		for _, l := range ls {
			if l.kind == kind && l.attempt >= minAttempt {
				return l, true
			}
		}
		return timersLine{}, false
	}
	// timer checks the timer of duration d set by an end line of kind
	// (end, fail) of ls that led to the start at: no end plus d is after
	// it (+1 ms: Redis's clock in ms), and it is not late.
	timer := func(p *timersPlan, what string, ls []timersLine, kind string, d time.Duration, at time.Time) {
		var set time.Time
		for _, l := range ls {
			if l.kind == kind && !l.at.Add(d).After(at.Add(time.Millisecond)) {
				set = l.at // the latest that may have set it
			}
		}
		if set.IsZero() {
			problems = append(problems, fmt.Sprintf("run %s (%s): the %s timer (%s) fired early: the stage started at %s, before any %s line plus it",
				p.id, p.kind, what, d, at.Format("15:04:05.000000"), kind))
			return
		}
		wake := set.Add(d)
		late := at.Sub(wake)
		fig.late[what] = append(fig.late[what], late)
		hit, away := faulted(wake, at)
		if !hit {
			fig.lateClean[what] = append(fig.lateClean[what], late)
		}
		switch {
		case !hit && late > timersLate:
			problems = append(problems, fmt.Sprintf("run %s (%s): the %s timer (%s) fired %s late with no fault in between (bound %s): its end %s, the start %s",
				p.id, p.kind, what, d, late.Round(time.Millisecond), timersLate, set.Format("15:04:05.000000"), at.Format("15:04:05.000000")))
		case late > timersLateFaulted+away:
			problems = append(problems, fmt.Sprintf("run %s (%s): the %s timer (%s) fired %s late (bound %s, Redis away %s in between): its end %s, the start %s",
				p.id, p.kind, what, d, late.Round(time.Millisecond), timersLateFaulted, away.Round(time.Millisecond),
				set.Format("15:04:05.000000"), at.Format("15:04:05.000000")))
		}
	}
	for _, p := range plans {
		fig.byKind[p.kind]++
		fig.calls += p.calls
		fig.lostCalls += p.lost
		switch p.outcome {
		case "delivered":
			fig.delivered++
		case "kept":
			fig.kept++
		case "duplicate":
			fig.takenLost++
		case "gone":
			fig.gone++
		}
		if st := status[p.id]; st != worqr.RunDone {
			problems = append(problems, fmt.Sprintf("run %s (%s): LOST: Redis holds it as %q, want done", p.id, p.kind, st))
		}
		s1, s2, s3 := byRun[key{p.id, "s1"}], byRun[key{p.id, "s2"}], byRun[key{p.id, "s3"}]
		// Accepted ends: one per stage (s3: one retry with fail3, else none).
		count := func(ls []timersLine, kind string) int {
			n := 0
			for _, l := range ls {
				if l.kind == kind {
					n++
				}
			}
			return n
		}
		retries := 0
		if p.fail3 {
			retries = 1
		}
		for _, c := range []struct {
			stage, kind string
			ls          []timersLine
			most        int
		}{{"s1", "forwarded", s1, 1}, {"s2", "forwarded", s2, 1}, {"s3", "done", s3, 1}, {"s3", "retry", s3, retries}} {
			if n := count(c.ls, c.kind); n > c.most {
				problems = append(problems, fmt.Sprintf("run %s (%s): stage %s ACCEPTED %d %s ends (at most %d)", p.id, p.kind, c.stage, n, c.kind, c.most))
			}
		}
		if _, ok := firstOf(s3, "end", 1); !ok {
			problems = append(problems, fmt.Sprintf("run %s (%s): s3 never ran to its end", p.id, p.kind))
			continue
		}
		// The sleep: s2's first start.
		if st, ok := firstOf(s2, "start", 1); ok {
			timer(p, "sleep", s1, "end", p.sleep, st.at)
		} else {
			problems = append(problems, fmt.Sprintf("run %s (%s): s2 never started", p.id, p.kind))
			continue
		}
		// What every s3 attempt found.
		st3, _ := firstOf(s3, "start", 1)
		found := map[string]bool{}
		for _, l := range s3 {
			if l.kind == "start" {
				found[l.got] = true
			}
		}
		if len(found) > 1 {
			problems = append(problems, fmt.Sprintf("run %s (%s): s3's runs found different fields: %v (the signal came to a stage that had started without it)",
				p.id, p.kind, sortedKeys(found)))
		}
		for got := range found {
			switch {
			case strings.HasPrefix(got, "dup-"):
				problems = append(problems, fmt.Sprintf("run %s (%s): s3 found %s: a repeated signal id was TAKEN TWICE", p.id, p.kind, got))
			case got != "-" && got != p.payload:
				problems = append(problems, fmt.Sprintf("run %s (%s): s3 found %q, sent %q", p.id, p.kind, got, p.payload))
			case got != "-" && (p.kind == "late" || p.kind == "none"):
				problems = append(problems, fmt.Sprintf("run %s (%s): s3 found the signal %q sent after its bound passed (s3 first started %s without it, the signal sent at %s, answered %s)",
					p.id, p.kind, got, st3.at.Format("15:04:05.000000"), p.firstSend.Format("15:04:05.000000"), p.outcome))
			}
		}
		switch {
		case found[p.payload] && p.payload != "":
			fig.gotPayload++
		case found["-"]:
			fig.noField[p.kind]++
		}
		// The bound: s3's first start, when it found no field.
		if st3.got == "-" {
			fig.boundPassed++
			timer(p, "bound", s2, "end", p.bound, st3.at)
			if p.kind == "prompt" || p.kind == "noid" {
				// Absent only if the signal was sent once the bound may
				// have passed: after the first s2 end plus the bound.
				if s2end, ok := firstOf(s2, "end", 1); !ok || p.firstSend.Before(s2end.at.Add(p.bound)) {
					problems = append(problems, fmt.Sprintf("run %s (%s): s3 started at %s without the signal sent at %s (answered %s), within the bound (%s) of s2's end: the signal was LOST",
						p.id, p.kind, st3.at.Format("15:04:05.000000"), p.firstSend.Format("15:04:05.000000"), p.outcome, p.bound))
				}
			}
		}
		// The retry of s3.
		if p.fail3 {
			if st, ok := firstOf(s3, "start", 2); ok {
				timer(p, "retry", s3, "fail", timersRetry, st.at)
			} else {
				problems = append(problems, fmt.Sprintf("run %s (%s): s3 failed its first attempt and never ran again", p.id, p.kind))
			}
		}
		// The signaller's answers.
		switch p.kind {
		case "prompt":
			switch p.repeat {
			case "duplicate":
				fig.dupRefused++
			case "gone": // the run had ended
			default:
				problems = append(problems, fmt.Sprintf("run %s: the repeat of signal id %s answered %s, want refused as a duplicate", p.id, p.sigID, p.repeat))
			}
		case "late":
			switch p.outcome {
			case "kept", "gone":
				if p.outcome == "kept" {
					fig.lateKept++
				}
			case "duplicate": // its first call's reply was lost
			default:
				problems = append(problems, fmt.Sprintf("run %s: the signal sent after its bound passed answered %s, want kept", p.id, p.outcome))
			}
		}
	}
	for _, ls := range byRun {
		for _, l := range ls {
			if l.kind == "start" && l.stage != "" {
				if !hasEnd(ls, l) {
					fig.cut++
				}
			}
		}
	}
	return fig, problems
}

// hasEnd says whether start line s has an end or fail line of its process
// after it in ls.
func hasEnd(ls []timersLine, s timersLine) bool {
	for _, l := range ls {
		if (l.kind == "end" || l.kind == "fail") && l.proc == s.proc && l.attempt == s.attempt && !l.at.Before(s.at) {
			return true
		}
	}
	return false
}

// median is the median of s (0 when s is empty).
func median(s []time.Duration) time.Duration {
	if len(s) == 0 {
		return 0
	}
	s = append([]time.Duration(nil), s...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// startTimersProc starts one worker process of the timers flow (the test
// binary, re-executed) and returns once it registered.
func startTimersProc(c *cluster) error {
	return startChildProc(c, "timers", timersChildEnv, "WORQR_CHAOS_TIMERS_REDIS="+c.redisURLForWorkers(),
		"WORQR_CHAOS_TIMERS_NS="+c.ns)
}

// timersChild is a worker process of the timers and joins flows: it
// serves them until SIGTERM and returns the exit code. It logs to the file
// named by timersChildEnv, unbuffered (a line written is kept through a
// SIGKILL), each line "<kind> <run> <stage> <attempt> <field> <unix ns>"
// (stage: a stage's, child queue's or branch's name in its flow):
//
//	start|end|fail   a handler began, returned, failed (field: s3's
//	                 signal field as it found it, "-" when absent; the
//	                 joins flow's, see joinsFlow)
//	forwarded|fanned_out|done|retry|cancelled   Redis accepted an end
//	                 (EventForwarded, EventFannedOut, EventDone,
//	                 EventRetry, EventCancelled; field: a child's id)
//	lost_end|dead    an end was refused (EventLost), a taking went dead
func timersChild() int {
	c, err := openChild("timers child", timersChildEnv, "WORQR_CHAOS_TIMERS_REDIS")
	if err != nil {
		fmt.Fprintln(os.Stderr, "timers child:", err)
		return 1
	}
	defer c.close()
	fail, env, pool, logLine := c.fail, envDuration, c.pool, c.line
	// Each flow's own lines: a stage's or child's name without the flow,
	// a child's run (its id's prefix) and its id as the field.
	runOf := func(e worqr.Event) (run, stage, field string) {
		_, stage, _ = strings.Cut(e.Queue, "/")
		run, _, child := strings.Cut(e.TaskID, ".")
		if field = "-"; child {
			field = e.TaskID
		}
		return run, stage, field
	}
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{
		Config:            worqr.Config{Namespace: os.Getenv("WORQR_CHAOS_TIMERS_NS")},
		HeartbeatInterval: env("WORQR_HEARTBEAT_INTERVAL"),
		HeartbeatTTL:      env("WORQR_HEARTBEAT_TTL"),
		ReaperInterval:    env("WORQR_REAPER_INTERVAL"),
		PollInterval:      env("WORQR_POLL_INTERVAL"),
		Flows:             []*worqr.Flow{timersFlow(logLine), joinsFlow(logLine)},
		OnEvent: func(e worqr.Event) {
			run, stage, field := runOf(e)
			switch e.Kind {
			case worqr.EventForwarded, worqr.EventFannedOut, worqr.EventDone, worqr.EventRetry, worqr.EventDead,
				worqr.EventCancelled:
				logLine(string(e.Kind), run, stage, "0", field)
			case worqr.EventLost:
				logLine("lost_end", run, stage, "0", field)
			}
		},
	})
	if err != nil {
		return fail(err)
	}
	return serveUntilTerm(w, fail)
}
