package worqr_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/worqr/worqr-go/defaults"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// A run started with RunOpts.ID is started once: a start repeated with the
// same id (after its reply was lost) starts nothing and says ErrDuplicate
// with the id.
func TestStartRunWithIDIsIdempotent(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	cfg := worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true}
	c, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, pool, &cfg)
	flow := newDeadChildFlow(false).flow
	opts := &worqr.RunOpts{ID: "order-42"}
	if id, err := c.StartRun(ctx, flow, map[string]string{"n": "1"}, opts); err != nil || id != "order-42" {
		t.Fatalf("first start = %q, %v", id, err)
	}
	if id, err := c.StartRun(ctx, flow, map[string]string{"n": "2"}, opts); !errors.Is(err, worqr.ErrDuplicate) || id != "order-42" {
		t.Fatalf("repeated start = %q, %v; want order-42 and ErrDuplicate", id, err)
	}
	if n := queueLen(t, in, "fl/fan"); n != 1 {
		t.Fatalf("runs waiting in the first stage: %d; want 1", n)
	}
	if r, err := in.Run(ctx, flow.Name, "order-42"); err != nil || r.State["n"] != "1" {
		t.Fatalf("the run: %+v, %v; want the first start's state", r, err)
	}
	if _, err := c.StartRun(ctx, flow, nil, &worqr.RunOpts{ID: "no spaces"}); !errors.Is(err, worqr.ErrInvalid) || !strings.Contains(err.Error(), "RunOpts.ID") {
		t.Errorf("a bad id: %v, want ErrInvalid naming RunOpts.ID", err)
	}
}

// manyFields is n state fields whose values are each size bytes.
func manyFields(n, size int) map[string]string {
	v := strings.Repeat("v", size)
	m := make(map[string]string, n)
	for i := 0; i < n; i++ {
		m[fmt.Sprintf("f%05d", i)] = v
	}
	return m
}

// invalidField returns the field an *InvalidError names, or fails.
func invalidField(t *testing.T, what string, err error) string {
	t.Helper()
	var ie *worqr.InvalidError
	if !errors.As(err, &ie) {
		t.Fatalf("%s = %v, want an *InvalidError", what, err)
	}
	return ie.Field
}

// The state a run starts with is written in one atomic step: its number of
// fields and its bytes are bounded (1,000,000 fields held Redis for 1.4 s
// in one call, 64 fields of 1 MiB for 190 ms).
func TestStartRunStateIsBounded(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	flow := &worqr.Flow{Name: "sb", Stages: []worqr.Stage{{Name: "s1", Queue: worqr.QueueConfig{Concurrency: 1},
		Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return nil, nil })}}}
	cfg := worqr.Config{Namespace: ns, DisableEvents: true}
	c, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, pool, &cfg)
	if _, err := c.StartRun(ctx, flow, manyFields(defaults.MaxStateFields+1, 1), nil); invalidField(t, "StartRun of defaults.MaxStateFields+1 fields", err) != "state" {
		t.Fatalf("StartRun of too many fields: %v, want the field named state", err)
	}
	if _, err := c.StartRun(ctx, flow, manyFields(5, 1<<20), nil); invalidField(t, "StartRun of 5 MiB of state", err) != "state" {
		t.Fatalf("StartRun of 5 MiB: %v, want the field named state", err)
	}
	if n := queueLen(t, in, "sb/s1"); n != 0 {
		t.Fatalf("%d runs waiting after refused starts, want none", n)
	}
	// At the bounds: accepted.
	if _, err := c.StartRun(ctx, flow, manyFields(defaults.MaxStateFields, 1), nil); err != nil {
		t.Fatalf("StartRun of 1,000 fields: %v", err)
	}
	if _, err := c.StartRun(ctx, flow, manyFields(3, 1<<20), nil); err != nil {
		t.Fatalf("StartRun of 3 MiB: %v", err)
	}
	// A larger MaxPayloadBytes allows one such value.
	big, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true, MaxPayloadBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := big.StartRun(ctx, flow, manyFields(1, 6<<20), nil); err != nil {
		t.Fatalf("StartRun of one 6 MiB value with MaxPayloadBytes 8 MiB: %v", err)
	}
}

// A stage's StageResult.Sleep is a durable timer: the run waits in Redis
// (its next stage scheduled), through a restart of its workers, and
// resumes at its next stage; Again runs the stage again instead.
func TestStageSleep(t *testing.T) {
	ctx := context.Background()
	type ran struct {
		stage   string
		attempt int
		at      time.Time
		state   map[string]string
	}
	// flowOf is a flow of stages s1 and s2: s1's result is first(r); each
	// run of a stage is sent on ch.
	flowOf := func(name string, ch chan<- ran, first func(*worqr.Run) *worqr.StageResult) *worqr.Flow {
		stage := func(n string, res func(*worqr.Run) *worqr.StageResult) worqr.Stage {
			return worqr.Stage{Name: n, Queue: worqr.QueueConfig{Concurrency: 1},
				Handler: worqr.StageHandlerFunc(func(_ context.Context, r *worqr.Run) (*worqr.StageResult, error) {
					ch <- ran{n, r.Attempt, time.Now(), maps.Clone(r.State)}
					return res(r), nil
				})}
		}
		return &worqr.Flow{Name: name, Stages: []worqr.Stage{stage("s1", first),
			stage("s2", func(*worqr.Run) *worqr.StageResult { return nil })}}
	}
	start := func(t *testing.T, b *bundle, f *worqr.Flow) *worqr.Worker {
		cfg := fastTimings(b.ns)
		cfg.Flows = []*worqr.Flow{f}
		return b.startWorker(cfg)
	}
	recv := func(t *testing.T, ch <-chan ran) ran { t.Helper(); return within(t, ch, "a stage to run") }
	runInfo := func(t *testing.T, b *bundle, f *worqr.Flow, id string) *worqr.RunInfo {
		t.Helper()
		info, err := b.in.Run(ctx, f.Name, id)
		if err != nil {
			t.Fatal(err)
		}
		return info
	}

	t.Run("the run sleeps in Redis through a restart, then resumes", func(t *testing.T) {
		b := setup(t)
		ch := make(chan ran, 4)
		f := flowOf("nap", ch, func(*worqr.Run) *worqr.StageResult {
			return &worqr.StageResult{Fields: map[string]string{"a": "1"}, Sleep: time.Hour}
		})
		w := start(t, b, f)
		before := time.Now()
		id, err := b.client.StartRun(ctx, f, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		recv(t, ch)
		var info *worqr.RunInfo
		wait(t, 10*time.Second, "the run to sleep before s2", func() bool {
			info = runInfo(t, b, f, id)
			return info.Stage == "s2" && info.TaskState == "scheduled"
		})
		task, err := b.in.Task(ctx, "nap/s2", id)
		if err != nil {
			t.Fatal(err)
		}
		if task.DueAt.Before(before.Add(time.Hour-time.Second)) || task.DueAt.After(time.Now().Add(time.Hour+time.Second)) {
			t.Errorf("s2 due %v, want an hour after s1 ended", task.DueAt)
		}
		if !info.WakeAt.Equal(task.DueAt) || info.Awaiting != "" {
			t.Errorf("RunInfo.WakeAt %v, Awaiting %q; want s2's due time %v and no signal", info.WakeAt, info.Awaiting, task.DueAt)
		}
		// Its workers stop and others start: the sleep is in Redis.
		if err := w.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		start(t, b, f)
		if ok, err := b.in.RunNow(ctx, "nap/s2", id); err != nil || !ok {
			t.Fatalf("RunNow = %v, %v", ok, err)
		}
		if r := recv(t, ch); r.stage != "s2" || r.state["a"] != "1" || r.attempt != 1 {
			t.Errorf("after the wake-up: %+v, want s2's first attempt with s1's field", r)
		}
		wait(t, 10*time.Second, "the run to end", func() bool { return runInfo(t, b, f, id).Status == worqr.RunDone })
	})

	t.Run("a short sleep resumes the run once its time has come", func(t *testing.T) {
		b := setup(t)
		ch := make(chan ran, 4)
		const nap = 300 * time.Millisecond
		f := flowOf("short", ch, func(*worqr.Run) *worqr.StageResult { return &worqr.StageResult{Sleep: nap} })
		start(t, b, f)
		if _, err := b.client.StartRun(ctx, f, nil, nil); err != nil {
			t.Fatal(err)
		}
		s1 := recv(t, ch)
		s2 := recv(t, ch)
		if s2.stage != "s2" || s2.at.Sub(s1.at) < nap {
			t.Errorf("%s started %v after s1, want s2 at least %v after", s2.stage, s2.at.Sub(s1.at), nap)
		}
		t.Logf("s2 started %v after s1 (sleep %v)", s2.at.Sub(s1.at), nap)
	})

	t.Run("Again runs the stage again until it moves on", func(t *testing.T) {
		b := setup(t)
		ch := make(chan ran, 8)
		f := flowOf("poll", ch, func(r *worqr.Run) *worqr.StageResult {
			n := len(r.State["n"])
			if n < 2 {
				return &worqr.StageResult{Fields: map[string]string{"n": r.State["n"] + "x"}, Sleep: 10 * time.Millisecond, Again: true}
			}
			return nil
		})
		start(t, b, f)
		if _, err := b.client.StartRun(ctx, f, nil, nil); err != nil {
			t.Fatal(err)
		}
		var got []string
		for range 4 {
			r := recv(t, ch)
			got = append(got, fmt.Sprintf("%s#%d n=%s", r.stage, r.attempt, r.state["n"]))
		}
		if want := "s1#1 n=,s1#1 n=x,s1#1 n=xx,s2#1 n=xx"; strings.Join(got, ",") != want {
			t.Errorf("ran %v, want %s", got, want)
		}
	})

	t.Run("a sleep that cannot work fails the attempt, naming the field", func(t *testing.T) {
		for _, c := range []struct {
			name string
			res  *worqr.StageResult
		}{
			{"with children", &worqr.StageResult{Sleep: time.Minute, Children: []worqr.ChildSpec{{Queue: "k"}}}},
			{"negative", &worqr.StageResult{Sleep: -time.Second}},
		} {
			b := setup(t)
			f := &worqr.Flow{Name: "bad", Stages: []worqr.Stage{{Name: "s", Queue: worqr.QueueConfig{Concurrency: 1, MaxAttempts: 1},
				Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return c.res, nil }),
				Children: map[string]worqr.QueueConfig{"k": {Concurrency: 1, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
					return errors.New("must not run")
				})}}}, {Name: "s2", Queue: worqr.QueueConfig{Concurrency: 1},
				Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return nil, nil })}}}
			start(t, b, f)
			id, err := b.client.StartRun(ctx, f, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			var info *worqr.RunInfo
			wait(t, 10*time.Second, c.name+": the run to fail", func() bool {
				info = runInfo(t, b, f, id)
				return info.Status == worqr.RunFailed
			})
			if !strings.Contains(info.LastError, "StageResult.Sleep") || len(info.Children) != 0 {
				t.Errorf("%s: error %q, children %v; want StageResult.Sleep named, nothing fanned out", c.name, info.LastError, info.Children)
			}
		}
		// After the last stage a sleep needs Again.
		b := setup(t)
		f := &worqr.Flow{Name: "last", Stages: []worqr.Stage{{Name: "s", Queue: worqr.QueueConfig{Concurrency: 1, MaxAttempts: 1},
			Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
				return &worqr.StageResult{Sleep: time.Minute}, nil
			})}}}
		start(t, b, f)
		id, err := b.client.StartRun(ctx, f, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var info *worqr.RunInfo
		wait(t, 10*time.Second, "the run to fail", func() bool {
			info = runInfo(t, b, f, id)
			return info.Status == worqr.RunFailed
		})
		if !strings.Contains(info.LastError, "StageResult.Sleep") || !strings.Contains(info.LastError, "StageResult.Again") {
			t.Errorf("error %q, want StageResult.Sleep and StageResult.Again named", info.LastError)
		}
	})
}

// StageResult.Await and Client.Signal: a run waits for a signal before its
// next stage, which finds the signal's payload in its state; a signal sent
// before the run waits is kept and taken then; the wait's bound passing
// moves the run on without it; a signal id is taken once.
func TestStageAwait(t *testing.T) {
	ctx := context.Background()
	type ran struct {
		stage string
		state map[string]string
	}
	// flowOf: stage s1 waits on gate (when not nil), then ends with res;
	// stage s2 reports its state on ch and waits on hold (when not nil).
	flowOf := func(name string, ch chan<- ran, gate, hold <-chan struct{}, res *worqr.StageResult) *worqr.Flow {
		return &worqr.Flow{Name: name, Stages: []worqr.Stage{
			{Name: "s1", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
				func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
					if gate != nil {
						<-gate
					}
					return res, nil
				})},
			{Name: "s2", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
				func(_ context.Context, r *worqr.Run) (*worqr.StageResult, error) {
					ch <- ran{"s2", maps.Clone(r.State)}
					if hold != nil {
						<-hold
					}
					return nil, nil
				})},
		}}
	}
	start := func(b *bundle, f *worqr.Flow) {
		cfg := fastTimings(b.ns)
		cfg.Flows = []*worqr.Flow{f}
		b.startWorker(cfg)
	}
	recv := func(t *testing.T, ch <-chan ran) ran { t.Helper(); return within(t, ch, "s2 to run") }

	t.Run("a signal wakes the waiting run, once per id", func(t *testing.T) {
		b := setup(t)
		ch, hold := make(chan ran, 2), make(chan struct{})
		defer close(hold)
		f := flowOf("pay", ch, nil, hold, &worqr.StageResult{Await: "paid", Sleep: time.Hour})
		start(b, f)
		id, err := b.client.StartRun(ctx, f, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var info *worqr.RunInfo
		wait(t, 10*time.Second, "the run to wait before s2", func() bool {
			info, err = b.in.Run(ctx, f.Name, id)
			return err == nil && info.Stage == "s2" && info.TaskState == "scheduled"
		})
		if info.Awaiting != "paid" || time.Until(info.WakeAt) < 59*time.Minute {
			t.Errorf("RunInfo.Awaiting %q, WakeAt %v; want paid, its bound an hour out", info.Awaiting, info.WakeAt)
		}
		if now, err := b.client.Signal(ctx, f, id, "paid", []byte("p1"), "hook-1"); err != nil || !now {
			t.Fatalf("Signal = %v, %v; want delivered now", now, err)
		}
		if r := recv(t, ch); r.state["paid"] != "p1" {
			t.Errorf("s2 ran with state %v, want paid=p1", r.state)
		}
		if _, err := b.client.Signal(ctx, f, id, "paid", []byte("p2"), "hook-1"); !errors.Is(err, worqr.ErrDuplicate) {
			t.Errorf("the same signal id again: %v, want ErrDuplicate", err)
		}
	})

	t.Run("a signal sent before the run waits is kept and taken then", func(t *testing.T) {
		b := setup(t)
		ch, gate := make(chan ran, 2), make(chan struct{})
		f := flowOf("early", ch, gate, nil, &worqr.StageResult{Await: "paid", Sleep: time.Hour})
		start(b, f)
		id, err := b.client.StartRun(ctx, f, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if now, err := b.client.Signal(ctx, f, id, "paid", []byte("early"), ""); err != nil || now {
			t.Fatalf("Signal = %v, %v; want kept", now, err)
		}
		close(gate)
		if r := recv(t, ch); r.state["paid"] != "early" {
			t.Errorf("s2 ran with state %v, want paid=early", r.state)
		}
	})

	t.Run("the wait's bound passing moves the run on without the signal", func(t *testing.T) {
		b := setup(t)
		ch := make(chan ran, 2)
		f := flowOf("late", ch, nil, nil, &worqr.StageResult{Await: "paid", Sleep: 200 * time.Millisecond})
		start(b, f)
		if _, err := b.client.StartRun(ctx, f, nil, nil); err != nil {
			t.Fatal(err)
		}
		if r := recv(t, ch); r.state["paid"] != "" || len(r.state) != 0 {
			t.Errorf("s2 ran with state %v, want no paid field", r.state)
		}
	})

	t.Run("a stage that ran after the bound passed does not take the signal in its retry", func(t *testing.T) {
		b := setup(t)
		f := &worqr.Flow{Name: "retried", Stages: []worqr.Stage{
			{Name: "s1", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
				func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
					return &worqr.StageResult{Await: "paid", Sleep: 50 * time.Millisecond}, nil
				})},
			{Name: "s2", Queue: worqr.QueueConfig{Concurrency: 1, Backoff: func(int, error) time.Duration { return time.Hour }},
				Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
					return nil, errors.New("down")
				})},
		}}
		start(b, f)
		id, err := b.client.StartRun(ctx, f, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		wait(t, 10*time.Second, "s2 to wait for its retry", func() bool {
			info, err := b.in.Run(ctx, f.Name, id)
			return err == nil && info.Stage == "s2" && info.TaskState == "scheduled" && info.LastError != ""
		})
		if now, err := b.client.Signal(ctx, f, id, "paid", []byte("late"), ""); err != nil || now {
			t.Errorf("a signal after the bound passed = %v, %v; want it kept, not delivered to the retry", now, err)
		}
	})

	t.Run("a signal by an indexed value reaches the running runs that hold it", func(t *testing.T) {
		b := setup(t)
		ch, hold := make(chan ran, 4), make(chan struct{})
		defer close(hold)
		f := flowOf("byorder", ch, nil, hold, &worqr.StageResult{Await: "paid", Sleep: time.Hour})
		f.IndexBy = []string{"order"}
		start(b, f)
		var ids []string
		for _, order := range []string{"o-1", "o-2"} {
			id, err := b.client.StartRun(ctx, f, map[string]string{"order": order}, nil)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		for _, id := range ids {
			wait(t, 10*time.Second, "run "+id+" to wait before s2", func() bool {
				info, err := b.in.Run(ctx, f.Name, id)
				return err == nil && info.Stage == "s2" && info.TaskState == "scheduled"
			})
		}
		if n, err := b.client.SignalRuns(ctx, f, "order", "o-2", "paid", []byte("yes"), "evt"); err != nil || n != 1 {
			t.Fatalf("SignalRuns = %d, %v; want the one run of o-2", n, err)
		}
		if r := recv(t, ch); r.state["order"] != "o-2" || r.state["paid"] != "yes" {
			t.Errorf("s2 ran with state %v, want o-2's run, paid", r.state)
		}
		if n, err := b.client.SignalRuns(ctx, f, "order", "o-2", "paid", []byte("yes"), "evt"); err != nil || n != 0 {
			t.Errorf("SignalRuns again with the same id = %d, %v; want none", n, err)
		}
		if _, err := b.client.SignalRuns(ctx, f, "user", "u", "paid", nil, ""); invalidField(t, "an undeclared prop", err) != "prop" {
			t.Errorf("SignalRuns of an undeclared prop: %v, want prop named", err)
		}
	})

	t.Run("bad signals are refused", func(t *testing.T) {
		b := setup(t)
		ch, gate := make(chan ran, 2), make(chan struct{})
		defer close(gate)
		f := flowOf("bad", ch, gate, nil, nil)
		start(b, f)
		id, err := b.client.StartRun(ctx, f, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.client.Signal(ctx, f, "nope", "paid", nil, ""); !errors.Is(err, worqr.ErrTaskNotFound) {
			t.Errorf("a signal of an unknown run: %v, want ErrTaskNotFound", err)
		}
		if f := invalidField(t, "an empty name", func() error { _, err := b.client.Signal(ctx, f, id, "", nil, ""); return err }()); f != "name" {
			t.Errorf("an empty name: the error names %q, want name", f)
		}
		for i := range 16 {
			if _, err := b.client.Signal(ctx, f, id, fmt.Sprintf("n%d", i), nil, ""); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := b.client.Signal(ctx, f, id, "n0", []byte("again"), ""); err != nil {
			t.Errorf("a kept name sent again: %v, want it kept (replaced)", err)
		}
		if _, err := b.client.Signal(ctx, f, id, "n16", nil, ""); err == nil || !strings.Contains(err.Error(), "16 signals") {
			t.Errorf("a 17th name kept: %v, want refused", err)
		}
	})
}

// A run started with RunOpts.Children is a batch: its children run first,
// its progress is readable meanwhile, and its first stage runs once, when
// the last child has ended, with how each ended.
func TestBatchRun(t *testing.T) {
	ctx := context.Background()
	type called struct {
		children map[string]int // status -> count
		state    map[string]string
	}
	flowOf := func(name string, continueOnFailure bool, gate <-chan struct{}, calls chan<- called) *worqr.Flow {
		member := worqr.HandlerFunc(func(_ context.Context, task *worqr.Task) error {
			if gate != nil {
				<-gate
			}
			if string(task.Payload) == "bad" {
				return worqr.SkipRetry(errors.New("cannot export"))
			}
			task.SetResult([]byte("ok " + string(task.Payload)))
			return nil
		})
		return &worqr.Flow{Name: name, Stages: []worqr.Stage{{Name: "callback", Queue: worqr.QueueConfig{Concurrency: 1},
			ContinueOnChildFailure: continueOnFailure,
			Children:               map[string]worqr.QueueConfig{"export": {Concurrency: 4, Handler: member}, "thumb": {Concurrency: 4, Handler: member}},
			Handler: worqr.StageHandlerFunc(func(_ context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				c := called{children: map[string]int{}, state: maps.Clone(r.State)}
				for _, ch := range r.Children {
					c.children[ch.Status]++
				}
				calls <- c
				return nil, nil
			})}}}
	}
	start := func(b *bundle, f *worqr.Flow) {
		cfg := fastTimings(b.ns)
		cfg.Flows = []*worqr.Flow{f}
		b.startWorker(cfg)
	}
	members := []worqr.ChildSpec{{Queue: "export", Payload: []byte("a")}, {Queue: "export", Payload: []byte("bad")},
		{Queue: "export", Payload: []byte("c")}, {Queue: "thumb", Payload: []byte("d")}, {Queue: "thumb", Payload: []byte("e")}}

	t.Run("the callback runs once, after the last member, with how each ended", func(t *testing.T) {
		b := setup(t)
		gate, calls := make(chan struct{}), make(chan called, 4)
		f := flowOf("exports", true, gate, calls)
		start(b, f)
		id, err := b.client.StartRun(ctx, f, map[string]string{"report": "r1"}, &worqr.RunOpts{Children: members, ID: "batch-1"})
		if err != nil {
			t.Fatal(err)
		}
		if again, err := b.client.StartRun(ctx, f, nil, &worqr.RunOpts{Children: members, ID: "batch-1"}); !errors.Is(err, worqr.ErrDuplicate) || again != id {
			t.Errorf("the same batch started again: %s, %v; want its id and ErrDuplicate", again, err)
		}
		info, err := b.in.Run(ctx, f.Name, id)
		if err != nil || info.TaskState != "children" || len(info.Children) != len(members) {
			t.Fatalf("the batch while its members run: %+v, %v; want %d children pending", info, err, len(members))
		}
		for _, c := range info.Children {
			if c.Status != "pending" {
				t.Errorf("member %s is %s before any ran, want pending", c.ID, c.Status)
			}
		}
		close(gate)
		c := within(t, calls, "the callback")
		if c.children["done"] != 4 || c.children["failed"] != 1 || c.state["report"] != "r1" {
			t.Errorf("the callback saw children %v, state %v; want 4 done, 1 failed, report r1", c.children, c.state)
		}
		wait(t, 10*time.Second, "the batch to end", func() bool {
			info, err := b.in.Run(ctx, f.Name, id)
			return err == nil && info.Status == worqr.RunDone
		})
		select {
		case c := <-calls:
			t.Errorf("the callback ran twice (the second with %v)", c.children)
		default:
		}
	})

	t.Run("without ContinueOnChildFailure a dead member fails the batch", func(t *testing.T) {
		b := setup(t)
		calls := make(chan called, 4)
		f := flowOf("strict", false, nil, calls)
		start(b, f)
		id, err := b.client.StartRun(ctx, f, nil, &worqr.RunOpts{Children: members})
		if err != nil {
			t.Fatal(err)
		}
		wait(t, 10*time.Second, "the batch to fail", func() bool {
			info, err := b.in.Run(ctx, f.Name, id)
			return err == nil && info.Status == worqr.RunFailed
		})
		select {
		case c := <-calls:
			t.Errorf("the callback ran for a failed batch (children %v)", c.children)
		default:
		}
	})

	t.Run("members are checked as a stage's children are", func(t *testing.T) {
		b := setup(t)
		f := flowOf("checked", true, nil, make(chan called, 1))
		_, err := b.client.StartRun(ctx, f, nil, &worqr.RunOpts{Children: []worqr.ChildSpec{{Queue: "nope"}}})
		if got := invalidField(t, "an undeclared child queue", err); got != "RunOpts.Children[0].Queue" {
			t.Errorf("an undeclared child queue: the error names %q", got)
		}
		big := make([]worqr.ChildSpec, 1001)
		for i := range big {
			big[i] = worqr.ChildSpec{Queue: "export"}
		}
		if got := invalidField(t, "1,001 children", func() error { _, err := b.client.StartRun(ctx, f, nil, &worqr.RunOpts{Children: big}); return err }()); got != "RunOpts.Children" {
			t.Errorf("1,001 children: the error names %q", got)
		}
	})
}
