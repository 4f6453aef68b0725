package worqr_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/worqr/worqr-go/defaults"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// deadChildFlow is a flow whose stage "fan" fans out children "1" and "2"
// to queue "kids", then "after" records the children it sees. Child "1"
// fails for good while fail is set; child "2" waits for hold to close.
type deadChildFlow struct {
	flow  *worqr.Flow
	ns    string
	runs  atomic.Int32 // runs of child "1"
	fail  atomic.Bool
	hold  chan struct{}
	mu    sync.Mutex
	after []worqr.ChildResult
}

func newDeadChildFlow(continueOnFailure bool) *deadChildFlow {
	d := &deadChildFlow{hold: make(chan struct{})}
	d.fail.Store(true)
	d.flow = &worqr.Flow{Name: "fl", Retention: time.Minute, Stages: []worqr.Stage{
		{Name: "fan", Queue: worqr.QueueConfig{Concurrency: 1}, ContinueOnChildFailure: continueOnFailure,
			Children: map[string]worqr.QueueConfig{"kids": {Concurrency: 2, Handler: worqr.HandlerFunc(
				func(ctx context.Context, t *worqr.Task) error {
					if string(t.Payload) == "2" {
						select {
						case <-d.hold:
						case <-ctx.Done():
							return ctx.Err()
						}
						return nil
					}
					d.runs.Add(1)
					if d.fail.Load() {
						return worqr.SkipRetry(errors.New("down"))
					}
					t.SetResult([]byte("ok"))
					return nil
				})}},
			Handler: worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				return &worqr.StageResult{Children: []worqr.ChildSpec{{Queue: "kids", Payload: []byte("1")}, {Queue: "kids", Payload: []byte("2")}}}, nil
			})},
		{Name: "after", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				d.mu.Lock()
				d.after = r.Children
				d.mu.Unlock()
				return nil, nil
			})},
	}}
	return d
}

func (d *deadChildFlow) start(t *testing.T) (*worqr.Client, *worqr.Inspector, string) {
	t.Helper()
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	d.ns = ns
	cfg := fastTimings(ns)
	cfg.Flows = []*worqr.Flow{d.flow}
	startWorker(t, ctx, pool, &cfg)
	t.Cleanup(func() {
		select {
		case <-d.hold:
		default:
			close(d.hold)
		}
	})
	ccfg := worqr.Config{Namespace: ns, DisableEvents: true}
	c, err := worqr.NewClient(pool, &ccfg)
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.StartRun(ctx, d.flow, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, newInspector(t, pool, &ccfg), id
}

func deadIDs(t *testing.T, in *worqr.Inspector, queue string) []string {
	t.Helper()
	infos, _, err := in.Tasks(context.Background(), queue, worqr.StateDead, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(infos))
	for i, ti := range infos {
		ids[i] = ti.ID
	}
	return ids
}

// A dead child whose run failed with it (fail-fast) is not requeued: it
// would run and its result be thrown away, the run staying failed. Before,
// the requeue ran the handler again and discarded what it did (found by
// an audit).
func TestRequeueOfADeadChildOfAFailedRunIsRefused(t *testing.T) {
	ctx := context.Background()
	d := newDeadChildFlow(false)
	c, in, id := d.start(t)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if info, err := c.WaitRun(wctx, d.flow, id); err != nil || info.Status != worqr.RunFailed {
		t.Fatalf("run = %+v, %v; want failed", info, err)
	}
	dead := deadIDs(t, in, "fl/kids")
	if len(dead) != 1 {
		t.Fatalf("dead children %v, want the one that failed", dead)
	}
	d.fail.Store(false)
	n, err := in.RequeueDead(ctx, "fl/kids", dead[0])
	if !errors.Is(err, worqr.ErrInvalid) || !strings.Contains(err.Error(), dead[0]) || n != 0 {
		t.Fatalf("RequeueDead of a child of a failed run = %d, %v; want 0 and ErrInvalid naming it", n, err)
	}
	if n, err := in.RequeueAllDead(ctx, "fl/kids", nil); err != nil || n != 0 {
		t.Fatalf("RequeueAllDead = %d, %v; want 0 (the child is passed)", n, err)
	}
	if got := deadIDs(t, in, "fl/kids"); len(got) != 1 || got[0] != dead[0] {
		t.Fatalf("dead children after the refused requeues %v, want %v", got, dead)
	}
	if runs := d.runs.Load(); runs != 1 {
		t.Fatalf("the child ran %d times, want once", runs)
	}
}

// A dead child whose run goes on past it (ContinueOnChildFailure) and still
// waits for its other children goes back into the run when requeued: its
// success counts, and the next stage sees it done.
func TestRequeuedDeadChildRejoinsItsRun(t *testing.T) {
	ctx := context.Background()
	d := newDeadChildFlow(true)
	c, in, id := d.start(t)
	var dead []string
	wait(t, 20*time.Second, "the child to die", func() bool { dead = deadIDs(t, in, "fl/kids"); return len(dead) == 1 })
	d.fail.Store(false)
	if n, err := in.RequeueDead(ctx, "fl/kids", dead[0]); err != nil || n != 1 {
		t.Fatalf("RequeueDead = %d, %v", n, err)
	}
	wait(t, 20*time.Second, "the requeued child to run", func() bool { return d.runs.Load() == 2 })
	close(d.hold)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if info, err := c.WaitRun(wctx, d.flow, id); err != nil || info.Status != worqr.RunDone {
		t.Fatalf("run = %+v, %v; want done", info, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ch := range d.after {
		if ch.Status != "done" {
			t.Errorf("the next stage saw child %s %s (%s), want both done", ch.ID, ch.Status, ch.Err)
		}
		if ch.ID == dead[0] && string(ch.Result) != "ok" {
			t.Errorf("the requeued child's result %q, want ok", ch.Result)
		}
	}
	if len(d.after) != 2 {
		t.Errorf("the next stage saw %d children, want 2", len(d.after))
	}
}

// RequeueAllDead passes the children it refuses by a cursor, not by how
// many it refused: when refused entries leave the dead set between two of
// its chunks (another operator deletes them, or the dead set's caps trim
// the oldest), it still reads every entry after them. Before, the second
// chunk skipped as many unread entries as had been refused, and left them
// dead (the review's suspicion, reproduced here).
func TestRequeueAllDeadWhileRefusedLeave(t *testing.T) {
	// All refused leave (the cursor with them: the next chunk starts at its
	// score), or the first three (the cursor stays: it starts after it).
	t.Run("all", func(t *testing.T) { requeueAllDeadWhileRefusedLeave(t, 5) })
	t.Run("some", func(t *testing.T) { requeueAllDeadWhileRefusedLeave(t, 3) })
}

func requeueAllDeadWhileRefusedLeave(t *testing.T, leave int) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	var fail atomic.Bool
	fail.Store(true)
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	const early, late = 5, defaults.MaxChildren - 1 // 1,004 dead: more than one chunk
	flow := &worqr.Flow{Name: "fl", Retention: time.Minute, Stages: []worqr.Stage{
		{Name: "fan", Queue: worqr.QueueConfig{Concurrency: 1}, ContinueOnChildFailure: true,
			Children: map[string]worqr.QueueConfig{"kids": {Concurrency: 20, Handler: worqr.HandlerFunc(
				func(ctx context.Context, t *worqr.Task) error {
					if string(t.Payload) == "hold" {
						select {
						case <-hold:
						case <-ctx.Done():
							return ctx.Err()
						}
						return nil
					}
					if fail.Load() {
						return worqr.SkipRetry(errors.New("down"))
					}
					return nil
				})}},
			Handler: worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				n, _ := strconv.Atoi(r.State["n"])
				res := &worqr.StageResult{}
				for range n {
					res.Children = append(res.Children, worqr.ChildSpec{Queue: "kids", Payload: []byte("fail")})
				}
				if r.State["hold"] != "" {
					res.Children = append(res.Children, worqr.ChildSpec{Queue: "kids", Payload: []byte("hold")})
				}
				return res, nil
			})},
		{Name: "after", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) { return nil, nil })},
	}}
	cfg := fastTimings(ns)
	cfg.Flows = []*worqr.Flow{flow}
	startWorker(t, ctx, pool, &cfg)
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	dead := func() int {
		_, n, err := in.Tasks(ctx, "fl/kids", worqr.StateDead, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The first run's children die and the run moves on past them: their
	// requeue is refused. The second run's die while it still waits for
	// its held child: they go back into it.
	first, err := c.StartRun(ctx, flow, map[string]string{"n": strconv.Itoa(early)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if info, err := c.WaitRun(wctx, flow, first); err != nil || info.Status != worqr.RunDone {
		t.Fatalf("first run = %+v, %v; want done", info, err)
	}
	var refused []string
	infos, _, err := in.Tasks(ctx, "fl/kids", worqr.StateDead, 0, early)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range infos {
		refused = append(refused, ti.ID)
	}
	if _, err := c.StartRun(ctx, flow, map[string]string{"n": strconv.Itoa(late), "hold": "1"}, nil); err != nil {
		t.Fatal(err)
	}
	wait(t, 30*time.Second, "the second run's children to die", func() bool { return dead() == early+late })
	fail.Store(false)

	chunks := 0
	n, err := in.RequeueAllDead(ctx, "fl/kids", func(int) {
		chunks++
		if chunks == 1 {
			// Another operator deletes the refused children meanwhile.
			if m, err := in.DeleteDead(ctx, "fl/kids", refused[:leave]...); err != nil || m != leave {
				t.Errorf("DeleteDead = %d, %v", m, err)
			}
		}
	})
	if err != nil || n != late {
		t.Fatalf("RequeueAllDead = %d, %v; want %d (every child of the second run)", n, err, late)
	}
	if left := dead(); left != early-leave {
		t.Fatalf("%d tasks left dead, want the %d refused not deleted", left, early-leave)
	}
}

// A run failed by a child (fail-fast) is retried: its fanning stage runs
// again and fans out anew, and the run ends done. The dead child of the
// failed fan-out stays dead, and its requeue is refused from then on.
func TestRetryRunFailedByAChild(t *testing.T) {
	ctx := context.Background()
	d := newDeadChildFlow(false)
	c, in, id := d.start(t)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if info, err := c.WaitRun(wctx, d.flow, id); err != nil || info.Status != worqr.RunFailed {
		t.Fatalf("run = %+v, %v; want failed", info, err)
	}
	dead := deadIDs(t, in, "fl/kids")
	if len(dead) != 1 {
		t.Fatalf("dead children %v, want the one that failed", dead)
	}
	d.fail.Store(false)
	if ok, err := in.RetryRun(ctx, d.flow.Name, id); err != nil || !ok {
		t.Fatalf("RetryRun = %v, %v; want true", ok, err)
	}
	if ok, err := in.RetryRun(ctx, d.flow.Name, id); err != nil || ok {
		t.Fatalf("RetryRun of the running run = %v, %v; want false", ok, err)
	}
	wait(t, 20*time.Second, "the fan-out's child 1 to run again", func() bool { return d.runs.Load() == 2 })
	close(d.hold)
	if info, err := c.WaitRun(wctx, d.flow, id); err != nil || info.Status != worqr.RunDone {
		t.Fatalf("retried run = %+v, %v; want done", info, err)
	}
	d.mu.Lock()
	if len(d.after) != 2 {
		t.Errorf("the next stage saw %d children, want the 2 of the new fan-out", len(d.after))
	}
	for _, ch := range d.after {
		if ch.Status != "done" || ch.ID == dead[0] {
			t.Errorf("the next stage saw child %s %s, want the new fan-out's, done", ch.ID, ch.Status)
		}
	}
	d.mu.Unlock()
	if n, err := in.RequeueDead(ctx, "fl/kids", dead[0]); !errors.Is(err, worqr.ErrInvalid) || n != 0 {
		t.Errorf("RequeueDead of the failed fan-out's child = %d, %v; want 0 and ErrInvalid", n, err)
	}
	if got := deadIDs(t, in, "fl/kids"); len(got) != 1 || got[0] != dead[0] {
		t.Errorf("dead children %v, want %v", got, dead)
	}
	if runs := d.runs.Load(); runs != 2 {
		t.Errorf("child 1 ran %d times, want twice (the failed fan-out's, then the new one's)", runs)
	}
	if ok, err := in.RetryRun(ctx, d.flow.Name, id); err != nil || ok {
		t.Errorf("RetryRun of a done run = %v, %v; want false", ok, err)
	}
	if ok, err := in.RetryRun(ctx, d.flow.Name, "nosuchrun"); err != nil || ok {
		t.Errorf("RetryRun of an unknown run = %v, %v; want false", ok, err)
	}
}

// A run whose stage failed for good is retried from that stage, which
// leaves its dead set; the run is indexed as running again.
func TestRetryRunFailedInAStage(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	var fail atomic.Bool
	fail.Store(true)
	var attempts atomic.Int32
	gate := make(chan struct{})
	flow := &worqr.Flow{Name: "fs", Retention: time.Minute, IndexBy: []string{"user"}, Stages: []worqr.Stage{
		{Name: "one", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				return &worqr.StageResult{Fields: map[string]string{"one": "ok"}}, nil
			})},
		{Name: "two", Queue: worqr.QueueConfig{Concurrency: 1, MaxAttempts: 2, Backoff: func(int, error) time.Duration { return time.Millisecond }},
			Handler: worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				attempts.Add(1)
				if fail.Load() {
					return nil, errors.New("down")
				}
				select {
				case <-gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return &worqr.StageResult{Fields: map[string]string{"two": "ok"}}, nil
			})},
	}}
	cfg := fastTimings(ns)
	cfg.Flows = []*worqr.Flow{flow}
	startWorker(t, ctx, pool, &cfg)
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.StartRun(ctx, flow, map[string]string{"user": "u1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if info, err := c.WaitRun(wctx, flow, id); err != nil || info.Status != worqr.RunFailed {
		t.Fatalf("run = %+v, %v; want failed", info, err)
	}
	if got := deadIDs(t, in, "fs/two"); len(got) != 1 || got[0] != id {
		t.Fatalf("dead in stage two: %v, want the run", got)
	}
	fail.Store(false)
	if ok, err := in.RetryRun(ctx, "fs", id); err != nil || !ok {
		t.Fatalf("RetryRun = %v, %v; want true", ok, err)
	}
	wait(t, 20*time.Second, "stage two to run again", func() bool { return attempts.Load() == 3 })
	// Running again: indexed as such (+inf, and no expiry on the index).
	conn := pool.Get()
	ix := ns + ":{fs}:ix:user:u1"
	score, err := redis.String(conn.Do("ZSCORE", ix, id))
	ttl, err2 := redis.Int(conn.Do("PTTL", ix))
	conn.Close()
	if err != nil || err2 != nil || score != "inf" || ttl != -1 {
		t.Errorf("the run's index entry while it runs again: score %q (%v), index PTTL %d (%v); want inf and no expiry", score, err, ttl, err2)
	}
	close(gate)
	info, err := c.WaitRun(wctx, flow, id)
	if err != nil || info.Status != worqr.RunDone || info.State["two"] != "ok" || info.State["one"] != "ok" {
		t.Fatalf("retried run = %+v, %v; want done with both stages' fields", info, err)
	}
	if n := attempts.Load(); n != 3 {
		t.Errorf("stage two ran %d times, want 3 (2 failed attempts, then the retry's)", n)
	}
	if got := deadIDs(t, in, "fs/two"); len(got) != 0 {
		t.Errorf("dead in stage two after the retry: %v", got)
	}
}

// A dead child whose run data is corrupt (not a hash) is refused, as any
// child whose run no longer waits for it: reading it with redis.call
// aborted the script, and RequeueAllDead of the queue failed for good on
// it (found by a review).
func TestDeadChildOfACorruptRun(t *testing.T) {
	ctx := context.Background()
	d := newDeadChildFlow(true)
	_, in, id := d.start(t)
	var dead []string
	wait(t, 20*time.Second, "the child to die", func() bool { dead = deadIDs(t, in, "fl/kids"); return len(dead) == 1 })
	conn := srv.Pool().Get()
	defer conn.Close()
	runKey := rdb.NewKeys(d.ns).Queue(rdb.QueueRef{Tag: "fl", Name: "fl"}).Task(id)
	if _, err := conn.Do("DEL", runKey); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Do("SET", runKey, "corrupt"); err != nil {
		t.Fatal(err)
	}
	d.fail.Store(false)
	if n, err := in.RequeueAllDead(ctx, "fl/kids", nil); n != 0 || err != nil {
		t.Errorf("RequeueAllDead with a corrupt run = %d, %v; want 0, nil (the child passed)", n, err)
	}
	if n, err := in.RequeueDead(ctx, "fl/kids", dead[0]); n != 0 || !errors.Is(err, worqr.ErrInvalid) || !strings.Contains(err.Error(), dead[0]) {
		t.Errorf("RequeueDead with a corrupt run = %d, %v; want 0 and ErrInvalid naming it", n, err)
	}
	if got := deadIDs(t, in, "fl/kids"); len(got) != 1 {
		t.Errorf("dead children %v, want the one still there", got)
	}
}

// A dead child of an earlier fan-out (ContinueOnChildFailure) is not
// requeued while the run waits for the children of a later one: the run
// moved on from its fan-out. It was put back into the later fan-out, and
// the run went back to a stage it had run (found by a review): each
// fan-out is numbered in the run ('kg') and on its children ('pe').
func TestDeadChildOfAnEarlierFanOutIsRefused(t *testing.T) {
	ctx := context.Background()
	var fan2Runs, kid1Runs atomic.Int32
	var fail atomic.Bool
	fail.Store(true)
	hold2 := make(chan struct{})
	hold1 := make(chan struct{})
	flow := &worqr.Flow{Name: "fl", Retention: time.Minute, Stages: []worqr.Stage{
		{Name: "fan1", Queue: worqr.QueueConfig{Concurrency: 1}, ContinueOnChildFailure: true,
			Children: map[string]worqr.QueueConfig{"kids1": {Concurrency: 2, Handler: worqr.HandlerFunc(
				func(ctx context.Context, t *worqr.Task) error {
					if string(t.Payload) == "2" {
						return nil
					}
					kid1Runs.Add(1)
					if fail.Load() {
						return worqr.SkipRetry(errors.New("down"))
					}
					select {
					case <-hold1:
					case <-ctx.Done():
						return ctx.Err()
					}
					return nil
				})}},
			Handler: worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				return &worqr.StageResult{Children: []worqr.ChildSpec{{Queue: "kids1", Payload: []byte("1")}, {Queue: "kids1", Payload: []byte("2")}}}, nil
			})},
		{Name: "fan2", Queue: worqr.QueueConfig{Concurrency: 1},
			Children: map[string]worqr.QueueConfig{"kids2": {Concurrency: 2, Handler: worqr.HandlerFunc(
				func(ctx context.Context, t *worqr.Task) error {
					select {
					case <-hold2:
					case <-ctx.Done():
						return ctx.Err()
					}
					return nil
				})}},
			Handler: worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				fan2Runs.Add(1)
				return &worqr.StageResult{Children: []worqr.ChildSpec{{Queue: "kids2", Payload: []byte("x")}}}, nil
			})},
		{Name: "after", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) { return nil, nil })},
	}}
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	cfg := fastTimings(ns)
	cfg.Flows = []*worqr.Flow{flow}
	startWorker(t, ctx, pool, &cfg)
	t.Cleanup(func() {
		for _, c := range []chan struct{}{hold1, hold2} {
			select {
			case <-c:
			default:
				close(c)
			}
		}
	})
	ccfg := worqr.Config{Namespace: ns, DisableEvents: true}
	c, err := worqr.NewClient(pool, &ccfg)
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, pool, &ccfg)
	id, err := c.StartRun(ctx, flow, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var dead []string
	wait(t, 20*time.Second, "the kids1 child to die and fan2 to fan out", func() bool {
		dead = deadIDs(t, in, "fl/kids1")
		r, err := in.Run(ctx, flow.Name, id)
		return len(dead) == 1 && err == nil && r.Stage == "fan2" && r.TaskState == "children"
	})
	fail.Store(false)
	n, err := in.RequeueDead(ctx, "fl/kids1", dead[0])
	if n != 0 || !errors.Is(err, worqr.ErrInvalid) || !strings.Contains(err.Error(), dead[0]) {
		t.Fatalf("RequeueDead of a child of fan1 while the run waits in fan2 = %d, %v; want 0 and ErrInvalid naming it", n, err)
	}
	if got := deadIDs(t, in, "fl/kids1"); len(got) != 1 || got[0] != dead[0] {
		t.Fatalf("dead children of fan1 after the refused requeue: %v, want %v", got, dead)
	}
	if runs := kid1Runs.Load(); runs != 1 {
		t.Fatalf("the fan1 child ran %d times, want once", runs)
	}
}

// A run indexed by a property the worker's Flow no longer declares
// (IndexBy changed between start and end, e.g. a deploy) leaves its index
// when it ends: a stage's end used the worker's IndexBy, not the
// properties stored on the run, and the entry stayed at +inf in a key with
// no expiry, forever (found by an audit).
func TestRunIndexFollowsTheRunNotTheDeploy(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	stages := []worqr.Stage{{Name: "s", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
		func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) { return nil, nil })}}
	old := &worqr.Flow{Name: "ixf", Retention: time.Second, IndexBy: []string{"user"}, Stages: stages}
	now := &worqr.Flow{Name: "ixf", Retention: time.Second, Stages: stages}
	c := newClient(t, pool, &worqr.Config{Namespace: ns})
	in := newInspector(t, pool, &worqr.Config{Namespace: ns})
	id, err := c.StartRun(ctx, old, map[string]string{"user": "42"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fastTimings(ns)
	cfg.Flows = []*worqr.Flow{now}
	startWorker(t, ctx, pool, &cfg)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if info, err := c.WaitRun(wctx, now, id); err != nil || info.Status != worqr.RunDone {
		t.Fatal(info, err)
	}
	conn := pool.Get()
	defer conn.Close()
	// Past the run's retention (1 s): its hash is gone.
	wait(t, 10*time.Second, "the run's hash to expire", func() bool {
		ex, _ := redis.Int(conn.Do("EXISTS", ns+":{ixf}:t:"+id))
		return ex == 0
	})
	ix := ns + ":{ixf}:ix:user:42"
	score, _ := redis.String(conn.Do("ZSCORE", ix, id))
	ttl, _ := redis.Int(conn.Do("PTTL", ix))
	ex, _ := redis.Int(conn.Do("EXISTS", ns+":{ixf}:t:"+id))
	t.Logf("run hash exists=%d; index entry score %q, index PTTL %d", ex, score, ttl)
	if ex == 0 && score == "inf" && ttl == -1 {
		t.Errorf("the run ended and expired, its index entry stays +inf with no expiry")
	}
	if runs, err := in.FindRuns(ctx, old, "user", "42"); err == nil {
		t.Logf("FindRuns under the old definition: %d runs", len(runs))
	}
}

// An index value that always has a run going (a tenant, a busy user) never
// lets its index key expire, and the entries of the runs that ended and
// expired stayed in it: one entry per run, for ever. FindRuns never reads
// them (it stops at Redis's now), so only memory showed it.
func TestRunIndexForgetsExpiredRuns(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	hold := make(chan struct{})
	f := &worqr.Flow{Name: "ixg", Retention: 300 * time.Millisecond, IndexBy: []string{"user"}, Stages: []worqr.Stage{{
		Name: "s", Queue: worqr.QueueConfig{Concurrency: 8}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				if r.State["hold"] == "1" {
					select {
					case <-hold:
					case <-ctx.Done():
					}
				}
				return nil, nil
			})}}}
	c := newClient(t, pool, &worqr.Config{Namespace: ns})
	in := newInspector(t, pool, &worqr.Config{Namespace: ns})
	cfg := fastTimings(ns)
	cfg.Flows = []*worqr.Flow{f}
	startWorker(t, ctx, pool, &cfg)
	t.Cleanup(func() { close(hold) }) // (before the worker's Stop)
	if _, err := c.StartRun(ctx, f, map[string]string{"user": "42", "hold": "1"}, nil); err != nil {
		t.Fatal(err)
	}
	conn := pool.Get()
	defer conn.Close()
	ix := ns + ":{ixg}:ix:user:42"
	runs := func(n int) {
		ids := make([]string, n)
		for i := range ids {
			id, err := c.StartRun(ctx, f, map[string]string{"user": "42"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			ids[i] = id
		}
		wait(t, 10*time.Second, "the runs to end", func() bool {
			score, err := redis.Float64(conn.Do("ZSCORE", ix, ids[n-1]))
			return err == nil && !math.IsInf(score, 1)
		})
		// Past the retention of every run ended: their hashes are gone.
		wait(t, 10*time.Second, "the ended runs to expire", func() bool {
			for _, id := range ids {
				if ex, _ := redis.Int(conn.Do("EXISTS", ns+":{ixg}:t:"+id)); ex != 0 {
					return false
				}
			}
			return true
		})
	}
	runs(50)
	runs(1) // a start and an end after the others expired
	n, err := redis.Int(conn.Do("ZCARD", ix))
	if err != nil {
		t.Fatal(err)
	}
	ttl, _ := redis.Int(conn.Do("PTTL", ix))
	found, err := in.FindRuns(ctx, f, "user", "42")
	t.Logf("index: %d entries, PTTL %d; FindRuns: %d runs", n, ttl, len(found))
	if err != nil || len(found) != 1 {
		t.Fatalf("FindRuns: %d runs (%v), want the one running", len(found), err)
	}
	if n > 2 {
		t.Errorf("the index keeps %d entries for 1 run found: the entries of 51 runs past their retention stay while a run of the value is going", n)
	}
}

// RunNow moves a scheduled task to its queue at once: one enqueued an hour
// ahead (of a priority level too), and a retry an hour away. Its attempts
// are kept; a task that is not scheduled is left alone.
func TestRunNow(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	var mu sync.Mutex
	ran := map[string][]int{} // payload -> attempts
	cfg := fastTimings(ns)
	cfg.Queues = map[string]worqr.QueueConfig{"later": {Concurrency: 2, MaxAttempts: 3,
		Backoff: func(int, error) time.Duration { return time.Hour },
		Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
			mu.Lock()
			ran[string(t.Payload)] = append(ran[string(t.Payload)], t.Attempt)
			mu.Unlock()
			if string(t.Payload) == "flaky" && t.Attempt == 1 {
				return errors.New("down")
			}
			return nil
		})}}
	startWorker(t, ctx, pool, &cfg)
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	in, err := worqr.NewInspector(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	attempts := func(p string) []int {
		mu.Lock()
		defer mu.Unlock()
		return append([]int(nil), ran[p]...)
	}
	state := func(id string) worqr.TaskState {
		ti, err := in.Task(ctx, "later", id)
		if err != nil {
			return ""
		}
		return ti.State
	}

	delayed, err := c.Enqueue(ctx, "later", []byte("delayed"), &worqr.EnqueueOpts{Delay: time.Hour, Retention: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	leveled, err := c.Enqueue(ctx, "later", []byte("leveled"), &worqr.EnqueueOpts{Delay: time.Hour, Priority: 2, Retention: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	flaky, err := c.Enqueue(ctx, "later", []byte("flaky"), &worqr.EnqueueOpts{Retention: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, 10*time.Second, "the flaky task's retry to be scheduled", func() bool {
		return len(attempts("flaky")) == 1 && state(flaky) == worqr.StateScheduled
	})
	if s := state(delayed); s != worqr.StateScheduled {
		t.Fatalf("the delayed task is %s, want scheduled", s)
	}
	for _, id := range []string{delayed, leveled, flaky} {
		if ok, err := in.RunNow(ctx, "later", id); err != nil || !ok {
			t.Fatalf("RunNow(%s) = %v, %v; want true", id, ok, err)
		}
	}
	wait(t, 10*time.Second, "the three to run", func() bool {
		return state(delayed) == worqr.StateDone && state(leveled) == worqr.StateDone && state(flaky) == worqr.StateDone
	})
	if a := attempts("flaky"); len(a) != 2 || a[1] != 2 {
		t.Errorf("the retried task ran attempts %v, want [1 2]", a)
	}
	if ok, err := in.RunNow(ctx, "later", delayed); err != nil || ok {
		t.Errorf("RunNow of a done task = %v, %v; want false", ok, err)
	}
	if ok, err := in.RunNow(ctx, "later", "nosuchtask"); err != nil || ok {
		t.Errorf("RunNow of an unknown task = %v, %v; want false", ok, err)
	}
	if _, err := in.RunNow(ctx, "later", ""); !errors.Is(err, worqr.ErrInvalid) {
		t.Errorf("RunNow with no id: %v, want ErrInvalid", err)
	}
}

// Inspector.CancelRun cancels a run knowing only its flow's name: a
// running one (its stage told to stop) and a waiting one, each kept for
// the retention it was started with; a second cancel says it was not
// running.
func TestInspectorCancelRun(t *testing.T) {
	ctx, pool, c, in, flow, _ := waitRunEnv(t)
	running, err := c.StartRun(ctx, flow, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	waiting, err := c.StartRun(ctx, flow, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{running, waiting} {
		if ok, err := in.CancelRun(ctx, flow.Name, id); err != nil || !ok {
			t.Fatalf("CancelRun(%s) = %v, %v", id, ok, err)
		}
		info, err := in.Run(ctx, flow.Name, id)
		if err != nil || info.Status != worqr.RunCancelled {
			t.Fatalf("run %s after the cancel: %+v, %v", id, info, err)
		}
		if ok, err := in.CancelRun(ctx, flow.Name, id); err != nil || ok {
			t.Fatalf("second CancelRun(%s) = %v, %v; want false", id, ok, err)
		}
	}
	// Kept for the flow's retention: readable now, and with an expiry.
	conn, err := pool.GetContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if n, err := redis.Int(conn.Do("EVAL", "local n = 0 for _, k in ipairs(redis.call('KEYS', ARGV[1])) do if redis.call('PTTL', k) > 0 then n = n + 1 end end return n", 0, "*:t:"+running)); err != nil || n != 1 {
		t.Fatalf("the cancelled run's hash with an expiry: %d (%v), want 1", n, err)
	}
	if _, err := in.CancelRun(ctx, "no/such", running); !errors.Is(err, worqr.ErrInvalid) {
		t.Fatalf("a bad flow name: %v, want ErrInvalid", err)
	}
}
