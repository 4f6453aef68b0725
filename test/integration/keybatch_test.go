package integration_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/worqr"
)

// batchTracker checks a batch as the key tracker checks a task: one key,
// at most max tasks, consecutive indexes starting right after the key's
// last done one, and no other run of the key meanwhile.
type batchTracker struct {
	*keyTracker
	max   int
	mu    sync.Mutex
	sizes map[int]int    // batch size -> batches of that size
	runs  map[string]int // "<key>/<index>" -> runs, done or not
}

func newBatchTracker(max int) *batchTracker {
	return &batchTracker{keyTracker: newKeyTracker(), max: max, sizes: map[int]int{}, runs: map[string]int{}}
}

// start records the start of b by who and returns its key and indexes.
func (bt *batchTracker) start(b *worqr.Batch, who string) (string, []int) {
	GinkgoHelper()
	bt.mu.Lock()
	defer bt.mu.Unlock()
	bt.sizes[len(b.Tasks)]++
	var key string
	idx := make([]int, len(b.Tasks))
	for i, t := range b.Tasks {
		k, n := parseKeyed(t.Payload)
		bt.runs[string(t.Payload)]++
		if i == 0 {
			key = k
		}
		Expect(t.Key).To(Equal(b.Key))
		if k != key {
			bt.keyTracker.mu.Lock()
			bt.violations = append(bt.violations, fmt.Sprintf("batch of %s holds %s/%d", key, k, n))
			bt.keyTracker.mu.Unlock()
		}
		if i > 0 && n != idx[i-1]+1 {
			bt.keyTracker.mu.Lock()
			bt.violations = append(bt.violations, fmt.Sprintf("batch %v of %s is not in order", idx[:i], key))
			bt.keyTracker.mu.Unlock()
		}
		idx[i] = n
	}
	if len(b.Tasks) > bt.max {
		bt.keyTracker.mu.Lock()
		bt.violations = append(bt.violations, fmt.Sprintf("batch of %s holds %d tasks (KeyBatch %d)", key, len(b.Tasks), bt.max))
		bt.keyTracker.mu.Unlock()
	}
	bt.keyTracker.start(key, idx[0], who)
	return key, idx
}

// stop records the end of a batch: done, or not (its indexes stay undone).
func (bt *batchTracker) stop(key string, idx []int, ok bool) {
	bt.keyTracker.stop(key, idx[len(idx)-1], ok)
	if ok && len(idx) > 1 {
		bt.keyTracker.mu.Lock()
		// keyTracker.stop recorded the last index; the others are done too.
		d := bt.done[key]
		bt.done[key] = append(append(d[:len(d)-1], idx[:len(idx)-1]...), idx[len(idx)-1])
		bt.keyTracker.mu.Unlock()
	}
}

// doneOf returns the indexes of key done so far, in the order they were.
func (bt *batchTracker) doneOf(key string) []int {
	bt.keyTracker.mu.Lock()
	defer bt.keyTracker.mu.Unlock()
	return append([]int(nil), bt.done[key]...)
}

func (bt *batchTracker) sizeCounts() map[int]int {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	out := map[int]int{}
	for k, v := range bt.sizes {
		out[k] = v
	}
	return out
}

func (bt *batchTracker) runsOf(p string) int {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	return bt.runs[p]
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

var _ = Describe("Ordered queues: batches per key (KeyBatch)", func() {
	It("retries a batch whose handler ended its goroutine with runtime.Goexit, whole, and keeps serving", func(ctx SpecContext) {
		e := newEnv()
		var rec recorder
		var attempts atomic.Int64
		w := e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"kbx": {KeyBatch: 3, Concurrency: 1, MaxAttempts: 3,
				Backoff: func(int, error) time.Duration { return 5 * time.Millisecond },
				BatchHandler: worqr.BatchHandlerFunc(func(ctx context.Context, b *worqr.Batch) error {
					attempts.Add(1)
					if b.Attempt == 1 {
						runtime.Goexit()
					}
					return nil
				})},
		}, &rec))
		var ids []string
		for k := range 4 {
			ids = append(ids, e.enqueueKeyed("kbx", fmt.Sprintf("k%d", k), "a", "b", "c")...)
		}
		for _, id := range ids {
			Eventually(ctx, func() []worqr.EventKind { return rec.kinds(id) }).WithTimeout(10*time.Second).
				Should(ContainElement(worqr.EventDone), "task %s ends done", id)
		}
		Expect(attempts.Load()).To(BeNumerically(">=", 8), "each key's batch ran twice")
		Expect(e.hkeys(e.qk("kbx").WorkerQueue(w.ID()))).To(BeEmpty(), "nothing stays held")
	}, SpecTimeout(30*time.Second))

	It("runs each key in batches of at most KeyBatch, in order, and retries a failed batch whole", func(ctx SpecContext) {
		e := newEnv()
		const keys, per, size = 6, 20, 4
		bt := newBatchTracker(size)
		var failed sync.Map // "<key>/<first index>" -> the batch that failed
		var retried atomic.Int64
		handler := func(name string) worqr.BatchHandler {
			return worqr.BatchHandlerFunc(func(ctx context.Context, b *worqr.Batch) error {
				key, idx := bt.start(b, name)
				time.Sleep(time.Millisecond)
				// A batch holding an index divisible by 7 fails its
				// first attempt; its retry must hold the same tasks.
				first := fmt.Sprintf("%s/%d", key, idx[0])
				if prev, ok := failed.Load(first); ok {
					Expect(idx[:len(prev.([]int))]).To(Equal(prev), "a retried batch starts with the tasks that failed, in order")
					retried.Add(1)
				} else if b.Attempt == 1 {
					for _, i := range idx {
						if i%7 == 0 {
							failed.Store(first, idx)
							bt.stop(key, idx, false)
							return errors.New("the batch fails")
						}
					}
				}
				for _, t := range b.Tasks {
					t.SetResult([]byte("ok " + string(t.Payload)))
				}
				bt.stop(key, idx, true)
				return nil
			})
		}
		for k := range keys {
			ps := make([]string, per)
			for i := range ps {
				ps[i] = fmt.Sprintf("k%d/%d", k, i)
			}
			e.enqueueKeyed("kb", fmt.Sprintf("k%d", k), ps...)
		}
		for i := range 3 {
			e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
				"kb": {BatchHandler: handler(fmt.Sprintf("w%d", i)), KeyBatch: size, Concurrency: 2,
					Backoff: func(int, error) time.Duration { return 5 * time.Millisecond }},
			}, nil))
		}
		Eventually(ctx, bt.total).WithTimeout(20 * time.Second).WithPolling(50 * time.Millisecond).Should(Equal(keys * per))
		Expect(bt.bad()).To(BeEmpty())
		for k := range keys {
			Expect(bt.doneOf(fmt.Sprintf("k%d", k))).To(Equal(seq(per)), "key k%d done in order", k)
		}
		sizes := bt.sizeCounts()
		Expect(sizes[size]).To(BeNumerically(">", 0), "batches of KeyBatch tasks ran: %v", sizes)
		for n := range sizes {
			Expect(n).To(BeNumerically("<=", size))
		}
		Expect(retried.Load()).To(BeNumerically(">", 0), "failed batches ran again")
		Eventually(ctx, func() int {
			_, _, total, err := e.in.Keys(ctx, "kb", 0, 100)
			Expect(err).NotTo(HaveOccurred())
			return total
		}).Should(BeZero(), "every key is forgotten once its tasks ended")
	}, SpecTimeout(40*time.Second))

	It("gives a killed worker's batch back to the front of its key: it runs once more, elsewhere, and the zombie's end changes nothing", func(ctx SpecContext) {
		e := newEnv()
		ids := e.enqueueKeyed("kk", "K", "K/0", "K/1", "K/2", "K/3", "K/4", "K/5")
		e.enqueueKeyed("kk", "L", "L/0")
		// A hand-driven worker takes K's first batch (and L's head) and dies.
		dead := e.register(time.Minute, "kk")
		got, err := e.st.Take(ctx, e.qk("kk"), rdb.TakeArgs{Worker: dead, Until: math.MaxInt64, Max: 1, Batch: 3})
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(HaveLen(3))
		for i, g := range got {
			Expect(g.ID).To(Equal(ids[i]))
		}
		bt := newBatchTracker(3)
		e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"kk": {BatchHandler: worqr.BatchHandlerFunc(func(ctx context.Context, b *worqr.Batch) error {
				key, idx := bt.start(b, "live")
				bt.stop(key, idx, true)
				return nil
			}), KeyBatch: 3, Concurrency: 4},
		}, nil))
		Eventually(ctx, func() []int { return bt.doneOf("L") }).WithTimeout(3 * time.Second).Should(Equal([]int{0}))
		Consistently(ctx, func() int { return bt.runsOf("K/3") }).WithTimeout(300*time.Millisecond).
			Should(BeZero(), "nothing of K runs while the dead worker holds its batch")
		e.kill(dead)
		e.pass()
		Eventually(ctx, func() []int { return bt.doneOf("K") }).WithTimeout(5 * time.Second).Should(Equal(seq(6)))
		Expect(bt.bad()).To(BeEmpty())
		for i := range 6 {
			Expect(bt.runsOf(fmt.Sprintf("K/%d", i))).To(Equal(1), "K/%d ran once", i)
		}
		// The dead worker's late end of its batch: lost, nothing changed.
		before := e.snapshot()
		ms := []rdb.Member{{PID: got[1].PID, ID: got[1].ID}, {PID: got[2].PID, ID: got[2].ID}}
		out, err := e.end(nil, e.qk("kk"), rdb.Done(rdb.KindTask, dead, got[0].PID, got[0].ID, nil).WithBatch(ms))
		Expect(err).To(MatchError(rdb.ErrLost))
		Expect(out.Members).To(Equal([]rdb.Outcome{rdb.OutcomeLost, rdb.OutcomeLost}))
		Expect(e.snapshot()).To(Equal(before))
	}, SpecTimeout(20*time.Second))

	It("keeps a frozen worker's batch to one run: another worker runs it from the key's head, and the zombie's late end changes nothing", func(ctx SpecContext) {
		e := newEnv()
		release := newGate()
		var zombieBatch atomic.Value
		cfg := e.workerConfig(map[string]worqr.QueueConfig{
			"zb": {BatchHandler: worqr.BatchHandlerFunc(func(ctx context.Context, b *worqr.Batch) error {
				zombieBatch.Store(len(b.Tasks))
				<-release.ch // frozen: returns only after its keepalive is gone
				return nil
			}), KeyBatch: 2, Concurrency: 1},
		}, nil)
		cfg.DisableReaper = true
		clock := newHeartClock(cfg.HeartbeatInterval)
		zw := e.startWithClock(nil, cfg, clock)
		ids := e.enqueueKeyed("zb", "K", "K/0", "K/1", "K/2")
		Eventually(ctx, func() any { return zombieBatch.Load() }).WithTimeout(3 * time.Second).Should(Equal(2))
		clock.freeze()
		Eventually(ctx, func() bool { return e.exists(e.keys.Keepalive(zw.ID())) }).
			WithTimeout(3 * time.Second).WithPolling(20 * time.Millisecond).Should(BeFalse())
		Expect(e.pass()).To(Equal(2), "the batch's two takings")
		Expect(e.waiting("zb")).To(Equal(ids[:1]), "the head goes back to the front")
		behind, err := e.in.TasksBehind(ctx, "zb", "K", 0, 10)
		Expect(err).NotTo(HaveOccurred())
		Expect(behind).To(Equal(ids[1:]), "the rest of the batch goes back to the front of the key, in order")

		bt := newBatchTracker(2)
		cfg2 := e.workerConfig(map[string]worqr.QueueConfig{
			"zb": {BatchHandler: worqr.BatchHandlerFunc(func(ctx context.Context, b *worqr.Batch) error {
				key, idx := bt.start(b, "w2")
				bt.stop(key, idx, true)
				return nil
			}), KeyBatch: 2, Concurrency: 4},
		}, nil)
		cfg2.DisableReaper = true
		e.start(nil, cfg2)
		Eventually(ctx, bt.total).WithTimeout(5 * time.Second).Should(Equal(3))
		queueKeys := func() map[string]string {
			out := map[string]string{}
			for k, v := range e.snapshot() {
				if strings.Contains(k, "{zb}") {
					out[k] = v
				}
			}
			return out
		}
		before := queueKeys()
		clock.thaw(cfg.HeartbeatTTL)
		release.open()
		Consistently(ctx, queueKeys).WithTimeout(500 * time.Millisecond).Should(Equal(before))
		Expect(bt.bad()).To(BeEmpty())
		Expect(bt.doneOf("K")).To(Equal([]int{0, 1, 2}))
		Expect(bt.sizeCounts()).To(Equal(map[int]int{2: 1, 1: 1}))
	}, SpecTimeout(20*time.Second))

	It("merges into the task waiting behind a batch's head, and runs the merged task in the batch", func(ctx SpecContext) {
		e := newEnv()
		Expect(e.client.SetKeyPolicy(ctx, "km", worqr.KeyPolicy{Merge: true})).To(Succeed())
		enq := func(p string, score int) string {
			GinkgoHelper()
			id, err := e.client.Enqueue(ctx, "km", []byte(p), &worqr.EnqueueOpts{Key: "K", Score: float64(score)})
			Expect(err).NotTo(HaveOccurred())
			return id
		}
		head := enq("a", 1)
		Expect(enq("b", 2)).To(Equal(head), "a waiting head takes the merges")
		got := make(chan [][]string, 4)
		gate := newGate()
		e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"km": {BatchHandler: worqr.BatchHandlerFunc(func(ctx context.Context, b *worqr.Batch) error {
				var ps [][]string
				for _, t := range b.Tasks {
					var one []string
					for _, p := range t.Payloads {
						one = append(one, string(p.Data))
					}
					ps = append(ps, one)
				}
				got <- ps
				if b.Attempt == 1 {
					<-gate.ch
					return errors.New("the first run fails")
				}
				return nil
			}), KeyBatch: 5, Concurrency: 1, Keys: worqr.KeyPolicy{Merge: true},
				Backoff: func(int, error) time.Duration { return 5 * time.Millisecond }},
		}, nil))
		var ps [][]string
		Eventually(ctx, got).WithTimeout(3 * time.Second).Should(Receive(&ps))
		Expect(ps).To(Equal([][]string{{"a", "b"}}))
		// While the head runs, a task waits behind it and takes the merges.
		behind := enq("c", 3)
		Expect(behind).NotTo(Equal(head))
		Expect(enq("d", 4)).To(Equal(behind))
		Expect(enq("d", 5)).To(Equal(behind))
		gate.open()
		// The head's retry comes back with the merged task behind it.
		Eventually(ctx, got).WithTimeout(3 * time.Second).Should(Receive(&ps))
		Expect(ps).To(Equal([][]string{{"a", "b"}, {"c", "d"}}))
		Eventually(ctx, func() int64 { return queueInfo(e.in, "km")().Waiting }).Should(BeZero())
	}, SpecTimeout(20*time.Second))

	It("stops a batch when a cancel is asked for one of its tasks: that one ends cancelled, the others run again, nothing counted", func(ctx SpecContext) {
		e := newEnv()
		ids := e.enqueueKeyed("kc", "K", "K/0", "K/1", "K/2")
		got := make(chan []string, 4)
		attempts := make(chan int, 4)
		e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"kc": {BatchHandler: worqr.BatchHandlerFunc(func(ctx context.Context, b *worqr.Batch) error {
				var ps []string
				for _, t := range b.Tasks {
					ps = append(ps, string(t.Payload))
				}
				got <- ps
				attempts <- b.Attempt
				if len(b.Tasks) == 3 {
					<-ctx.Done() // until the cancel
					return context.Cause(ctx)
				}
				return nil
			}), KeyBatch: 3, Concurrency: 1, Retention: time.Minute}, // the cancelled task is kept, to be read
		}, nil))
		var ps []string
		Eventually(ctx, got).WithTimeout(3 * time.Second).Should(Receive(&ps))
		Expect(ps).To(Equal([]string{"K/0", "K/1", "K/2"}))
		Expect(e.client.Cancel(ctx, "kc", ids[1])).To(Equal(worqr.CancelRequested))
		Eventually(ctx, got).WithTimeout(3 * time.Second).Should(Receive(&ps))
		Expect(ps).To(Equal([]string{"K/0", "K/2"}), "the batch runs again without the cancelled task")
		Expect(<-attempts).To(Equal(1))
		Expect(<-attempts).To(Equal(1), "nothing counted")
		info, err := e.in.Task(ctx, "kc", ids[1])
		Expect(err).NotTo(HaveOccurred())
		Expect(info.State).To(Equal(worqr.StateCancelled))
		Eventually(ctx, func() int64 { return queueInfo(e.in, "kc")().Waiting }).Should(BeZero())
	}, SpecTimeout(20*time.Second))
})
