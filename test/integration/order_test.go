package integration_test

import (
	"context"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/worqr"
)

var _ = Describe("Queue order", func() {
	It("takes tasks in the order they were enqueued (FIFO)", func(ctx SpecContext) {
		e := newEnv()
		ids := e.enqueueN("fifo", 3)
		var seen trail
		e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"fifo": one(recordingHandler(&seen), 1),
		}, nil))
		Eventually(ctx, seen.get).WithTimeout(5 * time.Second).Should(HaveLen(3))
		Expect(seen.get()).To(Equal(ids), "T1, T2, T3 must be taken in enqueue order")
	}, SpecTimeout(15*time.Second))

	It("takes a given-back task next, ahead of the tasks already waiting", func(ctx SpecContext) {
		e := newEnv()
		ids := e.enqueueN("gb", 3) // A, B, C: B and C wait while A runs
		a := ids[0]

		// At the Redis level: the id goes back to the front.
		w := e.register(time.Minute, "gb")
		taken := e.take(w, "gb", 1)
		Expect(taken).To(HaveLen(1))
		Expect(taken[0].ID).To(Equal(a))
		Expect(e.waiting("gb")).To(Equal(ids[1:]))
		out, err := e.giveBack(w, "gb", taken[0].PID, a)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(Equal(rdb.OutcomeRequeued))
		Expect(e.waiting("gb")).To(Equal(ids), "a given-back task goes back to the front")
		// A second give-back of the same taking is refused: it is over.
		_, err = e.giveBack(w, "gb", taken[0].PID, a)
		Expect(err).To(MatchError(worqr.ErrTaskLost))
		Expect(e.waiting("gb")).To(Equal(ids))

		// Through a worker: the handler gives A back once; A is taken again
		// before B and C.
		var seen trail
		var gaveBack atomic.Bool
		e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"gb": one(worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
				seen.add(t.ID)
				if t.ID == a && gaveBack.CompareAndSwap(false, true) {
					return worqr.ErrGiveBack
				}
				return nil
			}), 1),
		}, nil))
		Eventually(ctx, seen.get).WithTimeout(5 * time.Second).Should(HaveLen(4))
		Expect(seen.get()).To(Equal([]string{a, a, ids[1], ids[2]}))
		Consistently(ctx, seen.get).WithTimeout(300 * time.Millisecond).Should(HaveLen(4))
	}, SpecTimeout(15*time.Second))

	It("puts a dead worker's tasks back at the front, in their original order, ahead of tasks already waiting", func(ctx SpecContext) {
		e := newEnv()
		ids := e.enqueueN("rc", 3) // T1, T2, T3: taken by the worker that dies
		dead := e.register(time.Minute, "rc")
		// Two takings (pids 1-2, then 3), so the order comes from the pids,
		// not from one SADD.
		Expect(e.take(dead, "rc", 2)).To(HaveLen(2))
		Expect(e.take(dead, "rc", 1)).To(HaveLen(1))
		later := e.enqueueN("rc", 2) // T4, T5: waiting while T1-T3 are held
		Expect(e.waiting("rc")).To(Equal(later))

		e.kill(dead)
		Expect(e.pass()).To(Equal(3))
		want := append(append([]string{}, ids...), later...)
		Expect(e.waiting("rc")).To(Equal(want), "T1-T3 at the front in their order, then T4, T5")
		info, err := e.in.Task(ctx, "rc", ids[0])
		Expect(err).NotTo(HaveOccurred())
		Expect(info.State).To(Equal(worqr.StateQueued))
		Expect(info.Crashes).To(Equal(1))

		var seen trail
		e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"rc": one(recordingHandler(&seen), 1),
		}, nil))
		Eventually(ctx, seen.get).WithTimeout(5 * time.Second).Should(HaveLen(5))
		Expect(seen.get()).To(Equal(want))
	}, SpecTimeout(15*time.Second))
})
