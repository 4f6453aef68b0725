package worqr_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// joinCall is what a join (a stage with Branches) saw when it ran.
type joinCall struct {
	state    map[string]string
	children map[string]worqr.ChildResult // by branch (child queue), the latest
}

func newJoinCall(r *worqr.Run) joinCall {
	c := joinCall{state: maps.Clone(r.State), children: map[string]worqr.ChildResult{}}
	for _, ch := range r.Children {
		c.children[ch.Queue] = ch
	}
	return c
}

// noMore fails t if ch holds a value: what sent it ran once too often.
func noMore[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Errorf("%s ran again: %+v", what, v)
	default:
	}
}

func runEnded(t *testing.T, b *bundle, flow, id string, want worqr.RunStatus) *worqr.RunInfo {
	t.Helper()
	var info *worqr.RunInfo
	wait(t, 10*time.Second, "run "+id+" to be "+string(want), func() bool {
		var err error
		info, err = b.in.Run(context.Background(), flow, id)
		return err == nil && info.Status == want
	})
	return info
}

// A stage with Branches is a join: a run that comes to it fans out one
// child per branch at once, the branches run in parallel with the run's
// state, their fields are merged into it, and the stage's handler runs
// once, when they have ended (or, JoinAny, when the first is done).
func TestStageJoin(t *testing.T) {
	ctx := context.Background()
	stage := func(name string, h worqr.StageHandlerFunc) worqr.Stage {
		return worqr.Stage{Name: name, Queue: worqr.QueueConfig{Concurrency: 2}, Handler: h}
	}
	branch := func(h worqr.StageHandlerFunc) worqr.Branch {
		return worqr.Branch{Queue: worqr.QueueConfig{Concurrency: 2, MaxAttempts: 1}, Handler: h}
	}
	start := func(b *bundle, f *worqr.Flow) {
		cfg := fastTimings(b.ns)
		cfg.Flows = []*worqr.Flow{f}
		b.startWorker(cfg)
	}

	t.Run("A then B and C in parallel, then the join D once with both results, then E", func(t *testing.T) {
		b := setup(t)
		started := make(chan string, 4)
		gate := make(chan struct{})
		joins, last := make(chan joinCall, 4), make(chan map[string]string, 4)
		par := func(name string) worqr.StageHandlerFunc {
			return func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				started <- name + " saw a=" + r.State["a"]
				<-gate // both run at once before either ends
				return &worqr.StageResult{Fields: map[string]string{name: "from " + name}}, nil
			}
		}
		f := &worqr.Flow{Name: "dag", Stages: []worqr.Stage{
			stage("A", func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
				return &worqr.StageResult{Fields: map[string]string{"a": "1"}}, nil
			}),
			{Name: "D", Queue: worqr.QueueConfig{Concurrency: 2},
				Branches: map[string]worqr.Branch{"B": branch(par("B")), "C": branch(par("C"))},
				Handler: worqr.StageHandlerFunc(func(_ context.Context, r *worqr.Run) (*worqr.StageResult, error) {
					joins <- newJoinCall(r)
					return &worqr.StageResult{Fields: map[string]string{"d": r.State["B"] + "+" + r.State["C"]}}, nil
				})},
			stage("E", func(_ context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				last <- maps.Clone(r.State)
				return nil, nil
			}),
		}}
		start(b, f)
		id, err := b.client.StartRun(ctx, f, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{within(t, started, "a branch to start"): true, within(t, started, "the other branch to start"): true}
		if !seen["B saw a=1"] || !seen["C saw a=1"] {
			t.Fatalf("the branches started with %v; want B and C, both seeing A's field", seen)
		}
		info, err := b.in.Run(ctx, f.Name, id)
		if err != nil || info.Stage != "D" || info.TaskState != "children" || len(info.Children) != 2 {
			t.Fatalf("the run while its branches run: %+v, %v; want stage D waiting for 2 children", info, err)
		}
		for _, c := range info.Children {
			if c.Status != "pending" || (c.Queue != "B" && c.Queue != "C") {
				t.Errorf("branch %s (%s) is %s while it runs, want pending", c.ID, c.Queue, c.Status)
			}
		}
		close(gate)
		j := within(t, joins, "the join")
		if j.state["B"] != "from B" || j.state["C"] != "from C" || j.state["a"] != "1" {
			t.Errorf("the join saw state %v; want A's field and both branches'", j.state)
		}
		if j.children["B"].Status != "done" || j.children["C"].Status != "done" {
			t.Errorf("the join saw children %+v; want B and C done", j.children)
		}
		if s := within(t, last, "E"); s["d"] != "from B+from C" {
			t.Errorf("E saw state %v; want the join's field", s)
		}
		runEnded(t, b, f.Name, id, worqr.RunDone)
		noMore(t, joins, "the join")
		noMore(t, started, "a branch")
	})

	t.Run("JoinAny: the first done branch runs the join once and cancels the slower", func(t *testing.T) {
		b := setup(t)
		joins := make(chan joinCall, 4)
		slowStarted, slowStopped := make(chan struct{}), make(chan error, 1)
		f := &worqr.Flow{Name: "race", Stages: []worqr.Stage{{Name: "pick", Queue: worqr.QueueConfig{Concurrency: 2},
			JoinAny: true,
			Branches: map[string]worqr.Branch{
				"fast": branch(func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
					<-slowStarted
					return &worqr.StageResult{Fields: map[string]string{"winner": "fast"}}, nil
				}),
				"slow": branch(func(ctx context.Context, _ *worqr.Run) (*worqr.StageResult, error) {
					close(slowStarted)
					<-ctx.Done()
					slowStopped <- context.Cause(ctx)
					return &worqr.StageResult{Fields: map[string]string{"winner": "slow"}}, nil
				}),
			},
			Handler: worqr.StageHandlerFunc(func(_ context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				joins <- newJoinCall(r)
				return nil, nil
			})}}}
		start(b, f)
		id, err := b.client.StartRun(ctx, f, nil, nil) // a join as the first stage
		if err != nil {
			t.Fatal(err)
		}
		j := within(t, joins, "the join")
		if j.state["winner"] != "fast" || j.children["fast"].Status != "done" || j.children["slow"].Status != "cancelled" {
			t.Errorf("the join saw state %v, children %+v; want fast's field, fast done and slow cancelled", j.state, j.children)
		}
		if cause := within(t, slowStopped, "the slow branch's context to end"); !errors.Is(cause, worqr.ErrTaskCancelled) {
			t.Errorf("the slow branch's context ended with %v, want ErrTaskCancelled", cause)
		}
		info := runEnded(t, b, f.Name, id, worqr.RunDone)
		if info.State["winner"] != "fast" {
			t.Errorf("the ended run's state %v: the cancelled branch's end wrote into it", info.State)
		}
		noMore(t, joins, "the join")
	})

	failing := func(name string, cont bool, joins chan<- joinCall, slowStarted, slowStopped chan<- struct{}, bad worqr.StageHandlerFunc) *worqr.Flow {
		return &worqr.Flow{Name: name, Stages: []worqr.Stage{{Name: "join", Queue: worqr.QueueConfig{Concurrency: 2},
			ContinueOnChildFailure: cont,
			Branches: map[string]worqr.Branch{
				"bad": branch(bad),
				"slow": branch(func(ctx context.Context, _ *worqr.Run) (*worqr.StageResult, error) {
					if cont {
						return &worqr.StageResult{Fields: map[string]string{"slow": "ok"}}, nil
					}
					close(slowStarted)
					<-ctx.Done() // until the failed run cancels it
					close(slowStopped)
					return nil, ctx.Err()
				}),
			},
			Handler: worqr.StageHandlerFunc(func(_ context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				joins <- newJoinCall(r)
				return nil, nil
			})}}}
	}
	broken := func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
		return nil, errors.New("broken")
	}

	t.Run("a branch that fails for good fails the run and cancels the others", func(t *testing.T) {
		b := setup(t)
		joins, slowStarted, slowStopped := make(chan joinCall, 1), make(chan struct{}), make(chan struct{})
		f := failing("strict", false, joins, slowStarted, slowStopped, func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
			<-slowStarted // fails while the other runs
			return broken(ctx, r)
		})
		start(b, f)
		id, err := b.client.StartRun(ctx, f, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		within(t, slowStopped, "the other branch to be cancelled")
		runEnded(t, b, f.Name, id, worqr.RunFailed)
		noMore(t, joins, "the join of a failed run")
	})

	t.Run("with ContinueOnChildFailure the join runs with the failure recorded", func(t *testing.T) {
		b := setup(t)
		joins := make(chan joinCall, 2)
		f := failing("lenient", true, joins, nil, nil, broken)
		start(b, f)
		id, err := b.client.StartRun(ctx, f, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		j := within(t, joins, "the join")
		if j.children["bad"].Status != "failed" || !strings.Contains(j.children["bad"].Err, "broken") ||
			j.children["slow"].Status != "done" || j.state["slow"] != "ok" {
			t.Errorf("the join saw children %+v, state %v; want bad failed (broken), slow done with its field", j.children, j.state)
		}
		runEnded(t, b, f.Name, id, worqr.RunDone)
		noMore(t, joins, "the join")
	})

	t.Run("a branch's result with Sleep fails it for good, the field named", func(t *testing.T) {
		b := setup(t)
		joins := make(chan joinCall, 2)
		f := failing("sleepy", true, joins, nil, nil, func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
			return &worqr.StageResult{Fields: map[string]string{"bad": "written"}, Sleep: time.Second}, nil
		})
		start(b, f)
		if _, err := b.client.StartRun(ctx, f, nil, nil); err != nil {
			t.Fatal(err)
		}
		j := within(t, joins, "the join")
		if c := j.children["bad"]; c.Status != "failed" || !strings.Contains(c.Err, "StageResult.Sleep") {
			t.Errorf("the branch with Sleep ended %s (%s); want failed naming StageResult.Sleep", c.Status, c.Err)
		}
		if _, ok := j.state["bad"]; ok {
			t.Errorf("the refused result's fields were merged: %v", j.state)
		}
	})

	t.Run("Again on a join runs its branches again", func(t *testing.T) {
		b := setup(t)
		joins := make(chan joinCall, 4)
		var runs atomic.Int32
		f := &worqr.Flow{Name: "loop", Stages: []worqr.Stage{{Name: "join", Queue: worqr.QueueConfig{Concurrency: 2},
			Branches: map[string]worqr.Branch{"count": branch(func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
				return &worqr.StageResult{Fields: map[string]string{"n": string(rune('0' + runs.Add(1)))}}, nil
			})},
			Handler: worqr.StageHandlerFunc(func(_ context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				joins <- newJoinCall(r)
				return &worqr.StageResult{Again: r.State["n"] == "1"}, nil
			})}}}
		start(b, f)
		id, err := b.client.StartRun(ctx, f, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if j := within(t, joins, "the first join"); j.state["n"] != "1" {
			t.Errorf("the first join saw n=%q, want 1", j.state["n"])
		}
		if j := within(t, joins, "the second join"); j.state["n"] != "2" {
			t.Errorf("the second join saw n=%q, want 2: the branch ran again", j.state["n"])
		}
		runEnded(t, b, f.Name, id, worqr.RunDone)
		noMore(t, joins, "the join")
	})

	t.Run("branches are checked with the flow, by field", func(t *testing.T) {
		b := setup(t)
		h := worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return nil, nil })
		ok := worqr.Branch{Handler: h}
		for _, c := range []struct {
			what  string
			stage worqr.Stage
			opts  *worqr.RunOpts
			field string
		}{
			{"an empty branch name", worqr.Stage{Name: "s", Handler: h, Branches: map[string]worqr.Branch{"": ok}}, nil,
				`Flow["v"].Stages[0].Branches[""]`},
			{"a branch named as a child queue", worqr.Stage{Name: "s", Handler: h, Branches: map[string]worqr.Branch{"k": ok},
				Children: map[string]worqr.QueueConfig{"k": {Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil })}}}, nil,
				`Flow["v"].Stages[0].Branches["k"]`},
			{"a branch named as its stage", worqr.Stage{Name: "s", Handler: h, Branches: map[string]worqr.Branch{"s": ok}}, nil,
				`Flow["v"].Stages[0].Branches["s"]`},
			{"a branch without a handler", worqr.Stage{Name: "s", Handler: h, Branches: map[string]worqr.Branch{"b": {}}}, nil,
				`Flow["v"].Stages[0].Branches["b"].Handler`},
			{"JoinAny without branches", worqr.Stage{Name: "s", Handler: h, JoinAny: true}, nil,
				`Flow["v"].Stages[0].JoinAny`},
			{"a batch into a join", worqr.Stage{Name: "s", Handler: h, Branches: map[string]worqr.Branch{"b": ok}},
				&worqr.RunOpts{Children: []worqr.ChildSpec{{Queue: "b"}}}, "RunOpts.Children"},
		} {
			f := &worqr.Flow{Name: "v", Stages: []worqr.Stage{c.stage}}
			_, err := b.client.StartRun(ctx, f, nil, c.opts)
			if got := invalidField(t, c.what, err); got != c.field {
				t.Errorf("%s: the error names %q, want %q (%v)", c.what, got, c.field, err)
			}
		}
	})
}

// A branch whose worker vanished mid-taking (its keepalive expired: a
// frozen process) is requeued by the reaper and run by a live worker; the
// zombie's late end is refused, and the join runs once, with the live
// branch's result.
func TestStageJoinBranchOfAVanishedWorker(t *testing.T) {
	ctx := context.Background()
	b := setup(t)
	var mu sync.Mutex
	var joins []string // the B each join saw
	zombieTook, liveTook := make(chan struct{}, 8), make(chan struct{}, 8)
	releaseZombie, releaseLive := make(chan struct{}), make(chan struct{})
	flowOf := func(took chan<- struct{}, release <-chan struct{}, who string) *worqr.Flow {
		quick := worqr.Branch{Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
				return &worqr.StageResult{Fields: map[string]string{"C": who}}, nil
			})}
		held := worqr.Branch{Queue: worqr.QueueConfig{Concurrency: 4}, Handler: worqr.StageHandlerFunc(
			func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
				took <- struct{}{}
				<-release
				return &worqr.StageResult{Fields: map[string]string{"B": who}}, nil
			})}
		return &worqr.Flow{Name: "zj", Stages: []worqr.Stage{{Name: "D", Queue: worqr.QueueConfig{Concurrency: 1},
			Branches: map[string]worqr.Branch{"B": held, "C": quick},
			Handler: worqr.StageHandlerFunc(func(_ context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				mu.Lock()
				joins = append(joins, r.State["B"])
				mu.Unlock()
				return nil, nil
			})}}}
	}
	var lost atomic.Int32
	zcfg := fastTimings(b.ns)
	zcfg.DisableReaper = true
	zcfg.Flows = []*worqr.Flow{flowOf(zombieTook, releaseZombie, "zombie")}
	zcfg.OnEvent = func(e worqr.Event) {
		if e.Kind == worqr.EventLost {
			lost.Add(1)
		}
	}
	clock := newBeatClock()
	zombie := startWorker(t, withClock(ctx, clock), b.pool, &zcfg)
	f := zcfg.Flows[0]
	id, err := b.client.StartRun(ctx, f, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	within(t, zombieTook, "the zombie-to-be to take branch B")
	wait(t, 10*time.Second, "branch C to end", func() bool {
		info, err := b.in.Run(ctx, f.Name, id)
		return err == nil && info.State["C"] == "zombie"
	})
	clock.freeze() // no more beats: its keepalive expires, a reaper requeues B

	cfg := fastTimings(b.ns)
	cfg.Flows = []*worqr.Flow{flowOf(liveTook, releaseLive, "live")}
	b.startWorker(cfg)
	within(t, liveTook, "the live worker to take the requeued branch B")
	close(releaseZombie) // the zombie's branch ends: refused
	wait(t, 10*time.Second, "the zombie's end to be refused", func() bool { return lost.Load() >= 1 })
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = zombie.Stop(sctx)
	if info, err := b.in.Run(ctx, f.Name, id); err != nil || info.TaskState != "children" || info.State["B"] != "" {
		t.Fatalf("the run after the zombie's end: %+v, %v; want it still waiting for B, without the zombie's field", info, err)
	}
	close(releaseLive)
	runEnded(t, b, f.Name, id, worqr.RunDone)
	mu.Lock()
	defer mu.Unlock()
	if len(joins) != 1 || joins[0] != "live" {
		t.Errorf("the join ran %d times, seeing B = %q; want once, seeing the live worker's", len(joins), joins)
	}
}

// A branch of a join on any that ends done after another was done first
// is cancelled by its end (its fields are not merged); when that end's
// reply is lost and its repeat finds the taking gone, the worker's event
// says cancelled too, as its run counted it, not the done its handler
// asked for: the branch's own hash is gone with the end.
func TestJoinAnyLostEndReplyOfTheCancelledBranch(t *testing.T) {
	ctx := context.Background()
	var armed atomic.Int32
	// slowsEnd: a script call that ends the slow branch's taking done.
	slowsEnd := func(args []any) bool {
		done, slow := false, false
		for _, a := range args {
			s, _ := a.(string)
			done = done || s == "done"
			slow = slow || strings.HasSuffix(s, ":slow")
		}
		return done && slow
	}
	pool := &redis.Pool{MaxIdle: 8, DialContext: func(ctx context.Context) (redis.Conn, error) {
		c, err := redis.DialURLContext(ctx, srv.URL)
		if err != nil {
			return nil, err
		}
		return &redistest.LossyConn{Conn: c, Armed: &armed, Match: slowsEnd}, nil
	}}
	defer pool.Close()
	cfg := worqr.Config{Namespace: redistest.Namespace()}
	slowStarted, joinGate := make(chan struct{}), make(chan struct{})
	defer close(joinGate)
	events := make(chan worqr.Event, 10)
	branch := func(h worqr.StageHandlerFunc) worqr.Branch {
		return worqr.Branch{Queue: worqr.QueueConfig{Concurrency: 1, MaxAttempts: 1}, Handler: h}
	}
	f := &worqr.Flow{Name: "race", Stages: []worqr.Stage{{Name: "pick", Queue: worqr.QueueConfig{Concurrency: 1},
		JoinAny: true,
		Branches: map[string]worqr.Branch{
			"fast": branch(func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
				<-slowStarted
				return &worqr.StageResult{Fields: map[string]string{"winner": "fast"}}, nil
			}),
			"slow": branch(func(ctx context.Context, _ *worqr.Run) (*worqr.StageResult, error) {
				close(slowStarted)
				<-ctx.Done()   // fast was done first
				armed.Store(1) // this end's reply is lost
				return &worqr.StageResult{Fields: map[string]string{"winner": "slow"}}, nil
			}),
		},
		Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) {
			<-joinGate // its end keeps its reply
			return nil, nil
		})}}}
	startWorker(t, ctx, pool, &worqr.WorkerConfig{Config: cfg, Flows: []*worqr.Flow{f}, OnEvent: func(e worqr.Event) {
		if e.Queue == "race/slow" && (e.Kind == worqr.EventDone || e.Kind == worqr.EventCancelled || e.Kind == worqr.EventLost) {
			events <- e
		}
	}})
	c, err := worqr.NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.StartRun(ctx, f, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-events:
		if e.Kind != worqr.EventCancelled || !strings.HasPrefix(e.TaskID, id+".") {
			t.Errorf("event %s of %s, want cancelled of run %s's slow branch", e.Kind, e.TaskID, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no end event of the slow branch")
	}
	if armed.Load() >= 0 {
		t.Fatal("no reply was lost: the test did not test anything")
	}
	info, err := newInspector(t, pool, &cfg).Run(ctx, f.Name, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range info.Children {
		if ch.Queue == "slow" && ch.Status != "cancelled" {
			t.Errorf("the run holds the slow branch %s, want cancelled", ch.Status)
		}
	}
	if info.State["winner"] != "fast" {
		t.Errorf("the run's state %v: the cancelled branch's end wrote into it", info.State)
	}
}
