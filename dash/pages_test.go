package dash

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

// The task page shows a task whole: the options it was enqueued with, when
// its latest attempt started and how long it ran, and its failed attempts;
// a done task shows no error box.
func TestTaskPageShowsATaskWhole(t *testing.T) {
	t.Run("its own options and when it was enqueued", func(t *testing.T) {
		e := newEnv(t, nil)
		id, err := e.client.Enqueue(context.Background(), "mail", []byte("hi"), &worqr.EnqueueOpts{ID: "mine",
			Priority: 2, MaxAttempts: 7, Timeout: 90 * time.Second, Deadline: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		_, body := e.get("/task?id=" + id)
		for _, want := range []string{`id="task-priority">2<`, `id="task-max-attempts">7<`, `id="task-timeout">1m30s<`,
			"<dt>Deadline</dt>"} {
			if !strings.Contains(body, want) {
				t.Errorf("the page has no %q:\n%s", want, body)
			}
		}
		if regexp.MustCompile(`<dt>Enqueued</dt><dd>–`).MatchString(body) {
			t.Error("an id of the caller's shows no enqueue time")
		}
		if strings.Contains(body, `id="task-started"`) || strings.Contains(body, `id="attempts"`) {
			t.Error("a task that never ran shows a start or attempts")
		}
		unlimited, err := e.client.Enqueue(context.Background(), "mail", []byte("hi"), &worqr.EnqueueOpts{Timeout: -1})
		if err != nil {
			t.Fatal(err)
		}
		if _, body := e.get("/task?id=" + unlimited); !strings.Contains(body, `id="task-timeout">none<`) {
			t.Errorf("a task with no time limit of its own:\n%s", body)
		}
		plain, _ := e.client.Enqueue(context.Background(), "mail", []byte("hi"), nil)
		if _, body := e.get("/task?id=" + plain); !strings.Contains(body, `id="task-max-attempts"><span class="sub">the queue's</span>`) ||
			strings.Contains(body, "task-priority") {
			t.Errorf("a task with no options of its own:\n%s", body)
		}
	})

	t.Run("done after failures: its attempts in a table, escaped, and no error box", func(t *testing.T) {
		e := newEnv(t, nil)
		w, err := worqr.NewWorker(srv.Pool(), &worqr.WorkerConfig{Config: e.cfg, Queues: map[string]worqr.QueueConfig{
			"jobs": {Concurrency: 1, Retention: time.Minute, Backoff: func(int, error) time.Duration { return time.Millisecond },
				Handler: worqr.HandlerFunc(func(ctx context.Context, t *worqr.Task) error {
					if t.Attempt < 3 {
						return fmt.Errorf("<b>boom %d</b>", t.Attempt)
					}
					return nil
				})},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer w.Stop(context.Background())
		id, err := e.client.Enqueue(context.Background(), "jobs", []byte("p"), nil)
		if err != nil {
			t.Fatal(err)
		}
		redistest.WaitFor(t, 10*time.Second, "the task done", func() bool {
			info, err := e.in.Task(context.Background(), "jobs", id)
			return err == nil && info.State == worqr.StateDone
		})
		_, body := e.get("/task?id=" + id)
		if strings.Contains(body, "last-error") || strings.Contains(body, "Last error") {
			t.Error("a done task shows a Last error box")
		}
		for _, want := range []string{`id="attempts"`, `id="task-started"`, "<dt>Ran for</dt>",
			`<pre class="code err attempt-error">&lt;b&gt;boom 1&lt;/b&gt;</pre>`,
			`<pre class="code err attempt-error">&lt;b&gt;boom 2&lt;/b&gt;</pre>`, `<td class="mono">` + w.ID() + `</td>`} {
			if !strings.Contains(body, want) {
				t.Errorf("the page has no %q:\n%s", want, body)
			}
		}
		if strings.Contains(body, "<b>boom") {
			t.Error("an attempt's error is not escaped")
		}
		if rows := strings.Count(body, `attempt-error">`); rows != 2 {
			t.Errorf("%d attempt rows, want 2", rows)
		}
	})

	t.Run("dead: its error box and its dead attempt", func(t *testing.T) {
		e := newEnv(t, nil)
		e.kill("dead", 1, "bad input")
		_, body := e.get("/task?id=" + e.deadID("dead"))
		if !strings.Contains(body, `id="last-error">bad input`) || !strings.Contains(body, `<span class="badge st-dead">dead</span>`) {
			t.Errorf("a dead task's page:\n%s", body)
		}
	})
}

// The active list shows how long each task has run beside its worker.
func TestQueuePageShowsRunningFor(t *testing.T) {
	e := newEnv(t, nil)
	started, release := make(chan struct{}), make(chan struct{})
	w, err := worqr.NewWorker(srv.Pool(), &worqr.WorkerConfig{Config: e.cfg, Queues: map[string]worqr.QueueConfig{
		"jobs": {Concurrency: 1, Handler: worqr.HandlerFunc(func(context.Context, *worqr.Task) error {
			close(started)
			<-release
			return nil
		})}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background())
	defer close(release)
	if _, err := e.client.Enqueue(context.Background(), "jobs", []byte("p"), nil); err != nil {
		t.Fatal(err)
	}
	<-started
	_, body := e.get("/queue?name=jobs&state=active")
	if !strings.Contains(body, "running for") || !regexp.MustCompile(`class="running-for">[0-9.]+(ms|s)<`).MatchString(body) {
		t.Errorf("the active list shows no run time:\n%s", body)
	}
}
