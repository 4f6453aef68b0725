package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// task wait's exit code tells a cancelled task (4) and an expired one (5)
// from a dead one (3) and a wait that timed out (6; TestTaskAndFlowWait
// has those), and from a failure to find it (1).
func TestTaskWaitExitsByHowTheTaskEnded(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	cancelled, err := b.client.Enqueue(ctx, "jobs", []byte("c"), &worqr.EnqueueOpts{Delay: time.Hour, Retention: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	b.ok("", "task", "cancel", "jobs", cancelled)
	if r := b.run("", "task", "wait", "jobs", cancelled); r.code != exitCancelled || r.out != "cancelled "+cancelled+"\n" {
		t.Errorf("wait for a cancelled task: exit %d, stdout %q, stderr %q; want %d", r.code, r.out, r.err, exitCancelled)
	}

	deadline := time.Now().Add(300 * time.Millisecond)
	expired, err := b.client.Enqueue(ctx, "late", []byte("e"), &worqr.EnqueueOpts{Deadline: deadline, Retention: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// Past its deadline before any worker takes it: a take compares the
	// deadline with Redis's clock.
	redistest.WaitFor(t, patience, "Redis's clock past the deadline", func() bool {
		c := b.pool.Get()
		defer c.Close()
		now, err := redis.Int64s(c.Do("TIME"))
		return err == nil && len(now) == 2 && time.Unix(now[0], now[1]*1000).After(deadline)
	})
	w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{
		Config: worqr.Config{Namespace: b.ns},
		Queues: map[string]worqr.QueueConfig{"late": {Concurrency: 1, Handler: worqr.HandlerFunc(
			func(context.Context, *worqr.Task) error { return nil })}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(ctx) //nolint:errcheck
	if r := b.run("", "task", "wait", "late", expired, "--timeout", "20s"); r.code != exitExpired || r.out != "expired "+expired+"\n" {
		t.Errorf("wait for an expired task: exit %d, stdout %q, stderr %q; want %d", r.code, r.out, r.err, exitExpired)
	}

	if r := b.run("", "task", "wait", "jobs", "nosuchtask"); r.code != exitFail || !strings.Contains(r.err, "not found") {
		t.Errorf("wait for an unknown task: exit %d, stderr %q; want %d", r.code, r.err, exitFail)
	}
	help := b.ok("", "task", "wait", "--help")
	for _, line := range []string{"0  done", "3  dead", "4  cancelled", "5  expired", "6  timed out"} {
		if !strings.Contains(help, line) {
			t.Errorf("task wait --help does not document %q:\n%s", line, help)
		}
	}
}

// task wait and flow wait block until the end and say it in the exit code:
// 0 for done, 1 for anything else, 1 on --timeout.
func TestTaskAndFlowWait(t *testing.T) {
	b := setup(t)
	release := make(chan struct{})
	flow := &worqr.Flow{Name: "f", Stages: []worqr.Stage{{Name: "only", Queue: worqr.QueueConfig{Concurrency: 1},
		Handler: worqr.StageHandlerFunc(func(ctx context.Context, r *worqr.Run) (*worqr.StageResult, error) {
			if r.State["fail"] != "" {
				return nil, worqr.SkipRetry(errors.New("no such user"))
			}
			return &worqr.StageResult{}, nil
		})}}}
	w, err := worqr.NewWorker(b.pool, &worqr.WorkerConfig{
		Config: worqr.Config{Namespace: b.ns, EventInterval: 20 * time.Millisecond},
		Flows:  []*worqr.Flow{flow},
		Queues: map[string]worqr.QueueConfig{"jobs": {Concurrency: 1, Retention: time.Minute, Handler: worqr.HandlerFunc(
			func(_ context.Context, t *worqr.Task) error {
				<-release
				if string(t.Payload) == "bad" {
					return worqr.SkipRetry(errors.New("bad payload"))
				}
				return nil
			})}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background()) //nolint:errcheck
	defer close(release)
	good := b.enqueue("jobs", "good")[0]
	bad := b.enqueue("jobs", "bad")[0]
	if r := b.run("", "task", "wait", "jobs", good, "--timeout", "100ms"); r.code != exitTimedOut || !strings.Contains(r.err, "timed out after 100ms: task "+good+" is active") {
		t.Errorf("wait with a timeout: exit %d, stderr %q; want %d and the task's state", r.code, r.err, exitTimedOut)
	}
	go func() { release <- struct{}{}; release <- struct{}{} }()
	if out := b.ok("", "task", "wait", "jobs", good); out != "done "+good+"\n" {
		t.Errorf("wait for a done task printed %q", out)
	}
	if r := b.run("", "task", "wait", "jobs", bad); r.code != exitDead || r.out != "dead "+bad+"\n" || !strings.Contains(r.err, "ended dead: bad payload") {
		t.Errorf("wait for a dead task: exit %d, stdout %q, stderr %q; want %d, its state and its error", r.code, r.out, r.err, exitDead)
	}
	if r := b.run("", "task", "wait", "jobs", "nosuchtask"); r.code != 1 || !strings.Contains(r.err, "not found") {
		t.Errorf("wait for an unknown task: exit %d, stderr %q", r.code, r.err)
	}
	ok, err := b.client.StartRun(context.Background(), flow, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	failed, err := b.client.StartRun(context.Background(), flow, map[string]string{"fail": "1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out := b.ok("", "flow", "wait", "f", ok); out != "done "+ok+"\n" {
		t.Errorf("flow wait for a done run printed %q", out)
	}
	if r := b.run("", "flow", "wait", "f", failed); r.code != exitDead || r.out != "failed "+failed+"\n" || !strings.Contains(r.err, "no such user") {
		t.Errorf("flow wait for a failed run: exit %d, stdout %q, stderr %q; want %d", r.code, r.out, r.err, exitDead)
	}
}
