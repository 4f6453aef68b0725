package worqrtest_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/worqr/worqr-go/worqr"
	"github.com/worqr/worqr-go/worqrtest"
)

type welcome struct {
	To   string `json:"to"`
	Lang string `json:"lang"`
}

func TestRequireEnqueuedMatchesEachOption(t *testing.T) {
	ctx := context.Background()
	env := worqrtest.New(t, &worqrtest.Options{InProcess: true})
	c := env.Client()
	at := env.Now().Add(2 * time.Hour)
	deadline := env.Now().Add(3 * time.Hour)
	typed, err := c.Enqueue(ctx, "emails", []byte(`{"to": "ann", "lang": "en"}`), &worqr.EnqueueOpts{
		Type: "welcome", Delay: time.Hour, MaxAttempts: 3, Meta: map[string]string{"tenant": "t1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	unique, err := c.Enqueue(ctx, "emails", []byte("digest"), &worqr.EnqueueOpts{UniqueKey: "digest-ann", UniqueTTL: time.Hour, At: at})
	if err != nil {
		t.Fatal(err)
	}
	prio, err := c.Enqueue(ctx, "emails", []byte("urgent"), &worqr.EnqueueOpts{Priority: 5, Deadline: deadline})
	if err != nil {
		t.Fatal(err)
	}
	keyed, err := c.Enqueue(ctx, "emails", []byte("second of ann"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"first", "second"} {
		if _, err := c.Enqueue(ctx, "orders", []byte(p), &worqr.EnqueueOpts{Key: "ann"}); err != nil {
			t.Fatal(err)
		}
	}

	for _, tc := range []struct {
		name  string
		queue string
		m     worqrtest.Match
		id    string
	}{
		{"type", "emails", worqrtest.Match{Type: "welcome"}, typed},
		{"json payload", "emails", worqrtest.Match{Payload: welcome{Lang: "en", To: "ann"}}, typed},
		{"raw json payload", "emails", worqrtest.Match{Payload: json.RawMessage(`{"lang":"en","to":"ann"}`)}, typed},
		{"map payload", "emails", worqrtest.Match{Payload: map[string]any{"to": "ann", "lang": "en"}}, typed},
		{"bytes payload", "emails", worqrtest.Match{Payload: []byte("urgent")}, prio},
		{"string payload", "emails", worqrtest.Match{Payload: "second of ann"}, keyed},
		{"delay", "emails", worqrtest.Match{Delay: time.Hour}, typed},
		{"at", "emails", worqrtest.Match{At: at}, unique},
		{"unique key", "emails", worqrtest.Match{UniqueKey: "digest-ann"}, unique},
		{"priority", "emails", worqrtest.Match{Priority: 5}, prio},
		{"deadline", "emails", worqrtest.Match{Deadline: deadline}, prio},
		{"max attempts", "emails", worqrtest.Match{MaxAttempts: 3}, typed},
		{"meta", "emails", worqrtest.Match{Meta: map[string]string{"tenant": "t1"}}, typed},
		{"all of them", "emails", worqrtest.Match{Type: "welcome", Payload: welcome{To: "ann", Lang: "en"}, Delay: time.Hour, MaxAttempts: 3}, typed},
		{"key head", "orders", worqrtest.Match{Key: "ann", Payload: "first"}, ""},
		{"key behind its head", "orders", worqrtest.Match{Key: "ann", Payload: "second"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got *worqr.TaskInfo
			mustPass(t, func(tb testing.TB) { got = env.RequireEnqueued(tb, tc.queue, tc.m) })
			if tc.id != "" && got.ID != tc.id {
				t.Errorf("matched task %s, want %s", got.ID, tc.id)
			}
		})
	}

	for _, tc := range []struct {
		name string
		m    worqrtest.Match
		why  string
	}{
		{"type", worqrtest.Match{Type: "reset"}, `type "welcome", want "reset"`},
		{"json payload", worqrtest.Match{Type: "welcome", Payload: welcome{To: "bob", Lang: "en"}}, "payload differs as JSON"},
		{"bytes payload", worqrtest.Match{Priority: 5, Payload: "not urgent"}, "payload differs"},
		{"delay", worqrtest.Match{Type: "welcome", Delay: 2 * time.Hour}, "due in 1h0m0s, want 2h0m0s"},
		{"delay of a waiting task", worqrtest.Match{Priority: 5, Delay: time.Hour}, "queued, want scheduled"},
		{"unique key", worqrtest.Match{At: at, UniqueKey: "digest-bob"}, `unique key "digest-ann", want "digest-bob"`},
		{"priority", worqrtest.Match{Payload: "urgent", Priority: 4}, "priority 5, want 4"},
		{"max attempts", worqrtest.Match{Type: "welcome", MaxAttempts: 4}, "max attempts 3, want 4"},
		{"meta", worqrtest.Match{Type: "welcome", Meta: map[string]string{"tenant": "t2"}}, `meta tenant "t1", want "t2"`},
	} {
		t.Run("fails/"+tc.name, func(t *testing.T) {
			mustFail(t, func(tb testing.TB) { env.RequireEnqueued(tb, "emails", tc.m) },
				"no task of queue \"emails\" matches "+tc.m.String(),             // what was expected
				"holds 4 tasks waiting or scheduled", typed, unique, prio, keyed, // what is there
				tc.why) // why the first task listed does not match
		})
	}
}

func TestRequireEnqueuedListsTasks(t *testing.T) {
	ctx := context.Background()
	env := worqrtest.New(t, &worqrtest.Options{InProcess: true})
	if _, err := env.Client().Enqueue(ctx, "emails", []byte(`{"to":"ann"}`), &worqr.EnqueueOpts{Type: "reset", Delay: time.Minute}); err != nil {
		t.Fatal(err)
	}
	msg := mustFail(t, func(tb testing.TB) { env.RequireEnqueued(tb, "emails", worqrtest.Match{Type: "welcome"}) },
		`matches {Type: "welcome"}`, `scheduled  due in 1m0s`, `type "reset"`, `payload {"to":"ann"}`)
	t.Log(msg)
	mustFail(t, func(tb testing.TB) { env.RequireEnqueued(tb, "emials", worqrtest.Match{}) },
		`queue "emials" holds no task waiting or scheduled (nothing was ever enqueued on it`)
}

func TestRequireNotEnqueued(t *testing.T) {
	ctx := context.Background()
	env := worqrtest.New(t, nil)
	mustPass(t, func(tb testing.TB) { env.RequireNotEnqueued(tb, "emails", worqrtest.Match{}) })
	id, err := env.Client().Enqueue(ctx, "emails", []byte(`{"to":"ann"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	mustPass(t, func(tb testing.TB) {
		env.RequireNotEnqueued(tb, "emails", worqrtest.Match{Payload: map[string]string{"to": "bob"}})
	})
	mustFail(t, func(tb testing.TB) {
		env.RequireNotEnqueued(tb, "emails", worqrtest.Match{Payload: map[string]string{"to": "ann"}})
	},
		`want no task of queue "emails" matching {Payload: {"to":"ann"}}, found 1`, id)
}

func TestRequireEnqueuedMany(t *testing.T) {
	ctx := context.Background()
	env := worqrtest.New(t, nil)
	c := env.Client()
	plain, err := c.Enqueue(ctx, "emails", []byte("a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	late, err := c.Enqueue(ctx, "emails", []byte("b"), &worqr.EnqueueOpts{Delay: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// The first match fits both tasks: it must leave the delayed one to the
	// second.
	var got []*worqr.TaskInfo
	mustPass(t, func(tb testing.TB) {
		got = env.RequireEnqueuedMany(tb, "emails", worqrtest.Match{}, worqrtest.Match{Delay: time.Minute})
	})
	if got[0].ID != plain || got[1].ID != late {
		t.Errorf("got %s, %s; want %s, %s", got[0].ID, got[1].ID, plain, late)
	}
	mustFail(t, func(tb testing.TB) { env.RequireEnqueuedMany(tb, "emails", worqrtest.Match{Payload: "a"}) },
		"want 1 task of queue \"emails\"", "not expected:", late)
	mustFail(t, func(tb testing.TB) {
		env.RequireEnqueuedMany(tb, "emails", worqrtest.Match{Payload: "a"}, worqrtest.Match{Payload: "b"}, worqrtest.Match{Payload: "c"})
	}, "no task for:", "[2] {Payload: c}")
}

func TestAdvanceMakesDelayedTasksDue(t *testing.T) {
	ctx := context.Background()
	env := worqrtest.New(t, &worqrtest.Options{InProcess: true})
	start := env.Now()
	if _, err := env.Client().Enqueue(ctx, "emails", []byte("later"), &worqr.EnqueueOpts{Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	mustPass(t, func(tb testing.TB) { env.RequireEnqueued(tb, "emails", worqrtest.Match{Delay: time.Hour}) })
	env.Advance(t, 30*time.Minute)
	if got := env.Now().Sub(start); got != 30*time.Minute {
		t.Fatalf("Now moved by %s, want 30m", got)
	}
	mustPass(t, func(tb testing.TB) { env.RequireEnqueued(tb, "emails", worqrtest.Match{Delay: 30 * time.Minute}) })
	env.Advance(t, 30*time.Minute)
	info := env.RequireEnqueued(t, "emails", worqrtest.Match{Payload: "later"})
	if info.State != worqr.StateQueued {
		t.Fatalf("state %s after the delay, want queued", info.State)
	}
}

func TestRequireEnqueuedBehindARunningHead(t *testing.T) {
	ctx := context.Background()
	env := worqrtest.New(t, nil)
	for _, p := range []string{"first", "second"} {
		if _, err := env.Client().Enqueue(ctx, "orders", []byte(p), &worqr.EnqueueOpts{Key: "ann"}); err != nil {
			t.Fatal(err)
		}
	}
	started, release := make(chan struct{}), make(chan struct{})
	cfg := env.Config()
	w, err := worqr.NewWorker(env.Pool(), &worqr.WorkerConfig{Config: cfg, Queues: map[string]worqr.QueueConfig{
		"orders": {Concurrency: 1, Handler: worqr.HandlerFunc(func(ctx context.Context, task *worqr.Task) error {
			if string(task.Payload) == "first" {
				close(started)
				<-release
			}
			return nil
		})},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(ctx)
	defer close(release)
	<-started
	// The head runs: only the task behind it is enqueued.
	env.RequireEnqueuedMany(t, "orders", worqrtest.Match{Key: "ann", Payload: "second"})
}
