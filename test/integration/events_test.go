package integration_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/worqr/worqr-go/defaults"

	"github.com/gomodule/redigo/redis"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/worqr/worqr-go/worqr"
)

// follower collects what Inspector.Follow delivers.
type follower struct {
	mu     sync.Mutex
	events []worqr.Event
}

func (f *follower) add(e worqr.Event) {
	f.mu.Lock()
	f.events = append(f.events, e)
	f.mu.Unlock()
}

// has reports whether an event of kind about task id (any task when id is
// "") on queue was followed.
func (f *follower) has(kind worqr.EventKind, queue, id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.events {
		if e.Kind == kind && e.Queue == queue && (id == "" || e.TaskID == id) {
			return true
		}
	}
	return false
}

func (f *follower) count(kind worqr.EventKind, queue string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, e := range f.events {
		if e.Kind == kind && e.Queue == queue {
			n += max(e.Count, 1)
		}
	}
	return n
}

// follow runs Inspector.Follow until the spec ends and returns once it is
// subscribed (a probe pause of its own queue came through).
func (e *env) follow(ctx SpecContext, in *worqr.Inspector) *follower {
	GinkgoHelper()
	f := &follower{}
	fctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = in.Follow(fctx, f.add)
	}()
	DeferCleanup(func() { cancel(); <-done })
	Eventually(ctx, func() bool {
		Expect(in.Pause(ctx, "probe")).To(Succeed())
		return f.has(worqr.EventPaused, "probe", "")
	}).WithTimeout(5 * time.Second).WithPolling(100 * time.Millisecond).Should(BeTrue())
	return f
}

var _ = Describe("Live events across processes (issue 12)", func() {
	It("lets any process follow what workers, clients and inspectors do", func(ctx SpecContext) {
		e := newEnv()
		in, err := worqr.NewInspector(e.served, &worqr.Config{Namespace: e.ns, Logger: e.logger})
		Expect(err).NotTo(HaveOccurred())
		f := e.follow(ctx, in)

		var failedOnce atomic.Bool
		cfg := e.workerConfig(map[string]worqr.QueueConfig{
			"ev": {Concurrency: 2, MaxAttempts: 3, Backoff: func(int, error) time.Duration { return 10 * time.Millisecond },
				Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
					switch string(t.Payload) {
					case "fail":
						return worqr.SkipRetry(errors.New("no good"))
					case "flaky":
						if !failedOnce.Swap(true) {
							return errors.New("try again")
						}
					}
					return nil
				})},
		}, nil)
		e.start(nil, cfg)
		ok := e.enqueue("ev", "ok")
		flaky := e.enqueue("ev", "flaky")
		bad := e.enqueue("ev", "fail")
		waiting := e.enqueue("nobody", "x") // no worker serves it
		status, err := e.client.Cancel(ctx, "nobody", waiting)
		Expect(err).NotTo(HaveOccurred())
		Expect(status).To(Equal(worqr.CancelRemoved))
		Expect(in.Pause(ctx, "ev")).To(Succeed())
		Expect(in.Resume(ctx, "ev")).To(Succeed())
		// A signal kept by a run that does not wait for it (no worker
		// serves its flow).
		flow := &worqr.Flow{Name: "evflow", Stages: []worqr.Stage{{Name: "s", Queue: worqr.QueueConfig{Concurrency: 1},
			Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return nil, nil })}}}
		runID, err := e.client.StartRun(ctx, flow, nil, nil)
		Expect(err).NotTo(HaveOccurred())
		delivered, err := e.client.Signal(ctx, flow, runID, "go", nil, "")
		Expect(err).NotTo(HaveOccurred())
		Expect(delivered).To(BeFalse())

		want := []struct {
			kind  worqr.EventKind
			queue string
			id    string
		}{
			{worqr.EventEnqueued, "ev", ok}, {worqr.EventEnqueued, "ev", flaky}, {worqr.EventEnqueued, "ev", bad},
			{worqr.EventStarted, "ev", ok}, {worqr.EventDone, "ev", ok},
			{worqr.EventRetry, "ev", flaky}, {worqr.EventDone, "ev", flaky},
			{worqr.EventDead, "ev", bad},
			{worqr.EventCancelled, "nobody", waiting},
			{worqr.EventPaused, "ev", ""}, {worqr.EventResumed, "ev", ""},
			{worqr.EventSignalled, "", runID},
		}
		for _, w := range want {
			Eventually(ctx, func() bool { return f.has(w.kind, w.queue, w.id) }).WithTimeout(5*time.Second).
				Should(BeTrue(), "%s of %s %s followed", w.kind, w.queue, w.id)
		}
	}, SpecTimeout(20*time.Second))

	// Per-task events cost no command on the hot path: each process
	// publishes what it observed at most once per EventInterval.
	It("publishes a busy worker's and client's events in a few batches, not one message per event", func(ctx SpecContext) {
		e := newEnv()
		// A subscriber of its own counts the messages on the channel.
		c, err := redis.DialURLContext(ctx, srv.URL)
		Expect(err).NotTo(HaveOccurred())
		psc := redis.PubSubConn{Conn: c}
		Expect(psc.Subscribe(e.keys.Events())).To(Succeed())
		Expect(psc.Receive()).To(BeAssignableToTypeOf(redis.Subscription{}))
		var messages atomic.Int32
		received := make(chan struct{})
		go func() {
			defer close(received)
			for {
				switch v := psc.Receive().(type) {
				case redis.Message:
					messages.Add(1)
				case redis.Subscription:
					if v.Count == 0 {
						return
					}
				case error:
					return
				}
			}
		}()
		DeferCleanup(func() {
			_ = psc.Unsubscribe() // the receiver returns on the reply
			<-received
			c.Close()
		})

		in, err := worqr.NewInspector(e.served, &worqr.Config{Namespace: e.ns, Logger: e.logger})
		Expect(err).NotTo(HaveOccurred())
		f := e.follow(ctx, in)
		var ran trail
		e.start(nil, e.workerConfig(map[string]worqr.QueueConfig{"many": one(recordingHandler(&ran), 10)}, nil))
		began := time.Now()
		const n = 300
		e.enqueueN("many", n)
		Eventually(ctx, func() int { return f.count(worqr.EventDone, "many") }).WithTimeout(10 * time.Second).Should(Equal(n))
		// Each process publishes on its own timer: the client's last batch
		// of enqueues may come after the worker's last dones.
		Eventually(ctx, func() int { return f.count(worqr.EventEnqueued, "many") }).WithTimeout(2 * time.Second).Should(Equal(n))
		Eventually(ctx, func() int { return f.count(worqr.EventStarted, "many") }).WithTimeout(2 * time.Second).Should(Equal(n))
		// Two publishing processes (client and worker) plus the probe's
		// inspector, each at most one message per 250 ms.
		batches := int(time.Since(began)/defaults.EventInterval) + 2
		Expect(int(messages.Load())).To(BeNumerically("<=", 3*batches), "%d events came in %d messages", 3*n, messages.Load())
	}, SpecTimeout(20*time.Second))

	It("keeps the latest batches in a bounded log when asked, for RecentEvents", func(ctx SpecContext) {
		e := newEnv()
		logged, err := worqr.NewClient(e.served, &worqr.Config{Namespace: e.ns, Logger: e.logger, EventLogLength: 50,
			EventInterval: 10 * time.Millisecond})
		Expect(err).NotTo(HaveOccurred())
		in, err := worqr.NewInspector(e.served, &worqr.Config{Namespace: e.ns, Logger: e.logger})
		Expect(err).NotTo(HaveOccurred())
		var ids []string
		for range 3 {
			id, err := logged.Enqueue(ctx, "kept", []byte("x"), nil)
			Expect(err).NotTo(HaveOccurred())
			ids = append(ids, id)
		}
		Eventually(ctx, func() []string {
			events, err := in.RecentEvents(ctx, 50)
			Expect(err).NotTo(HaveOccurred())
			var got []string
			for _, ev := range events {
				if ev.Kind == worqr.EventEnqueued && ev.Queue == "kept" {
					got = append(got, ev.TaskID)
				}
			}
			return got
		}).WithTimeout(5 * time.Second).Should(Equal(ids))
		// The log is a stream trimmed to about its length.
		Expect(e.do("XLEN", e.keys.EventLog())).To(BeNumerically("<=", 3))
		_, err = in.RecentEvents(ctx, 0)
		Expect(err).To(MatchError(ContainSubstring("n (0) must be at least 1")))
	}, SpecTimeout(15*time.Second))
})
