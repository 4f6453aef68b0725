package rdb_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/worqr/worqr-go/internal/rdb"
)

// Every table below seeds Redis, snapshots it, runs one wrapper, then checks
// the wrapper's result, the whole namespace (state: nil means "nothing
// changed") and every message published on the queue's channels (pubs: nil
// means "none").

func TestEnqueue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		seed     func(t *testing.T, e *env)
		ids      []string
		payloads []string
		wantErr  bool
		state    func(e *env) state
		pubs     []msg
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
			wantErr:  true,
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
			err := rdb.Enqueue(e.ctx, e.c, e.q, tc.ids, ps)
			pubs := l.collect(t, e)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Enqueue: err = %v, want error: %v", err, tc.wantErr)
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
			if err := rdb.Enqueue(e.ctx, e.c, e.q, ids, ps); err != nil {
				t.Fatal(err)
			}
			checkPubs(t, l.collect(t, e), []msg{{"wake", fmt.Sprint(n)}})
			e.checkState(t, nil, func(*env) state { return want })
		})
	}
}

// taken is rdb.Taken with a comparable payload.
type taken struct {
	ID, PID, Payload string
	Attempt          int
}

func TestTake(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		seed  func(t *testing.T, e *env)
		w     string
		max   int
		want  []taken
		state func(e *env) state
	}{
		{
			name: "takes at most max from the front, in FIFO order",
			seed: func(t *testing.T, e *env) { e.enqueue(t, "t1", "t2", "t3") },
			w:    "A", max: 2,
			want: []taken{{"t1", "1", "pt1", 1}, {"t2", "2", "pt2", 1}},
			state: func(e *env) state {
				return state{
					e.q.Waiting:          list{"t3"},
					e.q.Task("t1"):       active("t1", "A", "1", "1"),
					e.q.Task("t2"):       active("t2", "A", "2", "1"),
					e.q.Task("t3"):       fresh("t3"),
					e.q.Proc("1"):        list{"t1"},
					e.q.Proc("2"):        list{"t2"},
					e.q.WorkerQueue("A"): set{"1", "2"},
					e.q.Holders:          set{"A"},
					e.q.Seq:              str("2"),
				}
			},
		},
		{
			name: "max larger than the queue takes everything",
			seed: func(t *testing.T, e *env) { e.enqueue(t, "t1", "t2") },
			w:    "A", max: 10,
			want: []taken{{"t1", "1", "pt1", 1}, {"t2", "2", "pt2", 1}},
			state: func(e *env) state {
				return state{
					e.q.Task("t1"):       active("t1", "A", "1", "1"),
					e.q.Task("t2"):       active("t2", "A", "2", "1"),
					e.q.Proc("1"):        list{"t1"},
					e.q.Proc("2"):        list{"t2"},
					e.q.WorkerQueue("A"): set{"1", "2"},
					e.q.Holders:          set{"A"},
					e.q.Seq:              str("2"),
				}
			},
		},
		{
			name:  "empty queue: nothing taken, nothing written",
			w:     "A",
			max:   3,
			want:  []taken{},
			state: func(e *env) state { return state{} },
		},
		{
			name: "missing task hash: id dropped with pid \"\", owned by nobody",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2", "t3")
				e.do(t, "DEL", e.q.Task("t2"))
			},
			w: "A", max: 3,
			want: []taken{{"t1", "1", "pt1", 1}, {"t2", "", "", 0}, {"t3", "3", "pt3", 1}},
			state: func(e *env) state {
				return state{
					e.q.Task("t1"):       active("t1", "A", "1", "1"),
					e.q.Task("t3"):       active("t3", "A", "3", "1"),
					e.q.Proc("1"):        list{"t1"},
					e.q.Proc("3"):        list{"t3"},
					e.q.WorkerQueue("A"): set{"1", "3"},
					e.q.Holders:          set{"A"},
					e.q.Seq:              str("3"),
				}
			},
		},
		{
			name: "only missing hashes: no holding recorded",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.do(t, "DEL", e.q.Task("t1"))
			},
			w: "A", max: 1,
			want:  []taken{{"t1", "", "", 0}},
			state: func(e *env) state { return state{e.q.Seq: str("1")} },
		},
		{
			name: "empty payload is a task, not a missing hash",
			seed: func(t *testing.T, e *env) {
				if err := rdb.Enqueue(e.ctx, e.c, e.q, []string{"t1"}, [][]byte{{}}); err != nil {
					t.Fatal(err)
				}
			},
			w: "A", max: 1,
			want: []taken{{"t1", "1", "", 1}},
			state: func(e *env) state {
				return state{
					e.q.Task("t1"):       hash{"d": "", "s": "active", "n": "1", "w": "A", "p": "1"},
					e.q.Proc("1"):        list{"t1"},
					e.q.WorkerQueue("A"): set{"1"},
					e.q.Holders:          set{"A"},
					e.q.Seq:              str("1"),
				}
			},
		},
		{
			name: "attempt counter grows across takings (given back)",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
				e.giveBack(t, "A", "1", "t1")
			},
			w: "B", max: 1,
			want: []taken{{"t1", "2", "pt1", 2}},
			state: func(e *env) state {
				return state{
					e.q.Task("t1"):       active("t1", "B", "2", "2"),
					e.q.Proc("2"):        list{"t1"},
					e.q.WorkerQueue("B"): set{"2"},
					e.q.Holders:          set{"A", "B"},
					e.q.Seq:              str("2"),
				}
			},
		},
		{
			name: "attempt counter grows across takings (requeued after a crash)",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
				e.requeue(t, true, "A")
				e.take(t, "A", 1)
				e.requeue(t, true, "A")
			},
			w: "B", max: 1,
			want: []taken{{"t1", "3", "pt1", 3}},
			state: func(e *env) state {
				return state{
					e.q.Task("t1"):       active("t1", "B", "3", "3").with("c", "2"),
					e.q.Proc("3"):        list{"t1"},
					e.q.WorkerQueue("B"): set{"3"},
					e.q.Holders:          set{"B"},
					e.q.Seq:              str("3"),
				}
			},
		},
		{
			name: "holder index gets every taking worker",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2")
				e.take(t, "A", 1)
			},
			w: "B", max: 1,
			want: []taken{{"t2", "2", "pt2", 1}},
			state: func(e *env) state {
				return state{
					e.q.Task("t1"):       active("t1", "A", "1", "1"),
					e.q.Task("t2"):       active("t2", "B", "2", "1"),
					e.q.Proc("1"):        list{"t1"},
					e.q.Proc("2"):        list{"t2"},
					e.q.WorkerQueue("A"): set{"1"},
					e.q.WorkerQueue("B"): set{"2"},
					e.q.Holders:          set{"A", "B"},
					e.q.Seq:              str("2"),
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
			res, err := rdb.Take(e.ctx, e.c, e.q, tc.w, tc.max)
			pubs := l.collect(t, e)
			if err != nil {
				t.Fatalf("Take: %v", err)
			}
			got := make([]taken, len(res))
			for i, r := range res {
				got[i] = taken{r.ID, r.PID, string(r.Payload), r.Attempt}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Take = %+v, want %+v", got, tc.want)
			}
			e.checkState(t, before, tc.state)
			checkPubs(t, pubs, nil)
		})
	}
}

func TestFinish(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		seed       func(t *testing.T, e *env)
		w, pid, id string
		want       rdb.Outcome
		wantErr    error
		state      func(e *env) state
	}{
		{
			name: "owner: done, the worker's other takings kept",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2", "t3")
				e.take(t, "A", 2)
			},
			w: "A", pid: "1", id: "t1",
			want: rdb.OutcomeDone,
			state: func(e *env) state {
				return state{
					e.q.Waiting:          list{"t3"},
					e.q.Task("t2"):       active("t2", "A", "2", "1"),
					e.q.Task("t3"):       fresh("t3"),
					e.q.Proc("2"):        list{"t2"},
					e.q.WorkerQueue("A"): set{"2"},
					e.q.Holders:          set{"A"},
					e.q.Seq:              str("2"),
				}
			},
		},
		{
			name: "owner of its last taking: done, the worker's set goes",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
			},
			w: "A", pid: "1", id: "t1",
			want: rdb.OutcomeDone,
			state: func(e *env) state {
				return state{e.q.Holders: set{"A"}, e.q.Seq: str("1")}
			},
		},
		{
			name: "cancel asked while it ran: cancelled",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
				e.cancel(t, "t1")
			},
			w: "A", pid: "1", id: "t1",
			want: rdb.OutcomeCancelled,
			state: func(e *env) state {
				return state{e.q.Holders: set{"A"}, e.q.Seq: str("1")}
			},
		},
		{
			name: "not the owner (another worker's pid): lost, nothing changed",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
			},
			w: "B", pid: "1", id: "t1",
			want: rdb.OutcomeLost, wantErr: rdb.ErrLost,
		},
		{
			name: "not the owner (stale pid, the taking was requeued): lost, nothing changed",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
				e.requeue(t, true, "A")
			},
			w: "A", pid: "1", id: "t1",
			want: rdb.OutcomeLost, wantErr: rdb.ErrLost,
		},
		{
			name: "not the owner (stale pid, the task was taken again by the same worker): lost, nothing changed",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
				e.requeue(t, true, "A")
				e.take(t, "A", 1)
			},
			w: "A", pid: "1", id: "t1",
			want: rdb.OutcomeLost, wantErr: rdb.ErrLost,
		},
		{
			name: "run twice: the second call is lost and changes nothing",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2")
				e.take(t, "A", 2)
				e.finish(t, "A", "1", "t1")
			},
			w: "A", pid: "1", id: "t1",
			want: rdb.OutcomeLost, wantErr: rdb.ErrLost,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			tc.seed(t, e)
			before := e.dump(t)
			l := e.listen(t)
			got, err := rdb.Finish(e.ctx, e.c, e.q, tc.w, tc.pid, tc.id)
			pubs := l.collect(t, e)
			if got != tc.want || !errors.Is(err, tc.wantErr) {
				t.Errorf("Finish = %v, %v; want %v, %v", got, err, tc.want, tc.wantErr)
			}
			e.checkState(t, before, tc.state)
			checkPubs(t, pubs, nil)
		})
	}
}

func TestGiveBack(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		seed       func(t *testing.T, e *env)
		w, pid, id string
		want       rdb.Outcome
		wantErr    error
		state      func(e *env) state
		pubs       []msg
	}{
		{
			name: "owner: back at the front, with a wake-up",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2", "t3")
				e.take(t, "A", 1)
			},
			w: "A", pid: "1", id: "t1",
			want: rdb.OutcomeRequeued,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t1", "t2", "t3"},
					e.q.Task("t1"): queued("t1", "1", ""),
					e.q.Task("t2"): fresh("t2"),
					e.q.Task("t3"): fresh("t3"),
					e.q.Holders:    set{"A"},
					e.q.Seq:        str("1"),
				}
			},
			pubs: []msg{{"wake", "1"}},
		},
		{
			name: "owner: the worker's other takings kept",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2")
				e.take(t, "A", 2)
			},
			w: "A", pid: "2", id: "t2",
			want: rdb.OutcomeRequeued,
			state: func(e *env) state {
				return state{
					e.q.Waiting:          list{"t2"},
					e.q.Task("t1"):       active("t1", "A", "1", "1"),
					e.q.Task("t2"):       queued("t2", "1", ""),
					e.q.Proc("1"):        list{"t1"},
					e.q.WorkerQueue("A"): set{"1"},
					e.q.Holders:          set{"A"},
					e.q.Seq:              str("2"),
				}
			},
			pubs: []msg{{"wake", "1"}},
		},
		{
			name: "cancel asked while it ran: dropped, not requeued",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2")
				e.take(t, "A", 1)
				e.cancel(t, "t1")
			},
			w: "A", pid: "1", id: "t1",
			want: rdb.OutcomeCancelled,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t2"},
					e.q.Task("t2"): fresh("t2"),
					e.q.Holders:    set{"A"},
					e.q.Seq:        str("1"),
				}
			},
		},
		{
			name: "not the owner (another worker's pid): lost, nothing changed",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2")
				e.take(t, "A", 1)
			},
			w: "B", pid: "1", id: "t1",
			want: rdb.OutcomeLost, wantErr: rdb.ErrLost,
		},
		{
			name: "not the owner (stale pid, the taking was requeued): lost, nothing changed",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2")
				e.take(t, "A", 1)
				e.requeue(t, true, "A")
			},
			w: "A", pid: "1", id: "t1",
			want: rdb.OutcomeLost, wantErr: rdb.ErrLost,
		},
		{
			name: "run twice: the second call is lost and pushes nothing",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2")
				e.take(t, "A", 1)
				e.giveBack(t, "A", "1", "t1")
			},
			w: "A", pid: "1", id: "t1",
			want: rdb.OutcomeLost, wantErr: rdb.ErrLost,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			tc.seed(t, e)
			before := e.dump(t)
			l := e.listen(t)
			got, err := rdb.GiveBack(e.ctx, e.c, e.q, tc.w, tc.pid, tc.id)
			pubs := l.collect(t, e)
			if got != tc.want || !errors.Is(err, tc.wantErr) {
				t.Errorf("GiveBack = %v, %v; want %v, %v", got, err, tc.want, tc.wantErr)
			}
			e.checkState(t, before, tc.state)
			checkPubs(t, pubs, tc.pubs)
		})
	}
}

func TestRequeue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		seed          func(t *testing.T, e *env)
		workers       []string
		crashed       bool
		wantRequeued  int
		wantCancelled int
		state         func(e *env) state
		pubs          []msg
	}{
		{
			name: "takings land at the front in taking order, ahead of waiting tasks",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2", "t3", "t4", "t5")
				e.take(t, "A", 1)
				e.take(t, "A", 1)
				e.take(t, "A", 1)
			},
			workers: []string{"A"}, crashed: true,
			wantRequeued: 3,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t1", "t2", "t3", "t4", "t5"},
					e.q.Task("t1"): queued("t1", "1", "1"),
					e.q.Task("t2"): queued("t2", "1", "1"),
					e.q.Task("t3"): queued("t3", "1", "1"),
					e.q.Task("t4"): fresh("t4"),
					e.q.Task("t5"): fresh("t5"),
					e.q.Seq:        str("3"),
				}
			},
			pubs: []msg{{"wake", "3"}},
		},
		{
			name: "pids are ordered as numbers (9 before 10)",
			seed: func(t *testing.T, e *env) {
				e.do(t, "SET", e.q.Seq, 8)
				e.enqueue(t, "t1", "t2", "t3")
				e.take(t, "A", 3)
			},
			workers: []string{"A"}, crashed: true,
			wantRequeued: 3,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t1", "t2", "t3"},
					e.q.Task("t1"): queued("t1", "1", "1"),
					e.q.Task("t2"): queued("t2", "1", "1"),
					e.q.Task("t3"): queued("t3", "1", "1"),
					e.q.Seq:        str("11"),
				}
			},
			pubs: []msg{{"wake", "3"}},
		},
		{
			name: "two dead workers in one call, takings interleaved",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2", "t3", "t4", "t5")
				e.take(t, "A", 1)
				e.take(t, "B", 1)
				e.take(t, "A", 1)
				e.take(t, "B", 1)
			},
			workers: []string{"A", "B"}, crashed: true,
			wantRequeued: 4,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t1", "t2", "t3", "t4", "t5"},
					e.q.Task("t1"): queued("t1", "1", "1"),
					e.q.Task("t2"): queued("t2", "1", "1"),
					e.q.Task("t3"): queued("t3", "1", "1"),
					e.q.Task("t4"): queued("t4", "1", "1"),
					e.q.Task("t5"): fresh("t5"),
					e.q.Seq:        str("4"),
				}
			},
			pubs: []msg{{"wake", "4"}},
		},
		{
			name: "only the named workers: a live worker's takings untouched",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2", "t3")
				e.take(t, "A", 1)
				e.take(t, "C", 1)
			},
			workers: []string{"A"}, crashed: true,
			wantRequeued: 1,
			state: func(e *env) state {
				return state{
					e.q.Waiting:          list{"t1", "t3"},
					e.q.Task("t1"):       queued("t1", "1", "1"),
					e.q.Task("t2"):       active("t2", "C", "2", "1"),
					e.q.Task("t3"):       fresh("t3"),
					e.q.Proc("2"):        list{"t2"},
					e.q.WorkerQueue("C"): set{"2"},
					e.q.Holders:          set{"C"},
					e.q.Seq:              str("2"),
				}
			},
			pubs: []msg{{"wake", "1"}},
		},
		{
			name: "stopped, not crashed: no crash counted",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
			},
			workers: []string{"A"}, crashed: false,
			wantRequeued: 1,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t1"},
					e.q.Task("t1"): queued("t1", "1", ""),
					e.q.Seq:        str("1"),
				}
			},
			pubs: []msg{{"wake", "1"}},
		},
		{
			name: "crash counter adds up over crashes",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
				e.requeue(t, true, "A")
				e.take(t, "B", 1)
			},
			workers: []string{"B"}, crashed: true,
			wantRequeued: 1,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t1"},
					e.q.Task("t1"): queued("t1", "2", "2"),
					e.q.Seq:        str("2"),
				}
			},
			pubs: []msg{{"wake", "1"}},
		},
		{
			name: "cancel asked: dropped, not requeued",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2", "t3")
				e.take(t, "A", 2)
				e.cancel(t, "t1")
			},
			workers: []string{"A"}, crashed: true,
			wantRequeued: 1, wantCancelled: 1,
			state: func(e *env) state {
				return state{
					e.q.Waiting:    list{"t2", "t3"},
					e.q.Task("t2"): queued("t2", "1", "1"),
					e.q.Task("t3"): fresh("t3"),
					e.q.Seq:        str("2"),
				}
			},
			pubs: []msg{{"wake", "1"}},
		},
		{
			name: "everything cancelled: no wake-up",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
				e.cancel(t, "t1")
			},
			workers: []string{"A"}, crashed: true,
			wantCancelled: 1,
			state:         func(e *env) state { return state{e.q.Seq: str("1")} },
		},
		{
			name: "missing task hash: the taking is forgotten, nothing pushed",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
				e.do(t, "DEL", e.q.Task("t1"))
			},
			workers: []string{"A"}, crashed: true,
			state: func(e *env) state { return state{e.q.Seq: str("1")} },
		},
		{
			name:    "worker holding nothing leaves the holder index",
			seed:    func(t *testing.T, e *env) { e.do(t, "SADD", e.q.Holders, "A", "C") },
			workers: []string{"A"}, crashed: true,
			state: func(e *env) state { return state{e.q.Holders: set{"C"}} },
		},
		{
			name: "run twice: the second run finds nothing and changes nothing",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1", "t2", "t3")
				e.take(t, "A", 2)
				e.requeue(t, true, "A")
			},
			workers: []string{"A"}, crashed: true,
		},
		{
			name:    "no workers: nothing to do",
			seed:    func(t *testing.T, e *env) { e.enqueue(t, "t1"); e.take(t, "A", 1) },
			workers: nil, crashed: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			tc.seed(t, e)
			before := e.dump(t)
			l := e.listen(t)
			n, cancelled, err := rdb.Requeue(e.ctx, e.c, e.q, tc.workers, tc.crashed)
			pubs := l.collect(t, e)
			if err != nil {
				t.Fatalf("Requeue: %v", err)
			}
			if n != tc.wantRequeued || cancelled != tc.wantCancelled {
				t.Errorf("Requeue = %d requeued, %d cancelled; want %d, %d", n, cancelled, tc.wantRequeued, tc.wantCancelled)
			}
			e.checkState(t, before, tc.state)
			checkPubs(t, pubs, tc.pubs)
		})
	}
}

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
					e.q.Task("t1"):       active("t1", "A", "1", "1").with("x", "1"),
					e.q.Task("t2"):       fresh("t2"),
					e.q.Proc("1"):        list{"t1"},
					e.q.WorkerQueue("A"): set{"1"},
					e.q.Holders:          set{"A"},
					e.q.Seq:              str("1"),
				}
			},
			pubs: []msg{{"cancel", "t1"}},
		},
		{
			name: "unknown id: no-op",
			seed: func(t *testing.T, e *env) { e.enqueue(t, "t1") },
			id:   "nope",
			want: rdb.CancelNoop,
		},
		{
			name: "finished task: no-op",
			seed: func(t *testing.T, e *env) {
				e.enqueue(t, "t1")
				e.take(t, "A", 1)
				e.finish(t, "A", "1", "t1")
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
			got, err := rdb.Cancel(e.ctx, e.c, e.q, tc.id)
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

func TestRegister(t *testing.T) {
	t.Parallel()
	register := func(t *testing.T, e *env, w string, ttl int64, qs ...rdb.QueueRef) {
		t.Helper()
		if err := rdb.Register(e.ctx, e.c, e.k, w, ttl, qs); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		seed    func(t *testing.T, e *env)
		w       string
		ttl     int64
		queues  []rdb.QueueRef
		wantErr string
		state   func(e *env) state
		// the keepalive's PTTL must be in (minTTL, maxTTL]
		minTTL, maxTTL int64
	}{
		{
			name:   "new worker: keepalive with TTL, listed, queues known",
			w:      "A",
			ttl:    5000,
			queues: []rdb.QueueRef{rdb.Standalone("emails"), {Tag: "flow", Name: "s1"}},
			state: func(e *env) state {
				return state{
					e.k.Keepalive("A"): str("RUN"),
					e.k.Workers():      set{"A"},
					e.k.KnownQueues():  set{"emails", "flow/s1"},
				}
			},
			minTTL: 4000, maxTTL: 5000,
		},
		{
			name: "no queues: none recorded",
			w:    "A",
			ttl:  5000,
			state: func(e *env) state {
				return state{e.k.Keepalive("A"): str("RUN"), e.k.Workers(): set{"A"}}
			},
			minTTL: 4000, maxTTL: 5000,
		},
		{
			name:   "second worker joins the first",
			seed:   func(t *testing.T, e *env) { register(t, e, "B", 60000, rdb.Standalone("a")) },
			w:      "A",
			ttl:    5000,
			queues: []rdb.QueueRef{rdb.Standalone("a"), rdb.Standalone("b")},
			state: func(e *env) state {
				return state{
					e.k.Keepalive("A"): str("RUN"),
					e.k.Keepalive("B"): str("RUN"),
					e.k.Workers():      set{"A", "B"},
					e.k.KnownQueues():  set{"a", "b"},
				}
			},
			minTTL: 4000, maxTTL: 5000,
		},
		{
			name:    "same id again: fails, nothing changed, TTL not extended",
			seed:    func(t *testing.T, e *env) { register(t, e, "A", 5000, rdb.Standalone("a")) },
			w:       "A",
			ttl:     60000,
			queues:  []rdb.QueueRef{rdb.Standalone("b")},
			wantErr: "register A: id already in use",
			minTTL:  0, maxTTL: 5000,
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
			err := rdb.Register(e.ctx, e.c, e.k, tc.w, tc.ttl, tc.queues)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Register: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Register: err = %v, want one containing %q", err, tc.wantErr)
			}
			e.checkState(t, before, tc.state)
			pttl := e.do(t, "PTTL", e.k.Keepalive(tc.w)).(int64)
			if pttl <= tc.minTTL || pttl > tc.maxTTL {
				t.Errorf("keepalive PTTL = %dms, want in (%d, %d]", pttl, tc.minTTL, tc.maxTTL)
			}
		})
	}
}
