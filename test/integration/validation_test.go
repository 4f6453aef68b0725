package integration_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/worqr/worqr-go/worqr"
)

// expectInvalid asserts that err is an input error naming field and stating
// rule, both in its fields and in its message.
func expectInvalid(err error, field string, rule ...string) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred())
	Expect(errors.Is(err, worqr.ErrInvalid)).To(BeTrue(), "errors.Is(%v, ErrInvalid)", err)
	var ie *worqr.InvalidError
	Expect(errors.As(err, &ie)).To(BeTrue(), "%v is an *InvalidError", err)
	Expect(ie.Field).To(Equal(field))
	Expect(err.Error()).To(ContainSubstring(field))
	for _, r := range rule {
		Expect(ie.Rule).To(ContainSubstring(r))
		Expect(err.Error()).To(ContainSubstring(r))
	}
}

var _ = Describe("Bad input", func() {
	noop := worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil })

	DescribeTable("a bad queue name is rejected by Enqueue and NewWorker with an error naming the field and the rule, and nothing changes",
		func(name string, rule []string) {
			ctx, cancel := bg()
			defer cancel()
			e := newEnv()
			_, err := e.client.Enqueue(ctx, name, []byte("x"), nil)
			expectInvalid(err, "queue name", rule...)
			_, err = e.client.EnqueueBatch(ctx, name, [][]byte{[]byte("x"), []byte("y")}, nil)
			expectInvalid(err, "queue name", rule...)

			w, err := worqr.NewWorker(e.served, e.workerConfig(map[string]worqr.QueueConfig{
				name: one(noop, 1),
			}, nil))
			expectInvalid(err, fmt.Sprintf("Queues[%q]", name), rule...)
			Expect(w).To(BeNil())

			Expect(e.allKeys()).To(BeEmpty())
		},
		Entry("empty", "", []string{"is empty"}),
		Entry("101 bytes", strings.Repeat("a", 101), []string{"101 bytes", "at most 100"}),
		Entry("a space", "a b", []string{"forbidden character", "' '"}),
		Entry("braces (a hash tag)", "a{b}", []string{"forbidden character", "'{'"}),
		Entry("a colon (the key separator)", "a:b", []string{"forbidden character", "':'"}),
	)

	It("rejects a worker config with a nil handler, negative concurrency or HeartbeatTTL <= HeartbeatInterval, naming the field and the rule", func(ctx SpecContext) {
		e := newEnv()
		_, err := worqr.NewWorker(e.served, e.workerConfig(map[string]worqr.QueueConfig{
			"q": {Handler: nil, Concurrency: 1},
		}, nil))
		expectInvalid(err, `Queues["q"].Handler`, "is nil")

		_, err = worqr.NewWorker(e.served, e.workerConfig(map[string]worqr.QueueConfig{
			"q": {Handler: noop, Concurrency: -1},
		}, nil))
		expectInvalid(err, `Queues["q"].Concurrency`, "(-1) must not be negative")

		for _, ttl := range []time.Duration{time.Second, 500 * time.Millisecond} {
			cfg := e.workerConfig(map[string]worqr.QueueConfig{"q": one(noop, 1)}, nil)
			cfg.HeartbeatInterval = time.Second
			cfg.HeartbeatTTL = ttl
			_, err = worqr.NewWorker(e.served, cfg)
			expectInvalid(err, "HeartbeatTTL", "must be greater than HeartbeatInterval", ttl.String(), "(1s)")
		}
		Expect(e.allKeys()).To(BeEmpty())
	}, SpecTimeout(10*time.Second))

	It("rejects a payload over MaxPayloadBytes, alone or in a batch, and enqueues nothing of that batch", func(ctx SpecContext) {
		e := newEnv()
		c, err := worqr.NewClient(e.served, &worqr.Config{Namespace: e.ns, MaxPayloadBytes: 16, Logger: e.logger})
		Expect(err).NotTo(HaveOccurred())

		_, err = c.Enqueue(ctx, "big", make([]byte, 17), nil)
		expectInvalid(err, "payload", "17 bytes", "MaxPayloadBytes (16)")

		_, err = c.EnqueueBatch(ctx, "big", [][]byte{[]byte("ok"), make([]byte, 16), make([]byte, 17), []byte("ok")}, nil)
		expectInvalid(err, "payloads[2]", "17 bytes", "MaxPayloadBytes (16)")
		Expect(e.allKeys()).To(BeEmpty(), "nothing of the batch was enqueued")

		// At the limit is fine (and the check above would have seen keys).
		_, err = c.Enqueue(ctx, "big", make([]byte, 16), nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(e.waiting("big")).To(HaveLen(1))
	}, SpecTimeout(10*time.Second))

	// Regression (issue 10): before, a ReaperInterval of 1ms was accepted,
	// and the reaper's lease (nine tenths of the interval, sent as SET PX in
	// whole milliseconds) became PX 0, which Redis refuses: every lease
	// attempt failed and recovery silently stopped. Now an interval under
	// worqr.MinInterval is refused by name before anything touches Redis.
	It("rejects a ReaperInterval of 1ms, naming ReaperInterval", func(ctx SpecContext) {
		e := newEnv()
		cfg := e.workerConfig(map[string]worqr.QueueConfig{"q": one(noop, 1)}, nil)
		cfg.ReaperInterval = time.Millisecond
		w, err := worqr.NewWorker(e.served, cfg)
		expectInvalid(err, "ReaperInterval", "1ms")
		Expect(w).To(BeNil())
		Expect(e.allKeys()).To(BeEmpty())
	}, SpecTimeout(10*time.Second))

	// Regression (issue 10): before, Client.Run read flow.Name before
	// checking the flow, so a nil flow panicked. Now it is an input error.
	// (Client.Run is gone, Inspector.Run takes the flow's name: the calls
	// that still take a *Flow to read runs are checked.)
	It("rejects Client.WaitRun and Inspector.FindRuns with a nil flow with an InvalidError, without panicking", func(ctx SpecContext) {
		e := newEnv()
		var (
			info *worqr.RunInfo
			runs []*worqr.RunInfo
			err  error
		)
		Expect(func() { info, err = e.client.WaitRun(ctx, nil, "some-run") }).NotTo(Panic())
		expectInvalid(err, "Flow", "is nil")
		Expect(info).To(BeNil())
		Expect(func() { runs, err = e.in.FindRuns(ctx, nil, "p", "v") }).NotTo(Panic())
		expectInvalid(err, "Flow", "is nil")
		Expect(runs).To(BeNil())
	}, SpecTimeout(10*time.Second))
})
