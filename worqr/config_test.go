package worqr_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// With Config.Replicas, enqueues and ends are acknowledged once the
// replicas have them; when fewer acknowledge in time, an enqueue returns
// its id with an error matching ErrNotReplicated (the task was enqueued on
// the primary and runs), and a worker counts and reports the ends, which
// stay ended.
func TestReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	primary, replicas, err := redistest.StartReplicated(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Stop()
	defer replicas[0].Stop()
	pool := primary.Pool()
	defer pool.Close()

	for _, tc := range []struct {
		name     string
		replicas int
		short    bool // fewer replicas than asked for
	}{
		{"one replica asked of one", 1, false},
		{"two replicas asked of one", 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Long enough for a replica on a busy machine; the short case
			// spends it on every call.
			timeout := 2 * time.Second
			if tc.short {
				timeout = 200 * time.Millisecond
			}
			cfg := worqr.Config{Namespace: redistest.Namespace(), Replicas: tc.replicas, ReplicaTimeout: timeout}
			client, err := worqr.NewClient(pool, &cfg)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			ran := map[string]bool{}
			var reported []error
			done := 0
			w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg,
				Queues: map[string]worqr.QueueConfig{"r": {Concurrency: 2, Handler: worqr.HandlerFunc(func(_ context.Context, task *worqr.Task) error {
					mu.Lock()
					defer mu.Unlock()
					ran[task.ID] = true
					return nil
				})}},
				OnEvent: func(e worqr.Event) {
					mu.Lock()
					defer mu.Unlock()
					switch e.Kind {
					case worqr.EventError:
						reported = append(reported, e.Err)
					case worqr.EventDone: // after its EventError, if any
						done++
					}
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			check := func(what string, got []string, err error) {
				t.Helper()
				if tc.short != errors.Is(err, worqr.ErrNotReplicated) || !tc.short && err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				for _, id := range got {
					if id == "" {
						t.Fatalf("%s: no id returned (%v)", what, err)
					}
				}
				ids = append(ids, got...)
			}
			id, err := client.Enqueue(ctx, "r", []byte("plain"), nil)
			check("plain enqueue", []string{id}, err)
			id, err = client.Enqueue(ctx, "r", []byte("opts"), &worqr.EnqueueOpts{MaxAttempts: 3})
			check("enqueue with options", []string{id}, err)
			batch, err := client.EnqueueBatch(ctx, "r", [][]byte{[]byte("1"), []byte("2")}, nil)
			check("batch", batch, err)
			id, err = client.Enqueue(ctx, "r", []byte("keyed"), &worqr.EnqueueOpts{Key: "k"})
			check("keyed enqueue", []string{id}, err)

			if err := w.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = w.Stop(context.Background()) }()
			wait(t, 20*time.Second, "every task to run and be done", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(ran) == len(ids) && done == len(ids)
			})
			mu.Lock()
			defer mu.Unlock()
			for _, id := range ids {
				if !ran[id] {
					t.Errorf("task %s did not run", id)
				}
			}
			if !tc.short {
				if w.Unreplicated() != 0 || len(reported) != 0 {
					t.Fatalf("Unreplicated %d, errors %v; want none", w.Unreplicated(), reported)
				}
				return
			}
			// One per end, and one per take of the fetch loop (the takes
			// inside ends wait with the ends): at least the first.
			ends, takes := 0, 0
			for _, err := range reported {
				if strings.HasPrefix(err.Error(), "worqr: take from ") {
					takes++
				} else {
					ends++
				}
			}
			if ends != len(ids) || takes == 0 {
				t.Fatalf("%d EventError of ends, want %d, and %d of takes, want 1 or more: %v", ends, len(ids), takes, reported)
			}
			if w.Unreplicated() != uint64(ends) {
				t.Errorf("Unreplicated = %d, want %d (the ends)", w.Unreplicated(), ends)
			}
			for _, err := range reported {
				var re *worqr.ReplicaError
				if !errors.As(err, &re) || re.Want != 2 || re.Got > 1 {
					t.Errorf("EventError %v, want a *ReplicaError of at most 1 of 2", err)
				}
			}
		})
	}
}

func TestServedFlowsAreValidatedOnce(t *testing.T) {
	pool := srv.Pool()
	defer pool.Close()
	f := &worqr.Flow{Name: "twice", Stages: []worqr.Stage{{Name: "a",
		Handler: worqr.StageHandlerFunc(func(context.Context, *worqr.Run) (*worqr.StageResult, error) { return nil, nil }),
		Queue:   worqr.QueueConfig{Concurrency: 1}}}}
	for _, c := range []struct {
		name  string
		err   error
		field string
	}{
		{"a Worker refuses a nil flow", func() error {
			_, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Flows: []*worqr.Flow{f, nil}})
			return err
		}(), "Flows[1]"},
		{"a Worker refuses a flow served twice", func() error {
			_, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Flows: []*worqr.Flow{f, f}})
			return err
		}(), "Flows[1]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var ie *worqr.InvalidError
			if !errors.As(c.err, &ie) || ie.Field != c.field {
				t.Fatalf("err %v, want an InvalidError of %s", c.err, c.field)
			}
		})
	}
}
