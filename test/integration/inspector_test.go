package integration_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/worqr"
)

// queueInfo returns the counts of one queue as the Inspector reports them.
func queueInfo(in *worqr.Inspector, queue string) func() worqr.QueueInfo {
	return func() worqr.QueueInfo {
		GinkgoHelper()
		ctx, cancel := bg()
		defer cancel()
		qi, err := in.Queue(ctx, queue)
		Expect(err).NotTo(HaveOccurred())
		return *qi
	}
}

// counts is the part of a QueueInfo the specs compare.
type counts struct {
	Name, Flow                       string
	Waiting, Scheduled, Active, Dead int64
	Paused                           bool
}

func countsOf(qs []worqr.QueueInfo) []counts {
	out := make([]counts, len(qs))
	for i, q := range qs {
		out[i] = counts{Name: q.Name, Flow: q.Flow, Waiting: q.Waiting, Scheduled: q.Scheduled,
			Active: q.Active, Dead: q.Dead, Paused: q.Paused}
	}
	return out
}

var _ = Describe("Inspector", func() {
	// Regression (issue 10): before, there was no Inspector, and nothing
	// recorded a queue that only a client had enqueued to (the registry
	// knew the queues of registered workers only), so no tool could list
	// it, nor the movers see it. Now the client records the queue on its
	// first enqueue and Inspector.Queues lists it beside the flows' stage
	// queues, with their counts.
	It("lists a queue only enqueued to, and a flow's stage queues with the runs waiting and active in them", func(ctx SpecContext) {
		e := newEnv()
		in := e.in
		solo := e.enqueueN("solo", 2) // no worker ever serves it

		started := make(chan string, 4)
		release := newGate()
		var log flLog
		f := &worqr.Flow{Name: "insp", Stages: []worqr.Stage{
			{Name: "first", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: flStageFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				started <- r.ID
				select {
				case <-release.ch:
					return nil, nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			})},
			{Name: "second", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: log.recordStage("second", "1")},
		}}
		e.start(nil, e.flWorkerConfig(nil, f))
		runs := e.flStartN(f, 3)
		Eventually(ctx, started).WithTimeout(3 * time.Second).Should(Receive(Equal(runs[0])))

		qs, err := in.Queues(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(countsOf(qs)).To(Equal([]counts{
			{Name: "insp/first", Flow: "insp", Waiting: 2, Active: 1},
			{Name: "insp/second", Flow: "insp"},
			{Name: "solo", Waiting: 2},
		}))
		Expect(queueInfo(in, "insp/first")()).To(And(HaveField("Waiting", int64(2)), HaveField("Active", int64(1))))
		waiting, total, err := in.Tasks(ctx, "insp/first", worqr.StateQueued, 0, 10)
		Expect(err).NotTo(HaveOccurred())
		Expect(total).To(Equal(2))
		Expect([]string{waiting[0].ID, waiting[1].ID}).To(Equal(runs[1:]))
		active, total, err := in.Tasks(ctx, "insp/first", worqr.StateActive, 0, 10)
		Expect(err).NotTo(HaveOccurred())
		Expect(total).To(Equal(1))
		Expect(active[0].ID).To(Equal(runs[0]))
		peek, _, err := in.Tasks(ctx, "solo", worqr.StateQueued, 0, 5)
		Expect(err).NotTo(HaveOccurred())
		Expect([]string{peek[0].ID, peek[1].ID}).To(Equal(solo))

		release.open()
		for _, id := range runs {
			Eventually(ctx, e.flStatus(f, id)).WithTimeout(5 * time.Second).Should(Equal(worqr.RunDone))
		}
		qs, err = in.Queues(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(countsOf(qs)).To(Equal([]counts{
			{Name: "insp/first", Flow: "insp"},
			{Name: "insp/second", Flow: "insp"},
			{Name: "solo", Waiting: 2},
		}))
	}, SpecTimeout(20*time.Second))

	// Regression (issue 10): before, Client.Dead and Client.RequeueDead (now
	// Inspector.Tasks and Inspector.RequeueDead) took stand-alone queue names only ("<flow>/<stage>" was refused for its
	// '/'), so a flow run that failed in a stage could be neither listed
	// nor requeued. Now both take "<flow>/<stage>", and a requeued run
	// resumes in that stage.
	It("lists a failed flow run in its stage's dead set and requeues it by \"<flow>/<stage>\"; the run then completes", func(ctx SpecContext) {
		e := newEnv()
		in := e.in
		var failing atomic.Bool
		failing.Store(true)
		var log flLog
		f := &worqr.Flow{Name: "deadflow", Stages: []worqr.Stage{
			{Name: "a", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: log.recordStage("a", "1")},
			{Name: "b", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: flStageFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				log.addRun(r)
				if failing.Load() {
					return nil, worqr.SkipRetry(errors.New("b is broken"))
				}
				return &worqr.StageResult{Fields: map[string]string{"b": "1"}}, nil
			})},
		}}
		e.start(nil, e.flWorkerConfig(nil, f))
		id := e.flStart(f, nil)
		Eventually(ctx, e.flStatus(f, id)).WithTimeout(5 * time.Second).Should(Equal(worqr.RunFailed))

		dead, total, err := in.Tasks(ctx, "deadflow/b", worqr.StateDead, 0, 10)
		Expect(err).NotTo(HaveOccurred())
		Expect(total).To(Equal(1))
		Expect(dead).To(HaveLen(1))
		Expect(dead[0].ID).To(Equal(id))
		Expect(dead[0].Queue).To(Equal("deadflow/b"))
		Expect(dead[0].State).To(Equal(worqr.StateDead))
		Expect(dead[0].LastError).To(ContainSubstring("b is broken"))
		Expect(queueInfo(in, "deadflow/b")().Dead).To(Equal(int64(1)))

		failing.Store(false)
		n, err := in.RequeueDead(ctx, "deadflow/b", id)
		Expect(err).NotTo(HaveOccurred())
		Expect(n).To(Equal(1))
		Eventually(ctx, e.flStatus(f, id)).WithTimeout(5 * time.Second).Should(Equal(worqr.RunDone))
		Expect(e.flRun(f, id).State).To(Equal(map[string]string{"a": "1", "b": "1"}))
		Expect(log.of("a")).To(Equal([]string{id}), "stage a ran once")
		Expect(log.of("b")).To(Equal([]string{id, id}), "stage b failed, then ran again after the requeue")
		_, total, err = in.Tasks(ctx, "deadflow/b", worqr.StateDead, 0, 10)
		Expect(err).NotTo(HaveOccurred())
		Expect(total).To(BeZero())
	}, SpecTimeout(20*time.Second))

	// Regression (issue 10): before, there was no way to pause a queue:
	// every worker took from every queue it served. Now the pause flag is
	// stored in Redis (so it outlives any worker), announced on the queue's
	// wake channel and re-read every PollInterval.
	It("pauses a queue: a running worker stops taking within one PollInterval, a restarted one honours the flag, Resume drains", func(ctx SpecContext) {
		e := newEnv()
		in := e.in
		var rec recorder
		started := make(chan string, 16)
		release := newGate()
		cfg := e.workerConfig(map[string]worqr.QueueConfig{
			"pq": one(worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
				started <- t.ID
				if string(t.Payload) == "hold" {
					select {
					case <-release.ch:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				return nil
			}), 2),
		}, &rec)
		w := e.start(nil, cfg)
		hold := e.enqueue("pq", "hold")
		Eventually(ctx, started).WithTimeout(3 * time.Second).Should(Receive(Equal(hold)))

		Expect(in.Pause(ctx, "pq")).To(Succeed())
		Expect(queueInfo(in, "pq")().Paused).To(BeTrue())
		// One PollInterval: the bound within which every worker honours it.
		Consistently(ctx, started).WithTimeout(cfg.PollInterval + 50*time.Millisecond).ShouldNot(Receive())
		ids := e.enqueueN("pq", 3)
		// The running task finishes; its freed slot takes nothing.
		release.open()
		Eventually(ctx, func() []worqr.EventKind { return rec.kinds(hold) }).
			WithTimeout(3 * time.Second).Should(Equal([]worqr.EventKind{worqr.EventDone}))
		Consistently(ctx, started).WithTimeout(3 * cfg.PollInterval).ShouldNot(Receive())
		Expect(e.waiting("pq")).To(Equal(ids), "the tasks stay waiting")
		Expect(countsOf([]worqr.QueueInfo{queueInfo(in, "pq")()})).
			To(Equal([]counts{{Name: "pq", Waiting: 3, Paused: true}}))

		Expect(in.Resume(ctx, "pq")).To(Succeed())
		for range ids {
			Eventually(ctx, started).WithTimeout(3 * time.Second).Should(Receive(BeElementOf(ids)))
		}
		Eventually(ctx, func() int { return rec.count(worqr.EventDone) }).WithTimeout(3 * time.Second).Should(Equal(4))
		Expect(queueInfo(in, "pq")().Paused).To(BeFalse())

		// The flag outlives the worker: a new one starts paused.
		Expect(in.Pause(ctx, "pq")).To(Succeed())
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		Expect(w.Stop(sctx)).To(Succeed())
		more := e.enqueueN("pq", 2)
		e.start(nil, cfg)
		Consistently(ctx, started).WithTimeout(3 * cfg.PollInterval).ShouldNot(Receive())
		Expect(e.waiting("pq")).To(Equal(more))
		Expect(in.Resume(ctx, "pq")).To(Succeed())
		for range more {
			Eventually(ctx, started).WithTimeout(3 * time.Second).Should(Receive(BeElementOf(more)))
		}
		Eventually(ctx, func() int { return rec.count(worqr.EventDone) }).WithTimeout(3 * time.Second).Should(Equal(6))
		Expect(e.waiting("pq")).To(BeEmpty())
	}, SpecTimeout(30*time.Second))

	// Regression (issue 10): before, there were no bulk operations beyond
	// Client.RequeueAllDead and PurgeDead, which reported nothing until they
	// ended; waiting tasks could not be deleted or cancelled wholesale. Now
	// the Inspector works in atomic chunks of 250, reports progress after
	// each, and CancelAll also asks running tasks to stop.
	It("requeues 2,500 dead tasks with progress, deletes every waiting task, and cancels all, running tasks included", func(ctx SpecContext) {
		const n = 2500
		e := newEnv()
		in := e.in
		payloads := make([][]byte, n)
		for i := range payloads {
			payloads[i] = []byte(fmt.Sprint(i))
		}
		ids, err := e.client.EnqueueBatch(ctx, "bulkq", payloads, nil)
		Expect(err).NotTo(HaveOccurred())
		// A hand-driven worker takes them all and ends each as dead.
		w := e.register(time.Minute, "bulkq")
		for left := n; left > 0; {
			taken := e.take(w, "bulkq", rdb.MaxTake)
			Expect(taken).NotTo(BeEmpty())
			ends := make([]rdb.Ending, len(taken))
			for i, t := range taken {
				ends[i] = rdb.Dead(rdb.KindTask, w, t.PID, t.ID, "broken")
			}
			got, err := e.st.End(ctx, e.qk("bulkq"), 0, ends)
			Expect(err).NotTo(HaveOccurred())
			for _, g := range got {
				Expect(g.Outcome).To(Equal(rdb.OutcomeDead))
			}
			left -= len(taken)
		}
		Expect(queueInfo(in, "bulkq")().Dead).To(Equal(int64(n)))

		var progress []int
		moved, err := in.RequeueAllDead(ctx, "bulkq", func(done int) { progress = append(progress, done) })
		Expect(err).NotTo(HaveOccurred())
		Expect(moved).To(Equal(n))
		Expect(len(progress)).To(BeNumerically(">=", 3), "progress after each chunk: %v", progress)
		Expect(progress).To(Equal([]int{250, 500, 750, 1000, 1250, 1500, 1750, 2000, 2250, 2500}))
		// Sorted, not ConsistOf: its matching is quadratic in 2,500 ids.
		back, want := e.waiting("bulkq"), append([]string(nil), ids...)
		sort.Strings(back)
		sort.Strings(want)
		Expect(back).To(Equal(want), "each dead id requeued once")
		Expect(countsOf([]worqr.QueueInfo{queueInfo(in, "bulkq")()})).To(Equal([]counts{{Name: "bulkq", Waiting: n}}))

		// DeleteAllWaiting deletes the waiting tasks and the scheduled ones.
		_, err = e.client.Enqueue(ctx, "bulkq", []byte("later"), &worqr.EnqueueOpts{Delay: time.Hour})
		Expect(err).NotTo(HaveOccurred())
		progress = nil
		deleted, err := in.DeleteAllWaiting(ctx, "bulkq", func(done int) { progress = append(progress, done) })
		Expect(err).NotTo(HaveOccurred())
		Expect(deleted).To(Equal(n + 1))
		Expect(len(progress)).To(BeNumerically(">=", 3))
		Expect(countsOf([]worqr.QueueInfo{queueInfo(in, "bulkq")()})).To(Equal([]counts{{Name: "bulkq"}}))
		Expect(e.keysWith(":t:")).To(BeEmpty(), "no task hash left")

		// CancelAll: one task running, three waiting behind it.
		started := make(chan string, 4)
		causes := make(chan error, 4)
		var rec recorder
		cfg := e.workerConfig(map[string]worqr.QueueConfig{
			"bulkq": one(holdUntilDone(started, causes), 1),
		}, &rec)
		e.start(nil, cfg)
		running := e.enqueue("bulkq", "running")
		Eventually(ctx, started).WithTimeout(3 * time.Second).Should(Receive(Equal(running)))
		waiting := e.enqueueN("bulkq", 3)
		Expect(e.waiting("bulkq")).To(Equal(waiting))

		cancelled, err := in.CancelAll(ctx, "bulkq", nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(cancelled).To(Equal(4))
		Eventually(ctx, causes).WithTimeout(3 * time.Second).Should(Receive(MatchError(worqr.ErrTaskCancelled)))
		Eventually(ctx, func() []worqr.EventKind { return rec.kinds(running) }).
			WithTimeout(3 * time.Second).Should(Equal([]worqr.EventKind{worqr.EventCancelled}))
		Consistently(ctx, started).WithTimeout(3*cfg.PollInterval).ShouldNot(Receive(), "no cancelled task runs")
		Expect(e.waiting("bulkq")).To(BeEmpty())
		for _, id := range waiting {
			_, err := e.in.Task(ctx, "bulkq", id)
			Expect(err).To(MatchError(worqr.ErrTaskNotFound), "ended as cancelled (no retention)")
		}
		Expect(countsOf([]worqr.QueueInfo{queueInfo(in, "bulkq")()})).To(Equal([]counts{{Name: "bulkq"}}))
	}, SpecTimeout(30*time.Second))

	// Regression (issue 10): before, the registry held only the Workers set
	// and keepalive keys: nothing said where a worker ran, what it served
	// or what it held. Now each registration describes the worker (host,
	// process id, queues) and Inspector.Workers adds its keepalive's age
	// and the takings it holds per queue.
	It("describes each worker: host, process id, queues, keepalive age and the takings it holds", func(ctx SpecContext) {
		e := newEnv()
		in := e.in
		started := make(chan string, 4)
		release := newGate()
		blocked := worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			started <- t.ID
			select {
			case <-release.ch:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		f := &worqr.Flow{Name: "wflow", Stages: []worqr.Stage{
			{Name: "only", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: flFieldsStage()},
		}}
		cfg := e.workerConfig(map[string]worqr.QueueConfig{"wa": one(blocked, 2), "wb": one(blocked, 1)}, nil)
		cfg.Flows = []*worqr.Flow{f}
		w := e.start(nil, cfg)
		ids := e.enqueueN("wa", 2)
		for range ids {
			Eventually(ctx, started).WithTimeout(3 * time.Second).Should(Receive(BeElementOf(ids)))
		}

		host, err := os.Hostname()
		Expect(err).NotTo(HaveOccurred())
		ws, err := in.Workers(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(ws).To(HaveLen(1))
		wi := ws[0]
		Expect(wi.ID).To(Equal(w.ID()))
		Expect(wi.Host).To(Equal(host))
		Expect(wi.PID).To(Equal(os.Getpid()))
		Expect(wi.Alive).To(BeTrue())
		Expect(wi.KeepaliveAge).To(BeNumerically("<", cfg.HeartbeatTTL))
		Expect(wi.Started).To(BeTemporally("~", time.Now(), 10*time.Second))
		Expect(wi.Queues).To(ConsistOf("wa", "wb", "wflow/only"))
		Expect(wi.Held).To(Equal(map[string]int{"wa": 2}))

		release.open()
		Eventually(ctx, func() map[string]int {
			ws, err := in.Workers(ctx)
			Expect(err).NotTo(HaveOccurred())
			Expect(ws).To(HaveLen(1))
			return ws[0].Held
		}).WithTimeout(3 * time.Second).Should(BeEmpty())
	}, SpecTimeout(20*time.Second))
})
