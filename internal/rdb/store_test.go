package rdb_test

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
)

// Stats counts each queue's tasks by place, for queues of several tags in
// one call, in the order asked.
func TestStats(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	qa := e.k.Queue(rdb.Standalone("a"))
	s1 := e.k.Queue(rdb.QueueRef{Tag: "F", Name: "s1"})
	c1 := e.k.Queue(rdb.QueueRef{Tag: "F", Name: "c1"})

	// a: six tasks; A takes two, B two; A's end one done (retained) and
	// one dead; two still wait; two scheduled; paused.
	e.enqueueTo(t, qa, nil, "a1", "a2", "a3", "a4", "a5", "a6")
	e.takeFrom(t, qa, "A", 2, false)
	e.takeFrom(t, qa, "B", 2, false)
	e.endIn(t, qa, 60000, rdb.Done(rdb.KindTask, "A", "1", "a1", nil), rdb.Dead(rdb.KindTask, "A", "2", "a2", "bad"))
	e.enqueueTo(t, qa, &rdb.EnqueueArgs{DueMillis: far}, "a7", "a8")
	if err := e.st.SetPaused(e.ctx, qa, true); err != nil {
		t.Fatal(err)
	}
	// F/s1: two runs, the first taken by A.
	for _, id := range []string{"r1", "r2"} {
		if ok, err := e.st.FlowStart(e.ctx, s1, id, nil, rdb.FlowRef{RetentionMillis: 60000}); err != nil || !ok {
			t.Fatalf("FlowStart: %v, %v", ok, err)
		}
	}
	e.takeFrom(t, s1, "A", 1, true)
	// F/c1: one task waiting, paused, then resumed and paused again.
	e.enqueueTo(t, c1, nil, "k1")
	for _, on := range []bool{true, false, true} {
		if err := e.st.SetPaused(e.ctx, c1, on); err != nil {
			t.Fatal(err)
		}
	}
	// F/s2: nothing at all.
	s2 := e.k.Queue(rdb.QueueRef{Tag: "F", Name: "s2"})

	qs := []rdb.QueueKeys{s1, qa, c1, s2}
	got, err := e.st.Stats(e.ctx, qs)
	if err != nil {
		t.Fatal(err)
	}
	want := []rdb.QueueStat{
		{Waiting: 1, Active: 1, Head: "r2"},
		{Waiting: 2, Scheduled: 2, Active: 2, Dead: 1, Retained: 1, Paused: true, Head: "a5"},
		{Waiting: 1, Paused: true, Head: "k1"},
		{},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Stats =\n%+v\nwant\n%+v", got, want)
	}
	flags, err := e.st.Flags(e.ctx, qs)
	if err != nil {
		t.Fatal(err)
	}
	paused := make([]bool, len(flags))
	for i, f := range flags {
		paused[i] = f.Paused
	}
	if !reflect.DeepEqual(paused, []bool{false, true, true, false}) {
		t.Errorf("Flags' Paused = %v; want [false true true false]", paused)
	}
}

// fakeTB records the errors a checker reports instead of failing.
type fakeTB struct {
	*testing.T
	errs []string
}

func (f *fakeTB) Errorf(format string, args ...any) {
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}

// The checks every store call of these tests runs through must catch what
// they are there for: script KEYS of two hash tags (redistest's pool), and
// a command on a connection asked for another tag, or asked for with no tag
// at all (routed).
func TestTagChecksCatchCrossTagCalls(t *testing.T) {
	t.Parallel()
	fake := &fakeTB{T: t}
	c, err := srv.TagCheckedPool(fake).GetContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, keys := range [][2]string{{"x:{a}:1", "x:{a}:2"}, {"x:{a}:1", "x:{b}:2"}} {
		if _, err := c.Do("EVAL", "return 1", 2, keys[0], keys[1]); err != nil {
			t.Fatal(err)
		}
	}
	if len(fake.errs) != 1 || !strings.Contains(fake.errs[0], `"a" and "b"`) {
		t.Errorf("TagCheckedPool reported %q, want one error for the keys of tags a and b", fake.errs)
	}

	fake.errs = nil
	ns := "x" + redistest.Namespace()
	r := routed{pool: srv.TagCheckedPool(t), t: fake, ns: ns}
	rc, err := r.GetContextForTag(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	for _, key := range []string{ns + ":{a}:k", ns + ":{b}:k", "other:{b}:k"} {
		if _, err := rc.Do("GET", key); err != nil {
			t.Fatal(err)
		}
	}
	if len(fake.errs) != 1 || !strings.Contains(fake.errs[0], ns+":{b}:k") {
		t.Errorf("routed reported %q, want one error for %s:{b}:k", fake.errs, ns)
	}
	fake.errs = nil
	if c, err := r.GetContext(context.Background()); err == nil {
		c.Close()
	}
	if len(fake.errs) != 1 {
		t.Errorf("routed.GetContext reported %q, want one error", fake.errs)
	}
}

// TestKnownQueuesReadInSteps: the set of known queues is read with SSCAN,
// about 1,000 at a time, not one SMEMBERS (16 ms of Redis at 100,000
// queues, read by the reaper on every pass), and each queue comes once.
func TestKnownQueuesReadInSteps(t *testing.T) {
	e := newEnv(t)
	const n = 3500
	refs := make([]rdb.QueueRef, n)
	for i := range refs {
		refs[i] = rdb.Standalone("q" + strconv.Itoa(i))
	}
	if err := e.st.AddKnownQueues(e.ctx, refs); err != nil {
		t.Fatal(err)
	}
	before := commandCalls(t, e.c, "sscan")
	got, err := e.st.KnownQueues(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if calls := commandCalls(t, e.c, "sscan") - before; calls < n/1000 {
		t.Errorf("KnownQueues of %d queues ran %d SSCANs, want at least %d", n, calls, n/1000)
	}
	seen := map[string]bool{}
	for _, r := range got {
		if seen[r.Member()] {
			t.Fatalf("%s listed twice", r.Member())
		}
		seen[r.Member()] = true
	}
	if len(seen) != n {
		t.Fatalf("KnownQueues listed %d queues, want %d", len(seen), n)
	}
}
