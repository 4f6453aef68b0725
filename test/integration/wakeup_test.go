package integration_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/rs/xid"

	"github.com/worqr/worqr-go/worqr"
)

var _ = Describe("Wake-ups", func() {
	// idleWorker starts a worker on queue that never polls after its start:
	// only a pub/sub wake-up can make it take. It returns once the worker is
	// subscribed and its startup polls are over.
	idleWorker := func(e *env, queue string, seen *trail, subscribers int) *worqr.Worker {
		GinkgoHelper()
		cfg := e.workerConfig(map[string]worqr.QueueConfig{
			queue: one(recordingHandler(seen), 1),
		}, nil)
		cfg.PollInterval = neverPoll
		cfg.DisableReaper = true // recovery is driven by the spec
		w := e.start(nil, cfg)
		Eventually(func() int { return e.numsub(e.qk(queue).WakeChannel) }).
			WithTimeout(5 * time.Second).Should(Equal(subscribers))
		// The poll after the subscription confirmation finds nothing; let
		// it happen so that it cannot be what takes the requeued task.
		Consistently(seen.get).WithTimeout(300 * time.Millisecond).Should(BeEmpty())
		return w
	}

	Context("every requeue publishes a wake-up that an idle worker acts on, with no new enqueue", func() {
		It("wakes an idle worker when a task is given back", func(ctx SpecContext) {
			e := newEnv()
			id := e.enqueue("wgb", "x")
			holder := e.register(time.Minute, "wgb")
			taken := e.take(holder, "wgb", 1)
			Expect(taken).To(HaveLen(1))

			var seen trail
			idleWorker(e, "wgb", &seen, 1)
			out, err := e.giveBack(holder, "wgb", taken[0].PID, id)
			Expect(err).NotTo(HaveOccurred())
			Expect(out.String()).To(Equal("requeued"))
			Eventually(ctx, seen.get).WithTimeout(3 * time.Second).Should(Equal([]string{id}))
		}, SpecTimeout(15*time.Second))

		It("wakes an idle worker when a dead worker's taking is recovered", func(ctx SpecContext) {
			e := newEnv()
			id := e.enqueue("wrc", "x")
			dead := e.register(time.Minute, "wrc")
			Expect(e.take(dead, "wrc", 1)).To(HaveLen(1))

			var seen trail
			idleWorker(e, "wrc", &seen, 1)
			e.kill(dead)
			Expect(e.pass()).To(Equal(1))
			Eventually(ctx, seen.get).WithTimeout(3 * time.Second).Should(Equal([]string{id}))
		}, SpecTimeout(15*time.Second))

		It("wakes an idle worker when Worker.Stop runs out of grace and puts a running task back", func(ctx SpecContext) {
			e := newEnv()
			var rec recorder
			started := make(chan string, 1)
			causes := make(chan error, 1)
			stopping := e.workerConfig(map[string]worqr.QueueConfig{
				"wst": one(holdUntilDone(started, causes), 1),
			}, &rec)
			stopping.PollInterval = neverPoll
			stopping.DisableReaper = true
			s := e.start(nil, stopping)
			id := e.enqueue("wst", "x")
			Eventually(ctx, started).WithTimeout(3 * time.Second).Should(Receive(Equal(id)))

			var seen trail
			idleWorker(e, "wst", &seen, 2)

			sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			Expect(s.Stop(sctx)).To(MatchError(context.DeadlineExceeded))
			Eventually(ctx, causes).WithTimeout(3 * time.Second).Should(Receive(MatchError(worqr.ErrWorkerStopped)))
			Eventually(ctx, seen.get).WithTimeout(3 * time.Second).Should(Equal([]string{id}))
			Eventually(ctx, func() int { return rec.count(worqr.EventStopRequeued) }).
				WithTimeout(time.Second).Should(Equal(1))
			Expect(rec.kinds(id)).NotTo(ContainElement(worqr.EventDone))
		}, SpecTimeout(15*time.Second))
	})

	It("takes tasks enqueued before the worker started, with no new enqueue", func(ctx SpecContext) {
		e := newEnv()
		ids := e.enqueueN("early", 3)
		var seen trail
		cfg := e.workerConfig(map[string]worqr.QueueConfig{
			"early": one(recordingHandler(&seen), 1),
		}, nil)
		cfg.PollInterval = neverPoll
		e.start(nil, cfg)
		Eventually(ctx, seen.get).WithTimeout(5 * time.Second).Should(Equal(ids))
	}, SpecTimeout(15*time.Second))

	// Regression (issue 10): before, a take that buried every id it popped
	// (here: ids with no task hash) launched nothing, so the fetch loop
	// treated the queue as drained and waited for the next wake-up or poll
	// tick; one wake-up took one bad id, and the good task behind five of
	// them waited several PollIntervals (5s each here). Now a take that
	// buried something takes again at once.
	It("runs a good task queued behind ids with no task data at once, not at the next poll", func(ctx SpecContext) {
		const poll = 5 * time.Second
		e := newEnv()
		var rec recorder
		started := make(chan string, 1)
		cfg := e.workerConfig(map[string]worqr.QueueConfig{
			"bury": one(worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
				started <- t.ID
				return nil
			}), 1),
		}, &rec)
		cfg.PollInterval = poll
		cfg.DisableReaper = true
		// A parked worker would be handed the good task by its enqueue,
		// past the ids pushed by hand (which publish nothing): this is
		// about takes.
		cfg.DisableHandoff = true
		e.start(nil, cfg)
		Eventually(ctx, func() int { return e.numsub(e.qk("bury").WakeChannel) }).
			WithTimeout(3 * time.Second).Should(Equal(1))
		// Let the startup polls pass: from now on only the enqueue's one
		// wake-up (or a poll tick, 5s after the start) makes it take.
		Consistently(ctx, started).WithTimeout(200 * time.Millisecond).ShouldNot(Receive())

		bad := make([]any, 5)
		for i := range bad {
			bad[i] = xid.New().String()
		}
		_, err := e.do("RPUSH", append([]any{e.qk("bury").Waiting}, bad...)...)
		Expect(err).NotTo(HaveOccurred())
		sent := time.Now()
		good := e.enqueue("bury", "good")

		Eventually(ctx, started).WithTimeout(poll / 5).Should(Receive(Equal(good)))
		Expect(time.Since(sent)).To(BeNumerically("<", poll/5), "started well before the first poll tick")
		Eventually(ctx, func() []worqr.EventKind { return rec.kinds(good) }).
			WithTimeout(time.Second).Should(Equal([]worqr.EventKind{worqr.EventDone}))

		dead, total, err := e.in.Tasks(ctx, "bury", worqr.StateDead, 0, 10)
		Expect(err).NotTo(HaveOccurred())
		Expect(total).To(Equal(5), "every bad id was buried")
		Expect(dead).To(HaveLen(5))
		for _, d := range dead {
			Expect(bad).To(ContainElement(d.ID))
			Expect(d.DeadReason).To(HavePrefix("missing"))
		}
		Expect(rec.count(worqr.EventDead)).To(Equal(5))
		Expect(e.waiting("bury")).To(BeEmpty())
	}, SpecTimeout(15*time.Second))
})
