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

// A task taken after its deadline is never run: it ends as expired, seen
// in the events, Inspector.Tasks and Inspector.Task (kept for its own retention
// though its queue keeps nothing), and Wait returns it.
func TestDeadlinePassedTaskEndsExpiredWithoutRunning(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	defer pool.Close()
	cfg := worqr.Config{Namespace: redistest.Namespace(), EventInterval: 20 * time.Millisecond}
	c, _ := worqr.NewClient(pool, &cfg)
	in, _ := worqr.NewInspector(pool, &cfg)
	late, err := c.Enqueue(ctx, "q", []byte("late"), &worqr.EnqueueOpts{Deadline: time.Now().Add(-time.Minute), Retention: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ontime, err := c.Enqueue(ctx, "q", []byte("ontime"), &worqr.EnqueueOpts{Deadline: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ran := map[string]bool{}
	events := map[string][]worqr.EventKind{}
	done := make(chan struct{}, 2)
	w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{
		Config: cfg,
		Queues: map[string]worqr.QueueConfig{"q": {Concurrency: 2, Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
			mu.Lock()
			ran[string(t.Payload)] = true
			mu.Unlock()
			return nil
		})}},
		OnEvent: func(e worqr.Event) {
			mu.Lock()
			events[e.TaskID] = append(events[e.TaskID], e.Kind)
			mu.Unlock()
			if e.Kind == worqr.EventExpired || e.Kind == worqr.EventDone {
				done <- struct{}{}
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	waited := make(chan *worqr.TaskInfo, 1)
	go func() {
		info, err := c.Wait(waitCtx, "q", late)
		if err != nil {
			t.Error(err)
		}
		waited <- info
	}()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(ctx)
	for i := 0; i < 2; i++ {
		select {
		case <-done:
		case <-waitCtx.Done():
			t.Fatal("the tasks did not end")
		}
	}
	mu.Lock()
	if ran["late"] || !ran["ontime"] {
		t.Errorf("ran %v: want only the task within its deadline", ran)
	}
	if got := events[late]; len(got) != 1 || got[0] != worqr.EventExpired {
		t.Errorf("events of the late task %v, want [expired] (never started)", got)
	}
	if got := events[ontime]; len(got) != 2 || got[1] != worqr.EventDone {
		t.Errorf("events of the task on time %v", got)
	}
	mu.Unlock()
	info, err := in.Task(ctx, "q", late)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != worqr.StateExpired || info.FinishedAt.IsZero() || info.Deadline.IsZero() || info.Retention != time.Minute {
		t.Errorf("expired task: %+v", info)
	}
	list, total, err := in.Tasks(ctx, "q", worqr.StateExpired, 0, 10)
	if err != nil || total != 1 || len(list) != 1 || list[0].ID != late {
		t.Errorf("Inspector.Tasks(expired) = %v, %d, %v", list, total, err)
	}
	if _, err := in.Task(ctx, "q", ontime); !errors.Is(err, worqr.ErrTaskNotFound) {
		t.Errorf("the done task without retention: %v, want ErrTaskNotFound", err)
	}
	select {
	case info := <-waited:
		if info == nil || info.State != worqr.StateExpired {
			t.Errorf("Wait returned %+v", info)
		}
	case <-waitCtx.Done():
		t.Fatal("Wait did not return")
	}
}

func TestEnqueueBatchUniqueKeysReportsEachDuplicate(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	defer pool.Close()
	cfg := worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true}
	c, _ := worqr.NewClient(pool, &cfg)
	in := newInspector(t, pool, &cfg)
	first, err := c.Enqueue(ctx, "q", []byte("a"), &worqr.EnqueueOpts{UniqueKey: "user-1", UniqueTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := c.EnqueueBatch(ctx, "q", [][]byte{[]byte("b"), []byte("c"), []byte("d"), []byte("e")},
		&worqr.EnqueueOpts{UniqueKeys: []string{"user-1", "user-2", "user-2", ""}, UniqueTTL: time.Hour})
	var de *worqr.DuplicatesError
	if !errors.As(err, &de) || !errors.Is(err, worqr.ErrDuplicate) {
		t.Fatalf("err = %v, want a *DuplicatesError", err)
	}
	if len(ids) != 4 || ids[0] != "" || ids[1] == "" || ids[2] != "" || ids[3] == "" {
		t.Fatalf("ids %q: want \"\" exactly for the duplicates", ids)
	}
	if len(de.Duplicates) != 2 || de.Duplicates[0].Index != 0 || de.Duplicates[0].HolderID != first ||
		de.Duplicates[0].UniqueKey != "user-1" || de.Duplicates[1].Index != 2 || de.Duplicates[1].HolderID != ids[1] {
		t.Fatalf("duplicates %+v %+v", de.Duplicates[0], de.Duplicates[1])
	}
	peek, _, err := in.Tasks(ctx, "q", worqr.StateQueued, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range peek {
		got = append(got, string(p.Payload))
	}
	if strings.Join(got, "") != "ace" {
		t.Fatalf("queue holds %v, want a c e", got)
	}
	// Without duplicates: no error.
	if _, err := c.EnqueueBatch(ctx, "q", [][]byte{[]byte("f")}, &worqr.EnqueueOpts{UniqueKeys: []string{"user-3"}, UniqueTTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
}

func TestEnqueueOptsBadDeadlineRetentionUniqueKeys(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	defer pool.Close()
	cfg := worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true}
	c, _ := worqr.NewClient(pool, &cfg)
	in := newInspector(t, pool, &cfg)
	two := [][]byte{[]byte("a"), []byte("b")}
	at := time.Now().Add(time.Hour)
	for _, tc := range []struct {
		batch bool
		opts  worqr.EnqueueOpts
		field string
	}{
		{false, worqr.EnqueueOpts{Retention: -time.Second}, "EnqueueOpts.Retention"},
		{false, worqr.EnqueueOpts{Retention: time.Microsecond}, "EnqueueOpts.Retention"},
		{false, worqr.EnqueueOpts{At: at, Deadline: at.Add(-time.Second)}, "EnqueueOpts.Deadline"},
		{false, worqr.EnqueueOpts{Deadline: time.Unix(-5, 0)}, "EnqueueOpts.Deadline"},
		{false, worqr.EnqueueOpts{UniqueKeys: []string{"k"}, UniqueTTL: time.Hour}, "EnqueueOpts.UniqueKeys"},
		{true, worqr.EnqueueOpts{UniqueKeys: []string{"k"}, UniqueTTL: time.Hour}, "EnqueueOpts.UniqueKeys"},
		{true, worqr.EnqueueOpts{UniqueKeys: []string{"k", "l"}}, "EnqueueOpts.UniqueTTL"},
		{true, worqr.EnqueueOpts{UniqueKeys: []string{"k", "l"}, UniqueKey: "m", UniqueTTL: time.Hour}, "EnqueueOpts.UniqueKeys"},
		{true, worqr.EnqueueOpts{UniqueKeys: []string{"k", strings.Repeat("x", worqr.MaxUniqueKeyLen+1)}, UniqueTTL: time.Hour}, "EnqueueOpts.UniqueKeys[1]"},
		{true, worqr.EnqueueOpts{UniqueKey: "k", UniqueTTL: time.Hour}, "EnqueueOpts.UniqueKey"},
	} {
		var err error
		if tc.batch {
			_, err = c.EnqueueBatch(ctx, "q", two, &tc.opts)
		} else {
			_, err = c.Enqueue(ctx, "q", []byte("a"), &tc.opts)
		}
		var ie *worqr.InvalidError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("%+v: %v, want an error on %s", tc.opts, err, tc.field)
		}
	}
	if n := queueLen(t, in, "q"); n != 0 {
		t.Fatalf("%d tasks enqueued by bad calls", n)
	}
}

// Every field of EnqueueOpts, once set, takes the enqueue off the plain
// path (which would ignore it).
func TestEnqueueOptsEveryFieldCounts(t *testing.T) {
	if !(*worqr.EnqueueOpts)(nil).Zero() || !(&worqr.EnqueueOpts{}).Zero() {
		t.Fatal("empty options are not zero")
	}
	typ := reflect.TypeOf(worqr.EnqueueOpts{})
	for i := 0; i < typ.NumField(); i++ {
		var o worqr.EnqueueOpts
		f := reflect.ValueOf(&o).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("x")
		case reflect.Int, reflect.Int64:
			f.SetInt(1)
		case reflect.Float64:
			f.SetFloat(1)
		case reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 0, 0))
		case reflect.Struct: // time.Time
			f.Set(reflect.ValueOf(time.Unix(1, 0)))
		default:
			t.Fatalf("field %s: kind %s not handled by this test", typ.Field(i).Name, f.Kind())
		}
		if o.Zero() {
			t.Errorf("EnqueueOpts.%s set, but the options read as empty", typ.Field(i).Name)
		}
	}
}

// Keyed tasks take Deadline and Retention: a task of a key taken past its
// deadline ends as expired without running and its key moves on, in order;
// its own retention keeps it readable. Under a BatchHandler a task with a
// deadline is not taken behind a head: it waits to be the head, and, late,
// ends alone as expired.
func TestKeyedDeadlineAndRetention(t *testing.T) {
	for _, batch := range []int{0, 5} {
		t.Run(map[int]string{0: "handler", 5: "batches"}[batch], func(t *testing.T) {
			ctx := context.Background()
			pool := srv.Pool()
			defer pool.Close()
			cfg := worqr.Config{Namespace: redistest.Namespace()}
			c, _ := worqr.NewClient(pool, &cfg)
			in := newInspector(t, pool, &cfg)
			enq := func(p string, o *worqr.EnqueueOpts) string {
				t.Helper()
				o.Key = "K"
				id, err := c.Enqueue(ctx, "q", []byte(p), o)
				if err != nil {
					t.Fatal(err)
				}
				return id
			}
			enq("1", &worqr.EnqueueOpts{})
			late := enq("2", &worqr.EnqueueOpts{Deadline: time.Now().Add(-time.Minute), Retention: time.Minute})
			enq("3", &worqr.EnqueueOpts{Deadline: time.Now().Add(time.Hour)})
			enq("4", &worqr.EnqueueOpts{})
			var mu sync.Mutex
			var order []string
			var batches [][]string
			ended := make(chan struct{}, 8)
			qc := worqr.QueueConfig{Concurrency: 2, Handler: worqr.HandlerFunc(func(_ context.Context, t *worqr.Task) error {
				mu.Lock()
				order = append(order, string(t.Payload))
				mu.Unlock()
				return nil
			})}
			if batch > 0 {
				qc.Handler, qc.KeyBatch = nil, batch
				qc.BatchHandler = worqr.BatchHandlerFunc(func(_ context.Context, b *worqr.Batch) error {
					mu.Lock()
					defer mu.Unlock()
					var ps []string
					for _, t := range b.Tasks {
						ps = append(ps, string(t.Payload))
						order = append(order, string(t.Payload))
					}
					batches = append(batches, ps)
					return nil
				})
			}
			w, err := worqr.NewWorker(pool, &worqr.WorkerConfig{Config: cfg, Queues: map[string]worqr.QueueConfig{"q": qc},
				OnEvent: func(e worqr.Event) {
					if e.Kind == worqr.EventExpired || e.Kind == worqr.EventDone {
						ended <- struct{}{}
					}
				}})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer w.Stop(ctx)
			for range 4 {
				select {
				case <-ended:
				case <-time.After(10 * time.Second):
					t.Fatal("the tasks did not end")
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if !reflect.DeepEqual(order, []string{"1", "3", "4"}) {
				t.Errorf("ran %v, want [1 3 4]: the late task never runs, its key goes on in order", order)
			}
			if batch > 0 && !reflect.DeepEqual(batches, [][]string{{"1"}, {"3", "4"}}) {
				t.Errorf("batches %v, want [[1] [3 4]]: a task with a deadline is not taken behind a head", batches)
			}
			info, err := in.Task(ctx, "q", late)
			if err != nil {
				t.Fatal(err)
			}
			if info.State != worqr.StateExpired || info.Retention != time.Minute || info.Key != "K" {
				t.Errorf("the late task: %+v", info)
			}
		})
	}
}
