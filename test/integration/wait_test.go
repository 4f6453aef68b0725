package integration_test

import (
	"context"
	"errors"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/worqr/worqr-go/worqr"
)

var _ = Describe("Waiting for a task's end (issue 16)", func() {
	It("wakes Wait when the task ends, with its result, its death or its cancel, and refuses what it cannot know", func(ctx SpecContext) {
		e := newEnv()
		gate := newGate()
		cfg := e.workerConfig(map[string]worqr.QueueConfig{
			"waited": {Concurrency: 2, Retention: time.Minute, MaxAttempts: 1,
				Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
					if string(t.Payload) == "fail" {
						return errors.New("no luck")
					}
					<-gate.ch
					t.SetResult([]byte("r-" + string(t.Payload)))
					return nil
				})},
		}, nil)
		e.start(nil, cfg)

		id := e.enqueue("waited", "x")
		type result struct {
			info *worqr.TaskInfo
			err  error
		}
		got := make(chan result, 1)
		go func() {
			info, err := e.client.Wait(ctx, "waited", id)
			got <- result{info, err}
		}()
		Consistently(ctx, got).WithTimeout(300*time.Millisecond).ShouldNot(Receive(), "the task is still running")
		gate.open()
		var r result
		Eventually(ctx, got).WithTimeout(3 * time.Second).Should(Receive(&r))
		Expect(r.err).NotTo(HaveOccurred())
		Expect(r.info.State).To(Equal(worqr.StateDone))
		Expect(string(r.info.Result)).To(Equal("r-x"))

		// Already ended: at once.
		info, err := e.client.Wait(ctx, "waited", id)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.State).To(Equal(worqr.StateDone))

		bad := e.enqueue("waited", "fail")
		info, err = e.client.Wait(ctx, "waited", bad)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.State).To(Equal(worqr.StateDead))
		Expect(info.LastError).To(ContainSubstring("no luck"))

		// A task cancelled just before the Wait began, in a queue without
		// retention: nothing is left to read. Wait waits a little for an
		// end's event on its way (TestWaitRightAfterEnqueue): the cancel's
		// own, published by this client at most an EventInterval later, is
		// seen when it comes after Wait subscribed, and Wait says
		// cancelled; else, the grace over, not found.
		idle := e.enqueue("unserved", "y")
		_, err = e.client.Cancel(ctx, "unserved", idle)
		Expect(err).NotTo(HaveOccurred())
		info, err = e.client.Wait(ctx, "unserved", idle)
		if err != nil {
			Expect(err).To(MatchError(worqr.ErrTaskNotFound), "cancelled in a queue without retention: nothing left to read")
		} else {
			Expect(info.State).To(Equal(worqr.StateCancelled), "cancelled in a queue without retention: its event said so")
		}

		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		never := e.enqueue("unserved", "z")
		_, err = e.client.Wait(short, "unserved", never)
		Expect(err).To(MatchError(context.DeadlineExceeded))
		_, err = e.client.Wait(ctx, "waited", "nosuchtask")
		Expect(err).To(MatchError(worqr.ErrTaskNotFound))
	}, SpecTimeout(15*time.Second))
})
