package worqrtest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/worqr/worqr-go/worqr"
)

// Drain runs a Worker of cfg on the Env (its Namespace is the Env's, its
// reaper off: the Env moves due tasks) until the queues it serves, flow
// stage and child queues included, have nothing to do now: no task waiting
// (in a queue not paused) or running, and none of the Env's scheduled tasks
// due on Redis's clock. Tasks scheduled for later stay scheduled: Advance,
// then Drain again, runs them. It returns the ends the Worker recorded
// (done, retry, dead, given back, forwarded, fanned out...), in order.
//
// Drain stops its Worker before it returns, and checks once it has stopped
// that nothing was left. Handlers run on the Worker's goroutines: they must
// report failures with t.Error, not t.Fatal. Drain fails the test when ctx
// ends first (10 seconds when ctx has no deadline), saying what was left.
func (e *Env) Drain(ctx context.Context, t testing.TB, cfg *worqr.WorkerConfig) []worqr.Event {
	t.Helper()
	if cfg == nil {
		t.Fatalf("worqrtest: Drain: cfg is nil")
		return nil
	}
	ctx, cancel := bound(ctx)
	defer cancel()
	queues := served(cfg)
	var (
		mu      sync.Mutex
		ends    []worqr.Event
		changed = make(chan struct{}, 1)
	)
	c := *cfg
	c.Config.Namespace = e.ns
	c.DisableReaper = true
	userOn := cfg.OnEvent
	c.OnEvent = func(ev worqr.Event) {
		if userOn != nil {
			userOn(ev)
		}
		if ev.TaskID != "" && isEnd(ev.Kind) {
			mu.Lock()
			ends = append(ends, ev)
			mu.Unlock()
		}
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	left := func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("the ends so far: %s", describeEvents(ends))
	}
	for {
		w, err := worqr.NewWorker(e.pool, &c)
		if err != nil {
			t.Fatalf("worqrtest: Drain: %v", err)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatalf("worqrtest: Drain: starting the worker: %v", err)
		}
		// Run until the queues look idle; a look is not atomic across
		// queues, so the worker is stopped (nothing runs any more) and the
		// queues are read again before Drain believes it.
		busy, err := e.busy(ctx, queues)
		for err == nil && busy != "" && ctx.Err() == nil {
			select {
			case <-changed:
			case <-time.After(2 * time.Millisecond):
			case <-ctx.Done():
				continue
			}
			var now string
			if now, err = e.busy(ctx, queues); err == nil {
				busy = now
			} else if ctx.Err() != nil {
				err = nil // the bound: what was busy last is reported
			}
		}
		stopped := w.Stop(ctx)
		if ctx.Err() != nil || stopped != nil {
			if busy == "" {
				busy = "handlers still running"
			}
			t.Fatalf("worqrtest: Drain: not drained before %v: %s; %s", context.Cause(ctx), busy, left())
		}
		if err != nil {
			t.Fatalf("worqrtest: Drain: %v", err)
		}
		if busy, err = e.busy(ctx, queues); err != nil {
			t.Fatalf("worqrtest: Drain: %v", err)
		}
		if busy != "" {
			continue
		}
		moved, err := e.mover.Move(ctx)
		if err != nil {
			t.Fatalf("worqrtest: Drain: moving due tasks: %v", err)
		}
		if moved == 0 {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return append([]worqr.Event(nil), ends...)
}

// served lists the queues a worker of cfg serves, as the Inspector names
// them.
func served(cfg *worqr.WorkerConfig) []string {
	var out []string
	for q := range cfg.Queues {
		out = append(out, q)
	}
	for _, f := range cfg.Flows {
		for _, s := range f.Stages {
			out = append(out, f.Name+"/"+s.Name)
			for c := range s.Children {
				out = append(out, f.Name+"/"+c)
			}
			for b := range s.Branches {
				out = append(out, f.Name+"/"+b)
			}
		}
	}
	sort.Strings(out)
	return out
}

// busy says which of queues have a task waiting (in a queue not paused) or
// running ("" when none has).
func (e *Env) busy(ctx context.Context, queues []string) (string, error) {
	var out []string
	for _, q := range queues {
		info, err := e.inspector.Queue(ctx, q)
		if err != nil {
			return "", err
		}
		waiting := info.Waiting
		if info.Paused {
			waiting = 0
		}
		if waiting+info.Active > 0 {
			out = append(out, fmt.Sprintf("queue %q holds %d waiting and %d running", q, waiting, info.Active))
		}
	}
	return strings.Join(out, ", "), nil
}
