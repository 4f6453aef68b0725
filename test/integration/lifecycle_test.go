package integration_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/worqr/worqr-go/worqr"
)

var _ = Describe("Worker lifecycle", func() {
	// Regression (issue 10): before, the context given to Worker.Start
	// bounded the registration only: cancelling it later changed nothing,
	// the worker ran on (holding its task) until someone called Stop, and
	// there was no Stopped channel to wait on. Now the end of Start's
	// context stops the worker as Stop does with no grace: the running task
	// goes back to the front of its queue, the worker deregisters and
	// Stopped is closed.
	It("stops when the context given to Start ends: Stopped closes, and the running task is back at the front", func(ctx SpecContext) {
		e := newEnv()
		var rec recorder
		started := make(chan string, 2)
		causes := make(chan error, 1)
		cfg := e.workerConfig(map[string]worqr.QueueConfig{
			"life": one(holdUntilDone(started, causes), 1),
		}, &rec)
		cfg.DisableReaper = true
		// No poll (fewer takes racing the hand-off). A take on its way
		// when the first task is handed to the worker (the enqueue's
		// wake-up for the second came first) takes the second past the
		// worker's one slot: the worker puts it back at once (it held it,
		// waiting for the slot, until the first ended).
		cfg.PollInterval = neverPoll
		runCtx, cancel := context.WithCancel(context.Background())
		DeferCleanup(cancel)
		w := e.startCtx(runCtx, nil, cfg)
		id := w.ID()
		ids := e.enqueueN("life", 2)
		Eventually(ctx, started).WithTimeout(3 * time.Second).Should(Receive(Equal(ids[0])))
		Eventually(ctx, func() []string { return e.waiting("life") }).WithTimeout(3 * time.Second).Should(Equal(ids[1:]))
		Consistently(ctx, w.Stopped()).WithTimeout(100 * time.Millisecond).ShouldNot(BeClosed())

		cancel()
		Eventually(ctx, w.Stopped()).WithTimeout(5 * time.Second).Should(BeClosed())
		Expect(causes).To(Receive(MatchError(worqr.ErrWorkerStopped)), "the handler was cancelled because the worker stopped")
		Expect(e.waiting("life")).To(Equal(ids), "the running task is back at the front")
		Expect(rec.all()).To(ContainElement(And(
			HaveField("Kind", worqr.EventStopRequeued), HaveField("Queue", "life"), HaveField("Count", 1))))
		Expect(rec.kinds(ids[0])).NotTo(ContainElement(worqr.EventDone))
		Consistently(ctx, started).WithTimeout(300*time.Millisecond).ShouldNot(Receive(), "a stopped worker takes nothing")
		Expect(e.smembers(e.keys.Workers())).NotTo(ContainElement(id))
		Expect(e.keysWith(id)).To(BeEmpty(), "no key names the stopped worker")
		Expect(e.keysWith(":wq:")).To(BeEmpty())
		info, err := e.in.Task(ctx, "life", ids[0])
		Expect(err).NotTo(HaveOccurred())
		Expect(info.State).To(Equal(worqr.StateQueued))
		Expect(info.Crashes).To(BeZero(), "a stop is not a crash")
	}, SpecTimeout(15*time.Second))

	// A stopping worker that cannot requeue one of its queues must stay
	// registered: the reaper requeues the registered queues of a worker
	// whose keepalive expired, and would never look for the takings of
	// one that had deregistered. (A holder index of the wrong type makes
	// that queue's requeue fail with WRONGTYPE; the other queue's works.)
	It("stays registered when Stop could not requeue a queue, and deregisters when it could", func(ctx SpecContext) {
		e := newEnv()
		cfg := e.workerConfig(map[string]worqr.QueueConfig{
			"stay-a": one(worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil }), 1),
			"stay-b": one(worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil }), 1),
		}, nil)
		cfg.DisableReaper = true

		broken := e.start(nil, cfg)
		_, err := e.do("SET", e.qk("stay-b").Holders, "not a set")
		Expect(err).NotTo(HaveOccurred())
		Expect(broken.Stop(ctx)).To(Succeed())
		Expect(e.smembers(e.keys.Workers())).To(ContainElement(broken.ID()), "a worker whose requeue failed stays registered")

		_, err = e.do("DEL", e.qk("stay-b").Holders)
		Expect(err).NotTo(HaveOccurred())
		fine := e.start(nil, cfg)
		Expect(fine.Stop(ctx)).To(Succeed())
		Expect(e.smembers(e.keys.Workers())).NotTo(ContainElement(fine.ID()))
	}, SpecTimeout(15*time.Second))
})
