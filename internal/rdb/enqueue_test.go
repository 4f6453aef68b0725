package rdb_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"
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
			name:     "metadata: stored beside each payload, the same for every task of the call",
			ids:      []string{"t1", "t2"},
			payloads: []string{"pt1", "pt2"},
			args:     func(*env) *rdb.EnqueueArgs { return &rdb.EnqueueArgs{Meta: `{"traceparent":"00-x"}`} },
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t1", "t2"},
					e.q.Task("t1"): fresh("t1").with("mt", `{"traceparent":"00-x"}`),
					e.q.Task("t2"): fresh("t2").with("mt", `{"traceparent":"00-x"}`),
				}
			},
			pubs: []msg{{"wake", "2"}},
		},
		{
			name:     "metadata of a delayed task: stored with it in the scheduled set",
			ids:      []string{"t1"},
			payloads: []string{"pt1"},
			args:     func(*env) *rdb.EnqueueArgs { return &rdb.EnqueueArgs{Meta: "m", DueMillis: 4102444800000} },
			state: func(e *env) state {
				return state{
					e.q.Scheduled:  zset{{"t1", "4102444800000"}},
					e.q.Task("t1"): fresh("t1").with("mt", "m", "s", "scheduled"),
				}
			},
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

// payloadsOf returns n payloads of size bytes each.
func payloadsOf(n, size int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = make([]byte, size)
	}
	return out
}

func TestChunks(t *testing.T) {
	t.Parallel()
	const max = rdb.MaxEnqueueChunkBytes
	half := max / 2
	tests := []struct {
		name     string
		payloads [][]byte
		want     []int
	}{
		{"nothing", nil, nil},
		{"one", payloadsOf(1, 10), []int{1}},
		{"exactly one chunk", payloadsOf(rdb.MaxEnqueueChunk, 10), []int{1000}},
		{"one task over: steps", payloadsOf(rdb.MaxEnqueueChunk+1, 10), []int{250, 500, 750, 1000, 1001}},
		{"1,100 tasks", payloadsOf(1100, 10), []int{250, 500, 750, 1000, 1100}},
		{"bytes: exactly the cap fits", [][]byte{make([]byte, half), make([]byte, half)}, []int{2}},
		{"bytes: one byte over starts a chunk", [][]byte{make([]byte, half), make([]byte, half), {0}}, []int{2, 3}},
		{"bytes: three halves and a byte", payloadsOf(3, half+1), []int{1, 2, 3}},
		{"bytes: a payload over the cap is a chunk of its own",
			[][]byte{{1}, make([]byte, max+1), {2}}, []int{1, 2, 3}},
		{"over the bytes cap: steps, and bytes before count",
			append(payloadsOf(999, 10), make([]byte, max)), []int{250, 500, 750, 999, 1000}},
		{"bytes: a step cut short by the cap",
			append(append(payloadsOf(100, 10), make([]byte, max-500)), payloadsOf(200, 10)...), []int{100, 151, 301}},
	}
	for _, tc := range tests {
		if got := rdb.Chunks(tc.payloads); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Chunks = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A batch past MaxEnqueueChunk goes out as script calls of EnqueueStep tasks,
// in order: each publishes its own wake-up with its count, and the waiting
// list holds every task in the batch's order, behind those already waiting.
// With nothing but payloads, the tasks are written packed (the hashes shared
// by ids that differ in their last 3 characters: t00000..t00999 in lb:t00),
// with no hash of their own; with a per-task option, each gets its hash.
func TestEnqueueBatchSplitsIntoChunks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		a      *rdb.EnqueueArgs
		packed bool
	}{
		{"plain: packed", nil, true},
		{"max attempts: a hash per task", &rdb.EnqueueArgs{MaxAttempts: 3}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.enqueue(t, "head")
			ids := ids("t", 0, 1100)
			ps := make([][]byte, len(ids))
			want := state{e.q.Task("head"): fresh("head")}
			packs := map[string]hash{}
			for i, id := range ids {
				ps[i] = []byte(payload(id))
				if tc.packed {
					key, field := e.q.Packed(id)
					if packs[key] == nil {
						packs[key] = hash{}
						want[key] = packs[key]
					}
					packs[key][field] = payload(id)
				} else {
					want[e.q.Task(id)] = hash{"d": payload(id), "ma": "3"}
				}
			}
			if tc.packed && len(packs) != 2 {
				t.Fatalf("%d packed hashes, want 2", len(packs))
			}
			want[e.q.Waiting] = append(list{"head"}, ids...)
			if got := rdb.Chunks(ps); !reflect.DeepEqual(got, []int{250, 500, 750, 1000, 1100}) {
				t.Fatalf("Chunks = %v, want 5 chunks [250 500 750 1000 1100]", got)
			}
			l := e.listen(t)
			n, _, err := e.st.EnqueueBatch(e.ctx, e.q, ids, ps, tc.a)
			if err != nil || n != len(ids) {
				t.Fatalf("EnqueueBatch = %d, %v; want %d", n, err, len(ids))
			}
			checkPubs(t, l.collect(t, e), []msg{{"wake", "250"}, {"wake", "250"}, {"wake", "250"}, {"wake", "250"}, {"wake", "100"}})
			e.checkState(t, nil, func(*env) state { return want })
			// Taken, each task has its payload (and a packed one, its hash).
			got := e.takeFrom(t, e.q, "W", 1000, false)
			for i, g := range got[1:] {
				if g.ID != ids[i] || string(g.Payload) != payload(ids[i]) || g.PID == "" {
					t.Fatalf("taking %d = %+v", i, g)
				}
			}
		})
	}
}

// The byte cap splits a batch too: three payloads of just over half the cap
// are three script calls, applied in order, each payload intact.
func TestEnqueueBatchSplitsByBytes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := []string{"b1", "b2", "b3"}
	ps := make([][]byte, len(ids))
	for i := range ps {
		ps[i] = []byte(strings.Repeat(string(rune('x'+i)), rdb.MaxEnqueueChunkBytes/2+1))
	}
	if got := rdb.Chunks(ps); !reflect.DeepEqual(got, []int{1, 2, 3}) {
		t.Fatalf("Chunks = %v, want [1 2 3]", got)
	}
	l := e.listen(t)
	n, _, err := e.st.EnqueueBatch(e.ctx, e.q, ids, ps, nil)
	if err != nil || n != 3 {
		t.Fatalf("EnqueueBatch = %d, %v; want 3", n, err)
	}
	checkPubs(t, l.collect(t, e), []msg{{"wake", "1"}, {"wake", "1"}, {"wake", "1"}})
	if got, err := redis.Strings(e.c.Do("LRANGE", e.q.Waiting, 0, -1)); err != nil || !reflect.DeepEqual(got, ids) {
		t.Errorf("waiting = %v, %v; want %v", got, err, ids)
	}
	for i, id := range ids {
		key, field := e.q.Packed(id) // written packed: a plain batch split into steps
		got, err := redis.Bytes(e.c.Do("HGET", key, field))
		if err != nil || string(got) != string(ps[i]) {
			t.Errorf("payload of %s: %d bytes, %v; want its %d bytes", id, len(got), err, len(ps[i]))
		}
	}
}

func TestEnqueueBatchEdges(t *testing.T) {
	t.Parallel()
	t.Run("empty: nothing sent, nothing written", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		l := e.listen(t)
		n, _, err := e.st.EnqueueBatch(e.ctx, e.q, nil, nil, nil)
		if err != nil || n != 0 {
			t.Errorf("EnqueueBatch(nothing) = %d, %v; want 0, nil", n, err)
		}
		checkPubs(t, l.collect(t, e), nil)
		e.checkState(t, nil, func(*env) state { return state{} })
	})
	t.Run("ids and payloads of different lengths: error, nothing written", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		n, _, err := e.st.EnqueueBatch(e.ctx, e.q, ids("t", 0, 1500), payloadsOf(1499, 1), nil)
		if err == nil || n != 0 {
			t.Errorf("EnqueueBatch = %d, %v; want 0 and an error", n, err)
		}
		e.checkState(t, nil, func(*env) state { return state{} })
	})
}

// Per-task unique keys in a batch: a task whose key is held (by a task
// enqueued before, or by an earlier task of the same batch) is left out and
// reported; the others are enqueued in the same step.
func TestEnqueueBatchUniqueKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueueUnique(t, "t0", "k1")
	l := e.listen(t)
	ids := []string{"t1", "t2", "t3", "t4"}
	ps := [][]byte{[]byte("pt1"), []byte("pt2"), []byte("pt3"), []byte("pt4")}
	a := &rdb.EnqueueArgs{UniqueKeys: []string{"k1", "k2", "", "k2"}, UniqueTTL: 60000}
	var (
		n    int
		dups []rdb.Dup
		err  error
	)
	before := e.dump(t)
	e.call(t, func() { n, dups, err = e.st.EnqueueBatch(e.ctx, e.q, ids, ps, a) })
	if err != nil || n != 4 {
		t.Fatalf("EnqueueBatch = %d, %v", n, err)
	}
	if want := []rdb.Dup{{Index: 0, Holder: "t0"}, {Index: 3, Holder: "t2"}}; !reflect.DeepEqual(dups, want) {
		t.Fatalf("dups %+v, want %+v", dups, want)
	}
	checkPubs(t, l.collect(t, e), []msg{{"wake", "2"}})
	e.checkState(t, before, func(e *env) state {
		return state{
			e.q.Waiting:          list{"t0", "t2", "t3"},
			e.q.Task("t0"):       fresh("t0").with("u", uniqueKey(e.q, "k1")),
			uniqueKey(e.q, "k1"): ttl(str("t0"), 60000),
			e.q.Task("t2"):       fresh("t2").with("u", uniqueKey(e.q, "k2")),
			e.q.Task("t3"):       fresh("t3"),
			uniqueKey(e.q, "k2"): ttl(str("t2"), 60000),
		}
	})
	// Every key held: nothing is written, every task is reported.
	before = e.dump(t)
	_, dups, err = e.st.EnqueueBatch(e.ctx, e.q, []string{"t5", "t6"}, ps[:2], &rdb.EnqueueArgs{UniqueKeys: []string{"k2", "k1"}, UniqueTTL: 60000})
	if err != nil || len(dups) != 2 || dups[0] != (rdb.Dup{Index: 0, Holder: "t2"}) || dups[1] != (rdb.Dup{Index: 1, Holder: "t0"}) {
		t.Fatalf("all held: dups %+v, %v", dups, err)
	}
	e.checkState(t, before, nil)
	// Single Enqueue refuses per-task keys (it could not report them).
	if _, err := e.st.Enqueue(e.ctx, e.q, ids[:1], ps[:1], a); err == nil {
		t.Fatal("Enqueue took per-task unique keys")
	}
}

// A batch split into several script calls reports duplicates by their index
// in the whole batch, across the calls.
func TestEnqueueBatchUniqueKeysAcrossChunks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := rdb.MaxEnqueueChunk + 500
	ids := make([]string, n)
	keys := make([]string, n)
	ps := make([][]byte, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("t%05d", i)
		ps[i] = []byte("p")
		keys[i] = fmt.Sprint("k", i%(n-2)) // the last two repeat the first two, in the second chunk
	}
	done, dups, err := e.st.EnqueueBatch(e.ctx, e.q, ids, ps, &rdb.EnqueueArgs{UniqueKeys: keys, UniqueTTL: 60000})
	if err != nil || done != n {
		t.Fatalf("EnqueueBatch = %d, %v", done, err)
	}
	want := []rdb.Dup{{Index: n - 2, Holder: ids[0]}, {Index: n - 1, Holder: ids[1]}}
	if !reflect.DeepEqual(dups, want) {
		t.Fatalf("dups %+v, want %+v", dups, want)
	}
	if l, _ := e.st.Len(e.ctx, e.q); l != n-2 {
		t.Fatalf("queue length %d, want %d", l, n-2)
	}
}
