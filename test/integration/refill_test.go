package integration_test

import (
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/worqr/worqr-go/worqr"
)

var _ = Describe("Ends that take again (issue 11)", func() {
	// A busy worker refills the slots its ends free in the same script
	// call: the fetch loop's own take runs at start, when the queue runs
	// dry, and when the worker is not fresh, not once per freed slot.
	// Without the refill every freed slot costs a take call of its own.
	It("drains a queue through its ends, with a handful of take calls of its own", func(ctx SpecContext) {
		e := newEnv()
		const n = 300
		ids := e.enqueueN("refill", n)
		var takes atomic.Int32
		var none atomic.Int32
		isTake := takeOf("refill")
		pool := lossyPool(&none, false, func(args []any) bool {
			if isTake(args) {
				takes.Add(1)
			}
			return false
		})
		var ran trail
		cfg := e.workerConfig(map[string]worqr.QueueConfig{"refill": one(recordingHandler(&ran), 4)}, nil)
		// Default keepalive timings: a worker whose beats run late on a
		// loaded machine is not fresh, and then takes only through its
		// fetch loop (as it must).
		cfg.HeartbeatInterval, cfg.HeartbeatTTL = time.Second, 3*time.Second
		e.start(pool, cfg)
		Eventually(ctx, func() int { return len(ran.get()) }).WithTimeout(10 * time.Second).Should(Equal(n))
		Expect(ran.get()).To(ConsistOf(ids), "each task ran once")
		Expect(e.waiting("refill")).To(BeEmpty())
		// Without the refill this is about one take per task (175 seen).
		Expect(takes.Load()).To(BeNumerically("<=", n/10), "take calls of the fetch loop for %d tasks", n)
	}, SpecTimeout(20*time.Second))

	// An end that also took may lose its reply after Redis applied it: the
	// tasks it took are held by a live worker that does not know them. The
	// worker releases them before it takes from the queue again, and every
	// task runs exactly once.
	It("puts back what an end took when that end's reply was lost", func(ctx SpecContext) {
		e := newEnv()
		ids := e.enqueueN("refill-lost", 3)
		var armed atomic.Int32
		armed.Store(1) // the first end's reply is lost, and its connection cut
		pool := lossyPool(&armed, true, endOf("refill-lost"))
		var ran trail
		var rec recorder
		cfg := e.workerConfig(map[string]worqr.QueueConfig{"refill-lost": one(recordingHandler(&ran), 1)}, &rec)
		cfg.DisableReaper = true // only the worker itself can put the takings back
		e.start(pool, cfg)
		Eventually(ctx, func() int { return len(ran.get()) }).WithTimeout(5 * time.Second).Should(Equal(3))
		Expect(armed.Load()).To(BeNumerically("<", 0), "the fault was injected")
		Consistently(ctx, func() int { return len(ran.get()) }).WithTimeout(300 * time.Millisecond).Should(Equal(3))
		Expect(ran.get()).To(ConsistOf(ids), "each task ran once")
		for _, id := range ids {
			// The end whose reply was lost also reports its EventError.
			kinds := rec.kinds(id)
			Expect(kinds).NotTo(ContainElement(worqr.EventLost), "task %s", id)
			Expect(kinds).To(ContainElement(worqr.EventDone), "task %s", id)
			Expect(rec.count(worqr.EventDone)).To(Equal(3), "one done per task")
		}
		Expect(e.waiting("refill-lost")).To(BeEmpty())
		Expect(e.keysWith(":wq:")).To(BeEmpty())
	}, SpecTimeout(15*time.Second))
})
