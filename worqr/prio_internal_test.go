package worqr

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
)

// warnRecorder keeps the messages of the Warn records logged through it.
type warnRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *warnRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (r *warnRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.msgs = append(r.msgs, rec.Message)
	r.mu.Unlock()
	return nil
}
func (r *warnRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *warnRecorder) WithGroup(string) slog.Handler      { return r }

// A queue of a priority group gets, in one round, the slots it is owed
// (given to it by the draw of an end of another queue, refillShare) and its
// part of the draw of the slots left: together they must stay within its own
// free slots (QueueConfig.Concurrency, the cap of the weighted example of
// docs/guide/priorities.md). Else the round takes tasks of the capped queue
// it has no handler for: they wait, held out of every other worker's reach,
// until a release puts them back, logged as if the process had been frozen.
func TestWeightedRoundKeepsAQueueWithinItsCap(t *testing.T) {
	ctx := context.Background()
	pool := internalPool(t)
	rec := &warnRecorder{}
	cfg := Config{Namespace: redistest.Namespace(), DisableEvents: true, Logger: slog.New(rec)}
	release := make(chan struct{})
	var mu sync.Mutex
	running, most := 0, 0
	h := HandlerFunc(func(ctx context.Context, t *Task) error {
		mu.Lock()
		if running++; running > most {
			most = running
		}
		mu.Unlock()
		select {
		case <-release:
		case <-ctx.Done():
		}
		mu.Lock()
		running--
		mu.Unlock()
		return nil
	})
	w := startInternal(t, pool, &WorkerConfig{Config: cfg, PollInterval: time.Hour,
		Priority: PriorityWeighted, Concurrency: 20,
		Queues: map[string]QueueConfig{
			"critical": {Handler: h, Weight: 6},
			"default":  {Handler: h, Weight: 3},
			"low":      {Handler: h, Weight: 1, Concurrency: 5},
		}})
	defer w.Stop(ctx)
	defer close(release) // (before Stop, which waits for the handlers)
	g := w.group
	var low *queueRunner
	for _, q := range g.queues {
		if q.Member == "low" {
			low = q
		}
	}
	// The first rounds find every queue empty.
	waitFor(t, func() (bool, string) {
		idle := true
		for _, q := range g.queues {
			idle = idle && !q.more.Load()
		}
		return idle, "the group never went idle"
	})
	// An end of another queue gave low 5 slots (its whole cap) to take at
	// the next round.
	g.mu.Lock()
	g.owed[low] = 5
	g.mu.Unlock()
	client, err := NewClient(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	in, err := NewInspector(pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	ps := make([][]byte, 20)
	for i := range ps {
		ps[i] = []byte("x")
	}
	if _, err := client.EnqueueBatch(ctx, "low", ps, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() (bool, string) {
		mu.Lock()
		r := running
		mu.Unlock()
		return r == 5, fmt.Sprintf("%d handlers of low running, want 5", r)
	})
	time.Sleep(100 * time.Millisecond) // let a round past the cap show itself
	if qi, err := in.Queue(ctx, "low"); err != nil {
		t.Error(err)
	} else if n := qi.Waiting; n != 15 {
		t.Errorf("%d tasks of low waiting, want 15: the worker holds %d with 5 handlers", n, 20-n)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, m := range rec.msgs {
		if strings.Contains(m, "taking not run") {
			t.Errorf("the round took past low's 5 slots (warnings: %q)", rec.msgs)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if most > 5 {
		t.Fatalf("%d handlers of low ran at once, want at most 5", most)
	}
}

// The weights of queues served by priority are added up for each draw
// (prioGroup.share): weights whose sum passes the largest int made it
// negative, the draw gave no slot to any queue, and the worker, accepted
// by NewWorker, ran nothing at all, with no error or log (Weight had no
// upper bound). With PriorityWeighted they are refused now; a sum of
// exactly math.MaxInt is served. (PriorityStrict only ranks the weights.)
func TestWeightsWhoseSumOverflowsAreRefused(t *testing.T) {
	t.Parallel()
	edit := func(mode PriorityMode, wa, wb int) *WorkerConfig {
		return worker(func(c *WorkerConfig) {
			c.Priority, c.Concurrency = mode, 4
			c.Queues = map[string]QueueConfig{"a": {Handler: noop, Weight: wa}, "b": {Handler: noop, Weight: wb}}
		})
	}
	_, err := edit(PriorityWeighted, math.MaxInt, 1).withDefaults()
	want := `worqr: Queues (their Weight, 1 for a queue without one) must add up to at most 9223372036854775807 with PriorityWeighted`
	if err == nil || err.Error() != want {
		t.Errorf("weights MaxInt and 1: err = %v, want %q", err, want)
	}
	for _, c := range []*WorkerConfig{edit(PriorityWeighted, math.MaxInt-1, 0), edit(PriorityStrict, math.MaxInt, math.MaxInt)} {
		if _, err := c.withDefaults(); err != nil {
			t.Errorf("%s, weights %d and %d: %v", c.Priority, c.Queues["a"].Weight, c.Queues["b"].Weight, err)
		}
	}

	// The draw with the largest sum allowed gives every slot.
	a := &queueRunner{name: "a", weight: math.MaxInt - 1, concurrency: 4, slots: &slotPool{size: 4}}
	b := &queueRunner{name: "b", weight: 1, concurrency: 4, slots: a.slots}
	g := newPrioGroup(PriorityWeighted, 4)
	if got := g.share([]*queueRunner{a, b}, 4, 0, nil); got[0]+got[1] != 4 {
		t.Errorf("share of 4 slots between weights MaxInt-1 and 1 = %v, want all 4 given", got)
	}
}
