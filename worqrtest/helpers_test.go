package worqrtest_test

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// fakeT is a testing.TB whose failures are recorded instead of failing
// the test; Fatal ends the goroutine, as testing's does.
type fakeT struct {
	testing.TB // the real test, for Cleanup, Name, Logf...
	mu         sync.Mutex
	msgs       []string
}

func (f *fakeT) Helper() {}

func (f *fakeT) record(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, s)
}

func (f *fakeT) Errorf(format string, args ...any) { f.record(fmt.Sprintf(format, args...)) }
func (f *fakeT) Error(args ...any)                 { f.record(fmt.Sprint(args...)) }
func (f *fakeT) Fatalf(format string, args ...any) {
	f.record(fmt.Sprintf(format, args...))
	runtime.Goexit()
}
func (f *fakeT) Fatal(args ...any) { f.record(fmt.Sprint(args...)); runtime.Goexit() }
func (f *fakeT) FailNow()          { f.record("FailNow"); runtime.Goexit() }
func (f *fakeT) Fail()             { f.record("Fail") }
func (f *fakeT) Failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.msgs) > 0
}

// failure runs fn with a fakeT on a goroutine of its own and returns what
// it failed with ("" when it passed).
func failure(t *testing.T, fn func(t testing.TB)) string {
	t.Helper()
	f := &fakeT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.msgs, "\n")
}

// mustFail fails t unless fn fails with a message holding every one of
// want.
func mustFail(t *testing.T, fn func(t testing.TB), want ...string) string {
	t.Helper()
	msg := failure(t, fn)
	if msg == "" {
		t.Fatalf("passed; want a failure saying %q", want)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("failure does not say %q:\n%s", w, msg)
		}
	}
	return msg
}

// mustPass fails t if fn fails.
func mustPass(t *testing.T, fn func(t testing.TB)) {
	t.Helper()
	if msg := failure(t, fn); msg != "" {
		t.Fatalf("failed:\n%s", msg)
	}
}
