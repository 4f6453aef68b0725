package integration_test

import (
	"context"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/worqr/worqr-go/worqr"
)

type signup struct {
	User string `json:"user"`
}

var _ = Describe("Typed handlers, a Mux and middleware (issue 16)", func() {
	It("routes typed tasks of one queue, decodes their payloads, buries a bad payload at once, and wraps every handler", func(ctx SpecContext) {
		e := newEnv()
		var (
			mu       sync.Mutex
			welcomed []string
			billed   []string
			observed []string
		)
		mux := worqr.NewMux()
		mux.Handle("welcome", worqr.Handle(func(_ context.Context, t *worqr.Task, s signup) error {
			mu.Lock()
			welcomed = append(welcomed, s.User)
			mu.Unlock()
			return nil
		}, nil))
		mux.Handle("bill", worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
			mu.Lock()
			billed = append(billed, string(t.Payload))
			mu.Unlock()
			return nil
		}))
		var rec recorder
		cfg := e.workerConfig(map[string]worqr.QueueConfig{"typed": {Concurrency: 2, MaxAttempts: 3, Handler: mux}}, &rec)
		cfg.Middleware = []worqr.Middleware{worqr.Observe(func(t *worqr.Task, _ time.Duration, err error) {
			mu.Lock()
			defer mu.Unlock()
			observed = append(observed, t.ID)
		})}
		e.start(nil, cfg)

		ids, err := e.client.EnqueueBatch(ctx, "typed", [][]byte{[]byte(`{"user":"ada"}`)}, &worqr.EnqueueOpts{Type: "welcome"})
		Expect(err).NotTo(HaveOccurred())
		bill, err := e.client.Enqueue(ctx, "typed", []byte("inv-7"), &worqr.EnqueueOpts{Type: "bill"})
		Expect(err).NotTo(HaveOccurred())
		bad, err := e.client.Enqueue(ctx, "typed", []byte("not json"), &worqr.EnqueueOpts{Type: "welcome"})
		Expect(err).NotTo(HaveOccurred())
		unknown, err := e.client.Enqueue(ctx, "typed", nil, &worqr.EnqueueOpts{Type: "refund"})
		Expect(err).NotTo(HaveOccurred())

		Eventually(ctx, func() []worqr.EventKind { return rec.kinds(ids[0]) }).WithTimeout(5 * time.Second).Should(Equal([]worqr.EventKind{worqr.EventDone}))
		Eventually(ctx, func() []worqr.EventKind { return rec.kinds(bill) }).WithTimeout(5 * time.Second).Should(Equal([]worqr.EventKind{worqr.EventDone}))
		// Bad input is buried after one run, with the reason, not retried.
		Eventually(ctx, func() []worqr.EventKind { return rec.kinds(bad) }).WithTimeout(5 * time.Second).Should(Equal([]worqr.EventKind{worqr.EventDead}))
		Eventually(ctx, func() []worqr.EventKind { return rec.kinds(unknown) }).WithTimeout(5 * time.Second).Should(Equal([]worqr.EventKind{worqr.EventDead}))
		info, err := e.in.Task(ctx, "typed", unknown)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.LastError).To(ContainSubstring(`no handler for task type "refund"`))
		info, err = e.in.Task(ctx, "typed", bad)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.LastError).To(ContainSubstring("does not decode into integration_test.signup"))

		mu.Lock()
		defer mu.Unlock()
		Expect(welcomed).To(Equal([]string{"ada"}))
		Expect(billed).To(Equal([]string{"inv-7"}))
		Expect(observed).To(ConsistOf(ids[0], bill, bad, unknown), "the middleware wrapped every run")
	}, SpecTimeout(15*time.Second))
})
