package integration_test

import (
	"context"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/rs/xid"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/recovery"
	"github.com/worqr/worqr-go/worqr"
)

var _ = Describe("Cancel", func() {
	It("removes a queued task so that no worker ever gets it", func(ctx SpecContext) {
		e := newEnv()
		victim := e.enqueue("cq", "victim")
		next := e.enqueue("cq", "next")
		st, err := e.client.Cancel(ctx, "cq", victim)
		Expect(err).NotTo(HaveOccurred())
		Expect(st).To(Equal(worqr.CancelRemoved))
		_, err = e.in.Task(ctx, "cq", victim)
		Expect(err).To(MatchError(worqr.ErrTaskNotFound))
		Expect(e.waiting("cq")).To(Equal([]string{next}))

		var seen trail
		e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"cq": one(recordingHandler(&seen), 1),
		}, nil))
		// FIFO: had the victim stayed in the queue it would run before next.
		Eventually(ctx, seen.get).WithTimeout(5 * time.Second).Should(Equal([]string{next}))
		Consistently(ctx, seen.get).WithTimeout(500 * time.Millisecond).Should(Equal([]string{next}))
	}, SpecTimeout(15*time.Second))

	It("cancels only the owner's handler of a running task, ends the taking as cancelled and never runs it again", func(ctx SpecContext) {
		e := newEnv()
		type run struct {
			ctx context.Context
		}
		var (
			mu    sync.Mutex
			runs  = map[string][]run{}
			ended = map[string]error{} // task id -> context.Cause when its ctx ended
		)
		started := make(chan string, 4)
		release := newGate()
		handler := worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			mu.Lock()
			runs[t.ID] = append(runs[t.ID], run{ctx: ctx})
			mu.Unlock()
			started <- t.ID
			select {
			case <-release.ch:
				return nil
			case <-ctx.Done():
				mu.Lock()
				ended[t.ID] = context.Cause(ctx)
				mu.Unlock()
				return ctx.Err()
			}
		})
		cause := func(id string) error {
			mu.Lock()
			defer mu.Unlock()
			return ended[id]
		}
		runCount := func(id string) func() int {
			return func() int {
				mu.Lock()
				defer mu.Unlock()
				return len(runs[id])
			}
		}
		var rec1, rec2 recorder
		w1 := e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{"cr": one(handler, 1)}, &rec1))
		t1 := e.enqueue("cr", "one")
		Eventually(ctx, started).WithTimeout(3 * time.Second).Should(Receive(Equal(t1)))
		w2 := e.start(newPool(), e.workerConfig(map[string]worqr.QueueConfig{"cr": one(handler, 1)}, &rec2))
		t2 := e.enqueue("cr", "two")
		Eventually(ctx, started).WithTimeout(3 * time.Second).Should(Receive(Equal(t2)))
		info, err := e.in.Task(ctx, "cr", t1)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.WorkerID).To(Equal(w1.ID()))
		info, err = e.in.Task(ctx, "cr", t2)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.WorkerID).To(Equal(w2.ID()))

		st, err := e.client.Cancel(ctx, "cr", t1)
		Expect(err).NotTo(HaveOccurred())
		Expect(st).To(Equal(worqr.CancelRequested))

		Eventually(ctx, func() error { return cause(t1) }).WithTimeout(3 * time.Second).
			Should(MatchError(worqr.ErrTaskCancelled))
		Eventually(ctx, func() []worqr.EventKind { return rec1.kinds(t1) }).WithTimeout(3 * time.Second).
			Should(Equal([]worqr.EventKind{worqr.EventCancelled}))
		// The other worker's task of the same queue is untouched.
		Consistently(ctx, func() error { return cause(t2) }).WithTimeout(500 * time.Millisecond).Should(BeNil())
		mu.Lock()
		Expect(runs[t2][0].ctx.Err()).NotTo(HaveOccurred())
		mu.Unlock()

		_, err = e.in.Task(ctx, "cr", t1)
		Expect(err).To(MatchError(worqr.ErrTaskNotFound), "the cancelled task's hash is gone")
		Expect(e.waiting("cr")).To(BeEmpty(), "a cancelled task is not requeued")

		release.open()
		Eventually(ctx, func() []worqr.EventKind { return rec2.kinds(t2) }).WithTimeout(3 * time.Second).
			Should(Equal([]worqr.EventKind{worqr.EventDone}))
		// Both workers idle and polling: the cancelled task never comes back.
		Consistently(ctx, runCount(t1)).WithTimeout(time.Second).Should(Equal(1))
		Expect(rec1.kinds(t1)).To(Equal([]worqr.EventKind{worqr.EventCancelled}))
		Expect(rec2.kinds(t1)).To(BeEmpty())
	}, SpecTimeout(20*time.Second))

	It("honours a cancel whose notification the owner missed when the owner finishes", func(ctx SpecContext) {
		e := newEnv()

		// A worker whose handler ignores its context entirely and succeeds:
		// the finish still ends the taking as cancelled.
		var rec recorder
		started := make(chan string, 1)
		release := newGate()
		e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"cm": one(worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
				started <- t.ID
				<-release.ch
				return nil
			}), 1),
		}, &rec))
		id := e.enqueue("cm", "x")
		Eventually(ctx, started).WithTimeout(3 * time.Second).Should(Receive(Equal(id)))
		st, err := e.client.Cancel(ctx, "cm", id)
		Expect(err).NotTo(HaveOccurred())
		Expect(st).To(Equal(worqr.CancelRequested))
		info, err := e.in.Task(ctx, "cm", id)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.CancelRequested).To(BeTrue())
		release.open()
		Eventually(ctx, func() []worqr.EventKind { return rec.kinds(id) }).WithTimeout(3 * time.Second).
			Should(Equal([]worqr.EventKind{worqr.EventCancelled}))
		_, err = e.in.Task(ctx, "cm", id)
		Expect(err).To(MatchError(worqr.ErrTaskNotFound))
		Expect(e.waiting("cm")).To(BeEmpty())
		Consistently(ctx, func() []worqr.EventKind { return rec.kinds(id) }).WithTimeout(500 * time.Millisecond).
			Should(Equal([]worqr.EventKind{worqr.EventCancelled}))

		// Owners nobody could notify (no subscriber at all on the cancel
		// channel): the finish, the give-back and the recovery of their
		// takings all see the mark.
		Expect(e.numsub(e.qk("cd").CancelChannel)).To(BeZero())
		ids := e.enqueueN("cd", 3)
		owner := e.register(time.Minute, "cd")
		taken := e.take(owner, "cd", 3)
		Expect(taken).To(HaveLen(3))
		for _, id := range ids {
			st, err := e.client.Cancel(ctx, "cd", id)
			Expect(err).NotTo(HaveOccurred())
			Expect(st).To(Equal(worqr.CancelRequested))
		}
		out, err := e.finish(owner, "cd", taken[0].PID, taken[0].ID)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(Equal(rdb.OutcomeCancelled), "finish of a cancelled taking")
		out, err = e.giveBack(owner, "cd", taken[1].PID, taken[1].ID)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(Equal(rdb.OutcomeCancelled), "give-back of a cancelled taking")
		e.kill(owner)
		ctx2, cancel := bg()
		defer cancel()
		recs, err := e.reaper(nil).Pass(ctx2)
		Expect(err).NotTo(HaveOccurred())
		Expect(recs).To(HaveLen(1))
		Expect(recs[0].Requeued).To(BeZero(), "recovery of a cancelled taking")
		Expect(recs[0].Cancelled).To(Equal([]recovery.Cancelled{{TaskID: taken[2].ID, PID: taken[2].PID, Worker: owner}}))
		Expect(e.waiting("cd")).To(BeEmpty())
		Expect(e.keysWith(":t:")).To(BeEmpty(), "every cancelled task's hash is gone")
	}, SpecTimeout(15*time.Second))

	It("returns CancelNotFound and no error for an unknown id, a finished task and a cancel already asked", func(ctx SpecContext) {
		e := newEnv()
		st, err := e.client.Cancel(ctx, "cn", xid.New().String())
		Expect(err).NotTo(HaveOccurred())
		Expect(st).To(Equal(worqr.CancelNotFound))
		Expect(e.allKeys()).To(BeEmpty(), "cancelling an unknown id creates nothing")

		var rec recorder
		var seen trail
		e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{"cn": one(recordingHandler(&seen), 1)}, &rec))
		done := e.enqueue("cn", "x")
		Eventually(ctx, func() []worqr.EventKind { return rec.kinds(done) }).WithTimeout(3 * time.Second).
			Should(Equal([]worqr.EventKind{worqr.EventDone}))
		before := e.snapshot()
		st, err = e.client.Cancel(ctx, "cn", done)
		Expect(err).NotTo(HaveOccurred())
		Expect(st).To(Equal(worqr.CancelNotFound))
		Expect(e.snapshot()).To(Equal(before), "cancelling a finished task changes nothing")

		// A cancel already asked of a running taking.
		owner := e.register(time.Minute, "cx2")
		id := e.enqueue("cx2", "y")
		Expect(e.take(owner, "cx2", 1)).To(HaveLen(1))
		st, err = e.client.Cancel(ctx, "cx2", id)
		Expect(err).NotTo(HaveOccurred())
		Expect(st).To(Equal(worqr.CancelRequested))
		before = e.snapshot()
		st, err = e.client.Cancel(ctx, "cx2", id)
		Expect(err).NotTo(HaveOccurred())
		Expect(st).To(Equal(worqr.CancelNotFound))
		Expect(e.snapshot()).To(Equal(before), "a second cancel changes nothing")
	}, SpecTimeout(15*time.Second))
})
