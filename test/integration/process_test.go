package integration_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gexec"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/worqr"
)

// The timings of the worker processes (environment of cmd/worqr-example).
const (
	procHeartbeatInterval = 200 * time.Millisecond
	procHeartbeatTTL      = time.Second
	procReaperInterval    = 200 * time.Millisecond
	procPollInterval      = 200 * time.Millisecond
)

// workerProc is one `worqr-example worker` process.
type workerProc struct {
	sess *gexec.Session
}

func startWorkerProc(e *env, queues string, concurrency int, workTime time.Duration, extra ...string) *workerProc {
	GinkgoHelper()
	args := append([]string{"worker",
		"--queues", queues,
		"--concurrency", strconv.Itoa(concurrency),
		"--work-time", workTime.String(),
		"--redis-url", srv.URL,
		"--namespace", e.ns,
	}, extra...)
	cmd := exec.Command(exampleBin, args...)
	cmd.Env = append(os.Environ(),
		"WORQR_HEARTBEAT_INTERVAL="+procHeartbeatInterval.String(),
		"WORQR_HEARTBEAT_TTL="+procHeartbeatTTL.String(),
		"WORQR_REAPER_INTERVAL="+procReaperInterval.String(),
		"WORQR_POLL_INTERVAL="+procPollInterval.String(),
	)
	sess, err := gexec.Start(cmd, GinkgoWriter, GinkgoWriter)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		// SIGKILL also ends a SIGSTOPped process.
		sess.Kill().Wait(10 * time.Second)
	})
	return &workerProc{sess: sess}
}

func (p *workerProc) pid() int { return p.sess.Command.Process.Pid }

// lines returns the complete stdout lines so far, split into words.
func (p *workerProc) lines() [][]string {
	out := string(p.sess.Out.Contents())
	if i := strings.LastIndexByte(out, '\n'); i >= 0 {
		out = out[:i]
	} else {
		return nil
	}
	var ls [][]string
	for _, l := range strings.Split(out, "\n") {
		ls = append(ls, strings.Fields(l))
	}
	return ls
}

// linesOf returns the lines starting with kind.
func (p *workerProc) linesOf(kind string) [][]string {
	var out [][]string
	for _, l := range p.lines() {
		if len(l) > 0 && l[0] == kind {
			out = append(out, l)
		}
	}
	return out
}

// took is a `took <queue> <task_id> <pid> <attempt> <crashes>` line.
type took struct {
	Queue, ID, PID string
	Attempt        int
}

func (p *workerProc) took() []took {
	var out []took
	for _, l := range p.linesOf("took") {
		if len(l) != 6 {
			continue
		}
		n, _ := strconv.Atoi(l[4])
		out = append(out, took{Queue: l[1], ID: l[2], PID: l[3], Attempt: n})
	}
	return out
}

// registered returns the worker ids of the `registered` lines, in order.
func (p *workerProc) registered() []string {
	var out []string
	for _, l := range p.linesOf("registered") {
		if len(l) == 2 {
			out = append(out, l[1])
		}
	}
	return out
}

// timedTrail records when a handler saw each task id.
type timedTrail struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (t *timedTrail) handler() worqr.Handler {
	return worqr.HandlerFunc(func(ctx context.Context, task *worqr.Task) error {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.at == nil {
			t.at = map[string][]time.Time{}
		}
		t.at[task.ID] = append(t.at[task.ID], time.Now())
		return nil
	})
}

func (t *timedTrail) ids() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for id := range t.at {
		out = append(out, id)
	}
	return out
}

func (t *timedTrail) first(id string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.at[id][0]
}

var _ = Describe("Worker processes", func() {
	It("puts back and re-offers the tasks of a worker killed with SIGKILL within TTL + reaper interval, and removes its keys", func(ctx SpecContext) {
		e := newEnv()
		idsA := e.enqueueN("ka", 2)
		idsB := e.enqueueN("kb", 2)
		all := append(append([]string{}, idsA...), idsB...)
		p := startWorkerProc(e, "ka,kb", 2, time.Hour)
		Eventually(ctx, p.registered).WithTimeout(20 * time.Second).Should(HaveLen(1))
		dead := p.registered()[0]
		Eventually(ctx, p.took).WithTimeout(10 * time.Second).Should(HaveLen(4))
		var heldIDs []string
		for _, t := range p.took() {
			heldIDs = append(heldIDs, t.ID)
		}
		Expect(heldIDs).To(ConsistOf(all))
		Expect(e.waiting("ka")).To(BeEmpty())
		Expect(e.waiting("kb")).To(BeEmpty())
		Expect(e.exists(e.keys.Keepalive(dead))).To(BeTrue())
		Expect(e.smembers(e.keys.Workers())).To(ContainElement(dead))
		for _, q := range []string{"ka", "kb"} {
			Expect(e.hkeys(e.qk(q).WorkerQueue(dead))).To(HaveLen(2))
			Expect(e.smembers(e.qk(q).Holders)).To(ContainElement(dead))
		}

		// The peer: an in-process worker on both queues with its reaper on.
		var seen timedTrail
		var rec recorder
		cfg := e.workerConfig(map[string]worqr.QueueConfig{
			"ka": one(seen.handler(), 4),
			"kb": one(seen.handler(), 4),
		}, &rec)
		cfg.ReaperInterval = procReaperInterval
		e.start(nil, cfg)

		Expect(p.sess.Command.Process.Signal(syscall.SIGKILL)).To(Succeed())
		killed := time.Now()
		Eventually(p.sess).WithContext(ctx).WithTimeout(5 * time.Second).Should(gexec.Exit())

		Eventually(ctx, seen.ids).WithTimeout(10 * time.Second).Should(ConsistOf(all))
		bound := procHeartbeatTTL + procReaperInterval + 1500*time.Millisecond
		for _, id := range all {
			delay := seen.first(id).Sub(killed)
			GinkgoWriter.Printf("task %s offered again %s after SIGKILL (bound %s)\n", id, delay, bound)
			Expect(delay).To(BeNumerically("<=", bound), "task %s re-taken %s after the kill", id, delay)
		}
		Eventually(ctx, func() int {
			n := 0
			for _, ev := range rec.all() {
				if ev.Kind == worqr.EventRecovered {
					n += ev.Count
				}
			}
			return n
		}).WithTimeout(2 * time.Second).Should(Equal(4))

		// The dead worker's keys are gone.
		Eventually(ctx, func() []string { return e.smembers(e.keys.Workers()) }).
			WithTimeout(2 * time.Second).ShouldNot(ContainElement(dead))
		Expect(e.exists(e.keys.Keepalive(dead))).To(BeFalse())
		for _, q := range []string{"ka", "kb"} {
			Expect(e.exists(e.qk(q).WorkerQueue(dead))).To(BeFalse())
			Expect(e.smembers(e.qk(q).Holders)).NotTo(ContainElement(dead))
		}
		Expect(e.keysWith(dead)).To(BeEmpty(), "no key names the dead worker")
	}, SpecTimeout(60*time.Second))

	It("refuses the finish of a worker frozen past its TTL (SIGSTOP), which comes back under a new id and never reports the task done", func(ctx SpecContext) {
		e := newEnv()
		id := e.enqueue("zq", "x")
		p := startWorkerProc(e, "zq", 1, 2*time.Second)
		Eventually(ctx, p.registered).WithTimeout(20 * time.Second).Should(HaveLen(1))
		zombie := p.registered()[0]
		Eventually(ctx, p.took).WithTimeout(10 * time.Second).Should(HaveLen(1))
		t := p.took()[0]
		Expect(t.ID).To(Equal(id))

		Expect(syscall.Kill(p.pid(), syscall.SIGSTOP)).To(Succeed())
		stopped := true
		DeferCleanup(func() {
			if stopped {
				_ = syscall.Kill(p.pid(), syscall.SIGCONT)
			}
		})

		// A peer recovers the frozen worker's task, takes it and finishes it.
		var rec recorder
		cfg := e.workerConfig(map[string]worqr.QueueConfig{
			"zq": one(worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil }), 1),
		}, &rec)
		cfg.ReaperInterval = procReaperInterval
		peer := e.start(nil, cfg)
		Eventually(ctx, func() []worqr.EventKind { return rec.kinds(id) }).WithTimeout(10 * time.Second).
			Should(Equal([]worqr.EventKind{worqr.EventDone}))
		Eventually(ctx, func() []string { return e.smembers(e.keys.Workers()) }).
			WithTimeout(2 * time.Second).ShouldNot(ContainElement(zombie))

		// The zombie's finish and give-back are refused and change nothing.
		before := e.snapshot()
		_, err := e.finish(zombie, "zq", t.PID, id)
		Expect(err).To(MatchError(rdb.ErrLost))
		Expect(err).To(MatchError(worqr.ErrTaskLost))
		_, err = e.giveBack(zombie, "zq", t.PID, id)
		Expect(err).To(MatchError(worqr.ErrTaskLost))
		Expect(e.snapshot()).To(Equal(before))

		Expect(syscall.Kill(p.pid(), syscall.SIGCONT)).To(Succeed())
		stopped = false
		// It finds its keepalive gone, gives up its id for a new one...
		Eventually(ctx, func() []string {
			var kinds []string
			for _, l := range p.lines() {
				if len(l) == 2 && (l[0] == "keepalive_lost" || l[0] == "registered") {
					kinds = append(kinds, l[0]+" "+l[1])
				}
			}
			return kinds
		}).WithTimeout(5 * time.Second).Should(HaveLen(3))
		var seq []string
		for _, l := range p.lines() {
			if len(l) == 2 && (l[0] == "keepalive_lost" || l[0] == "registered") {
				seq = append(seq, l[0])
			}
		}
		Expect(seq).To(Equal([]string{"registered", "keepalive_lost", "registered"}))
		Expect(p.linesOf("keepalive_lost")[0]).To(Equal([]string{"keepalive_lost", zombie}))
		fresh := p.registered()[1]
		Expect(fresh).NotTo(Equal(zombie))
		// ...reports the taking lost, never done.
		Eventually(ctx, func() [][]string { return p.linesOf("lost") }).WithTimeout(5 * time.Second).
			Should(ContainElement([]string{"lost", "zq", id, t.PID}))
		Consistently(ctx, func() [][]string { return p.linesOf("done") }).WithTimeout(time.Second).Should(BeEmpty())
		Expect(p.linesOf("cancelled")).To(BeEmpty())

		workers := e.smembers(e.keys.Workers())
		Expect(workers).To(ContainElement(fresh))
		Expect(workers).NotTo(ContainElement(zombie))
		Expect(workers).To(ContainElement(peer.ID()))
		Expect(e.exists(e.keys.Keepalive(fresh))).To(BeTrue())
		Expect(e.exists(e.keys.Keepalive(zombie))).To(BeFalse())
		_, err = e.in.Task(ctx, "zq", id)
		Expect(err).To(MatchError(worqr.ErrTaskNotFound), "the peer's finish stands")
	}, SpecTimeout(60*time.Second))

	It("stops gracefully on SIGTERM: puts a still-running task back at the front, deregisters and exits 0", func(ctx SpecContext) {
		e := newEnv()
		ids := e.enqueueN("sq", 2)
		p := startWorkerProc(e, "sq", 1, time.Hour, "--grace", "300ms")
		Eventually(ctx, p.registered).WithTimeout(20 * time.Second).Should(HaveLen(1))
		w := p.registered()[0]
		Eventually(ctx, p.took).WithTimeout(10 * time.Second).Should(HaveLen(1))
		Expect(p.took()[0].ID).To(Equal(ids[0]))
		Expect(e.waiting("sq")).To(Equal(ids[1:]))

		Eventually(ctx, p.sess.Terminate()).WithTimeout(10 * time.Second).Should(gexec.Exit(0))
		Expect(e.waiting("sq")).To(Equal(ids), "the running task is back at the front")
		Expect(e.smembers(e.keys.Workers())).NotTo(ContainElement(w))
		Expect(e.keysWith(w)).To(BeEmpty(), "no key names the stopped worker")
		Expect(e.keysWith(":wq:")).To(BeEmpty())
		Expect(p.linesOf("done")).To(BeEmpty())
	}, SpecTimeout(60*time.Second))

	It("refuses the finish of an in-process worker whose heartbeat paused past its TTL, and re-registers it under a new id", func(ctx SpecContext) {
		e := newEnv()
		var zrec, prec recorder
		started := make(chan *worqr.Task, 1)
		release := newGate()
		zcfg := e.workerConfig(map[string]worqr.QueueConfig{
			// Ignores its context: it finishes as a frozen process would on
			// waking up.
			"pz": one(worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
				started <- t
				<-release.ch
				return nil
			}), 1),
		}, &zrec)
		zcfg.DisableReaper = true
		clock := newHeartClock(zcfg.HeartbeatInterval)
		z := e.startWithClock(nil, zcfg, clock)
		id := e.enqueue("pz", "x")
		var t *worqr.Task
		Eventually(ctx, started).WithTimeout(3 * time.Second).Should(Receive(&t))
		Expect(t.ID).To(Equal(id))
		zombie := z.ID()
		Expect(t.WorkerID()).To(Equal(zombie))

		clock.freeze() // as if the process were frozen: no more beats
		Eventually(ctx, func() bool { return e.exists(e.keys.Keepalive(zombie)) }).
			WithTimeout(3 * time.Second).WithPolling(20 * time.Millisecond).Should(BeFalse())
		pcfg := e.workerConfig(map[string]worqr.QueueConfig{
			"pz": one(worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil }), 1),
		}, &prec)
		pcfg.DisableReaper = true
		e.start(nil, pcfg)
		Expect(e.pass()).To(Equal(1))
		Eventually(ctx, func() []worqr.EventKind { return prec.kinds(id) }).WithTimeout(5 * time.Second).
			Should(Equal([]worqr.EventKind{worqr.EventDone}))

		before := e.snapshot()
		_, err := e.finish(zombie, "pz", t.PID(), id)
		Expect(err).To(MatchError(worqr.ErrTaskLost))
		Expect(e.snapshot()).To(Equal(before))

		// The zombie's own finish is refused too.
		release.open()
		Eventually(ctx, func() []worqr.Event {
			var out []worqr.Event
			for _, ev := range zrec.all() {
				if ev.TaskID == id {
					out = append(out, ev)
				}
			}
			return out
		}).WithTimeout(3 * time.Second).Should(ConsistOf(
			And(HaveField("Kind", worqr.EventLost), HaveField("Err", MatchError(worqr.ErrTaskLost))),
		))
		Expect(e.snapshot()).To(Equal(before))

		clock.thaw(zcfg.HeartbeatTTL) // it wakes up a TTL later
		lifecycle := func() []string {
			var kinds []string
			for _, ev := range zrec.all() {
				if ev.Kind == worqr.EventKeepaliveLost || ev.Kind == worqr.EventRegistered {
					kinds = append(kinds, string(ev.Kind)+" "+ev.WorkerID)
				}
			}
			return kinds
		}
		Eventually(ctx, lifecycle).WithTimeout(3 * time.Second).Should(HaveLen(3))
		Expect(z.ID()).NotTo(Equal(zombie))
		Expect(lifecycle()).To(Equal([]string{"registered " + zombie, "keepalive_lost " + zombie, "registered " + z.ID()}))
		workers := e.smembers(e.keys.Workers())
		Expect(workers).To(ContainElement(z.ID()))
		Expect(workers).NotTo(ContainElement(zombie))
		Expect(zrec.kinds(id)).NotTo(ContainElement(worqr.EventDone))
	}, SpecTimeout(20*time.Second))
})
