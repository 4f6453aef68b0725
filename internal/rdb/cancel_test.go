package rdb_test

import (
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
)

func TestCancel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		seed  func(t *testing.T, e *env)
		id    string
		want  rdb.CancelResult
		state func(e *env) state
		pubs  []msg
	}{
		{
			name: "waiting task: removed, hash gone",
			seed: func(t *testing.T, e *env) { e.enqueue(t, "t1", "t2", "t3") },
			id:   "t2",
			want: rdb.CancelRemoved,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t1", "t3"},
					e.q.Task("t1"): fresh("t1"),
					e.q.Task("t3"): fresh("t3"),
				}
			},
		},
		{
			name: "waiting task: its unique key released",
			seed: func(t *testing.T, e *env) { e.enqueueUnique(t, "t1", "k") },
			id:   "t1",
			want: rdb.CancelRemoved,
			state: func(e *env) state {
				return state{}
			},
		},
		{
			name: "waiting task, retention in the queue's config: kept as cancelled, expiring",
			seed: func(t *testing.T, e *env) {
				e.setCfg(t, e.q, "retention", 60000)
				e.enqueue(t, "t1")
			},
			id:   "t1",
			want: rdb.CancelRemoved,
			state: func(e *env) state {
				return state{
					e.q.Config:     hash{"retention": "60000"},
					e.q.Task("t1"): ttl(fresh("t1").with("s", "cancelled", "ft", "@now"), 60000),
					e.q.Retained:   ttl(zset{{"t1", "@now+60000"}}, 60000),
				}
			},
		},
		{
			name: "given-back task waiting again: removed",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
				e.giveBack(t, "A", "1", "t1")
			},
			id:   "t1",
			want: rdb.CancelRemoved,
			state: func(e *env) state {
				return state{e.q.Holders: set{"A"}, e.q.Seq: str("1")}
			},
		},
		{
			name: "scheduled task: taken out of the scheduled set, ended",
			seed: func(t *testing.T, e *env) {
				e.enqueueDue(t, far, "t1", "t2")
			},
			id:   "t1",
			want: rdb.CancelRemoved,
			state: func(e *env) state {
				return state{
					e.q.Task("t2"): fresh("t2").with("s", "scheduled"),
					e.q.Scheduled:  zset{{"t2", fmt.Sprint(far)}},
				}
			},
		},
		{
			name: "scheduled for a retry, unique, with retention: kept as cancelled, unique key released",
			seed: func(t *testing.T, e *env) {
				e.setCfg(t, e.q, "retention", 60000)
				e.enqueueUnique(t, "t1", "k")
				e.take(t, "A", 1)
				e.endTask(t, 0, rdb.Retry(rdb.KindTask, "A", "1", "t1", 60000, "boom"))
			},
			id:   "t1",
			want: rdb.CancelRemoved,
			state: func(e *env) state {
				return state{
					e.q.Config: hash{"retention": "60000"},
					e.q.Task("t1"): ttl(ran("t1").with("s", "cancelled", "ft", "@now", "n", "1", "e", "boom",
						"u", uniqueKey(e.q, "k")).tried(1, "retry", "A", "boom"), 60000),
					e.q.Retained: ttl(zset{{"t1", "@now+60000"}}, 60000),
					e.q.Holders:  set{"A"},
					e.q.Seq:      str("1"),
				}
			},
		},
		{
			name: "running task: marked, owner told on the cancel channel",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2")
				e.take(t, "A", 1)
			},
			id:   "t1",
			want: rdb.CancelRequested,
			state: func(e *env) state {
				return state{
					e.q.Waiting:          list{"t2"},
					e.q.Task("t1"):       active("t1", "A", "1").with("x", "1"),
					e.q.Task("t2"):       fresh("t2"),
					e.q.WorkerQueue("A"): hash{"1": "t1"},
					e.q.Holders:          set{"A"},
					e.q.Seq:              str("1"),
				}
			},
			pubs: []msg{{"cancel", "t1"}},
		},
		{
			name: "flow run: refused, nothing changed",
			seed: func(t *testing.T, e *env) {
				e.startRun(t, "r1")
			},
			id:   "r1",
			want: rdb.CancelRefused,
		},
		{
			name: "flow child: refused, nothing changed",
			seed: func(t *testing.T, e *env) {
				e.do(t, "HSET", e.q.Task("k1"), "d", "pk1", "pr", "r1")
				e.do(t, "RPUSH", e.q.Waiting, "k1")
			},
			id:   "k1",
			want: rdb.CancelRefused,
		},
		{
			name: "unknown id: no-op",
			seed: func(t *testing.T, e *env) { e.enqueue(t, "t1") },
			id:   "nope",
			want: rdb.CancelNoop,
		},
		{
			name: "task data not a hash: no-op",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.do(t, "SET", e.q.Task("t1"), "garbage")
			},
			id:   "t1",
			want: rdb.CancelNoop,
		},
		{
			name: "finished task kept for the retention: no-op",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
				e.endTask(t, 60000, rdb.Done(rdb.KindTask, "A", "1", "t1", nil))
			},
			id:   "t1",
			want: rdb.CancelNoop,
		},
		{
			name: "dead task: no-op",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
				e.endTask(t, 0, rdb.Dead(rdb.KindTask, "A", "1", "t1", "bad"))
			},
			id:   "t1",
			want: rdb.CancelNoop,
		},
		{
			name: "cancel a running task twice: the second is a no-op",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
				e.cancel(t, "t1")
			},
			id:   "t1",
			want: rdb.CancelNoop,
		},
		{
			name: "cancel a waiting task twice: the second is a no-op",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2")
				e.cancel(t, "t1")
			},
			id:   "t1",
			want: rdb.CancelNoop,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			tc.seed(t, e)
			before := e.dump(t)
			l := e.listen(t)
			var got rdb.CancelResult
			var err error
			e.call(t, func() { got, err = e.st.Cancel(e.ctx, e.q, tc.id) })
			pubs := l.collect(t, e)
			if err != nil {
				t.Fatalf("Cancel: %v", err)
			}
			if got != tc.want {
				t.Errorf("Cancel = %v, want %v", got, tc.want)
			}
			e.checkState(t, before, tc.state)
			checkPubs(t, pubs, tc.pubs)
		})
	}
}

// longList enqueues n tasks t0..t<n-1> in one EnqueueBatch (packed when
// packed, else each with a hash; task t<uniq> holds unique key "k").
func longList(t *testing.T, e *env, n int, packed bool, uniq int) []string {
	t.Helper()
	ids := make([]string, n)
	ps := make([][]byte, n)
	for i := range ids {
		ids[i] = "t" + strconv.Itoa(i)
		ps[i] = []byte(payload(ids[i]))
	}
	var a *rdb.EnqueueArgs
	if !packed {
		keys := make([]string, n)
		keys[uniq] = "k"
		a = &rdb.EnqueueArgs{UniqueKeys: keys, UniqueTTL: 600_000}
	}
	if done, _, err := e.st.EnqueueBatch(e.ctx, e.q, ids, ps, a); err != nil || done != n {
		t.Fatal(done, err)
	}
	return ids
}

// A cancel looks for a waiting task only near the ends of its list, so
// that it never holds Redis for long: near either end the task is removed;
// deep in a long list it is marked where it waits (its unique key freed at
// once), and the take that reaches it hands it out with attempt 0, never
// run, and its end records it as cancelled. Not parallel: it counts the
// server's LREM calls.
func TestCancelDeepInALongList(t *testing.T) {
	for _, packed := range []bool{false, true} {
		t.Run("packed="+strconv.FormatBool(packed), func(t *testing.T) {
			e := newEnv(t)
			const n, mid = 25_000, 12_500
			ids := longList(t, e, n, packed, mid)
			cancel := func(id string) rdb.CancelResult {
				t.Helper()
				r, err := e.st.Cancel(e.ctx, e.q, id)
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			llen := func() int {
				n, _ := redis.Int(e.c.Do("LLEN", e.q.Waiting))
				return n
			}
			// Near the head and near the tail: removed, as before.
			for _, i := range []int{5, n - 5} {
				if r := cancel(ids[i]); r != rdb.CancelRemoved {
					t.Fatalf("cancel of %s: %d, want removed", ids[i], r)
				}
			}
			if got := llen(); got != n-2 {
				t.Fatalf("%d waiting after two cancels near the ends, want %d", got, n-2)
			}
			if !packed {
				// Its crash count is at the limit (a dead worker held it):
				// the mark still wins, it is not buried.
				e.do(t, "HSET", e.q.Task(ids[mid]), "c", 3)
			}
			// Deep: marked, left in the list, no LREM over it.
			lrem := commandCalls(t, e.c, "lrem")
			if r := cancel(ids[mid]); r != rdb.CancelMarked {
				t.Fatalf("cancel of %s: %d, want marked", ids[mid], r)
			}
			if d := commandCalls(t, e.c, "lrem") - lrem; d != 0 {
				t.Fatalf("a cancel deep in the list ran LREM %d times", d)
			}
			if got := llen(); got != n-2 {
				t.Fatalf("%d waiting, want %d: the task stays where it waits", got, n-2)
			}
			h, _ := redis.StringMap(e.c.Do("HGETALL", e.q.Task(ids[mid])))
			if h["x"] != "1" || h["s"] != "cancelled" || h["d"] != payload(ids[mid]) {
				t.Fatalf("task hash %v, want the cancel mark, state cancelled and the payload", h)
			}
			if !packed {
				if n, _ := redis.Int(e.c.Do("EXISTS", e.q.UniquePrefix+"k")); n != 0 {
					t.Fatal("the unique key of a task cancelled deep in the list is still held")
				}
			}
			if r := cancel(ids[mid]); r != rdb.CancelNoop {
				t.Fatalf("second cancel: %d, want nothing to cancel", r)
			}
			// Bring it near the head and take: handed with attempt -1 among
			// the others (attempt 1); its end says cancelled.
			e.do(t, "LTRIM", e.q.Waiting, mid-10, -1)
			got, err := e.st.Take(e.ctx, e.q, rdb.TakeArgs{Worker: "W", Until: e.now(t) + 60_000, Max: 20, MaxCrashes: 3})
			if err != nil || len(got) != 20 {
				t.Fatal(len(got), err)
			}
			var marked *rdb.Taken
			for i := range got {
				g := &got[i]
				switch {
				case g.ID == ids[mid]:
					marked = g
				case g.Attempt != 1 || g.Expired:
					t.Fatalf("%s taken with attempt %d", g.ID, g.Attempt)
				}
			}
			if marked == nil || marked.Attempt != -1 || !marked.Expired || !marked.Cancelled || string(marked.Payload) != payload(ids[mid]) {
				t.Fatalf("the cancelled task taken as %+v, want attempt -1 (cancelled, not run)", marked)
			}
			if end := rdb.NotRun("W", *marked); end.Ask != rdb.AskCancel {
				t.Fatalf("NotRun asks %q, want %q", end.Ask, rdb.AskCancel)
			}
			ended := e.endIn(t, e.q, 0, rdb.NotRun("W", *marked))
			if ended[0].Outcome != rdb.OutcomeCancelled {
				t.Fatalf("its end: %v, want cancelled", ended[0].Outcome)
			}
			if n, _ := redis.Int(e.c.Do("EXISTS", e.q.Task(ids[mid]))); n != 0 {
				t.Fatal("the cancelled task's hash outlived its end (no retention)")
			}
		})
	}
}

// A caller-chosen id whose task was marked cancelled deep in its queue is
// taken until that task leaves the queue, even once its id lock expired:
// an enqueue under it would otherwise write into the marked hash, and the
// new task would end cancelled, never run.
func TestCancelMarkedIDIsTaken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	longList(t, e, 15_000, true, 0)
	idArgs := &rdb.EnqueueArgs{IDLockTTL: 600_000, Digest: "d1"}
	if _, err := e.st.Enqueue(e.ctx, e.q, []string{"order-42"}, [][]byte{[]byte("v1")}, idArgs); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 15_000)
	ps := make([][]byte, len(ids))
	for i := range ids {
		ids[i] = "u" + strconv.Itoa(i)
		ps[i] = []byte("p")
	}
	if _, _, err := e.st.EnqueueBatch(e.ctx, e.q, ids, ps, nil); err != nil {
		t.Fatal(err)
	}
	if r, err := e.st.Cancel(e.ctx, e.q, "order-42"); err != nil || r != rdb.CancelMarked {
		t.Fatalf("cancel: %v %v, want marked", r, err)
	}
	e.do(t, "DEL", e.q.IDPrefix+"order-42") // its lock expired
	_, err := e.st.Enqueue(e.ctx, e.q, []string{"order-42"}, [][]byte{[]byte("v2")}, &rdb.EnqueueArgs{IDLockTTL: 600_000, Digest: "d2"})
	if !errors.Is(err, rdb.ErrIDTaken) {
		t.Fatalf("enqueue under the id of a marked task: %v, want ErrIDTaken", err)
	}
	if h, _ := redis.StringMap(e.c.Do("HGETALL", e.q.Task("order-42"))); h["d"] != "v1" {
		t.Fatalf("the marked task's hash was written: %v", h)
	}
}

// keyedMany enqueues n tasks of key K named prefix0, prefix1, ...: the
// first due now (its key's head), the others with later (nil: due now),
// in chunks of MaxEnqueueChunk. It returns their ids.
func keyedMany(t *testing.T, e *env, prefix string, n int, later *rdb.EnqueueArgs) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = prefix + strconv.Itoa(i)
	}
	if _, err := e.st.EnqueueKey(e.ctx, e.q, "K", ids[:1], [][]byte{[]byte("p")}, nil, nil); err != nil {
		t.Fatal(err)
	}
	for lo := 1; lo < n; lo += rdb.MaxEnqueueChunk {
		hi := min(lo+rdb.MaxEnqueueChunk, n)
		ps := make([][]byte, hi-lo)
		for i := range ps {
			ps[i] = []byte("p")
		}
		if _, err := e.st.EnqueueKey(e.ctx, e.q, "K", ids[lo:hi], ps, nil, later); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// An ordered task waiting deep in its key's long list is marked where it
// waits, as in a queue's list (no search of the whole key list): when it
// becomes its key's head it is taken with attempt -1 and ends cancelled,
// and the key moves on. A marked task at the tail of its key's list is not
// merged into.
func TestCancelDeepInALongKeyList(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 25_001 // the head, then 25,000 behind it
	ids := keyedMany(t, e, "k", n, nil)
	list := e.q.KeyListPrefix + "K"
	if l, _ := redis.Int(e.c.Do("LLEN", list)); l != n-1 {
		t.Fatalf("key list of %d, want %d", l, n-1)
	}
	mid := n / 2
	if r, err := e.st.Cancel(e.ctx, e.q, ids[mid]); err != nil || r != rdb.CancelMarked {
		t.Fatalf("cancel deep in the key list: %v %v, want marked", r, err)
	}
	if l, _ := redis.Int(e.c.Do("LLEN", list)); l != n-1 {
		t.Fatalf("key list of %d after the cancel, want %d: nothing removed", l, n-1)
	}
	// A marked tail is no merge target: the enqueue waits behind it.
	e.setCfg(t, e.q, "merge", "1")
	e.do(t, "HSET", e.q.Task(ids[n-1]), "x", "1")
	if r := e.keyed(t, "K", "late", "q", ""); r.Merged {
		t.Fatalf("merged into %s, marked cancelled", r.ID)
	}
	e.do(t, "HDEL", e.q.Task(ids[n-1]), "x")
	// Bring the marked task to the front of the key's list and end the head.
	e.do(t, "LTRIM", list, mid-1, -1)
	got := e.takeFrom(t, e.q, "W", 1, false)
	if len(got) != 1 || got[0].ID != ids[0] {
		t.Fatalf("took %+v, want the head %s", got, ids[0])
	}
	e.endIn(t, e.q, 0, rdb.Done(rdb.KindTask, "W", got[0].PID, got[0].ID, nil))
	got = e.takeFrom(t, e.q, "W", 1, false)
	if len(got) != 1 || got[0].ID != ids[mid] || got[0].Attempt != -1 || !got[0].Cancelled {
		t.Fatalf("took %+v, want the marked task %s with attempt -1", got, ids[mid])
	}
	if ended := e.endIn(t, e.q, 0, rdb.NotRun("W", got[0])); ended[0].Outcome != rdb.OutcomeCancelled {
		t.Fatalf("its end: %v, want cancelled", ended[0].Outcome)
	}
	got = e.takeFrom(t, e.q, "W", 1, false)
	if len(got) != 1 || got[0].ID != ids[mid+1] || got[0].Attempt != 1 {
		t.Fatalf("took %+v, want %s, the key's next, run", got, ids[mid+1])
	}
}

// A task enqueued for later and marked deep in its key's list goes to the
// queue at once when it becomes its key's head, its state still cancelled
// (not scheduled for its due time, which would hold the key back until
// then), is no merge target while it is the head, and ends cancelled; the
// key then moves on.
func TestCancelDeepInALongKeyListDue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 25_001
	// The head, due now; the rest behind it, due in an hour.
	ids := keyedMany(t, e, "d", n, &rdb.EnqueueArgs{DelayMillis: 3_600_000})
	list := e.q.KeyListPrefix + "K"
	mid := n / 2
	if r, err := e.st.Cancel(e.ctx, e.q, ids[mid]); err != nil || r != rdb.CancelMarked {
		t.Fatalf("cancel deep in the key list: %v %v, want marked", r, err)
	}
	e.do(t, "LTRIM", list, mid-1, mid-1) // the marked one alone behind the head
	got := e.takeFrom(t, e.q, "W", 1, false)
	if len(got) != 1 || got[0].ID != ids[0] {
		t.Fatalf("took %+v, want the head %s", got, ids[0])
	}
	e.endIn(t, e.q, 0, rdb.Done(rdb.KindTask, "W", got[0].PID, got[0].ID, nil))
	if s := e.field(t, ids[mid], "s"); s != "cancelled" {
		t.Fatalf("the marked task promoted to head: state %q, want cancelled", s)
	}
	if od := e.field(t, ids[mid], rdb.FieldKeyDue); od != "" {
		t.Fatalf("the promoted task keeps its list entry's due time %q (a cancel would look for <id>@<due>)", od)
	}
	e.setCfg(t, e.q, "merge", "1")
	if r := e.keyed(t, "K", "late", "q", ""); r.Merged {
		t.Fatalf("merged into %s, the marked head", r.ID)
	}
	got = e.takeFrom(t, e.q, "W", 1, false)
	if len(got) != 1 || got[0].ID != ids[mid] || !got[0].Cancelled {
		t.Fatalf("took %+v, want the marked head %s at once, to be ended cancelled", got, ids[mid])
	}
	if ended := e.endIn(t, e.q, 0, rdb.NotRun("W", got[0])); ended[0].Outcome != rdb.OutcomeCancelled {
		t.Fatalf("its end: %v, want cancelled", ended[0].Outcome)
	}
	got = e.takeFrom(t, e.q, "W", 1, false)
	if len(got) != 1 || got[0].ID != "late" {
		t.Fatalf("took %+v, want late, the key's next", got)
	}
}
