package integration_test

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/worqr"
)

var _ = Describe("Recovery", func() {
	It("recovers a dead worker's tasks without touching a live worker's tasks on the same queue", func(ctx SpecContext) {
		e := newEnv()
		var rec recorder
		started := make(chan string, 3)
		release := newGate()
		cfg := e.workerConfig(map[string]worqr.QueueConfig{
			"shared": one(worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
				started <- t.ID
				select {
				case <-release.ch:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}), 3),
		}, &rec)
		cfg.DisableReaper = true
		cfg.PollInterval = neverPoll
		live := e.start(nil, cfg)
		liveIDs := e.enqueueN("shared", 3)
		for range liveIDs {
			Eventually(ctx, started).WithTimeout(3 * time.Second).Should(Receive())
		}
		// The live worker is full; the dead one takes the next three.
		dead := e.register(time.Minute, "shared")
		deadIDs := e.enqueueN("shared", 3)
		Expect(e.take(dead, "shared", 3)).To(HaveLen(3))
		Expect(e.waiting("shared")).To(BeEmpty())

		q := e.qk("shared")
		liveWQ := q.WorkerQueue(live.ID())
		livePIDs := e.hkeys(liveWQ)
		Expect(livePIDs).To(HaveLen(3))
		before := e.snapshot()
		Expect(e.smembers(q.Holders)).To(ConsistOf(live.ID(), dead))

		e.kill(dead)
		Expect(e.pass()).To(Equal(3))

		Expect(e.waiting("shared")).To(Equal(deadIDs), "only the dead worker's tasks are requeued")
		after := e.snapshot()
		Expect(after[liveWQ]).To(Equal(before[liveWQ]), "the live worker's holdings are unchanged")
		for _, id := range liveIDs {
			Expect(after[q.Task(id)]).To(Equal(before[q.Task(id)]), "the live worker's task %s is unchanged", id)
		}
		Expect(e.smembers(q.Holders)).To(Equal([]string{live.ID()}))
		Expect(e.exists(q.WorkerQueue(dead))).To(BeFalse())
		Expect(e.smembers(e.keys.Workers())).To(ContainElement(live.ID()))
		Expect(e.smembers(e.keys.Workers())).NotTo(ContainElement(dead))

		// The live worker still owns its takings and finishes them.
		release.open()
		// (The requeued tasks run too, in the slots the live ones free: their
		// ends may be reported before the live ones'.)
		for _, id := range liveIDs {
			Eventually(ctx, func() []worqr.EventKind { return rec.kinds(id) }).
				WithTimeout(5 * time.Second).Should(Equal([]worqr.EventKind{worqr.EventDone}))
		}
		Expect(rec.count(worqr.EventLost)).To(BeZero())
	}, SpecTimeout(20*time.Second))

	It("requeues each task exactly once when several peers run a pass over the same dead worker at the same moment", func(ctx SpecContext) {
		const (
			peers  = 8
			rounds = 50
			tasks  = 5
		)
		pools := make([]*redis.Pool, peers)
		for i := range pools {
			pools[i] = newPool()
		}
		for round := 0; round < rounds; round++ {
			e := newEnv()
			ids := e.enqueueN("herd", tasks)
			dead := e.register(time.Minute, "herd")
			Expect(e.take(dead, "herd", 2)).To(HaveLen(2))
			Expect(e.take(dead, "herd", tasks-2)).To(HaveLen(tasks - 2))
			e.kill(dead)

			barrier := make(chan struct{})
			var wg sync.WaitGroup
			requeued := make([]int, peers)
			errs := make([]error, peers)
			for i := 0; i < peers; i++ {
				r := e.reaper(pools[i])
				wg.Add(1)
				go func(i int) {
					defer GinkgoRecover()
					defer wg.Done()
					<-barrier
					recs, err := r.Pass(ctx)
					errs[i] = err
					for _, rc := range recs {
						requeued[i] += rc.Requeued
					}
				}(i)
			}
			close(barrier)
			wg.Wait()
			total := 0
			for i := range errs {
				Expect(errs[i]).NotTo(HaveOccurred())
				total += requeued[i]
			}
			Expect(total).To(Equal(tasks), "round %d: requeued counts of the passes: %v", round, requeued)
			Expect(e.waiting("herd")).To(Equal(ids), "round %d: each id once, in order, nothing else", round)
			Expect(e.keysWith(":wq:")).To(BeEmpty())
			Expect(e.smembers(e.keys.Workers())).NotTo(ContainElement(dead))
			Expect(e.smembers(e.qk("herd").Holders)).To(BeEmpty())
		}
	}, SpecTimeout(60*time.Second))

	// The orphan race: a zombie (frozen between its freshness check and its
	// take) takes after its keepalive expired and after a pass forgot it.
	// Before issue 10's fencing the take landed and only a scan of every
	// queue's holder index could find it; now Redis refuses it, because the
	// take carries the worker's deadline and that has passed.
	It("refuses a take by a worker whose keepalive expired and that a pass already forgot (orphan race)", func(ctx SpecContext) {
		e := newEnv()
		id := e.enqueue("orphan", "x")
		w, until := e.registerUntil(300*time.Millisecond, []rdb.QueueRef{rdb.Standalone("orphan")})
		// Wait past the TTL: Redis expires the keepalive.
		Eventually(ctx, func() bool { return e.exists(e.keys.Keepalive(w)) }).
			WithTimeout(3 * time.Second).WithPolling(20 * time.Millisecond).Should(BeFalse())
		Expect(e.pass()).To(BeZero())
		Expect(e.smembers(e.keys.Workers())).NotTo(ContainElement(w), "the first pass forgot the dead worker")

		// The zombie takes after it was forgotten, with its old deadline.
		tctx, cancel := bg()
		defer cancel()
		taken, err := e.st.Take(tctx, e.qk("orphan"), rdb.TakeArgs{Worker: w, Until: until, Max: 1})
		Expect(err).To(MatchError(rdb.ErrExpired))
		Expect(taken).To(BeEmpty())
		Expect(e.waiting("orphan")).To(Equal([]string{id}), "the task is still waiting")
		Expect(e.smembers(e.qk("orphan").Holders)).To(BeEmpty())
		Expect(e.exists(e.qk("orphan").WorkerQueue(w))).To(BeFalse())
		Expect(e.keysWith(":wq:")).To(BeEmpty())
	}, SpecTimeout(15*time.Second))

	// Regression (issue 10): before, a worker whose process was frozen past
	// its TTL went on taking as soon as it woke up, before its first beat
	// came back with the keepalive gone: its handler returned, the freed
	// slot took the task the reaper had just put back at the front, under
	// the dead id. The task ran again on the zombie, and a second pass
	// requeued it with a second crash counted for one keepalive loss. Now a
	// worker whose last good beat is older than TTL - HeartbeatInterval (by
	// its keepalive clock) takes nothing until a beat says its id still
	// lives. The spec makes the race deterministic: the first beat after
	// the wake-up is slow (300ms) while the handler returns at once.
	It("counts one crash for one keepalive loss: a worker frozen past its TTL, reaped, then woken, takes nothing under its dead id", func(ctx SpecContext) {
		e := newEnv()
		var rec recorder
		type run struct {
			worker  string
			crashes int
		}
		runs := make(chan run, 4)
		release := newGate()
		cfg := e.workerConfig(map[string]worqr.QueueConfig{
			"frz": {Concurrency: 1, Retention: time.Minute, Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
				runs <- run{worker: t.WorkerID(), crashes: t.Crashes}
				// Ignores its context: a frozen process returns when it
				// wakes up.
				<-release.ch
				return nil
			})},
		}, &rec)
		cfg.DisableReaper = true // the spec runs the passes
		clock := newHeartClock(cfg.HeartbeatInterval)
		var beatDelay atomic.Int64
		w := e.startWithClock(slowBeatPool(&beatDelay), cfg, clock)
		zombie := w.ID()
		id := e.enqueue("frz", "x")
		var first run
		Eventually(ctx, runs).WithTimeout(3 * time.Second).Should(Receive(&first))
		Expect(first).To(Equal(run{worker: zombie, crashes: 0}))

		// Frozen: no beat; Redis expires the keepalive and a pass puts the
		// task back at the front, counting one crash.
		clock.freeze()
		Eventually(ctx, func() bool { return e.exists(e.keys.Keepalive(zombie)) }).
			WithTimeout(3 * time.Second).WithPolling(20 * time.Millisecond).Should(BeFalse())
		Expect(e.pass()).To(Equal(1))
		Expect(e.waiting("frz")).To(Equal([]string{id}))
		info, err := e.in.Task(ctx, "frz", id)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.Crashes).To(Equal(1))

		// It wakes up a TTL later: the clock jumps and the handler returns
		// at once, while the beat that will find the keepalive gone takes
		// 300ms.
		beatDelay.Store(int64(300 * time.Millisecond))
		clock.thaw(cfg.HeartbeatTTL)
		release.open()
		Eventually(ctx, func() int { return rec.count(worqr.EventKeepaliveLost) }).
			WithTimeout(3 * time.Second).Should(Equal(1))
		beatDelay.Store(0) // the new id beats normally

		var second run
		Eventually(ctx, runs).WithTimeout(5 * time.Second).Should(Receive(&second))
		Expect(second.worker).NotTo(Equal(zombie), "nothing is taken under the dead id")
		Expect(second.crashes).To(Equal(1))
		Eventually(ctx, func() []worqr.EventKind { return rec.kinds(id) }).WithTimeout(3 * time.Second).
			Should(Equal([]worqr.EventKind{worqr.EventLost, worqr.EventDone}))
		Expect(rec.all()).To(ContainElement(And(
			HaveField("Kind", worqr.EventDone), HaveField("TaskID", id), HaveField("WorkerID", second.worker))))
		Consistently(ctx, runs).WithTimeout(300*time.Millisecond).ShouldNot(Receive(), "the task ran twice in all")

		info, err = e.in.Task(ctx, "frz", id)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.State).To(Equal(worqr.StateDone))
		Expect(info.Crashes).To(Equal(1), "one keepalive loss, one crash")
		Expect(e.pass()).To(BeZero(), "no taking was left under the dead id")
		Expect(e.exists(e.qk("frz").WorkerQueue(zombie))).To(BeFalse())
		Expect(e.smembers(e.qk("frz").Holders)).NotTo(ContainElement(zombie))

		var lifecycle []string
		for _, ev := range rec.all() {
			if ev.Kind == worqr.EventKeepaliveLost || ev.Kind == worqr.EventRegistered {
				lifecycle = append(lifecycle, string(ev.Kind)+" "+ev.WorkerID)
			}
		}
		Expect(lifecycle).To(Equal([]string{"registered " + zombie, "keepalive_lost " + zombie, "registered " + second.worker}))
	}, SpecTimeout(20*time.Second))
})
