package rdb_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/internal/redistest"
)

// The indexed consumer's scripts: dispatch (limits, advance, put back) and
// done (ownership, idempotence, advance), each checked against the whole
// namespace's state.

func (e *env) consumer() rdb.ConsumerKeys { return e.k.Consumer("c") }

func (e *env) dispatch(t *testing.T, l rdb.ConsumerLimits, head int64) (rdb.ConsumerProgress, int) {
	t.Helper()
	var (
		p    rdb.ConsumerProgress
		sent int
		err  error
	)
	e.call(t, func() { p, sent, err = e.st.Dispatch(e.ctx, e.consumer(), l, uint64(max(head, 0)), head >= 0) })
	if err != nil {
		t.Fatalf("Dispatch: %v", err)
	}
	return p, sent
}

func (e *env) mark(t *testing.T, w, pid string, i uint64) (rdb.MarkResult, uint64) {
	t.Helper()
	var (
		res rdb.MarkResult
		p   uint64
		err error
	)
	e.call(t, func() { res, p, err = e.st.MarkDone(e.ctx, e.consumer(), 0, w, pid, strconv.FormatUint(i, 10), i) })
	if err != nil {
		t.Fatalf("MarkDone: %v", err)
	}
	return res, p
}

// consumerTask is the hash of the task of index id, as dispatch writes it.
func consumerTask(id string) hash { return hash{"d": id} }

func TestConsumerDispatchLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		l        rdb.ConsumerLimits
		head     int64
		wantNext uint64
	}{
		{"max processing", rdb.ConsumerLimits{First: 5, MaxProcessing: 3, MaxSearchAhead: 10}, 20, 8},
		{"max search ahead", rdb.ConsumerLimits{First: 5, MaxProcessing: 100, MaxSearchAhead: 3}, 20, 8},
		{"head", rdb.ConsumerLimits{First: 5, MaxProcessing: 100, MaxSearchAhead: 100}, 7, 8},
		{"no job yet", rdb.ConsumerLimits{First: 5, MaxProcessing: 100, MaxSearchAhead: 100}, -1, 5},
		{"head below first", rdb.ConsumerLimits{First: 5, MaxProcessing: 100, MaxSearchAhead: 100}, 3, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := e.consumer()
			l := e.listen(t)
			p, sent := e.dispatch(t, tc.l, tc.head)
			n := int(tc.wantNext - 5)
			if want := (rdb.ConsumerProgress{Processed: 5, Next: tc.wantNext}); p != want || sent != n {
				t.Errorf("Dispatch = %+v, %d; want %+v, %d", p, sent, want, n)
			}
			want := state{c.State: hash{"processed": "5", "next": strconv.FormatUint(tc.wantNext, 10)}}
			var ids list
			for i := 5; i < 5+n; i++ {
				id := strconv.Itoa(i)
				ids = append(ids, id)
				want[c.Queue.Task(id)] = consumerTask(id)
			}
			if n > 0 {
				want[c.Queue.Waiting] = ids
				checkPubs(t, l.collect(t, e), []msg{{c.Queue.WakeChannel[len(e.ns)+1:], strconv.Itoa(n)}})
			}
			e.checkState(t, nil, func(*env) state { return want })
			// Run twice: the limits (or the head) stop a second call.
			before := e.dump(t)
			if p2, sent := e.dispatch(t, tc.l, tc.head); p2 != p || sent != 0 {
				t.Errorf("second Dispatch = %+v, %d; want %+v, 0", p2, sent, p)
			}
			e.checkState(t, before, nil)
		})
	}
}

func TestConsumerMarkDone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.consumer()
	l := rdb.ConsumerLimits{MaxProcessing: 4, MaxSearchAhead: 6}
	e.dispatch(t, l, 100) // 0..3
	got := e.takeFrom(t, c.Queue, "A", 4, false)
	if len(got) != 4 {
		t.Fatalf("took %d, want 4", len(got))
	}
	pid := map[string]string{}
	for _, tk := range got {
		pid[tk.ID] = tk.PID
	}

	// Not the owner, or not this pid: nothing changes.
	before := e.dump(t)
	if res, _ := e.mark(t, "B", pid["1"], 1); res != rdb.MarkLost {
		t.Errorf("mark by another worker = %d, want lost", res)
	}
	if res, _ := e.mark(t, "A", pid["2"], 1); res != rdb.MarkLost {
		t.Errorf("mark with another taking's pid = %d, want lost", res)
	}
	e.checkState(t, before, nil)

	// Out of order: recorded in the done set, the processed index waits.
	if res, p := e.mark(t, "A", pid["2"], 2); res != rdb.MarkRecorded || p != 0 {
		t.Errorf("mark 2 = %d, %d; want recorded, 0", res, p)
	}
	if res, p := e.mark(t, "A", pid["2"], 2); res != rdb.MarkAlready || p != 0 {
		t.Errorf("mark 2 again = %d, %d; want already, 0", res, p)
	}
	if res, p := e.mark(t, "A", pid["0"], 0); res != rdb.MarkRecorded || p != 1 {
		t.Errorf("mark 0 = %d, %d; want recorded, 1", res, p)
	}
	e.checkState(t, nil, func(e *env) state {
		s := state{
			c.State:                  hash{"processed": "1", "next": "4"},
			c.Done:                   set{"2"},
			c.Queue.WorkerQueue("A"): hash{pid["0"]: "0", pid["1"]: "1", pid["2"]: "2", pid["3"]: "3"},
			c.Queue.Holders:          set{"A"},
			c.Queue.Seq:              str("4"),
		}
		for _, id := range []string{"0", "1", "2", "3"} {
			s[c.Queue.Task(id)] = consumerTask(id).started().with("s", "active", "w", "A", "p", pid[id])
		}
		return s
	})
	// In flight: 1 and 3; so a dispatch may send two more (4, 5), and
	// no further than processed + 6.
	if p, sent := e.dispatch(t, l, 100); sent != 2 || p.Next != 6 || p.InFlight() != 4 {
		t.Errorf("Dispatch = %+v (in flight %d), %d; want next 6, 4 in flight, 2 sent", p, p.InFlight(), sent)
	}
	if res, p := e.mark(t, "A", pid["1"], 1); res != rdb.MarkRecorded || p != 3 {
		t.Errorf("mark 1 = %d, %d; want recorded, 3 (over 2)", res, p)
	}
	if res, p := e.mark(t, "A", pid["0"], 0); res != rdb.MarkAlready || p != 3 {
		t.Errorf("mark 0 below processed = %d, %d; want already, 3", res, p)
	}
	// An index never dispatched (the progress rewound by hand).
	e.do(t, "HSET", c.Queue.WorkerQueue("A"), "99", "50")
	before = e.dump(t)
	if res, _ := e.mark(t, "A", "99", 50); res != rdb.MarkUnknown {
		t.Errorf("mark 50 = %d, want unknown", res)
	}
	e.checkState(t, before, nil)

	for _, tc := range []struct {
		i    uint64
		want bool
	}{{0, true}, {2, true}, {3, false}, {4, false}, {50, false}} {
		done, err := e.st.IndexDone(e.ctx, c, 0, tc.i)
		if err != nil || done != tc.want {
			t.Errorf("IndexDone(%d) = %v, %v; want %v", tc.i, done, err, tc.want)
		}
	}
	p, err := e.st.ReadProgress(e.ctx, c, 0)
	if want := (rdb.ConsumerProgress{Processed: 3, Next: 6}); err != nil || p != want {
		t.Errorf("ReadProgress = %+v, %v; want %+v", p, err, want)
	}
}

// The advance over a long run of finished indexes is cut into calls of
// ConsumerStep steps; MarkDone and Dispatch go on until it is done.
func TestConsumerAdvanceBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.consumer()
	n := 2*rdb.ConsumerStep + 500
	e.do(t, "HSET", c.State, "processed", "0", "next", n+1)
	args := []any{c.Done}
	for i := 1; i <= n; i++ {
		args = append(args, i)
	}
	e.do(t, "SADD", args...)
	e.do(t, "HSET", c.Queue.WorkerQueue("A"), "7", "0")
	if res, p := e.mark(t, "A", "7", 0); res != rdb.MarkRecorded || p != uint64(n+1) {
		t.Errorf("mark 0 = %d, %d; want recorded, %d", res, p, n+1)
	}
	if sc := e.do(t, "SCARD", c.Done); sc != int64(0) {
		t.Errorf("done set holds %v, want 0", sc)
	}

	// Dispatch passes over them the same way.
	e.do(t, "HSET", c.State, "processed", "0", "next", n+1)
	args[0] = c.Done
	args = append(args, 0)
	e.do(t, "SADD", args...)
	p, sent := e.dispatch(t, rdb.ConsumerLimits{MaxProcessing: 1, MaxSearchAhead: 1}, int64(n+1))
	if want := (rdb.ConsumerProgress{Processed: uint64(n + 1), Next: uint64(n + 2)}); p != want || sent != 1 {
		t.Errorf("Dispatch = %+v, %d; want %+v, 1", p, sent, want)
	}
}

// The task of the index that holds progress up is put back at the front
// when it is gone (cancelled, or purged from the dead set).
func TestConsumerPutsBackTheProcessedIndex(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.consumer()
	l := rdb.ConsumerLimits{MaxProcessing: 3, MaxSearchAhead: 3}
	e.dispatch(t, l, 100) // 0..2
	if _, err := e.st.Cancel(e.ctx, c.Queue, "0"); err != nil {
		t.Fatal(err)
	}
	e.do(t, "RPUSH", c.Queue.Waiting, "x") // a marker behind
	p, sent := e.dispatch(t, l, 100)
	if p.Next != 3 || sent != 1 {
		t.Errorf("Dispatch = %+v, %d; want next 3, 1 sent (the put back)", p, sent)
	}
	if got := e.do(t, "LINDEX", c.Queue.Waiting, 0); string(got.([]byte)) != "0" {
		t.Errorf("front of the queue = %s, want 0", got)
	}
	// Present: nothing is put back twice.
	before := e.dump(t)
	e.dispatch(t, l, 100)
	e.checkState(t, before, nil)
}

// Indexes near 2^53 keep every digit (Redis would format a Lua number as
// 1e+15).
func TestConsumerLargeIndexes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.consumer()
	first := uint64(rdb.MaxConsumerIndex - 5)
	p, sent := e.dispatch(t, rdb.ConsumerLimits{First: first, MaxProcessing: 2, MaxSearchAhead: 10}, rdb.MaxConsumerIndex)
	if p.Processed != first || p.Next != first+2 || sent != 2 {
		t.Errorf("Dispatch = %+v, %d", p, sent)
	}
	id := strconv.FormatUint(first+1, 10)
	if n := e.do(t, "EXISTS", c.Queue.Task(id)); n != int64(1) {
		t.Errorf("task %s missing", id)
	}
	e.do(t, "HSET", c.Queue.WorkerQueue("A"), "1", id)
	if _, _, err := e.st.MarkDone(e.ctx, c, 0, "A", "1", id, first+1); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.do(t, "SMEMBERS", c.Done).([]any); len(got) != 1 || string(got[0].([]byte)) != id {
		t.Errorf("done set = %s, want [%s]", got, id)
	}
}

// The consumer's scripts declare every key but the task hashes dispatch
// writes and looks at: their indexes are read from the progress hash.
func TestConsumerScriptKeysDeclared(t *testing.T) {
	ctx := context.Background()
	pool := srv.Pool()
	defer pool.Close()
	ns := redistest.Namespace()
	st := rdb.NewStore(pool, ns)
	c := rdb.NewKeys(ns).Consumer("dc")
	a := newKeyAuditor(t, ns)
	l := rdb.ConsumerLimits{MaxProcessing: 2, MaxSearchAhead: 5}
	if _, _, err := st.Dispatch(ctx, c, l, 10, true); err != nil {
		t.Fatal(err)
	}
	if got := undeclared(a.calls()); len(got) != 1 || got[0] != "consumer_dispatch:t" {
		t.Errorf("dispatch: undeclared keys %v, want [consumer_dispatch:t]", got)
	}
	at, err := st.Register(ctx, "W", 60_000, "h", 1, []rdb.QueueRef{c.Queue.Ref})
	if err != nil {
		t.Fatal(err)
	}
	tk, err := st.Take(ctx, c.Queue, rdb.TakeArgs{Worker: "W", Until: at + 50_000, Max: 1})
	if err != nil || len(tk) != 1 {
		t.Fatalf("Take = %v, %v", tk, err)
	}
	a.calls()
	if _, _, err := st.MarkDone(ctx, c, 0, "W", tk[0].PID, tk[0].ID, 0); err != nil {
		t.Fatal(err)
	}
	if got := undeclared(a.calls()); len(got) != 0 {
		t.Errorf("done: undeclared keys %v, want none", got)
	}
}

// IndexDone's two reads are not one atomic step (a pipeline: another
// client's call may run between them). An index done out of order waits
// in the done set until the processed index passes it, in the call that
// removes it from the set: read the processed index first, and that call
// run between the reads, and the index was in neither place (a consumer
// that ran its job again after a crash would process it twice).
func TestIndexDoneAcrossAnAdvance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.consumer()
	e.dispatch(t, rdb.ConsumerLimits{MaxProcessing: 4, MaxSearchAhead: 6}, 100) // 0..3
	pid := map[string]string{}
	for _, tk := range e.takeFrom(t, c.Queue, "A", 4, false) {
		pid[tk.ID] = tk.PID
	}
	if res, p := e.mark(t, "A", pid["1"], 1); res != rdb.MarkRecorded || p != 0 {
		t.Fatalf("mark 1 = %d, %d; want recorded, 0", res, p)
	}
	// Between the two reads, 0 is done: the processed index moves to 2
	// and 1 leaves the done set.
	g := &steppingGetter{g: routed{pool: e.pool, t: t, ns: e.ns}, between: func() {
		if res, p := e.mark(t, "A", pid["0"], 0); res != rdb.MarkRecorded || p != 2 {
			t.Errorf("mark 0 = %d, %d; want recorded, 2", res, p)
		}
	}}
	done, err := rdb.NewStore(g, e.ns).IndexDone(e.ctx, c, 0, 1)
	if err != nil || !done {
		t.Fatalf("IndexDone(1) = %v, %v across the advance; want true", done, err)
	}
	if g.ran != 1 {
		t.Fatalf("the call between the reads ran %d times", g.ran)
	}
}

// steppingGetter hands out connections that run a pipeline's commands one
// by one, and between the first and the second runs between (once).
type steppingGetter struct {
	g       routed
	between func()
	ran     int
}

func (s *steppingGetter) GetContext(ctx context.Context) (redis.Conn, error) {
	return s.g.GetContext(ctx)
}

func (s *steppingGetter) GetContextForTag(ctx context.Context, tag string) (redis.Conn, error) {
	c, err := s.g.GetContextForTag(ctx, tag)
	if err != nil {
		return nil, err
	}
	return &steppingConn{Conn: c, s: s}, nil
}

type sent struct {
	cmd  string
	args []any
}

type steppingConn struct {
	redis.Conn
	s       *steppingGetter
	pending []sent
	replies []any
	errs    []error
}

func (c *steppingConn) Send(cmd string, args ...any) error {
	c.pending = append(c.pending, sent{cmd, args})
	return nil
}

func (c *steppingConn) Flush() error {
	for i, p := range c.pending {
		r, err := c.Conn.Do(p.cmd, p.args...)
		c.replies, c.errs = append(c.replies, r), append(c.errs, err)
		if i == 0 && c.s.ran == 0 && len(c.pending) > 1 {
			c.s.ran++
			c.s.between()
		}
	}
	c.pending = nil
	return nil
}

func (c *steppingConn) Receive() (any, error) {
	r, err := c.replies[0], c.errs[0]
	c.replies, c.errs = c.replies[1:], c.errs[1:]
	return r, err
}

func (c *steppingConn) ReceiveContext(context.Context) (any, error) { return c.Receive() }

func (c *steppingConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

// ReadProgress reads the progress hash and the size of the done set. Read
// in two steps, a MarkDone run between them (it moves the processed index
// over indexes done out of order and takes them out of the done set)
// made a progress that never was: the old processed index with the new,
// smaller done set, that is more jobs in flight than were ever dispatched
// and not done (here 5, past MaxProcessing 3, when there were 3 then 2;
// read in the other order, the count goes negative). Whatever runs between, the reply is the progress
// before or after the call.
func TestReadProgressAcrossAnAdvance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.consumer()
	l := rdb.ConsumerLimits{MaxProcessing: 3, MaxSearchAhead: 6}
	e.dispatch(t, l, 100) // 0..2
	pid := map[string]string{}
	for _, tk := range e.takeFrom(t, c.Queue, "A", 3, false) {
		pid[tk.ID] = tk.PID
	}
	for _, i := range []uint64{1, 2} {
		if res, p := e.mark(t, "A", pid[strconv.FormatUint(i, 10)], i); res != rdb.MarkRecorded || p != 0 {
			t.Fatalf("mark %d = %d, %d; want recorded, 0", i, res, p)
		}
	}
	// 0 is in flight: two more may go (3, 4).
	if p, sent := e.dispatch(t, l, 100); sent != 2 || p.Next != 5 {
		t.Fatalf("Dispatch = %+v, %d; want next 5, 2 sent", p, sent)
	}
	before := rdb.ConsumerProgress{Processed: 0, Next: 5, Finished: 2}
	after := rdb.ConsumerProgress{Processed: 3, Next: 5, Finished: 0}
	if p, err := e.st.ReadProgress(e.ctx, c, 0); err != nil || p != before {
		t.Fatalf("ReadProgress = %+v, %v; want %+v", p, err, before)
	}
	// Between the reads, 0 is done: the processed index moves to 3 and
	// 1, 2 leave the done set.
	g := &steppingGetter{g: routed{pool: e.pool, t: t, ns: e.ns}, between: func() {
		if res, p := e.mark(t, "A", pid["0"], 0); res != rdb.MarkRecorded || p != 3 {
			t.Errorf("mark 0 = %d, %d; want recorded, 3", res, p)
		}
	}}
	p, err := rdb.NewStore(g, e.ns).ReadProgress(e.ctx, c, 0)
	if err != nil {
		t.Fatal(err)
	}
	if g.ran != 1 {
		t.Fatalf("the call between the reads ran %d times", g.ran)
	}
	if p != before && p != after {
		t.Errorf("ReadProgress across the advance = %+v (%d in flight, MaxProcessing 3); want %+v or %+v",
			p, p.InFlight(), before, after)
	}
}
