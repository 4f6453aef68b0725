package integration_test

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/worqr/worqr-go/worqr"
)

// switchingPool is a pool whose server "changes" when the test says so: a
// Sentinel failover as a worker sees it (rdb.Switcher).
type switchingPool struct {
	*redis.Pool
	n atomic.Uint64
}

func (p *switchingPool) Switches() uint64 { return p.n.Load() }

var _ = Describe("A primary switch (Sentinel failover)", func() {
	// An end that the old primary acknowledged and never passed on to the
	// replica leaves the taking held, on the new primary, by a live worker
	// that no longer runs it: the reaper never frees it (the worker is
	// alive). After a switch the worker puts back what it holds and does
	// not run.
	It("makes a live worker put back the takings it holds but does not run", func(ctx SpecContext) {
		e := newEnv()
		pool := &switchingPool{Pool: e.pool}
		var ran atomic.Int64
		cfg := e.workerConfig(map[string]worqr.QueueConfig{"sw": {Concurrency: 2, Handler: worqr.HandlerFunc(
			func(context.Context, *worqr.Task) error { ran.Add(1); return nil })}}, nil)
		// A worker that parks checks its holdings every poll and would
		// release the stranded taking before the switch (worqr's
		// TestLostHandoffIsReleased covers that): this is about the switch.
		cfg.DisableHandoff = true
		w, err := worqr.NewWorker(pool, cfg)
		Expect(err).NotTo(HaveOccurred())
		Expect(w.Start(ctx)).To(Succeed())
		DeferCleanup(func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = w.Stop(sctx)
		})
		e.enqueue("sw", "warm-up")
		Eventually(ctx, ran.Load).WithTimeout(5 * time.Second).Should(BeEquivalentTo(1))

		// The lost end's state: the task taken under the worker's id, no
		// handler running it.
		e.enqueue("sw-held", "held")
		stuck := e.take(w.ID(), "sw-held", 1)
		Expect(stuck).To(HaveLen(1))
		_, err = e.do("RENAME", e.qk("sw-held").WorkerQueue(w.ID()), e.qk("sw").WorkerQueue(w.ID()))
		Expect(err).NotTo(HaveOccurred())
		_, err = e.do("RENAME", e.qk("sw-held").Task(stuck[0].ID), e.qk("sw").Task(stuck[0].ID))
		Expect(err).NotTo(HaveOccurred())
		Consistently(ctx, ran.Load).WithTimeout(3*fastPollInterval).Should(BeEquivalentTo(1), "held, not run, and the worker alive: nothing frees it")

		pool.n.Add(1)
		Eventually(ctx, ran.Load).WithTimeout(5*time.Second).Should(BeEquivalentTo(2), "after the switch the worker put it back and ran it")
		Expect(e.hkeys(e.qk("sw").WorkerQueue(w.ID()))).To(BeEmpty())
	}, SpecTimeout(20*time.Second))

	// A take that the old primary acknowledged and never passed on leaves
	// the handler running a taking that the new primary does not hold
	// (there the task waits again). After the switch the worker reads its
	// holdings (in the release's call) and cancels that handler with
	// ErrLostInFailover; it sends no end and reports the taking lost.
	It("cancels a handler whose taking the new primary does not hold", func(ctx SpecContext) {
		e := newEnv()
		pool := &switchingPool{Pool: e.pool}
		rec := &recorder{}
		causes := make(chan error, 2)
		var started atomic.Value // the pid
		cfg := e.workerConfig(map[string]worqr.QueueConfig{"sl": {Concurrency: 2, Handler: worqr.HandlerFunc(
			func(ctx context.Context, t *worqr.Task) error {
				started.Store(t.PID())
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return ctx.Err()
			})}}, rec)
		w, err := worqr.NewWorker(pool, cfg)
		Expect(err).NotTo(HaveOccurred())
		Expect(w.Start(ctx)).To(Succeed())
		DeferCleanup(func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = w.Stop(sctx)
		})
		// Subscribed first: a subscription made after the take would
		// release what the worker holds and does not know of (hand-offs
		// sent meanwhile are lost), and so find the deleted pid below
		// with no switch at all.
		Eventually(ctx, func() int64 {
			r, err := e.do("PUBSUB", "NUMSUB", e.qk("sl").WakeChannel)
			if vs, ok := r.([]any); err == nil && ok && len(vs) == 2 {
				n, _ := vs[1].(int64)
				return n
			}
			return 0
		}).WithTimeout(5 * time.Second).Should(BeNumerically(">=", 1))
		id := e.enqueue("sl", "lost")
		Eventually(ctx, started.Load).WithTimeout(5 * time.Second).ShouldNot(BeNil())
		// The new primary's state: the take never happened there.
		_, err = e.do("HDEL", e.qk("sl").WorkerQueue(w.ID()), started.Load())
		Expect(err).NotTo(HaveOccurred())
		Consistently(ctx, causes).WithTimeout(3*fastPollInterval).ShouldNot(Receive(), "no switch seen: nothing is read")

		pool.n.Add(1)
		var cause error
		Eventually(ctx, causes).WithTimeout(5 * time.Second).Should(Receive(&cause))
		Expect(errors.Is(cause, worqr.ErrLostInFailover)).To(BeTrue(), "cause %v", cause)
		Expect(errors.Is(cause, worqr.ErrTaskLost)).To(BeTrue())
		Eventually(ctx, func() []worqr.EventKind { return rec.kinds(id) }).WithTimeout(5*time.Second).
			Should(Equal([]worqr.EventKind{worqr.EventLost}), "reported lost, never ended")
		for _, ev := range rec.all() {
			if ev.TaskID == id {
				Expect(errors.Is(ev.Err, worqr.ErrLostInFailover)).To(BeTrue())
			}
		}
	}, SpecTimeout(20*time.Second))
})
