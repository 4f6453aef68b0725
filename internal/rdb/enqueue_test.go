package rdb_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
)

// errAny stands for "some error" in tables.
var errAny = errors.New("any error")

func checkErr(t *testing.T, what string, err, want error) {
	t.Helper()
	switch {
	case want == errAny && err == nil:
		t.Errorf("%s: no error, want one", what)
	case want != errAny && !errors.Is(err, want):
		t.Errorf("%s: err = %v, want %v", what, err, want)
	}
}

func TestEnqueue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		seed       func(t *testing.T, e *env)
		ids        []string
		payloads   []string
		args       func(e *env) *rdb.EnqueueArgs
		wantHolder string
		wantErr    error
		state      func(e *env) state
		pubs       []msg
	}{
		{
			name:     "into an empty queue: one wake-up with the count",
			ids:      []string{"t1", "t2"},
			payloads: []string{"pt1", "pt2"},
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t1", "t2"},
					e.q.Task("t1"): fresh("t1"),
					e.q.Task("t2"): fresh("t2"),
				}
			},
			pubs: []msg{{"wake", "2"}},
		},
		{
			name:     "behind waiting tasks",
			seed:     func(t *testing.T, e *env) { e.enqueue(t, "t1") },
			ids:      []string{"t2", "t3", "t4"},
			payloads: []string{"pt2", "pt3", "pt4"},
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t1", "t2", "t3", "t4"},
					e.q.Task("t1"): fresh("t1"),
					e.q.Task("t2"): fresh("t2"),
					e.q.Task("t3"): fresh("t3"),
					e.q.Task("t4"): fresh("t4"),
				}
			},
			pubs: []msg{{"wake", "3"}},
		},
		{
			name:     "payload bytes kept as they are, empty included",
			ids:      []string{"t1", "t2"},
			payloads: []string{"\x00\xff{x}:\n", ""},
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t1", "t2"},
					e.q.Task("t1"): hash{"d": "\x00\xff{x}:\n"},
					e.q.Task("t2"): hash{"d": ""},
				}
			},
			pubs: []msg{{"wake", "2"}},
		},
		{
			name:     "ids and payloads of different lengths: error, nothing written",
			seed:     func(t *testing.T, e *env) { e.enqueue(t, "t1") },
			ids:      []string{"t2", "t3"},
			payloads: []string{"pt2"},
			wantErr:  errAny,
		},
		{
			name:     "per-task overrides: max attempts and timeout on the hash",
			ids:      []string{"t1"},
			payloads: []string{"pt1"},
			args:     func(*env) *rdb.EnqueueArgs { return &rdb.EnqueueArgs{MaxAttempts: 3, TimeoutMs: 1500} },
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t1"},
					e.q.Task("t1"): fresh("t1").with("ma", "3", "to", "1500"),
				}
			},
			pubs: []msg{{"wake", "1"}},
		},
		{
			name:     "unique key free: locked for its TTL, holding the id, named on the hash",
			ids:      []string{"t1"},
			payloads: []string{"pt1"},
			args: func(e *env) *rdb.EnqueueArgs {
				return &rdb.EnqueueArgs{UniqueKey: "k", UniqueTTL: 60000}
			},
			state: func(e *env) state {
				return state{
					e.q.Waiting:         list{"t1"},
					e.q.Task("t1"):      fresh("t1").with("u", uniqueKey(e.q, "k")),
					uniqueKey(e.q, "k"): ttl(str("t1"), 60000),
				}
			},
			pubs: []msg{{"wake", "1"}},
		},
		{
			name:     "unique key held: duplicate, the holder returned, nothing written",
			seed:     func(t *testing.T, e *env) { e.enqueueUnique(t, "t1", "k") },
			ids:      []string{"t2"},
			payloads: []string{"pt2"},
			args: func(e *env) *rdb.EnqueueArgs {
				return &rdb.EnqueueArgs{UniqueKey: "k", UniqueTTL: 90000}
			},
			wantHolder: "t1", wantErr: rdb.ErrDuplicate,
		},
		{
			name:     "run twice (same unique task again): the second is a duplicate of the first",
			seed:     func(t *testing.T, e *env) { e.enqueueUnique(t, "t1", "k") },
			ids:      []string{"t1"},
			payloads: []string{"other"},
			args: func(e *env) *rdb.EnqueueArgs {
				return &rdb.EnqueueArgs{UniqueKey: "k", UniqueTTL: 60000}
			},
			wantHolder: "t1", wantErr: rdb.ErrDuplicate,
		},
		{
			name: "unique key released by the holder's finish: enqueued again",
			seed: func(t *testing.T, e *env) {
				e.enqueueUnique(t, "t1", "k")
				e.take(t, "A", 1)
				e.finish(t, "A", "1", "t1")
			},
			ids:      []string{"t2"},
			payloads: []string{"pt2"},
			args: func(e *env) *rdb.EnqueueArgs {
				return &rdb.EnqueueArgs{UniqueKey: "k", UniqueTTL: 60000}
			},
			state: func(e *env) state {
				return state{
					e.q.Waiting:         list{"t2"},
					e.q.Task("t2"):      fresh("t2").with("u", uniqueKey(e.q, "k")),
					uniqueKey(e.q, "k"): ttl(str("t2"), 60000),
					e.q.Holders:         set{"A"},
					e.q.Seq:             str("1"),
				}
			},
			pubs: []msg{{"wake", "1"}},
		},
		{
			name:     "delayed: scheduled at Redis time + delay, not queued, no wake-up",
			seed:     func(t *testing.T, e *env) { e.enqueue(t, "t0") },
			ids:      []string{"t2", "t1"},
			payloads: []string{"pt2", "pt1"},
			args:     func(*env) *rdb.EnqueueArgs { return &rdb.EnqueueArgs{DelayMillis: 5000} },
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t0"},
					e.q.Task("t0"): fresh("t0"),
					e.q.Task("t1"): fresh("t1").with("s", "scheduled"),
					e.q.Task("t2"): fresh("t2").with("s", "scheduled"),
					// Same score: Redis orders members by name.
					e.q.Scheduled: zset{{"t1", "@now+5000"}, {"t2", "@now+5000"}},
				}
			},
		},
		{
			name:     "due at a given time: scheduled at that time, in due order among others",
			seed:     func(t *testing.T, e *env) { e.enqueueDue(t, far, "t0") },
			ids:      []string{"t1"},
			payloads: []string{"pt1"},
			args:     func(*env) *rdb.EnqueueArgs { return &rdb.EnqueueArgs{DueMillis: 2000000000000} },
			state: func(e *env) state {
				return state{
					e.q.Task("t0"): fresh("t0").with("s", "scheduled"),
					e.q.Task("t1"): fresh("t1").with("s", "scheduled"),
					e.q.Scheduled:  zset{{"t1", "2000000000000"}, {"t0", fmt.Sprint(far)}},
				}
			},
		},
		{
			name:     "delayed, unique, with overrides: everything recorded",
			ids:      []string{"t1"},
			payloads: []string{"pt1"},
			args: func(e *env) *rdb.EnqueueArgs {
				return &rdb.EnqueueArgs{DelayMillis: 60000, UniqueKey: "k", UniqueTTL: 120000,
					MaxAttempts: 1, TimeoutMs: 20}
			},
			state: func(e *env) state {
				return state{
					e.q.Task("t1"): fresh("t1").with("s", "scheduled", "u", uniqueKey(e.q, "k"),
						"ma", "1", "to", "20"),
					e.q.Scheduled:       zset{{"t1", "@now+60000"}},
					uniqueKey(e.q, "k"): ttl(str("t1"), 120000),
				}
			},
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
			l := e.listen(t)
			ps := make([][]byte, len(tc.payloads))
			for i, p := range tc.payloads {
				ps[i] = []byte(p)
			}
			var args *rdb.EnqueueArgs
			if tc.args != nil {
				args = tc.args(e)
			}
			var holder string
			var err error
			e.call(t, func() { holder, err = e.st.Enqueue(e.ctx, e.q, tc.ids, ps, args) })
			pubs := l.collect(t, e)
			checkErr(t, "Enqueue", err, tc.wantErr)
			if holder != tc.wantHolder {
				t.Errorf("Enqueue holder = %q, want %q", holder, tc.wantHolder)
			}
			e.checkState(t, before, tc.state)
			checkPubs(t, pubs, tc.pubs)
		})
	}
}

// The script pushes ids in chunks of 1000 because Lua's unpack cannot take
// more than about 8000 values at once: order must survive the chunk
// boundaries, and a batch past unpack's limit must still work.
func TestEnqueueLargeBatchKeepsOrder(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2500, 10001} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.enqueue(t, "head")
			ids := make([]string, n)
			ps := make([][]byte, n)
			want := state{e.q.Task("head"): fresh("head")}
			for i := range ids {
				ids[i] = fmt.Sprintf("t%05d", i)
				ps[i] = []byte(payload(ids[i]))
				want[e.q.Task(ids[i])] = fresh(ids[i])
			}
			want[e.q.Waiting] = append(list{"head"}, ids...)
			l := e.listen(t)
			if _, err := e.st.Enqueue(e.ctx, e.q, ids, ps, nil); err != nil {
				t.Fatal(err)
			}
			checkPubs(t, l.collect(t, e), []msg{{"wake", fmt.Sprint(n)}})
			e.checkState(t, nil, func(*env) state { return want })
		})
	}
}
