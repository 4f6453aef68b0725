package worqrtest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/worqr/worqr-go/worqr"
	"github.com/worqr/worqr-go/worqrtest"
)

// welcomeEmail is the payload of a welcome email.
type welcomeEmail struct {
	To string `json:"to"`
}

// signup is code under test: it sends a welcome email a day after a
// signup.
func signup(ctx context.Context, c *worqr.Client, email string) error {
	_, err := worqr.EnqueueValue(ctx, c, "emails", welcomeEmail{To: email}, nil, &worqr.EnqueueOpts{Delay: 24 * time.Hour})
	return err
}

// sendWelcome is the handler under test.
var sendWelcome = worqr.Handle(func(ctx context.Context, t *worqr.Task, m welcomeEmail) error {
	if m.To == "" {
		return worqr.SkipRetry(errors.New("no address"))
	}
	t.SetResult([]byte("sent to " + m.To))
	return nil
}, nil)

// A test of code that enqueues, and of the handler that runs what it
// enqueued. In a test, t is the test's *testing.T.
func Example() {
	t := &exampleT{}
	defer t.cleanup()
	ctx := context.Background()
	env := worqrtest.New(t, &worqrtest.Options{InProcess: true}) // the test moves the clock

	// What the code under test enqueued.
	if err := signup(ctx, env.Client(), "ann@example.com"); err != nil {
		t.Fatal(err)
	}
	env.RequireEnqueued(t, "emails", worqrtest.Match{Payload: welcomeEmail{To: "ann@example.com"}, Delay: 24 * time.Hour})

	// How the engine ends the handler's runs.
	res := env.Work(ctx, t, sendWelcome, []byte(`{"to":"bob@example.com"}`), nil)
	fmt.Println(res.Kind, res.Attempt, string(res.Task.Result))
	res = env.Work(ctx, t, sendWelcome, []byte(`{}`), nil)
	fmt.Println(res.Kind, res.Attempt, res.Err)

	// A day later, the email is due: a worker sends it.
	env.Advance(t, 24*time.Hour)
	ends := env.Drain(ctx, t, &worqr.WorkerConfig{Queues: map[string]worqr.QueueConfig{
		"emails": {Concurrency: 1, Handler: sendWelcome},
	}})
	fmt.Println(len(ends), ends[0].Kind)
	// Output:
	// done 1 sent to bob@example.com
	// dead 1 no address
	// 1 done
}

// exampleT stands in for a test's *testing.T in this example: it panics
// where a test would fail, and runs the cleanups when asked.
type exampleT struct {
	testing.TB
	cleanups []func()
}

func (t *exampleT) Helper()                           {}
func (t *exampleT) Cleanup(f func())                  { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Fatal(args ...any)                 { panic(fmt.Sprint(args...)) }
func (t *exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (t *exampleT) Errorf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

func (t *exampleT) cleanup() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}
