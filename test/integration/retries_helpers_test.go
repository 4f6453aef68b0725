package integration_test

import (
	"context"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gexec"

	"github.com/worqr/worqr-go/worqr"
)

// Helpers of retries_test.go. Their names start with rt so that they cannot
// collide with the helpers of other files of the suite.

// rtRun is one run of a task by a handler, timed by the local clock.
type rtRun struct {
	Attempt int
	Start   time.Time // just before the handler's body ran
	Return  time.Time // just after it returned (before the finish)
}

// rtRuns records every run of every task a handler made.
type rtRuns struct {
	mu   sync.Mutex
	runs map[string][]rtRun
}

// handler wraps body: each call is recorded with its start and return times.
// A panic of body is let through (after its return time is recorded).
func (r *rtRuns) handler(body func(ctx context.Context, t *worqr.Task) error) worqr.Handler {
	return worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
		r.mu.Lock()
		if r.runs == nil {
			r.runs = map[string][]rtRun{}
		}
		i := len(r.runs[t.ID])
		r.runs[t.ID] = append(r.runs[t.ID], rtRun{Attempt: t.Attempt, Start: time.Now()})
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			r.runs[t.ID][i].Return = time.Now()
			r.mu.Unlock()
		}()
		return body(ctx, t)
	})
}

// of returns the runs of task id so far.
func (r *rtRuns) of(id string) []rtRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]rtRun(nil), r.runs[id]...)
}

// count returns a poller of the number of runs of task id.
func (r *rtRuns) count(id string) func() int {
	return func() int { return len(r.of(id)) }
}

// returned returns a poller of the number of runs of task id that returned.
func (r *rtRuns) returned(id string) func() int {
	return func() int {
		n := 0
		for _, run := range r.of(id) {
			if !run.Return.IsZero() {
				n++
			}
		}
		return n
	}
}

// attempts returns the Task.Attempt of each run of task id, in order.
func (r *rtRuns) attempts(id string) []int {
	var out []int
	for _, run := range r.of(id) {
		out = append(out, run.Attempt)
	}
	return out
}

// ids returns every task id that ran.
func (r *rtRuns) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.runs))
	for id := range r.runs {
		out = append(out, id)
	}
	return out
}

// rtBackoff is a fixed QueueConfig.Backoff that counts its calls.
type rtBackoff struct {
	d     time.Duration
	calls atomic.Int32
}

func (b *rtBackoff) fn(int, error) time.Duration {
	b.calls.Add(1)
	return b.d
}

// rtFixed is a Backoff that always waits d.
func rtFixed(d time.Duration) func(int, error) time.Duration {
	return func(int, error) time.Duration { return d }
}

// rtDead returns every task of queue's dead set, newest first, and the set's
// size.
func (e *env) rtDead(queue string) ([]*worqr.TaskInfo, int) {
	GinkgoHelper()
	ctx, cancel := bg()
	defer cancel()
	infos, total, err := e.in.Tasks(ctx, queue, worqr.StateDead, 0, 10000)
	Expect(err).NotTo(HaveOccurred())
	return infos, total
}

// rtDeadIDs returns a poller of the ids in queue's dead set, newest first.
func (e *env) rtDeadIDs(queue string) func() []string {
	return func() []string {
		infos, _ := e.rtDead(queue)
		out := make([]string, 0, len(infos))
		for _, in := range infos {
			out = append(out, in.ID)
		}
		return out
	}
}

// rtDeadTask returns what Inspector.Tasks says of dead task id of queue, or nil when
// it is not in the dead set.
func (e *env) rtDeadTask(queue, id string) *worqr.TaskInfo {
	GinkgoHelper()
	infos, _ := e.rtDead(queue)
	for _, in := range infos {
		if in.ID == id {
			return in
		}
	}
	return nil
}

// rtTask returns Inspector.Task of id (nil and the error when it fails).
func (e *env) rtTask(queue, id string) (*worqr.TaskInfo, error) {
	ctx, cancel := bg()
	defer cancel()
	return e.in.Task(ctx, queue, id)
}

// rtEnqueue enqueues one task with opts.
func (e *env) rtEnqueue(queue, payload string, opts *worqr.EnqueueOpts) (string, error) {
	ctx, cancel := bg()
	defer cancel()
	return e.client.Enqueue(ctx, queue, []byte(payload), opts)
}

// The timings of the crash-counting worker processes.
const (
	rtProcHeartbeatInterval = 100 * time.Millisecond
	rtProcHeartbeatTTL      = 500 * time.Millisecond
	rtProcReaperInterval    = 100 * time.Millisecond
	rtProcPollInterval      = 200 * time.Millisecond
)

// rtStartStuckProc starts a `worqr-example worker` process serving queue
// with one handler slot that never finishes a task (--work-time 1h), burying
// a task once 2 workers died running it (--max-crashes 2).
func rtStartStuckProc(e *env, queue string) *workerProc {
	GinkgoHelper()
	cmd := exec.Command(exampleBin, "worker",
		"--queues", queue,
		"--concurrency", "1",
		"--work-time", "1h",
		"--max-crashes", "2",
		"--redis-url", srv.URL,
		"--namespace", e.ns,
	)
	cmd.Env = append(os.Environ(),
		"WORQR_HEARTBEAT_INTERVAL="+rtProcHeartbeatInterval.String(),
		"WORQR_HEARTBEAT_TTL="+rtProcHeartbeatTTL.String(),
		"WORQR_REAPER_INTERVAL="+rtProcReaperInterval.String(),
		"WORQR_POLL_INTERVAL="+rtProcPollInterval.String(),
	)
	sess, err := gexec.Start(cmd, GinkgoWriter, GinkgoWriter)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { sess.Kill().Wait(10 * time.Second) })
	return &workerProc{sess: sess}
}

// rtExplode is the panicking part of a handler: its name must show in the
// stack trace stored as the task's last error.
//
//go:noinline
func rtExplode(id string) {
	panic("kaboom " + id)
}
