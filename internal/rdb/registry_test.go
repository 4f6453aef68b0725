package rdb_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
)

func TestRegister(t *testing.T) {
	t.Parallel()
	register := func(t *testing.T, e *env, w string, ttl int64, qs ...rdb.QueueRef) {
		t.Helper()
		if _, err := e.st.Register(e.ctx, w, ttl, "host-"+w, 100, qs); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		seed    func(t *testing.T, e *env)
		w       string
		ttl     int64
		queues  []rdb.QueueRef
		wantErr error
		state   func(e *env) state
	}{
		{
			name:   "new worker: keepalive with TTL, listed, queues known",
			w:      "A",
			ttl:    60000,
			queues: []rdb.QueueRef{rdb.Standalone("emails"), {Tag: "flow", Name: "s1"}},
			state: func(e *env) state {
				return state{
					e.k.Keepalive("A"): ttl(str("RUN"), 60000),
					e.k.Workers():      set{"A"},
					e.k.KnownQueues():  set{"emails", "flow/s1"},
					e.k.WorkerInfo("A"): hash{"host": "host-A", "pid": "4242", "start": "@now", "ttl": "60000",
						"queues": "emails,flow/s1"},
				}
			},
		},
		{
			name: "no queues: none recorded",
			w:    "A",
			ttl:  60000,
			state: func(e *env) state {
				return state{
					e.k.Keepalive("A"):  ttl(str("RUN"), 60000),
					e.k.Workers():       set{"A"},
					e.k.WorkerInfo("A"): hash{"host": "host-A", "pid": "4242", "start": "@now", "ttl": "60000", "queues": ""},
				}
			},
		},
		{
			name:   "second worker joins the first",
			seed:   func(t *testing.T, e *env) { register(t, e, "B", 120000, rdb.Standalone("a")) },
			w:      "A",
			ttl:    60000,
			queues: []rdb.QueueRef{rdb.Standalone("a"), rdb.Standalone("b")},
			state: func(e *env) state {
				return state{
					e.k.Keepalive("A"): ttl(str("RUN"), 60000),
					e.k.Keepalive("B"): ttl(str("RUN"), 120000),
					e.k.Workers():      set{"A", "B"},
					e.k.KnownQueues():  set{"a", "b"},
					e.k.WorkerInfo("A"): hash{"host": "host-A", "pid": "4242", "start": "@now", "ttl": "60000",
						"queues": "a,b"},
					e.k.WorkerInfo("B"): hash{"host": "host-B", "pid": "100", "start": "@seed", "ttl": "120000",
						"queues": "a"},
				}
			},
		},
		{
			name:    "same id again: fails, nothing changed, TTL not extended",
			seed:    func(t *testing.T, e *env) { register(t, e, "A", 60000, rdb.Standalone("a")) },
			w:       "A",
			ttl:     120000,
			queues:  []rdb.QueueRef{rdb.Standalone("b")},
			wantErr: rdb.ErrIDInUse,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			if tc.seed != nil {
				tc.seed(t, e)
			}
			before := e.dump(t)
			var err error
			e.call(t, func() { _, err = e.st.Register(e.ctx, tc.w, tc.ttl, "host-"+tc.w, 4242, tc.queues) })
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("Register: %v", err)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("Register: err = %v, want %v", err, tc.wantErr)
			case tc.wantErr != nil && !strings.Contains(err.Error(), tc.w):
				t.Errorf("Register: err = %v, does not name the worker %s", err, tc.w)
			}
			e.checkState(t, before, tc.state)
		})
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
