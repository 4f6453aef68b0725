package worqr_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// A run's metadata reaches every stage (Run.Meta) and RunInfo; a child's
// (ChildSpec.Meta) reaches its handler (Task.Meta); StageMiddleware wraps
// every stage handler, the first outermost.
func TestFlowMetaAndStageMiddleware(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, pool, &worqr.Config{Namespace: ns})
	var (
		mu     sync.Mutex
		seen   []string // what the handlers and middleware saw, in order
		childM []map[string]string
	)
	note := func(s string) { mu.Lock(); seen = append(seen, s); mu.Unlock() }
	stage := func(name string, children ...worqr.ChildSpec) worqr.Stage {
		return worqr.Stage{Name: name, Queue: worqr.QueueConfig{Concurrency: 1},
			Handler: worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				note(name + " meta=" + r.Meta["k"])
				return &worqr.StageResult{Children: children}, nil
			}),
			Children: map[string]worqr.QueueConfig{name + "-kids": {Concurrency: 2,
				Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
					mu.Lock()
					childM = append(childM, t.Meta)
					mu.Unlock()
					return nil
				})}},
		}
	}
	flow := &worqr.Flow{Name: "metaflow", Stages: []worqr.Stage{
		stage("one", worqr.ChildSpec{Queue: "one-kids", Payload: []byte("a"), Meta: map[string]string{"c": "1"}},
			worqr.ChildSpec{Queue: "one-kids", Payload: []byte("b")}),
		stage("two"),
	}}
	mw := func(tag string) worqr.StageMiddleware {
		return func(next worqr.StageHandler) worqr.StageHandler {
			return worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
				note(tag + " " + r.Stage)
				return next.HandleStage(ctx, r)
			})
		}
	}
	cfg := fastTimings(ns)
	cfg.Flows = []*worqr.Flow{flow}
	cfg.StageMiddleware = []worqr.StageMiddleware{mw("outer"), mw("inner")}
	w, err := worqr.NewWorker(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})

	if _, err := c.StartRunWith(ctx, flow, nil, &worqr.RunOpts{Meta: map[string]string{"": "x"}}); err == nil || !strings.Contains(err.Error(), "RunOpts.Meta") {
		t.Errorf("an empty meta name: %v, want an error naming RunOpts.Meta", err)
	}
	big := &worqr.RunOpts{Meta: map[string]string{"k": strings.Repeat("x", worqr.MaxMetaBytes)}}
	if _, err := c.StartRunWith(ctx, flow, nil, big); err == nil || !strings.Contains(err.Error(), "MaxMetaBytes") {
		t.Errorf("meta over MaxMetaBytes: %v, want an error", err)
	}
	id, err := c.StartRunWith(ctx, flow, nil, &worqr.RunOpts{Meta: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	var info *worqr.RunInfo
	wait(t, 10*time.Second, "the run to end", func() bool {
		if info, err = in.Run(ctx, flow.Name, id); err != nil {
			t.Fatal(err)
		}
		return info.Status != worqr.RunRunning
	})
	if info.Status != worqr.RunDone || info.Meta["k"] != "v" {
		t.Fatalf("run: status %s meta %v, want done with meta k=v", info.Status, info.Meta)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"outer one", "inner one", "one meta=v", "outer two", "inner two", "two meta=v"}
	if !reflect.DeepEqual(seen, want) {
		t.Errorf("stage calls:\n got %q\nwant %q", seen, want)
	}
	// Exactly one child with {c:1} and one with nil: a child without
	// metadata does not inherit the run's.
	none, one := 0, 0
	for _, m := range childM {
		switch {
		case m == nil:
			none++
		case reflect.DeepEqual(m, map[string]string{"c": "1"}):
			one++
		}
	}
	if len(childM) != 2 || none != 1 || one != 1 {
		t.Errorf("children's Task.Meta: %v, want {c:1} and nil", childM)
	}
}

// A child's metadata is checked at the fan-out: an empty name fails the
// stage (dead, with the field named), nothing is fanned out.
func TestChildMetaChecked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, pool, &worqr.Config{Namespace: ns})
	flow := &worqr.Flow{Name: "badmeta", Stages: []worqr.Stage{{Name: "s", Queue: worqr.QueueConfig{Concurrency: 1},
		Handler: worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
			return &worqr.StageResult{Children: []worqr.ChildSpec{{Queue: "k", Meta: map[string]string{"": "x"}}}}, nil
		}),
		Children: map[string]worqr.QueueConfig{"k": {Concurrency: 1, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
			return errors.New("must not run")
		})}}}}}
	cfg := fastTimings(ns)
	cfg.Flows = []*worqr.Flow{flow}
	w, err := worqr.NewWorker(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})
	id, err := c.StartRun(ctx, flow, nil)
	if err != nil {
		t.Fatal(err)
	}
	var info *worqr.RunInfo
	wait(t, 10*time.Second, "run "+id+" to fail", func() bool {
		if info, err = in.Run(ctx, flow.Name, id); err != nil {
			t.Fatal(err)
		}
		return info.Status == worqr.RunFailed
	})
	if !strings.Contains(info.LastError, "StageResult.Children[0].Meta") || len(info.Children) != 0 {
		t.Errorf("failed run: error %q, children %v", info.LastError, info.Children)
	}
}

// A plain task's metadata (EnqueueOpts.Meta) is stored beside its payload
// and reaches its handler as Task.Meta, the payload as given: through
// Enqueue, EnqueueBatch (every task), a keyed enqueue (every task of a
// KeyBatch too) and a delayed one; Inspector.Task shows it. A task without
// has none. Bad metadata is refused with the field named.
func TestEnqueueMetaReachesHandler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := srv.Pool()
	t.Cleanup(func() { pool.Close() })
	ns := redistest.Namespace()
	c, err := worqr.NewClient(pool, &worqr.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, pool, &worqr.Config{Namespace: ns})
	for _, bad := range []map[string]string{{"": "x"}, {"k": strings.Repeat("x", worqr.MaxMetaBytes)}} {
		if _, err := c.Enqueue(ctx, "mq", []byte("p"), &worqr.EnqueueOpts{Meta: bad}); err == nil || !strings.Contains(err.Error(), "EnqueueOpts.Meta") {
			t.Errorf("Enqueue with bad meta: %v, want an error naming EnqueueOpts.Meta", err)
		}
		if _, err := c.EnqueueBatch(ctx, "mq", [][]byte{[]byte("p")}, &worqr.EnqueueOpts{Meta: bad}); err == nil || !strings.Contains(err.Error(), "EnqueueOpts.Meta") {
			t.Errorf("EnqueueBatch with bad meta: %v, want an error naming EnqueueOpts.Meta", err)
		}
	}

	type seen struct {
		payload string
		meta    map[string]string
	}
	var (
		mu  sync.Mutex
		got = map[string]seen{}
	)
	handle := func(_ context.Context, t *worqr.Task) error {
		mu.Lock()
		defer mu.Unlock()
		got[string(t.Payload)] = seen{string(t.Payload), t.Meta}
		return nil
	}
	batch := func(_ context.Context, b *worqr.Batch) error {
		for _, t := range b.Tasks {
			_ = handle(nil, t)
		}
		return nil
	}
	cfg := fastTimings(ns)
	cfg.Queues = map[string]worqr.QueueConfig{
		"mq": {Concurrency: 4, Retention: time.Minute, Handler: worqr.HandlerFunc(handle)},
		"mk": {Concurrency: 1, KeyBatch: 3, BatchHandler: worqr.BatchHandlerFunc(batch)},
	}

	m1 := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "t1"}
	m2 := map[string]string{"b": "2"}
	id, err := c.Enqueue(ctx, "mq", []byte("one"), &worqr.EnqueueOpts{Meta: m1})
	if err != nil {
		t.Fatal(err)
	}
	info, err := in.Task(ctx, "mq", id)
	if err != nil || string(info.Payload) != "one" || !reflect.DeepEqual(info.Meta, m1) {
		t.Fatalf("Inspector.Task: %+v, %v; want payload one and meta %v", info, err, m1)
	}
	if _, err := c.EnqueueBatch(ctx, "mq", [][]byte{[]byte("b1"), []byte("b2")}, &worqr.EnqueueOpts{Meta: m2}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, "mq", []byte("late"), &worqr.EnqueueOpts{Meta: m2, Delay: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, "mq", []byte("plain"), nil); err != nil {
		t.Fatal(err)
	}
	// Keyed, enqueued before the worker starts: k1 heads a batch of three.
	for i, p := range []string{"k1", "k2", "k3"} {
		o := &worqr.EnqueueOpts{Key: "K", Meta: map[string]string{"k": p}}
		if i == 2 {
			o.Meta = nil
		}
		if _, err := c.Enqueue(ctx, "mk", []byte(p), o); err != nil {
			t.Fatal(err)
		}
	}

	w, err := worqr.NewWorker(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})
	want := map[string]seen{
		"one": {"one", m1}, "b1": {"b1", m2}, "b2": {"b2", m2}, "late": {"late", m2}, "plain": {"plain", nil},
		"k1": {"k1", map[string]string{"k": "k1"}}, "k2": {"k2", map[string]string{"k": "k2"}}, "k3": {"k3", nil},
	}
	wait(t, 10*time.Second, "every task to run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == len(want)
	})
	mu.Lock()
	defer mu.Unlock()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("handlers saw\n %v\nwant\n %v", got, want)
	}
}
