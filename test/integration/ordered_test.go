package integration_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/worqr/worqr-go/defaults"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/worqr"
)

// keyTracker checks, in the test, what an ordered queue promises: no two
// runs of one key at once, and each task of a key starts only after the one
// enqueued before it is done.
type keyTracker struct {
	mu         sync.Mutex
	running    map[string]string // key -> run holding it
	lastDone   map[string]int    // key -> index of its last done task
	done       map[string][]int  // key -> indexes in the order they were done
	violations []string
}

func newKeyTracker() *keyTracker {
	return &keyTracker{running: map[string]string{}, lastDone: map[string]int{}, done: map[string][]int{}}
}

// payload "<key>/<index>"
func parseKeyed(p []byte) (string, int) {
	k, i, _ := strings.Cut(string(p), "/")
	n, _ := strconv.Atoi(i)
	return k, n
}

func (kt *keyTracker) start(key string, i int, who string) {
	kt.mu.Lock()
	defer kt.mu.Unlock()
	if h, ok := kt.running[key]; ok {
		kt.violations = append(kt.violations, fmt.Sprintf("%s/%d started by %s while %s runs it", key, i, who, h))
	}
	last, ok := kt.lastDone[key]
	if !ok {
		last = -1
	}
	if i != last+1 {
		kt.violations = append(kt.violations, fmt.Sprintf("%s/%d started after %s/%d was done", key, i, key, last))
	}
	kt.running[key] = who
}

func (kt *keyTracker) stop(key string, i int, ok bool) {
	kt.mu.Lock()
	defer kt.mu.Unlock()
	delete(kt.running, key)
	if ok {
		kt.lastDone[key] = i
		kt.done[key] = append(kt.done[key], i)
	}
}

func (kt *keyTracker) total() int {
	kt.mu.Lock()
	defer kt.mu.Unlock()
	n := 0
	for _, d := range kt.done {
		n += len(d)
	}
	return n
}

func (kt *keyTracker) bad() []string {
	kt.mu.Lock()
	defer kt.mu.Unlock()
	return append([]string(nil), kt.violations...)
}

func (e *env) enqueueKeyed(queue, key string, payloads ...string) []string {
	GinkgoHelper()
	ctx, cancel := bg()
	defer cancel()
	ps := make([][]byte, len(payloads))
	for i, p := range payloads {
		ps[i] = []byte(p)
	}
	ids, err := e.client.EnqueueBatch(ctx, queue, ps, &worqr.EnqueueOpts{Key: key})
	Expect(err).NotTo(HaveOccurred())
	return ids
}

var _ = Describe("Ordered queues (tasks with a key)", func() {
	It("runs each key's tasks one at a time, in enqueue order, under 8 workers with retries and a killed worker", func(ctx SpecContext) {
		e := newEnv()
		const keys, per = 12, 15
		kt := newKeyTracker()
		var fails atomic.Int64
		handler := func(name string) worqr.Handler {
			return worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
				key, i := parseKeyed(t.Payload)
				Expect(t.Key).To(Equal(key))
				kt.start(key, i, name)
				time.Sleep(time.Millisecond)
				// Every third task fails its first attempt: its key waits
				// out the retry.
				if i%3 == 0 && t.Attempt == 1 {
					fails.Add(1)
					kt.stop(key, i, false)
					return errors.New("first attempt fails")
				}
				kt.stop(key, i, true)
				return nil
			})
		}
		// A hand-driven worker takes heads first and dies with them.
		dead := e.register(time.Minute, "ord")
		for k := range keys {
			ps := make([]string, per)
			for i := range ps {
				ps[i] = fmt.Sprintf("k%d/%d", k, i)
			}
			e.enqueueKeyed("ord", fmt.Sprintf("k%d", k), ps...)
		}
		Expect(e.waiting("ord")).To(HaveLen(keys), "only each key's head waits in the queue")
		qi, err := e.in.Queue(ctx, "ord")
		Expect(err).NotTo(HaveOccurred())
		Expect(qi.Keys).To(BeEquivalentTo(keys))
		Expect(qi.Waiting).To(BeEquivalentTo(keys))
		held := e.take(dead, "ord", 3)
		Expect(held).To(HaveLen(3))
		heldKeys := map[string]bool{}
		for _, h := range held {
			key, i := parseKeyedEnvelope(h.Payload)
			Expect(i).To(Equal(0))
			kt.start(key, 0, "the dead worker")
			heldKeys[key] = true
		}
		for i := range 8 {
			e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
				"ord": {Handler: handler(fmt.Sprintf("w%d", i)), Concurrency: 2,
					Backoff: func(int, error) time.Duration { return 5 * time.Millisecond }},
			}, nil))
		}
		// The held keys do not move while the dead worker holds their heads.
		Consistently(ctx, func() []int {
			kt.mu.Lock()
			defer kt.mu.Unlock()
			var n []int
			for k := range heldKeys {
				n = append(n, len(kt.done[k]))
			}
			return n
		}).WithTimeout(400*time.Millisecond).Should(HaveEach(0), "a key whose head is held runs nothing")
		e.kill(dead)
		for k := range heldKeys {
			kt.stop(k, 0, false) // the dead worker's runs are over
		}
		// This pass, or a worker's reaper before it, puts the three heads
		// back at the front.
		e.pass()
		Expect(e.exists(e.qk("ord").WorkerQueue(dead))).To(BeFalse())

		Eventually(ctx, kt.total).WithTimeout(20 * time.Second).WithPolling(50 * time.Millisecond).Should(Equal(keys * per))
		Expect(kt.bad()).To(BeEmpty())
		for k := range keys {
			want := make([]int, per)
			for i := range want {
				want[i] = i
			}
			Expect(kt.done[fmt.Sprintf("k%d", k)]).To(Equal(want))
		}
		Expect(fails.Load()).To(BeNumerically(">=", keys*per/3))
		Eventually(ctx, func() int64 { return queueInfo(e.in, "ord")().Waiting }).Should(BeZero())
		ki, _, total, err := e.in.Keys(ctx, "ord", 0, 100)
		Expect(err).NotTo(HaveOccurred())
		Expect(ki).To(BeEmpty())
		Expect(total).To(BeZero(), "every key is forgotten once its tasks ended")
	}, SpecTimeout(40*time.Second))

	It("keeps a frozen zombie's key to one run: its late end changes nothing and the key runs on in order", func(ctx SpecContext) {
		e := newEnv()
		kt := newKeyTracker()
		release := newGate()
		var zombieRan atomic.Bool
		cfg := e.workerConfig(map[string]worqr.QueueConfig{
			"zk": one(worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
				zombieRan.Store(true)
				<-release.ch // frozen: returns only after its keepalive is gone
				return nil
			}), 1),
		}, nil)
		cfg.DisableReaper = true
		clock := newHeartClock(cfg.HeartbeatInterval)
		zw := e.startWithClock(nil, cfg, clock)
		ids := e.enqueueKeyed("zk", "K", "K/0", "K/1", "K/2")
		Eventually(ctx, zombieRan.Load).WithTimeout(3 * time.Second).Should(BeTrue())
		clock.freeze()
		Eventually(ctx, func() bool { return e.exists(e.keys.Keepalive(zw.ID())) }).
			WithTimeout(3 * time.Second).WithPolling(20 * time.Millisecond).Should(BeFalse())
		Expect(e.pass()).To(Equal(1))
		Expect(e.waiting("zk")).To(Equal(ids[:1]), "the head goes back to the front; the others stay behind it")

		// Another worker runs the key from its head, in order.
		cfg2 := e.workerConfig(map[string]worqr.QueueConfig{
			"zk": one(worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
				key, i := parseKeyed(t.Payload)
				kt.start(key, i, "w2")
				kt.stop(key, i, true)
				return nil
			}), 4),
		}, nil)
		cfg2.DisableReaper = true
		e.start(nil, cfg2)
		Eventually(ctx, kt.total).WithTimeout(5 * time.Second).Should(Equal(3))
		// The zombie wakes up and ends its old taking: refused, nothing moves.
		queueKeys := func() map[string]string { // the queue's keys, not the registry's
			out := map[string]string{}
			for k, v := range e.snapshot() {
				// Not the parked workers and the holder index: the zombie,
				// registered again, parks when it finds the queue empty.
				if strings.Contains(k, "{zk}") && !strings.Contains(k, "}:park:") && !strings.Contains(k, "}:h:") {
					out[k] = v
				}
			}
			return out
		}
		before := queueKeys()
		clock.thaw(cfg.HeartbeatTTL)
		release.open()
		Consistently(ctx, queueKeys).WithTimeout(500 * time.Millisecond).Should(Equal(before))
		Expect(kt.bad()).To(BeEmpty())
		Expect(kt.done["K"]).To(Equal([]int{0, 1, 2}))
	}, SpecTimeout(20*time.Second))

	It("serves keys fairly: a key with 2,000 waiting tasks does not hold back keys with one", func(ctx SpecContext) {
		e := newEnv()
		big := make([]string, 2000)
		for i := range big {
			big[i] = fmt.Sprintf("big/%d", i)
		}
		e.enqueueKeyed("fair", "big", big...)
		for k := range 20 {
			e.enqueueKeyed("fair", fmt.Sprintf("small%d", k), fmt.Sprintf("small%d/0", k))
		}
		var order trail
		e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"fair": one(worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
				order.add(t.Key)
				return nil
			}), 1),
		}, nil))
		Eventually(ctx, func() int { return len(order.get()) }).WithTimeout(10 * time.Second).Should(BeNumerically(">=", 42))
		first := order.get()[:42]
		small := 0
		for _, k := range first {
			if strings.HasPrefix(k, "small") {
				small++
			}
		}
		Expect(small).To(Equal(20), "every small key ran within the first rounds: %v", first)
	}, SpecTimeout(20*time.Second))

	It("blocks a key on a dead task until an operator acts, or moves on when the queue says so", func(ctx SpecContext) {
		e := newEnv()
		var failing sync.Map // payload -> true while it must fail
		var ran trail
		h := worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			ran.add(string(t.Payload))
			if _, bad := failing.Load(string(t.Payload)); bad {
				return worqr.SkipRetry(errors.New("bad"))
			}
			return nil
		})
		failing.Store("B/0", true)
		failing.Store("M/0", true)
		e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"blk": one(h, 2),
			"mov": {Handler: h, Concurrency: 2, Keys: worqr.KeyPolicy{MoveOnDead: true}},
		}, nil))
		dead := e.enqueueKeyed("blk", "B", "B/0", "B/1")
		e.enqueueKeyed("mov", "M", "M/0", "M/1")
		Eventually(ctx, ran.get).WithTimeout(5 * time.Second).Should(ContainElements("B/0", "M/0", "M/1"))
		Consistently(ctx, ran.get).WithTimeout(400 * time.Millisecond).ShouldNot(ContainElement("B/1"))

		in := e.in
		ki, err := in.Key(ctx, "blk", "B")
		Expect(err).NotTo(HaveOccurred())
		Expect(ki.Blocked).To(BeTrue())
		Expect(ki.Head.ID).To(Equal(dead[0]))
		Expect(ki.Head.State).To(Equal(worqr.StateDead))
		Expect(ki.Behind).To(Equal(1))
		blocked, err := in.BlockedKeys(ctx, "blk", 10)
		Expect(err).NotTo(HaveOccurred())
		Expect(blocked).To(HaveLen(1))
		Expect(blocked[0].Key).To(Equal("B"))
		behind, err := in.TasksBehind(ctx, "blk", "B", 0, 10)
		Expect(err).NotTo(HaveOccurred())
		Expect(behind).To(Equal(dead[1:]))
		mk, err := in.Key(ctx, "mov", "M")
		Expect(err).NotTo(HaveOccurred())
		Expect(mk).To(BeNil(), "the moving key ran its last task and is gone")

		// Requeued, the dead head runs first (and now succeeds), then B/1.
		failing.Delete("B/0")
		n, err := e.in.RequeueDead(ctx, "blk", dead[0])
		Expect(err).NotTo(HaveOccurred())
		Expect(n).To(Equal(1))
		Eventually(ctx, ran.get).WithTimeout(5 * time.Second).Should(ContainElement("B/1"))
		var bs []string
		for _, p := range ran.get() {
			if strings.HasPrefix(p, "B/") {
				bs = append(bs, p)
			}
		}
		Expect(bs).To(Equal([]string{"B/0", "B/0", "B/1"}))
	}, SpecTimeout(20*time.Second))

	It("purges every task waiting in an ordered queue: those behind each key's head too, whatever the head", func(ctx SpecContext) {
		e := newEnv()
		var ran trail
		release := make(chan struct{})
		h := worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			ran.add(string(t.Payload))
			switch string(t.Payload) {
			case "D/0":
				return worqr.SkipRetry(errors.New("bad"))
			case "R/0":
				<-release
			}
			return nil
		})
		e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{"pq": one(h, 2)}, nil))
		// D's head is dead and blocks it, R's head runs: 3 and 2 behind.
		e.enqueueKeyed("pq", "D", "D/0", "D/1", "D/2", "D/3")
		e.enqueueKeyed("pq", "R", "R/0", "R/1", "R/2")
		Eventually(ctx, ran.get).WithTimeout(5 * time.Second).Should(ContainElements("D/0", "R/0"))
		in := e.in
		Eventually(ctx, func() bool {
			ki, err := in.Key(ctx, "pq", "D")
			return err == nil && ki != nil && ki.Blocked
		}).WithTimeout(5 * time.Second).Should(BeTrue())
		Expect(in.Pause(ctx, "pq")).To(Succeed())
		// A and B: their heads wait, 4 and 1 behind them.
		e.enqueueKeyed("pq", "A", "A/0", "A/1", "A/2", "A/3", "A/4")
		e.enqueueKeyed("pq", "B", "B/0", "B/1")

		deleted, err := in.DeleteAllWaiting(ctx, "pq", nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(deleted).To(Equal(5+2+3+2), "every waiting task, those behind a key's head included")
		Expect(queueInfo(in, "pq")().Waiting).To(BeZero())
		for _, k := range []string{"A", "B"} {
			ki, err := in.Key(ctx, "pq", k)
			Expect(err).NotTo(HaveOccurred())
			Expect(ki).To(BeNil(), "key %s has nothing left", k)
		}
		for _, k := range []string{"D", "R"} {
			ki, err := in.Key(ctx, "pq", k)
			Expect(err).NotTo(HaveOccurred())
			Expect(ki).NotTo(BeNil())
			Expect(ki.Behind).To(BeZero(), "nothing waits behind %s's head", k)
		}
		// The running head ends; nothing purged ever runs.
		close(release)
		Expect(in.Resume(ctx, "pq")).To(Succeed())
		Consistently(ctx, ran.get).WithTimeout(time.Second).Should(ConsistOf("D/0", "R/0"))
	}, SpecTimeout(20*time.Second))

	It("merges enqueues into the key's waiting task and hands the payloads over together", func(ctx SpecContext) {
		e := newEnv()
		Expect(e.client.SetKeyPolicy(ctx, "mrg", worqr.KeyPolicy{Merge: true})).To(Succeed())
		gate := newGate()
		got := make(chan *worqr.Task, 10)
		e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{
			"mrg": {Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
				got <- t
				<-gate.ch
				return nil
			}), Concurrency: 2, Keys: worqr.KeyPolicy{Merge: true}},
		}, nil))
		first, err := e.client.Enqueue(ctx, "mrg", []byte("v0"), &worqr.EnqueueOpts{Key: "order-1", Score: 1})
		Expect(err).NotTo(HaveOccurred())
		var t0 *worqr.Task
		Eventually(ctx, got).WithTimeout(3 * time.Second).Should(Receive(&t0))
		Expect(t0.ID).To(Equal(first))
		// While v0 runs, v1..v3 merge into one waiting task (v2 twice).
		var ids []string
		for i, p := range []string{"v1", "v2", "v2", "v3"} {
			id, err := e.client.Enqueue(ctx, "mrg", []byte(p), &worqr.EnqueueOpts{Key: "order-1", Score: float64(10 + i)})
			Expect(err).NotTo(HaveOccurred())
			ids = append(ids, id)
		}
		Expect(ids).To(HaveEach(ids[0]), "one waiting task holds them all")
		info, err := e.in.Task(ctx, "mrg", ids[0])
		Expect(err).NotTo(HaveOccurred())
		Expect(info.Key).To(Equal("order-1"))
		Expect(info.Payloads).To(Equal([]worqr.Payload{{Data: []byte("v1"), Score: 10}, {Data: []byte("v2"), Score: 11}, {Data: []byte("v3"), Score: 13}}))
		gate.open()
		var t1 *worqr.Task
		Eventually(ctx, got).WithTimeout(3 * time.Second).Should(Receive(&t1))
		Expect(t1.ID).To(Equal(ids[0]))
		Expect(string(t1.Payload)).To(Equal("v3"), "Payload is the latest")
		Expect(t1.Payloads).To(HaveLen(3))
		Consistently(ctx, got).WithTimeout(300 * time.Millisecond).ShouldNot(Receive())

		// A merge function for payloads that are not a set: a counter.
		add := func(waiting, incoming []byte) ([]byte, error) {
			a, _ := strconv.Atoi(string(waiting))
			b, _ := strconv.Atoi(string(incoming))
			return []byte(strconv.Itoa(a + b)), nil
		}
		Expect(e.client.SetKeyPolicy(ctx, "cnt", worqr.KeyPolicy{})).To(Succeed())
		id1, merged, err := e.client.EnqueueMerge(ctx, "cnt", "c", []byte("1"), add, nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(merged).To(BeFalse())
		var wg sync.WaitGroup
		for range 10 {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				id, merged, err := e.client.EnqueueMerge(ctx, "cnt", "c", []byte("2"), add, nil)
				Expect(err).NotTo(HaveOccurred())
				Expect(merged).To(BeTrue())
				Expect(id).To(Equal(id1))
			}()
		}
		wg.Wait()
		info, err = e.in.Task(ctx, "cnt", id1)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(info.Payload)).To(Equal("21"), "every concurrent merge counted once")
	}, SpecTimeout(20*time.Second))
})

var _ = Describe("Ordered queues: bad input", func() {
	It("rejects bad keyed enqueues, naming the field and the rule, and writes nothing", func(ctx SpecContext) {
		e := newEnv()
		c := e.client
		_, err := c.Enqueue(ctx, "q", []byte("x"), &worqr.EnqueueOpts{Key: strings.Repeat("k", defaults.MaxKeyLen+1)})
		expectInvalid(err, "EnqueueOpts.Key", "513 bytes", "at most 512")
		_, err = c.Enqueue(ctx, "q", []byte("x"), &worqr.EnqueueOpts{Key: "k", UniqueKey: "u", UniqueTTL: time.Minute})
		expectInvalid(err, "EnqueueOpts.UniqueKey", "together with Key")
		_, err = c.Enqueue(ctx, "q", []byte("x"), &worqr.EnqueueOpts{Key: "k", ID: "my-id"})
		expectInvalid(err, "EnqueueOpts.ID", "together with Key")
		_, err = c.Enqueue(ctx, "q", []byte("x"), &worqr.EnqueueOpts{Score: 3})
		expectInvalid(err, "EnqueueOpts.Score", "only with Key")
		_, err = c.Enqueue(ctx, "q", []byte("\xffwqk\x01rest"), nil)
		expectInvalid(err, "payload", "reserved")
		_, err = c.EnqueueBatch(ctx, "q", [][]byte{[]byte("ok"), []byte("\xffwqk\x01")}, &worqr.EnqueueOpts{Key: "k"})
		expectInvalid(err, "payloads[1]", "reserved")
		_, _, err = c.EnqueueMerge(ctx, "q", "k", []byte("x"), nil, nil)
		expectInvalid(err, "merge", "nil")
		_, _, err = c.EnqueueMerge(ctx, "q", "", []byte("x"), func(a, b []byte) ([]byte, error) { return b, nil }, nil)
		expectInvalid(err, "key", "empty")
		_, _, _, err = e.in.Keys(ctx, "q", 0, 0)
		expectInvalid(err, "count", "at least 1")
		_, err = e.in.Key(ctx, "flow/stage", "k")
		expectInvalid(err, "queue", "flow's queue")
		Expect(e.allKeys()).To(BeEmpty())
	}, SpecTimeout(10*time.Second))

	It("stops a merge whose function fails, writing nothing", func(ctx SpecContext) {
		e := newEnv()
		id, merged, err := e.client.EnqueueMerge(ctx, "q", "k", []byte("1"), func(a, b []byte) ([]byte, error) { return b, nil }, nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(merged).To(BeFalse())
		before := e.snapshot()
		boom := errors.New("boom")
		_, _, err = e.client.EnqueueMerge(ctx, "q", "k", []byte("2"), func(a, b []byte) ([]byte, error) { return nil, boom }, nil)
		Expect(err).To(MatchError(boom))
		Expect(e.snapshot()).To(Equal(before))
		info, err := e.in.Task(ctx, "q", id)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(info.Payload)).To(Equal("1"))
	}, SpecTimeout(10*time.Second))
})

// parseKeyedEnvelope reads a taken payload (an envelope) as parseKeyed.
func parseKeyedEnvelope(b []byte) (string, int) {
	GinkgoHelper()
	_, es, ok := rdb.DecodeEnvelope(b)
	Expect(ok).To(BeTrue())
	return parseKeyed(es[len(es)-1].Payload)
}
