package integration_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/worqr/worqr-go/worqr"
)

var _ = Describe("Delivery under contention", func() {
	It("delivers each of 2,000 tasks to exactly one of 20 racing workers and leaves no taking behind", func(ctx SpecContext) {
		const (
			workers     = 20
			tasks       = 2000
			concurrency = 4
		)
		e := newEnv()
		var (
			mu   sync.Mutex
			runs = map[string]int{}
			by   = map[string]int{} // task id -> worker index of its first run
		)
		var rec recorder
		for i := 0; i < workers; i++ {
			i := i
			cfg := e.workerConfig(map[string]worqr.QueueConfig{
				"race": one(worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
					mu.Lock()
					defer mu.Unlock()
					runs[t.ID]++
					if _, ok := by[t.ID]; !ok {
						by[t.ID] = i
					}
					return nil
				}), concurrency),
			}, &rec)
			// A roomy TTL: this spec is about the race for the queue, and
			// a keepalive lost under -race load would legitimately run a
			// task twice.
			cfg.HeartbeatTTL = 3 * time.Second
			e.start(newPool(), cfg) // its own pool: separate connections
		}

		var ids []string
		for b := 0; b < 10; b++ { // enqueue while the workers race
			payloads := make([][]byte, tasks/10)
			for i := range payloads {
				payloads[i] = []byte(fmt.Sprintf("%d-%d", b, i))
			}
			got, err := e.client.EnqueueBatch(ctx, "race", payloads, nil)
			Expect(err).NotTo(HaveOccurred())
			ids = append(ids, got...)
		}
		Expect(ids).To(HaveLen(tasks))

		Eventually(ctx, func() int { return rec.count(worqr.EventDone) }).
			WithTimeout(45 * time.Second).WithPolling(50 * time.Millisecond).Should(Equal(tasks))
		Expect(rec.count(worqr.EventKeepaliveLost)).To(BeZero(), "no worker may lose its keepalive in this spec")
		Expect(rec.count(worqr.EventLost)).To(BeZero())

		mu.Lock()
		total, workersUsed := 0, map[int]bool{}
		for _, id := range ids {
			Expect(runs[id]).To(Equal(1), "task %s ran %d times", id, runs[id])
			total += runs[id]
			workersUsed[by[id]] = true
		}
		Expect(runs).To(HaveLen(tasks), "no run of an unknown id")
		mu.Unlock()
		Expect(total).To(Equal(tasks))
		// Many workers actually took part in the race.
		Expect(len(workersUsed)).To(BeNumerically(">", 1))
		GinkgoWriter.Printf("%d of %d workers ran tasks\n", len(workersUsed), workers)

		Expect(e.waiting("race")).To(BeEmpty())
		Expect(e.keysWith(":wq:")).To(BeEmpty(), "no holdings left")
		Expect(e.keysWith(":t:")).To(BeEmpty(), "no task hash left")
	}, SpecTimeout(60*time.Second))
})
