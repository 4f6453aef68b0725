package integration_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

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
				"wst": one(worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
					started <- t.ID
					<-ctx.Done()
					causes <- context.Cause(ctx)
					return ctx.Err()
				}), 1),
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
})
