package integration_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/worqr/worqr-go/worqr"
)

var _ = Describe("Idempotent enqueue (issue 16)", func() {
	// Before, an Enqueue whose reply was lost could only be retried by
	// creating a second task. With a caller-chosen id the retry finds its
	// own first attempt and creates nothing new, even once the task ran.
	It("creates one task for an id, however often the enqueue is retried, even after the task ran", func(ctx SpecContext) {
		e := newEnv()
		var armed atomic.Int32
		armed.Store(1) // the first enqueue's reply is lost after Redis applied it
		lossy := lossyPool(&armed, true, func(args []any) bool {
			// The enqueue of one task with an id: 5 keys (waiting, scheduled,
			// task, the id's packed hash, its lock).
			return fmt.Sprint(args[1]) == "5" && strings.HasSuffix(fmt.Sprint(args[2]), ":q:idem")
		})
		client, err := worqr.NewClient(lossy, &worqr.Config{Namespace: e.ns, Logger: e.logger})
		Expect(err).NotTo(HaveOccurred())
		opts := &worqr.EnqueueOpts{ID: "order-42"}

		_, err = client.Enqueue(ctx, "idem", []byte("ship"), opts)
		Expect(err).To(HaveOccurred(), "the reply was lost")
		Expect(armed.Load()).To(BeNumerically("<", 1), "the fault was injected")
		id, err := client.Enqueue(ctx, "idem", []byte("ship"), opts)
		Expect(err).NotTo(HaveOccurred())
		Expect(id).To(Equal("order-42"))
		Expect(e.waiting("idem")).To(Equal([]string{"order-42"}), "one task, not two")

		var ran trail
		e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{"idem": one(recordingHandler(&ran), 1)}, nil))
		Eventually(ctx, ran.get).WithTimeout(5 * time.Second).Should(Equal([]string{"order-42"}))
		Eventually(ctx, func() bool { return e.exists(e.qk("idem").Task("order-42")) }).WithTimeout(2 * time.Second).Should(BeFalse())

		// The task ran and is gone; a late retry still creates nothing.
		id, err = client.Enqueue(ctx, "idem", []byte("ship"), opts)
		Expect(err).NotTo(HaveOccurred())
		Expect(id).To(Equal("order-42"))
		Consistently(ctx, ran.get).WithTimeout(300 * time.Millisecond).Should(HaveLen(1))
		Expect(e.waiting("idem")).To(BeEmpty())

		// The same id with another payload is a conflict.
		_, err = client.Enqueue(ctx, "idem", []byte("refund"), opts)
		Expect(err).To(MatchError(worqr.ErrDuplicate))
		Expect(err.Error()).To(ContainSubstring("order-42 was used before with another payload"))

		// With a unique key too (on a queue no worker serves, so the task
		// stays and holds its key): both locks are declared, and a repeat
		// is still nothing new.
		both := &worqr.EnqueueOpts{ID: "order-43", UniqueKey: "cust-9", UniqueTTL: time.Minute}
		id, err = client.Enqueue(ctx, "idem-held", []byte("ship"), both)
		Expect(err).NotTo(HaveOccurred())
		Expect(id).To(Equal("order-43"))
		id, err = client.Enqueue(ctx, "idem-held", []byte("ship"), both)
		Expect(err).NotTo(HaveOccurred())
		Expect(id).To(Equal("order-43"))
		Expect(e.waiting("idem-held")).To(Equal([]string{"order-43"}))
		_, err = client.Enqueue(ctx, "idem-held", []byte("other"), &worqr.EnqueueOpts{UniqueKey: "cust-9", UniqueTTL: time.Minute})
		Expect(err).To(MatchError(worqr.ErrDuplicate), "the unique key is held by order-43")

		// Bad input names the field and the rule.
		_, err = client.Enqueue(ctx, "idem", []byte("x"), &worqr.EnqueueOpts{ID: "a:b"})
		Expect(err).To(MatchError(worqr.ErrInvalid))
		Expect(err.Error()).To(ContainSubstring("EnqueueOpts.ID"))
		_, err = client.EnqueueBatch(ctx, "idem", [][]byte{[]byte("a"), []byte("b")}, &worqr.EnqueueOpts{ID: "batch"})
		Expect(err).To(MatchError(ContainSubstring("EnqueueOpts.ID applies to a single Enqueue")))
	}, SpecTimeout(15*time.Second))
})
