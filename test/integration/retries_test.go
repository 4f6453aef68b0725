package integration_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gomodule/redigo/redis"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gexec"
	"github.com/rs/xid"

	"github.com/worqr/worqr-go/worqr"
)

// Due times are whole milliseconds of Redis's clock (the scripts truncate
// TIME to ms), so a task may become due up to 1ms before the exact instant:
// the only tolerance the "not before" checks below allow. Every such check
// measures on the local clock from a point known to come before the due time
// was fixed (a handler's return precedes its finish; t0 precedes an enqueue),
// so the measured gap is never longer than the real one.
const rtDueGrain = time.Millisecond

var _ = Describe("Retries, delays and the dead set", func() {
	It("runs a task that fails twice then succeeds exactly 3 times (MaxAttempts 3), each retry no earlier than its backoff", func(ctx SpecContext) {
		e := newEnv()
		const delay = 300 * time.Millisecond
		var runs rtRuns
		var rec recorder
		var mu sync.Mutex
		var backoffAttempts []int
		e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"rq": {
				Concurrency: 2, MaxAttempts: 3,
				Handler: runs.handler(func(_ context.Context, t *worqr.Task) error {
					if t.Attempt < 3 {
						return fmt.Errorf("failing attempt %d on purpose", t.Attempt)
					}
					return nil
				}),
				Backoff: func(attempt int, _ error) time.Duration {
					mu.Lock()
					defer mu.Unlock()
					backoffAttempts = append(backoffAttempts, attempt)
					return delay
				},
			},
		}, &rec))
		id := e.enqueue("rq", "flaky")

		Eventually(ctx, func() []worqr.EventKind { return rec.kinds(id) }).WithTimeout(5 * time.Second).
			Should(Equal([]worqr.EventKind{worqr.EventRetry, worqr.EventRetry, worqr.EventDone}))
		Consistently(ctx, runs.count(id)).WithTimeout(500 * time.Millisecond).Should(Equal(3))
		Expect(runs.attempts(id)).To(Equal([]int{1, 2, 3}))
		mu.Lock()
		Expect(backoffAttempts).To(Equal([]int{1, 2}))
		mu.Unlock()
		rs := runs.of(id)
		for i := 1; i < len(rs); i++ {
			gap := rs[i].Start.Sub(rs[i-1].Return)
			GinkgoWriter.Printf("attempt %d started %s after attempt %d returned (backoff %s)\n", i+1, gap, i, delay)
			Expect(gap).To(BeNumerically(">=", delay-rtDueGrain), "attempt %d ran before its due time", i+1)
		}
		_, err := e.rtTask("rq", id)
		Expect(err).To(MatchError(worqr.ErrTaskNotFound))
		Expect(e.rtDeadIDs("rq")()).To(BeEmpty())
	}, SpecTimeout(15*time.Second))

	It("buries a task whose attempts are used up (queue or per-task MaxAttempts) with its last error, reason, count and worker, and never runs it again", func(ctx SpecContext) {
		e := newEnv()
		var runs rtRuns
		var rec recorder
		w := e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"mq": {
				Concurrency: 2, MaxAttempts: 3, Backoff: rtFixed(50 * time.Millisecond),
				Handler: runs.handler(func(_ context.Context, t *worqr.Task) error {
					return fmt.Errorf("boom on attempt %d", t.Attempt)
				}),
			},
		}, &rec))
		id := e.enqueue("mq", "doomed")
		short, err := e.rtEnqueue("mq", "doomed sooner", &worqr.EnqueueOpts{MaxAttempts: 2})
		Expect(err).NotTo(HaveOccurred())

		Eventually(ctx, e.rtDeadIDs("mq")).WithTimeout(5 * time.Second).Should(ConsistOf(id, short))
		Consistently(ctx, func() []int { return []int{runs.count(id)(), runs.count(short)()} }).
			WithTimeout(600 * time.Millisecond).Should(Equal([]int{3, 2}))
		Expect(rec.kinds(id)).To(Equal([]worqr.EventKind{worqr.EventRetry, worqr.EventRetry, worqr.EventDead}))
		Expect(rec.kinds(short)).To(Equal([]worqr.EventKind{worqr.EventRetry, worqr.EventDead}))

		for _, c := range []struct {
			id, payload string
			attempts    int
		}{{id, "doomed", 3}, {short, "doomed sooner", 2}} {
			info := e.rtDeadTask("mq", c.id)
			Expect(info).NotTo(BeNil())
			Expect(info.State).To(Equal(worqr.StateDead))
			Expect(info.DeadReason).To(Equal("failed"))
			Expect(info.LastError).To(Equal(fmt.Sprintf("boom on attempt %d", c.attempts)))
			Expect(info.Failures).To(Equal(c.attempts))
			Expect(info.DiedOn).To(Equal(w.ID()))
			Expect(info.DiedAt).NotTo(BeZero())
			Expect(string(info.Payload)).To(Equal(c.payload))
			Expect(runs.attempts(c.id)).To(HaveLen(c.attempts))
		}
		Expect(e.waiting("mq")).To(BeEmpty())
		Expect(e.exists(e.qk("mq").Scheduled)).To(BeFalse())
	}, SpecTimeout(15*time.Second))

	It("buries a task at once after one run when its handler returns SkipRetry", func(ctx SpecContext) {
		e := newEnv()
		var runs rtRuns
		var rec recorder
		backoff := &rtBackoff{d: 10 * time.Millisecond}
		w := e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"sq": {
				Concurrency: 1, MaxAttempts: 5, Backoff: backoff.fn,
				Handler: runs.handler(func(context.Context, *worqr.Task) error {
					return worqr.SkipRetry(errors.New("cannot decode payload"))
				}),
			},
		}, &rec))
		id := e.enqueue("sq", "garbled")

		Eventually(ctx, e.rtDeadIDs("sq")).WithTimeout(5 * time.Second).Should(Equal([]string{id}))
		Consistently(ctx, runs.count(id)).WithTimeout(500 * time.Millisecond).Should(Equal(1))
		Expect(rec.kinds(id)).To(Equal([]worqr.EventKind{worqr.EventDead}))
		info := e.rtDeadTask("sq", id)
		Expect(info.DeadReason).To(Equal("failed"))
		Expect(info.LastError).To(Equal("cannot decode payload"), "the error as the handler wrote it")
		Expect(info.Failures).To(Equal(1))
		Expect(info.DiedOn).To(Equal(w.ID()))
		Expect(backoff.calls.Load()).To(BeZero())
	}, SpecTimeout(15*time.Second))

	It("retries a task whose handler returns RetryAfter(d) no earlier than d, ignoring the queue's Backoff", func(ctx SpecContext) {
		e := newEnv()
		const after = 500 * time.Millisecond
		var runs rtRuns
		var rec recorder
		backoff := &rtBackoff{d: 10 * time.Millisecond} // would retry far sooner
		e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"aq": {
				Concurrency: 1, MaxAttempts: 5, Backoff: backoff.fn,
				Handler: runs.handler(func(_ context.Context, t *worqr.Task) error {
					if t.Attempt == 1 {
						return worqr.RetryAfter(after, errors.New("rate limited"))
					}
					return nil
				}),
			},
		}, &rec))
		id := e.enqueue("aq", "x")

		Eventually(ctx, func() []worqr.EventKind { return rec.kinds(id) }).WithTimeout(5 * time.Second).
			Should(Equal([]worqr.EventKind{worqr.EventRetry, worqr.EventDone}))
		rs := runs.of(id)
		Expect(rs).To(HaveLen(2))
		gap := rs[1].Start.Sub(rs[0].Return)
		GinkgoWriter.Printf("retry started %s after the first run returned (RetryAfter %s)\n", gap, after)
		Expect(gap).To(BeNumerically(">=", after-rtDueGrain))
		Expect(backoff.calls.Load()).To(BeZero())
	}, SpecTimeout(15*time.Second))

	It("cancels the handler's context on timeout (queue Timeout, EnqueueOpts.Timeout overriding it) with a TimeoutError cause, and counts it as a failed attempt", func(ctx SpecContext) {
		e := newEnv()
		const (
			queueTimeout = 150 * time.Millisecond
			taskTimeout  = 400 * time.Millisecond
		)
		var (
			runs   rtRuns
			rec    recorder
			mu     sync.Mutex
			causes = map[string][]error{}
		)
		release := newGate()
		e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"tq": {
				Concurrency: 2, MaxAttempts: 2, Timeout: queueTimeout, Backoff: rtFixed(50 * time.Millisecond),
				Handler: runs.handler(func(ctx context.Context, t *worqr.Task) error {
					select {
					case <-ctx.Done():
						mu.Lock()
						causes[t.ID] = append(causes[t.ID], context.Cause(ctx))
						mu.Unlock()
						return ctx.Err()
					case <-release.ch:
						return nil
					}
				}),
			},
		}, &rec))
		byQueue := e.enqueue("tq", "queue timeout")
		byTask, err := e.rtEnqueue("tq", "task timeout", &worqr.EnqueueOpts{Timeout: taskTimeout})
		Expect(err).NotTo(HaveOccurred())

		Eventually(ctx, e.rtDeadIDs("tq")).WithTimeout(5 * time.Second).Should(ConsistOf(byQueue, byTask))
		for _, c := range []struct {
			id      string
			timeout time.Duration
		}{{byQueue, queueTimeout}, {byTask, taskTimeout}} {
			Expect(rec.kinds(c.id)).To(Equal([]worqr.EventKind{worqr.EventRetry, worqr.EventDead}),
				"a timed-out run is a failed attempt, and a retry follows")
			mu.Lock()
			got := append([]error(nil), causes[c.id]...)
			mu.Unlock()
			Expect(got).To(HaveLen(2))
			for _, cause := range got {
				var te *worqr.TimeoutError
				Expect(errors.As(cause, &te)).To(BeTrue(), "context.Cause is %v", cause)
				Expect(te.Timeout).To(Equal(c.timeout))
			}
			info := e.rtDeadTask("tq", c.id)
			Expect(info.Failures).To(Equal(2))
			Expect(info.DeadReason).To(Equal("failed"))
			Expect(info.LastError).To(ContainSubstring("timed out after " + c.timeout.String()))
		}
		// The per-task timeout replaced the queue's: its runs outlived it.
		for _, r := range runs.of(byTask) {
			Expect(r.Return.Sub(r.Start)).To(BeNumerically(">", queueTimeout+100*time.Millisecond))
		}
	}, SpecTimeout(15*time.Second))

	It("moves each of 5,000 due tasks exactly once when ten peers run the mover at the same moment", func(ctx SpecContext) {
		const (
			total = 5000
			batch = 1000
			peers = 10
		)
		e := newEnv()
		e.register(time.Minute, "mv") // a known queue: the movers look at it
		at := time.Now().Add(-time.Minute)
		var ids []string
		for b := 0; b < total/batch; b++ {
			payloads := make([][]byte, batch)
			for i := range payloads {
				payloads[i] = []byte(fmt.Sprintf("due-%d", b*batch+i))
			}
			got, err := e.client.EnqueueBatch(ctx, "mv", payloads, &worqr.EnqueueOpts{At: at})
			Expect(err).NotTo(HaveOccurred())
			ids = append(ids, got...)
		}
		qk := e.qk("mv")
		Expect(redis.Int(e.do("ZCARD", qk.Scheduled))).To(Equal(total))
		Expect(e.waiting("mv")).To(BeEmpty())

		barrier := make(chan struct{})
		var wg sync.WaitGroup
		moved := make([]int, peers)
		errs := make([]error, peers)
		for i := 0; i < peers; i++ {
			r := e.reaper(srv.TagCheckedPool(newTagWatch()))
			wg.Add(1)
			go func(i int) {
				defer GinkgoRecover()
				defer wg.Done()
				<-barrier
				moved[i], errs[i] = r.Move(ctx)
			}(i)
		}
		close(barrier)
		wg.Wait()
		sum := 0
		for i := range errs {
			Expect(errs[i]).NotTo(HaveOccurred())
			sum += moved[i]
		}
		GinkgoWriter.Printf("moved per peer: %v\n", moved)
		Expect(sum).To(Equal(total), "moved per peer: %v", moved)

		waiting := e.waiting("mv")
		Expect(waiting).To(HaveLen(total))
		slices.Sort(waiting)
		want := slices.Clone(ids)
		slices.Sort(want)
		Expect(waiting).To(Equal(want), "each id exactly once")
		Expect(redis.Int(e.do("ZCARD", qk.Scheduled))).To(BeZero())
		for _, id := range []string{ids[0], ids[total/2], ids[total-1]} {
			info, err := e.rtTask("mv", id)
			Expect(err).NotTo(HaveOccurred())
			Expect(info.State).To(Equal(worqr.StateQueued))
		}
		n, err := e.reaper(nil).Move(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(n).To(BeZero(), "a later move finds nothing due")
		Expect(e.waiting("mv")).To(HaveLen(total))
	}, SpecTimeout(30*time.Second))

	It("does not take delayed tasks (Delay, At) before their time and takes them within about a reaper interval after", func(ctx SpecContext) {
		e := newEnv()
		const (
			wait  = time.Second
			slack = 400 * time.Millisecond
		)
		var runs rtRuns
		cfg := e.workerConfig(map[string]worqr.QueueConfig{
			"dl": one(runs.handler(func(context.Context, *worqr.Task) error { return nil }), 2),
		}, nil)
		Expect(cfg.ReaperInterval).To(Equal(100 * time.Millisecond))
		e.start(nil, cfg)

		t0 := time.Now()
		byDelay, err := e.rtEnqueue("dl", "delay", &worqr.EnqueueOpts{Delay: wait})
		Expect(err).NotTo(HaveOccurred())
		t1 := time.Now()
		at := time.Now().Add(wait)
		byAt, err := e.rtEnqueue("dl", "at", &worqr.EnqueueOpts{At: at})
		Expect(err).NotTo(HaveOccurred())

		info, err := e.rtTask("dl", byAt)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.State).To(Equal(worqr.StateScheduled))
		Expect(info.DueAt).To(Equal(time.UnixMilli(at.UnixMilli())))
		info, err = e.rtTask("dl", byDelay)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.State).To(Equal(worqr.StateScheduled))
		Expect(e.waiting("dl")).To(BeEmpty())

		Eventually(ctx, runs.ids).WithTimeout(5 * time.Second).Should(ConsistOf(byDelay, byAt))
		Consistently(ctx, func() []int { return []int{runs.count(byDelay)(), runs.count(byAt)()} }).
			WithTimeout(300 * time.Millisecond).Should(Equal([]int{1, 1}))
		bound := cfg.ReaperInterval + slack

		sd := runs.of(byDelay)[0].Start
		GinkgoWriter.Printf("Delay task: taken %s after enqueue (delay %s)\n", sd.Sub(t0), wait)
		Expect(sd.Sub(t0)).To(BeNumerically(">=", wait-rtDueGrain), "taken before its delay")
		Expect(sd.Sub(t1)).To(BeNumerically("<=", wait+bound), "taken too long after its delay")

		sa := runs.of(byAt)[0].Start
		GinkgoWriter.Printf("At task: taken %s after its time\n", sa.Sub(at))
		Expect(sa.Sub(at)).To(BeNumerically(">=", -rtDueGrain), "taken before its time")
		Expect(sa.Sub(at)).To(BeNumerically("<=", bound), "taken too long after its time")
	}, SpecTimeout(15*time.Second))

	It("buries a task whose workers were killed MaxCrashes times as crashed, while the queue keeps flowing", func(ctx SpecContext) {
		e := newEnv()
		poison := e.enqueue("pq", "poison")
		p1 := rtStartStuckProc(e, "pq")
		Eventually(ctx, p1.took).WithTimeout(20 * time.Second).
			Should(ConsistOf(And(HaveField("ID", poison), HaveField("Attempt", 1))))

		// The healthy peer: does every other task at once. It may never see
		// the poison: it is busy with a plug while the poison is offered to
		// the next process, and buries it (MaxCrashes 2, like the processes)
		// once it has crashed two workers.
		var done trail
		var sawPoison atomic.Bool
		plugged := make(chan string, 1)
		unplug := newGate()
		w := e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"pq": {Concurrency: 1, MaxCrashes: 2, Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
				switch string(t.Payload) {
				case "poison":
					sawPoison.Store(true)
				case "plug":
					plugged <- t.ID
					<-unplug.ch
				default:
					done.add(t.ID)
				}
				return nil
			})},
		}, nil))
		flows := func(n int) {
			GinkgoHelper()
			ids := e.enqueueN("pq", n)
			Eventually(ctx, done.get).WithTimeout(5 * time.Second).Should(ContainElements(ids))
		}
		kill := func(p *workerProc) {
			GinkgoHelper()
			Expect(p.sess.Command.Process.Signal(syscall.SIGKILL)).To(Succeed())
			Eventually(p.sess).WithContext(ctx).WithTimeout(5 * time.Second).Should(gexec.Exit())
		}
		flows(5)

		// Crash 1: the healthy worker holds a plug, so the poison can only go
		// to the fresh process p2.
		plug := e.enqueue("pq", "plug")
		Eventually(ctx, plugged).WithTimeout(5 * time.Second).Should(Receive(Equal(plug)))
		p2 := rtStartStuckProc(e, "pq")
		Eventually(ctx, p2.registered).WithTimeout(20 * time.Second).Should(HaveLen(1))
		Expect(e.waiting("pq")).To(BeEmpty())
		kill(p1)
		Eventually(ctx, p2.took).WithTimeout(10*time.Second).
			Should(ConsistOf(And(HaveField("ID", poison), HaveField("Attempt", 1))), "a crash is not an attempt")
		info, err := e.rtTask("pq", poison)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.Crashes).To(Equal(1))
		Expect(info.Failures).To(BeZero())
		Expect(info.State).To(Equal(worqr.StateActive))
		Expect(info.WorkerID).To(Equal(p2.registered()[0]))
		unplug.open()
		flows(5)

		// Crash 2: the next taker buries the poison instead of running it.
		kill(p2)
		flows(5)
		Eventually(ctx, func() *worqr.TaskInfo { return e.rtDeadTask("pq", poison) }).
			WithTimeout(10 * time.Second).ShouldNot(BeNil())
		info = e.rtDeadTask("pq", poison)
		Expect(info.DeadReason).To(HavePrefix("crashed"))
		Expect(info.Crashes).To(Equal(2))
		Expect(info.Failures).To(BeZero())
		Expect(info.DiedOn).To(Equal(w.ID()))
		Expect(string(info.Payload)).To(Equal("poison"))
		flows(5)
		Expect(sawPoison.Load()).To(BeFalse(), "the healthy worker never ran the poison")
		Expect(p1.took()).To(HaveLen(1))
		Expect(p2.took()).To(HaveLen(1))
		Expect(e.waiting("pq")).To(BeEmpty())
	}, SpecTimeout(60*time.Second))

	It("requeues one dead task (counters reset, it runs again) and then all the others", func(ctx SpecContext) {
		e := newEnv()
		var failRuns rtRuns
		w1 := e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"dq": one(failRuns.handler(func(_ context.Context, t *worqr.Task) error {
				return worqr.SkipRetry(fmt.Errorf("bad %s", t.Payload))
			}), 1),
		}, nil))
		a := e.enqueue("dq", "a")
		b := e.enqueue("dq", "b")
		c := e.enqueue("dq", "c")
		Eventually(ctx, e.rtDeadIDs("dq")).WithTimeout(5 * time.Second).Should(ConsistOf(a, b, c))
		Expect(w1.Stop(ctx)).To(Succeed())

		n, err := e.in.RequeueDead(ctx, "dq", a, xid.New().String())
		Expect(err).NotTo(HaveOccurred())
		Expect(n).To(Equal(1), "only a was dead")
		Expect(e.waiting("dq")).To(Equal([]string{a}))
		info, err := e.rtTask("dq", a)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.State).To(Equal(worqr.StateQueued))
		Expect(info.Failures).To(BeZero())
		Expect(info.Crashes).To(BeZero())
		Expect(info.DeadReason).To(BeEmpty())
		Expect(info.DiedOn).To(BeEmpty())
		Expect(info.DiedAt).To(BeZero())
		Expect(string(info.Payload)).To(Equal("a"))
		Expect(e.rtDeadIDs("dq")()).To(ConsistOf(b, c))

		var runs rtRuns
		e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"dq": one(runs.handler(func(context.Context, *worqr.Task) error { return nil }), 1),
		}, nil))
		Eventually(ctx, runs.returned(a)).WithTimeout(5 * time.Second).Should(Equal(1))
		Expect(runs.attempts(a)).To(Equal([]int{1}), "its failures were reset")
		Consistently(ctx, runs.ids).WithTimeout(300 * time.Millisecond).Should(Equal([]string{a}))
		Expect(e.rtDeadIDs("dq")()).To(ConsistOf(b, c))

		n, err = e.in.RequeueAllDead(ctx, "dq", nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(n).To(Equal(2))
		Eventually(ctx, runs.ids).WithTimeout(5 * time.Second).Should(ConsistOf(a, b, c))
		Expect(runs.attempts(b)).To(Equal([]int{1}))
		Expect(runs.attempts(c)).To(Equal([]int{1}))
		_, total := e.rtDead("dq")
		Expect(total).To(BeZero())
		Expect(e.exists(e.qk("dq").Dead)).To(BeFalse())
		Expect(failRuns.ids()).To(ConsistOf(a, b, c))
		Expect(runs.count(a)()).To(Equal(1))
	}, SpecTimeout(15*time.Second))

	It("deletes one dead task and purges the rest, leaving none of their keys", func(ctx SpecContext) {
		e := newEnv()
		e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"dd": one(worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
				return worqr.SkipRetry(errors.New("no"))
			}), 2),
		}, nil))
		ids := e.enqueueN("dd", 4)
		Eventually(ctx, e.rtDeadIDs("dd")).WithTimeout(5 * time.Second).Should(ConsistOf(ids))
		for _, id := range ids {
			Expect(e.keysWith(id)).NotTo(BeEmpty(), "a dead task keeps its hash")
		}

		n, err := e.in.DeleteDead(ctx, "dd", ids[0], xid.New().String())
		Expect(err).NotTo(HaveOccurred())
		Expect(n).To(Equal(1))
		Expect(e.keysWith(ids[0])).To(BeEmpty())
		_, err = e.rtTask("dd", ids[0])
		Expect(err).To(MatchError(worqr.ErrTaskNotFound))
		Expect(e.rtDeadIDs("dd")()).To(ConsistOf(ids[1:]))

		n, err = e.in.DeleteAllDead(ctx, "dd", nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(n).To(Equal(3))
		for _, id := range ids {
			Expect(e.keysWith(id)).To(BeEmpty())
		}
		Expect(e.exists(e.qk("dd").Dead)).To(BeFalse())
		_, total := e.rtDead("dd")
		Expect(total).To(BeZero())
		Expect(e.waiting("dd")).To(BeEmpty())
	}, SpecTimeout(15*time.Second))

	It("keeps only the DeadMaxCount newest dead tasks and deletes the trimmed ones' hashes", func(ctx SpecContext) {
		e := newEnv()
		var order trail
		var rec recorder
		ids := e.enqueueN("cap", 8)
		e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"cap": {Concurrency: 1, DeadMaxCount: 5, Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
				order.add(t.ID)
				return worqr.SkipRetry(errors.New("no"))
			})},
		}, &rec))
		Eventually(ctx, func() int { return rec.count(worqr.EventDead) }).WithTimeout(5 * time.Second).Should(Equal(8))
		died := order.get()
		Expect(died).To(Equal(ids), "one at a time, in queue order")

		infos, total := e.rtDead("cap")
		Expect(total).To(Equal(5))
		var got []string
		for _, in := range infos {
			got = append(got, in.ID)
		}
		newest := slices.Clone(died[3:])
		slices.Reverse(newest)
		Expect(got).To(Equal(newest), "the 5 newest, newest first")
		for _, id := range died[:3] {
			Expect(e.exists(e.qk("cap").Task(id))).To(BeFalse(), "trimmed task %s keeps no hash", id)
		}
		for _, id := range died[3:] {
			Expect(e.exists(e.qk("cap").Task(id))).To(BeTrue(), "dead task %s keeps its hash", id)
		}
	}, SpecTimeout(15*time.Second))

	It("drops dead tasks older than DeadMaxAge, with their hashes, when a move runs", func(ctx SpecContext) {
		e := newEnv()
		const age = 300 * time.Millisecond
		var runs rtRuns
		cfg := e.workerConfig(map[string]worqr.QueueConfig{
			"old": {Concurrency: 2, DeadMaxAge: age, Handler: runs.handler(func(context.Context, *worqr.Task) error {
				return worqr.SkipRetry(errors.New("no"))
			})},
		}, nil)
		cfg.DisableReaper = true // only the spec's moves run
		e.start(nil, cfg)
		ids := e.enqueueN("old", 2)
		Eventually(ctx, e.rtDeadIDs("old")).WithTimeout(5 * time.Second).Should(ConsistOf(ids))
		var lastReturn time.Time
		for _, id := range ids {
			for _, r := range runs.of(id) {
				if r.Return.After(lastReturn) {
					lastReturn = r.Return
				}
			}
		}

		r := e.reaper(nil)
		Eventually(ctx, func() int {
			_, err := r.Move(ctx)
			Expect(err).NotTo(HaveOccurred())
			_, total := e.rtDead("old")
			return total
		}).WithTimeout(5 * time.Second).WithPolling(20 * time.Millisecond).Should(BeZero())
		gone := time.Now()
		GinkgoWriter.Printf("dead tasks gone %s after the last death (DeadMaxAge %s)\n", gone.Sub(lastReturn), age)
		Expect(gone.Sub(lastReturn)).To(BeNumerically(">=", age-rtDueGrain), "trimmed before DeadMaxAge passed")
		for _, id := range ids {
			Expect(e.keysWith(id)).To(BeEmpty())
		}
	}, SpecTimeout(15*time.Second))

	It("retries a task whose handler panicked, storing the panic value and stack as its last error, and keeps serving", func(ctx SpecContext) {
		e := newEnv()
		var runs rtRuns
		var rec recorder
		var mu sync.Mutex
		seen := map[string]*worqr.TaskInfo{} // what Redis held during the retry
		w := e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"panics": {
				Concurrency: 1, MaxAttempts: 3, Backoff: rtFixed(50 * time.Millisecond),
				Handler: runs.handler(func(ctx context.Context, t *worqr.Task) error {
					if string(t.Payload) == "explode" && t.Attempt == 1 {
						rtExplode(t.ID)
					}
					info, err := e.in.Task(ctx, "panics", t.ID)
					if err != nil {
						return err
					}
					mu.Lock()
					seen[t.ID] = info
					mu.Unlock()
					return nil
				}),
			},
		}, &rec))
		workerID := w.ID()
		id := e.enqueue("panics", "explode")

		Eventually(ctx, func() []worqr.EventKind { return rec.kinds(id) }).WithTimeout(5 * time.Second).
			Should(Equal([]worqr.EventKind{worqr.EventRetry, worqr.EventDone}))
		Expect(runs.attempts(id)).To(Equal([]int{1, 2}))
		var retryErr error
		for _, ev := range rec.all() {
			if ev.TaskID == id && ev.Kind == worqr.EventRetry {
				retryErr = ev.Err
			}
		}
		var pe *worqr.PanicError
		Expect(errors.As(retryErr, &pe)).To(BeTrue(), "the retry event carries a PanicError: %v", retryErr)
		Expect(pe.Value).To(Equal("kaboom " + id))

		mu.Lock()
		info := seen[id]
		mu.Unlock()
		Expect(info).NotTo(BeNil())
		Expect(info.Failures).To(Equal(1))
		Expect(info.LastError).To(ContainSubstring("kaboom " + id))
		Expect(info.LastError).To(ContainSubstring("goroutine "))
		Expect(info.LastError).To(ContainSubstring("rtExplode"))

		// The same worker, under the same id, goes on serving.
		next := e.enqueue("panics", "calm")
		Eventually(ctx, func() []worqr.EventKind { return rec.kinds(next) }).WithTimeout(5 * time.Second).
			Should(Equal([]worqr.EventKind{worqr.EventDone}))
		Expect(w.ID()).To(Equal(workerID))
	}, SpecTimeout(15*time.Second))

	It("retries a task whose handler ended its goroutine with runtime.Goexit (as t.FailNow does), and keeps serving on every slot", func(ctx SpecContext) {
		e := newEnv()
		var runs rtRuns
		var rec recorder
		w := e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"exits": {
				Concurrency: 1, MaxAttempts: 3, Backoff: rtFixed(50 * time.Millisecond),
				Handler: runs.handler(func(ctx context.Context, t *worqr.Task) error {
					if string(t.Payload) == "exit" && t.Attempt == 1 {
						runtime.Goexit()
					}
					return nil
				}),
			},
		}, &rec))
		id := e.enqueue("exits", "exit")
		Eventually(ctx, func() []worqr.EventKind { return rec.kinds(id) }).WithTimeout(5 * time.Second).
			Should(Equal([]worqr.EventKind{worqr.EventRetry, worqr.EventDone}))
		Expect(runs.attempts(id)).To(Equal([]int{1, 2}))
		for _, ev := range rec.all() {
			if ev.TaskID == id && ev.Kind == worqr.EventRetry {
				Expect(ev.Err).To(MatchError(worqr.ErrHandlerExited))
			}
		}
		// Its one handler slot still serves: a Goexit on every first
		// attempt, five times over, and then plain tasks.
		var ids []string
		for range 5 {
			ids = append(ids, e.enqueue("exits", "exit"))
		}
		ids = append(ids, e.enqueue("exits", "calm"))
		for _, id := range ids {
			Eventually(ctx, func() []worqr.EventKind { return rec.kinds(id) }).WithTimeout(10*time.Second).
				Should(ContainElement(worqr.EventDone), "task %s ends done", id)
		}
		Expect(e.hkeys(e.qk("exits").WorkerQueue(w.ID()))).To(BeEmpty(), "nothing stays held")
	}, SpecTimeout(30*time.Second))

	It("lets one of ten concurrent enqueues with the same UniqueKey through and holds the key until the task ends (done, dead, cancelled), retries included", func(ctx SpecContext) {
		e := newEnv()
		const key = "user-42"
		uopts := &worqr.EnqueueOpts{UniqueKey: key, UniqueTTL: time.Minute}
		isDup := func(err error, queue, holder string) {
			GinkgoHelper()
			Expect(err).To(MatchError(worqr.ErrDuplicate))
			var de *worqr.DuplicateError
			Expect(errors.As(err, &de)).To(BeTrue(), "%v is a *DuplicateError", err)
			Expect(de.HolderID).To(Equal(holder))
			Expect(de.UniqueKey).To(Equal(key))
			Expect(de.Queue).To(Equal(queue))
		}

		// Ten at once, no worker yet.
		const racers = 10
		barrier := make(chan struct{})
		var wg sync.WaitGroup
		ids := make([]string, racers)
		errs := make([]error, racers)
		for i := 0; i < racers; i++ {
			wg.Add(1)
			go func(i int) {
				defer GinkgoRecover()
				defer wg.Done()
				<-barrier
				ids[i], errs[i] = e.client.Enqueue(ctx, "uq", []byte(fmt.Sprintf("racer-%d", i)), uopts)
			}(i)
		}
		close(barrier)
		wg.Wait()
		var winner string
		for i := range errs {
			if errs[i] == nil {
				Expect(winner).To(BeEmpty(), "two enqueues got the key")
				winner = ids[i]
			}
		}
		Expect(winner).NotTo(BeEmpty())
		for i := range errs {
			if ids[i] != winner {
				isDup(errs[i], "uq", winner)
			}
		}
		Expect(e.waiting("uq")).To(Equal([]string{winner}))

		// Released on done.
		var rec recorder
		running := make(chan string, 1)
		finish := newGate()
		e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"uq": {Concurrency: 1, MaxAttempts: 3, Backoff: rtFixed(500 * time.Millisecond),
				Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
					switch string(t.Payload) {
					case "dead":
						return worqr.SkipRetry(errors.New("no"))
					case "retry":
						if t.Attempt == 1 {
							return errors.New("not yet")
						}
						running <- t.ID
						<-finish.ch
					}
					return nil
				})},
		}, &rec))
		Eventually(ctx, func() []worqr.EventKind { return rec.kinds(winner) }).WithTimeout(5 * time.Second).
			Should(Equal([]worqr.EventKind{worqr.EventDone}))

		// Released on dead.
		dead, err := e.rtEnqueue("uq", "dead", uopts)
		Expect(err).NotTo(HaveOccurred(), "the key is free once its task is done")
		Eventually(ctx, e.rtDeadIDs("uq")).WithTimeout(5 * time.Second).Should(Equal([]string{dead}))

		// Held while the task waits for a retry and while it runs again.
		retry, err := e.rtEnqueue("uq", "retry", uopts)
		Expect(err).NotTo(HaveOccurred(), "the key is free once its task is dead")
		Eventually(ctx, func() []worqr.EventKind { return rec.kinds(retry) }).WithTimeout(5 * time.Second).
			Should(Equal([]worqr.EventKind{worqr.EventRetry}))
		info, err := e.rtTask("uq", retry)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.State).To(Equal(worqr.StateScheduled))
		_, err = e.rtEnqueue("uq", "again", uopts)
		isDup(err, "uq", retry)
		info, err = e.rtTask("uq", retry)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.State).To(Equal(worqr.StateScheduled), "the duplicate was refused while the retry was scheduled")
		Eventually(ctx, running).WithTimeout(5 * time.Second).Should(Receive(Equal(retry)))
		_, err = e.rtEnqueue("uq", "again", uopts)
		isDup(err, "uq", retry)
		finish.open()
		Eventually(ctx, func() []worqr.EventKind { return rec.kinds(retry) }).WithTimeout(5 * time.Second).
			Should(Equal([]worqr.EventKind{worqr.EventRetry, worqr.EventDone}))
		last, err := e.rtEnqueue("uq", "last", uopts)
		Expect(err).NotTo(HaveOccurred(), "the key is free once the retried task is done")
		Eventually(ctx, func() []worqr.EventKind { return rec.kinds(last) }).WithTimeout(5 * time.Second).
			Should(Equal([]worqr.EventKind{worqr.EventDone}))

		// Released on cancel, on a queue no worker serves.
		held, err := e.rtEnqueue("uc", "held", uopts)
		Expect(err).NotTo(HaveOccurred(), "keys are per queue")
		_, err = e.rtEnqueue("uc", "dup", uopts)
		isDup(err, "uc", held)
		st, err := e.client.Cancel(ctx, "uc", held)
		Expect(err).NotTo(HaveOccurred())
		Expect(st).To(Equal(worqr.CancelRemoved))
		again, err := e.rtEnqueue("uc", "again", uopts)
		Expect(err).NotTo(HaveOccurred(), "the key is free once its task is cancelled")
		Expect(e.waiting("uc")).To(Equal([]string{again}))
	}, SpecTimeout(20*time.Second))

	It("buries corrupt or missing task data with a reason and keeps serving the good tasks around it, taking each bad id once", func(ctx SpecContext) {
		e := newEnv()
		qk := e.qk("bq")
		missing := xid.New().String()
		noPayload := xid.New().String()
		wrongType := xid.New().String()
		badCount := xid.New().String()
		_, err := e.do("HSET", qk.Task(noPayload), "n", "0")
		Expect(err).NotTo(HaveOccurred())
		_, err = e.do("SET", qk.Task(wrongType), "garbage")
		Expect(err).NotTo(HaveOccurred())
		_, err = e.do("HSET", qk.Task(badCount), "d", "payload", "n", "abc")
		Expect(err).NotTo(HaveOccurred())
		reasons := map[string]string{missing: "missing", noPayload: "corrupt", wrongType: "corrupt", badCount: "corrupt"}

		good := []string{e.enqueue("bq", "good-0")}
		for i, bad := range []string{missing, noPayload, wrongType, badCount} {
			_, err := e.do("RPUSH", qk.Waiting, bad)
			Expect(err).NotTo(HaveOccurred())
			good = append(good, e.enqueue("bq", fmt.Sprintf("good-%d", i+1)))
		}

		var runs rtRuns
		var rec recorder
		w := e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"bq": one(runs.handler(func(context.Context, *worqr.Task) error { return nil }), 2),
		}, &rec))
		workerID := w.ID()
		Eventually(ctx, runs.ids).WithTimeout(5 * time.Second).Should(ConsistOf(good))
		Eventually(ctx, e.rtDeadIDs("bq")).WithTimeout(5 * time.Second).
			Should(ConsistOf(missing, noPayload, wrongType, badCount))
		for bad, reason := range reasons {
			info := e.rtDeadTask("bq", bad)
			Expect(info.State).To(Equal(worqr.StateDead))
			Expect(info.DeadReason).To(HavePrefix(reason+":"), "task %s", bad)
			Expect(info.DiedOn).To(Equal(workerID))
		}
		raw, err := redis.String(e.do("HGET", qk.Task(wrongType), "raw"))
		Expect(err).NotTo(HaveOccurred())
		Expect(raw).To(Equal("garbage"), "what the key held is kept for the operator")

		// Still serving, under the same id.
		after := e.enqueue("bq", "good-after")
		Eventually(ctx, runs.count(after)).WithTimeout(5 * time.Second).Should(Equal(1))
		good = append(good, after)
		Consistently(ctx, func() []int {
			var n []int
			for _, bad := range []string{missing, noPayload, wrongType, badCount} {
				c := 0
				for _, k := range rec.kinds(bad) {
					if k == worqr.EventDead {
						c++
					}
				}
				n = append(n, c+runs.count(bad)())
			}
			return n
		}).WithTimeout(500*time.Millisecond).Should(Equal([]int{1, 1, 1, 1}), "each bad id is taken once, and never run")
		for _, id := range good {
			Expect(runs.count(id)()).To(Equal(1))
		}
		// Every taking is numbered: one per good run and one per bad id.
		Expect(redis.Int(e.do("GET", qk.Seq))).To(Equal(len(good) + len(reasons)))
		Expect(e.waiting("bq")).To(BeEmpty())
		Expect(w.ID()).To(Equal(workerID))
	}, SpecTimeout(15*time.Second))

	It("buries corrupt task data found among due scheduled tasks and still moves the good ones around it", func(ctx SpecContext) {
		e := newEnv()
		e.register(time.Minute, "bs") // a known queue: the mover looks at it
		qk := e.qk("bs")
		past := time.Now().Add(-time.Minute)
		before, err := e.rtEnqueue("bs", "before", &worqr.EnqueueOpts{At: past})
		Expect(err).NotTo(HaveOccurred())
		wrongType := xid.New().String()
		_, err = e.do("SET", qk.Task(wrongType), "garbage")
		Expect(err).NotTo(HaveOccurred())
		_, err = e.do("ZADD", qk.Scheduled, past.UnixMilli(), wrongType)
		Expect(err).NotTo(HaveOccurred())
		after, err := e.rtEnqueue("bs", "after", &worqr.EnqueueOpts{At: past})
		Expect(err).NotTo(HaveOccurred())

		_, err = e.reaper(nil).Move(ctx)
		Expect(err).NotTo(HaveOccurred(), "one task's bad data must not fail the move of the others")
		Expect(e.waiting("bs")).To(ContainElements(before, after), "the good due tasks are moved, not lost")

		var runs rtRuns
		e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"bs": one(runs.handler(func(context.Context, *worqr.Task) error { return nil }), 2),
		}, nil))
		Eventually(ctx, runs.ids).WithTimeout(5 * time.Second).Should(ConsistOf(before, after))
		Eventually(ctx, e.rtDeadIDs("bs")).WithTimeout(5 * time.Second).Should(Equal([]string{wrongType}))
		Expect(e.rtDeadTask("bs", wrongType).DeadReason).To(HavePrefix("corrupt:"))
	}, SpecTimeout(15*time.Second))

	It("keeps a done task and its result readable for QueueConfig.Retention; without it, a result for a day and nothing else", func(ctx SpecContext) {
		e := newEnv()
		const retention = 2 * time.Second
		var rec recorder
		h := worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
			if string(t.Payload) != "no result" {
				t.SetResult([]byte("result of " + t.ID))
			}
			return nil
		})
		e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"keep": {Concurrency: 1, Retention: retention, Handler: h},
			"drop": {Concurrency: 1, Handler: h},
		}, &rec))
		kept := e.enqueue("keep", "k")
		dropped := e.enqueue("drop", "no result")
		result := e.enqueue("drop", "r")
		for _, id := range []string{kept, dropped, result} {
			Eventually(ctx, func() []worqr.EventKind { return rec.kinds(id) }).WithTimeout(5 * time.Second).
				Should(Equal([]worqr.EventKind{worqr.EventDone}))
		}

		info, err := e.rtTask("keep", kept)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.State).To(Equal(worqr.StateDone))
		Expect(string(info.Result)).To(Equal("result of " + kept))
		Expect(info.FinishedAt).NotTo(BeZero())
		ttl, err := redis.Int64(e.do("PTTL", e.qk("keep").Task(kept)))
		Expect(err).NotTo(HaveOccurred())
		Expect(ttl).To(And(BeNumerically(">", 0), BeNumerically("<=", retention.Milliseconds())))

		_, err = e.rtTask("drop", dropped)
		Expect(err).To(MatchError(worqr.ErrTaskNotFound))
		Expect(e.keysWith(dropped)).To(BeEmpty())

		info, err = e.rtTask("drop", result)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(info.Result)).To(Equal("result of " + result))
		ttl, err = redis.Int64(e.do("PTTL", e.qk("drop").Task(result)))
		Expect(err).NotTo(HaveOccurred())
		Expect(ttl).To(And(BeNumerically(">", retention.Milliseconds()), BeNumerically("<=", (24*time.Hour).Milliseconds())))

		Eventually(ctx, func() error { _, err := e.rtTask("keep", kept); return err }).
			WithTimeout(retention+2*time.Second).Should(MatchError(worqr.ErrTaskNotFound), "gone once the retention passed")
	}, SpecTimeout(15*time.Second))
})
