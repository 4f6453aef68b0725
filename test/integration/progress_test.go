package integration_test

import (
	"context"
	"strings"
	"time"

	"github.com/worqr/worqr-go/defaults"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/worqr"
)

var _ = Describe("Progress of a running task (issue 16)", func() {
	It("shows a handler's reports through Inspector.Task while it runs and after, and refuses a zombie's", func(ctx SpecContext) {
		e := newEnv()
		gate := newGate()
		reported := make(chan error, 2)
		cfg := e.workerConfig(map[string]worqr.QueueConfig{
			"prog": {Concurrency: 1, Retention: time.Minute, Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
				reported <- t.Progress(ctx, "page 3 of 7")
				<-gate.ch
				reported <- t.Progress(ctx, strings.Repeat("x", defaults.MaxProgressLen+1))
				return t.Progress(ctx, "done: 7 pages")
			})},
		}, nil)
		e.start(nil, cfg)
		id := e.enqueue("prog", "doc")
		Eventually(ctx, reported).WithTimeout(3 * time.Second).Should(Receive(BeNil()))
		info, err := e.in.Task(ctx, "prog", id)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.State).To(Equal(worqr.StateActive))
		Expect(info.Progress).To(Equal("page 3 of 7"))

		gate.open()
		Eventually(ctx, reported).WithTimeout(3 * time.Second).Should(Receive(MatchError(worqr.ErrInvalid)))
		info, err = e.client.Wait(ctx, "prog", id)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.State).To(Equal(worqr.StateDone))
		Expect(info.Progress).To(Equal("done: 7 pages"))

		// A report for a taking its worker no longer owns changes nothing.
		w := e.register(time.Minute, "prog2")
		e.enqueue("prog2", "z")
		taken := e.take(w, "prog2", 1)
		Expect(taken).To(HaveLen(1))
		ok, err := e.st.Progress(ctx, e.qk("prog2"), "someone-else", taken[0].PID, taken[0].ID, "50%")
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeFalse())
		ok, err = e.st.Progress(ctx, e.qk("prog2"), w, taken[0].PID, taken[0].ID, "50%")
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue())
		e.kill(w)
		Expect(e.pass()).To(Equal(1))
		ok, err = e.st.Progress(ctx, e.qk("prog2"), w, taken[0].PID, taken[0].ID, "zombie")
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeFalse(), "requeued: the zombie no longer owns it")
		Expect(rdb.FieldProgress).To(Equal("pg"))
		info, err = e.in.Task(ctx, "prog2", taken[0].ID)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.Progress).To(Equal("50%"))
	}, SpecTimeout(15*time.Second))
})
