package worqr_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/worqr/worqr-go/defaults"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// A stage whose run is too big to come with the take (it keeps the records
// of every child it fanned out: a take hands out at most 4,000 fields of
// runs) still sees its whole run: the worker reads it in steps before the
// handler runs.
func TestStageSeesABigRunWhole(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	const kids = 3000
	got := make(chan *worqr.Run, 1)
	flow := &worqr.Flow{Name: "big", Retention: time.Minute, Stages: []worqr.Stage{
		{Name: "s1", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				got <- r
				return nil, nil
			})},
	}}
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.StartRun(ctx, flow, map[string]string{"user": "u1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The records an earlier stage's fan-outs left.
	conn := pool.Get()
	defer conn.Close()
	args := []any{ns + ":{big}:t:" + id}
	for i := 0; i < kids; i++ {
		k := id + ".k" + strconv.Itoa(i)
		args = append(args, "k:"+k, "done", "kq:"+k, "kids", "kr:"+k, "r"+strconv.Itoa(i))
	}
	if n, err := redis.Int(conn.Do("HSET", args...)); err != nil || n != 3*kids {
		t.Fatalf("HSET: %d, %v", n, err)
	}
	cfg := fastTimings(ns)
	cfg.Flows = []*worqr.Flow{flow}
	startWorker(t, ctx, pool, &cfg)
	select {
	case r := <-got:
		if len(r.Children) != kids || r.State["user"] != "u1" {
			t.Fatalf("the stage saw %d children and state %v, want %d and user u1", len(r.Children), r.State, kids)
		}
		if r.Children[0].Status != "done" || r.Children[0].Queue != "kids" || len(r.Children[0].Result) == 0 {
			t.Fatalf("child %+v", r.Children[0])
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the stage never ran")
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if r, err := c.WaitRun(wctx, flow, id); err != nil || r.Status != worqr.RunDone {
		t.Fatalf("run: %v, %v; want done", r, err)
	}
}

// A stage whose result has more fields than Lua's unpack takes (about
// 8,000 values) ends as any other: the end script failed after it claimed
// the taking, and the run was left active, held by nobody, never recovered
// (found by an audit).
func TestStageWithManyFields(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	cfg := fastTimings(ns)
	flow := &worqr.Flow{Name: "wide", Retention: time.Minute, Stages: []worqr.Stage{
		{Name: "s1", Queue: worqr.QueueConfig{Concurrency: 1, MaxAttempts: 2}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				f := map[string]string{}
				for i := 0; i < 5000; i++ {
					f[fmt.Sprintf("f%d", i)] = "v"
				}
				return &worqr.StageResult{Fields: f}, nil
			})},
		{Name: "s2", Queue: worqr.QueueConfig{Concurrency: 1}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) { return nil, nil })},
	}}
	cfg.Flows = []*worqr.Flow{flow}
	startWorker(t, ctx, pool, &cfg)
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, pool, &worqr.Config{Namespace: ns})
	id, err := c.StartRun(ctx, flow, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	info, err := c.WaitRun(wctx, flow, id)
	if err == nil {
		t.Logf("run ended: %s %s", info.Status, info.LastError)
		return
	}
	r, _ := in.Run(ctx, flow.Name, id)
	conn := pool.Get()
	defer conn.Close()
	keys, _ := redis.Strings(conn.Do("KEYS", ns+":{wide}:wq:*"))
	held := 0
	for _, k := range keys {
		n, _ := redis.Int(conn.Do("HLEN", k))
		held += n
	}
	waiting, _ := redis.Int(conn.Do("LLEN", ns+":{wide}:q:s1"))
	t.Fatalf("run never ends (WaitRun: %v): status %s, stage %s, task state %s; held by no worker (%d takings in wq hashes), %d waiting",
		err, r.Status, r.Stage, r.TaskState, held, waiting)
}

// Nor does such a stage take down the other takings the worker's group
// commit ends in the same call: well-behaved runs were stranded with it.
func TestWideStageDoesNotStrandItsNeighbours(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	cfg := fastTimings(ns)
	gate := make(chan struct{})
	const n = 64
	started := make(chan struct{}, n)
	flow := &worqr.Flow{Name: "wide", Retention: time.Minute, Stages: []worqr.Stage{
		{Name: "s1", Queue: worqr.QueueConfig{Concurrency: n}, Handler: worqr.StageHandlerFunc(
			func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				f := map[string]string{"ok": "1"}
				if r.State["wide"] != "" {
					for i := 0; i < 5000; i++ {
						f[fmt.Sprintf("f%d", i)] = "v"
					}
				}
				started <- struct{}{}
				<-gate
				return &worqr.StageResult{Fields: f}, nil
			})},
	}}
	cfg.Flows = []*worqr.Flow{flow}
	startWorker(t, ctx, pool, &cfg)
	c := newClient(t, pool, &worqr.Config{Namespace: ns})
	in := newInspector(t, pool, &worqr.Config{Namespace: ns})
	var ids []string
	for i := 0; i < n; i++ {
		st := map[string]string{}
		if i%8 == 0 {
			st["wide"] = "1"
		}
		id, err := c.StartRun(ctx, flow, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for i := 0; i < n; i++ {
		<-started
	}
	close(gate)
	// Each well-behaved run ends (WaitRun returns once it has); one still
	// running 5 s on is stuck.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stuck := 0
	for i, id := range ids {
		if i%8 == 0 {
			continue
		}
		if _, err := c.WaitRun(wctx, flow, id); err != nil {
			r, _ := in.Run(ctx, flow.Name, id)
			if r.Status == worqr.RunRunning {
				stuck++
				t.Logf("run %d (%s): status %s, task %s", i, id, r.Status, r.TaskState)
			}
		}
	}
	if stuck > 0 {
		t.Fatalf("%d well-behaved runs stuck forever (ended in the same end call as a wide one)", stuck)
	}
}

// A stage's end writes its fields and creates its children in one atomic
// step: a result past the bounds is refused (the stage goes to the dead
// set with the reason, nothing written), as one naming an undeclared child
// queue is. A fan-out of 1,000 children of 1 MiB held Redis for 4 s.
func TestStageResultIsBounded(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	cfg := fastTimings(ns)
	cfg.DisableEvents = true
	results := map[string]*worqr.StageResult{
		"fields": {Fields: manyFields(defaults.MaxStateFields+1, 1)},
		"bytes":  {Fields: manyFields(5, 1<<20)},
		"children": {Fields: map[string]string{"a": strings.Repeat("x", 1<<20)}, Children: func() []worqr.ChildSpec {
			cs := make([]worqr.ChildSpec, 4)
			for i := range cs {
				cs[i] = worqr.ChildSpec{Queue: "kid", Payload: make([]byte, 1<<20)}
			}
			return cs
		}()},
		"fine": {Fields: manyFields(defaults.MaxStateFields, 1), Children: []worqr.ChildSpec{{Queue: "kid", Payload: make([]byte, 2<<20-100)}}},
	}
	flow := &worqr.Flow{Name: "sb", Retention: time.Minute, Stages: []worqr.Stage{
		{Name: "s1", Queue: worqr.QueueConfig{Concurrency: 4, MaxAttempts: 3},
			Handler: worqr.StageHandlerFunc(func(_ context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				return results[r.State["case"]], nil
			}),
			Children: map[string]worqr.QueueConfig{"kid": {Concurrency: 1, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error { return nil })}}},
	}}
	cfg.Flows = []*worqr.Flow{flow}
	cfg.MaxPayloadBytes = 2 << 20
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for name := range results {
		id, err := c.StartRun(ctx, flow, map[string]string{"case": name}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = id
	}
	startWorker(t, ctx, pool, &cfg)
	want := map[string]string{"fields": "StageResult.Fields of stage s1", "bytes": "StageResult.Fields of stage s1", "children": "StageResult.Children"}
	for name, id := range ids {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		info, err := c.WaitRun(wctx, flow, id)
		cancel()
		if err != nil {
			t.Fatalf("%s: run never ended: %v", name, err)
		}
		if name == "fine" {
			if info.Status != worqr.RunDone || len(info.Children) != 1 {
				t.Errorf("%s: run %s with %d children (%s), want done with its child", name, info.Status, len(info.Children), info.LastError)
			}
			continue
		}
		if info.Status != worqr.RunFailed || !strings.Contains(info.LastError, want[name]) || len(info.Children) != 0 {
			t.Errorf("%s: run %s with %d children, last error %.200q; want failed, no child, the error naming %s",
				name, info.Status, len(info.Children), info.LastError, want[name])
		}
		if len(info.State) > 2 {
			t.Errorf("%s: the refused result wrote %d fields", name, len(info.State))
		}
	}
}

// A handler's context carries the task's time limit: the queue's (30
// minutes unless set), the task's own, or none when either asks for none.
func TestHandlerDeadline(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	type seen struct {
		has  bool
		left time.Duration
	}
	got := make(chan seen, 1)
	record := worqr.HandlerFunc(func(ctx context.Context, _ *worqr.Task) error {
		d, ok := ctx.Deadline()
		got <- seen{ok, time.Until(d)}
		return nil
	})
	b.startWorker(worqr.WorkerConfig{Queues: map[string]worqr.QueueConfig{
		"default": {Concurrency: 1, Handler: record},
		"limited": {Concurrency: 1, Handler: record, Timeout: time.Hour},
		"none":    {Concurrency: 1, Handler: record, Timeout: -1},
	}})
	for _, c := range []struct {
		name, queue string
		opts        *worqr.EnqueueOpts
		want        time.Duration // 0: no deadline
	}{
		{"the queue's default is 30 minutes", "default", nil, 30 * time.Minute},
		{"the queue's own", "limited", nil, time.Hour},
		{"a negative queue Timeout sets none", "none", nil, 0},
		{"the task's own wins over the queue's", "limited", &worqr.EnqueueOpts{Timeout: 5 * time.Minute}, 5 * time.Minute},
		{"a negative task Timeout sets none, whatever the queue's", "limited", &worqr.EnqueueOpts{Timeout: -1}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := b.client.Enqueue(ctx, c.queue, []byte("x"), c.opts); err != nil {
				t.Fatal(err)
			}
			var s seen
			select {
			case s = <-got:
			case <-time.After(10 * time.Second):
				t.Fatal("the task never ran")
			}
			switch {
			case c.want == 0 && s.has:
				t.Fatalf("the handler's context has a deadline in %s, want none", s.left)
			case c.want > 0 && (!s.has || s.left > c.want || s.left < c.want-time.Minute):
				t.Fatalf("the handler's context has a deadline %v in %s, want in about %s", s.has, s.left, c.want)
			}
		})
	}
}
