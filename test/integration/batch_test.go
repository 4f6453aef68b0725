package integration_test

import (
	"context"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/worqr/worqr-go/worqr"
)

var _ = Describe("Large batches", func() {
	// Regression (issue 10): before, EnqueueBatch sent a whole batch as one
	// script call. 200,000 tasks held Redis for seconds, during which no
	// keepalive could be renewed: a worker with a 300ms TTL lost its
	// keepalive (EventKeepaliveLost), its running task was cancelled and
	// requeued with a crash counted. Now the batch is split into atomic
	// chunks of at most 1,000 tasks, each a few milliseconds, and beats pass
	// between them.
	It("enqueues 200,000 tasks, in order, without costing a worker with a 300ms TTL its keepalive", func(ctx SpecContext) {
		const n = 200000
		e := newEnv()
		var rec recorder
		started := make(chan *worqr.Task, 1)
		release := newGate()
		cancelled := make(chan error, 1)
		cfg := e.workerConfig(map[string]worqr.QueueConfig{
			"long": {Concurrency: 1, Retention: time.Minute, Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
				started <- t
				select {
				case <-release.ch:
					return nil
				case <-ctx.Done():
					cancelled <- context.Cause(ctx)
					return ctx.Err()
				}
			})},
		}, &rec)
		cfg.HeartbeatTTL = 300 * time.Millisecond
		cfg.HeartbeatInterval = 100 * time.Millisecond
		w := e.start(nil, cfg)
		worker := w.ID()
		id := e.enqueue("long", "long task")
		var t *worqr.Task
		Eventually(ctx, started).WithTimeout(3 * time.Second).Should(Receive(&t))
		Expect(t.ID).To(Equal(id))

		payloads := make([][]byte, n)
		for i := range payloads {
			payloads[i] = []byte(strconv.Itoa(i))
		}
		began := time.Now()
		ids, err := e.client.EnqueueBatch(ctx, "bulk", payloads, nil)
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Printf("EnqueueBatch of %d tasks took %s\n", n, time.Since(began))
		Expect(ids).To(HaveLen(n))

		// Past one more TTL: a keepalive lost during the batch would show.
		Consistently(ctx, cancelled).WithTimeout(2 * cfg.HeartbeatTTL).ShouldNot(Receive())
		release.open()
		Eventually(ctx, func() []worqr.EventKind { return rec.kinds(id) }).
			WithTimeout(3 * time.Second).Should(Equal([]worqr.EventKind{worqr.EventDone}))
		Expect(rec.count(worqr.EventKeepaliveLost)).To(BeZero(), "the worker never lost its keepalive")
		Expect(rec.count(worqr.EventRegistered)).To(Equal(1), "it never registered again")
		Expect(w.ID()).To(Equal(worker))

		info, err := e.in.Task(ctx, "long", id)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.State).To(Equal(worqr.StateDone))
		Expect(info.Crashes).To(BeZero())
		Expect(t.Crashes).To(BeZero())

		waiting := e.waiting("bulk")
		Expect(len(waiting)).To(Equal(n))
		Expect(waiting).To(Equal(ids), "every id, once, in the batch's order")
		peek, _, err := e.in.Tasks(ctx, "bulk", worqr.StateQueued, 0, 3)
		Expect(err).NotTo(HaveOccurred())
		Expect(peek).To(HaveLen(3))
		for i, p := range peek {
			Expect(p.ID).To(Equal(ids[i]))
			Expect(p.Payload).To(Equal(payloads[i]))
		}
	}, SpecTimeout(60*time.Second))
})
