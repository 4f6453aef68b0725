package integration_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gomodule/redigo/redis"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gexec"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/worqr"
)

// flObserveScript reads, in one atomic step, where every run of a two-stage
// flow is: A's waiting list, every processing list (p:<pid>) of the tag, and
// B's waiting list; and which waiting runs' hashes disagree with their list.
var flObserveScript = redis.NewScript(0, `
local aw = redis.call('LRANGE', ARGV[1], 0, -1)
local bw = redis.call('LRANGE', ARGV[2], 0, -1)
local pr = {}
for _, k in ipairs(redis.call('KEYS', ARGV[3])) do
  for _, id in ipairs(redis.call('HVALS', k)) do
    table.insert(pr, id)
  end
end
local bad = {}
for _, id in ipairs(aw) do
  if redis.call('HGET', ARGV[4] .. id, 'st') ~= ARGV[5] then table.insert(bad, id) end
end
for _, id in ipairs(bw) do
  if redis.call('HGET', ARGV[4] .. id, 'st') ~= ARGV[6] then table.insert(bad, id) end
end
return {aw, pr, bw, bad}
`)

var _ = Describe("Flows", func() {
	It("forwards each run from A to B in one atomic step: a concurrent observer never sees a run both in A's processing and B's queue, nor in neither", func(ctx SpecContext) {
		const runs = 1000
		e := newEnv()
		holdB := newGate()
		f := &worqr.Flow{Name: "fwd", Stages: []worqr.Stage{
			{Name: "A", Queue: worqr.QueueConfig{Concurrency: 16}, Handler: flFieldsStage("a", "done")},
			// B's one slot stays busy: the other runs pile up in B's queue.
			{Name: "B", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: flStageFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				select {
				case <-holdB.ch:
					return nil, nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			})},
		}}
		ids := e.flStartN(f, runs)
		started := map[string]bool{}
		for _, id := range ids {
			started[id] = true
		}
		qa, qb := e.flQK(f.Name, "A"), e.flQK(f.Name, "B")

		type report struct {
			snapshots, midFlight int
			violations           []string
			err                  error
		}
		stop := make(chan struct{})
		done := make(chan report, 1)
		obsPool := newPool()
		go func() {
			defer GinkgoRecover()
			var rep report
			defer func() { done <- rep }()
			c := obsPool.Get()
			defer c.Close()
			for {
				select {
				case <-stop:
					return
				default:
				}
				v, err := redis.Values(flObserveScript.Do(c, qa.Waiting, qb.Waiting, strings.TrimSuffix(qa.WorkerQueuePrefix, "A:")+"*", qa.TaskPrefix, "A", "B"))
				if err != nil {
					rep.err = err
					return
				}
				aw, _ := redis.Strings(v[0], nil)
				pr, _ := redis.Strings(v[1], nil)
				bw, _ := redis.Strings(v[2], nil)
				bad, _ := redis.Strings(v[3], nil)
				rep.snapshots++
				if (len(aw) > 0 || len(pr) > 1) && len(bw) > 0 {
					rep.midFlight++
				}
				where := map[string][]string{}
				for _, id := range aw {
					where[id] = append(where[id], "A waiting")
				}
				for _, id := range pr {
					where[id] = append(where[id], "processing")
				}
				for _, id := range bw {
					where[id] = append(where[id], "B waiting")
				}
				for id := range started {
					if len(where[id]) != 1 && len(rep.violations) < 10 {
						rep.violations = append(rep.violations, fmt.Sprintf("snapshot %d: run %s in %v", rep.snapshots, id, where[id]))
					}
				}
				for id := range where {
					if !started[id] && len(rep.violations) < 10 {
						rep.violations = append(rep.violations, fmt.Sprintf("snapshot %d: unknown id %s in %v", rep.snapshots, id, where[id]))
					}
				}
				for _, id := range bad {
					if len(rep.violations) < 10 {
						rep.violations = append(rep.violations, fmt.Sprintf("snapshot %d: run %s's hash names another stage than its queue", rep.snapshots, id))
					}
				}
			}
		}()
		DeferCleanup(func() {
			select {
			case <-stop:
			default:
				close(stop)
			}
		})

		e.start(nil, e.flWorkerConfig(nil, f))
		DeferCleanup(holdB.open) // before the worker stops
		Eventually(ctx, func() int { return len(e.flWaiting(f.Name, "B")) }).
			WithTimeout(30 * time.Second).WithPolling(50 * time.Millisecond).Should(Equal(runs - 1))
		close(stop)
		var rep report
		Eventually(ctx, done).WithTimeout(5 * time.Second).Should(Receive(&rep))
		Expect(rep.err).NotTo(HaveOccurred())
		AddReportEntry("observer", fmt.Sprintf("%d snapshots, %d while runs were on both sides", rep.snapshots, rep.midFlight))
		Expect(rep.violations).To(BeEmpty())
		Expect(rep.midFlight).To(BeNumerically(">=", 10), "the observer must watch the move, not only its ends")
		Expect(e.flWaiting(f.Name, "A")).To(BeEmpty())
	}, SpecTimeout(60*time.Second))

	It("queues forwarded runs behind the runs already waiting in the next stage, and wakes that stage's idle worker", func(ctx SpecContext) {
		e := newEnv()
		var log flLog
		f := &worqr.Flow{Name: "fifo", Stages: []worqr.Stage{
			{Name: "A", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: log.recordStage("a", "1")},
			{Name: "B", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: log.recordStage("b", "1")},
		}}
		// Three runs already wait in B (a hand-driven worker did their A).
		w := e.flRegister(time.Minute, f.Name, "A")
		pre := e.flStartN(f, 3)
		for _, id := range pre {
			t := e.flTakeStage(w, f, "A", 1)
			Expect(t[0].ID).To(Equal(id))
			Expect(e.flFinish(w, f, "A", t[0], map[string]string{"a": "1"}, nil)).To(Equal(rdb.OutcomeForwarded))
		}
		Expect(e.flWaiting(f.Name, "B")).To(Equal(pre))
		// Three more finish A: each goes to the back of B.
		fwd := e.flStartN(f, 3)
		taken := e.flTakeStage(w, f, "A", 3)
		Expect(taken).To(HaveLen(3))
		for _, t := range taken {
			Expect(e.flFinish(w, f, "A", t, map[string]string{"a": "1"}, nil)).To(Equal(rdb.OutcomeForwarded))
		}
		all := append(append([]string{}, pre...), fwd...)
		Expect(e.flWaiting(f.Name, "B")).To(Equal(all))

		// B's worker starts after, and never polls: it takes them in order.
		cfg := e.flWorkerConfig(nil, f)
		cfg.PollInterval = neverPoll
		e.start(nil, cfg)
		Eventually(ctx, log.ofFn("B")).WithTimeout(5 * time.Second).Should(Equal(all))
		Expect(log.of("A")).To(BeEmpty())
		Eventually(ctx, func() int { return e.numsub(e.flQK(f.Name, "B").WakeChannel) }).
			WithTimeout(5 * time.Second).Should(Equal(1))
		Consistently(ctx, log.ofFn("B")).WithTimeout(300 * time.Millisecond).Should(HaveLen(len(all)))

		// A new run: only pub/sub can get it through the idle A and B.
		late := e.flStart(f, nil)
		Eventually(ctx, log.ofFn("B")).WithTimeout(2 * time.Second).Should(Equal(append(all, late)))
		Expect(log.of("A")).To(Equal([]string{late}))
		Eventually(ctx, e.flStatus(f, late)).WithTimeout(2 * time.Second).Should(Equal(worqr.RunDone))
	}, SpecTimeout(20*time.Second))

	It("lets a zombie's stale finish of a stage forward nothing: the next stage holds the run exactly once", func(ctx SpecContext) {
		e := newEnv()
		f := &worqr.Flow{Name: "zomb", Stages: []worqr.Stage{
			{Name: "A", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: flFieldsStage(),
				Children: map[string]worqr.QueueConfig{"kid": one(worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil }), 1)}},
			{Name: "B", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: flFieldsStage()},
		}}
		id := e.flStart(f, map[string]string{"userId": "1"})
		w1 := e.flRegister(time.Minute, f.Name, "A")
		t1 := e.flTakeStage(w1, f, "A", 1)
		Expect(t1).To(HaveLen(1))

		e.kill(w1)
		Expect(e.pass()).To(Equal(1))
		Expect(e.flWaiting(f.Name, "A")).To(Equal([]string{id}))

		w2 := e.flRegister(time.Minute, f.Name, "A")
		t2 := e.flTakeStage(w2, f, "A", 1)
		Expect(t2).To(HaveLen(1))
		Expect(t2[0].ID).To(Equal(id))
		Expect(e.flFinish(w2, f, "A", t2[0], map[string]string{"by": "w2"}, nil)).To(Equal(rdb.OutcomeForwarded))
		Expect(e.flWaiting(f.Name, "B")).To(Equal([]string{id}))

		// The zombie finishes its stale taking, with other fields and
		// children: refused, nothing changes.
		before := e.snapshot()
		out, err := e.flFinish(w1, f, "A", t1[0], map[string]string{"by": "w1"}, flKids("kid", 2))
		Expect(err).To(MatchError(rdb.ErrLost))
		Expect(out).To(Equal(rdb.OutcomeLost))
		Expect(e.snapshot()).To(Equal(before))
		Expect(e.flWaiting(f.Name, "B")).To(Equal([]string{id}))
		Expect(e.flWaiting(f.Name, "kid")).To(BeEmpty())
		info := e.flRun(f, id)
		Expect(info.Stage).To(Equal("B"))
		Expect(info.State).To(Equal(map[string]string{"userId": "1", "by": "w2"}))
		Expect(info.Children).To(BeEmpty())
	}, SpecTimeout(15*time.Second))

	It("does not create a second set of children when a fan-out stage is re-run after its worker died", func(ctx SpecContext) {
		e := newEnv()
		var log flLog
		var rec1, rec2 recorder
		firstTook := make(chan struct{}, 1)
		releaseFirst := newGate()
		releaseKids := newGate()
		kid := worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			log.add(t.Queue, t.ID)
			select {
			case <-releaseKids.ch:
			case <-ctx.Done():
				return ctx.Err()
			}
			t.SetResult([]byte("ok"))
			return nil
		})
		flow := func(fan worqr.StageHandler) *worqr.Flow {
			return &worqr.Flow{Name: "rerun", Stages: []worqr.Stage{
				{Name: "fan", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: fan,
					Children: map[string]worqr.QueueConfig{"kid": one(kid, 3)}},
				{Name: "after", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: log.recordStage("after", "1")},
			}}
		}
		fanOut := func(who string) *worqr.StageResult {
			return &worqr.StageResult{Fields: map[string]string{"fanned_by": who}, Children: []worqr.ChildSpec{
				{Queue: "kid", Payload: []byte(who + "-1")}, {Queue: "kid", Payload: []byte(who + "-2")}, {Queue: "kid", Payload: []byte(who + "-3")},
			}}
		}
		// The first taker blocks until told, and does not heed its context:
		// like a frozen process, it wakes up later and finishes.
		f1 := flow(flStageFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
			log.addRun(r)
			firstTook <- struct{}{}
			<-releaseFirst.ch
			return fanOut("w1"), nil
		}))
		f2 := flow(flStageFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
			log.addRun(r)
			return fanOut("w2"), nil
		}))

		cfg1 := e.flWorkerConfig(&rec1, f1)
		cfg1.DisableReaper = true
		clock1 := newHeartClock(cfg1.HeartbeatInterval)
		w1 := e.startWithClock(nil, cfg1, clock1)
		id := e.flStart(f1, nil)
		Eventually(ctx, firstTook).WithTimeout(5 * time.Second).Should(Receive())
		// w1 "dies": it stops taking and its keepalive lapses while its
		// stage handler still runs (its keepalive clock is frozen).
		clock1.freeze()
		stopped := make(chan error, 1)
		go func() {
			sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			stopped <- w1.Stop(sctx)
		}()
		DeferCleanup(func() {
			releaseFirst.open()
			Eventually(stopped).WithTimeout(25 * time.Second).Should(Receive())
		})

		e.start(newPool(), e.flWorkerConfig(&rec2, f2))
		Eventually(ctx, func() []worqr.EventKind { return rec2.flEvents("fan", id) }).
			WithTimeout(5 * time.Second).Should(Equal([]worqr.EventKind{worqr.EventFannedOut}))
		Eventually(ctx, func() int { return rec2.count(worqr.EventRecovered) }).WithTimeout(time.Second).Should(BeNumerically(">=", 1))
		Expect(e.flRun(f2, id).State["fanned_by"]).To(Equal("w2"))
		Eventually(ctx, log.ofFn("kid")).WithTimeout(5 * time.Second).Should(HaveLen(3))

		// The first taker wakes up and finishes while the children run.
		releaseFirst.open()
		Eventually(ctx, func() []worqr.EventKind { return rec1.flEvents("fan", id) }).
			WithTimeout(5 * time.Second).Should(HaveLen(1))
		Expect(e.flChildFields(f2.Name, id)).To(HaveLen(3), "one set of children")
		Expect(e.flChildTasks(f2.Name, id)).To(ConsistOf(log.of("kid")))
		Expect(rec1.flEvents("fan", id)).To(Equal([]worqr.EventKind{worqr.EventLost}), "the stale finish was refused")
		Expect(e.flRun(f2, id).State["fanned_by"]).To(Equal("w2"))

		releaseKids.open()
		Eventually(ctx, e.flStatus(f2, id)).WithTimeout(5 * time.Second).Should(Equal(worqr.RunDone))
		info := e.flRun(f2, id)
		Expect(info.Children).To(HaveLen(3))
		for _, c := range info.Children {
			Expect(c.Status).To(Equal("done"))
			Expect(c.Result).To(Equal([]byte("ok")))
		}
		Expect(log.of("kid")).To(HaveLen(3), "each child ran once")
		Expect(log.of("after")).To(Equal([]string{id}))
		Expect(log.of("fan")).To(Equal([]string{id, id}), "the stage ran twice: once on the dead worker, once on the peer")
		Expect(info.State["fanned_by"]).To(Equal("w2"))
		Expect(e.flChildTasks(f2.Name, id)).To(BeEmpty())
	}, SpecTimeout(40*time.Second))

	It("continues the parent exactly once, never before the last child, when all its children finish at the same instant", func(ctx SpecContext) {
		const (
			rounds     = 200
			heldRounds = 50
			ka, kb     = 3, 2
			n          = ka + kb
		)
		e := newEnv()
		f := &worqr.Flow{Name: "herd", Stages: []worqr.Stage{
			{Name: "fan", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: flFieldsStage(), Children: map[string]worqr.QueueConfig{
				"ka": one(worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil }), 1),
				"kb": one(worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil }), 1),
			}},
			{Name: "next", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: flFieldsStage()},
		}}
		pools := make([]*redis.Pool, n)
		for i := range pools {
			pools[i] = newPool()
		}
		w := e.flRegister(time.Hour, f.Name, "fan", "ka", "kb")

		// fanOut starts a run and fans it out into n children, all taken.
		fanOut := func() (string, []rdb.Taken, []string) {
			id := e.flStart(f, nil)
			t := e.flTakeStage(w, f, "fan", 1)
			children := append(flKids("ka", ka), flKids("kb", kb)...)
			Expect(e.flFinish(w, f, "fan", t[0], nil, children)).To(Equal(rdb.OutcomeFannedOut))
			taken := append(e.flTakeChild(w, f, "ka", ka), e.flTakeChild(w, f, "kb", kb)...)
			Expect(taken).To(HaveLen(n))
			queues := make([]string, n)
			for i, c := range taken {
				Expect(c.Parent).To(Equal(id))
				queues[i] = "ka"
				if i >= ka {
					queues[i] = "kb"
				}
			}
			return id, taken, queues
		}
		// finishTogether finishes the given children from separate
		// connections released by one barrier; it returns the run outcomes.
		finishTogether := func(taken []rdb.Taken, queues []string, idx []int) []rdb.Outcome {
			conns := make([]redis.Conn, len(idx))
			for j, i := range idx {
				conns[j] = pools[i].Get()
			}
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			barrier := make(chan struct{})
			runOut := make([]rdb.Outcome, len(idx))
			childOut := make([]rdb.Outcome, len(idx))
			errs := make([]error, len(idx))
			var wg sync.WaitGroup
			for j, i := range idx {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-barrier
					childOut[j], runOut[j], errs[j] = e.flChildFinish(conns[j], w, f, queues[i], taken[i], fmt.Sprintf("r%d", i))
				}()
			}
			close(barrier)
			wg.Wait()
			for j := range idx {
				Expect(errs[j]).NotTo(HaveOccurred())
				Expect(childOut[j]).To(Equal(rdb.OutcomeDone))
			}
			return runOut
		}
		count := func(outs []rdb.Outcome, o rdb.Outcome) int {
			c := 0
			for _, x := range outs {
				if x == o {
					c++
				}
			}
			return c
		}
		var forwarded []string
		for round := 0; round < rounds; round++ {
			id, taken, queues := fanOut()
			outs := finishTogether(taken, queues, []int{0, 1, 2, 3, 4})
			Expect(count(outs, rdb.OutcomeForwarded)).To(Equal(1), "round %d: run outcomes %d (7 forwarded, 0 unchanged)", round, outs)
			Expect(count(outs, 0)).To(Equal(n-1), "round %d: run outcomes %d (7 forwarded, 0 unchanged)", round, outs)
			forwarded = append(forwarded, id)
			Expect(e.flWaiting(f.Name, "next")).To(Equal(forwarded), "round %d: the run is forwarded exactly once", round)
			h := e.flHash(f.Name, id)
			Expect(h["st"]).To(Equal("next"))
			for i, c := range taken {
				Expect(h["k:"+c.ID]).To(Equal("done"), "round %d", round)
				Expect(h["kr:"+c.ID]).To(Equal(fmt.Sprintf("r%d", i)), "round %d", round)
			}
		}
		// Never before the last: n-1 finish together, the run waits; then
		// the last one forwards it.
		for round := 0; round < heldRounds; round++ {
			id, taken, queues := fanOut()
			last := round % n
			var first []int
			for i := 0; i < n; i++ {
				if i != last {
					first = append(first, i)
				}
			}
			outs := finishTogether(taken, queues, first)
			Expect(count(outs, 0)).To(Equal(n-1), "held round %d: run outcomes %d (7 forwarded, 0 unchanged)", round, outs)
			Expect(e.flWaiting(f.Name, "next")).To(Equal(forwarded), "held round %d: not forwarded before the last child", round)
			h := e.flHash(f.Name, id)
			Expect(h["st"]).To(Equal("fan"))
			Expect(h["s"]).To(Equal("children"))
			Expect(h["kp"]).To(Equal("1"))
			Expect(h["k:"+taken[last].ID]).To(Equal("pending"))
			outs = finishTogether(taken, queues, []int{last})
			Expect(outs).To(Equal([]rdb.Outcome{rdb.OutcomeForwarded}))
			forwarded = append(forwarded, id)
			Expect(e.flWaiting(f.Name, "next")).To(Equal(forwarded))
		}
	}, SpecTimeout(60*time.Second))

	It("counts a child finished twice (a zombie's stale finish after a requeue) once", func(ctx SpecContext) {
		e := newEnv()
		f := &worqr.Flow{Name: "twice", Stages: []worqr.Stage{
			{Name: "fan", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: flFieldsStage(), Children: map[string]worqr.QueueConfig{
				"kid": one(worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil }), 1),
			}},
			{Name: "next", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: flFieldsStage()},
		}}
		id := e.flStart(f, nil)
		w := e.flRegister(time.Minute, f.Name, "fan", "kid")
		t := e.flTakeStage(w, f, "fan", 1)
		children := flKids("kid", 3)
		Expect(e.flFinish(w, f, "fan", t[0], nil, children)).To(Equal(rdb.OutcomeFannedOut))
		Expect(e.flHash(f.Name, id)["kp"]).To(Equal("3"))

		// A zombie takes the first child; it is recovered and re-taken.
		zombie := e.flRegister(time.Minute, f.Name, "kid")
		stale := e.flTakeChild(zombie, f, "kid", 1)
		Expect(stale[0].ID).To(Equal(children[0].ID))
		e.kill(zombie)
		Expect(e.pass()).To(Equal(1))
		Expect(e.flWaiting(f.Name, "kid")).To(Equal([]string{children[0].ID, children[1].ID, children[2].ID}))
		again := e.flTakeChild(w, f, "kid", 1)
		Expect(again[0].ID).To(Equal(children[0].ID))

		// The zombie finishes first, while the peer still runs the child.
		before := e.snapshot()
		out, run, err := e.flChildFinish(nil, zombie, f, "kid", stale[0], "zombie")
		Expect(err).To(MatchError(rdb.ErrLost))
		Expect(out).To(Equal(rdb.OutcomeLost))
		Expect(run).To(BeZero())
		Expect(e.snapshot()).To(Equal(before), "a refused finish changes nothing")

		// The peer's finish counts; the zombie's again, after it, does not.
		out, run, err = e.flChildFinish(nil, w, f, "kid", again[0], "peer")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(Equal(rdb.OutcomeDone))
		Expect(run).To(BeZero())
		Expect(e.flHash(f.Name, id)["kp"]).To(Equal("2"))
		before = e.snapshot()
		_, _, err = e.flChildFinish(nil, zombie, f, "kid", stale[0], "zombie")
		Expect(err).To(MatchError(rdb.ErrLost))
		Expect(e.snapshot()).To(Equal(before))
		Expect(e.flHash(f.Name, id)["kr:"+children[0].ID]).To(Equal("peer"))

		// The other two: the run moves on at the third finish, not before.
		rest := e.flTakeChild(w, f, "kid", 2)
		Expect(rest).To(HaveLen(2))
		_, run, err = e.flChildFinish(nil, w, f, "kid", rest[0], "peer")
		Expect(err).NotTo(HaveOccurred())
		Expect(run).To(BeZero())
		Expect(e.flHash(f.Name, id)["kp"]).To(Equal("1"))
		Expect(e.flWaiting(f.Name, "next")).To(BeEmpty())
		_, run, err = e.flChildFinish(nil, w, f, "kid", rest[1], "peer")
		Expect(err).NotTo(HaveOccurred())
		Expect(run).To(Equal(rdb.OutcomeForwarded))
		Expect(e.flWaiting(f.Name, "next")).To(Equal([]string{id}))
		info := e.flRun(f, id)
		Expect(info.Children).To(HaveLen(3))
		for _, c := range info.Children {
			Expect(c.Status).To(Equal("done"))
			Expect(c.Result).To(Equal([]byte("peer")))
		}
	}, SpecTimeout(15*time.Second))

	It("continues the parent at once when a stage that declares children returns none", func(ctx SpecContext) {
		e := newEnv()
		var log flLog
		var rec recorder
		results := map[string]*worqr.StageResult{
			"nil-children":   {Fields: map[string]string{"checked": "yes"}, Children: nil},
			"empty-children": {Fields: map[string]string{"checked": "yes"}, Children: []worqr.ChildSpec{}},
			"nil-result":     nil,
		}
		f := &worqr.Flow{Name: "zero", Stages: []worqr.Stage{
			{Name: "maybe", Queue: worqr.QueueConfig{Concurrency: 3},
				Handler: flStageFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
					log.addRun(r)
					return results[r.State["case"]], nil
				}),
				Children: map[string]worqr.QueueConfig{"kid": one(log.recordChild("x"), 1)}},
			{Name: "after", Queue: worqr.QueueConfig{Concurrency: 3}, Handler: log.recordStage("after", "yes")},
		}}
		cfg := e.flWorkerConfig(&rec, f)
		cfg.PollInterval = neverPoll
		e.start(nil, cfg)
		ids := map[string]string{}
		for c := range results {
			ids[c] = e.flStart(f, map[string]string{"case": c})
		}
		for c, id := range ids {
			Eventually(ctx, e.flStatus(f, id)).WithTimeout(3*time.Second).Should(Equal(worqr.RunDone), "case %s", c)
			info := e.flRun(f, id)
			Expect(info.Children).To(BeEmpty(), "case %s", c)
			Expect(e.flChildFields(f.Name, id)).To(BeEmpty(), "case %s", c)
			Eventually(ctx, func() []worqr.EventKind { return rec.flEvents("maybe", id) }).
				WithTimeout(time.Second).Should(Equal([]worqr.EventKind{worqr.EventForwarded}), "case %s", c)
			Expect(info.State["after"]).To(Equal("yes"), "case %s", c)
		}
		Expect(log.of("after")).To(ConsistOf(ids["nil-children"], ids["empty-children"], ids["nil-result"]))
		Expect(log.of("kid")).To(BeEmpty())
		Expect(rec.count(worqr.EventFannedOut)).To(BeZero())
	}, SpecTimeout(15*time.Second))

	Context("a child that fails for good", func() {
		It("fails the run once under fail-fast (the default) and cancels the other children: queued ones removed, running ones' contexts cancelled, none runs afterwards", func(ctx SpecContext) {
			e := newEnv()
			var log flLog
			var rec recorder
			var badRuns atomic.Int32
			slowStarted := make(chan struct{})
			var slowOnce sync.Once
			causes := make(chan error, 4)
			bad := worqr.QueueConfig{Concurrency: 1, MaxAttempts: 2,
				Backoff: func(int, error) time.Duration { return 10 * time.Millisecond },
				Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
					// Fail only once a sibling runs, so that there is one
					// to cancel.
					<-slowStarted
					badRuns.Add(1)
					return fmt.Errorf("boom %d", t.Attempt)
				})}
			slow := worqr.QueueConfig{Concurrency: 1, Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
				log.add(t.Queue, t.ID)
				slowOnce.Do(func() { close(slowStarted) })
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return ctx.Err()
			})}
			f := &worqr.Flow{Name: "failfast", Stages: []worqr.Stage{
				{Name: "fan", Queue: worqr.QueueConfig{Concurrency: 1},
					Handler: flStageFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
						return &worqr.StageResult{Children: []worqr.ChildSpec{
							{Queue: "bad"}, {Queue: "slow"}, {Queue: "slow"}, {Queue: "slow"},
						}}, nil
					}),
					Children: map[string]worqr.QueueConfig{"bad": bad, "slow": slow}},
				{Name: "after", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: log.recordStage()},
			}}
			e.start(nil, e.flWorkerConfig(&rec, f))
			id := e.flStart(f, nil)

			Eventually(ctx, e.flStatus(f, id)).WithTimeout(5 * time.Second).Should(Equal(worqr.RunFailed))
			Eventually(ctx, causes).WithTimeout(3*time.Second).Should(Receive(MatchError(worqr.ErrTaskCancelled)), "the running sibling's context is cancelled")
			info := e.flRun(f, id)
			finished := info.FinishedAt
			Expect(finished.IsZero()).To(BeFalse())
			Expect(info.Children).To(HaveLen(4))
			var failed, cancelled int
			for _, c := range info.Children {
				switch c.Status {
				case "failed":
					failed++
					Expect(c.Queue).To(Equal("bad"))
					Expect(c.Err).To(ContainSubstring("boom 2"))
				case "cancelled":
					cancelled++
					Expect(c.Queue).To(Equal("slow"))
				}
			}
			Expect([]int{failed, cancelled}).To(Equal([]int{1, 3}))

			Consistently(ctx, func() int { return len(log.of("slow")) }).
				WithTimeout(700*time.Millisecond).Should(Equal(1), "no cancelled child runs afterwards")
			Expect(badRuns.Load()).To(Equal(int32(2)))
			Expect(log.of("after")).To(BeEmpty())
			Expect(e.flWaiting(f.Name, "slow")).To(BeEmpty())
			Expect(e.flWaiting(f.Name, "bad")).To(BeEmpty())
			Expect(e.flWaiting(f.Name, "after")).To(BeEmpty())
			n, err := redis.Int(e.do("ZCARD", e.flQK(f.Name, "slow").Scheduled))
			Expect(err).NotTo(HaveOccurred())
			Expect(n).To(BeZero())
			again := e.flRun(f, id)
			Expect(again.Status).To(Equal(worqr.RunFailed))
			Expect(again.FinishedAt).To(Equal(finished), "the run failed once")
			Expect(flChildStatuses(again)).To(Equal(flChildStatuses(info)))
			Expect(e.flChildTasks(f.Name, id)).To(HaveLen(1), "only the dead child's record is left (in its dead set)")
		}, SpecTimeout(20*time.Second))

		It("records the failure and continues the run once under ContinueOnChildFailure", func(ctx SpecContext) {
			e := newEnv()
			var log flLog
			f := &worqr.Flow{Name: "cont", Stages: []worqr.Stage{
				{Name: "fan", Queue: worqr.QueueConfig{Concurrency: 1}, ContinueOnChildFailure: true,
					Handler: flStageFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
						return &worqr.StageResult{Children: []worqr.ChildSpec{{Queue: "bad"}, {Queue: "good"}, {Queue: "good"}}}, nil
					}),
					Children: map[string]worqr.QueueConfig{
						"bad": {Concurrency: 1, MaxAttempts: 1, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
							return errors.New("platform down")
						})},
						"good": one(log.recordChild("granted"), 2),
					}},
				{Name: "after", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: log.recordStage("after", "yes")},
			}}
			e.start(nil, e.flWorkerConfig(nil, f))
			id := e.flStart(f, nil)
			Eventually(ctx, e.flStatus(f, id)).WithTimeout(5 * time.Second).Should(Equal(worqr.RunDone))
			Consistently(ctx, log.ofFn("after")).WithTimeout(500 * time.Millisecond).Should(Equal([]string{id}))
			check := func(children []worqr.ChildResult) {
				GinkgoHelper()
				Expect(children).To(HaveLen(3))
				var failed, done int
				for _, c := range children {
					switch c.Status {
					case "failed":
						failed++
						Expect(c.Queue).To(Equal("bad"))
						Expect(c.Err).To(ContainSubstring("platform down"))
					case "done":
						done++
						Expect(c.Queue).To(Equal("good"))
						Expect(c.Result).To(Equal([]byte("granted")))
					}
				}
				Expect([]int{failed, done}).To(Equal([]int{1, 2}))
			}
			check(log.runsOf("after")[0].Children)
			info := e.flRun(f, id)
			check(info.Children)
			Expect(info.State["after"]).To(Equal("yes"))
		}, SpecTimeout(20*time.Second))

		It("fails the run once when a child is buried for crashing its workers (MaxCrashes), as when it used up its attempts", func(ctx SpecContext) {
			e := newEnv()
			var log flLog
			f := &worqr.Flow{Name: "crashkid", Stages: []worqr.Stage{
				{Name: "fan", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: flFieldsStage(), Children: map[string]worqr.QueueConfig{
					"kid": {Concurrency: 1, MaxCrashes: 1, Handler: log.recordChild("ok")},
				}},
				{Name: "after", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: log.recordStage()},
			}}
			id := e.flStart(f, nil)
			w := e.flRegister(time.Minute, f.Name, "fan", "kid")
			t := e.flTakeStage(w, f, "fan", 1)
			children := flKids("kid", 2)
			Expect(e.flFinish(w, f, "fan", t[0], nil, children)).To(Equal(rdb.OutcomeFannedOut))
			// The first child's worker dies: the child has crashed one worker.
			Expect(e.flTakeChild(w, f, "kid", 1)[0].ID).To(Equal(children[0].ID))
			e.kill(w)
			Expect(e.pass()).To(Equal(1))

			// A peer's take buries it (MaxCrashes 1): the child is dead.
			var rec recorder
			e.start(nil, e.flWorkerConfig(&rec, f))
			Eventually(ctx, func() []worqr.EventKind { return rec.flEvents("kid", children[0].ID) }).
				WithTimeout(3 * time.Second).Should(Equal([]worqr.EventKind{worqr.EventDead}))
			Eventually(ctx, e.flStatus(f, id)).WithTimeout(3*time.Second).Should(Equal(worqr.RunFailed),
				func() string {
					return fmt.Sprintf("a dead child fails its run (fail-fast) instead of leaving it waiting for ever: %v", e.flHash(f.Name, id))
				})
			st := flChildStatuses(e.flRun(f, id))
			Expect(st[children[0].ID]).To(Equal("failed"))
			Expect(log.of("after")).To(BeEmpty())
		}, SpecTimeout(15*time.Second))
	})

	It("cancels a run mid-fan-out: no stage or child runs afterwards, nothing is forwarded, the run ends cancelled", func(ctx SpecContext) {
		e := newEnv()
		var log flLog
		var rec recorder
		causes := make(chan error, 8)
		f := &worqr.Flow{Name: "cx", Stages: []worqr.Stage{
			{Name: "fan", Queue: worqr.QueueConfig{Concurrency: 1},
				Handler: flStageFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
					log.addRun(r)
					return &worqr.StageResult{Children: []worqr.ChildSpec{{Queue: "kid"}, {Queue: "kid"}, {Queue: "kid"}, {Queue: "kid"}}}, nil
				}),
				Children: map[string]worqr.QueueConfig{"kid": one(worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
					log.add(t.Queue, t.ID)
					<-ctx.Done()
					causes <- context.Cause(ctx)
					return ctx.Err()
				}), 2)}},
			{Name: "after", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: log.recordStage()},
		}}
		e.start(nil, e.flWorkerConfig(&rec, f))
		id := e.flStart(f, nil)
		Eventually(ctx, log.ofFn("kid")).WithTimeout(5 * time.Second).Should(HaveLen(2))
		Expect(e.flWaiting(f.Name, "kid")).To(HaveLen(2))

		ok, err := e.client.CancelRun(ctx, f, id)
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue())
		for range 2 {
			Eventually(ctx, causes).WithTimeout(3*time.Second).Should(Receive(MatchError(worqr.ErrTaskCancelled)), "each running child's context is cancelled")
		}
		Consistently(ctx, func() int { return len(log.of("kid")) + len(log.of("after")) + len(log.of("fan")) }).
			WithTimeout(700 * time.Millisecond).Should(Equal(3))
		Expect(e.flWaiting(f.Name, "kid")).To(BeEmpty())
		Expect(e.flWaiting(f.Name, "after")).To(BeEmpty())
		Expect(e.flWaiting(f.Name, "fan")).To(BeEmpty())
		info := e.flRun(f, id)
		Expect(info.Status).To(Equal(worqr.RunCancelled))
		Expect(info.Stage).To(Equal("fan"))
		Expect(info.Children).To(HaveLen(4))
		for _, c := range info.Children {
			Expect(c.Status).To(Equal("cancelled"))
		}
		Expect(e.flChildTasks(f.Name, id)).To(BeEmpty())
		Eventually(ctx, func() int { return rec.count(worqr.EventCancelled) }).WithTimeout(time.Second).Should(Equal(2))
		Expect(rec.count(worqr.EventForwarded)).To(BeZero())

		ok, err = e.client.CancelRun(ctx, f, id)
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeFalse(), "a run ends once")
	}, SpecTimeout(15*time.Second))

	It("does not run a cancelled run's stage again when its handler gives the taking back", func(ctx SpecContext) {
		e := newEnv()
		var log flLog
		f := &worqr.Flow{Name: "gbcancel", Stages: []worqr.Stage{
			{Name: "one", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: flStageFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				log.addRun(r)
				<-ctx.Done()
				return nil, worqr.ErrGiveBack // "not now": put it back
			})},
			{Name: "two", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: log.recordStage()},
		}}
		e.start(nil, e.flWorkerConfig(nil, f))
		id := e.flStart(f, nil)
		Eventually(ctx, log.ofFn("one")).WithTimeout(3 * time.Second).Should(HaveLen(1))
		ok, err := e.client.CancelRun(ctx, f, id)
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue())
		Consistently(ctx, log.ofFn("one")).WithTimeout(700*time.Millisecond).Should(HaveLen(1),
			func() string { return fmt.Sprintf("the cancelled run's stage ran again: %v", e.flHash(f.Name, id)) })
		Expect(e.flWaiting(f.Name, "one")).To(BeEmpty())
		info := e.flRun(f, id)
		Expect(info.Status).To(Equal(worqr.RunCancelled))
		Expect(info.TaskState).To(Equal("cancelled"))
	}, SpecTimeout(15*time.Second))

	It("ends the run as failed when its stage task is buried for crashing its workers (MaxCrashes)", func(ctx SpecContext) {
		e := newEnv()
		var log flLog
		f := &worqr.Flow{Name: "crashstage", IndexBy: []string{"userId"}, Retention: 300 * time.Millisecond, Stages: []worqr.Stage{
			{Name: "one", Queue: worqr.QueueConfig{Concurrency: 1, MaxCrashes: 1}, Handler: log.recordStage()},
		}}
		id := e.flStart(f, map[string]string{"userId": "5"})
		w := e.flRegister(time.Minute, f.Name, "one")
		Expect(e.flTakeStage(w, f, "one", 1)).To(HaveLen(1))
		e.kill(w)
		Expect(e.pass()).To(Equal(1))
		var rec recorder
		e.start(nil, e.flWorkerConfig(&rec, f))
		Eventually(ctx, func() []worqr.EventKind { return rec.flEvents("one", id) }).
			WithTimeout(3 * time.Second).Should(Equal([]worqr.EventKind{worqr.EventDead}))
		info := e.flRun(f, id)
		Expect(info.TaskState).To(Equal("dead"))
		Expect(info.Status).To(Equal(worqr.RunFailed), "a run whose stage is dead has failed: %v", e.flHash(f.Name, id))
		Expect(log.of("one")).To(BeEmpty())
	}, SpecTimeout(15*time.Second))
})

var _ = Describe("Flows with worker processes", func() {
	// killHolder starts a `worker --flow` process, lets it take what held
	// says, kills it with SIGKILL and starts an in-process peer serving the
	// flow; it returns the dead process and the peer's recorder and log.
	type world struct {
		e    *env
		proc *workerProc
		rec  *recorder
		log  *flLog
		f    *worqr.Flow
	}
	run := func(ctx SpecContext, workTime time.Duration, extra []string, held func(w *world, id string) bool) (*world, string) {
		GinkgoHelper()
		w := &world{e: newEnv(), rec: &recorder{}, log: &flLog{}}
		w.f = flAccessFlow(w.log, "peer")
		w.proc = startWorkerProc(w.e, "", 2, workTime, append([]string{"--flow"}, extra...)...)
		Eventually(ctx, w.proc.registered).WithTimeout(20 * time.Second).Should(HaveLen(1))
		id := w.e.flStart(w.f, map[string]string{"userId": "u1"})
		Eventually(ctx, func() bool { return held(w, id) }).WithTimeout(10 * time.Second).Should(BeTrue())

		Expect(w.proc.sess.Command.Process.Signal(syscall.SIGKILL)).To(Succeed())
		// Not Eventually(ctx, sess): gomega would first try to parse the
		// session as a duration and format it with %#v, racing with gexec.
		Eventually(w.proc.sess).WithContext(ctx).WithTimeout(5 * time.Second).Should(gexec.Exit())
		cfg := w.e.flWorkerConfig(w.rec, w.f)
		w.e.start(nil, cfg)
		Eventually(ctx, w.e.flStatus(w.f, id)).WithTimeout(10 * time.Second).Should(Equal(worqr.RunDone))
		Eventually(ctx, func() int { return w.rec.count(worqr.EventRecovered) }).WithTimeout(time.Second).Should(BeNumerically(">=", 1))
		return w, id
	}
	// checkOnce checks that every stage and child of run id ended once, and
	// the run's final state.
	checkOnce := func(ctx SpecContext, w *world, id string) *worqr.RunInfo {
		GinkgoHelper()
		info := w.e.flRun(w.f, id)
		Expect(info.Children).To(HaveLen(len(flPlatforms)))
		// A worker reports an end just after Redis recorded it: wait for
		// the reports, then make sure no second one comes.
		ends := func() map[string]int {
			out := map[string]int{}
			for _, s := range w.f.Stages {
				out["stage "+s.Name] = flEnds([]*workerProc{w.proc}, w.rec, s.Name, id)
			}
			for _, c := range info.Children {
				out["child "+c.Queue] = flEnds([]*workerProc{w.proc}, w.rec, c.Queue, c.ID)
			}
			return out
		}
		once := map[string]int{}
		for k := range ends() {
			once[k] = 1
		}
		Eventually(ctx, ends).WithTimeout(2*time.Second).Should(Equal(once), "each stage and child of run %s ended once", id)
		Consistently(ctx, ends).WithTimeout(300*time.Millisecond).Should(Equal(once), "each stage and child of run %s ended once", id)
		for _, c := range info.Children {
			Expect(c.Status).To(Equal("done"))
		}
		for _, k := range []string{"userId", "access", "membership", "rewards", "notified"} {
			Expect(info.State).To(HaveKey(k))
		}
		Expect(w.e.flChildFields(w.f.Name, id)).To(HaveLen(len(flPlatforms)), "one set of children")
		return info
	}

	It("completes a run whose stage task was held by a worker process killed with SIGKILL, each stage's result recorded once", func(ctx SpecContext) {
		w, id := run(ctx, time.Hour, nil, func(w *world, id string) bool {
			for _, t := range w.proc.took() {
				if t.Queue == flAccessCheck && t.ID == id {
					return true
				}
			}
			return false
		})
		info := checkOnce(ctx, w, id)
		Expect(w.log.of(flAccessCheck)).To(Equal([]string{id}), "the peer re-ran the held stage")
		Expect(w.log.of(flManageReward)).To(Equal([]string{id}))
		for _, c := range info.Children {
			Expect(c.Result).To(Equal([]byte("peer:" + c.Queue)))
		}
		Expect(w.proc.linesOf("forwarded")).To(BeEmpty())
	}, SpecTimeout(60*time.Second))

	It("completes a run whose children were held by a worker process killed with SIGKILL, each stage's result and each child recorded once", func(ctx SpecContext) {
		w, id := run(ctx, 10*time.Millisecond, []string{"--child-work-time", "1h"}, func(w *world, id string) bool {
			n := 0
			for _, t := range w.proc.took() {
				if t.Queue == "discord" || t.Queue == "telegram" {
					n++
				}
			}
			return n == len(flPlatforms)
		})
		info := checkOnce(ctx, w, id)
		// The process ran the stages up to the fan-out; the peer the rest.
		Expect(w.proc.linesOf("fanned_out")).To(Equal([][]string{{"fanned_out", flManageReward, id}}))
		Expect(w.log.of(flAccessCheck)).To(BeEmpty())
		Expect(w.log.of(flManageReward)).To(BeEmpty())
		Expect(w.log.of(flNotify)).To(Equal([]string{id}))
		held := map[string]string{}
		for _, t := range w.proc.took() {
			if t.Queue == "discord" || t.Queue == "telegram" {
				held[t.ID] = t.Queue
			}
		}
		for _, c := range info.Children {
			Expect(held).To(HaveKeyWithValue(c.ID, c.Queue), "the children the process held are the run's")
			Expect(c.Result).To(Equal([]byte("peer:" + c.Queue)))
			Expect(w.log.of(c.Queue)).To(Equal([]string{c.ID}))
		}
		Expect(info.State["access"]).To(Equal("granted"))
	}, SpecTimeout(60*time.Second))
})

var _ = Describe("Flows: bad input", func() {
	noop := flFieldsStage()
	kid := one(worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil }), 1)
	q := worqr.QueueConfig{Concurrency: 1}

	DescribeTable("a bad flow is rejected by StartRun and NewWorker with an error naming the field and the rule, and nothing is written",
		func(stages []worqr.Stage, field string, rule []string) {
			ctx, cancel := bg()
			defer cancel()
			e := newEnv()
			f := &worqr.Flow{Name: "bad", Stages: stages}
			_, err := e.client.StartRun(ctx, f, map[string]string{"userId": "1"}, nil)
			expectInvalid(err, field, rule...)
			w, err := worqr.NewWorker(e.served, e.flWorkerConfig(nil, f))
			expectInvalid(err, field, rule...)
			Expect(w).To(BeNil())
			Expect(e.allKeys()).To(BeEmpty())
		},
		Entry("no stages", nil, `Flow["bad"].Stages`, []string{"is empty", "at least one stage"}),
		Entry("duplicate stage names", []worqr.Stage{{Name: "a", Queue: q, Handler: noop}, {Name: "a", Queue: q, Handler: noop}},
			`Flow["bad"].Stages[1].Name`, []string{`"a" is already used by Flow["bad"].Stages[0].Name`, "must be unique"}),
		Entry("a stage named like a child queue", []worqr.Stage{
			{Name: "a", Queue: q, Handler: noop, Children: map[string]worqr.QueueConfig{"b": kid}},
			{Name: "b", Queue: q, Handler: noop}},
			`Flow["bad"].Stages[1].Name`, []string{`"b" is already used by Flow["bad"].Stages[0].Children["b"]`}),
		Entry("a child queue named like a stage", []worqr.Stage{
			{Name: "a", Queue: q, Handler: noop},
			{Name: "b", Queue: q, Handler: noop, Children: map[string]worqr.QueueConfig{"a": kid}}},
			`Flow["bad"].Stages[1].Children["a"]`, []string{`"a" is already used by Flow["bad"].Stages[0].Name`}),
		Entry("a stage named like the flow", []worqr.Stage{{Name: "bad", Queue: q, Handler: noop}},
			`Flow["bad"].Stages[0].Name`, []string{`"bad" is already used by the flow's name`}),
	)

	It("sends a stage whose result is bad (an empty field name, a child of an undeclared queue) to the dead set with an error naming the field and rule, and writes none of it", func(ctx SpecContext) {
		e := newEnv()
		var log flLog
		results := map[string]*worqr.StageResult{
			"empty-field": {Fields: map[string]string{"ok": "1", "": "x"}, Children: []worqr.ChildSpec{{Queue: "kid"}}},
			"undeclared":  {Fields: map[string]string{"ok": "1"}, Children: []worqr.ChildSpec{{Queue: "kid"}, {Queue: "nope"}}},
		}
		wantErr := map[string][]string{
			"empty-field": {"StageResult.Fields of stage fan", "has an empty field name"},
			"undeclared":  {"StageResult.Children[1].Queue", `"nope" is not a child queue declared by stage fan`},
		}
		f := &worqr.Flow{Name: "res", Stages: []worqr.Stage{
			{Name: "fan", Queue: worqr.QueueConfig{Concurrency: 2, MaxAttempts: 5},
				Handler: flStageFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
					log.addRun(r)
					return results[r.State["case"]], nil
				}),
				Children: map[string]worqr.QueueConfig{"kid": one(log.recordChild("x"), 1)}},
			{Name: "after", Queue: q, Handler: log.recordStage()},
		}}
		var rec recorder
		e.start(nil, e.flWorkerConfig(&rec, f))
		for c := range results {
			id := e.flStart(f, map[string]string{"case": c})
			Eventually(ctx, e.flStatus(f, id)).WithTimeout(3*time.Second).Should(Equal(worqr.RunFailed), "case %s", c)
			info := e.flRun(f, id)
			Expect(info.TaskState).To(Equal("dead"), "case %s", c)
			Expect(info.Stage).To(Equal("fan"), "case %s", c)
			for _, part := range wantErr[c] {
				Expect(info.LastError).To(ContainSubstring(part), "case %s", c)
			}
			score, err := redis.Int64(e.do("ZSCORE", e.flQK(f.Name, "fan").Dead, id))
			Expect(err).NotTo(HaveOccurred(), "case %s: the run's stage is in the stage's dead set", c)
			Expect(score).To(BeNumerically(">", 0))
			Expect(info.State).To(Equal(map[string]string{"case": c}), "case %s: no field merged", c)
			Expect(info.Children).To(BeEmpty(), "case %s: no child created", c)
			Expect(e.flChildTasks(f.Name, id)).To(BeEmpty(), "case %s", c)
			Eventually(ctx, func() []worqr.EventKind { return rec.flEvents("fan", id) }).
				WithTimeout(time.Second).Should(Equal([]worqr.EventKind{worqr.EventDead}), "case %s: no retry", c)
			var de error
			for _, ev := range rec.all() {
				if ev.TaskID == id && ev.Kind == worqr.EventDead {
					de = ev.Err
				}
			}
			var ie *worqr.InvalidError
			Expect(errors.As(de, &ie)).To(BeTrue(), "case %s: the event's error is an *InvalidError: %v", c, de)
			Expect(ie.Field).To(ContainSubstring(wantErr[c][0]))
		}
		Expect(e.flWaiting(f.Name, "kid")).To(BeEmpty())
		Expect(e.flWaiting(f.Name, "after")).To(BeEmpty())
		Consistently(ctx, func() int { return len(log.of("kid")) + len(log.of("after")) }).
			WithTimeout(300 * time.Millisecond).Should(BeZero())
		Expect(log.of("fan")).To(HaveLen(2), "each bad stage ran once")
	}, SpecTimeout(15*time.Second))
})

var _ = Describe("Flows: finding runs", func() {
	It("finds runs by an indexed field and forgets an ended run and its index entries after Flow.Retention", func(ctx SpecContext) {
		e := newEnv()
		hold := newGate()
		f := &worqr.Flow{Name: "idx", IndexBy: []string{"userId"}, Retention: 500 * time.Millisecond, Stages: []worqr.Stage{
			{Name: "one", Queue: worqr.QueueConfig{Concurrency: 4}, Handler: flStageFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				select {
				case <-hold.ch:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return &worqr.StageResult{Fields: map[string]string{"seen": "yes"}}, nil
			})},
		}}
		r1 := e.flStart(f, map[string]string{"userId": "7", "n": "1"})
		r2 := e.flStart(f, map[string]string{"userId": "7", "n": "2"})
		r3 := e.flStart(f, map[string]string{"userId": "8"})
		find := func(user string) []string {
			GinkgoHelper()
			runs, err := e.in.FindRuns(ctx, f, "userId", user)
			Expect(err).NotTo(HaveOccurred())
			var ids []string
			for _, r := range runs {
				ids = append(ids, r.ID)
			}
			return ids
		}
		Expect(find("7")).To(ConsistOf(r1, r2))
		Expect(find("8")).To(ConsistOf(r3))
		Expect(find("9")).To(BeEmpty())
		_, err := e.in.FindRuns(ctx, f, "n", "1")
		expectInvalid(err, "prop", `"n" is not in Flow.IndexBy`)
		ix := e.flQK(f.Name, f.Name).IndexKey("userId", "7")
		Expect(redis.Int64(e.do("PTTL", ix))).To(Equal(int64(-1)), "kept while its runs run")

		e.start(nil, e.flWorkerConfig(nil, f))
		Eventually(ctx, func() []string { return find("7") }).WithTimeout(3 * time.Second).Should(ConsistOf(r1, r2))
		hold.open()
		for _, id := range []string{r1, r2, r3} {
			Eventually(ctx, e.flStatus(f, id)).WithTimeout(3 * time.Second).Should(Equal(worqr.RunDone))
		}
		runs, err := e.in.FindRuns(ctx, f, "userId", "7")
		Expect(err).NotTo(HaveOccurred())
		Expect(runs).To(HaveLen(2), "ended runs are found within the retention")
		for _, r := range runs {
			Expect(r.Status).To(Equal(worqr.RunDone))
			Expect(r.State["seen"]).To(Equal("yes"))
		}
		Expect(redis.Int64(e.do("PTTL", ix))).To(BeNumerically(">", 0), "the index key expires with its last run")

		Eventually(ctx, func() []string { return find("7") }).WithTimeout(3 * time.Second).Should(BeEmpty())
		Eventually(ctx, func() bool { return e.exists(ix) }).WithTimeout(3 * time.Second).Should(BeFalse())
		for _, id := range []string{r1, r2, r3} {
			// (r3 ended last: it expires last.)
			Eventually(ctx, func() error { _, err := e.in.Run(ctx, f.Name, id); return err }).
				WithTimeout(3 * time.Second).Should(MatchError(worqr.ErrTaskNotFound))
		}
		Eventually(ctx, func() []string { return find("8") }).WithTimeout(3 * time.Second).Should(BeEmpty())
		Eventually(ctx, func() []string { return e.keysWith(":ix:") }).WithTimeout(3 * time.Second).Should(BeEmpty())
		Eventually(ctx, func() []string { return e.keysWith(":t:") }).WithTimeout(3 * time.Second).Should(BeEmpty())
	}, SpecTimeout(20*time.Second))

	It("lets the index entry a run was started under expire even when a stage rewrites the indexed field", func(ctx SpecContext) {
		e := newEnv()
		f := &worqr.Flow{Name: "reindex", IndexBy: []string{"userId"}, Retention: 300 * time.Millisecond, Stages: []worqr.Stage{
			{Name: "normalize", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: flFieldsStage("userId", "U-1")},
			{Name: "two", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: flFieldsStage()},
		}}
		id := e.flStart(f, map[string]string{"userId": "u-1"})
		e.start(nil, e.flWorkerConfig(nil, f))
		Eventually(ctx, e.flStatus(f, id)).WithTimeout(3 * time.Second).Should(Equal(worqr.RunDone))
		Eventually(ctx, func() bool { return e.exists(e.flQK(f.Name, f.Name).Task(id)) }).WithTimeout(3 * time.Second).Should(BeFalse())
		Eventually(ctx, func() []string { return e.keysWith(":ix:") }).WithTimeout(2*time.Second).Should(BeEmpty(),
			"the run is gone, so are its index entries")
	}, SpecTimeout(15*time.Second))
})
